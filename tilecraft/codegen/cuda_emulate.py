"""Run a function lowered for ``target="cuda"`` on the CPU, with numpy, and check it for races.

Every thread of every block runs in lock step: a value is a numpy array with one entry per thread
of the whole grid (``(threads,)``, or ``(threads, lanes)`` for vectors); a condition that differs
between threads masks the threads that do not take it. Shared buffers have one copy per block,
local buffers one per thread. Global workspace buffers (intermediate stages between kernels),
shared and local memory start out poisoned (NaN, bytes of 0x5A, True), as a GPU leaves them
unset: a kernel that reads what nobody wrote shows it in its outputs. While it runs it checks
what a GPU would not:

* every access lies inside its buffer (an out-of-bounds index raises ``EmulationError``);
* no thread reads a shared element that another thread of its block wrote, or writes one that
  another thread read or wrote, since the last barrier (a missing ``__syncthreads()``);
* no thread reads or writes a global element that a thread of another block wrote (or writes
  one that a thread of another block read) during the same kernel, or that another thread of its
  own block wrote (read) since the last barrier; and no store statement has several threads
  writing different values to one element (``B[i] = B[i] + x`` run by every thread; the same
  value stored by every thread, a stage computed redundantly, is harmless). Kernels of one
  function run in order, so a kernel may read what an earlier one wrote;
* every barrier is reached by all threads of the block (no barrier in divergent code);
* every vector access the CUDA C makes 4, 8 or 16 bytes wide starts at a multiple of its width
  (the renderer proves it from the index; a wrong proof is a misaligned-address fault on a GPU);
* every vector load the CUDA C hoists ahead of its store (``cuda_cstyle.hoisted_loads``) is in
  bounds wherever the C performs it, under the guard the C puts on it (a load that the IR
  evaluates only inside an ``if_then_else`` branch must not be loaded unguarded).

It is the executable check of the GPU lowering on machines without a GPU, not a fast simulator:
use small shapes.

>>> # emulate(tilecraft.lower(s, [A, B, C], target="cuda"), [a, b, c])   # numpy arrays, c is written
"""
from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from ..ir import intrinsics
from ..ir.expr import (BinOp, Binary, Broadcast, BufferLoad, Call, Cast, Const, Ramp, Select, Unary,
                       UnOp, Var, VectorReduce)
from ..ir.functor import post_order_visit
from ..ir.builtin import ASYNC_COPY_BUILTINS, EXTERN_CALLS, FRAGMENT_SCOPES, call_args, symbol_of
from ..ir.stmt import (Allocate, AttrStmt, BUFFER_BIND_SCOPE, Buffer, BufferStore, Evaluate, For, IfThenElse,
                       LetStmt, SeqStmt, TENSOR_INTRIN_SCOPE)
from ..ir.expr import trunc_divide, trunc_remainder
from ..schedule.passes.gpu_barriers import SYNC
from ..schedule.passes.gpu_lower import kernels_of, launch_program
from ..schedule.passes.gpu_thread_reduce import ALLREDUCE_PREFIX
from .cuda_cstyle import hoisted_loads, wide_access_bytes
from .cuda_emulate_async import AsyncCopyMixin
from .cuda_emulate_intrin import EmulationError, TensorIntrinMixin, _np, _poisoned, fragment_message  # noqa: F401


_BIN = {
    BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply,
    BinOp.MIN: np.minimum, BinOp.MAX: np.maximum, BinOp.EQ: np.equal, BinOp.NE: np.not_equal,
    BinOp.LT: np.less, BinOp.LE: np.less_equal, BinOp.GT: np.greater, BinOp.GE: np.greater_equal,
    BinOp.AND: np.logical_and, BinOp.OR: np.logical_or, BinOp.BITAND: np.bitwise_and,
    BinOp.BITOR: np.bitwise_or, BinOp.BITXOR: np.bitwise_xor, BinOp.SHL: np.left_shift,
    BinOp.SHR: np.right_shift, BinOp.FLOORDIV: np.floor_divide, BinOp.FLOORMOD: np.mod,
}

_REDUCE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


