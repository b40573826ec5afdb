"""The reference interpreter: evaluate a tensor-expression graph directly with numpy.

It is the executable form of the semantics in :mod:`tilecraft.ir.expr` and what the tests
compare compiled code against, so it is written to be obviously correct rather than fast:

* each ``te.compute`` is evaluated at every point of its index grid at once: an axis variable
  is an ``arange`` shaped to broadcast along its own dimension;
* integer ``//``/``%`` round towards negative infinity, ``truncdiv``/``truncmod`` towards zero,
  integer arithmetic wraps (numpy arrays of the exact dtype do both), float16 stays float16;
* ``te.if_then_else`` (a lazy ``Select``) evaluates each branch under a *mask*: a load only
  reads where its mask holds, so a guarded out-of-bounds index is never touched. A load that
  is out of bounds where the mask holds raises :class:`InterpError` naming the stage, the
  element read, the index expression, the extent and the axes' values at the first such point;
* a ``te.scan`` runs its body stages one step at a time (``_scan``), the state holding the rows
  before the step (a read of the current step or a later one is an out-of-bounds read);
* a ``Reduce`` folds its combiner over the reduction points in lexicographic order (a ragged
  axis, whose bounds read tensors or outer axes, over the points of each output's own range), starting
  from ``init=`` (evaluated at each output point) or else the identity; points where ``where=``
  fails contribute the identity (their source is evaluated under that mask). Points are evaluated in chunks that fit a memory budget; within a
  chunk they are combined by an order-preserving pairwise tree (``(v0+v1)+(v2+v3)``), which
  equals the sequential fold for any associative combiner, so tuple reducers such as argmax keep
  the first index on ties exactly as a sequential fold does.

>>> import numpy as np
>>> from tilecraft import te, interp
>>> A = te.placeholder((3,), name="A")
>>> B = te.compute((3,), lambda i: A[i] * 2.0, name="B")
>>> interp.evaluate(B, {A: np.arange(3, dtype="float32")})
array([0., 2., 4.], dtype=float32)
"""
from __future__ import annotations

import math

import numpy as np

from .ir import dtype as dt
from .ir import intrinsics
from .ir.expr import (Binary, BinOp, Call, Cast, Const, Expr, Let, Reduce, Select, TensorLoad,
                      Unary, UnOp, Var, trunc_divide, trunc_remainder)
from .ir import packed
from .te.extern import ExternOp
from .te.hybrid import HybridOp
from .te.scan import ScanOp
from .te.tensor import ComputeOp, PlaceholderOp, Tensor, is_ragged_axis, post_dfs_order

# Largest number of elements (output points x reduction points) evaluated at once.
BUDGET = 1 << 22


class InterpError(ValueError):
    """The graph cannot be evaluated: a missing input, a wrong shape, an out-of-bounds read."""


def evaluate(outputs, feed: dict, budget: int = BUDGET):
    """Evaluate ``outputs`` (a Tensor or a list of them) on ``feed``.

    ``feed`` maps each placeholder Tensor to a numpy array and each symbolic ``te.var`` to a
    number of the variable's dtype (shape extents, scalar arguments); a variable that is a whole
    dimension of a fed placeholder's shape is taken from the array. Returns one numpy array per
    output (a single array for a single Tensor). ``budget`` bounds the number of elements
    evaluated at once in a reduction.
    """
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    scalars, arrays = _split_feed(feed)
    values: dict = {}   # Tensor -> np.ndarray
    order = post_dfs_order([t.op for t in outs])
    per_step = {o for op in order if isinstance(op, ScanOp)
                for o in op.body_ops + [p.op for p in op.state_placeholder]}
    for op in order:
        if op in per_step:
            continue            # evaluated step by step by its scan
        if isinstance(op, ScanOp):
            values.update(zip(op.outputs, _scan(op, values, scalars, budget)))
        elif isinstance(op, PlaceholderOp):
            values[op.output(0)] = _fed(op.output(0), arrays, scalars)
        elif isinstance(op, ComputeOp):
            for t, v in zip(op.outputs, _compute(op, values, scalars, budget)):
                values[t] = v
        elif isinstance(op, ExternOp):
            values.update(zip(op.outputs, _extern(op, values, scalars)))
        else:
            raise InterpError(f"cannot evaluate operation {op!r}")
    res = [values[t] for t in outs]
    return res[0] if single else res


