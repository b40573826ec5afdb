"""Thread-loop unification, in a kernel made by ``gpu_kernels``: launch-bound loops become the
kernel's launch indices.

Afterwards no loop of the kernel body is bound to ``blockIdx.*``/``threadIdx.*``: each such loop
is replaced by its body, with its variable replaced by the kernel's index variable for its tag
(``KernelInfo.index_vars``, plus the loop's min). Buffers that a schedule left in ``global``
scope but allocated inside the kernel take the scope TVM gives them: ``local`` under a
``threadIdx`` loop, ``shared`` under ``blockIdx`` loops only.

>>> # for i.inner in thread_binding(0, 64, "threadIdx.x"): C[i.outer*64 + i.inner] = ...
>>> # becomes:  C[i.outer*64 + threadIdx.x] = ...
"""
from __future__ import annotations

from ...ir.expr import BufferLoad, Const
from ...ir.functor import IRMutator
from ...ir.stmt import Allocate, Buffer, BufferStore, ForKind
from .gpu_kernels import LAUNCH_TAGS, KernelInfo


class _Unify(IRMutator):
    """Replace launch-bound loops by their bodies; infer the scope of in-kernel 'global' buffers."""

    def __init__(self, info: KernelInfo):
        self.info = info
        self.vmap: dict = {}
        self.bufmap: dict = {}
        self.under_threads = 0

    def visit_Var(self, e):
        return self.vmap.get(e, e)

    def visit_For(self, s):
        if s.kind is ForKind.THREAD_BINDING and s.thread_tag in LAUNCH_TAGS:
            iv = self.info.index_vars[s.thread_tag]
            self.vmap[s.loop_var] = iv if _is_zero(s.min) else iv + s.min
            t = s.thread_tag.startswith("threadIdx")
            self.under_threads += t
            body = self.visit_stmt(s.body)
            self.under_threads -= t
            return body
        return super().visit_For(s)

    def visit_Allocate(self, s):
        buf = s.buffer
        if buf.scope == "global":
            scope = "local" if self.under_threads else "shared"
            nb = Buffer(buf.name, buf.shape, buf.dtype, scope)
            self.bufmap[buf] = nb
            return Allocate(nb, self.visit_stmt(s.body))
        return super().visit_Allocate(s)

    def visit_BufferLoad(self, e):
        idx = self._exprs(e.indices)
        b = self.bufmap.get(e.buffer, e.buffer)
        return e if (idx is e.indices and b is e.buffer) else BufferLoad(b, idx, e.dtype)

    def visit_BufferStore(self, s):
        v, idx = self.visit_expr(s.value), self._exprs(s.indices)
        b = self.bufmap.get(s.buffer, s.buffer)
        if v is s.value and idx is s.indices and b is s.buffer:
            return s
        return BufferStore(b, v, idx)


def _is_zero(e) -> bool:
    return isinstance(e, Const) and e.value == 0


def unify_thread_loops(stmt, info: KernelInfo):
    return _Unify(info).visit_stmt(stmt)
