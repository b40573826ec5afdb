"""Storage flattening: every buffer becomes one-dimensional.

Afterwards each ``BufferLoad``/``BufferStore`` has a single element-offset index. Argument
buffers keep their n-dimensional ``shape`` (it is the function's signature) but are indexed
row-major; allocated buffers are replaced by 1-D buffers whose size honours ``storage_align``
(the stride of an aligned axis ``d`` satisfies ``stride % factor == offset``). A flattened index
that holds a division or modulo is simplified at once, so the axes of a ``fuse`` recombine
(``f // 9 * 9 + f % 9`` → ``f``) before vectorization sees the index (it would make a gather of
the unsimplified form).
"""
from __future__ import annotations

from ...ir.expr import BinOp, Binary, BufferLoad, Const, convert
from ...ir.functor import IRMutator, post_order_visit
from ...ir.simplify import simplify
from ...ir.stmt import Allocate, Buffer, BufferStore


def compact_strides(shape, align: dict | None = None) -> list:
    """Row-major strides (in elements) with optional ``{axis: (factor, offset)}`` padding."""
    strides = [None] * len(shape)
    acc = convert(1)
    for d in range(len(shape) - 1, -1, -1):
        if align and d in align and d != len(shape) - 1:
            factor, offset = align[d]
            acc = simplify(((acc + factor - 1 - offset) // factor) * factor + offset)
        strides[d] = acc
        acc = simplify(acc * shape[d])
    return strides


class _Flatten(IRMutator):
    def __init__(self, aligns: dict):
        self.aligns = aligns
        self.flat: dict = {}      # buffer -> (new buffer, strides)

    def _info(self, buf):
        hit = self.flat.get(buf)
        if hit is None:
            strides = compact_strides(buf.shape, self.aligns.get(buf))
            hit = self.flat[buf] = (buf, strides)
        return hit

    def _index(self, buf, indices):
        nb, strides = self._info(buf)
        if len(indices) == 1 and len(strides) == 1:
            return nb, indices
        if not indices:
            return nb, (convert(0),)
        flat = None
        for i, s in zip(indices, strides):
            term = i if (isinstance(s, Const) and s.value == 1) else i * s
            flat = term if flat is None else flat + term
        if _has_divmod(indices):
            flat = simplify(flat)
        return nb, (flat,)

    def visit_Allocate(self, s):
        buf = s.buffer
        strides = compact_strides(buf.shape, self.aligns.get(buf))
        size = simplify(strides[0] * buf.shape[0]) if buf.shape else convert(1)
        nb = Buffer(buf.name, (size,), buf.dtype, buf.scope)
        self.flat[buf] = (nb, strides)
        body = self.visit_stmt(s.body)
        return Allocate(nb, body)

    def visit_BufferLoad(self, e):
        idx = self._exprs(e.indices)
        nb, flat = self._index(e.buffer, idx)
        return BufferLoad(nb, tuple(flat), e.dtype)

    def visit_BufferStore(self, s):
        v = self.visit_expr(s.value)
        idx = self._exprs(s.indices)
        nb, flat = self._index(s.buffer, idx)
        return BufferStore(nb, v, tuple(flat))


_DIVMOD = frozenset({BinOp.FLOORDIV, BinOp.FLOORMOD, BinOp.TRUNCDIV, BinOp.TRUNCMOD})


def _has_divmod(indices) -> bool:
    found = []
    for i in indices:
        post_order_visit(i, lambda n: found.append(1) if type(n) is Binary and n.op in _DIVMOD else None)
    return bool(found)


def storage_flatten(body, aligns: dict | None = None):
    return _Flatten(aligns or {}).visit_stmt(body)
