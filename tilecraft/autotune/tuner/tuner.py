"""The tuner loop shared by every search strategy.

``Tuner.tune`` asks the strategy for a batch (``next_batch``), measures it through the injected
builder/runner, tells the strategy (``update``) and the callbacks, and stops after ``n_trial``
new measurements, when the space is exhausted, or ``early_stopping`` trials after the last
improvement.
"""
from __future__ import annotations

import logging
import time
import warnings
from typing import Iterable, Sequence

import numpy as np

from ..measure import MeasureErrorNo, MeasureInput, MeasureResult, create_measure_batch
from ..space import ConfigEntity

log = logging.getLogger("tilecraft.autotune")


class Tuner:
    """Base class. Subclasses implement ``next_batch``, ``update`` and ``has_next``.

    After ``tune``: ``best_config``, ``best_flops`` (FLOP/s), ``best_measure_pair``
    (``(MeasureInput, MeasureResult)``), ``best_iter`` and ``trace`` (FLOP/s of every trial in
    order, 0 for errors).
    """

    def __init__(self, task, seed: int | None = None):
        self.task = task
        self.space = task.config_space
        self.rng = np.random.default_rng(seed)
        self.best_config: ConfigEntity | None = None
        self.best_flops = 0.0
        self.best_measure_pair = None
        self.best_iter = 0
        self.visited: set[int] = set()
        self.trace: list[float] = []
        self.trace_index: list[int] = []     # the config of each trial
        self.history_flops: dict[int, float] = {}   # the best figure of each config load_history read
        self.verified: list = []             # (input, result) re-measured by ``verify``
        self.error_count = 0
        self.device_name: str | None = None
        self.finished = False
        self.measure_stats: dict = {}
        #: distinct configs measured since the best one (logged ones included): what
        #: ``early_stopping`` compares with
        self.trials_since_best = 0
        self.stopped_early = False   # whether the last tune() ended by early_stopping

    # -- strategy interface ----------------------------------------------------------------
    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def next_batch(self, batch_size: int) -> list[ConfigEntity]:
        raise NotImplementedError

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from measured configs (they are already in ``self.visited``)."""

    # -- helpers ---------------------------------------------------------------------------
    def flops_of(self, result: MeasureResult) -> float:
        """FLOP/s of a result (1/seconds when the task's FLOPs are unknown); 0 for errors."""
        if not result.ok:
            return 0.0
        return (self.task.flop or 1.0) / result.mean_cost

    def _random_unvisited(self) -> int | None:
        n = len(self.space)
        if len(self.visited) >= n:
            return None
        if n - len(self.visited) < 64 or n <= 4096:
            remaining = [self.space.valid_index(i) for i in range(n)]
            remaining = [i for i in remaining if i not in self.visited]
            return int(remaining[self.rng.integers(len(remaining))]) if remaining else None
        for _ in range(10000):
            i = self.space.valid_index(int(self.rng.integers(n)))
            if i not in self.visited:
                return i
        return None

    def index_in_space(self, config) -> int | None:
        """The index of a (logged) config in this task's space, checked knob by knob; None if
        the template's knobs changed since the config was logged (``ConfigSpace.index_of``)."""
        return self.space.index_of(config)

    def _same_task(self, inp: MeasureInput) -> bool:
        return (inp.task.workload == self.task.workload
                and (self.task.target is None or inp.target is None
                     or inp.target.kind == self.task.target.kind))

    def load_history(self, records: Iterable, min_seed_records: int = 0) -> int:
        """Learn from earlier records. Records of this very task (same workload and target kind)
        are marked measured — a resumed run does not measure them again — and count towards the
        best; a model-based tuner also trains on them (and on similar tasks' records). Records
        that do not fit the template as it is now (``ConfigSpace.mismatch``) are skipped with one
        warning. Returns the number of distinct configs of this task (a config measured twice
        counts once, as ``n_trial`` counts)."""
        same_inputs, same_results, others = [], [], []
        stale, first_reason = 0, None
        distinct = set()
        for inp, res in records:
            if self._same_task(inp):
                idx, reason = self.space._match(inp.config)
                if idx is None:
                    stale += 1
                    first_reason = first_reason or reason
                    continue
                config = self.space.get(idx)
                inp = MeasureInput(inp.target, self.task, config)
                same_inputs.append(inp)
                same_results.append(res)
                if idx not in distinct:
                    self.trials_since_best += 1
                distinct.add(idx)
                self.visited.add(idx)
                flops = self.flops_of(res)
                if flops > 0 and getattr(res, "stage", None) != "verify":
                    self.history_flops[idx] = max(flops, self.history_flops.get(idx, 0.0))
                if flops > self.best_flops:
                    self.best_flops, self.best_config = flops, config
                    self.best_measure_pair = (inp, res)
                    self.trials_since_best = 0
            else:
                others.append((inp, res))
        if stale:
            warnings.warn(f"{stale} record(s) of task {self.task.name} do not fit the template's knobs "
                          f"and were ignored (the first: {first_reason})", UserWarning, stacklevel=2)
        if same_inputs:
            self.update(same_inputs, same_results)
        if others:
            self._transfer(others)
        return len(distinct)

    def _transfer(self, records) -> None:
        """Use other tasks' records (model-based tuners override)."""

    # -- the loop --------------------------------------------------------------------------
    def tune(self, n_trial: int, measure_option: dict, early_stopping: int | None = None,
             callbacks: Sequence = (), si_prefix: str = "G", min_trials: int = 0, verify_top: int = 0,
             verify_rounds: int = 1):
        """Measure up to ``n_trial`` new configurations.

        ``measure_option``: from ``autotune.measure_option``; ``early_stopping``: stop when this
        many trials pass without improvement (trials loaded by ``load_history`` after the best
        one count too, so a resumed run goes on counting); ``callbacks``: ``f(tuner, inputs,
        results)`` after each batch (``progress_bar``, ``log_to_file``); ``min_trials``: never
        stop early before this many configs of the task are measured in all (loaded ones count),
        e.g. before a cost model has proposed a plan of its own; ``verify_top=k``: when the
        search ends, measure the ``k`` fastest configs of this run again, one at a time with no
        other build or run beside them (``verify``); ``log_to_file`` logs them as
        ``"stage": "verify"`` records, which ``apply_history_best`` and ``export`` choose by;
        ``verify_rounds``: time them in that many interleaved rounds (``remeasure``).
        """
        measure_batch = create_measure_batch(self.task, measure_option)
        runner = measure_option["runner"]
        self.device_name = getattr(runner, "device_name", None)
        if self.device_name is None:
            from ..record import local_device_name

            self.device_name = local_device_name(self.task.target)
        batch_size = measure_batch.n_parallel
        early_stopping = early_stopping if early_stopping is not None else 10**9
        self.finished = False
        self.stopped_early = False
        i = 0
        consecutive_errors = 0
        warned = False
        try:
            while i < n_trial and self.has_next():
                configs = self.next_batch(min(batch_size, n_trial - i))
                if not configs:
                    break
                inputs = [MeasureInput(self.task.target, self.task, c) for c in configs]
                for c in configs:
                    self.visited.add(c.index)
                results = measure_batch(inputs)
                for inp, res in zip(inputs, results):
                    flops = self.flops_of(res)
                    self.trace.append(flops)
                    self.trace_index.append(inp.config.index)
                    self.trials_since_best += 1
                    if res.ok:
                        consecutive_errors = 0
                    else:
                        self.error_count += 1
                        consecutive_errors += 1
                        log.debug("config %s: %s %s", inp.config.index, res.error_no.name, res.error_msg)
                    if flops > self.best_flops:
                        self.best_flops, self.best_config = flops, inp.config
                        self.best_measure_pair = (inp, res)
                        self.best_iter = len(self.trace) - 1
                        self.trials_since_best = 0
                i += len(results)
                if consecutive_errors >= 50 and not warned:
                    warned = True
                    last = results[-1]
                    warnings.warn(f"{consecutive_errors} measurements in a row failed; the last: "
                                  f"{last.error_no.name}: {last.error_msg[-2000:]}", RuntimeWarning)
                self.update(inputs, results)
                stale = self.trials_since_best if len(self.visited) >= min_trials else 0
                if i >= n_trial or stale >= early_stopping or not self.has_next():
                    self.finished = True
                for callback in callbacks:
                    callback(self, inputs, results)
                if stale >= early_stopping:
                    self.stopped_early = True
                    log.info("early stopped at trial %d (best at %d)", i, self.best_iter)
                    break
            if verify_top:
                self.verify(measure_batch, verify_top, callbacks, rounds=verify_rounds)
        finally:
            self.measure_stats = dict(measure_batch.stats)
            self.finished = True
            for callback in callbacks:
                close = getattr(callback, "close", None)
                if close is not None:
                    close()
            measure_batch.close()
        return self

    def verify(self, measure_batch, top: int, callbacks: Sequence = (), rounds: int = 1) -> list:
        """Measure the ``top`` fastest distinct configs of this run again — those ``load_history``
        read count too (an earlier run's log, the fallback ``tune_tasks`` and ``tilecraft tune``
        measure first: the choice by re-measured figures must not drop them) —, each alone (built one
        at a time, then timed one at a time with nothing else building or running) in ``rounds``
        interleaved rounds (``remeasure``: each round times every config once, in a fresh random
        order, so a slow spell of the machine hits them alike), and hand the results, marked
        ``stage="verify"`` (one cost per round), to the callbacks that log (``log_to_file``).
        Sets and returns ``self.verified``: ``[(MeasureInput, MeasureResult)]``, fastest tuning
        figure first.

        >>> tuner.tune(256, option, verify_top=5, verify_rounds=3); tuner.verified[0][1].costs
        """
        best: dict[int, float] = dict(self.history_flops)
        for index, flops in zip(self.trace_index, self.trace):
            if flops > 0:
                best[index] = max(flops, best.get(index, 0.0))
        chosen = sorted(best, key=lambda i: -best[i])[:top]
        inputs = [MeasureInput(self.task.target, self.task, self.space.get(index)) for index in chosen]
        results = remeasure(measure_batch.builder, measure_batch.runner, inputs, rounds, self.rng,
                            build_alone=True)
        self.verified = list(zip(inputs, results))
        for inp, res in self.verified:
            for callback in callbacks:
                if getattr(callback, "logs_verification", False):
                    callback(self, [inp], [res])
        return self.verified

    def reset(self):
        self.visited = set()
        self.best_config, self.best_flops, self.best_measure_pair = None, 0.0, None
        self.trials_since_best = 0


def remeasure(builder, runner, inputs: Sequence[MeasureInput], rounds: int = 3, rng=None,
              build_alone: bool = False) -> list[MeasureResult]:
    """Measure ``inputs`` again the way a user runs the chosen one: build each once (one at a
    time with ``build_alone``, else as one batch), then time them in ``rounds`` interleaved
    rounds, each config alone, in a fresh random order each round (``rng``: a numpy Generator),
    so that a slow spell of the machine is spread over the configs instead of falling on one.
    Returns one ``MeasureResult`` per input, ``stage="verify"``, its ``costs`` one figure per
    round (each round's mean), so ``mean_cost`` is the mean over rounds; a config that fails to
    build, or in any round, keeps that error. The builder's files are cleaned up at the end.

    >>> res = remeasure(LocalBuilder(), LocalRunner(number=1, repeat=3), inputs, rounds=3)
    >>> [r.mean_cost for r in res]
    """
    rng = rng if rng is not None else np.random.default_rng()
    if build_alone:
        built = [br for inp in inputs for br in builder.build([inp])]
    else:
        built = list(builder.build(list(inputs))) if inputs else []
    costs: list[list[float]] = [[] for _ in inputs]
    failed: dict[int, MeasureResult] = {}
    for k, br in enumerate(built):
        if br.error_no != MeasureErrorNo.NO_ERROR:
            failed[k] = MeasureResult((), br.error_no, br.error_msg, br.time_cost, 0.0, br.time_cost, "verify")
    try:
        for _ in range(max(1, rounds)):
            for k in rng.permutation(len(inputs)):
                k = int(k)
                if k in failed:
                    continue
                res = runner.run([inputs[k]], [built[k]])[0]
                if res.ok:
                    costs[k].append(res.mean_cost)
                else:
                    failed[k] = MeasureResult((), res.error_no, res.error_msg, 0.0, 0.0, 0.0, "verify")
    finally:
        cleanup = getattr(builder, "cleanup", None)
        if cleanup is not None and built:
            cleanup(built)
    return [failed.get(k) or MeasureResult(tuple(costs[k]), MeasureErrorNo.NO_ERROR, "", 0.0, time.time(),
                                           built[k].time_cost, "verify")
            for k in range(len(inputs))]
