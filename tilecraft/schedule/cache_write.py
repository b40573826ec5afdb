"""``Schedule.cache_write``: compute a stage into a cache, then copy the cache out.

The cache stage (``C.local``) computes what the stage computed, over the stage's *current*
data-parallel loops: when the stage was split, fused or reordered before, the cache takes that
loop nest as its own axes (TVM's re-layout: ``i`` split by 4 becomes a cache of shape
``(ceil(n / 4), 4)`` with axes ``i.outer.c, i.inner.c``; a tail's points are guarded). The stage
itself becomes the copy-out, ``C[i] = C.local[i // 4, i % 4]``, with its original axes
(``C.op.axis``) and none of its earlier primitives, as in TVM. A stage of several outputs (a
tuple body) caches all of them at once: ``s.cache_write([C0, C1], "local")``.

A ragged reduce axis (bounds ``row_ptr[i]``, read at the stage's axes) gets a copy in the cache
stage with its bounds written in the cache's axes, and read only inside split tails' guards.

Afterwards: the cache stage precedes the copy-out in ``s.stages``, every reader of the
stage's outputs reads the copy-out's, and the stage's loops are its root axes again.
"""
from __future__ import annotations

from ..ir.expr import BinOp, IterKind, IterVar, Range, Reduce, TensorLoad, Var, binary, const
from ..ir.functor import collect_vars, substitute
from ..ir.simplify import simplify
from ..te.tensor import ComputeOp, Tensor, is_ragged_axis, register_reduce_var


def cache_write(sch, tensor, scope: str):
    """See ``Schedule.cache_write``; returns the cache tensor, or the list of them for a list."""
    from .schedule import ScheduleError, Stage
    several = isinstance(tensor, (list, tuple))
    tensors = list(tensor) if several else [tensor]
    if not tensors:
        raise ScheduleError("cache_write: give a tensor, or the list of a stage's outputs")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise ScheduleError(f"cache_write: expected a tensor, got {t!r}")
    st = sch[tensors[0]]
    op = st.op
    if not isinstance(op, ComputeOp):
        raise ScheduleError(f"cache_write: stage '{st.name}' is not a compute stage")
    for t in tensors[1:]:
        if sch[t] is not st:
            raise ScheduleError(f"cache_write of several tensors: '{t.name}' is not an output of stage "
                                f"'{st.name}'; the tensors must be the outputs of one stage")
    if len(tensors) != len(op.outputs):
        names = ", ".join(t.name for t in op.outputs)
        raise ScheduleError(f"cache_write: stage '{st.name}' has {len(op.outputs)} outputs ({names}); cache "
                            f"them together: s.cache_write([{names}], {scope!r})")
    leaves = [iv for iv in st.leaf_iter_vars if iv not in op.reduce_axis]
    for iv in leaves:
        if iv.kind is not IterKind.DATA_PAR:
            raise ScheduleError(f"cache_write of '{st.name}': its loop '{iv.var.name}' comes from a split or "
                                f"fuse of a reduction axis; only data-parallel loops can become the cache's "
                                f"axes: cache_write before scheduling the reduction axis")
    for other in sch.stages:
        if other.attach_stage is st and other.attach_type == "scope" and other.attach_ivar not in op.axis:
            raise ScheduleError(f"cache_write of '{st.name}': stage '{other.name}' is computed at its loop "
                                f"'{other.attach_ivar.var.name}', which cache_write replaces (the stage gets "
                                f"its original axes back); compute_at after cache_write")
    refs = [sch._tensor_ref(t) for t in op.outputs]

    ext, to_leaves, tails = _leaf_nest(st)
    new_axis = tuple(IterVar(Range(const(0, "int32"), ext[iv]), Var(iv.var.name + ".c", iv.var.dtype),
                             IterKind.DATA_PAR) for iv in leaves)
    leaf_var = {iv.var: new.var for iv, new in zip(leaves, new_axis)}
    vmap = {iv.var: substitute(to_leaves[iv], leaf_var) for iv in op.axis}
    tails = [substitute(c, leaf_var) for c in tails]
    guard = None
    for c in tails:
        guard = c if guard is None else binary(BinOp.AND, guard, c)
    reduce_axis, rmap = _ragged_axes_over(op, vmap, tails)
    body = tuple(_guarded(_over_axes(substitute(b, {**vmap, **rmap}), reduce_axis), guard) for b in op.body)
    name = f"{op.name}.{scope}"
    cache_op = ComputeOp(name, op.tag, op.attrs, new_axis, reduce_axis, body)
    index = tuple(simplify(e) for e in _leaf_indices(st, leaves))
    copy_op = ComputeOp(op.name, op.tag, op.attrs, op.axis, (),
                        tuple(TensorLoad(c, index) for c in cache_op.outputs), tuple(t.name for t in op.outputs))

    cst = Stage(cache_op, sch)
    cst.scope = scope
    sch.stages.insert(sch.stages.index(st), cst)
    sch.stage_map[cache_op] = cst
    old = list(op.outputs)
    st.op = copy_op
    st.all_iter_vars = list(op.axis)      # TVM: C.op.axis stays valid on the copy-out
    st.leaf_iter_vars = list(op.axis)
    st.relations, st.iter_var_attrs = [], {}
    sch.stage_map[copy_op] = st
    sch._replace_inputs([x for x in sch.stages if x is not st and x is not cst], dict(zip(old, copy_op.outputs)))
    return refs, cst, (list(cache_op.outputs) if several else cache_op.output(0))


