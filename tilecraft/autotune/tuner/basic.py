"""Model-free tuners: uniform random sampling and grid search, over the whole space or, as in
TVM's index-based tuners, over a slice of its indices (``range_idx``).

``range_idx=(begin, end)`` (both inclusive, as TVM) limits a tuner to the indices
``begin..end``; afterwards ``begin_idx``/``end_idx`` hold ``[begin, end + 1)`` (end exclusive),
``range_length`` the slice's length and ``visited_max`` its number of valid configs (those no
``multi_filter`` removed): ``has_next()`` is false once all of them are measured. Separate jobs
tuning disjoint slices of one space cover it without measuring a config twice.
"""
from __future__ import annotations

from .tuner import Tuner


class IndexBaseTuner(Tuner):
    """A tuner that proposes indices of one slice ``[begin_idx, end_idx)`` of the space (TVM's
    ``IndexBaseTuner``); the whole space by default.

    >>> GridSearchTuner(task, range_idx=(8, 15)).visited_max      # configs 8..15 that are valid
    8
    """

    def __init__(self, task, range_idx: tuple[int, int] | None = None, seed: int | None = None):
        super().__init__(task, seed)
        n = self.space.range_length
        if range_idx is None:
            range_idx = (0, n - 1)
        where = f"{type(self).__name__} of task {getattr(task, 'name', task)}"
        if (not isinstance(range_idx, (tuple, list)) or len(range_idx) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in range_idx)):
            raise ValueError(f"{where}: range_idx must be None or a pair of ints (begin, end), got {range_idx!r}")
        begin, last = range_idx
        if not 0 <= begin <= last < n:
            raise ValueError(f"{where}: range_idx={tuple(range_idx)} must satisfy 0 <= begin <= end < "
                             f"{n} (the space's range_length; both ends inclusive)")
        self.begin_idx, self.end_idx = begin, last + 1
        self.range_length = self.end_idx - self.begin_idx
        self.visited_max = self.space.subrange_length(self.begin_idx, self.end_idx)
        constrained = bool(self.space._constraints)
        self._first_valid = int(self.space._valid().searchsorted(begin)) if constrained else begin

    def _range_index(self, k: int) -> int:
        """The index of the ``k``-th valid config of the slice (``k < visited_max``)."""
        if not self.space._constraints:
            return self._first_valid + k
        return int(self.space._valid()[self._first_valid + k])

    def _visited_in_range(self) -> int:
        if self.range_length == self.space.range_length:
            return len(self.visited)
        return sum(1 for i in self.visited if self.begin_idx <= i < self.end_idx)

    def has_next(self) -> bool:
        return self._visited_in_range() < self.visited_max


class RandomTuner(IndexBaseTuner):
    """Measure configurations drawn uniformly without replacement (from the slice ``range_idx``
    if given).

    >>> RandomTuner(task, seed=0).tune(64, measure_option)
    >>> RandomTuner(task, range_idx=(0, 999)).tune(1000, measure_option)    # this job's slice
    """

    #: slices up to this size are walked in one shuffled order (O(1) a draw); larger ones sampled
    SHUFFLE_LIMIT = 1 << 16

    def next_batch(self, batch_size):
        if self.visited_max <= self.SHUFFLE_LIMIT:
            return self._next_shuffled(batch_size)
        batch, taken = [], set()
        while len(batch) < batch_size and self._visited_in_range() + len(batch) < self.visited_max:
            i = self._random_unvisited_excluding(taken)
            if i is None:
                break
            taken.add(i)
            batch.append(self.space.get(i))
        return batch

    def _next_shuffled(self, batch_size):
        if getattr(self, "_order", None) is None:
            self._order = [self._range_index(int(k)) for k in self.rng.permutation(self.visited_max)]
            self._pos = 0
        batch = []
        while len(batch) < batch_size and self._pos < len(self._order):
            i = self._order[self._pos]
            self._pos += 1
            if i not in self.visited:
                batch.append(self.space.get(i))
        return batch

    def _random_unvisited_excluding(self, taken):
        for _ in range(10000):
            i = self._range_index(int(self.rng.integers(self.visited_max)))
            if i not in self.visited and i not in taken:
                return i
        return None


class GridSearchTuner(IndexBaseTuner):
    """Measure configurations in index order (skipping measured ones), over the slice
    ``range_idx`` if given. ``index`` is the next index it proposes (TVM's attribute).

    >>> GridSearchTuner(task, range_idx=(8, 15)).tune(8, measure_option)
    """

    def __init__(self, task, range_idx: tuple[int, int] | None = None, seed: int | None = None):
        super().__init__(task, range_idx, seed)
        self._pos = 0

    @property
    def index(self) -> int:
        """The next index to propose (``end_idx`` when the slice is done)."""
        return self._range_index(self._pos) if self._pos < self.visited_max else self.end_idx

    def has_next(self):
        return self._pos < self.visited_max and super().has_next()

    def next_batch(self, batch_size):
        batch = []
        while len(batch) < batch_size and self._pos < self.visited_max:
            i = self._range_index(self._pos)
            self._pos += 1
            if i not in self.visited:
                batch.append(self.space.get(i))
        return batch
