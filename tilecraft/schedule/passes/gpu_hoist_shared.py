"""Shared allocations hoisted, in a kernel made by ``gpu_kernels``: ``__shared__`` arrays are
declared once per kernel.

Afterwards the kernel body has no ``Allocate`` in ``shared`` scope: each one is listed in
``KernelInfo.shared`` with its constant size, and every access, pointer (``access_ptr``) and
tile (a tensor intrinsic's ``buffer_bind_scope``) names the hoisted buffer (a symbolic size, or
more than the 227 KiB a block may have on sm_90 in all, copies for double buffering and
pipelines counted, is refused naming the buffers; above 48 KiB the kernel takes dynamic shared
memory). A buffer marked ``double_buffer_scope`` (``schedule_ops``) and allocated inside a loop is recorded in ``KernelInfo.double_buffered``
with that loop (and, marked by ``pipeline(stages)``, in ``KernelInfo.async_stages`` with its
number of copies), for ``gpu_double_buffer``; the marks are removed.
"""
from __future__ import annotations

from ...ir.expr import AccessPtr, BufferLoad, BufferRegion, Const
from ...ir.functor import IRMutator
from ...ir.simplify import simplify
from ...ir.stmt import Buffer, BufferStore, ForKind
from ..schedule_ops import DOUBLE_BUFFER_SCOPE
from ...ir import dtype as dt
from .gpu_kernels import MAX_SHARED_BYTES, GPULoweringError, KernelInfo


class _Hoist(IRMutator):
    def __init__(self, info: KernelInfo):
        self.info = info
        self.db: dict = {}             # name of a buffer marked double_buffer_scope -> its mark (schedule_ops)
        self.loops: list = []          # enclosing loops that run in time (not virtual threads)
        self.rename: dict = {}

    def visit_For(self, s):
        if s.kind is ForKind.THREAD_BINDING:      # a virtual thread, not a sequence of tiles
            return super().visit_For(s)
        self.loops.append(s.loop_var)
        try:
            return super().visit_For(s)
        finally:
            self.loops.pop()

    def visit_AttrStmt(self, s):
        if s.key != DOUBLE_BUFFER_SCOPE:
            return super().visit_AttrStmt(s)
        self.db[s.node] = int(getattr(s.value, "value", s.value))
        return self.visit_stmt(s.body)

    def visit_Allocate(self, s):
        buf = s.buffer
        if buf.scope != "shared":
            return super().visit_Allocate(s)
        size = simplify(buf.shape[0])
        if not isinstance(size, Const):
            raise GPULoweringError(
                f"kernel {self.info.name}: the shared buffer '{buf.name}' has the size `{size}`, which is not "
                f"a constant; its tile depends on a symbolic extent. Use constant split factors for the "
                f"loops it is attached under (compute_at)")
        nb = Buffer(buf.name, (size,), buf.dtype, "shared", data=buf.data)   # same storage
        self.info.shared.append(nb)
        if buf.name in self.db:
            # a copy outside any loop (a tile peeled off by loop partitioning, or the only tile of
            # a loop that runs once) has no next tile to overlap with and keeps one buffer;
            # lower() refuses double_buffer on a stage attached at no loop in time at all
            if self.loops:
                self.info.double_buffered[nb] = self.loops[-1]
                if self.db[buf.name] > 1:          # pipeline(stages): a ring of that many copies
                    self.info.async_stages[nb] = self.db[buf.name]
        self.rename[buf] = nb
        return self.visit_stmt(s.body)

    def visit_BufferLoad(self, e):
        idx = self._exprs(e.indices)
        b = self.rename.get(e.buffer, e.buffer)
        return e if (idx is e.indices and b is e.buffer) else BufferLoad(b, idx, e.dtype)

    def visit_BufferStore(self, s):
        v, idx = self.visit_expr(s.value), self._exprs(s.indices)
        b = self.rename.get(s.buffer, s.buffer)
        if v is s.value and idx is s.indices and b is s.buffer:
            return s
        return BufferStore(b, v, idx)

    def visit_AccessPtr(self, e):          # a tensor intrinsic's pointer into the tile
        e = super().visit_AccessPtr(e)
        b = self.rename.get(e.buffer)
        return e if b is None else AccessPtr(b, e.offset, e.extent, e.access_mask)

    def visit_BufferRegion(self, e):       # the tile a tensor intrinsic's buffer views
        e = super().visit_BufferRegion(e)
        b = self.rename.get(e.buffer)
        return e if b is None else BufferRegion(b, e.begin, e.extent, e.strides)


def hoist_shared_allocations(stmt, info: KernelInfo):
    """Remove every shared ``Allocate`` from the kernel body and list it in ``info.shared``
    (declared once at the top of the kernel). Remembers, for each one marked
    ``double_buffer_scope`` (``schedule_ops``) and allocated inside a loop, the loop it was
    allocated in, and removes the marks."""
    out = _Hoist(info).visit_stmt(stmt)
    copies = {b: info.async_stages.get(b) or (2 if b in info.double_buffered else 1) for b in info.shared}
    total = sum(int(b.shape[0].value) * dt.nbytes(b.dtype) * copies[b] for b in info.shared)
    if total > MAX_SHARED_BYTES:
        parts = ", ".join(f"'{b.name}' {int(b.shape[0].value)} × {b.dtype}"
                          + (f" × {copies[b]} copies" if copies[b] > 1 else "") for b in info.shared)
        raise GPULoweringError(
            f"kernel {info.name} needs {total} bytes of shared memory ({parts}), more than the "
            f"{MAX_SHARED_BYTES} bytes a block may have (sm_90): make the tiles cached with "
            f"cache_read(..., 'shared') smaller (the split factors of the loops they are attached "
            f"under), or use fewer pipeline stages")
    return out
