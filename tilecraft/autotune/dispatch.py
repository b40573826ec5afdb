"""Dispatch contexts: who answers ``get_config()`` when a template runs.

Contexts form a stack; the innermost answers, or passes the question to the one below it. At the
bottom sits ``FallbackContext``, which answers a ``FallbackConfigEntity`` and says so once per
workload.

    with autotune.apply_history_best("tuning_logs/matmul.jsonl"):
        with Target("llvm"):
            s, args = matmul(512, 512, 512, "float32")   # the best logged config's schedule
"""
from __future__ import annotations

import threading
import warnings

from .space import FallbackConfigEntity

_local = threading.local()


class DispatchContext:
    """Base of the context stack. Subclasses answer ``_query_inside`` or return None."""

    def __init__(self):
        self._below: DispatchContext | None = None

    @staticmethod
    def current() -> "DispatchContext":
        stack = getattr(_local, "stack", None)
        if not stack:
            stack = _local.stack = [FallbackContext()]
        return stack[-1]

    def query(self, target, workload):
        """The configuration for ``workload`` on ``target`` (``workload`` is None when a
        template asks for the config it is already running with)."""
        ret = self._query_inside(target, workload)
        if ret is None:
            below = self._below if self._below is not None else _bottom()
            ret = below.query(target, workload)
        return ret

    def _query_inside(self, target, workload):
        raise NotImplementedError

    def __enter__(self):
        DispatchContext.current()  # make sure the stack exists
        self._below = _local.stack[-1]
        _local.stack.append(self)
        return self

    def __exit__(self, *exc):
        _local.stack.pop()
        self._below = None


def _bottom() -> "FallbackContext":
    DispatchContext.current()
    return _local.stack[0]


class ApplyConfig(DispatchContext):
    """Answer one fixed configuration (or a ``ConfigSpace`` while a task is created)."""

    def __init__(self, config):
        super().__init__()
        self._config = config
        self.workload = None

    def _query_inside(self, target, workload):
        if workload is not None:
            self.workload = workload
        return self._config


class FallbackContext(DispatchContext):
    """The bottom of the stack: a ``FallbackConfigEntity`` per (target, workload), announced
    once each with a warning."""

    def __init__(self):
        super().__init__()
        self.memory: dict = {}
        self.silent = False

    def query(self, target, workload):
        return self._query_inside(target, workload)

    def _query_inside(self, target, workload):
        key = (str(target) if target is not None else None, workload)
        if key in self.memory:
            return self.memory[key]
        if not self.silent and workload is not None:
            warnings.warn(
                f"no tuned configuration for workload {list(workload)!r} on target "
                f"{str(target) if target is not None else '(none)'}: using the fallback "
                "configuration, which may be much slower. Tune it, or check that the log passed "
                "to apply_history_best has records for this workload and target.",
                UserWarning, stacklevel=4)
        cfg = FallbackConfigEntity()
        self.memory[key] = cfg
        return cfg

    def clear_cache(self, target, workload):
        self.memory.pop((str(target) if target is not None else None, workload), None)


def fallback_context() -> FallbackContext:
    """The process's fallback context (to silence it: ``fallback_context().silent = True``)."""
    return _bottom()


def _unpack_records(records):
    """``(MeasureInput, MeasureResult)`` pairs from what ``ApplyHistoryBest`` accepts, as TVM's:
    None, a log path (``str`` or path-like), an open text file or ``io.StringIO`` of log lines,
    a pair, or any iterable (a list, a ``zip``) of these, nested to any depth."""
    import io

    from .measure import MeasureInput
    from .record import Skipped, iter_file, iter_lines  # record imports task → dispatch; load lazily

    if records is None:
        return
    if isinstance(records, (str, bytes)) or hasattr(records, "__fspath__"):
        path = records.decode() if isinstance(records, bytes) else records
        skipped = Skipped(path)
        yield from iter_file(path, skipped=skipped)
        skipped.warn(stacklevel=5)
        return
    if isinstance(records, io.TextIOBase):
        skipped = Skipped(getattr(records, "name", "<stream>"))
        yield from iter_lines(records, skipped=skipped)
        skipped.warn(stacklevel=5)
        return
    if isinstance(records, tuple) and len(records) == 2 and isinstance(records[0], MeasureInput):
        yield records
        return
    try:
        items = iter(records)
    except TypeError:
        raise TypeError(f"apply_history_best: cannot read tuning records from {type(records).__name__}: "
                        f"give a log path, an open log file, (MeasureInput, MeasureResult) pairs, "
                        f"or a list of these") from None
    for item in items:
        yield from _unpack_records(item)