def run_tensor_intrin(intrin, part: str, inputs, outputs, scalars: dict | None = None) -> None:
    """Perform one use of a tensor intrinsic (``te.decl_tensor_intrin``) by its TE definition, on
    numpy arrays (or views) of its buffers' shapes; ``outputs`` are written in place. ``part``:

    * ``"body"``: the outputs become the definition's value (a reduction starts from its
      identity, or its ``init=``);
    * ``"reset"``: the outputs become the reduction's start value (``inputs`` is not read);
    * ``"update"``: the reduction over this use's points is folded into the outputs.

    This is how the lowered-IR interpreter and the CUDA emulator run a tensorized region: its
    meaning is the definition, whatever the intrinsic's lowering calls.

    ``scalars``: the values of the intrinsic's ``scalar_params`` in this use (``{m0: 128}``).

    Example: ``run_tensor_intrin(gemv, "update", [a, b], [c])`` adds ``sum_k a[k] * b[i, k]``
    to each ``c[i]``.
    """
    op = intrin.op
    red = op.body[0] if isinstance(op.body[0], Reduce) else None
    if part != "body" and red is None:
        raise InterpError(f"tensor intrinsic '{intrin.name}': '{part}' of an intrinsic that is not a reduction")
    feed = {t: np.ascontiguousarray(a) for t, a in zip(intrin.inputs, inputs or ())}
    missing = [p.name for p in intrin.scalar_params if p not in (scalars or {})]
    if missing:
        raise InterpError(f"tensor intrinsic '{intrin.name}': no value for its scalar parameter(s) "
                          f"{', '.join(missing)}")
    feed.update({p: scalars[p] for p in intrin.scalar_params})
    if part == "body":
        results = evaluate(list(op.outputs), feed)
    elif part == "reset":
        shape = tuple(int(iv.dom.extent.value) for iv in op.axis)
        starts = red.combiner.identity
        env = _grid(op.axis, shape, extra=0)
        if red.init:
            starts = red.init
        results = [np.broadcast_to(_Eval(env, {}, op.name).ev(e, None), shape) for e in starts]
    elif part == "update":
        fresh = ComputeOp(op.name, op.tag, op.attrs, op.axis, op.reduce_axis,
                          tuple(Reduce(b.combiner, b.source, b.axis, b.condition, b.value_index, ())
                                for b in op.body))
        partial = evaluate(list(fresh.outputs), feed)       # the same placeholders as op's
        results = _combine(red.combiner, [np.array(o) for o in outputs], partial)
    else:
        raise InterpError(f"tensor intrinsic '{intrin.name}': unknown part {part!r} (body, reset, update)")
    for o, r in zip(outputs, results):
        o[...] = np.asarray(r, dtype=o.dtype)


def tile_view(flat, offset, shape, strides, name: str = "tile", target: str = "buffer"):
    """The tile that a declared buffer (``name``) views in buffer ``target``: ``shape`` elements
    of the flat array ``flat``, ``strides`` elements apart, from element ``offset``; a writable
    numpy view. ``InterpError`` if the tile leaves the array. (What a ``buffer_bind_scope`` binds,
    for :func:`run_tensor_intrin`.)

    Example: ``tile_view(np.arange(12.0), 1, (2, 3), (4, 1))`` is ``[[1, 2, 3], [5, 6, 7]]``.
    """
    offset, shape, strides = int(offset), tuple(int(x) for x in shape), tuple(int(x) for x in strides)
    if all(shape):
        lo = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
        hi = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
        if lo < 0 or hi >= flat.size:
            raise InterpError(f"the intrinsic's buffer '{name}' (shape {list(shape)}, strides {list(strides)}, "
                              f"from element {offset}) reaches elements {lo}..{hi} of '{target}', which has "
                              f"{flat.size}")
    return np.lib.stride_tricks.as_strided(flat[min(offset, flat.size):], shape,
                                           tuple(s * flat.itemsize for s in strides))


# ------------------------------------------------------------------------------------------------
# inputs and shapes

