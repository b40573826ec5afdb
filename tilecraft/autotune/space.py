"""Config spaces: the knobs of a template and the single integer that picks one value per knob.

A template declares knobs on ``cfg = autotune.get_config()``::

    cfg.define_split("tile_y", y, num_outputs=2)            # all ways to split y's extent
    cfg.define_reorder("order", [yo, xo, k, yi, xi], policy="all")
    cfg.define_annotate("ann", [yi, xi], policy="try_unroll_vec")
    cfg.define_knob("auto_unroll", [0, 512, 1500])
    yo, yi = cfg["tile_y"].apply(s, C, y)

The same template code runs in three modes, decided by what ``get_config()`` returns:

* ``ConfigSpace`` while a task is created: every ``define_*`` records a knob; ``cfg[name]`` gives
  the knob's first value so the template can run to its end.
* ``ConfigEntity`` while one configuration is instantiated: ``define_*`` does nothing and
  ``cfg[name]`` gives the chosen value.
* ``FallbackConfigEntity`` when nothing was tuned: like the space, the first value of every knob
  (for a split: no split at all), and ``cfg.is_fallback`` is true.

A configuration is one mixed-radix integer: knob ``k`` (in definition order) is the digit
``(index // prod(len(knob_j) for j < k)) % len(knob_k)``. ``space.get(i).index == i`` and
``space.knob2point(space.point2knob(i)) == i`` hold for every ``i`` in ``range(len(space))``.
"""
from __future__ import annotations

import itertools
import math
import warnings
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np

from ..error import TVMError
from .space_range import IndexRangeMixin


class StaleConfigError(LookupError):
    """A logged configuration lacks a knob the template asks for: it was tuned with another
    version of the template."""


class UnknownKnobError(KeyError):
    """``cfg[name]`` for a knob the template never defined (a typo, most often); the message
    lists the knobs there are and the closest names.

    >>> cfg["tile_yy"]      # UnknownKnobError: no knob 'tile_yy' (did you mean 'tile_y'?) ...
    """

    def __init__(self, name: str, known: list):
        import difflib

        close = difflib.get_close_matches(str(name), known, n=3)
        hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
        super().__init__(f"no knob {name!r}{hint}; the knobs defined so far are: "
                         f"{', '.join(known) or 'none'}. Define a knob with cfg.define_split/"
                         "define_reorder/define_annotate/define_knob before reading it")
        self.name, self.known = name, known

    def __str__(self) -> str:     # KeyError would quote the whole message
        return self.args[0]


class FallbackSplitError(ValueError, TVMError):
    """``fallback_split`` found no split within the constraints (a RuntimeError, as TVM's)."""


class InstantiationError(ValueError):
    """A configuration that cannot be applied (bad vector width, too large an unroll, ...).

    Raise it from a template, or call ``cfg.raise_error(msg)``; the builder records the config as
    ``MeasureErrorNo.INSTANTIATION_ERROR`` with the message and tuning goes on.
    """


def axis_extent(axis) -> int:
    """The constant extent of ``axis``: a plain int, an IterVar (``axis.dom.extent.value``), or a
    ``VirtualAxis``. Symbolic extents cannot be split by a tuner and raise ``ValueError``."""
    if isinstance(axis, (int, np.integer)):
        return int(axis)
    if isinstance(axis, VirtualAxis):
        return axis.length
    dom = getattr(axis, "dom", None)
    extent = getattr(dom, "extent", None) if dom is not None else None
    if extent is None:
        raise ValueError(f"cannot read an extent from {axis!r}: expected an int or an IterVar")
    if isinstance(extent, (int, np.integer)):
        return int(extent)
    value = getattr(extent, "value", None)
    if isinstance(value, (int, np.integer)):
        return int(value)
    raise ValueError(f"axis {axis_name(axis)} has a symbolic extent {extent!r}; tuning needs a constant")


def axis_name(axis) -> str:
    if isinstance(axis, VirtualAxis):
        return axis.name
    var = getattr(axis, "var", None)
    name = getattr(var, "name", None) or getattr(axis, "name", None)
    return str(name) if name is not None else repr(axis)


class VirtualAxis:
    """An axis known only by its length, for knobs over loops that do not exist yet
    (``cfg.axis(64)``)."""

    def __init__(self, length: int, name: str = "axis"):
        self.length = int(length)
        self.name = name

    def __repr__(self) -> str:
        return f"VirtualAxis({self.length}, {self.name!r})"


