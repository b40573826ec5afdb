"""TVM's index-range helpers of a config space: counting, stepping through and drawing the valid
indices (those no ``multi_filter`` removed) of a slice ``[start, end)`` of the index range.

The index-based tuners (``tuner/basic.py``: ``GridSearchTuner``/``RandomTuner`` with
``range_idx=(begin, end)``) walk a slice of a space with them, as TVM's distributed tuning does.
``IndexRangeMixin`` is a base class of ``ConfigSpace``; it uses the space's ``range_length``,
``_constraints`` and ``_valid()`` (the sorted valid indices, computed once per filter).

>>> space.subrange_length(8, 16)            # valid indices among 8..15
>>> space.get_next_index(8, start=8, end=16)
"""
from __future__ import annotations

import numpy as np


class IndexRangeMixin:
    """``subrange_length``, ``get_next_index``, ``get_rand_index`` of ``ConfigSpace`` (TVM's names)."""

    def subrange_length(self, start: int, end: int) -> int:
        """The number of valid indices in ``[start, end)``: ``subrange_length(0, range_length) == len(space)``."""
        if not 0 <= start <= end <= self.range_length:
            raise IndexError(f"index range [{start}, {end}) is not within the space's [0, {self.range_length})")
        if not self._constraints:
            return end - start
        return int(np.searchsorted(self._valid(), end) - np.searchsorted(self._valid(), start))

    def get_next_index(self, index: int, n: int = 1, start: int | None = None, end: int | None = None):
        """The ``n``-th valid index after ``index`` (before it for ``n < 0``) in ``[start, end)``, or None."""
        start, end = start or 0, self.range_length if end is None else end
        if not self._constraints:
            pos = index + n
        else:
            v = self._valid()
            k = int(np.searchsorted(v, index, side="right" if n > 0 else "left")) + (n - 1 if n > 0 else n)
            pos = int(v[k]) if 0 <= k < len(v) else -1
        return pos if start <= pos < end else None

    def get_rand_index(self, start: int | None = None, end: int | None = None, to_exclude=(), rng=None) -> int:
        """A valid index in ``[start, end)`` not in ``to_exclude``, uniformly (``ValueError`` if none is left)."""
        start, end = start or 0, self.range_length if end is None else end
        rng = rng if rng is not None else np.random.default_rng()
        lo, count = (start if not self._constraints else int(np.searchsorted(self._valid(), start)),
                     self.subrange_length(start, end))
        at = (lambda k: lo + k) if not self._constraints else (lambda k: int(self._valid()[lo + k]))
        excluded = set(to_exclude)
        for _ in range(64 if count else 0):
            i = at(int(rng.integers(count)))
            if i not in excluded:
                return i
        left = [at(k) for k in range(count) if at(k) not in excluded]
        if not left:
            raise ValueError(f"get_rand_index: every valid index in [{start}, {end}) is excluded")
        return left[int(rng.integers(len(left)))]
