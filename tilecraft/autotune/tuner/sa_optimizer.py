"""Parallel simulated annealing over a config space, guided by a cost model.

128 chains walk the space at once (one knob changed per step, accepted with the Metropolis rule
under a temperature falling linearly from ``temp[0]`` to ``temp[1]``); every point visited on the
way competes for a top list of the ``num`` best predictions that have not been measured yet. The
walk stops after ``n_iter`` steps, or ``early_stop`` steps after the top list last changed. With
``persistent=True`` the chains start the next search where the last one stopped;
``seed_chains(points)`` moves some chains onto given points first (the tuner plants its best
measured configs there).

A space of at most ``exhaustive_limit`` configs (4096) is not walked: every unmeasured config
is scored in one call and the best ``num`` are exact (a few milliseconds with knob features).
"""
from __future__ import annotations

import heapq
import logging

import numpy as np

log = logging.getLogger("tilecraft.autotune")


class SimulatedAnnealingOptimizer:
    """Find the ``num`` configs with the highest predicted score, excluding measured ones.

    ``model`` needs ``predict(indices) -> scores`` (higher is better).
    """

    def __init__(self, task, n_iter: int = 500, temp=(1.0, 0.0), persistent: bool = True,
                 parallel_size: int = 128, early_stop: int = 50, seed: int | None = None,
                 exhaustive_limit: int = 4096):
        self.space = task.config_space
        self.n_iter = n_iter
        self.temp = temp
        self.persistent = persistent
        self.parallel_size = min(parallel_size, len(self.space))
        self.early_stop = early_stop or 10**9
        self.rng = np.random.default_rng(seed)
        self.points: np.ndarray | None = None
        dims = np.array(self.space.dims or [1], dtype=np.int64)
        self._dims = dims
        self._mults = np.concatenate([[1], np.cumprod(dims)[:-1]]).astype(np.int64)
        self._movable = np.nonzero(dims > 1)[0]
        self._filtered = bool(self.space._constraints)
        self._int64 = self.space.range_length < 2**62
        self.last_steps = 0
        self.exhaustive = len(self.space) <= exhaustive_limit and self._int64

    def random_walk(self, points: np.ndarray) -> np.ndarray:
        """Each point with one knob (chosen at random among knobs with more than one value)
        moved to another of its values."""
        if len(self._movable) == 0:
            return points.copy()
        if not self._int64 or self._filtered:
            return np.array([self.space.random_walk(int(p), self.rng) for p in points], dtype=object
                            if not self._int64 else np.int64)
        j = self._movable[self.rng.integers(len(self._movable), size=len(points))]
        dims, mults = self._dims[j], self._mults[j]
        old = (points // mults) % dims
        new = (old + 1 + (self.rng.random(len(points)) * (dims - 1)).astype(np.int64)) % dims
        return points + (new - old) * mults

    def _initial_points(self) -> np.ndarray:
        ints = self.space.sample_ints(self.parallel_size, self.rng)
        return np.array(ints, dtype=np.int64 if self._int64 else object)

    def seed_chains(self, points) -> None:
        """Move the first chains onto ``points`` (at most half of them), e.g. the best measured
        configs, so the next search walks from there.

        >>> sa.seed_chains([best_index, second_index])
        """
        if self.exhaustive:
            return
        if self.points is None:
            self.points = self._initial_points()
        points = [int(p) for p in points][: len(self.points) // 2]
        for k, p in enumerate(points):
            self.points[k] = p

    def find_maximums(self, model, num: int, exclusive: set) -> list[int]:
        """The (up to) ``num`` best-predicted indices not in ``exclusive``, best first.

        >>> sa.find_maximums(model, 64, tuner.visited)[:2]
        [1234, 567]
        """
        if self.exhaustive:
            cand = np.array([i for i in (self.space.valid_index(k) for k in range(len(self.space)))
                             if i not in exclusive], dtype=np.int64)
            if len(cand) == 0:
                return []
            scores = np.asarray(model.predict(cand), dtype=np.float64)
            top = np.argsort(-scores, kind="stable")[:num]
            self.last_steps = 0
            return [int(i) for i in cand[top]]
        if self.points is None or not self.persistent:
            self.points = self._initial_points()
        points = self.points
        scores = np.asarray(model.predict(points), dtype=np.float64)
        heap: list[tuple[float, int]] = []   # min-heap of (score, index)
        in_heap: set[int] = set()

        def offer(score_arr, point_arr):
            changed = False
            for s, p in zip(score_arr, point_arr):
                p = int(p)
                if p in exclusive or p in in_heap:
                    continue
                if len(heap) < num:
                    heapq.heappush(heap, (float(s), p))
                    in_heap.add(p)
                    changed = True
                elif s > heap[0][0]:
                    _, out = heapq.heapreplace(heap, (float(s), p))
                    in_heap.discard(out)
                    in_heap.add(p)
                    changed = True
            return changed

        offer(scores, points)
        t, t_end = self.temp
        cool = (t - t_end) / max(1, self.n_iter)
        last_change = 0
        k = 0
        for k in range(1, self.n_iter + 1):
            new_points = self.random_walk(points)
            new_scores = np.asarray(model.predict(new_points), dtype=np.float64)
            accept_prob = np.exp(np.minimum((new_scores - scores) / (t + 1e-5), 0.0))
            accept = self.rng.random(len(points)) < accept_prob
            points = np.where(accept, new_points, points)
            scores = np.where(accept, new_scores, scores)
            if offer(new_scores, new_points):
                last_change = k
            t -= cool
            if k - last_change >= self.early_stop:
                break
        self.last_steps = k
        self.points = points
        log.debug("SA: %d steps, top score %.4g", k, max(heap)[0] if heap else float("nan"))
        return [p for _, p in sorted(heap, reverse=True)]
