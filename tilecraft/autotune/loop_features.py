"""Features of a lowered loop nest (AutoTVM's ``itervar`` and ``curve`` features, simplified).

The nest that matters is the one around the *main store*: the ``BufferStore`` executed most
often (ties: the deepest). Along its loops, innermost first, for a fixed number of loops
(``MAX_LOOPS``, padded with zeros) and a fixed number of buffer slots (the function's parameters
in order, then allocated buffers in order of appearance; ``MAX_BUFFERS``):

``itervar``, per loop: log2 extent, kind (one-hot: serial, parallel, vectorized, unrolled,
thread), log2 of the iterations inside it and above it; per buffer slot: log2(1 + |stride|) of
the loop variable in the buffer's index, log2 of the elements touched inside the loop (the
*count*: product of the extents of inner loops the index depends on, times vector lanes) and
of the reuse (product of the extents of inner loops it does not depend on).

``curve``, per buffer slot: the count and reuse above as curves over loop depth.

Both end with global features: vector lanes of the main store, loop depth, parallel loops,
number of stores, log2 size of each allocation slot. Every vector has the same length.
"""
from __future__ import annotations

import math

import numpy as np

MAX_LOOPS = 8
MAX_BUFFERS = 5
_KINDS = ("SERIAL", "PARALLEL", "VECTORIZED", "UNROLLED", "THREAD_BINDING")
N_GLOBAL = 5 + MAX_BUFFERS


def _int(e, default=1) -> int:
    v = getattr(e, "value", None)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(e, (int, np.integer)):
        return int(e)
    return default


def _eval(e, env: dict) -> float:
    """Evaluate an index expression with variables from ``env`` (others read 0)."""
    from tilecraft.ir import expr as E

    if isinstance(e, E.Const):
        return float(e.value)
    if isinstance(e, E.Var):
        return float(env.get(e, 0))
    if isinstance(e, E.Binary):
        a, b = _eval(e.a, env), _eval(e.b, env)
        op = e.op
        if op is E.BinOp.ADD:
            return a + b
        if op is E.BinOp.SUB:
            return a - b
        if op is E.BinOp.MUL:
            return a * b
        if op in (E.BinOp.FLOORDIV, E.BinOp.TRUNCDIV, E.BinOp.DIV):
            return math.floor(a / b) if b else 0.0
        if op in (E.BinOp.FLOORMOD, E.BinOp.TRUNCMOD):
            return a % b if b else 0.0
        if op is E.BinOp.MIN:
            return min(a, b)
        if op is E.BinOp.MAX:
            return max(a, b)
        return 0.0
    if isinstance(e, E.Ramp):
        return _eval(e.base, env)
    if isinstance(e, E.Broadcast):
        return _eval(e.value, env)
    if isinstance(e, E.Cast):
        return _eval(e.value, env)
    return 0.0


def _stride(index, var, extent: int) -> float:
    """How far the index moves when ``var`` steps by one (probing a step inside the loop, so
    ``(x*4 + v) // 4`` reads 0 rather than a misleading 0.25)."""
    step = 1 if extent <= 1 else min(extent - 1, 1)
    base = _eval(index, {})
    return abs(_eval(index, {var: step}) - base) / step


class _Access:
    __slots__ = ("buffer", "index", "lanes")

    def __init__(self, buffer, index, lanes):
        self.buffer, self.index, self.lanes = buffer, index, lanes


