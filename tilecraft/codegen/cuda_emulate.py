"""Run a function lowered for ``target="cuda"`` on the CPU, with numpy, and check it for races.

Every thread of every block runs in lock step: a value is a numpy array with one entry per thread
of the whole grid (``(threads,)``, or ``(threads, lanes)`` for vectors); a condition that differs
between threads masks the threads that do not take it. Shared buffers have one copy per block,
local buffers one per thread. While it runs it checks what a GPU would not:

* every access lies inside its buffer (an out-of-bounds index raises ``EmulationError``);
* no thread reads a shared element that another thread of its block wrote, or writes one that
  another thread read or wrote, since the last barrier (a missing ``__syncthreads()``);
* every barrier is reached by all threads of the block (no barrier in divergent code).

It is the executable check of the GPU lowering on machines without a GPU, not a fast simulator:
use small shapes.

>>> # emulate(tilecraft.lower(s, [A, B, C], target="cuda"), [a, b, c])   # numpy arrays, c is written
"""
from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from ..ir.expr import (BinOp, Binary, Broadcast, BufferLoad, Call, Cast, Const, Ramp, Select, Unary,
                       UnOp, Var)
from ..ir.stmt import (Allocate, AttrStmt, Buffer, BufferStore, Evaluate, For, IfThenElse, LetStmt,
                       SeqStmt)
from ..ir.expr import trunc_divide, trunc_remainder
from ..schedule.passes.gpu_barriers import SYNC
from ..schedule.passes.gpu_lower import kernels_of
from ..schedule.passes.gpu_thread_reduce import ALLREDUCE_PREFIX


class EmulationError(RuntimeError):
    """The kernel would misbehave on a GPU: out-of-bounds access, race, divergent barrier."""


def _np(dtype: str):
    return np.dtype("bool" if dt.is_bool(dtype) else dt.element_of(dtype))


_BIN = {
    BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply,
    BinOp.MIN: np.minimum, BinOp.MAX: np.maximum, BinOp.EQ: np.equal, BinOp.NE: np.not_equal,
    BinOp.LT: np.less, BinOp.LE: np.less_equal, BinOp.GT: np.greater, BinOp.GE: np.greater_equal,
    BinOp.AND: np.logical_and, BinOp.OR: np.logical_or, BinOp.BITAND: np.bitwise_and,
    BinOp.BITOR: np.bitwise_or, BinOp.BITXOR: np.bitwise_xor, BinOp.SHL: np.left_shift,
    BinOp.SHR: np.right_shift, BinOp.FLOORDIV: np.floor_divide, BinOp.FLOORMOD: np.mod,
}

_MATH = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh, "floor": np.floor,
    "ceil": np.ceil, "round": np.rint, "trunc": np.trunc, "sin": np.sin, "cos": np.cos,
    "fabs": np.abs, "pow": np.power, "fma": lambda a, b, c: a * b + c, "isnan": np.isnan,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}

_REDUCE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


class _Shared:
    """A shared buffer: one copy per block, plus who touched each element since the barrier."""

    def __init__(self, buf, nblocks: int):
        n = int(buf.shape[0].value)
        self.buf = buf
        self.data = np.zeros((nblocks, n), _np(buf.dtype))
        self.writer = np.full((nblocks, n), -1, np.int64)
        self.reader = np.full((nblocks, n), -1, np.int64)     # -2: several threads

    def reset(self):
        self.writer.fill(-1)
        self.reader.fill(-1)


