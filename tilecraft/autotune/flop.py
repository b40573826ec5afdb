"""Count the floating-point operations of a schedule's compute graph (for GFLOP/s when a
template does not call ``cfg.add_flop``).

Every ``ComputeOp`` reachable from the outputs contributes (float arithmetic operations in its
body) × (points of its output) × (points of its reduction domain); a reduction's combiner counts
once per reduced element. Index arithmetic (integer) and copies count nothing.

A graph without floating-point arithmetic (an integer GEMM) is counted as TVM's ``compute_flop``
counts every graph: each arithmetic, comparison and logical operation of any dtype is one
operation, ``select`` its condition plus its costlier branch, a call its arguments, a load
nothing (its indices are addressing).
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


def _any_ops(e) -> int:
    """Operations of ``e`` by TVM's rule (see the module docstring)."""
    from tilecraft.ir import expr as E

    if isinstance(e, (E.TensorLoad, E.BufferLoad)):
        return 0
    if isinstance(e, E.Select):
        return _any_ops(e.condition) + max(_any_ops(e.true_value), _any_ops(e.false_value))
    own = 1 if isinstance(e, (E.Binary, E.Unary)) else 0
    return own + sum(_any_ops(c) for c in e.children() if isinstance(c, E.Expr))


def count_flop(sch) -> float:
    total = _count(sch, _float_ops)
    if total == 0:
        total = _count(sch, _any_ops)       # an integer graph
    if total == 0:
        from .task import FlopCountError

        raise FlopCountError("the compute graph has no arithmetic")
    return float(total)


def _count(sch, ops) -> int:
    from tilecraft.ir import expr as E
    from tilecraft.te.tensor import ComputeOp, post_dfs_order

    total = 0
    for op in post_dfs_order(sch.outputs):
        if not isinstance(op, ComputeOp):
            continue
        points = math.prod(_extent(iv) for iv in op.axis)
        for body in op.body[:1]:
            if isinstance(body, E.Reduce):
                per = sum(ops(s) for s in body.source) + sum(ops(r) for r in body.combiner.result)
                red = math.prod(_extent(iv) for iv in body.axis)
                total += per * points * red
            else:
                total += ops(body) * points
    return total