def _split_feed(feed: dict):
    scalars, arrays = {}, {}
    for k, v in feed.items():
        if isinstance(k, Var):
            scalars[k] = np.asarray(v, dtype=_np(k.dtype))
        elif isinstance(k, Tensor):
            arrays[k] = np.asarray(v)
        else:
            raise InterpError(f"feed keys must be placeholder tensors or te.var's, got {k!r}")
    # a shape dimension that is a bare variable is known from the fed array
    for t, a in arrays.items():
        for d, s in enumerate(t.shape):
            if isinstance(s, Var) and s not in scalars and d < a.ndim:
                scalars[s] = a.shape[d]
    return scalars, arrays


def _scalar(e, scalars: dict, what: str) -> int:
    try:
        v = _Eval(scalars, {}).ev(e, None)
    except KeyError as err:
        raise InterpError(f"{what} `{e}` uses the variable '{err.args[0]}', which is not in the feed") from None
    return int(v)


def _fed(t: Tensor, arrays: dict, scalars: dict) -> np.ndarray:
    if t not in arrays:
        raise InterpError(f"no value for placeholder '{t.name}' in the feed")
    a = arrays[t]
    shape = tuple(_scalar(s, scalars, f"the shape of '{t.name}'") for s in t.shape)
    if a.shape != shape or a.dtype != _np(t.dtype):
        raise InterpError(f"placeholder '{t.name}' expects {t.dtype}{list(shape)}, "
                          f"got {a.dtype}{list(a.shape)}")
    return a


def _extern(op: ExternOp, values: dict, scalars: dict) -> list:
    """A ``te.extern`` stage whose statement is one ``call_packed``: the registered Python
    function, called on the input arrays and fresh output arrays."""
    from .ir.stmt import Evaluate
    if isinstance(op, HybridOp):
        def number(e):
            v = _Eval(scalars, {}).ev(e, None)
            return v.item() if hasattr(v, "item") else v
        return op.run_python(values, number)
    body = op.body
    call = body.value if isinstance(body, Evaluate) else None
    if not (isinstance(call, Call) and call.name == packed.PACKED_CALL):
        raise InterpError(f"extern '{op.name}': only a statement that is one tir.call_packed(...) is "
                          f"evaluated here, not {type(body).__name__}")
    arrays = {b: values[t] for b, t in zip(op.input_placeholders, op.inputs)}
    outs = []
    for b in op.output_placeholders:
        shape = tuple(_scalar(s, scalars, f"the shape of '{b.name}'") for s in b.shape)
        arrays[b] = np.full(shape, np.nan if dt.is_float(b.dtype) else 0, _np(b.dtype))
        outs.append(arrays[b])
    args = []
    for a in call.args[1:]:
        if isinstance(a, Call) and a.name == packed.MAKE_ARRAY:
            args.append(arrays[a.args[0].buffer])
        else:
            v = _Eval(scalars, {}).ev(a, None)
            args.append(v.item() if hasattr(v, "item") else v)
    packed.call(call.args[0].value, args)
    return outs


def _scan(op: ScanOp, values: dict, scalars: dict, budget: int) -> list:
    """A ``te.scan``: rows ``[0, T0)`` from ``init``; then, for each step ``t`` in order, the
    body stages at time ``t`` only, with each state placeholder holding rows ``0..t-1`` of its
    result (so a read of the state at ``t`` or later is an out-of-bounds read)."""
    t0 = _scalar(op.scan_axis.dom.min, scalars, f"the first step of scan '{op.name}'")
    t_end = t0 + _scalar(op.scan_axis.dom.extent, scalars, f"the number of steps of scan '{op.name}'")
    outs = []
    for t, i in zip(op.outputs, op.init):
        shape = tuple(_scalar(s, scalars, f"the shape of '{t.name}'") for s in t.shape)
        out = np.full(shape, np.nan if dt.is_float(t.dtype) else 0, _np(t.dtype))
        out[:t0] = values[i][:t0]
        outs.append(out)
    rows: dict = {}          # body tensor -> its array, filled one row per step
    for step in range(t0, t_end):
        vals = dict(values)
        vals.update((p, out[:step]) for p, out in zip(op.state_placeholder, outs))
        vals.update(rows)
        for o in op.body_ops:
            for t, r in zip(o.outputs, _compute(o, vals, scalars, budget, time=step)):
                if t not in rows:
                    shape = tuple(_scalar(s, scalars, f"the shape of '{t.name}'") for s in t.shape)
                    rows[t] = vals[t] = np.full(shape, np.nan if dt.is_float(t.dtype) else 0, _np(t.dtype))
                rows[t][step] = r[0]
        for out, u in zip(outs, op.update):
            out[step] = rows[u][step]
    return outs