def _ragged_axes_over(op, vmap: dict, tails: list):
    """The reduce axes of the cache stage: a ragged axis's bounds (``row_ptr[i]``) read the
    stage's axes, so the cache gets a copy of it with the bounds in the cache's own axes
    (``vmap``), read only where the split tails' guards on the loops they use hold (``tails``):
    outside, the range is empty (``row_ptr[rows + 1]`` does not exist). The others are shared.
    Returns the axes and the map of the replaced variables."""
    from ..te.intrin import if_then_else
    axes, rmap = [], {}
    for r in op.reduce_axis:
        if is_ragged_axis(op, r):
            v = Var(r.var.name, r.var.dtype)
            register_reduce_var(v)
            lo, ext = substitute(r.dom.min, vmap), substitute(r.dom.extent, vmap)
            used = collect_vars(lo) | collect_vars(ext)
            guard = None
            for c in tails:
                if collect_vars(c) & used:
                    guard = c if guard is None else binary(BinOp.AND, guard, c)
            if guard is not None:
                lo, ext = if_then_else(guard, lo, const(0, lo.dtype)), if_then_else(guard, ext, const(0, ext.dtype))
            rmap[r.var] = v
            r = IterVar(Range(lo, ext), v, IterKind.REDUCE)
        axes.append(r)
    return tuple(axes), rmap


def _over_axes(e, reduce_axis: tuple):
    """``e`` with its Reduce folding over ``reduce_axis`` (the same axes, ragged ones replaced)."""
    if not isinstance(e, Reduce) or e.axis == reduce_axis:
        return e
    return Reduce(e.combiner, e.source, reduce_axis, e.condition, e.value_index, e.init)


def _leaf_nest(st):
    """Each loop's extent, each root axis as an expression of the loops, and the guards of split
    tails (all in the loops' variables), for the stage's whole domain."""
    from .bound import StageInfo, leaf_values
    info = StageInfo(st, st.op.body, [iv.dom.min for iv in st.op.axis], [iv.dom.extent for iv in st.op.axis])
    leaf_values(info, st)
    return info.extent, info.value, info.conditions


def _leaf_indices(st, leaves) -> list:
    """Each data-parallel loop of ``st`` as an expression of its root axes (where a root point
    lies in the loop nest): a split's outer is ``parent // inner extent``, its inner
    ``parent % inner extent``, a fuse ``outer * inner extent + inner``."""
    from .schedule import Fuse, Singleton, Split
    ext = _leaf_nest(st)[0]
    val = {iv: iv.var for iv in st.op.axis}
    for rel in st.relations:
        if isinstance(rel, Split):
            if rel.parent not in val:
                continue                    # a reduction axis
            inner = ext[rel.inner]
            val[rel.outer] = val[rel.parent] // inner
            val[rel.inner] = val[rel.parent] % inner
        elif isinstance(rel, Singleton):
            val[rel.iv] = const(0, "int32")
        elif rel.outer in val:
            val[rel.fused] = val[rel.outer] * ext[rel.inner] + val[rel.inner]
    return [val[iv] for iv in leaves]


def _guarded(e, guard):
    """``e`` where ``guard`` holds: a reduction folds nothing elsewhere, a value is 0 there."""
    if guard is None:
        return e
    if isinstance(e, Reduce):
        return Reduce(e.combiner, e.source, e.axis, binary(BinOp.AND, guard, e.condition), e.value_index, e.init)
    from ..te.intrin import if_then_else
    return if_then_else(guard, e, const(0, e.dtype))
