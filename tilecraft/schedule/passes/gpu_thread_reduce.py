"""Cross-thread reduction: a reduction whose axis is bound to ``threadIdx.x``.

Before this pass such a reduction is a data race: every thread updates the same element::

    C[i] = 0
    for k.outer in range(0, 4):
        for k.inner in thread_binding(0, 256, "threadIdx.x"):
            C[i] = C[i] + A[i, k.outer*256 + k.inner]

Afterwards each thread folds its share into a register, the block combines the registers with
warp shuffles and (past 32 threads) shared memory, and one thread (every thread, for a ``local``
output) writes the result::

    C.red = allocate(float32[1], "local")
    C.red[0] = 0
    for k.outer ...: for k.inner ...: C.red[0] = C.red[0] + A[i, k.outer*256 + k.inner]
    C.red_result = tc_allreduce_sum(C.red[0])          -- contains __syncthreads()
    if threadIdx.x == 0: C[i] = C.red_result

The loops stay in place (thread-loop unification runs next). Works with and without ``rfactor``.
Supported combiners: sum, prod, min, max (the reducer's combine must be one of ``+ * min max``).
A reduction that starts from something other than the identity (``init=``) folds from the
identity in each thread and combines the start value once, into the result.
"""
from __future__ import annotations

from ...ir import dtype as dt
from ...ir.expr import BinOp, Binary, BufferLoad, Call, Const, Var, binary, const
from ...ir.functor import IRMutator, collect_vars, post_order_visit, structural_equal
from ...ir.stmt import (Allocate, Buffer, BufferStore, For, ForKind, IfThenElse, LetStmt, SeqStmt,
                        seq)
from .gpu_kernels import GPULoweringError, KernelInfo

ALLREDUCE_OPS = {BinOp.ADD: "sum", BinOp.MUL: "prod", BinOp.MIN: "min", BinOp.MAX: "max"}
ALLREDUCE_PREFIX = "tc_allreduce_"


def _update_of(store: BufferStore):
    """``X[idx] = X[idx] op v`` → ``(op, v)``; otherwise None."""
    v = store.value
    if not isinstance(v, Binary) or v.op not in ALLREDUCE_OPS:
        return None
    for mine, other in ((v.a, v.b), (v.b, v.a)):
        if (isinstance(mine, BufferLoad) and mine.buffer is store.buffer
                and len(mine.indices) == len(store.indices)
                and all(structural_equal(a, b) for a, b in zip(mine.indices, store.indices))):
            return v.op, other
    return None


def _init_of(stmt):
    """A statement that stores a reduction's start value (the identity or ``init=``) into a
    buffer, possibly under a guard → (buffer, value, guard or None)."""
    guard = None
    if isinstance(stmt, IfThenElse) and stmt.else_case is None:
        guard, stmt = stmt.condition, stmt.then_case
    if isinstance(stmt, BufferStore) and not _reads(stmt.value, stmt.buffer):
        return stmt.buffer, stmt.value, guard
    return None


def _reads(e, buf) -> bool:
    found = []
    post_order_visit(e, lambda n: found.append(n) if isinstance(n, BufferLoad) and n.buffer is buf else None)
    return bool(found)


def _identity(op: BinOp, dtype: str) -> Const:
    if op is BinOp.ADD:
        return const(0, dtype)
    if op is BinOp.MUL:
        return const(1, dtype)
    return const(dt.max_value(dtype) if op is BinOp.MIN else dt.min_value(dtype), dtype)


def _find_updates(stmt, buf, path, out):
    """Every store into ``buf`` under ``stmt`` with the loops on the way to it."""
    if isinstance(stmt, BufferStore):
        if stmt.buffer is buf:
            out.append((stmt, list(path)))
    elif isinstance(stmt, For):
        path.append(stmt)
        _find_updates(stmt.body, buf, path, out)
        path.pop()
    elif isinstance(stmt, SeqStmt):
        for x in stmt.seq:
            _find_updates(x, buf, path, out)
    elif isinstance(stmt, IfThenElse):
        _find_updates(stmt.then_case, buf, path, out)
        if stmt.else_case is not None:
            _find_updates(stmt.else_case, buf, path, out)
    elif isinstance(stmt, (LetStmt, Allocate)):
        _find_updates(stmt.body, buf, path, out)