# ------------------------------------------------------------------------------------------------
# one compute stage

def _compute(op: ComputeOp, values: dict, scalars: dict, budget: int, time=None) -> list:
    """All of ``op``'s outputs; with ``time``, only the row ``time`` of the first axis (shape 1
    there: a scan's body stage at one step)."""
    shape = tuple(_scalar(iv.dom.extent, scalars, f"the shape of '{op.name}'") for iv in op.axis)
    if time is not None:
        shape = (1,) + shape[1:]
    body = op.body[0]
    if not isinstance(body, Reduce):
        env = dict(scalars)
        env.update(_grid(op.axis, shape, extra=0, start=time))
        ev = _Eval(env, values, op.name)
        return [np.array(np.broadcast_to(ev.ev(b, None), shape)) for b in op.body]
    return _reduce(op, body, shape, values, scalars, budget, time)


def _grid(axis, shape, extra: int, start=None) -> dict:
    """Axis variable -> arange shaped to vary along its own dimension (plus ``extra`` trailing
    dimensions of size 1); the first axis from ``start`` when given."""
    nd = len(shape) + extra
    env = {}
    for d, (iv, n) in enumerate(zip(axis, shape)):
        idx = [1] * nd
        idx[d] = n
        lo = start if (d == 0 and start is not None) else 0
        env[iv.var] = np.arange(lo, lo + n, dtype=iv.var.dtype).reshape(idx)
    return env


def _ragged_bounds(op: ComputeOp, r: Reduce, shape: tuple, values: dict, scalars: dict, time=None):
    """Per reduce axis, its min and extent as arrays over the output grid (ragged axes: bounds
    that read tensors or the op's axes), and the largest extent (the box the points range over)."""
    env = dict(scalars)
    env.update(_grid(op.axis, shape, extra=0, start=time))
    ev = _Eval(env, values, op.name)
    los, exts, box = [], [], []
    for iv in r.axis:
        try:
            lo, ext = (np.broadcast_to(ev.ev(e, None), shape).astype(np.int64) for e in (iv.dom.min, iv.dom.extent))
        except KeyError as err:
            raise InterpError(f"the reduce axis '{iv.var.name}' of '{op.name}' uses the variable "
                              f"'{err.args[0]}', which is not in the feed") from None
        los.append(lo[..., None])
        exts.append(ext[..., None])
        box.append(max(int(ext.max(initial=0)), 0))
    return los, exts, box


