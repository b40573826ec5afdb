"""The measurement path on the real compiler: isolation of misbehaving candidates, correctness
checks against the naive schedule, SIGKILL + resume, loop-nest features."""
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tilecraft.autotune as autotune
from tilecraft.autotune import MeasureErrorNo as E
from tilecraft.autotune.tuner import GridSearchTuner


HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
def test_real_tuning_records_segfault_hang_and_wrong_answer(tmp_path):
    import autotune_real_templates  # noqa: F401

    task = autotune.task.create("test/real_misbehaving_vadd", args=(64,), target="llvm")
    log = tmp_path / "bad.jsonl"
    option = autotune.measure_option(builder=autotune.LocalBuilder(n_parallel=2, timeout=20),
                                     runner=autotune.LocalRunner(timeout=2, number=1, repeat=1))
    tuner = GridSearchTuner(task)
    tuner.tune(len(task.config_space), option, callbacks=[autotune.callback.log_to_file(log)])
    got = {}
    for inp, res in autotune.record.load_from_file(log):
        got.setdefault(inp.config["behaviour"].val, set()).add(res.error_no)
    assert got == {"ok": {E.NO_ERROR}, "segfault": {E.RUNTIME_DEVICE}, "hang": {E.RUN_TIMEOUT},
                   "wrong": {E.WRONG_ANSWER}}
    assert tuner.best_config["behaviour"].val == "ok"