class _Replace(IRMutator):
    def __init__(self, old, new):
        self.old, self.new = old, new

    def visit_BufferStore(self, s):
        return self.new if s is self.old else s


class _CrossThreadReduce(IRMutator):
    def __init__(self, info: KernelInfo):
        self.info = info

    def visit_SeqStmt(self, s):
        items = [self.visit_stmt(x) for x in s.seq]
        out = []
        k = 0
        while k < len(items):
            x = items[k]
            if k + 1 < len(items) and isinstance(items[k + 1], For):
                init = _init_of(x)
                if init is not None:
                    new = self.rewrite(init, items[k + 1])
                    if new is not None:
                        out.append(new)
                        k += 2
                        continue
            out.append(x)
            k += 1
        return seq(*out)

    def rewrite(self, init, loop: For):
        buf, start, guard = init
        updates = []
        _find_updates(loop, buf, [], updates)
        if len(updates) != 1:
            return None
        store, path = updates[0]
        path = [loop] + path
        idx_vars = set().union(*[collect_vars(i) for i in store.indices])
        reduce_threads = [f for f in path if f.kind is ForKind.THREAD_BINDING
                          and f.thread_tag.startswith("threadIdx") and f.loop_var not in idx_vars]
        if not reduce_threads:
            return None
        upd = _update_of(store)
        if upd is None:
            raise GPULoweringError(
                f"the reduction into '{buf.name}' has its reduction axis bound to "
                f"{reduce_threads[0].thread_tag}, but its combiner is not one of sum/prod/min/max; "
                f"cross-thread reductions support those (or keep the reduction axis serial)")
        tags = {f.thread_tag for f in reduce_threads}
        if tags != {"threadIdx.x"}:
            raise GPULoweringError(
                f"the reduction into '{buf.name}' is bound to {', '.join(sorted(tags))}: cross-thread "
                f"reductions are supported over threadIdx.x only")
        for f in path:
            if f.loop_var in idx_vars and f.kind is not ForKind.THREAD_BINDING:
                raise GPULoweringError(
                    f"the reduction into '{buf.name}' is bound to threadIdx.x but the data loop "
                    f"'{f.loop_var.name}' sits inside its reduction loops; reorder so the reduction "
                    f"loops are innermost, or cache_write the stage")
        bdx = int(self.info.extents["threadIdx.x"])
        if bdx & (bdx - 1):
            raise GPULoweringError(
                f"the reduction into '{buf.name}' runs across threadIdx.x with {bdx} threads; a "
                f"cross-thread reduction needs a power of two (split the reduction axis with factor=32, 64, ...)")
        op, value = upd
        acc = Buffer(buf.name + ".red", (Const(1, "int32"),), buf.dtype, "local")
        zero = (Const(0, "int32"),)
        acc_load = BufferLoad(acc, zero, buf.dtype)
        body = _Replace(store, BufferStore(acc, binary(op, acc_load, value), zero)).visit_stmt(loop)
        result = Var(buf.name + ".red_result", buf.dtype)
        identity = _identity(op, buf.dtype)
        if structural_equal(start, identity):
            final = BufferStore(buf, result, store.indices)
        else:                                 # init=: every thread folds from the identity
            final = BufferStore(buf, binary(op, start, result), store.indices)
        if buf.scope != "local":
            final = IfThenElse(self.info.index_vars["threadIdx.x"] == 0, final)
        if guard is not None:                 # the data-axis guard of the init (split tails)
            final = IfThenElse(guard, final)
        call = Call(ALLREDUCE_PREFIX + ALLREDUCE_OPS[op], (acc_load,), buf.dtype)
        return Allocate(acc, seq(BufferStore(acc, identity, zero), body, LetStmt(result, call, final)))


def lower_thread_reductions(stmt, info: KernelInfo):
    """Rewrite reductions across threadIdx.x into per-thread folds plus a block all-reduce."""
    return _CrossThreadReduce(info).visit_stmt(stmt)
