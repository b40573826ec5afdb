"""Model-free tuners: uniform random sampling and grid search."""
from __future__ import annotations

from .tuner import Tuner


class RandomTuner(Tuner):
    """Measure configurations drawn uniformly without replacement.

    >>> RandomTuner(task, seed=0).tune(64, measure_option)
    """

    #: spaces up to this size are walked in one shuffled order (O(1) a draw); larger ones sampled
    SHUFFLE_LIMIT = 1 << 16

    def next_batch(self, batch_size):
        if len(self.space) <= self.SHUFFLE_LIMIT:
            return self._next_shuffled(batch_size)
        batch = []
        taken = set()
        while len(batch) < batch_size:
            i = self._random_unvisited_excluding(taken)
            if i is None:
                break
            taken.add(i)
            batch.append(self.space.get(i))
        return batch

    def _next_shuffled(self, batch_size):
        if getattr(self, "_order", None) is None:
            self._order = [self.space.valid_index(int(i)) for i in self.rng.permutation(len(self.space))]
            self._pos = 0
        batch = []
        while len(batch) < batch_size and self._pos < len(self._order):
            i = self._order[self._pos]
            self._pos += 1
            if i not in self.visited:
                batch.append(self.space.get(i))
        return batch

    def _random_unvisited_excluding(self, taken):
        for _ in range(100):
            i = self._random_unvisited()
            if i is None:
                return None
            if i not in taken:
                return i
        return None


class GridSearchTuner(Tuner):
    """Measure configurations in index order (skipping measured ones)."""

    def __init__(self, task, seed=None):
        super().__init__(task, seed)
        self._pos = 0

    def has_next(self):
        return self._pos < len(self.space) and super().has_next()

    def next_batch(self, batch_size):
        batch = []
        while len(batch) < batch_size and self._pos < len(self.space):
            i = self.space.valid_index(self._pos)
            self._pos += 1
            if i not in self.visited:
                batch.append(self.space.get(i))
        return batch
