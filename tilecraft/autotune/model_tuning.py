"""Tuning a whole model: every task of ``extract_from_program`` under one trial budget.

    tasks = autotune.task.extract_from_program(mod["main"], target="llvm", params=params)
    autotune.tune_tasks(tasks, n_trial_total=400, log_file="model.jsonl", early_stopping=40)
    with autotune.apply_history_best("model.jsonl"):
        lib = relay.build(mod, target="llvm", params=params)

**The split** (``split_budget``): a task's share of the budget is proportional to its
estimated time share, ``task.flop * task.count`` (FLOPs per run times the kernel calls of the
model that run it): every task first gets ``min_trials`` (fewer when the budget cannot give
that to all; all its configs when its space is smaller), the rest goes by that proportion; no
task gets more than its config space, what a cap frees goes to the others in the same
proportion; integer shares by largest remainder, so they add up to the budget (or to
the sum of the spaces when that is smaller).

**Resuming**: the log is read first; the configs it holds of a task count towards that task's
share and are not measured again, so the same call after an interruption measures only what is
left, and after a finished run measures nothing.
"""
from __future__ import annotations

import math
import os
import sys
import warnings



def split_budget(tasks, n_trial_total: int, min_trials: int = 8) -> list[int]:
    """Trials per task (see the module docstring for the rule).

    >>> split_budget(tasks, 100)          # doctest: +SKIP
    [62, 30, 8]
    """
    if n_trial_total < 0:
        raise ValueError(f"tune_tasks: n_trial_total must be at least 0, got {n_trial_total}")
    sizes = [len(t.config_space) if t.config_space is not None else 10**9 for t in tasks]
    weights = [max(float(t.flop), 1.0) * max(int(getattr(t, "count", 1)), 1) for t in tasks]
    shares = [0] * len(tasks)
    budget = min(n_trial_total, sum(sizes))
    floor = min(min_trials, budget // max(len(tasks), 1))
    for i, size in enumerate(sizes):
        shares[i] = min(floor, size)
    left = budget - sum(shares)
    open_ = [i for i in range(len(tasks)) if shares[i] < sizes[i]]
    while left > 0 and open_:
        total_w = sum(weights[i] for i in open_)
        exact = {i: left * weights[i] / total_w for i in open_}
        capped = [i for i in open_ if shares[i] + exact[i] >= sizes[i]]
        if capped:          # whole spaces; the trials they free go round again
            for i in capped:
                shares[i] = sizes[i]
            left = budget - sum(shares)
            open_ = [i for i in open_ if i not in capped]
            continue
        give = {i: math.floor(exact[i]) for i in open_}
        by_remainder = sorted(open_, key=lambda i: exact[i] - give[i], reverse=True)
        for i in by_remainder[:left - sum(give.values())]:
            give[i] += 1
        for i in open_:
            shares[i] += give[i]
        break
    return shares


def _make_tuner(name, task):
    from . import tuner as tuners
    table = {"xgb": tuners.XGBTuner, "ga": tuners.GATuner, "random": tuners.RandomTuner,
             "gridsearch": tuners.GridSearchTuner}
    if callable(name):
        return name(task)
    if name not in table:
        raise ValueError(f"tune_tasks: unknown tuner {name!r}; choose one of {', '.join(table)} "
                         "(or pass a function task -> tuner)")
    return table[name](task)


def model_measure_option(repeat: int = 6) -> dict:
    """How :func:`tune_tasks` measures by default: local builds, and each candidate timed
    ``repeat`` times, one call each, after evicting the caches (``enable_cpu_cache_flush``, as
    TVM's x86 model tuning). In a model the weights of a layer were evicted by the other
    layers' since its last run; warm timings favour blockings that reread the weights from
    cache and are slower in the model (a BERT dense layer's warm-best blocking was 20-30%
    slower cold than one streaming its weight once).

    >>> tune_tasks(tasks, 200, "model.jsonl", measure_option=model_measure_option(repeat=10))   # doctest: +SKIP
    """
    from .local import LocalRunner
    from .measure import measure_option
    return measure_option(runner=LocalRunner(number=1, repeat=repeat, enable_cpu_cache_flush=True))


def fallback_config(task):
    """The point of ``task``'s config space that its template's fallback schedules (what a build
    without a log uses), or None when the fallback is not one (a template that leaves knobs at
    their first values while it schedules otherwise, or picks values outside its space).
    :func:`tune_tasks` measures it first, so a tuned model is never slower than the untuned
    one by the tuner's own measurements.

    >>> fallback_config(task)          # doctest: +SKIP
    [tile=(8, 32),kc=256,mc_tiles=16,nc_tiles=1,order=nm,k_unroll=4],...,1234
    """
    from .space import FallbackConfigEntity, SplitEntity
    cfg = FallbackConfigEntity()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            task.instantiate(cfg)
    except Exception:       # the task's own candidates report such errors; nothing to seed
        return None
    space = task.config_space
    digits = []
    for name, knob in space.space_map.items():
        entity = cfg._entity_map.get(name)
        if isinstance(entity, SplitEntity):     # a space's splits leave the outermost loop -1
            found = [i for i, e in enumerate(knob.entities) if list(e.size[1:]) == list(entity.size[1:])]
        else:
            found = [i for i, e in enumerate(knob.entities) if e == entity]
        if not found:
            return None
        digits.append(found[0])
    point = space.knob2point(digits)
    if point == 0 or not space.is_index_valid(point):
        return None         # every knob at its first value: an unscheduled fallback, no news
    return space.get(point)


def measure_fallback(t, task, option, callbacks) -> int:
    """Measure ``task``'s :func:`fallback_config` (when it has one) and hand the result to the
    tuner ``t`` as history and to the callbacks (the log, the counter); the number measured
    (``tune_tasks`` and ``tilecraft tune`` call it before a fresh run's trials).

    >>> measure_fallback(tuner, task, option, [autotune.callback.log_to_file("t.jsonl")])   # doctest: +SKIP
    1
    """
    from .measure import MeasureInput, create_measure_batch
    from .record import local_device_name
    config = fallback_config(task)
    if config is None:
        return 0
    inputs = [MeasureInput(task.target, task, config)]
    batch = create_measure_batch(task, option)
    try:
        results = batch(inputs)
    finally:
        batch.close()
    t.device_name = getattr(option["runner"], "device_name", None) or local_device_name(task.target)
    t.load_history(list(zip(inputs, results)))
    for cb in callbacks:
        cb(t, inputs, results)
    return 1


def tune_tasks(tasks, n_trial_total: int, log_file, measure_option: dict | None = None, tuner="xgb",
               early_stopping: int | None = None, min_trials: int = 8, progress: bool = True,
               file=None) -> list[dict]:
    """Tune ``tasks`` (from ``extract_from_program``) with ``n_trial_total`` trials in all,
    appending every measurement to ``log_file`` (JSON lines; read first to resume). ``tuner``:
    ``"xgb"``, ``"ga"``, ``"random"``, ``"gridsearch"`` or a function ``task -> tuner``;
    ``early_stopping``: a task stops after this many trials without a better config (its share
    left unused); ``min_trials``: the least share of a task. Shows a progress bar per task
    (``[Task 2/5] topi/matmul.llvm``) and one line per task when it ends. Without
    ``measure_option`` candidates run as in a model, on cold caches (:func:`model_measure_option`).
    Returns per task: ``{"task", "share", "done", "measured", "best_gflops"}``.

    >>> tune_tasks(tasks, 200, "model.jsonl", early_stopping=30)      # doctest: +SKIP
    """
    from . import callback, record
    log_file = os.fspath(log_file)
    out = file if file is not None else sys.stderr
    option = measure_option if measure_option is not None else model_measure_option()
    shares = split_budget(tasks, n_trial_total, min_trials)
    history = record.load_from_file(log_file) if os.path.isfile(log_file) else []
    report = []
    for k, (task, share) in enumerate(zip(tasks, shares)):
        prefix = f"[Task {k + 1:2d}/{len(tasks):2d}] {task.name}{list(task.args)}"
        t = _make_tuner(tuner, task)
        with warnings.catch_warnings():        # another task's records in the same log are no news
            warnings.simplefilter("ignore")
            done = t.load_history([(i, r) for i, r in history if i.task.workload == task.workload])
        todo = max(share - done, 0)
        stale = early_stopping is not None and done and t.trials_since_best >= early_stopping
        measured = 0
        if todo and not stale:
            counter = _Counter()
            callbacks = [callback.log_to_file(log_file), counter]
            if progress:
                callbacks.append(callback.progress_bar(todo, prefix=prefix, file=out))
            # the untuned build's config first: tuning never ends slower than no tuning
            first = 0 if done else measure_fallback(t, task, option, callbacks)
            if todo > first:
                t.tune(todo - first, option, early_stopping=early_stopping, callbacks=callbacks)
            else:
                for cb in callbacks:
                    getattr(cb, "close", lambda: None)()
            measured = counter.n
        best = t.best_flops / 1e9
        why = ("already tuned" if not todo or stale else
               "stopped early" if getattr(t, "stopped_early", False) else "done")
        if progress:
            print(f"{prefix}: {why}, {done + measured}/{share} trials ({measured} new), best {best:.2f} GFLOP/s",
                  file=out)
        report.append({"task": task, "share": share, "done": done + measured, "measured": measured,
                       "best_gflops": best})
    return report


class _Counter:
    def __init__(self):
        self.n = 0

    def __call__(self, tuner, inputs, results):
        self.n += len(results)
