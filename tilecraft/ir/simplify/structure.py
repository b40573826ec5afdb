"""Structure of expression nodes, without recursion: a flat per-node key for hash-consing,
structural equality, and rebuilding a node with new children."""
from __future__ import annotations

from ..expr import (Binary, Broadcast, BufferLoad, Call, Cast, Const, Let, Ramp, Reduce, Select,
                    SizeVar, TensorLoad, Unary, Var)
from ..functor import children


def node_key(e, kid_ids: tuple) -> tuple:
    """A flat key equal for structurally equal nodes whose children have equal numbers."""
    t = type(e)
    if t is Binary: return (e.op, e.dtype) + kid_ids
    if t is Var or t is SizeVar: return ("v", id(e))
    if t is Const:
        v = e.value
        # 0.0 == -0.0 and True == 1 in Python; the dtype and the sign keep them apart
        return ("c", e.dtype, v, type(v), str(v) if v == 0 else None)
    if t is Unary: return (e.op, e.dtype) + kid_ids
    if t is Cast: return ("cast", e.dtype) + kid_ids
    if t is Select: return ("sel", e.lazy) + kid_ids
    if t is Call: return ("call", e.name, e.dtype) + kid_ids
    if t is BufferLoad: return ("ld", id(e.buffer), e.dtype) + kid_ids
    if t is TensorLoad: return ("tl", id(e.tensor)) + kid_ids
    if t is Ramp: return ("ramp", e.lanes) + kid_ids
    if t is Broadcast: return ("bc", e.lanes) + kid_ids
    if t is Let: return ("let", id(e.var)) + kid_ids
    return ("id", id(e))        # Reduce and anything unknown: only itself


def same_expr(a, b) -> bool:
    """Structural equality, without recursion (sums can be thousands of terms deep)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if type(x) is not type(y) or node_key(x, ()) != node_key(y, ()):
            return False
        kx, ky = children(x), children(y)
        if len(kx) != len(ky):
            return False
        stack.extend(zip(kx, ky))
    return True


def with_children(e, kids: tuple):
    """``e`` with new children (in ``functor.children`` order)."""
    t = type(e)
    if t is Binary: return Binary(e.op, kids[0], kids[1], e.dtype)
    if t is Unary: return Unary(e.op, kids[0], e.dtype)
    if t is Cast: return Cast(e.dtype, kids[0])
    if t is Select: return Select(kids[0], kids[1], kids[2], e.lazy)
    if t is Call: return Call(e.name, kids, e.dtype)
    if t is BufferLoad: return BufferLoad(e.buffer, kids, e.dtype)
    if t is TensorLoad: return TensorLoad(e.tensor, kids)
    if t is Reduce:
        n = len(e.source)
        return Reduce(e.combiner, kids[:n], e.axis, kids[-1], e.value_index, kids[n:-1])
    if t is Ramp: return Ramp(kids[0], kids[1], e.lanes)
    if t is Broadcast: return Broadcast(kids[0], e.lanes)
    if t is Let: return Let(e.var, kids[0], kids[1])
    raise TypeError(f"cannot rebuild {t.__name__}")
