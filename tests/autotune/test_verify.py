"""Re-measuring the top configs after a run (``tune(verify_top=)``) and choosing by those
figures: fakes only, milliseconds."""
import json
import time

import pytest

import tilecraft.autotune as autotune
from tilecraft.autotune import record
from tilecraft.autotune.measure import MeasureErrorNo, MeasureInput, MeasureResult
from tilecraft.autotune.tuner import RandomTuner
from tilecraft.target import Target

import autotune_fakes as fk


@pytest.fixture
def task():
    return autotune.task.create("test/fake_matmul", args=(64, 64, 64), target="llvm")


class BatchBuilder(fk.FakeBuilder):
    """Records the size of every batch it is asked to build."""

    def __init__(self):
        super().__init__()
        self.batches = []

    def build(self, inputs):
        self.batches.append(len(inputs))
        return super().build(inputs)


def test_verify_top_remeasures_the_best_alone_and_logs_them(task, tmp_path):
    log = tmp_path / "t.jsonl"
    builder = BatchBuilder()
    option = autotune.measure_option(builder=builder, runner=fk.FakeRunner())
    bar = autotune.callback.progress_bar(24, file=open(tmp_path / "bar.txt", "w"))
    tuner = RandomTuner(task, seed=0)
    tuner.tune(24, option, callbacks=[autotune.callback.log_to_file(log), bar], verify_top=3)
    assert builder.batches[-3:] == [1, 1, 1] and sum(builder.batches) == 27
    ranked = sorted(set(tuner.trace_index), key=lambda i: -tuner.trace[tuner.trace_index.index(i)])
    assert [inp.config.index for inp, _ in tuner.verified] == ranked[:3]
    assert all(res.stage == "verify" and res.ok for _, res in tuner.verified)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == 27 and [x.get("stage") for x in lines[-3:]] == ["verify"] * 3
    assert all("stage" not in x for x in lines[:24])
    assert bar.done == 24               # the bar counts trials, not re-measurements


def _rec(task, index, cost, stage="tune"):
    inp = MeasureInput(Target("llvm"), task, task.config_space.get(index))
    return inp, MeasureResult((cost,), MeasureErrorNo.NO_ERROR, "", 0.1, time.time(), 0.0, stage)


def test_a_verified_figure_outranks_a_lucky_tuning_figure(task, tmp_path):
    """Config 5's tuning figure was lucky (1.0); re-measured alone it runs 1.3, slower than
    config 9's 1.1: export and apply_history_best choose 9."""
    log = tmp_path / "t.jsonl"
    record.save_to_file([_rec(task, 5, 1.0), _rec(task, 9, 1.1), _rec(task, 11, 1.2),
                         _rec(task, 5, 1.3, "verify"), _rec(task, 9, 1.1, "verify")], log)
    best = record.best_by_workload(log)
    (inp, res), = best.values()
    assert inp.config.index == 9 and res.stage == "verify"
    assert [i.config.index for i, _ in record.pick_best(log)] == [9]
    with autotune.apply_history_best(str(log)):
        with Target("llvm"):
            cfg = autotune.dispatch.DispatchContext.current().query(Target("llvm"), task.workload)
    assert cfg.index == 9


def test_logs_without_stage_read_as_tuning_records_and_a_bad_stage_is_named(task, tmp_path):
    log = tmp_path / "t.jsonl"
    record.save_to_file([_rec(task, 5, 1.0), _rec(task, 9, 1.1)], log)
    assert all(res.stage == "tune" for _, res in record.load_from_file(log))
    assert record.pick_best(log)[0][0].config.index == 5
    line = json.loads(log.read_text().splitlines()[0])
    line["stage"] = "final"
    with pytest.raises(record.RecordError, match=r"stage must be one of \['tune', 'verify'\], got 'final'"):
        record.decode(json.dumps(line))


def test_log_plot_curves_leave_the_remeasurements_out(task, tmp_path):
    from tilecraft.cli import best_curves

    log = tmp_path / "t.jsonl"
    option = autotune.measure_option(builder=fk.FakeBuilder(), runner=fk.FakeRunner())
    RandomTuner(task, seed=0).tune(12, option, callbacks=[autotune.callback.log_to_file(log)], verify_top=2)
    (curve,) = best_curves(str(log)).values()
    assert len(curve) == 12