def get_factors(n: int) -> list[int]:
    """All divisors of ``n`` in increasing order."""
    small, large = [], []
    for i in range(1, int(math.isqrt(n)) + 1):
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
    return small + large[::-1]


def get_pow2s(n: int) -> list[int]:
    """Powers of two not above ``n`` (``n`` itself need not be one)."""
    return [2**i for i in range(int(math.log2(n)) + 1)] if n >= 1 else [1]


# ---------------------------------------------------------------------------------------------
# Entities: one value of one knob. They are small immutable values that print, compare and
# round-trip through JSON.


class SplitEntity:
    """A split of one axis into ``len(size)`` loops; ``size[0] == -1`` means "whatever is left".

    >>> SplitEntity([-1, 4, 8]).apply(s, C, y)      # returns [y.outer, y.middle, y.inner]
    """

    kind = "sp"

    def __init__(self, size: Sequence[int]):
        self.size = [int(x) for x in size]       # a list, as TVM's (scripts compare it to lists)

    def apply(self, sch, op, axis):
        """Split ``axis`` of stage ``sch[op]`` into ``len(size)`` loops, outermost first."""
        loops = []
        for i in range(1, len(self.size)):
            outer, axis = sch[op].split(axis, factor=int(np.prod(self.size[i:])))
            loops.append(outer)
        return loops + [axis]

    def to_json(self):
        return list(self.size)

    def __eq__(self, other):
        return isinstance(other, SplitEntity) and self.size == other.size

    def __hash__(self):
        return hash(("sp", tuple(self.size)))

    def __repr__(self):
        return f"sp{list(self.size)}"


class ReorderEntity:
    """A permutation of a list of axes: ``perm[i]`` is the position in the input of the ``i``-th
    loop from outside."""

    kind = "re"

    def __init__(self, perm: Sequence[int]):
        self.perm = tuple(int(x) for x in perm)

    def apply(self, sch, op, axes):
        """Reorder ``axes`` of ``sch[op]``; returns them in their new order."""
        ordered = [axes[i] for i in self.perm]
        if list(self.perm) != sorted(self.perm) or len(ordered) != len(axes):
            sch[op].reorder(*ordered)
        return ordered

    def to_json(self):
        return list(self.perm)

    def __eq__(self, other):
        return isinstance(other, ReorderEntity) and self.perm == other.perm

    def __hash__(self):
        return hash(("re", self.perm))

    def __repr__(self):
        return f"re{list(self.perm)}"


#: Annotation names and the number each has in knob features.
ANNOTATIONS = {
    "none": 0, "unroll": 1, "vec": 2, "parallel": 3,
    "blockIdx.x": 4, "blockIdx.y": 5, "blockIdx.z": 6,
    "threadIdx.x": 7, "threadIdx.y": 8, "threadIdx.z": 9,
    "vthread": 10, "fuse": 11,
}
_THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
                "threadIdx.z", "vthread")


class AnnotateEntity:
    """One annotation per axis: ``none``, ``unroll``, ``vec``, ``parallel`` or a GPU thread tag."""

    kind = "an"

    def __init__(self, anns: Sequence[str]):
        self.anns = tuple(str(a) for a in anns)

    def apply(self, sch, op, axes, axis_lens=None, max_unroll=None, vec_size=None, cfg=None):
        """Annotate ``axes`` of ``sch[op]``.

        ``axis_lens`` (the loops' extents) with ``max_unroll`` and ``vec_size`` (allowed vector
        lanes) let the knob flag configurations the target cannot do: they are reported through
        ``cfg.raise_error`` (or raised as ``InstantiationError`` when no ``cfg`` is given).
        """
        def invalid(msg):
            if cfg is not None:
                cfg.raise_error(msg)
            else:
                raise InstantiationError(msg)

        for i, ann in enumerate(self.anns):
            if ann == "none":
                continue
            if ann == "unroll":
                if max_unroll is not None and axis_lens is not None and axis_lens[i] > max_unroll:
                    invalid(f"unroll of a loop of {axis_lens[i]} iterations exceeds max_unroll={max_unroll}")
                sch[op].unroll(axes[i])
            elif ann == "vec":
                if vec_size is not None and axis_lens is not None and axis_lens[i] not in vec_size:
                    invalid(f"vector width {axis_lens[i]} is not one of {list(vec_size)}")
                sch[op].vectorize(axes[i])
            elif ann == "parallel":
                sch[op].parallel(axes[i])
            elif ann in _THREAD_TAGS:
                from tilecraft import te  # the compiler core, needed only when binding

                sch[op].bind(axes[i], te.thread_axis(ann))
            elif ann == "fuse":
                continue  # handled by the caller: "fuse" marks axes fused before binding
            else:
                raise ValueError(f"unknown annotation {ann!r}")
        return list(axes)

    def to_json(self):
        return list(self.anns)

    def __eq__(self, other):
        return isinstance(other, AnnotateEntity) and self.anns == other.anns

    def __hash__(self):
        return hash(("an", self.anns))

    def __repr__(self):
        return f"an{list(self.anns)}"


