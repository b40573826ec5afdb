"""Storage flattening: every buffer becomes one-dimensional.

Afterwards each ``BufferLoad``/``BufferStore`` has a single element-offset index. Argument
buffers keep their n-dimensional ``shape`` (it is the function's signature) but are indexed
row-major; allocated buffers are replaced by 1-D buffers whose size honours ``storage_align``
(the stride of an aligned axis ``d`` satisfies ``stride % factor == offset``). Two indices that
are the quotient and remainder of one value by one constant, with strides that make them adjacent
digits (``A[f // 9, f % 9]`` into a row of 9), become that value (``f``): the axes of a ``fuse``
recombine here, before vectorization sees the index (it would make gathers of ``ramp // 9`` and
``ramp % 9``; the simplifier would recombine them only after vectorization).
"""
from __future__ import annotations

from ...ir.expr import BinOp, Binary, BufferLoad, Const, convert
from ...ir.functor import IRMutator, structural_equal
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
        pairs = list(zip(indices, strides))
        if len(pairs) > 1:
            pairs = _recombine_divmod(pairs)
        flat = None
        for i, s in pairs:
            term = i if (isinstance(s, Const) and s.value == 1) else i * s
            flat = term if flat is None else flat + term
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


_DIV_MOD = {BinOp.FLOORDIV: BinOp.FLOORMOD, BinOp.TRUNCDIV: BinOp.TRUNCMOD}


def _recombine_divmod(pairs: list) -> list:
    """(index, stride) pairs with ``(x // c, c * s)`` and ``(x % c, s)`` merged into ``(x, s)``:
    ``x // c * c + x % c == x`` for floor and for truncating division alike."""
    for d, (q, qs) in enumerate(pairs):
        if type(q) is not Binary or q.op not in _DIV_MOD or type(q.b) is not Const or type(qs) is not Const:
            continue
        for e, (r, rs) in enumerate(pairs):
            if (type(r) is Binary and r.op is _DIV_MOD[q.op] and type(r.b) is Const and r.b.value == q.b.value
                    and type(rs) is Const and qs.value == rs.value * q.b.value and structural_equal(q.a, r.a)):
                merged = [p for k, p in enumerate(pairs) if k not in (d, e)]
                merged.insert(min(d, e), (q.a, rs))
                return _recombine_divmod(merged)
    return pairs


def storage_flatten(body, aligns: dict | None = None):
    return _Flatten(aligns or {}).visit_stmt(body)
