"""LocalBuilder/LocalRunner isolation with injected worker functions: candidates that segfault,
hang, raise or answer wrongly are recorded as errors and tuning finishes."""

import pytest

import tilecraft.autotune as autotune
from tilecraft.autotune import MeasureErrorNo as E
from tilecraft.autotune.worker_pool import WorkerPool
from tilecraft.autotune.tuner import GridSearchTuner

import autotune_fakes as fk


@pytest.mark.slow
def test_pool_reports_ok_error_timeout_and_death():
    pool = WorkerPool(2)
    try:
        outs = pool.map(fk.pool_job, [("ok",), ("raise",), ("hang",), ("segv",), ("ok",)], timeout=1.0)
    finally:
        pool.close()
    assert [o.status for o in outs] == ["ok", "error", "timeout", "died", "ok"]
    assert outs[0].value == "fine" and "boom" in outs[1].value and outs[3].value == -11


@pytest.mark.slow
def test_tuning_survives_segfaults_hangs_and_wrong_answers(tmp_path):
    task = autotune.task.create("test/fake_matmul", args=(8, 4, 2), target="llvm")
    builder = autotune.LocalBuilder(n_parallel=2, timeout=5, build_func=fk.fake_build_func, build_reference=False)
    runner = autotune.LocalRunner(timeout=1.0, check_correctness=False, run_func=fk.fake_run_func)
    log = tmp_path / "t.jsonl"
    tuner = GridSearchTuner(task)
    tuner.tune(n_trial=12, measure_option=autotune.measure_option(builder=builder, runner=runner),
               callbacks=[autotune.callback.log_to_file(log)])
    # (a hang that were not cut off by the runner's timeout would stop this test from finishing)
    recs = autotune.record.load_from_file(log)
    kinds = {inp.config.index: res.error_no for inp, res in recs}
    assert len(kinds) == 12
    want = {"ok": E.NO_ERROR, "segfault": E.RUNTIME_DEVICE, "hang": E.RUN_TIMEOUT,
            "wrong": E.WRONG_ANSWER, "raise": E.COMPILE_HOST}
    for inp, res in recs:
        assert res.error_no == want[fk.behaviour(inp.config)], (inp.config.index, res)
    msgs = {fk.behaviour(inp.config): res.error_msg for inp, res in recs}
    assert "SIGSEGV" in msgs["segfault"]
    assert "fake lowering failure" in msgs["raise"]
    assert "killed" in msgs["hang"]
    assert tuner.best_config.index == 0


@pytest.mark.slow
def test_builder_timeouts_and_crashes_are_recorded():
    task = autotune.task.create("test/fake_matmul", args=(8, 4, 2), target="llvm")
    for func, kind, text in ((fk.hanging_build_func, E.BUILD_TIMEOUT, "killed"),
                             (fk.crashing_build_func, E.COMPILE_HOST, "SIGSEGV")):
        builder = autotune.LocalBuilder(n_parallel=2, timeout=1.0, build_func=func, build_reference=False)
        builder.set_task(task)
        try:
            inputs = [autotune.MeasureInput(task.target, task, task.config_space.get(i)) for i in range(4)]
            res = builder.build(inputs)
        finally:
            builder.close()
        assert [r.error_no for r in res] == [E.NO_ERROR, kind, E.NO_ERROR, kind]
        assert text in res[1].error_msg


def test_runner_memory_cap_turns_runaway_allocation_into_an_error():
    task = autotune.task.create("test/fake_matmul", args=(8, 4, 2), target="llvm")
    builder = autotune.LocalBuilder(n_parallel=1, build_func=fk.fake_build_func, build_reference=False)
    runner = autotune.LocalRunner(timeout=20, check_correctness=False, run_func=fk.greedy_run_func,
                                  max_memory_mb=1024)
    seen = []
    GridSearchTuner(task).tune(1, autotune.measure_option(builder=builder, runner=runner),
                               callbacks=[lambda t, i, r: seen.extend(r)])
    assert seen[0].error_no == E.RUNTIME_DEVICE
    assert "MemoryError" in seen[0].error_msg or "died" in seen[0].error_msg
