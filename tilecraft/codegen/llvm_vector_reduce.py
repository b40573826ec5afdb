"""LLVM code for ``VectorReduce``: the lanes of a vector folded into one scalar.

The fold is a tree of halves: ``v[:n/2] op v[n/2:]`` (two ``shufflevector``\\s and one vector
instruction) until one lane is left, so an 8-lane float32 sum is three adds and its result is
the same, bit for bit, as the lowered-IR interpreter's (which folds the same halves). Each step
uses the very instruction a ``Binary`` of that operator and dtype compiles to (``fadd contract``,
the ``a > b ? a : b`` float max, ``llvm.smax``, ...), so a vectorized reduction and its scalar
form agree on NaN and signed-zero handling. Odd lane counts fold their remaining lanes one by
one. LLVM's ``llvm.vector.reduce.fadd`` would need the ``reassoc`` flag on every use to be a
tree (without it the fold is sequential, lane by lane); writing the tree out needs no flag.

>>> vector_reduce(cg, VectorReduce(BinOp.ADD, acc_load))     # cg: the LLVM code generator
'%t42'
"""
from __future__ import annotations

from ..ir import dtype as dt
from .llvm_types import CodegenError, kind, ll_type


def _apply(cg, op, a: str, b: str, dtype: str) -> str:
    """``a op b`` on LLVM values of ``dtype``, as ``cg.e_Binary`` compiles it."""
    k = kind(dtype)
    special = cg._binary_special.get((op, k))
    if special is not None:
        return special(cg, a, b, dtype)
    instr = cg.binary_table.get((op, k))
    if instr is None:
        raise CodegenError(f"operator {op.value!r} is not defined on {dtype}: cannot fold the lanes of a "
                           f"{dtype} vector with it")
    return cg.op(f"{instr} {ll_type(dtype)} {a}, {b}")


def vector_reduce(cg, e) -> str:
    """Emit the fold of ``e.op`` over the lanes of ``e.value``; returns the scalar's LLVM value."""
    vd = e.value.dtype
    elem = dt.element_of(vd)
    n = dt.lanes(vd)
    v = cg.expr(e.value)
    while n > 2 and n % 2 == 0:
        h = n // 2
        vty = ll_type(dt.with_lanes(elem, n))
        lo = cg.op(f"shufflevector {vty} {v}, {vty} poison, <{h} x i32> "
                   f"<{', '.join(f'i32 {i}' for i in range(h))}>")
        hi = cg.op(f"shufflevector {vty} {v}, {vty} poison, <{h} x i32> "
                   f"<{', '.join(f'i32 {i}' for i in range(h, n))}>")
        v = _apply(cg, e.op, lo, hi, dt.with_lanes(elem, h))
        n = h
    # the last two lanes (or an odd number of them), one at a time
    vty = ll_type(dt.with_lanes(elem, n))
    out = None
    for i in range(n):
        x = cg.op(f"extractelement {vty} {v}, i64 {i}")
        out = x if out is None else _apply(cg, e.op, out, x, elem)
    return out
