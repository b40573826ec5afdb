"""Tuning logs: round trip, corrupt lines, pick_best, apply_history_best, fallback notice."""
import json
import re
import warnings

import pytest

import tilecraft.autotune as autotune
from tilecraft.autotune import record
from tilecraft.autotune.dispatch import fallback_context
from tilecraft.autotune.tuner import GridSearchTuner, RandomTuner
from tilecraft.target import Target

import autotune_fakes as fk


@pytest.fixture
def task():
    return autotune.task.create("test/fake_matmul", args=(64, 64, 64), target="llvm")


def tune_to_log(task, path, n=24, seed=0, option=None):
    tuner = RandomTuner(task, seed=seed)
    tuner.tune(n_trial=n, measure_option=option or fk.fake_option(fail_tile_x_one=True),
               callbacks=[autotune.callback.log_to_file(path)])
    return tuner


def test_log_round_trips(task, tmp_path):
    log = tmp_path / "t.jsonl"
    tuner = tune_to_log(task, log)
    recs = record.load_from_file(log)
    assert len(recs) == 24
    rec = json.loads(log.read_text().splitlines()[0])
    for key in ("v", "tilecraft", "target", "device", "task", "config", "costs", "error", "error_msg",
                "all_cost", "build_time", "timestamp"):
        assert key in rec
    for inp, res in recs:
        assert inp.task.workload == task.workload and str(inp.target) == "llvm"
        cfg = task.config_space.get(inp.config.index)
        assert cfg == inp.config
        assert record.decode(record.encode(inp, res)) [1] == res
    assert any(r.error_no == autotune.MeasureErrorNo.COMPILE_HOST and r.error_msg for _, r in recs)


def test_corrupt_and_truncated_lines_are_skipped_with_one_warning(task, tmp_path):
    log = tmp_path / "t.jsonl"
    tune_to_log(task, log, n=6)
    lines = log.read_text().splitlines()
    lines.insert(2, "{not json")
    lines.insert(4, json.dumps({"v": 99, "what": "future"}))
    lines.append(lines[0][: len(lines[0]) // 2])   # a run killed mid-write
    log.write_text("\n".join(lines))
    with pytest.warns(RuntimeWarning, match=r"skipped 3 invalid record\(s\) of 9: 2 not JSON.*1 newer format") as w:
        recs = record.load_from_file(log)
    assert len(w) == 1
    assert len(recs) == 6


def test_pick_best_and_apply_history_best(task, tmp_path):
    log = tmp_path / "t.jsonl"
    tuner = tune_to_log(task, log, n=30)
    best = record.pick_best(log, tmp_path / "best.jsonl")
    assert len(best) == 1
    assert best[0][0].config == tuner.best_config
    assert len(record.load_from_file(tmp_path / "best.jsonl")) == 1
    with autotune.apply_history_best(log):
        with Target("llvm"):
            s, _ = fk.fake_matmul(64, 64, 64)
    yi = tuner.best_config["tile_y"].size[-1]
    assert ("split", "y", yi) in s.log


def test_apply_history_best_announces_fallback_once(task, tmp_path):
    log = tmp_path / "t.jsonl"
    tune_to_log(task, log, n=4)
    fallback_context().memory.clear()
    with autotune.apply_history_best(log):
        with Target("llvm"):
            with pytest.warns(UserWarning, match="no tuned configuration for workload") as w:
                s, _ = fk.fake_matmul(32, 32, 32)
                s2, _ = fk.fake_matmul(32, 32, 32)
    assert len([x for x in w if "no tuned configuration" in str(x.message)]) == 1
    assert s.log == [("split", "y", 1), ("split", "x", 1)]   # the fallback does not split


def test_apply_history_best_matches_target_kind(task, tmp_path):
    log = tmp_path / "t.jsonl"
    tuner = tune_to_log(task, log, n=10)
    with autotune.apply_history_best(str(log)) as ctx:
        assert ctx.query(Target("llvm -mcpu=skylake"), task.workload) == tuner.best_config
        assert ctx._query_inside(Target("cuda"), task.workload) is None


def test_resume_from_log_skips_measured_configs(task, tmp_path):
    log = tmp_path / "t.jsonl"
    tune_to_log(task, log, n=20, option=fk.fake_option())
    measured = {inp.config.index for inp, _ in record.load_from_file(log)}
    tuner = GridSearchTuner(task)
    assert tuner.load_history(record.load_from_file(log)) == 20
    option = fk.fake_option()
    tuner.tune(n_trial=40, measure_option=option, callbacks=[autotune.callback.log_to_file(log)])
    assert not set(option["runner"].ran) & measured
    assert len(record.load_from_file(log)) == 60


def test_progress_bar_shows_trials_best_and_errors(task, tmp_path):
    import io
    out = io.StringIO()
    bar = autotune.callback.progress_bar(12, file=out)
    GridSearchTuner(task).tune(n_trial=12, measure_option=fk.fake_option(fail_tile_x_one=True), callbacks=[bar])
    text = out.getvalue()
    assert "12/12" in text and "GFLOP/s" in text and "errors" in text


def test_measure_option_rejects_objects_without_the_interface():
    with pytest.raises(TypeError, match="lacks"):
        autotune.measure_option(builder=fk.FakeBuilder(), runner=object())


def test_summary_counts_errors(task, tmp_path):
    log = tmp_path / "t.jsonl"
    tune_to_log(task, log, n=24)
    (key, s), = record.summarize(log).items()
    assert s["trials"] == 24 and s["best"] is not None
    assert sum(s["errors"].values()) == sum(1 for _, r in record.load_from_file(log) if not r.ok)


def _rename_knob(log, old, new):
    """The log as an older template version would have written it (a knob with another name)."""
    lines = []
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        rec["config"]["knobs"] = [[new if k == old else k, t, v] for k, t, v in rec["config"]["knobs"]]
        lines.append(json.dumps(rec))
    log.write_text("\n".join(lines) + "\n")


def test_records_of_an_older_template_fall_back_with_a_warning(task, tmp_path):
    log = tmp_path / "t.jsonl"
    tune_to_log(task, log, n=10, option=fk.fake_option())
    _rename_knob(log, "tile_y", "tile_rows")
    with autotune.apply_history_best(log):
        with Target("llvm"):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                s, _ = fk.fake_matmul(64, 64, 64)
                fk.fake_matmul(64, 64, 64)
    (skipped,) = [str(x.message) for x in w if "do not fit" in str(x.message)]
    assert re.search(r"skipped 10 record\(s\) of workload .* do not fit template 'test/fake_matmul' now "
                     r".*'tile_rows'.*no other record fits", skipped), skipped
    assert len([x for x in w if "no tuned configuration for workload" in str(x.message)]) == 1
    assert s.log == [("split", "y", 1), ("split", "x", 1)]   # the fallback schedule
    # resuming from such a log measures everything again, and says why
    tuner = GridSearchTuner(task)
    with pytest.warns(UserWarning, match=r"10 record\(s\) of task test/fake_matmul do not fit"):
        assert tuner.load_history(record.load_from_file(log)) == 0
    assert not tuner.visited
