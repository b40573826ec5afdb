"""The static index check run by ``lower``: refuse a read that is out of bounds for sure.

Every compute stage is checked as it is defined, over its whole domain (a ``te.scan``'s body
stages from the scan's first step on, where they run; the reference
interpreter evaluates every point too). A read ``T[..., e, ...]`` is refused when ``T``'s
dimension has a constant extent ``n`` and ``e`` provably takes a value outside ``[0, n)`` at some
point of the domain where the read is evaluated. To stay sound ("provably") the check only
looks at what it can compute exactly:

* an index is an exact function of the axes: constants and axes with constant bounds combined
  by ``+ - *const //const truncdiv(const) min max``, each axis at most once. Its smallest and
  largest values over the box of axis ranges are then attained, not just bounds. Anything else
  (a gather ``A[idx[i]]``, ``i % 4``, ``i - i // 4 * 4``, a scalar parameter) is not checked;
* guards narrow the box: the chosen branch of ``te.if_then_else(c, ...)`` and the source of a
  reduction with ``where=c``, when ``c`` is a conjunction (``te.all``, ``and``) of comparisons
  of an axis with a constant. A read under any other guard is not checked (padding patterns are
  guarded with such comparisons, so they are checked and pass);
* ``te.select`` evaluates both sides (``ir/expr.py``): its branches are checked unguarded.

Reads that are not refused here can still go out of bounds at run time with symbolic shapes:
``PassContext(config={"tir.instrument_bound_checkers": True})`` checks every access then.
Afterwards (when nothing is raised) no read of any stage is provably out of bounds.

>>> A = te.placeholder((8,), name="A")
>>> B = te.compute((8,), lambda i: A[i + 100], name="B")
>>> tilecraft.lower(te.create_schedule(B.op), [A, B])
IndexBoundsError: compute 'B' reads A[i + 100] out of bounds: index 0 (`i + 100`) takes the values 100..107 (i in 0..7), but dimension 0 of 'A' has extent 8
"""
from __future__ import annotations

from ..ir import dtype as dt
from ..ir.expr import (BinOp, Binary, Cast, Const, Let, Reduce, Select, TensorLoad, Unary, UnOp, Var,
                       trunc_divide)
from ..ir.functor import children
from ..te.tensor import ComputeOp
from .schedule import ScheduleError


class IndexBoundsError(ScheduleError):
    """A tensor is read at an index outside its shape; the message names the stage, the tensor,
    the index expression and the values it takes."""


def check_indices(sch) -> None:
    """Raise :class:`IndexBoundsError` for the first provably out-of-bounds read of any stage."""
    first_step = _scan_first_steps(sch)
    for st in sch.stages:
        op = st.op
        if not isinstance(op, ComputeOp):
            continue
        box = _domain_box(op)
        t0 = first_step.get(op)
        if t0 is not None and op.axis and op.axis[0].var in box:     # a scan's body: from its first step on
            lo, hi = box[op.axis[0].var]
            box[op.axis[0].var] = (max(lo, t0), hi)
            if max(lo, t0) > hi:
                del box[op.axis[0].var]       # no step at all: nothing to check exactly
        checker = _Checker(op.name)
        for iv in op.reduce_axis:       # a ragged axis's bounds read tensors (row_ptr[i + 1])
            checker.walk(iv.dom.min, box)
            checker.walk(iv.dom.extent, box)
        for b in op.body:
            checker.walk(b, box)


def _scan_first_steps(sch) -> dict:
    """The body stages of every ``te.scan`` with a constant first step: they run (and read) only
    at the steps ``t >= T0`` of their first axis (``s_state[t - 1]`` is then in bounds)."""
    out = {}
    for st in sch.stages:
        t0 = getattr(getattr(st.op, "scan_axis", None), "dom", None)
        if t0 is not None and isinstance(t0.min, Const):
            for op in st.op.body_ops:
                out[op] = t0.min.value
    return out


