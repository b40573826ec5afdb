"""TVM's AutoTVM test helpers at ``tilecraft.testing.autotune`` (TVM's ``tvm.testing.autotvm``):
the sample task, its records, DummyRunner; and ``MeasureResult`` in TVM's positional order, which
those helpers and TVM's tests use. Ported in spirit from how TVM's AutoTVM unit tests use them."""
import subprocess
import sys

import numpy as np
import pytest

from tilecraft import autotune as autotvm
from tilecraft.autotune.measure import MeasureErrorNo, MeasureResult
from tilecraft.testing.autotune import DummyRunner, bad_matmul, get_sample_records, get_sample_task


def test_sample_task_space_and_records():
    task, target = get_sample_task()
    assert task.name == "testing/matmul" and target.kind.name == "llvm"
    assert len(task.config_space) == 64                   # 8 x 8 splits of 128
    records = get_sample_records(70)
    assert [r.costs[0] for _, r in records[:3]] == [1.0, 2.0, 3.0]
    assert records[64][0].config.index == records[0][0].config.index   # i % len(space)
    assert all(r.error_no == MeasureErrorNo.NO_ERROR for _, r in records)


@pytest.mark.parametrize("inner_x", [1, 16])
def test_sample_template_builds_both_branches(check_llvm, rand, inner_x):
    """tile_x's inner factor 1 leaves x unsplit (the template's other branch): both run right."""
    task, target = get_sample_task(32)
    space = task.config_space
    config = next(space.get(i) for i in range(len(space))
                  if space.get(i)["tile_x"].size[-1] == inner_x and space.get(i)["tile_y"].size[-1] == 4)
    s, (A, B, C) = task.instantiate(config)
    a, b = rand((32, 32), "float32"), rand((32, 32), "float32")
    check_llvm(s, [A, B, C], {A: a, B: b}, expected={C: a @ b}, rtol=1e-4, atol=1e-4)


def test_bad_matmul_is_matmul_except_on_a_bad_device():
    task = autotvm.task.create("testing/bad_matmul", args=(16, 16, 16, "float32"), target="llvm")
    assert len(task.config_space) == 25                   # the matmul's space at 16
    s, (A, B, C) = task.instantiate(task.config_space.get(0))
    assert C.op.reduce_axis[0].dom.extent.value == 16
    assert bad_matmul.__name__ == "bad_matmul"


def test_dummy_runner_tunes_a_range():
    task, _ = get_sample_task()
    tuner = autotvm.tuner.GridSearchTuner(task, range_idx=(3, 10))
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(), runner=DummyRunner())
    results = []
    tuner.tune(n_trial=20, measure_option=option, callbacks=[lambda t, i, r: results.extend(r)])
    assert sorted(tuner.visited) == list(range(3, 11))
    assert len(results) == 8 and all(r.ok and 0 <= r.costs[0] < 1 for r in results)


def test_measure_result_in_tvm_positional_order():
    r = MeasureResult((2.0, 2.5), MeasureErrorNo.NO_ERROR, 2.3, 1700000000.0)
    assert (r.costs, r.error_msg, r.all_cost, r.timestamp) == ((2.0, 2.5), "", 2.3, 1700000000.0)
    r = MeasureResult((1,), 0, 0, 0)                       # TVM's tests: all zeros
    assert (r.error_msg, r.all_cost, r.timestamp) == ("", 0.0, 0.0)
    r = MeasureResult((1,), 0, "boom", 0.5, 7.0)           # tilecraft's order is unchanged
    assert (r.error_msg, r.all_cost, r.timestamp) == ("boom", 0.5, 7.0)
    with pytest.raises(TypeError, match=r"TVM's order \(costs, error_no, all_cost, timestamp\); give at most four"):
        MeasureResult((1,), 0, 0.5, 7.0, 8.0)