class _Shared:
    """A shared buffer: one copy per block, plus who touched each element since the barrier."""

    def __init__(self, buf, nblocks: int):
        n = int(buf.shape[0].value)
        self.buf = buf
        self.data = _poisoned((nblocks, n), buf.dtype)
        self.writer = np.full((nblocks, n), -1, np.int64)
        self.reader = np.full((nblocks, n), -1, np.int64)     # -2: several threads

    def reset(self):
        self.writer.fill(-1)
        self.reader.fill(-1)


class _Global:
    """Who touched each element of a global buffer that the kernel writes, for the race check.
    Threads are lanes (``block * threads_per_block + thread``); -1 is nobody.

    * ``writer``/``w_epoch``: the last thread that wrote the element, and its block's barrier
      count then (a later access by another thread of that block is ordered only if the count
      has moved on; one by another block never is); ``w_all``: that store was one statement of
      several threads storing the same value (a stage computed redundantly by every thread),
      so a thread of the block reading it back reads its own value;
    * ``r_first``/``r_other``: the first thread that read it, and the first reader from a block
      other than ``r_first``'s (so a write can name a reader of another block, exactly);
    * ``r_cur``/``r_cur2``/``r_epoch``: up to two different threads that read it since the last
      barrier of ``r_cur``'s block (a write by a third thread of that block names one of them).
    """

    def __init__(self, n: int):
        self.writer = np.full(n, -1, np.int64)
        self.w_epoch = np.zeros(n, np.int64)
        self.w_all = np.zeros(n, bool)          # the last store was by several threads, one value
        self.r_first = np.full(n, -1, np.int64)
        self.r_other = np.full(n, -1, np.int64)
        self.r_cur = np.full(n, -1, np.int64)
        self.r_cur2 = np.full(n, -1, np.int64)
        self.r_epoch = np.zeros(n, np.int64)


