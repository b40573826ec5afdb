"""tilecraft's auto-tuner, with AutoTVM's API (``from tilecraft import autotune as autotvm``).

    @autotune.template("example/matmul")
    def matmul(N, L, M, dtype): ...

    task = autotune.task.create("example/matmul", args=(512, 512, 512, "float32"), target="llvm")
    tuner = autotune.tuner.XGBTuner(task)
    tuner.tune(n_trial=200,
               measure_option=autotune.measure_option(builder=autotune.LocalBuilder(),
                                                      runner=autotune.LocalRunner(number=5)),
               callbacks=[autotune.callback.progress_bar(200),
                          autotune.callback.log_to_file("tuning_logs/matmul.jsonl")])
    with autotune.apply_history_best("tuning_logs/matmul.jsonl"):
        with tilecraft.target.Target("llvm"):
            s, args = matmul(512, 512, 512, "float32")

See docs/autotune.md.
"""
from . import callback, database, feature, record, task, tuner
from .dispatch import ApplyConfig, ApplyHistoryBest, DispatchContext, FallbackContext, apply_history_best
from .local import LocalBuilder, LocalRunner
from .measure import (BuildResult, MeasureErrorNo, MeasureInput, MeasureResult, OptionError, TimingOptions,
                      create_measure_batch, measure_option)
from .space import (ConfigEntity, ConfigSpace, FallbackConfigEntity, InstantiationError, SplitEntity,
                    ReorderEntity, AnnotateEntity, OtherOptionEntity)
from .model_tuning import model_measure_option, split_budget, tune_tasks
from .task import get_config, template

__all__ = [
    "template", "get_config", "task", "tune_tasks", "split_budget", "model_measure_option", "tuner", "record", "callback",
    "database", "feature",
    "measure_option",
    "LocalBuilder", "LocalRunner", "TimingOptions", "OptionError", "MeasureInput", "MeasureResult", "MeasureErrorNo", "BuildResult",
    "create_measure_batch", "apply_history_best", "ApplyHistoryBest", "ApplyConfig", "DispatchContext",
    "FallbackContext", "ConfigSpace", "ConfigEntity", "FallbackConfigEntity", "InstantiationError",
    "SplitEntity", "ReorderEntity", "AnnotateEntity", "OtherOptionEntity",
]