@pytest.mark.slow
def test_sigkill_loses_no_record_and_resume_skips_measured(tmp_path):
    log = tmp_path / "run.jsonl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, os.path.join(HERE, "autotune_tune_script.py"), str(log), "200", "1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 90
    while time.time() < deadline:
        if log.exists() and len(log.read_text().splitlines()) >= 6:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)   # the tuner and its workers, as a crash would
    proc.wait()
    lines = log.read_text().splitlines()
    assert len(lines) >= 6
    first = autotune.record.load_from_file(log)
    assert len(first) >= len(lines) - 1          # at most a line being written is lost
    before = [inp.config.index for inp, _ in first]
    done = subprocess.run([sys.executable, os.path.join(HERE, "autotune_tune_script.py"), str(log), "8", "2"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    after = [inp.config.index for inp, _ in autotune.record.load_from_file(log)]
    assert after[: len(before)] == before
    new = after[len(before):]
    assert len(new) == 8 and not set(new) & set(before)


def test_loop_features_have_fixed_length_and_differ_between_configs():
    import autotune_real_templates  # noqa: F401
    from tilecraft.autotune import loop_features

    task = autotune.task.create("test/real_matmul", args=(64,), target="llvm")
    space = task.config_space
    for ft in ("itervar", "curve"):
        feats = [loop_features.extract(task, space.get(i), ft) for i in range(0, len(space), 7)]
        assert {len(f) for f in feats} == {loop_features.feature_length(ft)}
        assert len({f.tobytes() for f in feats}) > len(feats) // 2
        assert all(np.all(np.isfinite(f)) for f in feats)


@pytest.mark.slow
def test_xgb_tuner_with_itervar_features_on_real_task():
    import autotune_real_templates  # noqa: F401
    import autotune_fakes as fk

    task = autotune.task.create("test/real_matmul", args=(64,), target="llvm")

    def cost(cfg):   # a stand-in measurement: bigger inner x tiles and vectorizing are better
        return 1e-3 / (cfg["tile_x"].size[-1] * (2 if cfg["ann"].anns[-1] == "vec" else 1))

    option = autotune.measure_option(builder=fk.FakeBuilder(), runner=fk.FakeRunner(cost))
    tuner = autotune.tuner.XGBTuner(task, plan_size=16, feature_type="itervar", seed=0)
    tuner.tune(48, option)
    assert tuner.best_config["tile_x"].size[-1] >= 16


def test_loop_features_from_worker_processes_match_in_process_ones():
    import autotune_real_templates  # noqa: F401
    from tilecraft.autotune.features import PARALLEL_MIN_CONFIGS, CachedExtractor

    task = autotune.task.create("test/real_matmul", args=(32,), target="llvm")
    idx = np.arange(len(task.config_space))
    assert len(idx) >= PARALLEL_MIN_CONFIGS      # else the workers would not be used
    serial = CachedExtractor(task, "itervar")
    serial._workers = 1
    pooled = CachedExtractor(task, "itervar")
    pooled._workers = 2
    try:
        got = pooled(idx)
        assert pooled._executor is not None and pooled._workers == 2   # the pool did the work
    finally:
        pooled.close()
    want = serial(idx)
    np.testing.assert_array_equal(got, want)
    assert np.isfinite(want).all()


UNGUARDED_SCRIPT = '''
import sys
import tilecraft.autotune as autotune
from tilecraft import te

SCALE = 2.0          # a global of the script, which the template needs in the workers

def scaled(x):
    return x * SCALE

@autotune.template("script/scaled_matmul")
def scaled_matmul(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(scaled(A[i, k]) * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    cfg = autotune.get_config()
    cfg.define_split("tile_x", C.op.axis[1], num_outputs=2)
    cfg["tile_x"].apply(s, C, C.op.axis[1])
    return s, [A, B, C]

print("TOP LEVEL RAN")
task = autotune.task.create("script/scaled_matmul", args=(24,), target="llvm")
option = autotune.measure_option(builder=autotune.LocalBuilder(n_parallel=2),
                                 runner=autotune.LocalRunner(number=2, repeat=1))
tuner = autotune.tuner.RandomTuner(task)
tuner.tune(5, option, callbacks=[autotune.callback.log_to_file(sys.argv[1])])
print("errors", tuner.error_count)
'''


@pytest.mark.slow
def test_a_script_that_tunes_at_top_level_without_a_main_guard(tmp_path):
    # TVM scripts tune at top level; the workers must neither run the script again nor lose its
    # template (defined in __main__, with a helper and a global of the script)
    script, log = tmp_path / "unguarded.py", tmp_path / "log.jsonl"
    script.write_text(UNGUARDED_SCRIPT)
    r = subprocess.run([sys.executable, str(script), str(log)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("TOP LEVEL RAN") == 1, r.stdout
    assert "errors 0" in r.stdout and "Traceback" not in r.stderr, r.stderr[-3000:]
    recs = autotune.record.load_from_file(log)
    assert len(recs) == 5 and all(res.error_no == E.NO_ERROR for _, res in recs)


def test_a_script_template_that_cannot_be_pickled_is_named_in_the_error():
    import pickle
    import threading

    from tilecraft.autotune.task import Task, TemplateTransferError
    lock = threading.Lock()

    def template(n):                     # captures a lock: cannot reach a worker process
        with lock:
            return None
    task = Task("script/locked", (4,), "llvm", func=template, template_module="__main__")
    with pytest.raises(TemplateTransferError, match=r"'script/locked' is defined in the running script.*pickled"):
        pickle.dumps(task)


def test_wrong_answer_names_the_worst_element_with_plain_indices(tmp_path):
    """The runner's check on real libraries: a candidate wrong at one element is reported with
    that element's index as plain numbers (it printed ``at (np.int64(3), np.int64(5))``)."""
    from types import SimpleNamespace

    import tilecraft
    from tilecraft import te
    from tilecraft.autotune.local import default_run_func, prepare_reference, tensor_arg_info
    from tilecraft.autotune.measure import BuildResult, MeasureInput, TimingOptions

    A = te.placeholder((6, 9), name="A")
    B = te.placeholder((6, 9), name="B")
    C = te.compute((6, 9), lambda i, j: A[i, j] + B[i, j], name="C")
    W = te.compute((6, 9), lambda i, j: te.if_then_else(te.all(i == 3, j == 5), A[i, j] + B[i, j] + 4.0,
                                                         A[i, j] + B[i, j]), name="C")
    paths = {}
    for name, out in (("reference", C), ("wrong", W)):
        paths[name] = str(tmp_path / f"{name}.so")
        tilecraft.build(te.create_schedule(out.op), [A, B, out], target="llvm",
                        name="default_function").export_library(paths[name])
    info = tensor_arg_info([A, B, C])
    timing = TimingOptions(number=1, repeat=1, seed=7)
    ref = prepare_reference(paths["reference"], info, timing.seed, "llvm")
    inp = MeasureInput("llvm", SimpleNamespace(target="llvm"), None)
    costs, error_no, msg = default_run_func(inp, BuildResult(paths["wrong"], info), timing, ref)
    assert (costs, error_no) == ((), E.WRONG_ANSWER)
    m = re.fullmatch(r"output 2 differs from the reference: max abs error 4 at index \(3, 5\) "
                     r"\(got (\S+), expected (\S+)\), 1 of 54 elements differ", msg)
    assert m, msg
    assert abs(float(m[1]) - float(m[2]) - 4.0) < 1e-5, msg
    costs, error_no, msg = default_run_func(inp, BuildResult(paths["reference"], info), timing, ref)
    assert error_no == E.NO_ERROR and len(costs) == 1, msg


def test_difference_description_ranks_nan_first_and_counts_matching_nans_as_equal():
    from tilecraft.autotune.local import describe_difference

    want = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], "float32")
    assert describe_difference(want.copy(), want, 1e-3, 1e-3) is None
    got = want.copy()
    got[0, 0], got[1, 2] = 9.0, np.nan
    assert describe_difference(got, want, 1e-3, 1e-3) == (
        "max abs error nan at index (1, 2) (got nan, expected 6.0), 2 of 6 elements differ")
    assert describe_difference(np.full(3, np.nan), np.zeros(3), 0, 0) == (
        "max abs error nan at index (0,) (got nan, expected 0.0), 3 of 3 elements differ")
    assert describe_difference(np.array([1, 7], "int8"), np.array([1, 2], "int8"), 0, 0) == (
        "max abs error 5 at index (1,) (got 7, expected 2), 1 of 2 elements differ")
    assert describe_difference(np.zeros((2, 3)), np.zeros(6), 0, 0) == "shape (2, 3) != (6,)"