def _collect(func):
    """Walk the body: every store with its enclosing loops and the accesses in it."""
    from tilecraft.ir import expr as E
    from tilecraft.ir import stmt as S
    from tilecraft.ir.functor import post_order_visit

    stores = []
    allocs = []

    def lanes_of(idx):
        return idx.lanes if isinstance(idx, E.Ramp) else 1

    def flat_index(indices):
        return indices[0] if len(indices) == 1 else indices[-1]

    def walk(s, loops):
        if s is None:
            return
        if isinstance(s, S.For):
            walk(s.body, loops + [(s.loop_var, _int(s.extent), s.kind.name)])
        elif isinstance(s, S.SeqStmt):
            for x in s.seq:
                walk(x, loops)
        elif isinstance(s, S.Allocate):
            allocs.append(s.buffer)
            walk(s.body, loops)
        elif isinstance(s, S.IfThenElse):
            walk(s.then_case, loops)
            walk(s.else_case, loops)
        elif isinstance(s, (S.LetStmt, S.AttrStmt)):
            walk(s.body, loops)
        elif isinstance(s, S.BufferStore):
            idx = flat_index(s.indices)
            accesses = [_Access(s.buffer, idx, lanes_of(idx))]

            def visit(n):
                if isinstance(n, E.BufferLoad):
                    i = flat_index(n.indices)
                    accesses.append(_Access(n.buffer, i, lanes_of(i)))

            post_order_visit(s.value, visit)
            stores.append((loops, accesses, lanes_of(idx)))

    walk(func.body, [])
    return stores, allocs


def _buffer_slots(func, allocs) -> list:
    params = [p for p in func.params if hasattr(p, "shape") and hasattr(p, "scope")]
    slots = []
    for b in params + allocs:
        if b.name not in [x.name for x in slots]:
            slots.append(b)
    return slots[:MAX_BUFFERS]


def _log2(x: float) -> float:
    return math.log2(x + 1.0)


def nest_features(func, feature_type: str = "itervar") -> np.ndarray:
    """The fixed-length feature vector of a lowered ``PrimFunc``."""
    stores, allocs = _collect(func)
    slots = _buffer_slots(func, allocs)
    if not stores:
        width = feature_length(feature_type)
        return np.zeros(width, np.float32)

    def weight(st):
        loops = st[0]
        return (math.prod(ext for _, ext, _ in loops) * st[2], len(loops))

    loops, accesses, lanes = max(stores, key=weight)
    inner_first = loops[::-1]
    n = len(inner_first)
    # per buffer slot, per loop: stride, count, reuse
    stride = np.zeros((MAX_BUFFERS, MAX_LOOPS), np.float32)
    count = np.zeros((MAX_BUFFERS, MAX_LOOPS), np.float32)
    reuse = np.zeros((MAX_BUFFERS, MAX_LOOPS), np.float32)
    for b, buf in enumerate(slots):
        accs = [a for a in accesses if a.buffer.name == buf.name]
        if not accs:
            continue
        c, r = float(max(a.lanes for a in accs)), 1.0
        for li, (var, ext, _) in enumerate(inner_first):
            st = max(_stride(a.index, var, ext) for a in accs)
            if st > 0:
                c *= ext
            else:
                r *= ext
            if li < MAX_LOOPS:
                stride[b, li] = _log2(st)
                count[b, li] = _log2(c)
                reuse[b, li] = _log2(r)
    glob = [_log2(lanes), float(n), float(sum(1 for _, _, k in loops if k == "PARALLEL")), _log2(len(stores)),
            _log2(math.prod(ext for _, ext, _ in loops))]
    alloc_sizes = np.zeros(MAX_BUFFERS, np.float32)
    for i, b in enumerate(allocs[:MAX_BUFFERS]):
        alloc_sizes[i] = _log2(math.prod(_int(d) for d in b.shape))
    if feature_type == "curve":
        return np.concatenate([count.ravel(), reuse.ravel(), glob, alloc_sizes]).astype(np.float32)
    per_loop = np.zeros((MAX_LOOPS, 4 + len(_KINDS)), np.float32)
    below = 1.0
    total = math.prod(ext for _, ext, _ in loops)
    for li, (var, ext, kind) in enumerate(inner_first[:MAX_LOOPS]):
        below *= ext
        per_loop[li, 0] = _log2(ext)
        per_loop[li, 1 + _KINDS.index(kind) if kind in _KINDS else 1] = 1.0
        per_loop[li, 1 + len(_KINDS)] = _log2(below)
        per_loop[li, 2 + len(_KINDS)] = _log2(total / below)
        per_loop[li, 3 + len(_KINDS)] = float(li)
    buf = np.stack([stride, count, reuse], axis=-1).transpose(1, 0, 2).reshape(MAX_LOOPS, -1)
    return np.concatenate([np.concatenate([per_loop, buf], axis=1).ravel(), glob, alloc_sizes]).astype(np.float32)