def test_testing_itself_does_not_import_the_tuner():
    """tilecraft.testing is a bottom-layer module: importing it loads no autotune."""
    code = ("import sys, tilecraft.testing; "
            "print(any(m.startswith('tilecraft.autotune') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_measure_result_unpacks_as_tvm_namedtuple():
    """TVM's database test rebuilds a result from ``list(tuple(res))`` with a new timestamp."""
    res = MeasureResult((0.5,), MeasureErrorNo.NO_ERROR, "", 2.5, 100.0)
    fields = list(tuple(res))
    assert fields == [(0.5,), MeasureErrorNo.NO_ERROR, 2.5, 100.0]
    fields[-1] = -1
    again = MeasureResult(*fields)
    assert (again.costs, again.error_no, again.all_cost, again.timestamp) == ((0.5,), 0, 2.5, -1.0)


def test_apply_history_best_at_tvm_record_path(tmp_path):
    from tilecraft.autotune.dispatch import ApplyHistoryBest
    from tilecraft.autotune.record import ApplyHistoryBest as FromRecord
    assert FromRecord is ApplyHistoryBest
    records = get_sample_records(4)
    best = min(records, key=lambda r: r[1].costs[0])[0].config
    task, target = get_sample_task()
    assert str(FromRecord(records).query(target, task.workload)) == str(best)


def _logged(tmp_path, name, records):
    path = tmp_path / name
    with open(path, "w") as f:
        autotvm.callback.log_to_file(f)(None, [i for i, _ in records], [r for _, r in records])
    return path


def test_apply_history_best_reads_what_tvm_accepts(tmp_path):
    """Ported in spirit from TVM's test_apply_history_best(_multiple_batches): a Path, its str,
    an open StringIO, a list or zip of pairs, a zip of paths, a zip of zips of pairs."""
    import io
    task, target = get_sample_task()
    space = task.config_space
    inputs = [autotvm.measure.MeasureInput(target, task, space.get(i)) for i in range(4)]
    costs = [3.0, 2.0, 0.5, 4.0]                                      # config 2 is the best
    results = [MeasureResult((c,), 0, 0.0, 1.0) for c in costs]
    pairs = list(zip(inputs, results))
    first, second = _logged(tmp_path, "a.log", pairs[:2]), _logged(tmp_path, "b.log", pairs[2:])
    best = str(space.get(2))
    stream = io.StringIO(first.read_text() + second.read_text())
    for records in (second, str(second), [first, second], zip([first, second]), stream, pairs, zip(inputs, results),
                    zip([zip(inputs[:2], results[:2]), zip(inputs[2:], results[2:])])):
        assert str(autotvm.apply_history_best(records).query(target, task.workload)) == best, records
    only_first = autotvm.apply_history_best(io.StringIO(first.read_text()))
    assert str(only_first.query(target, task.workload)) == str(space.get(1))


def test_apply_history_best_refuses_what_holds_no_records():
    with pytest.raises(TypeError, match=r"cannot read tuning records from int: give a log path, an open log file"):
        autotvm.apply_history_best([3])


def test_tvm_module_paths_of_measure_and_the_cost_model():
    """The paths TVM's AutoTVM tests import from reach tilecraft's objects."""
    import concurrent.futures

    from tilecraft.autotune import cost_model, measure
    from tilecraft.autotune.measure import executor
    from tilecraft.autotune.measure.measure import MeasureErrorNo as E2, MeasureResult as R2
    from tilecraft.autotune.tuner.xgboost_cost_model import XGBoostCostModel
    assert (E2, R2, XGBoostCostModel) == (MeasureErrorNo, MeasureResult, cost_model.XGBoostCostModel)
    assert measure.LocalRunner is autotvm.LocalRunner

    class Inline(executor.Executor):
        def submit(self, func, *args, **kwargs):
            future = concurrent.futures.Future()
            future.set_result(func(*args, **kwargs))
            return future
    assert Inline().submit(abs, -2).result() == 2
    with pytest.raises(NotImplementedError, match="Executor.submit"):
        executor.Executor().submit(abs, -2)
