"""The loop nest of a hybrid script's stage (``te.hybrid.script``) whose outermost loops, its
``HybridOp.axis``, were scheduled: the script's statement below those loops, with each loop
variable replaced by its value in the stage's leaf loops, inside the leaf loops (TVM's
``ApplyLoopShapes`` / ``ApplyLoopOrder`` / ``ApplyLoopAnnotations`` on a hybrid body).

Afterwards the stage's loops are its ``leaf_iter_vars`` in order, with the kinds the schedule
gave them; an axis the schedule left alone keeps the script's loop kind (``parallel``,
``unroll``, ``vectorize``); a split tail is guarded by an ``if`` around the body, as for a
compute stage. Unscheduled, the result is the script's own loops.

Before (``for i in range(64): for j in range(64): c[i, j] = a[i] * b[j]``), after
``s[c].split(i, 4)`` and ``s[c].parallel(i.inner)`` and ``s[c].reorder(i.inner, i.outer)``::

    for i.inner in parallel(4):
        for i.outer in range(16):
            for j in range(64):
                c[i.outer * 4 + i.inner, j] = a[i.outer * 4 + i.inner] * b[j]
"""
from __future__ import annotations

from ..ir.expr import convert
from ..ir.functor import substitute
from ..ir.stmt import For, IfThenElse


def hybrid_loops(ops, st, info):
    """The loops of stage ``st`` (a ``HybridOp`` with axes) around the script's inner statement;
    ``ops`` is ``schedule_ops``' builder (its ``make_for`` adds attached stages and loop kinds)."""
    inner, script_loop = st.op.body, {}
    for iv in st.op.axis:
        script_loop[iv] = inner            # the script's For of this axis (HybridOp._loop_axes)
        inner = inner.body
    vmap = {iv.var: info.root_value(iv, d) for d, iv in enumerate(st.op.axis)}
    body = substitute(inner, {v: e for v, e in vmap.items() if e is not v})
    if info.conditions:
        cond = info.conditions[0]
        for c in info.conditions[1:]:
            cond = cond & c
        body = IfThenElse(cond, body)
    for iv in reversed(st.leaf_iter_vars):
        loop = script_loop.get(iv)
        if loop is not None and iv not in st.iter_var_attrs:     # as the script wrote it
            body = For(iv.var, convert(0), info.extent[iv], loop.kind, ops.with_attached(st, iv, body),
                       loop.thread_tag, loop.annotations)
        else:
            body = ops.make_for(st, iv, info, body)
    return body
