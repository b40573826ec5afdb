"""The tilecraft command, run as a user runs it (a subprocess of the installed command): tune
(real, tiny) with its default log, resume and "already tuned", the verdict beside numpy, one-line
errors before any work, Ctrl-C, help and templates; log summary (error messages), log plot
(title, legend, axes), export."""
import json
import os
import signal
import time

import pytest

import tilecraft.autotune as autotune
from tilecraft import cli
from tilecraft.autotune.tuner import RandomTuner

import autotune_fakes as fk
from cli_run import HERE, one_line_error, popen_tilecraft, run_tilecraft

REAL = os.path.join(HERE, "autotune_real_templates.py")
QUICK = ["--tuner", "random", "--quiet", "--number", "1", "--repeat", "1", "--verify", "0"]


def fake_log(tmp_path, n=20):
    log = tmp_path / "t.jsonl"
    task = autotune.task.create("test/fake_matmul", args=(64, 64, 64), target="llvm")
    for seed in (0, 1):
        RandomTuner(task, seed=seed).tune(n, fk.fake_option(fail_tile_x_one=True),
                                          callbacks=[autotune.callback.log_to_file(log)])
    return log


# -- log summary and plot ---------------------------------------------------------------------

def test_log_summary_shows_error_messages_grouped_and_counted(tmp_path):
    log = fake_log(tmp_path)
    fails = sum(1 for _, r in autotune.record.load_from_file(log) if not r.ok)
    assert fails > 0
    p = run_tilecraft("log", "summary", log, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "test/fake_matmul[64, 64, 64] on llvm" in out
    assert f"{fails} errors" in out
    assert f"COMPILE_HOST x{fails}:" in out and f"x{fails}  fake compile error" in out
    assert "GFLOP/s" in out and "best config" in out and "found at trial" in out


def test_log_plot_one_curve_per_run(tmp_path):
    log = fake_log(tmp_path)
    curves = cli.best_curves(log)
    assert len(curves) == 2 and all(len(c) == 20 for c in curves.values())
    assert all(all(a <= b for a, b in zip(c, c[1:])) for c in curves.values())
    assert all(label.startswith("RandomTuner #") for label in curves)     # the tuner, not a hash
    out = tmp_path / "curve.png"
    p = run_tilecraft("log", "plot", log, "--out", out, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert out.stat().st_size > 1000


def test_log_plot_labels_task_tuner_and_units(tmp_path):
    pytest.importorskip("matplotlib")
    log = fake_log(tmp_path)
    fig = cli.plot_figure(str(log))
    (ax,) = fig.axes
    assert ax.get_title().startswith("test/fake_matmul[64, 64, 64] on llvm")
    assert ax.get_ylim()[0] == 0
    assert "GFLOP/s" in ax.get_ylabel() and "trials" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(cli.best_curves(log))


def test_log_plot_without_matplotlib_names_the_extra(tmp_path, monkeypatch, capsys):
    import sys
    log = fake_log(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # import matplotlib fails
    assert cli.main(["log", "plot", str(log), "--out", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and "tilecraft[plot]" in err and len(err.strip().splitlines()) == 1


def test_log_readers_name_a_tvm_log_in_one_line(tmp_path):
    log = tmp_path / "tvm.log"
    log.write_text(json.dumps({"input": ["llvm -keys=cpu", "dense_nopack.x86", [[1, 64]], {}],
                               "config": {"index": 1, "code_hash": None, "entity": []},
                               "result": [[0.001], 0, 1.0, 1.7e9], "version": 0.2, "tvm_version": "0.14"}) + "\n")
    for args in (["log", "summary", log], ["export", log, "--out-dir", tmp_path / "ops"]):
        p = run_tilecraft(*args, cwd=tmp_path)
        assert p.returncode == 1 and "Traceback" not in p.stderr
        (line,) = p.stderr.strip().splitlines()
        assert "is a TVM log (1 TVM AutoTVM records)" in line and "corrupt" not in line
        assert "tune the operator with `tilecraft tune`" in line


def test_missing_logs_are_one_line_errors(tmp_path):
    for args in (["log", "summary", "nope.jsonl"], ["log", "plot", "nope.jsonl"], ["export", "nope.jsonl"]):
        assert "no such log: nope.jsonl" in one_line_error(run_tilecraft(*args, cwd=tmp_path))


# -- tune: errors before any work -------------------------------------------------------------

@pytest.mark.parametrize("args, expected", [
    (["matmul", "1024"], "template matmul needs the argument(s) N, K (usage: tilecraft tune matmul "
                         "M:int N:int K:int [dtype:str=float32])"),
    (["matmul", "8", "8", "8", "float23"], "unsupported dtype 'float23' (expected one of bool, int8"),
    (["matmul", "8", "8x", "8"], "argument N of template matmul must be int, got '8x'"),
    (["matmul", "8", "8", "8", "float32", "9"], "takes at most 4 argument(s), got 5"),
    (["no_such_template", "1"], "no template 'no_such_template'"),
    (["matmul", "8", "8", "8", "--target", "llvm -mcpu=skylakex"], "LLVM knows no CPU 'skylakex'"),
    (["matmul", "8", "8", "8", "--target", "llvm -mattr=avx2"], "each -mattr entry must be +feature or -feature"),
    (["matmul", "8", "8", "8", "--target", "tpu"], "unknown target kind 'tpu'"),
    (["matmul", "8", "8", "8", "--trials", "0"], "--trials must be at least 1"),
    (["matmul", "8", "8", "8", "--number", "0"], "--number must be an integer from 1 to 1000000, got 0"),
    (["matmul", "8", "8", "8", "--run-timeout", "0"], "--run-timeout must be a number of seconds > 0 and <= 86400, "
                                                      "got 0.0"),
    (["matmul", "8", "8", "8", "--max-timing-s", "-1"], "--max-timing-s must be a number of seconds from 0 to 3600 "
                                                        "(0: off), got -1.0"),
])
def test_tune_bad_input_is_one_line_before_any_work(tmp_path, args, expected):
    line = one_line_error(run_tilecraft("tune", *args, cwd=tmp_path))
    assert line.startswith("tilecraft tune: error: ") and expected in line
    assert not (tmp_path / "tuning_logs").exists()       # nothing was started


@pytest.mark.slow
def test_tune_with_a_tracker_that_stays_away_ends_with_one_line(tmp_path):
    """A device pool that cannot be used stops tuning with one line and status 1 (it was a
    ``ConnectionRefusedError`` traceback); ``--tracker-retry-s`` is how long it is tried."""
    import socket
    key = tmp_path / "pool.key"
    key.write_text("s" * 32)
    key.chmod(0o600)
    with socket.socket() as sock:           # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        p = run_tilecraft("tune", "matmul", "8", "8", "8", "--trials", "2", "--quiet", "--no-verdict",
                          "--tracker", f"127.0.0.1:{port}", "--key", "llvm:nobody", "--key-file", key,
                          "--tracker-retry-s", "0.5", cwd=tmp_path)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith(f"tilecraft tune: error: tracker 127.0.0.1:{port} unreachable for "), line
    assert "(ConnectionRefusedError" in line and "run the same command again to resume" in line, line
    assert line.endswith("(0 trial(s) measured in this run, in tuning_logs/matmul_8_8_8.jsonl)"), line
    line = one_line_error(run_tilecraft("tune", "matmul", "8", "8", "8", "--tracker", f"127.0.0.1:{port}",
                                        "--key", "llvm:nobody", "--key-file", key, "--tracker-retry-s", "-1",
                                        cwd=tmp_path))
    assert line == "tilecraft tune: error: --tracker-retry-s must be a number of seconds from 0 to 86400, got -1.0"


def test_tune_unknown_cpu_suggests_close_names(tmp_path):
    line = one_line_error(run_tilecraft("tune", "matmul", "8", "8", "8", "--target", "llvm -mcpu=skylakex",
                                        cwd=tmp_path))
    assert "did you mean 'skylake'" in line and "Valid CPUs: " in line and "znver3" in line


def test_tune_unwritable_log_is_found_before_any_work(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    line = one_line_error(run_tilecraft("tune", "matmul", "8", "8", "8", "--log", tmp_path / "file" / "t.jsonl",
                                        cwd=tmp_path))
    assert f"cannot write the log {tmp_path / 'file' / 't.jsonl'}" in line


def test_tune_cuda_without_pycuda_or_gpu_is_one_line(tmp_path):
    import importlib.util
    from tilecraft.codegen.cuda_compile import find_nvcc
    from tilecraft.runtime.device import cuda
    if importlib.util.find_spec("pycuda") is not None and cuda(0).exist:
        pytest.skip("this machine has pycuda and a GPU: --target cuda works here")
    line = one_line_error(run_tilecraft("tune", "matmul", "64", "64", "64", "--target", "cuda", cwd=tmp_path))
    if find_nvcc() is None:
        assert "nvcc" in line
    else:
        assert ("pycuda, which is not installed" in line or "no NVIDIA GPU was found" in line) and "--tracker" in line


def test_tune_mistyped_knob_lists_the_knobs(tmp_path):
    (tmp_path / "typo_templates.py").write_text(
        "import tilecraft.autotune as autotune\n"
        "@autotune.template('test/typo')\n"
        "def typo(n: int):\n"
        "    cfg = autotune.get_config()\n"
        "    cfg.define_split('tile_y', n, num_outputs=2)\n"
        "    cfg.define_knob('unroll', [0, 1])\n"
        "    cfg['tile_yy']\n")
    line = one_line_error(run_tilecraft("tune", "test/typo", "16", "--module", "typo_templates.py", cwd=tmp_path))
    assert "no knob 'tile_yy' (did you mean 'tile_y'?)" in line and "tile_y, unroll" in line


def test_tune_help_lists_templates_and_every_default(tmp_path):
    p = run_tilecraft("tune", "--help", cwd=tmp_path)
    assert p.returncode == 0
    out = " ".join(p.stdout.split())
    assert "topi/matmul.llvm (tilecraft tune matmul) args: M:int N:int K:int [dtype:str=float32]" in out
    assert "topi/conv2d_nchw.llvm (tilecraft tune conv2d) args: N:int CI:int" in out
    for text in ("(default: 256)", "(default: 64)", "(default: llvm)", "(default: xgb)",
                 "default: tuning_logs/TEMPLATE_ARGS.jsonl"):
        assert text in out, text
    p = run_tilecraft("templates", cwd=tmp_path)
    assert p.returncode == 0 and "topi/softmax.llvm (tilecraft tune softmax)" in " ".join(p.stdout.split())


def test_every_option_has_help_that_shows_its_default():
    """Every argument of every command (``tilecraft rpc ...`` included) has help text, and every
    option with a default says it in its ``--help``."""
    import argparse
    parser = cli.build_parser()
    todo, seen = [parser], set()
    while todo:
        p = todo.pop()
        seen.add(p.prog)
        formatter = p._get_formatter()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
            elif not isinstance(action, argparse._HelpAction):
                assert action.help, f"{p.prog} {action.dest} has no help text"
                if action.option_strings and action.default not in (None, False):
                    shown = formatter._expand_help(action)
                    assert "default" in shown, f"{p.prog} {action.option_strings[0]}: no default in {shown!r}"
    assert {"tilecraft tune", "tilecraft rpc server", "tilecraft rpc status", "tilecraft rpc keygen"} <= seen


# -- tune: real runs --------------------------------------------------------------------------

@pytest.mark.slow
def test_tune_default_log_resume_and_already_tuned(tmp_path):
    args = ["tune", "test/real_matmul", "16", "--module", REAL, "--trials", "3", "--no-verdict"] + QUICK
    p = run_tilecraft(*args, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    log = os.path.join("tuning_logs", "test_real_matmul_16.jsonl")
    assert f"log: {log} (new)" in p.stdout
    assert len(autotune.record.load_from_file(tmp_path / log)) == 3
    assert f"next: tilecraft export {log}" in p.stdout
    p = run_tilecraft(*args, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f"already tuned: 3 trials in {log}, best " in p.stdout and "GFLOP/s" in p.stdout
    assert len(autotune.record.load_from_file(tmp_path / log)) == 3      # nothing measured again
    args[args.index("--trials") + 1] = "5"
    p = run_tilecraft(*args, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f"resuming: 3 trials in {log} already" in p.stdout
    idx = [inp.config.index for inp, _ in autotune.record.load_from_file(tmp_path / log)]
    assert len(idx) == 5 and len(set(idx)) == 5


def test_tune_says_already_tuned_when_the_log_ends_with_early_stopping_trials(tmp_path):
    import autotune_real_templates  # noqa: F401
    task = autotune.task.create("test/real_matmul", args=(16,), target="llvm")
    log = tmp_path / "t.jsonl"
    first = {}

    def cost(config):         # the first config measured is the best, by far (no real run beats it)
        first.setdefault("index", config.index)
        return 1e-8 if config.index == first["index"] else 1e-3
    option = autotune.measure_option(builder=fk.FakeBuilder(), runner=fk.FakeRunner(cost))
    RandomTuner(task, seed=0).tune(6, option, callbacks=[autotune.callback.log_to_file(log)])
    args = ["tune", "test/real_matmul", "16", "--module", REAL, "--log", log, "--trials", "100", "--no-verdict"]
    p = run_tilecraft(*args, "--early-stopping", "5", *QUICK, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (f"already tuned: 6 trials in {log}, best " in p.stdout
            and "(no better config in the last 5, --early-stopping 5)" in p.stdout), p.stdout
    assert len(autotune.record.load_from_file(log)) == 6
    # with xgb, early stopping waits for the model's first plan (2 x --plan-size trials)
    p = run_tilecraft(*args, "--early-stopping", "5", "--tuner", "xgb", "--plan-size", "4", "--quiet",
                      "--number", "1", "--repeat", "1", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "resuming: 6 trials" in p.stdout and "stopped early" in p.stdout
    tuned = [r for _, r in autotune.record.load_from_file(log) if r.stage != "verify"]
    assert 8 <= len(tuned) <= 10                     # 6 logged + batches up to 8 in all (+ the re-measurements)


@pytest.mark.slow
def test_tune_duplicate_records_do_not_count_toward_trials(tmp_path):
    log = tmp_path / "dup.jsonl"
    args = ["tune", "test/real_matmul", "16", "--module", REAL, "--log", log, "--no-verdict"] + QUICK
    assert run_tilecraft(*args, "--trials", "3", cwd=tmp_path).returncode == 0
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines + lines) + "\n")           # every record twice: 6 records, 3 configs
    p = run_tilecraft(*args, "--trials", "4", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "resuming: 3 trials" in p.stdout
    assert len({inp.config.index for inp, _ in autotune.record.load_from_file(log)}) == 4


@pytest.mark.slow
def test_tune_prints_a_verdict_beside_numpy(tmp_path):
    p = run_tilecraft("tune", "matmul", "32", "32", "32", "float32", "--trials", "2", *QUICK, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    verdict = next(line for line in p.stdout.splitlines() if line.startswith("verdict: "))
    import re
    assert re.match(r"verdict: \d+\.\d\d× numpy \([^)]+\) on this machine, \d+ threads", verdict), verdict
    assert "GFLOP/s for A @ B, both measured now" in verdict
    assert "warning: the tuned operator differs" not in p.stdout
    assert "next: tilecraft export tuning_logs/matmul_32_32_32_float32.jsonl" in p.stdout


@pytest.mark.slow
def test_verdict_checks_the_tuned_operator_against_numpy():
    import tilecraft.topi.matmul  # noqa: F401
    from tilecraft.cli_tune import compare_with_numpy
    task = autotune.task.create("topi/matmul.llvm", args=(48, 32, 40, "float32"), target="llvm")
    m = compare_with_numpy(task, task.config_space.get(task.config_space.valid_index(7)), rounds=2,
                           seconds_each=0.005)
    assert m["max_error"] < 1e-5 and m["tilecraft"] > 0 and m["numpy"] > 0


@pytest.mark.slow
def test_ctrl_c_is_one_line_and_the_log_resumes(tmp_path):
    log = tmp_path / "t.jsonl"
    p = popen_tilecraft("tune", "test/real_matmul", "64", "--module", REAL, "--log", log, "--trials", "400",
                        "--early-stopping", "0", *QUICK, cwd=tmp_path)
    deadline = time.time() + 120
    while time.time() < deadline and (not log.exists() or log.read_text().count("\n") < 2):
        time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, (out, err)
    assert "Traceback" not in err
    (line,) = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert line.startswith("tilecraft tune: interrupted; the ") and f"are in {log}" in line
    n = len(autotune.record.load_from_file(log))
    assert n >= 2


@pytest.mark.slow
def test_export_builds_the_best_config_as_a_library(tmp_path, capsys, rand):
    import numpy as np
    import tilecraft
    import autotune_real_templates  # noqa: F401
    task = autotune.task.create("test/real_matmul", args=(16,), target="llvm")
    log = tmp_path / "t.jsonl"
    option = autotune.measure_option(builder=fk.FakeBuilder(), runner=fk.FakeRunner(lambda c: 1e-3 + c.index * 1e-6))
    RandomTuner(task, seed=0).tune(5, option, callbacks=[autotune.callback.log_to_file(log)])
    out = tmp_path / "ops"
    p = run_tilecraft("export", log, "--out-dir", out, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    (entry,) = json.loads((out / "manifest.json").read_text())
    assert entry["task"] == "test/real_matmul" and entry["args"] == [16]
    mod = tilecraft.runtime.load_module(str(out / entry["library"]))
    a, b = rand((16, 16), low=0.0, high=1.0), rand((16, 16), low=0.0, high=1.0)
    c = np.full((16, 16), np.nan, "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


@pytest.mark.slow
def test_export_uses_the_best_valid_record_and_its_gflops(tmp_path):
    """A stale record (another template version) 100x faster than the rest, and a record with
    an implausible cost: export skips both and writes the best valid one with its GFLOP/s."""
    import autotune_real_templates  # noqa: F401
    task = autotune.task.create("test/real_matmul", args=(16,), target="llvm")
    log = tmp_path / "t.jsonl"
    option = autotune.measure_option(builder=fk.FakeBuilder(), runner=fk.FakeRunner(lambda c: 1e-3 + c.index * 1e-6))
    RandomTuner(task, seed=0).tune(6, option, callbacks=[autotune.callback.log_to_file(log)])
    recs = autotune.record.load_from_file(log)
    inp, res = min(recs, key=lambda r: r[1].mean_cost)
    lines = log.read_text().splitlines()
    stale, absurd = json.loads(lines[0]), json.loads(lines[1])
    stale["config"]["knobs"][0][0] = "tile_rows"
    stale["costs"] = [1e-6]
    absurd["costs"] = [1e-25]
    log.write_text("\n".join(lines + [json.dumps(stale), json.dumps(absurd)]) + "\n")
    out = tmp_path / "ops"
    p = run_tilecraft("export", log, "--out-dir", out, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    (entry,) = json.loads((out / "manifest.json").read_text())
    assert entry["config"]["index"] == inp.config.index
    assert entry["gflops"] == pytest.approx(task.flop / res.mean_cost / 1e9)
    (warning,) = p.stderr.strip().splitlines()
    assert "skipped 2 invalid record(s) of 8" in warning and "1 implausible costs" in warning
    assert "1 not fitting the template now" in warning


@pytest.mark.slow
def test_tune_verifies_the_fastest_configs_and_export_uses_them(tmp_path):
    args = ["tune", "test/real_matmul", "16", "--module", REAL, "--trials", "4", "--no-verdict",
            "--log", "t.jsonl"] + QUICK[:-2] + ["--verify", "2"]
    p = run_tilecraft(*args, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    recs = autotune.record.load_from_file(tmp_path / "t.jsonl")
    stages = [res.stage for _, res in recs]
    assert stages == ["tune"] * 4 + ["verify"] * 2
    verified = {inp.config.index for inp, res in recs if res.stage == "verify"}
    assert "re-measured alone, the 2 fastest" in p.stdout
    best = autotune.record.pick_best(tmp_path / "t.jsonl")
    assert best[0][1].stage == "verify" and best[0][0].config.index in verified


def test_verdict_timing_processes_keep_openblas_threads_from_spinning():
    """An idle numpy process's OpenBLAS threads spun while the tuned operator was timed and
    halved its speed on 2 cores (8.4 vs 4.9 ms): the children get OPENBLAS_THREAD_TIMEOUT=4,
    unless the user set it."""
    import os
    from tilecraft.cli_tune import timing_child_env
    env = timing_child_env("/src", {"PATH": "/bin"})
    assert env["OPENBLAS_THREAD_TIMEOUT"] == "4" and env["PYTHONPATH"] == "/src" and env["PATH"] == "/bin"
    env = timing_child_env("/src", {"OPENBLAS_THREAD_TIMEOUT": "20", "PYTHONPATH": "/x"})
    assert env["OPENBLAS_THREAD_TIMEOUT"] == "20" and env["PYTHONPATH"] == os.pathsep.join(["/src", "/x"])


def test_tune_measures_the_untuned_configuration_first(tmp_path):
    """A fresh `tilecraft tune` measures the template's own untuned configuration first (where it is a
    point of the space), as tune_tasks does: a tuning run never ends slower than no tuning (the
    tensor-core template's 256 random trials on an H100 stayed at 0.52x its untuned fallback)."""
    import glob
    import warnings
    from tilecraft.autotune.model_tuning import fallback_config
    import tilecraft.topi.softmax  # noqa: F401  (registers the template)
    p = run_tilecraft("tune", "softmax", "64", "256", "float32", "--trials", "3", "--no-verdict", *QUICK,
                      cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    (log,) = glob.glob(str(tmp_path / "tuning_logs" / "*.jsonl"))
    records = autotune.record.load_from_file(log)
    task = autotune.task.create("topi/softmax.llvm", args=(64, 256, "float32"), target="llvm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = fallback_config(task)
    assert want is not None and len(records) == 3
    assert records[0][0].config.index == want.index
