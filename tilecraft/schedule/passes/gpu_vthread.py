"""Virtual threads: a loop bound to ``vthread`` is interleaved into the code, TVM-style.

A virtual thread is a thread that the compiler runs itself: the loop is pushed inwards through
every statement that does not depend on it (loops, conditions, lets), and only the statements
that use its variable are replicated, once per virtual thread, with the variable replaced by a
constant. A ``local`` buffer allocated inside the loop gets one copy per virtual thread (its size
is multiplied and accesses are offset by ``v * size``). So a shared-memory fetch that does not
depend on the virtual thread runs once, and the per-thread register tile grows: the register
blocking of TVM's matmul schedules::

    for vy in vthread(0, 2):                       C.local = allocate(float32[32], "local")
        C.local = allocate(float32[16], "local")   for k ...:
        for k ...:                          →          C.local[i]      += A.s[i] * ...
            C.local[i] += A.s[vy*32 + i] * ...         C.local[16 + i] += A.s[32 + i] * ...

Afterwards no loop is bound to ``vthread``/``cthread``.
"""
from __future__ import annotations

from ...ir.expr import BufferLoad, Const, Ramp, Var, const
from ...ir.functor import IRMutator, collect_vars, substitute
from ...ir.simplify import simplify
from ...ir.stmt import (Allocate, Buffer, BufferStore, For, ForKind, IfThenElse, LetStmt, SeqStmt,
                        seq)
from .gpu_kernels import VIRTUAL_TAGS, GPULoweringError


def _uses(node, v) -> bool:
    return v in collect_vars(node)


def offset_index(idx, off):
    """``idx + off`` keeping a vector index a Ramp (so it stays a wide access)."""
    if isinstance(idx, Ramp):
        return Ramp(idx.base + off, idx.stride, idx.lanes)
    return idx + off


class _Expand(IRMutator):
    """Give each virtual thread its own slice of a local buffer."""

    def __init__(self, old: Buffer, new: Buffer, offset):
        self.old, self.new, self.offset = old, new, offset

    def visit_BufferLoad(self, e):
        e = super().visit_BufferLoad(e)
        if e.buffer is not self.old:
            return e
        return BufferLoad(self.new, (offset_index(e.indices[0], self.offset),), e.dtype)

    def visit_BufferStore(self, s):
        s = super().visit_BufferStore(s)
        if s.buffer is not self.old:
            return s
        return BufferStore(self.new, s.value, (offset_index(s.indices[0], self.offset),))


def _inject(s, v: Var, n: int, per_thread: set):
    if not _uses(s, v):
        return s
    t = type(s)
    if t is SeqStmt:
        return seq(*[_inject(x, v, n, per_thread) for x in s.seq])
    if t is For and not _uses(s.min, v) and not _uses(s.extent, v):
        return For(s.loop_var, s.min, s.extent, s.kind, _inject(s.body, v, n, per_thread), s.thread_tag, s.annotations)
    if t is IfThenElse and not _uses(s.condition, v):
        return IfThenElse(s.condition, _inject(s.then_case, v, n, per_thread),
                          _inject(s.else_case, v, n, per_thread) if s.else_case is not None else None)
    if t is LetStmt and not _uses(s.value, v):
        return LetStmt(s.var, s.value, _inject(s.body, v, n, per_thread))
    if t is Allocate and s.buffer.scope == "local" and s.buffer in per_thread:
        old = s.buffer
        size = simplify(old.shape[0])
        new = Buffer(old.name, (simplify(size * n),), old.dtype, "local")
        body = _Expand(old, new, v * size).visit_stmt(s.body)
        return Allocate(new, _inject(body, v, n, per_thread))
    if t is Allocate:
        return Allocate(s.buffer, _inject(s.body, v, n, per_thread))
    # a statement that depends on the virtual thread: one copy per virtual thread
    return seq(*[substitute(s, {v: const(k, v.dtype)}) for k in range(n)])


def per_thread_buffers(body, v) -> set:
    """The local buffers whose contents depend on the virtual thread ``v``: stored from an
    expression that uses ``v`` or reads such a buffer (a fixpoint). The others need one copy."""
    from ...ir.functor import post_order_visit
    stores = []
    post_order_visit(body, lambda n: stores.append(n) if isinstance(n, BufferStore) else None)
    reads = {}
    for st in stores:
        rs = set()
        post_order_visit(st, lambda n: rs.add(n.buffer) if isinstance(n, BufferLoad) else None)
        reads.setdefault(st.buffer, set()).update(rs)
    dep = {st.buffer for st in stores if _uses(st, v)}
    while True:
        more = {b for b, rs in reads.items() if b not in dep and rs & dep}
        if not more:
            return {b for b in dep if b.scope == "local"}
        dep |= more


class _VirtualThreads(IRMutator):
    def visit_For(self, s):
        s = super().visit_For(s)
        if s.kind is not ForKind.THREAD_BINDING or s.thread_tag not in VIRTUAL_TAGS:
            return s
        ext = simplify(s.extent)
        if not isinstance(ext, Const):
            raise GPULoweringError(f"the loop '{s.loop_var.name}' is bound to vthread with the symbolic "
                                   f"extent `{s.extent}`; virtual threads need a constant extent")
        body = s.body
        if not (isinstance(s.min, Const) and s.min.value == 0):
            body = substitute(body, {s.loop_var: s.loop_var + s.min})
        return simplify_stmt(_inject(body, s.loop_var, int(ext.value), per_thread_buffers(body, s.loop_var)))


def simplify_stmt(s):
    from ...ir.simplify import simplify as _simplify
    return _simplify(s)


def inject_virtual_threads(stmt):
    """Interleave every vthread loop into the code (see the module docstring)."""
    return _VirtualThreads().visit_stmt(stmt)