class _Kernel:
    def __init__(self, info, body, globals_: dict, env: dict, check_races: bool):
        self.info, self.body, self.globals, self.check = info, body, globals_, check_races
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
                self.local[s.buffer] = np.zeros((self.L, n), _np(s.buffer.dtype))
            else:
                raise EmulationError(f"unexpected {s.buffer.scope} allocation '{s.buffer.name}' inside a kernel")
            self.stmt(s.body, mask)
        elif t is Evaluate:
            if isinstance(s.value, Call) and s.value.name == SYNC:
                self.barrier(mask)
            elif not isinstance(s.value, Const):
                self.expr(s.value, mask)
        elif t is AttrStmt:
            self.stmt(s.body, mask)
        else:
            raise EmulationError(f"cannot emulate {t.__name__}")

    def barrier(self, mask):
        per_block = np.bincount(self.block_of[mask], minlength=self.nblocks)
        if np.any((per_block != 0) & (per_block != self.nthreads)):
            raise EmulationError(f"kernel {self.info.name}: __syncthreads() reached by only some threads of "
                                 f"a block (a barrier in divergent code)")
        for sh in self.shared.values():
            sh.reset()

    def _where(self, buf):
        if buf.scope == "shared":
            return "shared", self.shared[buf]
        if buf.scope == "local":
            return "local", self.local[buf]
        return "global", self.globals[buf]

    def _check_bounds(self, buf, idx, mask, size):
        m = mask if idx.ndim == 1 else mask[:, None] & np.ones(idx.shape, bool)
        bad = m & ((idx < 0) | (idx >= size))
        if bad.any():
            i = np.argwhere(bad)[0]
            raise EmulationError(f"kernel {self.info.name}: out-of-bounds access {buf.name}[{idx[tuple(i)]}] "
                                 f"(size {size}) by thread {int(self.tid[i[0]])} of block {int(self.block_of[i[0]])}")

    def store(self, s, mask):
        val = self.expr(s.value, mask)
        idx = self.expr(s.indices[0], mask).astype(np.int64)
        if val.ndim < idx.ndim:
            val = np.broadcast_to(val[:, None], idx.shape)
        kind, where = self._where(s.buffer)
        lanes = np.nonzero(mask)[0]
        idx_m, val_m = idx[lanes], val[lanes]
        if kind == "global":
            self._check_bounds(s.buffer, idx, mask, where.size)
            where[idx_m] = val_m
        elif kind == "local":
            self._check_bounds(s.buffer, idx, mask, where.shape[1])
            rows = lanes if idx.ndim == 1 else np.repeat(lanes[:, None], idx.shape[1], 1)
            where[rows, idx_m] = val_m
        else:
            self._check_bounds(s.buffer, idx, mask, where.data.shape[1])
            blk = self.block_of[lanes]
            tid = self.tid[lanes]
            if idx.ndim == 2:
                blk = np.repeat(blk[:, None], idx.shape[1], 1)
                tid = np.repeat(tid[:, None], idx.shape[1], 1)
            if self.check:
                w, r = where.writer[blk, idx_m], where.reader[blk, idx_m]
                bad = ((w != -1) & (w != tid)) | ((r != -1) & (r != tid))
                if bad.any():
                    k = np.argwhere(bad)[0]
                    raise EmulationError(
                        f"kernel {self.info.name}: race on shared '{s.buffer.name}[{idx_m[tuple(k)]}]': thread "
                        f"{tid[tuple(k)]} writes it after thread {max(w[tuple(k)], r[tuple(k)])} accessed it "
                        f"with no __syncthreads() between")
                where.writer[blk, idx_m] = tid
            where.data[blk, idx_m] = val_m

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
                return self.expr(e.value, mask).astype(_np(e.dtype))
        if t is Select:
            c = self.expr(e.condition, mask).astype(bool)
            a, b = self.expr(e.true_value, mask & c if c.ndim == 1 else mask), self.expr(e.false_value, mask)
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
        if t is BufferLoad:
            return self.load(e, mask)
        if t is Call:
            if e.name.startswith(ALLREDUCE_PREFIX):
                return self.allreduce(e, mask)
            args = [self.expr(a, mask) for a in e.args]
            with np.errstate(all="ignore"):
                out = _MATH[e.name](*args)
            return out.astype(_np(e.dtype))
        raise EmulationError(f"cannot emulate {t.__name__}")

    def load(self, e, mask):
        idx = self.expr(e.indices[0], mask).astype(np.int64)
        kind, where = self._where(e.buffer)
        m = mask if idx.ndim == 1 else np.repeat(mask[:, None], idx.shape[1], 1)
        safe = np.where(m, idx, 0)
        if kind == "global":
            self._check_bounds(e.buffer, idx, mask, where.size)
            return where[safe]
        if kind == "local":
            self._check_bounds(e.buffer, idx, mask, where.shape[1])
            rows = np.arange(self.L) if idx.ndim == 1 else np.repeat(np.arange(self.L)[:, None], idx.shape[1], 1)
            return where[rows, safe]
        self._check_bounds(e.buffer, idx, mask, where.data.shape[1])
        blk = self.block_of if idx.ndim == 1 else np.repeat(self.block_of[:, None], idx.shape[1], 1)
        tid = self.tid if idx.ndim == 1 else np.repeat(self.tid[:, None], idx.shape[1], 1)
        if self.check:
            w = where.writer[blk, safe]
            bad = m & (w != -1) & (w != tid)
            if bad.any():
                k = tuple(np.argwhere(bad)[0])
                raise EmulationError(
                    f"kernel {self.info.name}: race on shared '{e.buffer.name}[{safe[k]}]': thread {tid[k]} "
                    f"reads what thread {w[k]} wrote with no __syncthreads() between")
            r = where.reader[blk[m], safe[m]]
            t_m = tid[m]
            where.reader[blk[m], safe[m]] = np.where((r == -1) | (r == t_m), t_m, -2)
        return where.data[blk, safe]

    def allreduce(self, e, mask):
        self.barrier(mask)
        v = self.expr(e.args[0], mask)
        op = _REDUCE[e.name[len(ALLREDUCE_PREFIX):]]
        bx = self.info.block[0]
        groups = v.reshape(-1, bx)
        r = op.reduce(groups, axis=1).astype(v.dtype)
        return np.repeat(r, bx)


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
    for b, a in zip(buffers, args):
        if a.dtype != _np(b.dtype):
            raise TypeError(f"'{b.name}': expected {b.dtype}, got {a.dtype}")
        for d, s in zip(b.shape, a.shape):
            if isinstance(d, Var):
                env[d] = s
        globals_[b] = a.reshape(-1)
    extra = list(args[len(buffers):])
    for v in scalars:
        if v not in env:
            env[v] = extra.pop(0)
    workspace, kernels = kernels_of(func.body)
    for w in workspace:
        globals_[w] = np.zeros(_const_eval(w.shape[0], env), _np(w.dtype))
    for info, body in kernels:
        _Kernel(info, body, globals_, env, check_races).run()
