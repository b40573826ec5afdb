"""Double buffering of shared tiles (``s[AA].double_buffer()``).

A double-buffered shared buffer gets two copies; iteration ``k`` of the loop it was attached in
fills and reads copy ``k % 2``. The next iteration's fetch then writes the other copy, which no
thread still reads, so the barrier that would protect the tile before it is overwritten is not
needed (``insert_barriers`` is told which loop each buffer alternates with): one barrier per
iteration instead of two, and warps that finish computing start fetching the next tile while
the others still compute::

    for k.outer in range(0, 32):               for k.outer in range(0, 32):
        A.shared[i] = A[...]            →          A.shared[(k.outer % 2) * 512 + i] = A[...]
        ... A.shared[j] ...                        ... A.shared[(k.outer % 2) * 512 + j] ...
"""
from __future__ import annotations

from ...ir.expr import BufferLoad, Const
from ...ir.functor import IRMutator
from ...ir.stmt import Buffer, BufferStore
from .gpu_kernels import KernelInfo
from .gpu_vthread import offset_index


class _Alternate(IRMutator):
    def __init__(self, remap: dict):
        self.remap = remap           # old buffer -> (new buffer, offset expr)

    def visit_BufferLoad(self, e):
        e = super().visit_BufferLoad(e)
        hit = self.remap.get(e.buffer)
        return e if hit is None else BufferLoad(hit[0], (offset_index(e.indices[0], hit[1]),), e.dtype)

    def visit_BufferStore(self, s):
        s = super().visit_BufferStore(s)
        hit = self.remap.get(s.buffer)
        return s if hit is None else BufferStore(hit[0], s.value, (offset_index(s.indices[0], hit[1]),))


def double_buffer(stmt, info: KernelInfo):
    """Give each double-buffered shared buffer of the kernel two alternating copies."""
    if not info.double_buffered:
        return stmt
    remap = {}
    new_db = {}
    for buf, loop_var in info.double_buffered.items():
        size = int(buf.shape[0].value)
        nb = Buffer(buf.name, (Const(2 * size, "int32"),), buf.dtype, "shared")
        remap[buf] = (nb, (loop_var % 2) * size)
        new_db[nb] = loop_var
    info.shared = [remap[b][0] if b in remap else b for b in info.shared]
    info.double_buffered = new_db
    return _Alternate(remap).visit_stmt(stmt)
