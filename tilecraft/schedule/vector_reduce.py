"""Reductions in SIMD registers: the loop nest of a reduction whose reduction axis is vectorized.

``s[C].vectorize(k.inner)`` on a reduction axis (constant extent L) gives each lane of ``k.inner``
its own accumulator: the stage folds into a small local buffer ``C.vacc`` (one slot per lane),
and after the reduction loops one horizontal reduction per output point combines the lanes and
the start value (``init=`` or the identity, combined once, not once per lane)::

    for i in range(n):                             for i in range(n):
      C[i] = 0.0                                     C.vacc = allocate(float32[8], "local")
      for k.outer in range(128):                     for k.inner.vacc in vectorized(0, 8):
        for k.inner in vectorized(0, 8):               C.vacc[k.inner.vacc] = 0.0
          C[i] = C[i] + A[i, k.outer * 8 + k.inner]  for k.outer in range(128):
                                                       for k.inner in vectorized(0, 8):
                                                         C.vacc[k.inner] = C.vacc[k.inner] + A[...]
                                                     C[i] = vector_reduce_add(C.vacc[ramp(0, 1, 8)])

The vectorize pass then turns the update into one vector statement (``C.vacc[ramp(0, 1, 8)] =
C.vacc[ramp(0, 1, 8)] + A[ramp(...)]``), which LLVM keeps in a register. The slots:

* every lane of the vectorized reduction axis (the innermost one, when several are vectorized);
* every iteration of an *unrolled* reduction axis of the stage (constant extent): with
  ``ko, ku = split(k.outer, factor=4); unroll(ku)`` there are 4 independent vector accumulators,
  which hides the latency of the add or FMA; at most ``MAX_ACCUMULATORS`` of them (further
  unrolled reduction axes share them);
* every point of the data-parallel axes that lie inside the reduction loops (``[k.outer, j,
  k.inner]``: each ``j`` has its own accumulators).

This reassociates the fold: lane ``l`` sums the points where ``k.inner == l``, and the lanes are
combined at the end. The IR's ``Reduce`` leaves the fold order unspecified (``ir/expr.py``), so
this is legal for every reducer; integer results are exact (wrap-around arithmetic is associative),
min and max are exact, and float sums and products differ from a sequential fold by rounding
(both are within ``(n - 1) * eps * sum(|terms|)`` of the exact sum for n terms).

Reducers whose combine is one operator of the two arguments (``te.sum``, ``te.max``,
``te.min``, a ``comm_reducer`` of ``x * y``, ``x & y``, ...) end with ``VectorReduce``: the
accumulators are combined vertically (a tree of vector operations), then across lanes. Any other
``comm_reducer``, tuple reducers (argmax) included, folds the slots one by one with its combine
function. A split tail (an extent not divisible by L) is peeled off by loop partitioning and runs
lane by lane into the same accumulators (a scalar epilogue); a ``where=`` condition that differs
between lanes keeps the update a scalar loop over the lanes (still one accumulator per lane).

A reduction that also runs across GPU threads (a reduction axis bound to ``threadIdx``) cannot
have a vectorized reduction axis: ``lower`` refuses it, naming the stage and the axes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import dtype as dt
from ..ir.expr import (Binary, BufferLoad, Const, IterKind, Ramp, VectorReduce, Var, VECTOR_REDUCE_OPS,
                       binary, const, convert, select)
from ..ir.functor import substitute
from ..ir.stmt import Allocate, Buffer, BufferStore, For, ForKind, LetStmt, seq

# independent accumulators per vectorized reduction (each L lanes wide); unrolled reduction axes
# beyond this share them
MAX_ACCUMULATORS = 16


@dataclass(frozen=True)
class VectorPlan:
    """Where a vectorized reduction keeps its partial results.

    ``slots``: the leaf axes that index the accumulators, row-major (data axes, then the reduction
    axes, the vectorized one last, so its lanes are contiguous); ``reduce_slots``: how many of the
    last ones are reduction axes; ``accs``: one local buffer per output of the stage.
    """
    lane: object                 # the vectorized reduction IterVar
    slots: tuple
    extents: tuple
    reduce_slots: int
    accs: tuple

    @property
    def lanes(self) -> int:
        return self.extents[-1].value

    @property
    def per_point(self) -> int:
        """Accumulator slots per output point (the reduction slots)."""
        n = 1
        for e in self.extents[len(self.extents) - self.reduce_slots:]:
            n *= e.value
        return n

    def index(self, value_of) -> object:
        """The flat slot index, given each slot axis's value (``value_of(iv)``)."""
        idx = None
        for iv, ext in zip(self.slots, self.extents):
            v = value_of(iv)
            idx = v if idx is None else idx * ext + v
        return idx


