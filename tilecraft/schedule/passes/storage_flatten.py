"""Storage flattening: every buffer becomes one-dimensional.

Afterwards each ``BufferLoad``/``BufferStore`` has a single element-offset index. Argument
buffers keep their n-dimensional ``shape`` (it is the function's signature) but are indexed
row-major; allocated buffers are replaced by 1-D buffers whose size honours ``storage_align``
(the stride of an aligned axis ``d`` satisfies ``stride % factor == offset``). A constant size is
exact: an int32 constant, or an int64 one where it does not fit in int32 (folding it in int32
would wrap it to a smaller buffer); a symbolic size stays an int32 expression, which the LLVM
backend evaluates in 64 bits.
"""
from __future__ import annotations

from ...ir.expr import BufferLoad, Const, const, convert
from ...ir.functor import IRMutator
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


def constant_size(shape, align: dict | None = None) -> int | None:
    """The exact number of elements of a compact buffer of constant ``shape`` (``compact_strides``
    with the same padding), or None when a dimension is not a constant.

    >>> constant_size((4, 6), {0: (8, 1)}), constant_size((65536, 65536))   # rows padded to 9
    (36, 4294967296)
    """
    size = 1
    for d in range(len(shape) - 1, -1, -1):
        if align and d in align and d != len(shape) - 1:
            factor, offset = align[d]
            size = ((size + factor - 1 - offset) // factor) * factor + offset
        extent = shape[d]
        if isinstance(extent, Const):
            extent = extent.value
        if not isinstance(extent, int):
            return None
        size *= extent
    return size


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
        return nb, (flat,)

    def visit_Allocate(self, s):
        buf = s.buffer
        strides = compact_strides(buf.shape, self.aligns.get(buf))
        exact = constant_size(buf.shape, self.aligns.get(buf))
        if exact is not None:
            size = const(exact, "int32" if exact < 2**31 else "int64")
        else:
            size = simplify(strides[0] * buf.shape[0])
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


def storage_flatten(body, aligns: dict | None = None):
    return _Flatten(aligns or {}).visit_stmt(body)