def feature_length(feature_type: str) -> int:
    if feature_type == "curve":
        return 2 * MAX_BUFFERS * MAX_LOOPS + N_GLOBAL
    return MAX_LOOPS * (4 + len(_KINDS) + 3 * MAX_BUFFERS) + N_GLOBAL


def extract(task, config, feature_type: str = "itervar") -> np.ndarray:
    """Instantiate ``config`` of ``task``, lower it and return its features."""
    import tilecraft
    from .space import InstantiationError

    sch, args = task.instantiate(config)
    if config.errors:
        raise InstantiationError("; ".join(config.errors))
    func = tilecraft.lower(sch, args)
    return nest_features(func, feature_type)


#: shape_normalised's caps (log2 scale): a stride past 64 elements, a count, reuse, trip count
#: or allocation past 2^20 elements, a loop past 64 iterations, more than 2^12 iterations
#: around a loop all look alike
CAP_STRIDE, CAP_COUNT, CAP_EXTENT, CAP_ABOVE = _log2(64), _log2(2 ** 20), _log2(64), _log2(2 ** 12)


def shape_normalised(x: np.ndarray, feature_type: str = "itervar") -> np.ndarray:
    """Features (rows of ``nest_features``) that mean the same in a neighbouring shape, for
    transfer learning: the ones that grow with the problem (outer extents, strides of rows,
    touched elements and reuse of outer loops, allocation sizes) are capped where the caches stop
    telling sizes apart (``CAP_*``), and the total trip count, which only tells shapes apart,
    is dropped (zero). Inner tiles, vector lanes, unrolling and loop kinds pass unchanged.

    >>> shape_normalised(np.stack([nest_features(f) for f in funcs]))
    """
    x = np.array(x, dtype=np.float32, copy=True)
    if x.ndim != 2 or x.shape[1] != feature_length(feature_type):
        raise ValueError(f"shape_normalised: expected rows of {feature_length(feature_type)} {feature_type} "
                         f"features, got shape {x.shape}")
    n_buf = MAX_BUFFERS * MAX_LOOPS
    if feature_type == "curve":
        np.minimum(x[:, : 2 * n_buf], CAP_COUNT, out=x[:, : 2 * n_buf])
    else:
        width = 4 + len(_KINDS) + 3 * MAX_BUFFERS
        loops = x[:, : MAX_LOOPS * width].reshape(len(x), MAX_LOOPS, width)
        np.minimum(loops[:, :, 0], CAP_EXTENT, out=loops[:, :, 0])
        np.minimum(loops[:, :, 1 + len(_KINDS)], CAP_COUNT, out=loops[:, :, 1 + len(_KINDS)])
        np.minimum(loops[:, :, 2 + len(_KINDS)], CAP_ABOVE, out=loops[:, :, 2 + len(_KINDS)])
        buf = loops[:, :, 4 + len(_KINDS):].reshape(len(x), MAX_LOOPS, MAX_BUFFERS, 3)
        np.minimum(buf[..., 0], CAP_STRIDE, out=buf[..., 0])
        np.minimum(buf[..., 1:], CAP_COUNT, out=buf[..., 1:])
        x[:, : MAX_LOOPS * width] = loops.reshape(len(x), -1)
    glob = x.shape[1] - N_GLOBAL
    x[:, glob + 4] = 0.0                                   # the total trip count
    np.minimum(x[:, glob + 5:], CAP_COUNT, out=x[:, glob + 5:])
    return x