def _reduce(op: ComputeOp, r: Reduce, shape: tuple, values: dict, scalars: dict, budget: int,
            time=None) -> list:
    comb = r.combiner
    ragged = any(is_ragged_axis(op, iv) for iv in r.axis)
    if ragged:
        los, rexts, exts = _ragged_bounds(op, r, shape, values, scalars, time)
    else:
        los = [_scalar(iv.dom.min, scalars, f"the reduce axis '{iv.var.name}' of '{op.name}'") for iv in r.axis]
        exts = [_scalar(iv.dom.extent, scalars, f"the reduce axis '{iv.var.name}' of '{op.name}'") for iv in r.axis]
    total = math.prod(exts)
    identity = [_Eval(scalars, {}).ev(e, None) for e in comb.identity]
    start = identity
    if r.init:
        env = dict(scalars)
        env.update(_grid(op.axis, shape, extra=0, start=time))
        start = [_Eval(env, values, op.name).ev(e, None) for e in r.init]
    acc = [np.array(np.broadcast_to(x, shape), dtype=s.dtype) for x, s in zip(start, r.source)]
    chunk = max(1, budget // max(1, math.prod(shape)))
    env = dict(scalars)
    env.update(_grid(op.axis, shape, extra=1, start=time))
    for start in range(0, total, chunk):
        points = np.arange(start, min(total, start + chunk))
        full = shape + (len(points),)
        inside = None
        for k, (iv, lo, coord) in enumerate(zip(r.axis, los, np.unravel_index(points, exts) if exts else ())):
            coord = coord.reshape((1,) * len(shape) + (-1,))
            env[iv.var] = (coord + lo).astype(iv.var.dtype)
            if ragged:      # a point of the box outside this output point's range: not reduced
                here = coord < rexts[k]
                inside = here if inside is None else inside & here
        ev = _Eval(env, values, op.name)
        mask = np.broadcast_to(ev.ev(r.condition, inside), full)
        if inside is not None:
            mask = mask & inside
        vals = [np.where(mask, ev.ev(s, mask), x) for s, x in zip(r.source, identity)]
        vals = [np.broadcast_to(v, full).astype(s.dtype, copy=False) for v, s in zip(vals, r.source)]
        acc = _combine(comb, acc, _fold_last(comb, vals))
    return acc


def _combine(comb, a: list, b: list) -> list:
    """``comb(a, b)`` elementwise; ``a`` holds the earlier points."""
    env = dict(zip(comb.lhs, a))
    env.update(zip(comb.rhs, b))
    ev = _Eval(env, {})
    shape = np.broadcast_shapes(*[x.shape for x in a + b])
    return [np.array(np.broadcast_to(ev.ev(e, None), shape)) for e in comb.result]


def _fold_last(comb, vals: list) -> list:
    """Fold the last axis by an order-preserving pairwise tree."""
    while vals[0].shape[-1] > 1:
        n = vals[0].shape[-1]
        even = n - n % 2
        merged = _combine(comb, [v[..., 0:even:2] for v in vals], [v[..., 1:even:2] for v in vals])
        if n % 2:
            merged = [np.concatenate([m, v[..., -1:]], axis=-1) for m, v in zip(merged, vals)]
        vals = merged
    return [v[..., 0] for v in vals]


# ------------------------------------------------------------------------------------------------
# expressions

def _np(dtype: str) -> np.dtype:
    return np.dtype(dt.numpy_name(dtype) if "bfloat16" in dtype else dtype)


_BINARY = {
    BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply, BinOp.DIV: np.divide,
    BinOp.FLOORDIV: np.floor_divide, BinOp.FLOORMOD: np.mod,
    BinOp.TRUNCDIV: trunc_divide, BinOp.TRUNCMOD: trunc_remainder,
    BinOp.MIN: np.minimum, BinOp.MAX: np.maximum,
    BinOp.EQ: np.equal, BinOp.NE: np.not_equal, BinOp.LT: np.less, BinOp.LE: np.less_equal,
    BinOp.GT: np.greater, BinOp.GE: np.greater_equal,
    BinOp.AND: np.logical_and, BinOp.OR: np.logical_or,
    BinOp.BITAND: np.bitwise_and, BinOp.BITOR: np.bitwise_or, BinOp.BITXOR: np.bitwise_xor,
    BinOp.SHL: np.left_shift, BinOp.SHR: np.right_shift,
}


def fold_lanes(v: np.ndarray, op: BinOp):
    """The lanes of the vector ``v`` folded with ``op`` into one value, in the order of
    ``VectorReduce`` in every backend: halves (``v[:n/2] op v[n/2:]``) while the number of lanes
    is even and above 2, then lane by lane, so the lowered-IR interpreter (its user) and the
    LLVM build agree bit for bit on float sums.

    >>> int(fold_lanes(np.arange(6, dtype="int32"), BinOp.ADD))   # (0+3, 1+4, 2+5): 3 + 5 + 7
    15
    """
    f = _BINARY[op]
    with np.errstate(all="ignore"):
        while len(v) > 2 and len(v) % 2 == 0:
            h = len(v) // 2
            v = f(v[:h], v[h:])
        out = v[0]
        for x in v[1:]:
            out = f(out, x)
    return out


class _Eval:
    """Evaluates an expression to a numpy array; ``mask`` (None = everywhere) says where the
    value is needed, so loads outside it are not performed."""

    def __init__(self, env: dict, values: dict, stage: str = ""):
        self.env, self.values, self.stage = env, values, stage   # stage: for messages

    def ev(self, e: Expr, mask):
        with np.errstate(all="ignore"):   # wrapping and undefined lanes are not errors here
            return getattr(self, type(e).__name__)(e, mask)

    def Var(self, e, mask):
        if e not in self.env:
            raise KeyError(e.name)
        return np.asarray(self.env[e], dtype=_np(e.dtype))

    SizeVar = Var

    def Const(self, e, mask):
        return np.array(e.value, dtype=_np(e.dtype))

    def Binary(self, e, mask):
        a, b = self.ev(e.a, mask), self.ev(e.b, mask)
        if e.op in (BinOp.FLOORDIV, BinOp.FLOORMOD, BinOp.TRUNCDIV, BinOp.TRUNCMOD):
            b = np.where(b == 0, np.ones((), b.dtype), b)   # division by zero is undefined: any value
        r = _BINARY[e.op](a, b)
        return np.asarray(r, dtype=_np(e.dtype))

    def Unary(self, e, mask):
        a = self.ev(e.a, mask)
        return np.logical_not(a) if e.op is UnOp.NOT else np.negative(a)

    def Cast(self, e, mask):
        v = self.ev(e.value, mask)
        if dt.is_bool(e.dtype):
            return v != 0
        if dt.is_int(e.dtype) and dt.is_float(e.value.dtype):
            v = np.trunc(np.nan_to_num(v))   # float -> int truncates towards zero (C)
        if dt.element_of(e.dtype) == "bfloat16":
            return dt.round_bfloat16(v)
        return v.astype(_np(e.dtype))

    def Select(self, e, mask):
        c = self.ev(e.condition, mask)
        if not e.lazy:
            return np.where(c, self.ev(e.true_value, mask), self.ev(e.false_value, mask))
        m = c if mask is None else (mask & c)
        t = self.ev(e.true_value, m)
        f = self.ev(e.false_value, np.logical_not(c) if mask is None else (mask & ~c))
        return np.where(c, t, f)

    def Call(self, e, mask):
        if e.name == "reinterpret":               # elementwise: a TE value has one lane
            (x,) = e.args
            if dt.lanes(x.dtype) != dt.lanes(e.dtype):
                raise InterpError(f"reinterpret of {x.dtype} as {e.dtype} changes the lane count; "
                                  f"a tensor expression's values have one lane")
            return np.ascontiguousarray(self.ev(x, mask).astype(_np(x.dtype))).view(_np(e.dtype))
        if intrinsics.lookup(e.name) is None:
            raise InterpError(f"the interpreter does not know the intrinsic '{e.name}'")
        # the table's numpy reference; float16 computes in float32 and rounds once
        return intrinsics.evaluate(e.name, [self.ev(a, mask) for a in e.args], e.dtype)

    def Let(self, e, mask):
        inner = _Eval({**self.env, e.var: self.ev(e.value, mask)}, self.values, self.stage)
        return inner.ev(e.body, mask)

    def TensorLoad(self, e, mask):
        t = e.tensor
        if t not in self.values:
            raise InterpError(f"tensor '{t.name}' is read before it is computed (not in this graph?)")
        arr = self.values[t]
        idx = [self.ev(i, mask).astype(np.int64) for i in e.indices]
        shapes = [i.shape for i in idx] + ([mask.shape] if mask is not None else [])
        shape = np.broadcast_shapes(*shapes) if shapes else ()
        idx = [np.broadcast_to(i, shape) for i in idx]
        live = np.ones(shape, bool) if mask is None else np.broadcast_to(mask, shape)
        safe = []
        for d, (i, n) in enumerate(zip(idx, arr.shape)):
            bad = live & ((i < 0) | (i >= n))
            if bad.any():
                where = tuple(int(x[bad][0]) for x in idx)
                raise InterpError(f"compute '{self.stage}': out-of-bounds read {t.name}[{', '.join(map(str, where))}] "
                                  f"(index {d} is `{e.indices[d]}`, dimension {d} of '{t.name}' has extent {n})"
                                  f"{self._point(bad)}")
            safe.append(np.where(live, i, 0))
        return arr[tuple(safe)] if safe else arr[()]

    def _point(self, bad) -> str:
        """`` where i=3, k=8``: the axes at the first point where ``bad`` holds."""
        if not bad.ndim:
            return ""
        pos = tuple(np.argwhere(bad)[0])
        axes = []
        for v, a in self.env.items():
            if isinstance(v, Var) and isinstance(a, np.ndarray) and 1 <= a.ndim <= bad.ndim:
                axes.append(f"{v.name}={int(np.broadcast_to(a, bad.shape)[pos])}")
        return f" where {', '.join(axes)}" if axes else ""

    def Reduce(self, e, mask):
        raise InterpError("a reduction must be the whole body of a te.compute")