class _Kernel(TensorIntrinMixin, AsyncCopyMixin):
    def __init__(self, info, body, globals_: dict, env: dict, check_races: bool, shapes: dict | None = None):
        self.info, self.body, self.globals, self.check = info, body, globals_, check_races
        self.shapes = shapes or {}
        grid = [int(_const_eval(g, env)) for g in info.grid]
        block = info.block
        self.nblocks = grid[0] * grid[1] * grid[2]
        self.nthreads = block[0] * block[1] * block[2]
        L = self.nblocks * self.nthreads
        lane = np.arange(L)
        b, t = lane // self.nthreads, lane % self.nthreads
        self.block_of, self.tid = b, t
        self.env = {}
        for v, val in env.items():
            self.env[v] = np.full(L, val, _np(v.dtype))
        coords = {
            "blockIdx.x": b % grid[0], "blockIdx.y": (b // grid[0]) % grid[1], "blockIdx.z": b // (grid[0] * grid[1]),
            "threadIdx.x": t % block[0], "threadIdx.y": (t // block[0]) % block[1],
            "threadIdx.z": t // (block[0] * block[1]),
        }
        for tag, v in info.index_vars.items():
            self.env[v] = coords[tag].astype(np.int32)
        self.shared = {buf: _Shared(buf, self.nblocks) for buf in info.shared}
        self.local: dict = {}
        self.L = L
        self.init_tensor_intrins()
        self.init_async_copies()
        self.grid, self.block = grid, block
        self.epoch = np.zeros(self.nblocks, np.int64)        # barriers each block has passed
        self.wide: dict = {}                                   # (buffer, index) -> bytes per wide access
        self.hoisted: dict = {}                                # vector store -> hoisted_loads of its value
        # only global buffers this kernel writes can race; reads of the others are not tracked
        self.tracked: dict = {}
        if check_races:
            written = set()
            post_order_visit(body, lambda n: written.add(n.buffer) if type(n) is BufferStore else None)
            self.tracked = {b: _Global(globals_[b].size) for b in written
                            if b in globals_ and b.scope == "global"}

    # --- statements -----------------------------------------------------------------------
    def run(self):
        self.stmt(self.body, np.ones(self.L, bool))

    def stmt(self, s, mask):
        if not mask.any():
            return
        t = type(s)
        if t is SeqStmt:
            for x in s.seq:
                self.stmt(x, mask)
        elif t is BufferStore:
            self.store(s, mask)
        elif t is For:
            lo, ext = self.expr(s.min), self.expr(s.extent)
            hi = int((lo + ext)[mask].max())
            start = int(lo[mask].min())
            for i in range(start, hi):
                m = mask & (lo <= i) & (i < lo + ext)
                self.env[s.loop_var] = np.full(self.L, i, _np(s.loop_var.dtype))
                self.stmt(s.body, m)
            self.env.pop(s.loop_var, None)
        elif t is IfThenElse:
            c = self.expr(s.condition).astype(bool)
            self.stmt(s.then_case, mask & c)
            if s.else_case is not None:
                self.stmt(s.else_case, mask & ~c)
        elif t is LetStmt:
            self.env[s.var] = self.expr(s.value, mask)
            self.stmt(s.body, mask)
        elif t is Allocate:
            n = int(_const_eval(s.buffer.shape[0], {}))
            if s.buffer.scope == "local":
                self.local[s.buffer] = _poisoned((self.L, n), s.buffer.dtype)
            elif s.buffer.scope in FRAGMENT_SCOPES:
                self.allocate_fragment(s.buffer, n)
            else:
                raise EmulationError(f"unexpected {s.buffer.scope} allocation '{s.buffer.name}' inside a kernel")
            self.stmt(s.body, mask)
        elif t is Evaluate:
            if isinstance(s.value, Call) and s.value.name == SYNC:
                self.barrier(mask)
            elif isinstance(s.value, Call) and s.value.name in ASYNC_COPY_BUILTINS:
                self.async_copy(s.value, mask)
            elif not isinstance(s.value, Const):
                self.expr(s.value, mask)
        elif t is AttrStmt:
            if s.key == BUFFER_BIND_SCOPE:
                self.bind_view(s, mask)
            elif s.key == TENSOR_INTRIN_SCOPE:
                self.run_intrin(s, mask)
            else:
                self.stmt(s.body, mask)
        else:
            raise EmulationError(f"cannot emulate {t.__name__}")

    def barrier(self, mask):
        per_block = np.bincount(self.block_of[mask], minlength=self.nblocks)
        if np.any((per_block != 0) & (per_block != self.nthreads)):
            raise EmulationError(f"kernel {self.info.name}: __syncthreads() reached by only some threads of "
                                 f"a block (a barrier in divergent code)")
        self.epoch[per_block != 0] += 1
        for sh in self.shared.values():
            sh.reset()

    def _where(self, buf):
        if buf.scope == "shared":
            return "shared", self.shared[buf]
        if buf.scope == "local":
            return "local", self.local[buf]
        if buf.scope in FRAGMENT_SCOPES:
            return "fragment", self.fragments[buf]
        return "global", self.globals[buf]

    def _check_bounds(self, buf, idx, mask, size):
        m = mask if idx.ndim == 1 else mask[:, None] & np.ones(idx.shape, bool)
        bad = m & ((idx < 0) | (idx >= size))
        if bad.any():
            i = np.argwhere(bad)[0]
            raise EmulationError(f"kernel {self.info.name}: out-of-bounds access {buf.name}[{idx[tuple(i)]}] "
                                 f"(size {size}) by thread {int(self.tid[i[0]])} of block {int(self.block_of[i[0]])}")

    def store(self, s, mask):
        if dt.lanes(s.value.dtype) > 1:
            self._check_hoisted(s, mask)
        val = self.expr(s.value, mask)
        idx = self.expr(s.indices[0], mask).astype(np.int64)
        if idx.ndim == 2:
            self._check_alignment(s.buffer, s.indices[0], idx, mask, "stores")
        if val.ndim < idx.ndim:
            val = np.broadcast_to(val[:, None], idx.shape)
        kind, where = self._where(s.buffer)
        lanes = np.nonzero(mask)[0]
        idx_m, val_m = idx[lanes], val[lanes]
        if kind == "global":
            self._check_bounds(s.buffer, idx, mask, where.size)
            if s.buffer in self.tracked:
                self._global_write(s.buffer, idx_m, lanes, val_m)
            where[idx_m] = val_m
        elif kind == "local":
            self._check_bounds(s.buffer, idx, mask, where.shape[1])
            rows = lanes if idx.ndim == 1 else np.repeat(lanes[:, None], idx.shape[1], 1)
            where[rows, idx_m] = val_m
        elif kind == "fragment":
            raise EmulationError(f"kernel {self.info.name}: {fragment_message(s.buffer, 'written')}")
        else:
            self._check_bounds(s.buffer, idx, mask, where.data.shape[1])
            blk = self.block_of[lanes]
            tid = self.tid[lanes]
            if idx.ndim == 2:
                blk = np.repeat(blk[:, None], idx.shape[1], 1)
                tid = np.repeat(tid[:, None], idx.shape[1], 1)
            self._shared_write(s.buffer, where, blk, tid, idx_m)
            where.data[blk, idx_m] = val_m

    def _shared_write(self, buf, where, blk, tid, idx):
        """Record writes of shared ``buf`` (elements ``idx`` of blocks ``blk`` by threads ``tid``,
        arrays of one shape); a race if another thread touched one since the last barrier."""
        if self.in_flight_count:
            self._check_not_in_flight(buf, blk, tid, idx, "writes")
        if not self.check:
            return
        w, r = where.writer[blk, idx], where.reader[blk, idx]
        bad = ((w != -1) & (w != tid)) | ((r != -1) & (r != tid))
        if bad.any():
            k = tuple(np.argwhere(bad)[0])
            raise EmulationError(
                f"kernel {self.info.name}: race on shared '{buf.name}[{idx[k]}]': thread "
                f"{tid[k]} writes it after thread {max(w[k], r[k])} accessed it "
                f"with no __syncthreads() between")
        where.writer[blk, idx] = tid

    def _shared_read(self, buf, where, blk, tid, idx):
        """Record reads of shared ``buf`` (as :meth:`_shared_write`); a race if another thread
        wrote one since the last barrier."""
        if self.in_flight_count:
            self._check_not_in_flight(buf, blk, tid, idx, "reads")
        if not self.check:
            return
        w = where.writer[blk, idx]
        bad = (w != -1) & (w != tid)
        if bad.any():
            k = tuple(np.argwhere(bad)[0])
            raise EmulationError(
                f"kernel {self.info.name}: race on shared '{buf.name}[{idx[k]}]': thread {tid[k]} "
                f"reads what thread {w[k]} wrote with no __syncthreads() between")
        r = where.reader[blk, idx]
        where.reader[blk, idx] = np.where((r == -1) | (r == tid), tid, -2)

    # --- expressions ----------------------------------------------------------------------
    def expr(self, e, mask=None):
        if mask is None:
            mask = np.ones(self.L, bool)
        t = type(e)
        if t is Const:
            return np.full(self.L, e.value, _np(e.dtype))
        if t is Var or isinstance(e, Var):
            try:
                return self.env[e]
            except KeyError:
                raise EmulationError(f"the variable {e.name} is not bound") from None
        if t is Binary:
            a, b = self.expr(e.a, mask), self.expr(e.b, mask)
            a, b = _align(a, b)
            with np.errstate(all="ignore"):
                if e.op is BinOp.DIV:
                    return (a / b).astype(a.dtype)
                if e.op in (BinOp.TRUNCDIV, BinOp.TRUNCMOD):
                    bs = np.where(b == 0, 1, b)
                    f = trunc_divide if e.op is BinOp.TRUNCDIV else trunc_remainder
                    return f(a, bs).astype(a.dtype)
                if e.op in (BinOp.FLOORDIV, BinOp.FLOORMOD):
                    b = np.where(b == 0, 1, b)
                return _BIN[e.op](a, b)
        if t is Unary:
            a = self.expr(e.a, mask)
            return np.logical_not(a) if e.op is UnOp.NOT else -a
        if t is Cast:
            with np.errstate(all="ignore"):
                if dt.element_of(e.dtype) == "bfloat16":
                    return dt.round_bfloat16(self.expr(e.value, mask))
                return self.expr(e.value, mask).astype(_np(e.dtype))
        if t is Select:
            c = self.expr(e.condition, mask).astype(bool)
            # C's ?: evaluates one side per thread: only its loads are accesses
            a = self.expr(e.true_value, mask & c if c.ndim == 1 else mask)
            b = self.expr(e.false_value, mask & ~c if c.ndim == 1 else mask)
            c, a = _align(c, a)
            a, b = _align(a, b)
            c, b = _align(c, b)
            return np.where(c, a, b)
        if t is Ramp:
            base, stride = self.expr(e.base, mask), self.expr(e.stride, mask)
            return base[:, None] + stride[:, None] * np.arange(e.lanes, dtype=base.dtype)
        if t is Broadcast:
            v = self.expr(e.value, mask)
            return np.repeat(v[:, None], e.lanes, 1)
        if t is VectorReduce:
            # the lanes folded in halves, as the CUDA C does: v[:n/2] op v[n/2:]
            v = self.expr(e.value, mask)
            f = _BIN[e.op]
            with np.errstate(all="ignore"):
                while v.shape[1] > 2 and v.shape[1] % 2 == 0:
                    h = v.shape[1] // 2
                    v = f(v[:, :h], v[:, h:])
                out = v[:, 0]
                for k in range(1, v.shape[1]):
                    out = f(out, v[:, k])
            return out
        if t is BufferLoad:
            return self.load(e, mask)
        if t is Call:
            if e.name.startswith(ALLREDUCE_PREFIX):
                return self.allreduce(e, mask)
            if e.name in EXTERN_CALLS:
                return self.device_function(e, mask)
            # the math table: the intrinsic table's numpy reference (ir/intrinsics.py)
            if intrinsics.lookup(e.name) is None:
                raise EmulationError(f"kernel {self.info.name}: the emulator does not know the intrinsic "
                                     f"'{e.name}' (in `{e}`)")
            return intrinsics.evaluate(e.name, [self.expr(a, mask) for a in e.args], e.dtype)
        raise EmulationError(f"cannot emulate {t.__name__}")

    def device_function(self, e, mask):
        """A call of a CUDA math function by name (``call_pure_extern("float32", "__expf", x)``),
        evaluated by the intrinsic table's row of that function."""
        name = intrinsics.intrinsic_of_cuda_function(symbol_of(e))
        if name is None:
            raise EmulationError(f"kernel {self.info.name}: the emulator knows CUDA's math functions "
                                 f"only; it cannot run {e.name}('{symbol_of(e)}') (in `{e}`)")
        return intrinsics.evaluate(name, [self.expr(a, mask) for a in call_args(e)], e.dtype)

    def load(self, e, mask):
        idx = self.expr(e.indices[0], mask).astype(np.int64)
        if idx.ndim == 2:
            self._check_alignment(e.buffer, e.indices[0], idx, mask, "loads")
        kind, where = self._where(e.buffer)
        m = mask if idx.ndim == 1 else np.repeat(mask[:, None], idx.shape[1], 1)
        safe = np.where(m, idx, 0)
        if kind == "global":
            self._check_bounds(e.buffer, idx, mask, where.size)
            if e.buffer in self.tracked:
                lanes = np.nonzero(mask)[0]
                self._global_read(e.buffer, idx[lanes], lanes)
            return where[safe]
        if kind == "local":
            self._check_bounds(e.buffer, idx, mask, where.shape[1])
            rows = np.arange(self.L) if idx.ndim == 1 else np.repeat(np.arange(self.L)[:, None], idx.shape[1], 1)
            return where[rows, safe]
        if kind == "fragment":
            raise EmulationError(f"kernel {self.info.name}: {fragment_message(e.buffer, 'read')}")
        self._check_bounds(e.buffer, idx, mask, where.data.shape[1])
        blk = self.block_of if idx.ndim == 1 else np.repeat(self.block_of[:, None], idx.shape[1], 1)
        tid = self.tid if idx.ndim == 1 else np.repeat(self.tid[:, None], idx.shape[1], 1)
        self._shared_read(e.buffer, where, blk[m], tid[m], safe[m])
        return where.data[blk, safe]

    def _check_alignment(self, buf, node, idx, mask, what: str):
        lanes = idx.shape[1]
        key = (buf, node)
        width = self.wide.get(key)
        if width is None:
            width = self.wide[key] = wide_access_bytes(buf, node, lanes)
        if not width:
            return
        bad = mask & (idx[:, 0] % lanes != 0)
        if bad.any():
            k = int(np.argmax(bad))
            raise EmulationError(
                f"kernel {self.info.name}: misaligned vector access: the CUDA C {what} {buf.scope} '{buf.name}' "
                f"{width} bytes at a time, believing the index `{node.base}` a multiple of {lanes}, but "
                f"{self._thread(k)} reaches element {int(idx[k, 0])}")

    def _check_hoisted(self, s, mask):
        """The loads the CUDA C performs before the store ``s``, each where its guard holds, are
        in bounds (the IR's lazy selects may guard them; the C must not load them regardless)."""
        plan = self.hoisted.get(s)
        if plan is None:
            plan = self.hoisted[s] = hoisted_loads(s.value, dt.lanes(s.value.dtype))
        for load, _, guard in plan:
            m = mask
            for sel, taken in guard:
                c = self.expr(sel.condition, m).astype(bool)
                m = m & (c if taken else ~c)
            if not m.any():
                continue
            idx = self.expr(load.indices[0], m).astype(np.int64)
            kind, where = self._where(load.buffer)
            size = where.size if kind == "global" else where.shape[1] if kind == "local" else where.data.shape[1]
            bad = m[:, None] & ((idx < 0) | (idx >= size))
            if bad.any():
                k, j = np.argwhere(bad)[0]
                conds = [str(sel.condition) if taken else f"not {sel.condition}" for sel, taken in guard]
                why = f"under the guard `{' and '.join(conds)}`" if guard else "unconditionally"
                raise EmulationError(
                    f"kernel {self.info.name}: out-of-bounds access {load.buffer.name}[{int(idx[k, j])}] (size {size}) "
                    f"by {self._thread(k)}: the CUDA C loads `{load}` ahead of the store to "
                    f"'{s.buffer.name}', {why}")

    # --- the global-memory race check ------------------------------------------------------
    def _thread(self, lane) -> str:
        lane = int(lane)
        b, t = lane // self.nthreads, lane % self.nthreads
        gx, gy, _ = self.grid
        bx, by, _ = self.block
        return (f"thread ({t % bx}, {t // bx % by}, {t // (bx * by)}) of block "
                f"({b % gx}, {b // gx % gy}, {b // (gx * gy)})")

    def _element(self, buf, flat) -> str:
        flat = int(flat)
        shape = self.shapes.get(buf)
        at = np.unravel_index(flat, shape) if shape is not None else (flat,)
        return f"global '{buf.name}' at flat index {flat} ({buf.name}[{', '.join(str(int(i)) for i in at)}])"

    def _race(self, buf, flat, me, mine: str, other, theirs: str):
        same = int(me) // self.nthreads == int(other) // self.nthreads
        why = ("with no __syncthreads() between" if same else
               "in another block (blocks of one kernel are not ordered: only a later kernel may read "
               "what a block wrote)")
        raise EmulationError(f"kernel {self.info.name}: race on {self._element(buf, flat)}: {self._thread(me)} "
                             f"{mine} it and {self._thread(other)} {theirs} it, {why}")

    def _unordered(self, other, lanes, blk, ep, other_epoch):
        """Accesses by ``other`` that are not ordered before the current accesses by ``lanes``:
        another thread, of another block or of this block since its last barrier."""
        return (other >= 0) & (other != lanes) & ((other // self.nthreads != blk) | (other_epoch == ep))

    def _global_read(self, buf, idx, lanes):
        if idx.ndim == 2:
            lanes = np.repeat(lanes[:, None], idx.shape[1], 1).reshape(-1)
            idx = idx.reshape(-1)
        g = self.tracked[buf]
        blk = lanes // self.nthreads
        ep = self.epoch[blk]
        w = g.writer[idx]
        bad = self._unordered(w, lanes, blk, ep, g.w_epoch[idx]) & ~(g.w_all[idx] & (w // self.nthreads == blk))
        if bad.any():
            k = np.argmax(bad)
            self._race(buf, idx[k], lanes[k], "reads", w[k], "writes")
        # first reader, and the first from another block
        first = g.r_first[idx]
        new = first == -1
        g.r_first[idx[new]] = lanes[new]
        first = g.r_first[idx]
        far = (first // self.nthreads != blk) & (g.r_other[idx] == -1)
        g.r_other[idx[far]] = lanes[far]
        # readers since the last barrier of the current reader's block
        cur = g.r_cur[idx]
        live = (cur >= 0) & (cur // self.nthreads == blk) & (g.r_epoch[idx] == ep)
        fresh = idx[~live]
        g.r_cur2[fresh] = -1
        g.r_cur[fresh] = lanes[~live]
        g.r_epoch[fresh] = ep[~live]
        cur = g.r_cur[idx]                      # several fresh readers of one element: one won
        second = (cur != lanes) & (cur // self.nthreads == blk) & (g.r_cur2[idx] == -1)
        g.r_cur2[idx[second]] = lanes[second]

    def _global_write(self, buf, idx, lanes, vals):
        if idx.ndim == 2:
            lanes = np.repeat(lanes[:, None], idx.shape[1], 1).reshape(-1)
            idx, vals = idx.reshape(-1), vals.reshape(-1)
        g = self.tracked[buf]
        blk = lanes // self.nthreads
        ep = self.epoch[blk]
        w = g.writer[idx]
        bad = self._unordered(w, lanes, blk, ep, g.w_epoch[idx])
        if bad.any():
            k = np.argmax(bad)
            self._race(buf, idx[k], lanes[k], "writes", w[k], "writes")
        first, other = g.r_first[idx], g.r_other[idx]
        far = np.where((first >= 0) & (first // self.nthreads != blk), first,
                       np.where((other >= 0) & (other // self.nthreads != blk), other, -1))
        if (far >= 0).any():
            k = np.argmax(far >= 0)
            self._race(buf, idx[k], lanes[k], "writes", far[k], "reads")
        cur, cur2 = g.r_cur[idx], g.r_cur2[idx]
        live = (cur >= 0) & (cur // self.nthreads == blk) & (g.r_epoch[idx] == ep)
        near = np.where(live & (cur != lanes), cur, np.where(live & (cur2 >= 0) & (cur2 != lanes), cur2, -1))
        if (near >= 0).any():
            k = np.argmax(near >= 0)
            self._race(buf, idx[k], lanes[k], "writes", near[k], "reads")
        g.writer[idx] = lanes
        won = g.writer[idx]
        dup = won != lanes
        g.w_all[idx] = False
        if dup.any():
            # several threads store one element in this statement: harmless if they all store the
            # same value (a stage computed redundantly by every thread), a race otherwise
            same = _same_as_landed(idx, vals)
            if not same.all():
                k = int(np.argmax(~same))
                raise EmulationError(
                    f"kernel {self.info.name}: several threads store different values to "
                    f"{self._element(buf, idx[k])} in one statement: {self._thread(lanes[k])} and "
                    f"{self._thread(won[k])} (a race: which value lands is undefined)")
            g.w_all[idx[dup]] = True
        g.w_epoch[idx] = ep

    def allreduce(self, e, mask):
        self.barrier(mask)
        v = self.expr(e.args[0], mask)
        op = _REDUCE[e.name[len(ALLREDUCE_PREFIX):]]
        bx = self.info.block[0]
        if bx & (bx - 1):
            return _allreduce_any(v, op, bx, self.nthreads)
        groups = v.reshape(-1, bx)
        r = op.reduce(groups, axis=1).astype(v.dtype)
        return np.repeat(r, bx)


def _allreduce_any(v, op, bx: int, nt: int):
    """The CUDA C's ``tc_allreduce_any`` (rows of ``bx`` threads, not a power of two, in blocks of
    ``nt``), step by step: the guarded shuffles fold each row's piece of a warp into the piece's
    first lane; each thread then combines its row's first lane with the first lane of every
    further warp the row reaches. Any slip in those guards shows as a wrong sum here."""
    g = np.arange(v.size)
    tid = g % nt
    x, lane = tid % bx, tid & 31
    n = np.minimum(32, nt - (tid & ~31))            # lanes that exist in the thread's warp
    o = 1
    while o < min(bx, 32):
        o *= 2
    o //= 2
    while o > 0:                                    # __shfl_down_sync, the guard, the fold
        ok = (x + o < bx) & (lane + o < n)
        w = v[np.where(ok, g + o, g)]
        v = np.where(ok, op(v, w), v).astype(v.dtype)
        o //= 2
    start = g - x                                   # the row's first thread
    r = v[start]
    last = ((tid - x) + bx - 1) >> 5                # the warp of the row's last thread
    w = ((tid - x) >> 5) + 1
    block0 = g - tid
    while True:
        more = w <= last
        if not more.any():
            return r
        r = np.where(more, op(r, v[np.where(more, block0 + 32 * w, g)]), r).astype(v.dtype)
        w = w + 1


def _same_as_landed(idx, vals):
    """Per store position: whether its value equals the one that lands in its element (the last
    of the positions storing that element, as numpy's scatter does)."""
    _, inv = np.unique(idx, return_inverse=True)
    landed = np.empty(inv.max() + 1, vals.dtype)
    landed[inv] = vals
    got = landed[inv]
    same = got == vals
    if vals.dtype.kind == "f":
        same |= np.isnan(got) & np.isnan(vals)
    return same


def _align(a, b):
    if a.ndim == b.ndim:
        return a, b
    if a.ndim == 1:
        return np.repeat(a[:, None], b.shape[1], 1), b
    return a, np.repeat(b[:, None], a.shape[1], 1)


def _const_eval(e, env):
    from ..runtime.cuda_runtime import eval_int
    return eval_int(e, env)


def emulate(func, args, check_races: bool = True) -> None:
    """Run ``func`` (lowered with ``target="cuda"``) on numpy arrays ``args`` (written in place)."""
    buffers = [p for p in func.params if isinstance(p, Buffer)]
    scalars = [p for p in func.params if isinstance(p, Var)]
    if len(args) < len(buffers):
        raise TypeError(f"{func.name} expects {len(buffers)} arrays")
    env: dict = {}
    globals_: dict = {}
    shapes: dict = {}
    for b, a in zip(buffers, args):
        if a.dtype != _np(b.dtype):
            raise TypeError(f"'{b.name}': expected {b.dtype}, got {a.dtype}")
        if dt.element_of(b.dtype) == "bfloat16" and not np.array_equal(dt.round_bfloat16(a), a, equal_nan=True):
            raise TypeError(f"'{b.name}' is bfloat16: pass float32 values rounded to bfloat16 "
                            f"(tilecraft.ir.dtype.round_bfloat16), got float32 values that are not")
        for d, s in zip(b.shape, a.shape):
            if isinstance(d, Var):
                env[d] = s
        globals_[b] = a.reshape(-1)
        shapes[b] = a.shape
    extra = list(args[len(buffers):])
    for v in scalars:
        if v not in env:
            env[v] = extra.pop(0)
    workspace, kernels = kernels_of(func.body)
    for w in workspace:
        globals_[w] = _poisoned(_const_eval(w.shape[0], env), w.dtype)
    launched = {id(info) for info, _ in kernels}

    def run(items):             # kernels in order; a host loop (a scan's steps) launches its own per step
        for kind, a, b in items:
            if kind == "kernel":
                if id(a) in launched:
                    _Kernel(a, b, globals_, env, check_races, shapes).run()
                continue
            lo = int(_const_eval(a.min, env))
            for i in range(lo, lo + int(_const_eval(a.extent, env))):
                env[a.loop_var] = i
                run(b)
            env.pop(a.loop_var, None)
    run(launch_program(func.body)[1])
