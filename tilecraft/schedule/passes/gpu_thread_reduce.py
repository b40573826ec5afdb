"""Cross-thread reduction: a reduction whose axis is bound to ``threadIdx.x``.

``schedule_ops`` marks such a reduction: its initialisation and its reduction loops sit in an
``AttrStmt("cross_thread_reduction", stage, tags)``. Loop partitioning may have split loops inside
that scope (a split tail peeled off), so the scope may hold several updates, some guarded::

    # attr cross_thread_reduction(C) = 'threadIdx.x'
    C[i] = 0
    for k.outer in range(0, 7):
        for k.inner in thread_binding(0, 128, "threadIdx.x"):
            C[i] = C[i] + A[i, k.outer*128 + k.inner]
    for k.inner in thread_binding(0, 128, "threadIdx.x"):       # the peeled tail
        if k.inner + 896 < 1000: C[i] = C[i] + A[i, k.inner + 896]

As it stands that is a data race: every thread updates the same element. Afterwards each thread
folds its share into a register, every update (tail included, under its guard) before the
all-reduce; the block combines the registers with warp shuffles and (past one warp) shared
memory, for any number of threads (the CUDA C has one all-reduce for a power of two and one for
rows that start and end anywhere in a warp), and one thread (every thread, for a ``local``
output) writes the result; no marker is left::

    C.red = allocate(float32[1], "local")
    C.red[0] = 0
    for k.outer ...: for k.inner ...: C.red[0] = C.red[0] + A[i, k.outer*128 + k.inner]
    for k.inner ...: if k.inner + 896 < 1000: C.red[0] = C.red[0] + A[i, k.inner + 896]
    C.red_result = tc_allreduce_sum(C.red[0])          -- contains __syncthreads()
    if threadIdx.x == 0: C[i] = C.red_result

The loops stay in place (thread-loop unification runs next). Works with and without ``rfactor``.
Supported: one output, combiners sum, prod, min, max (each update ``X = X op v`` with ``op`` one of
``+ * min max``), reduction loops bound to threadIdx.x only; anything else is refused with a
``GPULoweringError`` naming the stage.
A reduction that starts from something other than the identity (``init=``) folds from the
identity in each thread and combines the start value once, into the result.
"""
from __future__ import annotations

from ...ir import dtype as dt
from ...ir.expr import BinOp, Binary, BufferLoad, Call, Const, Var, binary, const
from ...ir.functor import IRMutator, collect_vars, post_order_visit, structural_equal
from ...ir.stmt import (Allocate, Buffer, BufferStore, For, ForKind, IfThenElse, LetStmt, SeqStmt,
                        seq)
