"""``s.rfactor(C, ki)``: turn one reduction into a parallel partial reduction plus a final one.

Before (``k`` split into ``ko, ki``)::

    C[i] = sum(A[i, ko*4 + ki], axis=[ko, ki])

After ``CF = s.rfactor(C, ki)``::

    CF[ki, i] = sum(A[i, ko*4 + ki], axis=[ko])     # ki is now a data-parallel axis of CF
    C[i]      = sum(CF[ki', i], axis=[ki'])

A reduction with ``init=`` keeps it in the final stage; the partials start from the identity.
"""
from __future__ import annotations

from ..ir.expr import (Const, IterKind, IterVar, Range, Reduce, TensorLoad, Var, binary, BinOp,
                       const, convert, select)
from ..ir.functor import substitute
from ..ir.simplify import simplify
from ..te.tensor import ComputeOp, Tensor, is_ragged_axis
from ..te.operation import register_reduce_var


def rfactor(s, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> Tensor:
    from .schedule import ScheduleError, Split, Fuse

    st = s[tensor]
    op = st.op
    what = f"rfactor of '{st.name}'"
    if not isinstance(op, ComputeOp) or not op.reduce_axis:
        raise ScheduleError(f"{what}: the stage is not a reduction")
    k = st._leaf_index(axis, what)
    axis = st.leaf_iter_vars[k]
    if axis.kind is not IterKind.REDUCE:
        raise ScheduleError(f"{what}: axis '{axis.var.name}' is not a reduction axis")
    if any(isinstance(r, Fuse) for r in st.relations):
        raise ScheduleError(f"{what}: rfactor after fuse is not supported")
    if not 0 <= factor_axis <= len(op.axis):
        raise ScheduleError(f"{what}: factor_axis must be between 0 and {len(op.axis)}")

    data_axis = [IterVar(iv.dom, Var(iv.var.name, iv.var.dtype), IterKind.DATA_PAR) for iv in op.axis]
    # a ragged axis's bounds are written in the op's axes: in the new op, in its own axes
    amap = {old.var: new.var for old, new in zip(op.axis, data_axis)}
    # extents of the reduce axes (symbolic and ragged ones included), outermost relations first
    ext = {r: substitute(r.dom.extent, amap) for r in op.reduce_axis}
    for rel in st.relations:
        if isinstance(rel, Split) and rel.parent.kind is IterKind.REDUCE:
            E = ext[rel.parent]
            if rel.factor is not None:
                ext[rel.outer], ext[rel.inner] = simplify((E + rel.factor - 1) // rel.factor), rel.factor
            else:
                ext[rel.outer], ext[rel.inner] = rel.nparts, simplify((E + rel.nparts - 1) // rel.nparts)
    # value of each reduce root var in terms of the leaf reduce vars
    value = {iv: iv.var for iv in st.leaf_iter_vars}
    conds = []
    for rel in reversed(st.relations):
        if isinstance(rel, Split) and rel.parent.kind is IterKind.REDUCE:
            value[rel.parent] = value[rel.outer] * ext[rel.inner] + value[rel.inner]
            covered = simplify(ext[rel.outer] * ext[rel.inner] - ext[rel.parent])
            if not (isinstance(covered, Const) and covered.value == 0):
                conds.append(value[rel.parent] < ext[rel.parent])
    # the new op's axes
    fvar = Var(axis.var.name + ".v", "int32")
    f_iv = IterVar(Range(const(0), ext[axis]), fvar, IterKind.DATA_PAR)
    if not isinstance(ext[axis], Const) and any(is_ragged_axis(op, r) for r in op.reduce_axis):
        from .ragged import leaves_of
        if any(axis in leaves_of(st, r) for r in op.reduce_axis if is_ragged_axis(op, r)):
            raise ScheduleError(f"{what}: axis '{axis.var.name}' comes from the ragged axis(es) "
                                f"{', '.join(repr(r.var.name) for r in op.reduce_axis if is_ragged_axis(op, r))} "
                                f"and has no fixed extent (`{ext[axis]}`), so it cannot be a dimension of "
                                f"'{st.name}.rf'; split the ragged axis and factor its constant inner part")
    new_axis = data_axis[:factor_axis] + [f_iv] + data_axis[factor_axis:]
    new_reduce = []
    leaf_map = {axis.var: fvar}
    for iv in st.leaf_iter_vars:
        if iv.kind is IterKind.REDUCE and iv is not axis:
            v = Var(iv.var.name, "int32")
            register_reduce_var(v)
            nr = IterVar(Range(const(0), ext[iv]), v, IterKind.REDUCE)
            new_reduce.append(nr)
            leaf_map[iv.var] = v
    vmap = dict(amap)
    for r in op.reduce_axis:
        vmap[r.var] = substitute(value[r] + substitute(r.dom.min, amap)
                                 if not (isinstance(r.dom.min, Const) and r.dom.min.value == 0)
                                 else value[r], leaf_map)
    body0 = op.body
    cond_extra = [substitute(c, leaf_map) for c in conds]
    new_body = []
    for b in body0:
        cond = substitute(b.condition, vmap)
        for c in cond_extra:
            cond = binary(BinOp.AND, cond, c)
        src = tuple(substitute(x, vmap) for x in b.source)
        if new_reduce:
            new_body.append(Reduce(b.combiner, src, tuple(new_reduce), cond, b.value_index))
        else:   # every reduce axis was factored out: a fold over one point, combine(identity, value)
            comb = b.combiner
            one = substitute(comb.result[b.value_index], {**dict(zip(comb.lhs, comb.identity)),
                                                          **dict(zip(comb.rhs, src))})
            new_body.append(select(cond, one, comb.identity[b.value_index]))
    rf_op = ComputeOp(op.name + ".rf", op.tag, op.attrs, new_axis, tuple(new_reduce), tuple(new_body),
                      tuple(t.name + ".rf" for t in op.outputs) if len(op.outputs) > 1 else None)

    # the original stage now reduces over the partial results
    kv = Var(axis.var.name + ".v", "int32")
    register_reduce_var(kv)
    k_iv = IterVar(Range(const(0), ext[axis]), kv, IterKind.REDUCE)
    out_axis = [IterVar(iv.dom, Var(iv.var.name, iv.var.dtype), IterKind.DATA_PAR) for iv in op.axis]
    idx = [iv.var for iv in out_axis]
    idx = idx[:factor_axis] + [kv] + idx[factor_axis:]
    comb = body0[0].combiner
    srcs = tuple(TensorLoad(t, tuple(idx)) for t in rf_op.outputs)
    init = tuple(substitute(x, {o.var: n.var for o, n in zip(op.axis, out_axis)}) for x in body0[0].init)
    final_body = tuple(Reduce(comb, srcs, (k_iv,), convert(True), i, init) for i in range(len(srcs)))
    final_op = ComputeOp(op.name, op.tag, op.attrs, out_axis, (k_iv,), final_body,
                         tuple(t.name for t in op.outputs))

    from .schedule import Stage
    rf_stage = Stage(rf_op, s)
    s.stages.insert(s.stages.index(st), rf_stage)
    s.stage_map[rf_op] = rf_stage
    old_outputs = op.outputs
    st.op = final_op
    st.all_iter_vars = list(out_axis) + [k_iv]
    st.leaf_iter_vars = list(st.all_iter_vars)
    st.relations = []
    st.iter_var_attrs = {}
    s.stage_map[final_op] = st
    s._replace_inputs([x for x in s.stages if x is not st and x is not rf_stage],
                      {o: n for o, n in zip(old_outputs, final_op.outputs)})
    outs = rf_op.outputs
    return outs[0] if len(outs) == 1 else list(outs)
