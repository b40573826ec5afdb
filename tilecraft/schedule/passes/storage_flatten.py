"""Storage flattening: every buffer becomes one-dimensional.

Afterwards each ``BufferLoad``/``BufferStore`` has a single element-offset index. Argument
buffers keep their n-dimensional ``shape`` (it is the function's signature) but are indexed
row-major; allocated buffers are replaced by 1-D buffers whose size honours ``storage_align``
(the stride of an aligned axis ``d`` satisfies ``stride % factor == offset``). Two indices that
are the quotient and remainder of one value by one constant, with strides that make them adjacent
digits (``A[f // 9, f % 9]`` into a row of 9), become that value (``f``): the axes of a ``fuse``
recombine here, before vectorization sees the index (it would make gathers of ``ramp // 9`` and
``ramp % 9``; the simplifier would recombine them only after vectorization). A constant size is
exact: an int32 constant, or an int64 one where it does not fit in int32 (folding it in int32
would wrap it to a smaller buffer); a symbolic size stays an int32 expression, which the LLVM
backend evaluates in 64 bits.

A ``buffer_bind_scope`` (a tensor intrinsic's declared buffer viewing a box of a buffer,
``schedule/tensorize.py``) is resolved here: in its body the declared buffer's variables take
their values (its ``data`` the target's, its ``elem_offset`` the box's first element
``sum(begin[d] * stride[d])``, its strides the target's strides of the box's dimensions, its
shape the box's extents), and its loads, stores and ``access_ptr`` become the target's. The
attribute stays, its ``BufferRegion`` now holding the flat target and the strides, so the
interpreters can still find the box.
"""
from __future__ import annotations

from ...ir.expr import AccessPtr, BinOp, Binary, BufferLoad, BufferRegion, Const, Var, const, convert
from ...ir.functor import IRMutator, structural_equal, substitute
from ...ir.simplify import simplify
from ...ir.stmt import Allocate, AttrStmt, BUFFER_BIND_SCOPE, Buffer, BufferStore


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
        self.flat: dict = {}      # buffer -> (new buffer, strides, first element or None)

    def _info(self, buf):
        hit = self.flat.get(buf)
        if hit is None:
            strides = compact_strides(buf.shape, self.aligns.get(buf))
            hit = self.flat[buf] = (buf, strides, None)
        return hit

    def _index(self, buf, indices):
        nb, strides, base = self._info(buf)
        if len(indices) == 1 and len(strides) == 1 and base is None:
            return nb, indices
        if not indices:
            return nb, (base if base is not None else convert(0),)
        pairs = list(zip(indices, strides))
        if len(pairs) > 1:
            pairs = _recombine_divmod(pairs)
        flat = base
        for i, s in pairs:
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
        self.flat[buf] = (nb, strides, None)
        body = self.visit_stmt(s.body)
        return Allocate(nb, body)

    def visit_AttrStmt(self, s):
        if s.key != BUFFER_BIND_SCOPE:
            return super().visit_AttrStmt(s)
        declared, region = s.node, s.value
        begin, extent = self._exprs(region.begin), self._exprs(region.extent)
        nb, strides, _ = self._info(region.buffer)
        offset = None
        for b, st in zip(begin, strides):
            offset = b * st if offset is None else offset + b * st
        offset = simplify(offset) if offset is not None else convert(0)
        start = len(strides) - len(declared.shape)
        view = tuple(strides[start:])
        vmap = {declared.data: nb.data}
        if isinstance(declared.elem_offset, Var):
            vmap[declared.elem_offset] = offset
        for mine, got in zip(declared.strides or (), view):
            if isinstance(mine, Var):
                vmap[mine] = got
        for mine, got in zip(declared.shape, extent[start:]):
            if isinstance(mine, Var):
                vmap[mine] = got
        old = self.flat.get(declared)
        self.flat[declared] = (nb, view, offset)
        body = self.visit_stmt(substitute(s.body, vmap))
        if old is None:
            del self.flat[declared]
        else:
            self.flat[declared] = old
        return AttrStmt(s.key, declared, BufferRegion(nb, begin, extent, tuple(strides)), body)

    def visit_AccessPtr(self, e):
        nb = self._info(e.buffer)[0]
        off, ext = self.visit_expr(e.offset), self.visit_expr(e.extent)
        if nb is e.buffer and off is e.offset and ext is e.extent:
            return e
        return AccessPtr(nb, off, ext, e.access_mask)

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