from ..schedule_ops import CROSS_THREAD_REDUCTION
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
    buffer, possibly under a guard → (store, guard or None)."""
    guard = None
    if isinstance(stmt, IfThenElse) and stmt.else_case is None:
        guard, stmt = stmt.condition, stmt.then_case
    if isinstance(stmt, BufferStore) and not _reads(stmt.value, stmt.buffer):
        return stmt, guard
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
    """Replace the given statements (by identity) with new ones."""

    def __init__(self, new_of: dict):
        self.new_of = new_of           # id(old store) -> new store

    def visit_BufferStore(self, s):
        return self.new_of.get(id(s), s)


def _guarded_inits(stmt) -> bool:
    """``if c: X0[i] = id0; X1[i] = id1`` (the guarded init of a reduction with several outputs)."""
    return (isinstance(stmt, IfThenElse) and isinstance(stmt.then_case, SeqStmt)
            and all(_init_of(x) is not None for x in stmt.then_case.seq))


def _flatten(stmt) -> list:
    return list(stmt.seq) if isinstance(stmt, SeqStmt) else [stmt]


def _store_names(stmt) -> list:
    names = []
    post_order_visit(stmt, lambda n: names.append(n.buffer.name) if isinstance(n, BufferStore) else None)
    return names


class _CrossThreadReduce(IRMutator):
    def __init__(self, info: KernelInfo):
        self.info = info

    def visit_AttrStmt(self, s):
        s = super().visit_AttrStmt(s)
        if s.key != CROSS_THREAD_REDUCTION:
            return s
        return self.rewrite(s.node, s.value.split(","), s.body)

    def rewrite(self, stage: str, tags: list, body):
        """``init; reduction loops`` of stage ``stage`` (reduction loops bound to ``tags``) →
        per-thread fold into a register, all-reduce, one guarded write."""
        if any(t.startswith("blockIdx") for t in tags):
            raise GPULoweringError(
                f"the reduction of stage '{stage}' has a reduction axis bound to "
                f"{next(t for t in tags if t.startswith('blockIdx'))}: blocks cannot combine partial "
                f"results within one kernel. Bind it to threadIdx.x, or rfactor it into a stage of its "
                f"own whose data axis is bound to blockIdx and sum that stage in a second kernel")
        if set(tags) != {"threadIdx.x"}:
            raise GPULoweringError(
                f"the reduction of stage '{stage}' is bound to {', '.join(sorted(tags))}: cross-thread "
                f"reductions are supported over threadIdx.x only")
        parts = _flatten(body)
        inits = []
        while parts and _init_of(parts[0]) is not None:
            inits.append(parts.pop(0))
        if len(inits) > 1 or (not inits and _guarded_inits(parts[0])):
            names = [n for x in (inits or parts[:1]) for n in _store_names(x)]
            raise GPULoweringError(
                f"the reduction of stage '{stage}' has its reduction axis bound to threadIdx.x, but it has "
                f"several outputs ({', '.join(dict.fromkeys(names))}); cross-thread reductions support one "
                f"output with a sum/prod/min/max combiner (or keep the reduction axis serial)")
        if not inits:       # schedule_ops initialises the outputs first, over the data loops inside
            raise GPULoweringError(
                f"the reduction of stage '{stage}' is bound to threadIdx.x but some of its data loops sit "
                f"inside its reduction loops; reorder so the reduction loops are innermost, or "
                f"cache_write the stage")
        init_store, guard = _init_of(inits[0])
        buf, start = init_store.buffer, init_store.value
        rest = seq(*parts)
        updates = []
        if rest is not None:
            _find_updates(rest, buf, [], updates)
        ops = set()
        for store, path in updates:
            upd = _update_of(store)
            if upd is None:
                raise GPULoweringError(
                    f"the reduction of stage '{stage}' has its reduction axis bound to threadIdx.x, but "
                    f"its combiner is not one of sum/prod/min/max; cross-thread reductions support those "
                    f"(or keep the reduction axis serial)")
            ops.add(upd[0])
            idx_vars = set().union(*[collect_vars(i) for i in store.indices])
            for f in path:
                if f.loop_var in idx_vars and f.kind is not ForKind.THREAD_BINDING:
                    raise GPULoweringError(
                        f"the reduction of stage '{stage}' is bound to threadIdx.x but the data loop "
                        f"'{f.loop_var.name}' sits inside its reduction loops; reorder so the reduction "
                        f"loops are innermost, or cache_write the stage")
        if len(ops) > 1:        # one combiner per stage: two ops mean a pattern we misread
            raise GPULoweringError(f"internal: the reduction of stage '{stage}' updates '{buf.name}' with "
                                   f"different operators")
        final_index = init_store.indices
        if not updates:          # the simplifier proved that no element passes the reduction's guards
            return _guarded(BufferStore(buf, start, final_index), buf, guard, self.info)
        op = ops.pop()
        acc = Buffer(buf.name + ".red", (Const(1, "int32"),), buf.dtype, "local")
        zero = (Const(0, "int32"),)
        acc_load = BufferLoad(acc, zero, buf.dtype)
        new_of = {id(st): BufferStore(acc, binary(op, acc_load, _update_of(st)[1]), zero) for st, _ in updates}
        folds = _Replace(new_of).visit_stmt(rest) if rest is not None else None
        result = Var(buf.name + ".red_result", buf.dtype)
        identity = _identity(op, buf.dtype)
        value = result if structural_equal(start, identity) else binary(op, start, result)   # init=
        final = _guarded(BufferStore(buf, value, final_index), buf, guard, self.info)
        call = Call(ALLREDUCE_PREFIX + ALLREDUCE_OPS[op], (acc_load,), buf.dtype)
        return Allocate(acc, seq(BufferStore(acc, identity, zero), folds, LetStmt(result, call, final)))


def _guarded(final, buf, guard, info: KernelInfo):
    """The write of the reduced value: by thread 0 (every thread, for a ``local`` output), under
    the data-axis guard of the init (split tails)."""
    tid = info.index_vars.get("threadIdx.x")      # absent when the reduction's loops were removed
    if buf.scope != "local" and tid is not None:
        final = IfThenElse(tid == 0, final)
    return final if guard is None else IfThenElse(guard, final)


def lower_thread_reductions(stmt, info: KernelInfo):
    """Rewrite reductions across threadIdx.x into per-thread folds plus a block all-reduce."""
    return _CrossThreadReduce(info).visit_stmt(stmt)