class OtherOptionEntity:
    """A value chosen from a ``define_knob`` list; read it with ``.val``."""

    kind = "ot"

    def __init__(self, val):
        # JSON turns tuples into lists: keep one form so logged values compare equal
        self.val = _tuplify(val)

    def to_json(self):
        return self.val

    def __eq__(self, other):
        return isinstance(other, OtherOptionEntity) and self.val == other.val

    def __hash__(self):
        return hash(("ot", repr(self.val)))

    def __repr__(self):
        return f"ot({self.val!r})"


def _tuplify(x):
    return tuple(_tuplify(a) for a in x) if isinstance(x, (list, tuple)) else x


_ENTITY_KINDS = {"sp": SplitEntity, "re": ReorderEntity, "an": AnnotateEntity, "ot": OtherOptionEntity}


def entity_from_json(kind: str, value) -> Any:
    if kind not in _ENTITY_KINDS:
        raise ValueError(f"unknown knob kind {kind!r}")
    return _ENTITY_KINDS[kind](value)


# ---------------------------------------------------------------------------------------------
# Knob spaces: the list of values one knob can take.


class KnobSpace:
    """The values of one knob, in a fixed order (their position is the knob's digit)."""

    kind = "?"

    def __init__(self):
        self.entities: list = []

    def __len__(self) -> int:
        return len(self.entities)

    def __getitem__(self, i: int):
        return self.entities[i]

    def index(self, entity) -> int:
        return self.entities.index(entity)


class SplitSpace(KnobSpace):
    """All splits of an extent into ``num_outputs`` loops allowed by ``policy``.

    * ``factors``: inner factors divide the extent exactly (no tail).
    * ``power2``: inner factors are powers of two (a tail loop may remain).
    * ``verbose``: factors and powers of two together.
    * ``candidate``: exactly the sizes in ``candidate`` (each a list of ``num_outputs`` ints).

    ``max_factor`` bounds each inner factor; ``filter`` (a predicate on a ``SplitEntity``) drops
    entities.
    """

    kind = "sp"

    def __init__(self, product: int, num_outputs: int = 2, policy: str = "factors",
                 max_factor: int | None = None, filter: Callable | None = None,
                 candidate: Sequence[Sequence[int]] | None = None, no_tail: bool | None = None):
        super().__init__()
        if num_outputs < 1:
            raise ValueError("num_outputs must be at least 1")
        self.product = int(product)
        self.num_outputs = int(num_outputs)
        self.policy = policy
        max_factor = max_factor or (1 << 31)
        if policy == "candidate":
            if not candidate:
                raise ValueError("define_split(policy='candidate') needs candidate=[[...], ...]")
            for size in candidate:
                if len(size) != num_outputs:
                    raise ValueError(f"candidate {list(size)} does not have {num_outputs} outputs")
                self.entities.append(SplitEntity(size))
        else:
            if policy == "factors":
                factors, enforce_no_tail = get_factors(self.product), True
            elif policy == "power2":
                factors, enforce_no_tail = get_pow2s(self.product), False
            elif policy == "verbose":
                factors = sorted(set(get_factors(self.product)) | set(get_pow2s(self.product)))
                enforce_no_tail = False
            else:
                raise ValueError(f"unknown split policy {policy!r}: expected factors, power2, verbose or candidate")
            if no_tail is not None:
                enforce_no_tail = no_tail
            factors = [f for f in factors if f <= max_factor]
            self._generate(factors, enforce_no_tail)
        if filter is not None:
            self.entities = [e for e in self.entities if filter(e)]
        if not self.entities:
            raise ValueError(f"split of extent {self.product} with policy {policy!r} has no valid entity")

    def _generate(self, factors: list[int], enforce_no_tail: bool) -> None:
        # Inner sizes from innermost outwards; the outermost is always -1 ("the rest").
        def rec(inner_sizes: list[int], prod: int):
            if len(inner_sizes) == self.num_outputs - 1:
                self.entities.append(SplitEntity([-1] + inner_sizes[::-1]))
                return
            for f in factors:
                p = prod * f
                if p > self.product:
                    break
                if enforce_no_tail and self.product % p != 0:
                    continue
                rec(inner_sizes + [f], p)

        rec([], 1)

    def __repr__(self):
        return f"Split(policy={self.policy}, product={self.product}, num_outputs={self.num_outputs}) len={len(self)}"


