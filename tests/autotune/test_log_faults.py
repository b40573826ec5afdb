"""Logs with invalid records: every reader (load, resume, summary, plot, export,
apply_history_best) skips and counts them with one warning and uses the best *valid* record;
TVM logs are named as such; duplicates count once; a torn last line does not swallow the next
record."""
import json
import warnings

import pytest

import tilecraft.autotune as autotune
from tilecraft import cli
from tilecraft.autotune import record
from tilecraft.autotune.tuner import GridSearchTuner, RandomTuner
from tilecraft.target import Target

import autotune_fakes as fk

FLOP = 2.0 * 64 ** 3


@pytest.fixture
def task():
    return autotune.task.create("test/fake_matmul", args=(64, 64, 64), target="llvm")


def good_log(task, path, n=12, seed=0):
    """``n`` valid records (no errors), and the fastest of them."""
    tuner = RandomTuner(task, seed=seed)
    tuner.tune(n, fk.fake_option(), callbacks=[autotune.callback.log_to_file(path)])
    recs = record.load_from_file(path)
    return recs, min(recs, key=lambda r: r[1].mean_cost)


def poisoned(line: str, mutate) -> str:
    """A copy of a valid record line, 100x faster than it (so it would win if trusted), then
    changed by ``mutate(rec)``."""
    rec = json.loads(line)
    rec["costs"] = [c / 100 for c in rec["costs"]]
    mutate(rec)
    return json.dumps(rec)


def _other_value_of_tile_y(task, rec):
    """A tile_y split the current space does not offer (64 = 5 x 13 is no factorization)."""
    rec["config"]["knobs"][0][2] = [-1, 13]


def _rename_tile_y(rec):
    rec["config"]["knobs"][0][0] = "tile_rows"


FORMAT_FAULTS = {
    "string v": lambda r: r.update(v="1"),
    "float v": lambda r: r.update(v=1.5),
    "bool v": lambda r: r.update(v=True),
    "zero cost": lambda r: r.update(costs=[0]),
    "negative cost": lambda r: r.update(costs=[-1e-3, -1e-3]),
    "absurd cost": lambda r: r.update(costs=[6.4e-20]),     # 33,554,432,000 GFLOP/s-class
    "nan cost": lambda r: r.update(costs=[float("nan")]),
    "no cost": lambda r: r.update(costs=[]),
    "string args": lambda r: r["task"].update(args="256"),
    "string costs": lambda r: r.update(costs="0.001"),
}


def write_faulty_log(task, path):
    """12 valid records followed by one poisoned copy of each kind (format faults, a knob
    value outside the space, a knob of another template version)."""
    recs, best = good_log(task, path)
    base = path.read_text().splitlines()[0]
    lines = path.read_text().splitlines()
    for mutate in FORMAT_FAULTS.values():
        lines.append(poisoned(base, mutate))
    lines.append(poisoned(base, lambda r: _other_value_of_tile_y(task, r)))
    lines.append(poisoned(base, _rename_tile_y))
    path.write_text("\n".join(lines) + "\n")
    return recs, best


def test_each_format_fault_is_rejected_by_decode(task, tmp_path):
    path = tmp_path / "t.jsonl"
    good_log(task, path, n=1)
    line = path.read_text().splitlines()[0]
    record.decode(line)
    for name, mutate in FORMAT_FAULTS.items():
        with pytest.raises(record.RecordError):
            record.decode(poisoned(line, mutate))
            pytest.fail(f"{name} was accepted")


def test_load_skips_format_faults_with_one_counting_warning(task, tmp_path):
    path = tmp_path / "t.jsonl"
    write_faulty_log(task, path)
    with pytest.warns(RuntimeWarning) as w:
        recs = record.load_from_file(path)
    assert len(w) == 1
    msg = str(w[0].message)
    assert f"skipped {len(FORMAT_FAULTS)} invalid record(s) of {12 + len(FORMAT_FAULTS) + 2}" in msg
    for kind in ("bad version", "bad costs", "implausible costs", "bad task arguments"):
        assert kind in msg
    assert len(recs) == 14          # the two that do not fit the template are well-formed


def test_apply_history_best_and_pick_best_use_the_best_valid_record(task, tmp_path):
    path = tmp_path / "t.jsonl"
    _, (best_inp, best_res) = write_faulty_log(task, path)
    with pytest.warns(RuntimeWarning, match="skipped 12 invalid.*2 not fitting the template now"):
        (inp, res), = record.pick_best(path)
    assert inp.config == best_inp.config and res.costs == best_res.costs
    with pytest.warns(RuntimeWarning, match="skipped 10 invalid"):
        ctx = autotune.apply_history_best(path)
    with ctx, Target("llvm"):
        with pytest.warns(UserWarning, match=r"skipped 2 record\(s\).*using the best of the others") as w:
            s, _ = fk.fake_matmul(64, 64, 64)
            fk.fake_matmul(64, 64, 64)
    assert len([x for x in w if "skipped" in str(x.message)]) == 1
    assert ("split", "y", best_inp.config["tile_y"].size[-1]) in s.log


