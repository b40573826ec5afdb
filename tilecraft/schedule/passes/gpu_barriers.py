"""Barrier insertion: ``__syncthreads()`` wherever shared memory written by some threads is read
by others, and before shared memory that others still read is overwritten.

The analysis walks the kernel in program order keeping the shared buffers with writes and reads
not yet ordered by a barrier. Before a statement that reads a buffer with pending writes
(read-after-write) or writes a buffer with pending reads (write-after-read), it places a barrier
and forgets everything pending. A loop (or condition) whose accesses conflict as a whole gets the
barrier in front of it rather than inside; inside a loop, what is pending at the end of the body
is also pending at its start (the next iteration), except reads of a buffer double-buffered on
that loop. A barrier is never placed inside a condition or loop that depends on the thread index
(threads would disagree about reaching it): the barrier goes in front of the whole statement.
The block all-reduce of cross-thread reductions synchronises the block itself, and so do the
block-collective calls (``ir/builtin.py``'s ``BLOCK_BUILTINS``: the wgmma main loops order their
shared ring with their own mbarriers, across calls too), whose shared pointers need no barrier.

Afterwards the kernel is free of shared-memory races between threads of a block, assuming
different threads access different elements between barriers (which cooperative fetching and
the thread-bound loops of a schedule guarantee).
"""
from __future__ import annotations

from ...ir.builtin import BLOCK_BUILTINS
from ...ir.expr import AccessPtr, BufferLoad, Call, Var
from ...ir.functor import post_order_visit
from ...ir.stmt import (Allocate, AttrStmt, BufferStore, Evaluate, For, IfThenElse, LetStmt,
                        SeqStmt, seq)
from .gpu_kernels import KernelInfo
from .gpu_thread_reduce import ALLREDUCE_PREFIX

PIPELINED = "tc_pipelined"          # a loop software-pipelined by gpu_double_buffer

SYNC = "cuda.syncthreads"


def barrier():
    return Evaluate(Call(SYNC, (), "int32"))


def _accesses(node):
    """(shared buffers read, shared buffers written, contains a block-wide sync). A pointer
    into shared memory (``access_ptr``, what a tensor intrinsic's call reads or writes through)
    counts as the access its mask says."""
    reads, writes, sync = set(), set(), [False]
    ptrs, own = [], set()       # own: the shared pointers of block-collective calls, which order them themselves

    def f(n):
        if isinstance(n, BufferLoad) and n.buffer.scope == "shared":
            reads.add(n.buffer)
        elif isinstance(n, BufferStore) and n.buffer.scope == "shared":
            writes.add(n.buffer)
        elif isinstance(n, AccessPtr) and n.buffer.scope == "shared":
            ptrs.append(n)
        elif isinstance(n, Call) and (n.name == SYNC or n.name.startswith(ALLREDUCE_PREFIX)):
            sync[0] = True
        elif isinstance(n, Call) and n.name in BLOCK_BUILTINS:
            own.update(id(a) for a in n.args)
    post_order_visit(node, f)
    for n in ptrs:
        if id(n) not in own:
            if n.access_mask & 1:
                reads.add(n.buffer)
            if n.access_mask & 2:
                writes.add(n.buffer)
    return reads, writes, sync[0]


class _State:
    __slots__ = ("reads", "writes")

    def __init__(self, reads=(), writes=()):
        self.reads, self.writes = set(reads), set(writes)

    def copy(self):
        return _State(self.reads, self.writes)

    def union(self, o):
        return _State(self.reads | o.reads, self.writes | o.writes)

    def conflicts(self, reads, writes) -> bool:
        return bool(reads & self.writes) or bool(writes & self.reads)


class _Sync:
    def __init__(self, info: KernelInfo):
        self.thread_vars = {v for t, v in info.index_vars.items() if t.startswith("threadIdx")}
        self.varying = set(self.thread_vars)       # let-bound values that differ between threads
        self.db_loops: dict = {}
        for buf, loop_var in info.double_buffered.items():
            self.db_loops.setdefault(loop_var, set()).add(buf)

    def thread_dependent(self, e) -> bool:
        hit = []

        def f(n):
            if (isinstance(n, Var) and n in self.varying) or isinstance(n, BufferLoad):
                hit.append(n)
        post_order_visit(e, f)
        return bool(hit)

    def visit(self, s, st: _State):
        """Returns (new statement, state after it)."""
        t = type(s)
        if t is SeqStmt:
            out = []
            for x in s.seq:
                x, st = self.visit(x, st)
                out.append(x)
            return seq(*out), st
        reads, writes, sync = _accesses(s)
        if not reads and not writes and not sync:
            return s, st
        pre = None
        if st.conflicts(reads, writes):
            pre, st = barrier(), _State()
        if t is For and s.annotation(PIPELINED):
            new = s                   # pipelined by double_buffer: synchronises itself each iteration
            st = _State()
        elif t is For and not self.thread_dependent(s.min) and not self.thread_dependent(s.extent):
            new, st = self.visit_loop(s, st)
        elif t is IfThenElse and not self.thread_dependent(s.condition):
            then, a = self.visit(s.then_case, st.copy())
            other, b = (self.visit(s.else_case, st.copy()) if s.else_case is not None else (None, st))
            new, st = IfThenElse(s.condition, then, other), a.union(b)
        elif t is LetStmt and not _accesses(s.value)[2]:
            if self.thread_dependent(s.value):
                self.varying.add(s.var)
            r, w, _ = _accesses(s.value)
            st = _State(st.reads | r, st.writes | w)
            body, st = self.visit(s.body, st)
            new = LetStmt(s.var, s.value, body)
        elif t is LetStmt:            # the value is a block all-reduce: a barrier in itself
            self.varying.add(s.var)
            body, st = self.visit(s.body, _State())
            new = LetStmt(s.var, s.value, body)
        elif t is Allocate:
            body, st = self.visit(s.body, st)
            new = Allocate(s.buffer, body)
        elif t is AttrStmt:
            body, st = self.visit(s.body, st)
            new = AttrStmt(s.key, s.node, s.value, body)
        else:
            new = s
            st = _State() if sync else _State(st.reads | reads, st.writes | writes)
        return (seq(pre, new) if pre is not None else new), st

    def visit_loop(self, s: For, entry: _State):
        keep = self.db_loops.get(s.loop_var, set())
        carried = _State()
        for _ in range(4):
            start = entry.union(carried)
            body, end = self.visit(s.body, start.copy())
            nxt = _State(end.reads - keep, end.writes)
            if nxt.reads <= carried.reads and nxt.writes <= carried.writes:
                break
            carried = carried.union(nxt)
        new = For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)
        return new, entry.union(end)


def insert_barriers(stmt, info: KernelInfo):
    """Place ``__syncthreads()`` where shared memory needs it (see the module docstring)."""
    new, _ = _Sync(info).visit(stmt, _State())
    return new
