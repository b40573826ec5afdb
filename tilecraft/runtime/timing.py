"""Timing compiled functions the way TVM's ``time_evaluator`` does.

One warm-up call, then ``repeat`` measurements; each runs the function ``number`` times
back to back and records the mean seconds per call. With ``min_repeat_ms`` the number of calls
grows until one measurement lasts at least that long (and stays grown for later repeats).
Arguments are checked once, before timing, so the figures hold no Python argument checking.

>>> # res = mod.time_evaluator(mod.entry_name, tilecraft.cpu(0), number=10, repeat=3)(a, b, c)
>>> # res.mean, res.median, res.results
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ProfileResult:
    """Seconds per call: ``results`` holds one figure per repeat."""
    mean: float
    results: tuple

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results) if len(self.results) > 1 else 0.0

    def __repr__(self) -> str:
        return (f"ProfileResult(mean={self.mean * 1e3:.4f} ms, median={self.median * 1e3:.4f} ms, "
                f"repeats={len(self.results)})")


def time_evaluator(function, dev=None, number: int = 10, repeat: int = 1, min_repeat_ms: float = 0,
                   cooldown_interval_ms: float = 0):
    """A callable that times ``function(*args)`` and returns a :class:`ProfileResult`."""
    if not isinstance(number, int) or number < 1:
        raise ValueError(f"time_evaluator: number must be a positive int, got {number!r}")
    if not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"time_evaluator: repeat must be a positive int, got {repeat!r}")
    if min_repeat_ms < 0:
        raise ValueError(f"time_evaluator: min_repeat_ms must be >= 0, got {min_repeat_ms!r}")

    def evaluate(*args) -> ProfileResult:
        raw = function._prepare(args)
        if function.parallel:
            from .threads import mark_parallel_used
            mark_parallel_used()
        call = function._cfunc
        function._check_rc(call(*raw))          # warm-up, and a check that it runs
        if dev is not None:
            dev.sync()
        n = number
        results = []
        clock = time.perf_counter
        for r in range(repeat):
            if r and cooldown_interval_ms:
                time.sleep(cooldown_interval_ms / 1e3)
            while True:
                t0 = clock()
                for _ in range(n):
                    rc = call(*raw)
                elapsed = clock() - t0
                if rc:                          # the last call's status (a store costs nothing)
                    function._check_rc(rc)
                if elapsed * 1e3 >= min_repeat_ms:
                    break
                per_call_ms = max(elapsed * 1e3 / n, 1e-6)
                n = max(math.ceil(min_repeat_ms / per_call_ms), math.ceil(n * 1.618))
            results.append(elapsed / n)
        return ProfileResult(sum(results) / len(results), tuple(results))

    return evaluate