def test_a_stale_best_record_does_not_hide_the_valid_ones(task, tmp_path):
    """The issue's case: one stale record (another template version) is the fastest; 12 valid
    ones exist. Before, apply_history_best fell back to the untuned schedule."""
    path = tmp_path / "t.jsonl"
    _, (best_inp, _) = good_log(task, path)
    lines = path.read_text().splitlines()
    lines.append(poisoned(lines[0], _rename_tile_y))
    path.write_text("\n".join(lines) + "\n")
    with autotune.apply_history_best(path), Target("llvm"):
        with pytest.warns(UserWarning, match="do not fit template"):
            s, _ = fk.fake_matmul(64, 64, 64)
    assert ("split", "y", best_inp.config["tile_y"].size[-1]) in s.log
    assert s.log != [("split", "y", 1), ("split", "x", 1)]      # not the fallback


def test_resume_skips_invalid_records_and_counts_distinct_configs(task, tmp_path):
    path = tmp_path / "t.jsonl"
    recs, (best_inp, best_res) = write_faulty_log(task, path)
    with open(path, "a") as f:                     # every valid record once more
        f.write("\n".join(path.read_text().splitlines()[:12]) + "\n")
    tuner = GridSearchTuner(task)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        done = tuner.load_history(record.load_from_file(path))
    assert done == 12
    assert len(tuner.visited) == 12
    assert tuner.best_flops == pytest.approx(FLOP / best_res.mean_cost)
    msgs = [str(x.message) for x in w]
    assert any("2 record(s) of task test/fake_matmul do not fit" in m for m in msgs), msgs


def test_summary_and_plot_skip_invalid_records(task, tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    _, (best_inp, best_res) = write_faulty_log(task, path)
    with pytest.warns(RuntimeWarning) as w:
        (key, s), = record.summarize(path).items()
    assert len(w) == 1
    assert "2 not fitting the template now" in str(w[0].message)
    assert s["records"] == 12 and s["configs"] == 12
    assert s["best_cost"] == pytest.approx(best_res.mean_cost)
    with pytest.warns(RuntimeWarning, match="skipped 12 invalid"):
        curves = cli.best_curves(path)
    (curve,) = curves.values()
    assert len(curve) == 12 and curve[-1] == pytest.approx(FLOP / best_res.mean_cost / 1e9)


def test_a_tvm_log_is_named_as_one(tmp_path):
    path = tmp_path / "tvm.log"
    lines = [json.dumps({"input": ["llvm -keys=cpu", "dense_nopack.x86", [["TENSOR", [1, 64], "float32"]], {}],
                         "config": {"index": i, "code_hash": None, "entity": [["tile_y", "sp", [-1, 1]]]},
                         "result": [[0.001], 0, 1.0, 1700000000.0], "version": 0.2, "tvm_version": "0.14.0"})
             for i in range(3)]
    path.write_text("\n".join(lines) + "\n")
    with pytest.warns(RuntimeWarning, match=r"is a TVM log \(3 TVM AutoTVM records\), not a tilecraft log: "
                                            r"tilecraft cannot apply TVM's records") as w:
        assert record.load_from_file(path) == []
    assert len(w) == 1 and "corrupt" not in str(w[0].message)
    ansor = tmp_path / "ansor.json"
    ansor.write_text(json.dumps({"i": [["key", "llvm"], [[]]], "r": [[0.001], 0, 1.0, 1.0], "v": "v0.6"}) + "\n")
    with pytest.warns(RuntimeWarning, match=r"is a TVM log \(1 TVM auto-scheduler record"):
        record.load_from_file(ansor)


def test_a_torn_last_line_does_not_swallow_the_next_record(task, tmp_path):
    path = tmp_path / "t.jsonl"
    good_log(task, path, n=6)
    text = path.read_text()
    path.write_text(text[: len(text) - 40])          # killed in the middle of the last record
    tuner = GridSearchTuner(task)
    with pytest.warns(RuntimeWarning, match="1 not JSON"):
        assert tuner.load_history(record.load_from_file(path)) == 5
    tuner.tune(4, fk.fake_option(), callbacks=[autotune.callback.log_to_file(path)])
    with pytest.warns(RuntimeWarning, match=r"skipped 1 invalid record\(s\) of 10"):
        assert len(record.load_from_file(path)) == 9
    with pytest.warns(RuntimeWarning, match="1 not JSON"):
        first = record.load_from_file(path)[:1]
    record.save_to_file(first, path)             # the log ends with a newline now: no blank line
    assert "\n\n" not in path.read_text()