class ReorderSpace(KnobSpace):
    """Orders of ``n`` axes: ``identity``, ``all`` (every permutation), ``interval_all``
    (permute only positions ``interval=(lo, hi)``) or ``candidate`` (given orders of the axes)."""

    kind = "re"

    def __init__(self, axes: Sequence, policy: str = "all", interval=None, candidate=None,
                 filter: Callable | None = None):
        super().__init__()
        n = len(axes)
        self.num_axes = n
        self.policy = policy
        if policy == "identity":
            perms = [tuple(range(n))]
        elif policy == "all":
            perms = list(itertools.permutations(range(n)))
        elif policy == "interval_all":
            if interval is None:
                raise ValueError("define_reorder(policy='interval_all') needs interval=(begin, end)")
            lo, hi = interval
            perms = [tuple(range(lo)) + p + tuple(range(hi, n))
                     for p in itertools.permutations(range(lo, hi))]
        elif policy == "candidate":
            if not candidate:
                raise ValueError("define_reorder(policy='candidate') needs candidate=[[axes...], ...]")
            perms = [tuple(_position(axes, ax) for ax in order) for order in candidate]
        else:
            raise ValueError(f"unknown reorder policy {policy!r}: expected identity, all, interval_all or candidate")
        self.entities = [ReorderEntity(p) for p in perms]
        if filter is not None:
            self.entities = [e for e in self.entities if filter(e)]
        if not self.entities:
            raise ValueError("reorder space has no valid entity")

    def __repr__(self):
        return f"Reorder(policy={self.policy}, num_axes={self.num_axes}) len={len(self)}"


def _position(axes: Sequence, ax) -> int:
    for i, a in enumerate(axes):
        if a is ax:
            return i
    if isinstance(ax, int):
        return ax
    names = [axis_name(a) for a in axes]
    if axis_name(ax) in names:
        return names.index(axis_name(ax))
    raise ValueError(f"axis {axis_name(ax)} of a candidate order is not among {names}")