class ApplyHistoryBest(DispatchContext):
    """Answer, for each workload, the fastest valid, error-free configuration in tuning records
    that fits the template as it is now.

    ``records`` is a log path, an open log file (or ``io.StringIO``), an iterable of
    ``(MeasureInput, MeasureResult)``, any iterable of these (a list of paths, a ``zip`` of
    batches, as TVM's), or None (TVM's empty history: every query falls back, as without a log).
    The target is matched exactly first (``str(Target)``), then by kind
    (``llvm`` / ``cuda``); with no current target, any target's best is used. Invalid lines are
    skipped when the log is read; a record whose knobs no longer fit its template (another
    version of it, or values it does not offer) is skipped when its workload is first asked
    for, with one warning per workload, and the next best record answers.
    """

    def __init__(self, records):
        super().__init__()
        self.best_by_target: dict = {}
        self.best_by_kind: dict = {}
        self.best_any: dict = {}
        self._fit = None
        self._answers: dict = {}
        self.load(records)

    def load(self, records):
        for inp, res in _unpack_records(records):
            if res.error_no != 0 or not res.costs:
                continue
            # re-measured configs first (record.preference), then by cost
            cost = (0 if getattr(res, "stage", "tune") == "verify" else 1, sum(res.costs) / len(res.costs))
            workload = inp.task.workload
            target = inp.target
            for table, key in ((self.best_by_target, (str(target), workload)),
                               (self.best_by_kind, (getattr(target, "kind", str(target)), workload)),
                               (self.best_any, workload)):
                table.setdefault(key, []).append((cost, inp))
        for table in (self.best_by_target, self.best_by_kind, self.best_any):
            for candidates in table.values():
                candidates.sort(key=lambda c: c[0])
        self._answers.clear()

    def _best_fitting(self, candidates, target, seen: set):
        """The config of the cheapest candidate that fits its template now, and how many
        cheaper ones did not (with the first reason); ``seen`` holds those already counted."""
        from .record import TemplateFit

        if self._fit is None:
            self._fit = TemplateFit()
        skipped, first = 0, None
        for _, inp in candidates:
            if id(inp) in seen:
                continue
            seen.add(id(inp))
            why = self._fit.problem(inp, target)
            if why is None:
                return inp.config, skipped, first
            skipped += 1
            first = first or why
        return None, skipped, first

    def _query_inside(self, target, workload):
        if workload is None:
            return None
        if target is not None:
            lookups = ((self.best_by_target, (str(target), workload)),
                       (self.best_by_kind, (target.kind, workload)))
        else:
            lookups = ((self.best_any, workload),)
        answer_key = (str(target) if target is not None else None, workload)
        if answer_key in self._answers:
            return self._answers[answer_key]
        config, skipped, first, seen = None, 0, None, set()
        for table, key in lookups:
            if key in table:
                config, n, why = self._best_fitting(table[key], target, seen)
                skipped, first = skipped + n, first or why
                if config is not None:
                    break
        if skipped:
            warnings.warn(f"apply_history_best: skipped {skipped} record(s) of workload {list(workload)!r} "
                          f"that do not fit template {workload[0]!r} now (the first: {first}); "
                          + ("using the best of the others" if config is not None
                             else "no other record fits"), UserWarning, stacklevel=4)
        self._answers[answer_key] = config
        return config


def apply_history_best(records) -> ApplyHistoryBest:
    """``with apply_history_best(log):`` — templates return the best logged schedule;
    ``apply_history_best(None)`` has no history (templates use their fallback configs)."""
    return ApplyHistoryBest(records)
