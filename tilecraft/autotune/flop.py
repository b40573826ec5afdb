"""Count the floating-point operations of a schedule's compute graph (for GFLOP/s when a
template does not call ``cfg.add_flop``).

Every ``ComputeOp`` reachable from the outputs contributes (float arithmetic operations in its
body) × (points of its output) × (points of its reduction domain); a reduction's combiner counts
once per reduced element. Index arithmetic (integer) and copies count nothing.
"""
from __future__ import annotations

import math


def _extent(iv) -> int:
    v = getattr(iv.dom.extent, "value", None)
    if not isinstance(v, int):
        from .task import FlopCountError

        raise FlopCountError(f"axis {iv.var.name} has a symbolic extent")
    return v


def _float_ops(e) -> int:
    from tilecraft.ir import expr as E
    from tilecraft.ir.functor import post_order_visit

    count = 0

    def f(n):
        nonlocal count
        if isinstance(n, (E.Binary, E.Unary, E.Call)) and str(n.dtype).startswith(("float", "bfloat")):
            if not (isinstance(n, E.Binary) and n.op in E.COMPARISONS):
                count += 1
    post_order_visit(e, f)
    return count


def count_flop(sch) -> float:
    from tilecraft.ir import expr as E
    from tilecraft.te.tensor import ComputeOp, post_dfs_order

    total = 0
    for op in post_dfs_order(sch.outputs):
        if not isinstance(op, ComputeOp):
            continue
        points = math.prod(_extent(iv) for iv in op.axis)
        for body in op.body[:1]:
            if isinstance(body, E.Reduce):
                per = sum(_float_ops(s) for s in body.source) + sum(_float_ops(r) for r in body.combiner.result)
                red = math.prod(_extent(iv) for iv in body.axis)
                total += per * points * red
            else:
                total += _float_ops(body) * points
    if total == 0:
        from .task import FlopCountError

        raise FlopCountError("the compute graph has no floating-point arithmetic")
    return float(total)