class AnnotateSpace(KnobSpace):
    """Annotations of ``n`` axes.

    * ``unroll`` / ``vec`` / ``parallel``: fixed (all unrolled / last vectorized / first parallel).
    * ``try_unroll``: each axis unrolled or not; ``try_vec``: last axis vectorized or not;
      ``try_unroll_vec``: both; ``try_parallel``: first axis parallel or not.
    * ``bind_gpu``: bind 2, 4 or 6 axes to blockIdx (outer half) and threadIdx (inner half), or
      ``candidate``: explicit lists of annotation names.
    """

    kind = "an"

    def __init__(self, axes: Sequence, policy: str = "try_unroll", candidate=None,
                 filter: Callable | None = None):
        super().__init__()
        n = len(axes)
        self.num_axes = n
        self.policy = policy
        if policy == "candidate":
            if not candidate:
                raise ValueError("define_annotate(policy='candidate') needs candidate=[[ann, ...], ...]")
            choices = [list(c) for c in candidate]
            for c in choices:
                for a in c:
                    if a not in ANNOTATIONS:
                        raise ValueError(f"unknown annotation {a!r}")
            self.entities = [AnnotateEntity(c) for c in choices]
        elif policy == "bind_gpu":
            if n not in (2, 4, 6):
                raise ValueError("define_annotate(policy='bind_gpu') needs 2, 4 or 6 axes (blocks then threads)")
            dims = ["z", "y", "x"][3 - n // 2:]
            anns = [f"blockIdx.{d}" for d in dims] + [f"threadIdx.{d}" for d in dims]
            self.entities = [AnnotateEntity(anns)]
        else:
            per_axis: list[list[str]] = [["none"] for _ in range(n)]
            words = policy.split("_")
            fixed = words[0] != "try"
            kinds = words if fixed else words[1:]
            if not kinds or any(k not in ("unroll", "vec", "parallel") for k in kinds):
                raise ValueError(f"unknown annotate policy {policy!r}: expected unroll, vec, try_unroll, "
                                 "try_vec, try_unroll_vec, try_parallel, bind_gpu or candidate")
            if "unroll" in kinds:
                per_axis = [(["unroll"] if fixed else c + ["unroll"]) for c in per_axis]
            if "vec" in kinds and n:
                per_axis[-1] = ["vec"] if fixed else per_axis[-1] + ["vec"]
            if "parallel" in kinds and n:
                per_axis[0] = ["parallel"] if fixed else per_axis[0] + ["parallel"]
            self.entities = [AnnotateEntity(c) for c in itertools.product(*per_axis)]
        if filter is not None:
            self.entities = [e for e in self.entities if filter(e)]
        if not self.entities:
            raise ValueError("annotate space has no valid entity")

    def __repr__(self):
        return f"Annotate(policy={self.policy}, num_axes={self.num_axes}) len={len(self)}"


class OtherOptionSpace(KnobSpace):
    """The values of a ``define_knob`` list."""

    kind = "ot"

    def __init__(self, candidate: Sequence):
        super().__init__()
        if not len(candidate):
            raise ValueError("define_knob needs at least one candidate value")
        self.entities = [OtherOptionEntity(v) for v in candidate]

    def __repr__(self):
        return f"OtherOption({[e.val for e in self.entities]}) len={len(self)}"


# ---------------------------------------------------------------------------------------------
# The space and its points.


class ConfigSpace(IndexRangeMixin):
    """The knobs of a task, collected while its template runs once (see the module docstring).

    ``len(space)`` is the number of configurations (after ``multi_filter``); ``space.get(i)``
    the ``i``-th. ``print(space)`` lists the knobs. TVM's index-range helpers
    (``subrange_length``, ``get_next_index``, ``get_rand_index``) come from ``space_range.py``.
    """

    is_fallback = False

    def __init__(self):
        self.space_map: "OrderedDict[str, KnobSpace]" = OrderedDict()
        self._entity_map: "OrderedDict[str, Any]" = OrderedDict()
        self._constraints: list[Callable] = []
        self._valid_indices: np.ndarray | None = None
        self._collect = True
        self.flop = 0
        self.errors: list[str] = []
        self.code_hash = None

    # -- template API ----------------------------------------------------------------------
    def axis(self, var, name: str | None = None) -> VirtualAxis:
        """A ``VirtualAxis`` with the extent of ``var`` (an int or an IterVar)."""
        return VirtualAxis(axis_extent(var), name or axis_name(var))

    reduce_axis = axis

    def define_split(self, name: str, axis, policy: str = "factors", num_outputs: int = 2,
                     max_factor: int | None = None, filter: Callable | None = None,
                     candidate=None, no_tail: bool | None = None):
        """Knob ``name``: ways to split ``axis`` (an IterVar with a constant extent, or an int)
        into ``num_outputs`` loops. Apply with ``cfg[name].apply(s, T, axis)``."""
        if self._collect:
            self._add(name, SplitSpace(axis_extent(axis), num_outputs, policy, max_factor, filter,
                                       candidate, no_tail))

    def define_reorder(self, name: str, axes: Sequence, policy: str = "all", **kwargs):
        """Knob ``name``: orders of ``axes``. Apply with ``cfg[name].apply(s, T, axes)``."""
        if self._collect:
            self._add(name, ReorderSpace(axes, policy, **kwargs))

    def define_annotate(self, name: str, axes: Sequence, policy: str = "try_unroll", **kwargs):
        """Knob ``name``: annotations of ``axes``. Apply with ``cfg[name].apply(s, T, axes, ...)``."""
        if self._collect:
            self._add(name, AnnotateSpace(axes, policy, **kwargs))

    def define_knob(self, name: str, candidate: Sequence):
        """Knob ``name``: one value of ``candidate``; read it with ``cfg[name].val``."""
        if self._collect:
            self._add(name, OtherOptionSpace(candidate))

    def multi_filter(self, filter: Callable[[Any], bool]):
        """Drop configurations for which ``filter(cfg_entity)`` is false (a constraint across
        knobs, e.g. ``lambda e: e["tile_x"].size[-1] * e["tile_y"].size[-1] <= 1024``)."""
        if self._collect:
            self._constraints.append(filter)
            self._valid_indices = None

    def add_flop(self, flop: float):
        """Add to the floating-point operations one run performs (used for GFLOP/s)."""
        self.flop += flop

    def raise_error(self, msg: str):
        """Flag the current configuration as invalid; the builder reports it with ``msg``."""
        if not self._collect:
            self.errors.append(str(msg))

    def valid(self) -> bool:
        return not self.errors

    def _add(self, name: str, space: KnobSpace):
        # TVM: a knob defined again replaces the earlier one in its place (its digit of the index
        # stays where it was); one that offers other values than before is likely a mistake.
        old = self.space_map.get(name)
        if old is not None and list(old) != list(space):
            warnings.warn(f"knob {name!r} is defined again with other values; the last definition "
                          f"replaces the first ({len(old)} -> {len(space)} values)", UserWarning, stacklevel=3)
        self.space_map[name] = space
        self._entity_map[name] = space[0]
        self._valid_indices = None

    def __getitem__(self, name: str):
        try:
            return self._entity_map[name]
        except KeyError:
            raise UnknownKnobError(name, list(self._entity_map)) from None

    def __contains__(self, name: str) -> bool:
        return name in self._entity_map

    def mismatch(self, config) -> str | None:
        """Why ``config`` (e.g. a logged ``ConfigEntity``) is not a point of this space — other
        knob names or order (another version of the template), a value the knob does not
        offer, or a ``multi_filter`` that rejects it — or None when it is one.

        >>> space.mismatch(logged_config)
        "knob 'tile_y' = sp[-1, 13] is not one of the values the template offers now"
        """
        return self._match(config)[1]

    def index_of(self, config) -> int | None:
        """The index of ``config`` in this space, found knob by knob (not trusting the logged
        index); None when ``mismatch(config)`` has a reason.

        >>> space.index_of(space.get(17))
        17
        """
        return self._match(config)[0]

    def _match(self, config):
        names = list(config._entity_map)
        if names != list(self.space_map):
            return None, (f"its knobs {names} are not the template's {list(self.space_map)} "
                          "(logged for another version of the template)")
        digits = []
        for name, value in config._entity_map.items():
            try:
                digits.append(self.space_map[name].index(value))
            except ValueError:
                return None, f"knob {name!r} = {value!r} is not one of the values the template offers now"
        index = self.knob2point(digits)
        if not self.is_index_valid(index):
            return None, "a multi_filter of the template rejects it"
        return index, None

    # -- points ----------------------------------------------------------------------------
    @property
    def dims(self) -> list[int]:
        """The length of every knob, in definition order (the radices of the index)."""
        return [len(s) for s in self.space_map.values()]

    @property
    def range_length(self) -> int:
        """The number of indices before ``multi_filter``: the product of the knobs' lengths."""
        return int(np.prod(self.dims, dtype=object)) if self.space_map else 1

    def point2knob(self, point: int) -> list[int]:
        """Index → the digit of every knob."""
        knob = []
        for d in self.dims:
            knob.append(point % d)
            point //= d
        return knob

    def knob2point(self, knob: Sequence[int]) -> int:
        """The digit of every knob → index."""
        point, mul = 0, 1
        for k, d in zip(knob, self.dims):
            point += int(k) * mul
            mul *= d
        return point

    def _entity_of(self, index: int) -> "ConfigEntity":
        if not 0 <= index < self.range_length:
            raise IndexError(f"config index {index} out of range [0, {self.range_length})")
        entities = OrderedDict()
        t = index
        for name, space in self.space_map.items():
            entities[name] = space[t % len(space)]
            t //= len(space)
        return ConfigEntity(index, self.code_hash, entities)

    def is_index_valid(self, index: int) -> bool:
        """Whether ``index`` is in range and passes every ``multi_filter``."""
        if not 0 <= index < self.range_length:
            return False
        if not self._constraints:
            return True
        entity = self._entity_of(index)
        return all(c(entity) for c in self._constraints)

    def _valid(self) -> np.ndarray:
        if self._valid_indices is None:
            self._valid_indices = np.array(
                [i for i in range(self.range_length) if self.is_index_valid(i)], dtype=np.int64)
        return self._valid_indices

    def __len__(self) -> int:
        if not self._constraints:
            return self.range_length
        return len(self._valid())

    def get(self, index: int) -> "ConfigEntity":
        """The configuration with mixed-radix ``index`` (in ``range(range_length)``). As in TVM,
        an index that a ``multi_filter`` removed is an ``IndexError`` (``is_index_valid`` checks
        first); the ``i``-th of the ``len(space)`` valid configurations is
        ``get(valid_index(i))``, and iterating the space yields them."""
        index = int(index)
        entity = self._entity_of(index)
        if self._constraints and not all(c(entity) for c in self._constraints):
            raise IndexError(f"config index {index} is removed by the template's multi_filter; "
                             f"check with space.is_index_valid(i), or take the i-th valid config with "
                             f"space.get(space.valid_index(i)), i < len(space) = {len(self)}")
        return entity

    def valid_index(self, i: int) -> int:
        """The index of the ``i``-th valid configuration (``i`` in ``range(len(space))``)."""
        if not self._constraints:
            return int(i)
        return int(self._valid()[i])

    def __iter__(self):
        for i in range(len(self)):
            yield self.get(self.valid_index(i))

    def sample_ints(self, m: int, rng: np.random.Generator | None = None) -> list[int]:
        """``m`` distinct valid indices drawn uniformly (fewer if the space is smaller)."""
        rng = rng if rng is not None else np.random.default_rng()
        n = len(self)
        m = min(m, n)
        if n <= 1 << 62 and n < 4 * m + 1000:
            picks = rng.choice(n, size=m, replace=False)
            return [self.valid_index(int(i)) for i in picks]
        seen: set[int] = set()
        while len(seen) < m:
            i = _random_index(rng, self.range_length)
            if self.is_index_valid(i):
                seen.add(i)
        return list(seen)

    def random_walk(self, point: int, rng: np.random.Generator | None = None) -> int:
        """A valid neighbour of ``point``: one knob changed to another of its values."""
        rng = rng if rng is not None else np.random.default_rng()
        knob = self.point2knob(point)
        movable = [i for i, d in enumerate(self.dims) if d > 1]
        if not movable:
            return point
        for _ in range(100):
            new = list(knob)
            i = movable[rng.integers(len(movable))]
            new[i] = (knob[i] + 1 + rng.integers(self.dims[i] - 1)) % self.dims[i]
            p = self.knob2point(new)
            if self.is_index_valid(p):
                return p
        return point

    def __repr__(self) -> str:
        lines = [f"ConfigSpace (len={len(self)}, range_length={self.range_length}, space_map=)"]
        for i, (name, space) in enumerate(self.space_map.items()):
            lines.append(f"  {i:2d} {name}: {space!r}")
        if self._constraints:
            lines.append(f"  with {len(self._constraints)} multi_filter constraint(s)")
        return "\n".join(lines)

    __str__ = __repr__


def _random_index(rng: np.random.Generator, n: int) -> int:
    if n < 1 << 62:
        return int(rng.integers(n))
    return int(rng.integers(1 << 62)) * (n // (1 << 62) + 1) % n  # very large spaces: good enough


class ConfigEntity(ConfigSpace):
    """One configuration: ``cfg[name]`` is the chosen entity of knob ``name``; ``cfg.index``
    its mixed-radix integer. ``define_*`` calls are no-ops on it."""

    def __init__(self, index: int | None, code_hash, entity_map):
        super().__init__()
        self.index = index
        self.code_hash = code_hash
        self._entity_map = OrderedDict(entity_map)
        self._collect = False

    def __getitem__(self, name: str):
        try:
            return self._entity_map[name]
        except KeyError:
            raise StaleConfigError(
                f"the configuration has no knob {name!r} (its knobs: {', '.join(self._entity_map) or 'none'}); "
                "it was logged for another version of the template") from None

    @property
    def dims(self):
        raise AttributeError("a ConfigEntity is one point; ask its ConfigSpace for dims")

    def __len__(self):
        return 1

    def get_flatten_feature(self) -> np.ndarray:
        """The knob values as numbers (split sizes as log2, orders, annotations as codes):
        the ``knob`` feature type."""
        fea: list[float] = []
        for v in self._entity_map.values():
            if isinstance(v, SplitEntity):
                fea.extend(math.log2(x) if x > 0 else -1.0 for x in v.size)
            elif isinstance(v, ReorderEntity):
                fea.extend(v.perm)
            elif isinstance(v, AnnotateEntity):
                fea.extend(ANNOTATIONS[a] for a in v.anns)
            else:
                fea.append(_knob_number(v.val))
        return np.array(fea, dtype=np.float32)

    def get_other_option(self) -> dict:
        return {k: v.val for k, v in self._entity_map.items() if isinstance(v, OtherOptionEntity)}

    def to_json_dict(self) -> dict:
        """``{"index": i, "code_hash": h, "knobs": [[name, kind, value], ...]}``."""
        return {
            "index": self.index,
            "code_hash": self.code_hash,
            "knobs": [[k, v.kind, v.to_json()] for k, v in self._entity_map.items()],
        }

    @staticmethod
    def from_json_dict(d: dict) -> "ConfigEntity":
        entities = OrderedDict((k, entity_from_json(kind, v)) for k, kind, v in d["knobs"])
        return ConfigEntity(d.get("index"), d.get("code_hash"), entities)

    def __eq__(self, other):
        return (isinstance(other, ConfigEntity) and not isinstance(other, FallbackConfigEntity)
                and self.index == other.index and self._entity_map == other._entity_map)

    def __hash__(self):
        return hash((self.index, tuple(self._entity_map.items())))

    def __repr__(self):
        knobs = ",".join(f"{k}={v!r}" for k, v in self._entity_map.items())
        return f"[{knobs}],{self.code_hash},{self.index}"

    __str__ = __repr__


def _knob_number(val) -> float:
    if isinstance(val, bool):
        return float(val)
    if isinstance(val, (int, float, np.integer, np.floating)):
        return float(val)
    return float(hash(str(val)) % 1000)


class FallbackConfigEntity(ConfigSpace):
    """What a template gets when no tuned configuration exists: every knob at its first value
    (no split, identity order, no annotation). ``cfg.is_fallback`` is true so a template can pick
    better defaults itself; ``cfg[name] = SplitEntity([...])`` overrides one knob."""

    is_fallback = True

    def __init__(self):
        super().__init__()
        self.index = -1

    def __setitem__(self, name: str, entity):
        self._entity_map[name] = entity

    def _add(self, name: str, space: KnobSpace):
        # The same fallback answers every call of a template: keep what the first call defined
        # (and what fallback_split/__setitem__ chose).
        if name not in self.space_map:
            self.space_map[name] = space
            self._entity_map.setdefault(name, space[0])

    def fallback_split(self, name: str, constraints: Sequence[int]):
        """Choose knob ``name``'s split as TVM's fallback does: from the innermost loop out, the
        largest factor of what is left that is at most that loop's constraint (``-1``: no bound),
        the outermost loop taking the rest, so every size is resolved (no ``-1``):
        ``fallback_split("tile", [-1, 8, 4])`` of 128 is ``[4, 8, 4]``."""
        space = self.space_map[name]
        if not isinstance(space, SplitSpace):
            raise ValueError(f"fallback_split: knob {name!r} is not a split (define_split)")
        if len(constraints) != space.num_outputs:
            raise ValueError(f"fallback_split: knob {name!r} splits into {space.num_outputs} loops, "
                             f"got {len(constraints)} constraints {list(constraints)}")
        size, left = [0] * space.num_outputs, space.product
        for i in reversed(range(space.num_outputs)):
            bound = math.inf if constraints[i] == -1 else constraints[i]
            fits = [f for f in get_factors(left) if f <= bound]
            if not fits:
                raise FallbackSplitError(f"fallback_split: no split of knob {name!r} ({space.product}) fits the "
                                 f"constraints {list(constraints)}")
            size[i] = max(fits)
            left //= size[i]
        self._entity_map[name] = SplitEntity(size)

    def __repr__(self):
        knobs = ",".join(f"{k}={v!r}" for k, v in self._entity_map.items())
        return f"Fallback[{knobs}]"

    __str__ = __repr__