def plan_vector_reduction(st, info, buffers: dict) -> VectorPlan | None:
    """The accumulators of ``st``'s reduction if a leaf reduction axis is vectorized with a
    constant extent of at least 2, else None (the ordinary nest: one accumulator, the output)."""
    if not st.op.reduce_axis:
        return None
    leaves = st.leaf_iter_vars
    first = next((k for k, iv in enumerate(leaves) if iv.kind is IterKind.REDUCE), None)
    if first is None:
        return None

    def kind_of(iv):
        attr = st.iter_var_attrs.get(iv)
        return attr.kind if attr is not None else ForKind.SERIAL

    def const_extent(iv):
        e = info.extent[iv]
        return e.value if isinstance(e, Const) else None

    nest = leaves[first:]
    lane = None
    for iv in nest:
        if iv.kind is IterKind.REDUCE and kind_of(iv) is ForKind.VECTORIZED and (const_extent(iv) or 0) >= 2:
            lane = iv                               # the innermost one wins
    if lane is None:
        return None
    data = [iv for iv in nest if iv.kind is not IterKind.REDUCE]
    unrolled, count = [], 1
    for iv in nest:
        n = const_extent(iv)
        if iv is lane or iv.kind is not IterKind.REDUCE or n is None:
            continue
        if kind_of(iv) in (ForKind.UNROLLED, ForKind.VECTORIZED) and count * n <= MAX_ACCUMULATORS:
            unrolled.append(iv)
            count *= n
    slots = tuple(data + unrolled + [lane])
    extents = tuple(info.extent[iv] for iv in slots)
    size = None
    for e in extents:
        size = e if size is None else size * e
    accs = tuple(Buffer(f"{buffers[t].name}.vacc", (size,), t.dtype, "local") for t in st.op.outputs)
    return VectorPlan(lane, slots, extents, len(unrolled) + 1, accs)


def accumulator_index(plan: VectorPlan) -> tuple:
    """Where the reduction's update reads and writes: the slot of the current loop variables."""
    return (plan.index(lambda iv: iv.var),)


def combine_stores(comb, bufs, idxs, srcs, where=None):
    """``bufs[k][idxs[k]] = combine(bufs[..][..], srcs)``: one store, or lets then stores for a
    tuple reducer (every result reads the old values). With ``where`` each store keeps the old
    value where it fails (``select``: both sides are evaluated)."""
    cur = [BufferLoad(b, idx, b.dtype) for b, idx in zip(bufs, idxs)]
    cmap = {**dict(zip(comb.lhs, cur)), **dict(zip(comb.rhs, srcs))}

    def kept(new, old):
        return new if where is None else select(where, new, old)
    if len(bufs) == 1:
        return BufferStore(bufs[0], kept(substitute(comb.result[0], cmap), cur[0]), idxs[0])
    tmp = [Var(f"{b.name}.next", b.dtype) for b in bufs]
    body = seq(*[BufferStore(b, kept(t, old), idx) for b, t, old, idx in zip(bufs, tmp, cur, idxs)])
    for t, r in reversed(list(zip(tmp, comb.result))):
        body = LetStmt(t, substitute(r, cmap), body)
    return body