def reads_in_bounds(op, e) -> bool:
    """Whether evaluating ``e`` (an expression of ``op``'s axes) at every point of ``op``'s whole
    domain, guards ignored, is safe: every read is of a constant-shaped tensor at an index that
    provably stays inside it, and there is no integer division. A vectorized reduction uses it to
    turn ``where=`` into a per-lane select, which evaluates its source at every lane.

    >>> reads_in_bounds(C.op, A[i, k])                  # A: (8, 8); i, k in 0..7
    True
    """
    box = _domain_box(op)
    safe = [True]

    def visit(x):
        t = type(x)
        if t is TensorLoad:
            for idx, n in zip(x.indices, x.tensor.shape):
                r = _exact(idx, box) if isinstance(n, Const) else None
                if r is None or r[0] < 0 or r[1] >= n.value:
                    safe[0] = False
        elif t is Binary and x.op in _TRAPPING and not dt.is_float(x.dtype):
            safe[0] = False
        for c in children(x):
            if safe[0]:
                visit(c)
    visit(e)
    return safe[0]


_TRAPPING = frozenset({BinOp.TRUNCDIV, BinOp.TRUNCMOD, BinOp.FLOORDIV, BinOp.FLOORMOD})


def _domain_box(op) -> dict:
    """Each axis of ``op`` with constant bounds: its smallest and largest value."""
    box = {}
    for iv in list(op.axis) + list(op.reduce_axis):
        lo, ext = iv.dom.min, iv.dom.extent
        if isinstance(lo, Const) and isinstance(ext, Const) and ext.value >= 1:
            box[iv.var] = (lo.value, lo.value + ext.value - 1)
    return box


# ----------------------------------------------------------------------------------------------
# exact ranges: (lo, hi, vars) where lo and hi are attained over the box

_ARITH = {BinOp.ADD, BinOp.SUB, BinOp.MIN, BinOp.MAX}


