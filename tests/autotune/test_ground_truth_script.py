"""bench/ground_truth.py on its 4-config `smoke` space: the GPU driver's pipeline (builders beside
the timing process), resuming from an exported table, and the refusals of a table that does not
belong (another space, other code)."""
import gzip
import importlib.util
import json
import pathlib

import pytest

from tilecraft.autotune.replay import GroundTruth


@pytest.fixture(scope="module")
def gt():
    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "ground_truth.py"
    spec = importlib.util.spec_from_file_location("ground_truth_script", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read_table(path):
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def test_pipelined_run_then_a_resumed_run_makes_a_whole_table(gt, tmp_path, capsys):
    """`run --gpu` builds while it times (pass 1), then pass 2; a second run in a fresh cache takes
    the first table's pass as its own pass 1 (`--resume`) and times only pass 2."""
    one = tmp_path / "one"
    assert gt.main(["run", "--gpu", "smoke", "--passes", "1", "--root", str(one / "cache"),
                    "--out", str(one), "--export"]) == 0
    header, *rows = read_table(one / "smoke.jsonl.gz")
    assert header["configs"] == 4 and not header["partial"] and len(rows) == 4
    assert header["fingerprint"] == gt.template_fingerprint(gt.make_task("smoke"))
    assert all(len(r["passes"]) == 1 and r["cost"] > 0 for r in rows)

    two = tmp_path / "two"
    assert gt.main(["run", "--gpu", "smoke", "--passes", "2", "--root", str(two / "cache"), "--out", str(two),
                    "--export", "--resume", str(one / "smoke.jsonl.gz")]) == 0
    assert "4 configs' timings taken" in capsys.readouterr().out
    header2, *rows2 = read_table(two / "smoke.jsonl.gz")
    assert not header2["partial"] and header2["timing"]["resumed_from"] == ["smoke.jsonl.gz"]
    first = {r["i"]: r["passes"][0] for r in rows}
    for r in rows2:
        assert len(r["passes"]) == 2 and r["passes"][0] == first[r["i"]]
        assert r["spread"] == round(abs(r["passes"][1] - r["passes"][0]) / r["cost"], 4)
    timed = gt.read_rows(str(two / "cache" / "smoke" / "timed.jsonl"))
    assert sorted(r["pass"] for r in timed if "from" not in r) == [1] * 4       # pass 1 was not timed again
    truth = GroundTruth.load(str(two / "smoke.jsonl.gz"))
    assert len(truth) == 4
    # the same table again is not taken twice
    sp = gt.Space("smoke", str(two / "cache"), passes=2)
    assert gt.import_table(sp, str(one / "smoke.jsonl.gz")) == 0


def write_table(path, header, rows):
    with gzip.open(path, "wt") as f:
        for r in [header] + rows:
            f.write(json.dumps(r) + "\n")


@pytest.mark.parametrize("change, message", [
    ({"space": "gemm256"}, "the table is of space 'gemm256', not 'smoke'"),
    ({"fingerprint": "0123456789abcdef"}, r"measured from other code \(template fingerprint 0123456789abcdef"),
    ({"knobs": [["tile_x", "sp", [[-1, 16]]]]}, "the table's knobs differ from the template's now"),
])
def test_resume_refuses_a_table_of_another_space_or_other_code(gt, tmp_path, change, message):
    from tilecraft.autotune.replay import space_knobs

    sp = gt.Space("smoke", str(tmp_path / "cache"), passes=2)
    header = {"ground_truth": 1, "space": "smoke", "knobs": space_knobs(sp.task.config_space),
              "fingerprint": sp.fingerprint(), "measured": ["2026-11-24 14:05", "2026-11-24 14:12"]}
    header.update(change)
    path = tmp_path / "t.jsonl.gz"
    write_table(path, json.loads(json.dumps(header)), [{"i": 0, "cost": 1e-6, "passes": [1e-6], "load": [0.1],
                                                         "others": [0.0]}])
    with pytest.raises(SystemExit, match=message):
        gt.import_table(sp, str(path))


def test_a_table_without_fingerprint_is_taken_with_a_note(gt, tmp_path, capsys):
    from tilecraft.autotune.replay import space_knobs

    sp = gt.Space("smoke", str(tmp_path / "cache"), passes=2)
    header = {"ground_truth": 1, "space": "smoke", "knobs": json.loads(json.dumps(space_knobs(sp.task.config_space))),
              "measured": ["2026-11-24 14:05", "2026-11-24 14:12"]}
    rows = [{"i": 0, "cost": 2e-6, "passes": [2e-6, 3e-6, 4e-6], "load": [0.1, 0.2, 0.3], "others": [0, 0, 0]},
            {"i": 1, "error": "COMPILE_DEVICE", "msg": "nvcc failed"}]
    write_table(tmp_path / "t.jsonl.gz", header, rows)
    assert gt.import_table(sp, str(tmp_path / "t.jsonl.gz")) == 2
    assert "records no template fingerprint" in capsys.readouterr().out
    assert {p: sorted(v) for p, v in sp.timed.items()} == {0: [0, 1], 1: [0]}      # pass 3 is beyond --passes 2
    assert sp.failed == {1} and sp.timed[1][0]["costs"] == [3e-6]
    assert 1 not in sp.unbuilt()                    # a config that failed elsewhere is not built again


def test_a_crashed_timing_process_blames_the_config_it_was_on(gt, tmp_path):
    sp = gt.Space("smoke", str(tmp_path / "cache"), passes=2)
    (pathlib.Path(sp.dir) / "timing_now").write_text("2 1")
    gt.blame_timing_crash(sp, -11)
    assert sp.timed[1][2] == {"i": 2, "pass": 1, "error": "RUNTIME_DEVICE",
                              "msg": "the timing process ended with -11"}
    assert 2 in sp.untimed(0) and 2 not in sp.failed        # a pass-2 crash is that pass's error only


def test_a_run_stopped_by_its_time_limit_goes_on_when_run_again(gt, tmp_path, capsys):
    root, out = str(tmp_path / "cache"), str(tmp_path)
    assert gt.main(["run", "--gpu", "smoke", "--passes", "2", "--root", root, "--out", out, "--export",
                    "--time-limit", "0.001"]) == 1
    said = capsys.readouterr()
    assert "stopped at the time limit" in said.out and "smoke: no configuration timed yet" in said.err
    assert gt.main(["run", "--gpu", "smoke", "--passes", "2", "--root", root, "--out", out, "--export"]) == 0
    header, *rows = read_table(tmp_path / "smoke.jsonl.gz")
    assert not header["partial"] and [len(r["passes"]) for r in rows] == [2] * 4


def test_cpus_are_parsed_and_a_cpu_out_of_reach_is_refused(gt, tmp_path):
    assert gt.parse_cpus("0-3,6,8-9") == {0, 1, 2, 3, 6, 8, 9}
    with pytest.raises(SystemExit, match=r"--cpus 100000: CPUs \[100000\] are not ones this process may run on"):
        gt.main(["run", "--gpu", "smoke", "--cpus", "100000", "--root", str(tmp_path)])


def test_a_timing_process_that_never_times_anything_stops_the_run(gt, tmp_path, capsys, monkeypatch):
    """Three timing processes in a row that end with an error before timing a config (no GPU, a
    broken install) stop the run instead of starting a fourth until the time limit."""
    real = gt.script_cmd

    def broken_timer(args, nice=0):
        if args[0] == "_time":
            return [gt.sys.executable, "-c", "import sys; sys.exit(3)"]
        return real(args, nice)

    monkeypatch.setattr(gt, "script_cmd", broken_timer)
    assert gt.main(["run", "--gpu", "smoke", "--passes", "1", "--root", str(tmp_path), "--time-limit", "120"]) == 0
    out = capsys.readouterr().out
    assert "smoke: the timing process ended with 3 three times without timing a config" in out
    assert "stopped: the timing failed" in out
    assert gt.Space("smoke", str(tmp_path), passes=1).timed == {}     # nothing blamed: none was being timed


def test_build_only_fills_the_cache_and_the_next_run_only_times(gt, tmp_path, capsys):
    """`run --gpu --build-only` builds every config and times none; a run on the same cache then
    times them without building one again (the device script builds the next space this way
    while the GPU times the current one)."""
    import signal
    root = str(tmp_path / "cache")
    before = signal.getsignal(signal.SIGTERM)
    assert gt.main(["run", "--gpu", "smoke", "--build-only", "--root", root]) == 0
    assert signal.getsignal(signal.SIGTERM) is before      # no handler left behind in the calling process
    assert "built smoke: 4/4 (build only)" in capsys.readouterr().out
    sp = gt.Space("smoke", root, passes=1)
    assert len(sp.built) == 4 and not sp.failed and sp.timed == {}
    assert gt.main(["run", "--gpu", "smoke", "--passes", "1", "--root", root, "--out", str(tmp_path), "--export"]) == 0
    assert len(gt.read_rows(str(tmp_path / "cache" / "smoke" / "built.jsonl"))) == 4     # nothing built twice
    header, *rows = read_table(tmp_path / "smoke.jsonl.gz")
    assert not header["partial"] and header["timed_per_pass"] == [4] and len(rows) == 4


def test_build_only_reverse_builds_the_configs_the_device_reaches_last_first(gt, tmp_path, monkeypatch):
    """`--build-only --reverse` (a machine without the GPU prebuilding cubins for the device)
    hands the builders pass 1's order reversed; without it, pass 1's order."""
    seen = []
    real = gt.BuildPool.__init__

    def record(self, sp, env, jobs, todo, hang_s, nice=10):
        seen.append(list(todo))
        real(self, sp, env, jobs, todo, hang_s, nice)

    monkeypatch.setattr(gt.BuildPool, "__init__", record)
    assert gt.main(["run", "--gpu", "smoke", "--build-only", "--reverse", "--root", str(tmp_path / "r")]) == 0
    assert gt.main(["run", "--gpu", "smoke", "--build-only", "--root", str(tmp_path / "f")]) == 0
    order = gt.Space("smoke", str(tmp_path / "f")).order(0)
    assert seen == [order[::-1], order] and order != order[::-1]


def test_a_pass_after_a_resumed_one_follows_the_builders(gt, tmp_path, monkeypatch):
    """With pass 1 taken from a table (`--resume`), pass 2 is timed as the libraries appear (as
    pass 1 is), not after every build: a long rebuild then overlaps the timing."""
    one = tmp_path / "one"
    assert gt.main(["run", "--gpu", "smoke", "--passes", "1", "--root", str(one / "cache"),
                    "--out", str(one), "--export"]) == 0
    real, timers = gt.script_cmd, []

    def record(args, nice=0):
        if args[0] == "_time":
            timers.append(args)
        return real(args, nice)

    monkeypatch.setattr(gt, "script_cmd", record)
    assert gt.main(["run", "--gpu", "smoke", "--passes", "2", "--root", str(tmp_path / "two"), "--out",
                    str(tmp_path), "--export", "--resume", str(one / "smoke.jsonl.gz")]) == 0
    assert timers and all(a[a.index("--pass") + 1] == "1" and "--follow" in a for a in timers)
    header, *rows = read_table(tmp_path / "smoke.jsonl.gz")
    assert header["timed_per_pass"] == [4, 4] and all(len(r["passes"]) == 2 for r in rows)


def test_a_config_timed_in_every_pass_is_not_built_again(gt, tmp_path, capsys):
    """Resumed from a table whose second pass reached two of the four configs (a call cut off
    mid-pass), the next run builds and times only the other two: the builds it saves are the
    device's time (nvcc takes seconds per SGEMM config)."""
    one = tmp_path / "one"
    assert gt.main(["run", "--gpu", "smoke", "--passes", "2", "--root", str(one / "cache"),
                    "--out", str(one), "--export"]) == 0
    header, *rows = read_table(one / "smoke.jsonl.gz")
    for r in rows[:2]:              # cut pass 2 short: two configs timed once only
        r["passes"] = r["passes"][:1]
    header["partial"] = True
    with gzip.open(one / "part.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(x) + "\n" for x in [header, *rows]))
    root = tmp_path / "two"
    assert gt.main(["run", "--gpu", "smoke", "--passes", "2", "--root", str(root), "--out", str(tmp_path),
                    "--export", "--resume", str(one / "part.jsonl.gz")]) == 0
    built = {r["i"] for r in gt.read_rows(str(root / "smoke" / "built.jsonl"))}
    assert built == {r["i"] for r in rows[:2]}
    header, *rows = read_table(tmp_path / "smoke.jsonl.gz")
    assert not header["partial"] and header["timed_per_pass"] == [4, 4]


def test_a_partly_timed_pass_is_exported_and_its_spread_counts_only_twice_timed_configs(gt, tmp_path, capsys):
    root = tmp_path / "cache"
    sp = gt.Space("smoke", str(root), passes=2)
    for k, i in enumerate(sp.valid):
        gt.append_row(str(root / "smoke" / "timed.jsonl"), {"i": i, "pass": 0, "costs": [1e-3], "load": 0.1,
                                                             "others": 0.0, "t": 1.7e9})
        if k < 2:       # pass 2 reached two configs: 10% and 30% slower
            gt.append_row(str(root / "smoke" / "timed.jsonl"), {"i": i, "pass": 1, "costs": [1e-3 * (1.1 + 0.2 * k)],
                                                                 "load": 0.1, "others": 0.0, "t": 1.7e9})
    assert gt.main(["export", "smoke", "--passes", "2", "--root", str(root), "--out", str(tmp_path)]) == 1
    assert "smoke: 2 configs have fewer than 2 timings" in capsys.readouterr().err
    assert gt.main(["export", "smoke", "--passes", "2", "--partial", "--root", str(root), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    header, *rows = read_table(tmp_path / "smoke.jsonl.gz")
    assert header["partial"] and header["timed_per_pass"] == [4, 2]
    assert sorted(len(r["passes"]) for r in rows) == [1, 1, 2, 2]
    # the spreads of the two configs timed twice: 10/1.05 = 9.5%, 30/1.15 = 26.1%; the others' zeros left out
    assert "timed per pass [4, 2]" in out and "spread between passes: median 26.1%, 90th percentile 26.1%" in out


@pytest.mark.slow
def test_the_h100_device_script_runs_its_whole_flow_on_the_smoke_space(gt, tmp_path):
    """bench/ground_truth_h100.sh (the one device call: a table built and timed in 2 passes, the
    next space built beside it, then its pass 2 after a resumed pass 1, the cubin tarball) on the
    CPU smoke space in place of the CUDA ones: every step runs and writes its files."""
    import os
    import subprocess

    root = pathlib.Path(__file__).resolve().parents[2]
    assert gt.main(["run", "--gpu", "smoke", "--passes", "1", "--root", str(tmp_path / "c1"),
                    "--out", str(tmp_path / "t1"), "--export"]) == 0
    env = dict(os.environ, CONV="smoke", SGEMM="smoke", SGEMM_TABLE=str(tmp_path / "t1" / "smoke.jsonl.gz"),
               CONV_TABLE=str(tmp_path / "t1" / "smoke.jsonl.gz"), CACHE=str(tmp_path / "cache"), OUT=str(tmp_path / "out"), MODE="mid", TOTAL="90",
               CONV_LIMIT="60", CPUS=",".join(map(str, sorted(os.sched_getaffinity(0)))),
               PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(["bash", str(root / "bench" / "ground_truth_h100.sh")], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "out"
    # both runs resume the shipped table (here one space in one cache: the second finds it taken)
    assert "4 configs' timings taken" in p.stdout and "0 configs' timings taken" in p.stdout
    header, *rows = read_table(out / "smoke.jsonl.gz")
    assert header["timed_per_pass"] == [4, 4] and len(rows) == 4
    for name in ("cubins_h100.tar.xz", "status.txt", "host_before.txt", "prebuild_smoke.log",
                 "cache_smoke/timed.jsonl.gz", "cache_smoke/meta.json"):
        assert (out / name).exists(), name
    status = (out / "status.txt").read_text()
    assert "total " in status and "of them built by this call's nvcc" in status
