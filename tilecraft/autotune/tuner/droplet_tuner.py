"""Droplet search (AutoTVM's ``DropletTuner``): a model-free descent over the knob digits.

The search holds a *center*, a configuration given as one digit per knob (``start_position``,
default all zeros: every knob's first value), and a *radius*, starting at 1. Each round measures
the unvisited valid configurations around the center: every knob moved by ``±radius`` alone, then
moves of several knobs at once (each ``-radius``, 0 or ``+radius``), nearest first, up to
``batch_size`` of them. When the round's best beats the center by more than ``pvalue`` (relative
throughput), it becomes the center and the radius goes back to 1; otherwise the radius grows by
one. The search ends when the radius exceeds every knob's length, or the space is exhausted.
"""
from __future__ import annotations

import itertools

from .tuner import Tuner


class DropletTuner(Tuner):
    """Droplet search over the knob digits (see the module docstring).

    >>> DropletTuner(task, start_position=[0, 0, 1], pvalue=0.05).tune(128, measure_option)
    """

    def __init__(self, task, start_position=None, pvalue: float = 0.05, seed: int | None = None):
        super().__init__(task, seed)
        self.dims = self.space.dims
        start = [0] * len(self.dims) if start_position is None else [int(x) for x in start_position]
        if len(start) != len(self.dims) or any(not 0 <= x < d for x, d in zip(start, self.dims)):
            raise ValueError(f"DropletTuner: start_position {list(start)} must give one digit per knob within "
                             f"the knobs' lengths {self.dims}")
        if not 0 <= pvalue < 1:
            raise ValueError(f"DropletTuner: pvalue must be in [0, 1), got {pvalue}")
        self.pvalue = pvalue
        self.center = self.space.knob2point(start)
        self.center_flops = None          # unmeasured yet: the first round measures the center
        self.radius = 1
        self.round: list[int] = []        # configs of the current round still to hand out
        self.round_results: dict[int, float] = {}
        self.pending: set[int] = set()    # handed out, not measured yet

    def has_next(self) -> bool:
        return super().has_next() and self.radius <= max(self.dims, default=0)

    def _neighbours(self) -> list[int]:
        knob = self.space.point2knob(self.center)
        singles, multis = [], []
        for k, d in enumerate(self.dims):
            for step in (-self.radius, self.radius):
                if 0 <= knob[k] + step < d:
                    singles.append((k, step))
        for size in range(2, len(self.dims) + 1):
            for moves in itertools.combinations(singles, size):
                if len({k for k, _ in moves}) == size:
                    multis.append(moves)
                if len(multis) >= 256:
                    break
            if len(multis) >= 256:
                break
        out = []
        for moves in [[m] for m in singles] + [list(m) for m in multis]:
            new = list(knob)
            for k, step in moves:
                new[k] += step
            p = self.space.knob2point(new)
            if p not in self.visited and p not in out and self.space.is_index_valid(p):
                out.append(p)
        return out

    def _next_round(self) -> None:
        """Move the center if the last round beat it, widen the radius otherwise, and plan."""
        while True:
            if self.round_results:
                best, flops = max(self.round_results.items(), key=lambda kv: kv[1])
                base = self.center_flops or 0.0
                if flops > base * (1 + self.pvalue):
                    self.center, self.center_flops, self.radius = best, flops, 1
                else:
                    self.radius += 1
                self.round_results = {}
            if self.radius > max(self.dims, default=0):
                self.round = []
                return
            self.round = self._neighbours()
            if self.round:
                return
            self.radius += 1

    def next_batch(self, batch_size):
        batch = []
        if self.center_flops is None and self.center not in self.visited and self.center not in self.pending:
            if self.space.is_index_valid(self.center):
                batch.append(self.space.get(self.center))
                self.pending.add(self.center)
            else:
                self.center_flops = 0.0       # an invalid start: any valid neighbour beats it
        while len(batch) < batch_size:
            if not self.round:
                if self.pending:              # the round's results decide the next one
                    break
                self._next_round()
                if not self.round:
                    break
            p = self.round.pop(0)
            if p not in self.visited and p not in self.pending:
                batch.append(self.space.get(p))
                self.pending.add(p)
        return batch

    def update(self, inputs, results):
        for inp, res in zip(inputs, results):
            i = inp.config.index
            self.visited.add(i)
            self.pending.discard(i)
            flops = self.flops_of(res)
            if i == self.center and self.center_flops is None:
                self.center_flops = flops
            else:
                self.round_results[i] = flops