def vector_reduction_nest(nb, st, info, pos: int, loops):
    """The statement that replaces ``init; loops`` at the stage's first reduction loop ``pos``:
    the accumulators allocated and set to the identity, ``loops`` (whose update ``compute_stmt``
    pointed at the accumulators), then one horizontal reduction per output point."""
    plan = nb.vector_plans[st]
    comb = info.body[0].combiner

    # the accumulators start from the identity (init= is combined once, at the end)
    fresh = {iv: Var(iv.var.name + ".vacc", iv.var.dtype) for iv in plan.slots}
    idx = plan.index(lambda iv: fresh[iv])
    init = seq(*[BufferStore(acc, ident, (idx,)) for acc, ident in zip(plan.accs, comb.identity)])
    for iv in reversed([iv for iv in plan.slots if iv is not plan.lane] + [plan.lane]):
        kind = ForKind.SERIAL if iv.kind is not IterKind.REDUCE else ForKind.UNROLLED
        init = For(fresh[iv], convert(0), info.extent[iv], ForKind.VECTORIZED if iv is plan.lane else kind, init)

    def finish(data_vars: dict, starts, bufs, idxs):
        return _horizontal(plan, comb, data_vars, starts, bufs, idxs)
    final = nb.init_stmt(st, info, pos, finish=finish)
    body = seq(init, loops, final)
    for acc in reversed(plan.accs):
        body = Allocate(acc, body)
    return body


def _binop_of(comb):
    """The operator of a single-value combiner ``x op y`` (either order), else None."""
    if len(comb.lhs) != 1:
        return None
    r, x, y = comb.result[0], comb.lhs[0], comb.rhs[0]
    if type(r) is Binary and r.op in VECTOR_REDUCE_OPS and (
            (r.a is x and r.b is y) or (r.a is y and r.b is x)):
        return r.op
    return None


def _horizontal(plan: VectorPlan, comb, data_vars: dict, starts, bufs, idxs):
    """The stores of one output point: its start values (None: the identity) combined with its
    accumulator slots. ``data_vars`` maps the variables of the data axes inside the reduction
    nest to those of the loops this runs in."""
    n_data = len(plan.slots) - plan.reduce_slots
    per, lanes = plan.per_point, plan.lanes
    base = const(0, "int32")
    if n_data:
        data = plan.slots[:n_data]
        base = None
        for iv, ext in zip(data, plan.extents):
            v = data_vars[iv.var]
            base = v if base is None else base * ext + v
        base = base * per
    op = _binop_of(comb)
    if op is not None:
        acc = plan.accs[0]
        vecs = [BufferLoad(acc, (Ramp(base + u * lanes if u else base, const(1, base.dtype), lanes),),
                           dt.with_lanes(acc.dtype, lanes))
                for u in range(per // lanes)]
        while len(vecs) > 1:                        # a balanced tree of vertical combines
            vecs = [binary(op, vecs[k], vecs[k + 1]) if k + 1 < len(vecs) else vecs[k]
                    for k in range(0, len(vecs), 2)]
        h = VectorReduce(op, vecs[0])
        value = h if starts is None else substitute(comb.result[0], {comb.lhs[0]: starts[0], comb.rhs[0]: h})
        return BufferStore(bufs[0], value, idxs[0])
    # any other combiner (tuple reducers too): fold the slots one at a time
    r = Var("vacc.r", base.dtype)
    first = [BufferStore(b, s, idx) for b, s, idx in zip(bufs, starts or comb.identity, idxs)]
    step = combine_stores(comb, bufs, idxs, [BufferLoad(acc, (base + r,), acc.dtype) for acc in plan.accs])
    return seq(*first, For(r, convert(0), convert(per), ForKind.SERIAL, step))