def _exact(e, box: dict):
    t = type(e)
    if t is Const:
        return (e.value, e.value, frozenset()) if dt.is_int(e.dtype) else None
    if isinstance(e, Var):
        r = box.get(e)
        return None if r is None else (r[0], r[1], frozenset((e,)))
    if t is Unary and e.op is UnOp.NEG:
        a = _exact(e.a, box)
        return None if a is None else (-a[1], -a[0], a[2])
    if t is Cast and dt.is_int(e.dtype) and dt.is_int(e.value.dtype) and dt.bits(e.dtype) >= dt.bits(e.value.dtype):
        return _exact(e.value, box)
    if t is not Binary:
        return None
    a = _exact(e.a, box)
    if a is None:
        return None
    b = _exact(e.b, box)
    if b is None:
        return None
    op = e.op
    if op in _ARITH:
        if a[2] & b[2]:
            return None                     # an axis twice: the extremes may not be attained
        vs = a[2] | b[2]
        if op is BinOp.ADD:
            return _fit(a[0] + b[0], a[1] + b[1], vs, e.dtype)
        if op is BinOp.SUB:
            return _fit(a[0] - b[1], a[1] - b[0], vs, e.dtype)
        if op is BinOp.MIN:
            return (min(a[0], b[0]), min(a[1], b[1]), vs)
        return (max(a[0], b[0]), max(a[1], b[1]), vs)
    c = b[0] if b[0] == b[1] and not b[2] else None
    if op is BinOp.MUL:
        x = a
        if c is None and a[0] == a[1] and not a[2]:
            c, x = a[0], b
        if c is None:
            return None
        lo, hi = (x[0] * c, x[1] * c) if c >= 0 else (x[1] * c, x[0] * c)
        return _fit(lo, hi, x[2], e.dtype)
    if op is BinOp.FLOORDIV and c is not None and c > 0:
        return (a[0] // c, a[1] // c, a[2])
    if op is BinOp.TRUNCDIV and c is not None and c > 0:
        return (trunc_divide(a[0], c), trunc_divide(a[1], c), a[2])
    return None


def _fit(lo, hi, vs, dtype):
    """Integer arithmetic wraps: a range that leaves the dtype is not exact any more."""
    if lo < dt.min_value(dtype) or hi > dt.max_value(dtype):
        return None
    return (lo, hi, vs)


# ----------------------------------------------------------------------------------------------
# guards: the box narrowed by a condition, or None when the condition is not understood

_FLIP = {BinOp.LT: BinOp.GT, BinOp.LE: BinOp.GE, BinOp.GT: BinOp.LT, BinOp.GE: BinOp.LE, BinOp.EQ: BinOp.EQ}
_NEGATE = {BinOp.LT: BinOp.GE, BinOp.LE: BinOp.GT, BinOp.GT: BinOp.LE, BinOp.GE: BinOp.LT}


def _narrow(cond, box: dict, negate: bool = False):
    if isinstance(cond, Const) and dt.is_bool(cond.dtype):
        return box if bool(cond.value) != negate else None
    if isinstance(cond, Unary) and cond.op is UnOp.NOT:
        return _narrow(cond.a, box, not negate)
    if not isinstance(cond, Binary):
        return None
    if cond.op is (BinOp.OR if negate else BinOp.AND):
        inner = _narrow(cond.a, box, negate)
        return None if inner is None else _narrow(cond.b, inner, negate)
    op = cond.op
    if negate:
        op = _NEGATE.get(op)
    a, b = cond.a, cond.b
    if isinstance(a, Const) and isinstance(b, Var):
        a, b, op = b, a, _FLIP.get(op)
    if op is None or not (isinstance(a, Var) and a in box and isinstance(b, Const) and dt.is_int(b.dtype)):
        return None
    lo, hi = box[a]
    c = b.value
    if op is BinOp.LT:
        hi = min(hi, c - 1)
    elif op is BinOp.LE:
        hi = min(hi, c)
    elif op is BinOp.GT:
        lo = max(lo, c + 1)
    elif op is BinOp.GE:
        lo = max(lo, c)
    elif op is BinOp.EQ:
        lo, hi = max(lo, c), min(hi, c)
    else:
        return None
    if lo > hi:
        return None                         # never taken: nothing under it is evaluated
    return {**box, a: (lo, hi)}


class _Checker:
    def __init__(self, stage: str):
        self.stage = stage

    def walk(self, e, box) -> None:
        """Check the reads in ``e``; ``box`` is None where a guard was not understood."""
        t = type(e)
        if t is TensorLoad:
            if box is not None:
                self.check(e, box)
        elif t is Select and e.lazy:
            self.walk(e.condition, box)
            self.walk(e.true_value, None if box is None else _narrow(e.condition, box))
            self.walk(e.false_value, None if box is None else _narrow(e.condition, box, negate=True))
            return
        elif t is Reduce:
            self.walk(e.condition, box)
            guarded = None if box is None else _narrow(e.condition, box)
            for s in e.source:
                self.walk(s, guarded)
            for x in e.init:
                self.walk(x, box)
            return
        elif t is Let:
            self.walk(e.value, box)
            self.walk(e.body, box)          # the let variable is not in the box: not exact
            return
        for c in children(e):
            self.walk(c, box)

    def check(self, load: TensorLoad, box: dict) -> None:
        tensor = load.tensor
        for d, (idx, n) in enumerate(zip(load.indices, tensor.shape)):
            if not isinstance(n, Const):
                continue
            r = _exact(idx, box)
            if r is None:
                continue
            lo, hi, vs = r
            if lo >= 0 and hi < n.value:
                continue
            where = ", ".join(f"{v.name} in {box[v][0]}..{box[v][1]}" for v in sorted(vs, key=lambda v: v.name))
            values = f"{lo}..{hi}" if lo != hi else f"{lo}"
            raise IndexBoundsError(
                f"compute '{self.stage}' reads {tensor.name}[{', '.join(str(i) for i in load.indices)}] out of "
                f"bounds: index {d} (`{idx}`) takes the values {values}" + (f" ({where})" if where else "")
                + f", but dimension {d} of '{tensor.name}' has extent {n.value}")
