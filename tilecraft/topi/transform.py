"""Element-wise, broadcasting, layout and reduction computes (TVM's ``topi`` top-level names):
``add``/``subtract``/``multiply``/``divide``/``power``, the unary math functions, ``where``,
``cast``, ``reshape``, ``transpose``, ``expand_dims``, ``squeeze``, ``concatenate``,
``strided_slice``, ``take``, ``sum``/``mean``/``max``.

They declare tensors only (``te.compute``); the graph level (``tilecraft.relay``) fuses and
schedules them. Shapes are static; broadcasting follows numpy (right-aligned, 1 stretches).

>>> from tilecraft import te, topi
>>> A = te.placeholder((4, 3), name="A"); B = te.placeholder((3,), name="B")
>>> C = topi.transform.add(A, B)          # C[i, j] = A[i, j] + B[j]
"""
from __future__ import annotations

import builtins

from tilecraft import te


def shape_of(t) -> tuple:
    """The static shape of a tensor as Python ints."""
    return tuple(int(getattr(d, "value", d)) for d in t.shape)


def broadcast_shape(a: tuple, b: tuple) -> tuple:
    """numpy's broadcast of two shapes, or ValueError naming both."""
    n = builtins.max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"shapes {a} and {b} do not broadcast")
        out.append(builtins.max(x, y) if x and y else 0)
    return tuple(out)


def _bcast_index(t, out_idx):
    """Index of ``t`` (right-aligned with the output) for output index ``out_idx``."""
    shape = shape_of(t)
    idx = out_idx[len(out_idx) - len(shape):]
    return [0 if d == 1 else i for d, i in zip(shape, idx)]


def _value(t, out_idx):
    if not hasattr(t, "shape"):             # a scalar expression or number
        return t
    if len(t.shape) == 0:
        return t[()]
    return t[tuple(_bcast_index(t, out_idx))]


def broadcast_op(a, b, fn, name: str):
    """``out[i] = fn(a[i'], b[i''])`` with numpy broadcasting; ``a``/``b`` may be scalars."""
    sa = shape_of(a) if hasattr(a, "shape") else ()
    sb = shape_of(b) if hasattr(b, "shape") else ()
    out = broadcast_shape(sa, sb)
    return te.compute(out, lambda *i: fn(_value(a, i), _value(b, i)), name=name)


def add(a, b):
    """``a + b`` with broadcasting."""
    return broadcast_op(a, b, lambda x, y: x + y, "add")


def subtract(a, b):
    """``a - b`` with broadcasting."""
    return broadcast_op(a, b, lambda x, y: x - y, "subtract")


def multiply(a, b):
    """``a * b`` with broadcasting."""
    return broadcast_op(a, b, lambda x, y: x * y, "multiply")


def divide(a, b):
    """``a / b`` with broadcasting (true division for floats)."""
    return broadcast_op(a, b, lambda x, y: x / y, "divide")


def power(a, b):
    """``a ** b`` with broadcasting (floats)."""
    return broadcast_op(a, b, lambda x, y: te.power(x, y), "power")


def maximum(a, b):
    """Element-wise maximum with broadcasting."""
    return broadcast_op(a, b, lambda x, y: te.select(x > y, x, y), "maximum")


def minimum(a, b):
    """Element-wise minimum with broadcasting."""
    return broadcast_op(a, b, lambda x, y: te.select(x < y, x, y), "minimum")


def clip(x, a_min, a_max):
    """``x`` limited to ``[a_min, a_max]`` element-wise (ReLU6 is ``clip(x, 0, 6)``)."""
    lo, hi = te.const(a_min, x.dtype), te.const(a_max, x.dtype)
    return elemwise(x, lambda v: te.select(v < lo, lo, te.select(v > hi, hi, v)), "clip")


def greater(a, b):
    """``a > b`` (bool) with broadcasting."""
    return broadcast_op(a, b, lambda x, y: x > y, "greater")


def less(a, b):
    """``a < b`` (bool) with broadcasting."""
    return broadcast_op(a, b, lambda x, y: x < y, "less")


def equal(a, b):
    """``a == b`` (bool) with broadcasting."""
    return broadcast_op(a, b, lambda x, y: x == y, "equal")


def greater_equal(a, b):
    """``a >= b`` (bool) with broadcasting."""
    return broadcast_op(a, b, lambda x, y: x >= y, "greater_equal")


def less_equal(a, b):
    """``a <= b`` (bool) with broadcasting."""
    return broadcast_op(a, b, lambda x, y: x <= y, "less_equal")


def not_equal(a, b):
    """``a != b`` (bool) with broadcasting."""
    return broadcast_op(a, b, lambda x, y: x != y, "not_equal")


def logical_and(a, b):
    """``a and b`` of two bool tensors with broadcasting."""
    return broadcast_op(a, b, lambda x, y: te.all(x, y), "logical_and")


def logical_or(a, b):
    """``a or b`` of two bool tensors with broadcasting."""
    return broadcast_op(a, b, lambda x, y: te.any(x, y), "logical_or")


def logical_not(x):
    """``not x`` of a bool tensor."""
    return elemwise(x, lambda v: ~v, "logical_not")


def broadcast_to(x, shape):
    """``x`` broadcast (numpy's rules) to ``shape``."""
    out = broadcast_shape(shape_of(x), tuple(shape))
    return te.compute(out, lambda *i: _value(x, i), name="broadcast_to")


def full(shape, dtype, fill_value):
    """A tensor of ``shape`` and ``dtype`` holding ``fill_value`` everywhere (TVM's ``topi.full``).

    >>> T = full((2, 3), "float32", 1.5)
    """
    return te.compute(tuple(shape), lambda *i: te.const(fill_value, dtype), name="T_full", tag="elemwise")


def full_like(x, fill_value):
    """A tensor shaped and typed as ``x`` holding ``fill_value`` (TVM's ``topi.full_like``; e.g. the
    ``head`` of ones for ``te.gradient``).

    >>> ones = full_like(te.placeholder((4,), name="A"), 1.0)
    """
    return te.compute(tuple(x.shape), lambda *i: te.const(fill_value, x.dtype), name="T_full_like",
                      tag="elemwise")


def where(cond, a, b):
    """``a`` where ``cond`` (bool) holds, else ``b``; the three broadcast together."""
    shapes = [shape_of(t) if hasattr(t, "shape") else () for t in (cond, a, b)]   # scalars: ()
    out = broadcast_shape(broadcast_shape(shapes[0], shapes[1]), shapes[2])
    return te.compute(out, lambda *i: te.select(_value(cond, i), _value(a, i), _value(b, i)), name="where")


def elemwise(x, fn, name: str):
    """``out[i] = fn(x[i])``."""
    return te.compute(x.shape, lambda *i: fn(x[i]), name=name)


def exp(x):
    """e ** x element-wise."""
    return elemwise(x, te.exp, "exp")


def sqrt(x):
    """Square root element-wise."""
    return elemwise(x, te.sqrt, "sqrt")


def tanh(x):
    """tanh element-wise."""
    return elemwise(x, te.tanh, "tanh")


def sigmoid(x):
    """1 / (1 + e ** -x) element-wise."""
    return elemwise(x, te.sigmoid, "sigmoid")


def erf(x):
    """The error function element-wise."""
    return elemwise(x, te.erf, "erf")


def log(x):
    """Natural logarithm element-wise."""
    return elemwise(x, te.log, "log")


def abs(x):  # noqa: A001 - TVM's name
    """|x| element-wise."""
    return elemwise(x, te.abs, "abs")


def rsqrt(x):
    """1 / sqrt(x) element-wise."""
    return elemwise(x, te.rsqrt, "rsqrt")


def negative(x):
    """-x element-wise."""
    return elemwise(x, lambda v: -v, "negative")


def cast(x, dtype: str):
    """``x`` converted to ``dtype`` element-wise."""
    return elemwise(x, lambda v: v.astype(dtype), "cast")


def identity(x):
    """A copy of ``x`` (a graph output that is a graph input or a weight)."""
    return elemwise(x, lambda v: v, "copy")


def _reshape_blocks(in_shape, out_shape) -> list:
    """The dimensions of extent > 1 of both shapes, cut into consecutive blocks of equal
    element count: ``[(input dims, output dims)]``. Index arithmetic stays inside a block, so a
    reshape that only adds or drops 1s, or splits or merges a few axes, needs no division over
    the whole flat index."""
    a = [k for k, d in enumerate(in_shape) if d != 1]
    b = [k for k, d in enumerate(out_shape) if d != 1]
    blocks, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        bi, bo = [a[i]], [b[j]]
        pa, pb = in_shape[a[i]], out_shape[b[j]]
        while pa != pb:
            if pa < pb:
                i += 1
                bi.append(a[i])
                pa *= in_shape[a[i]]
            else:
                j += 1
                bo.append(b[j])
                pb *= out_shape[b[j]]
        blocks.append((bi, bo))
        i, j = i + 1, j + 1
    return blocks


def reshape(x, newshape):
    """``x`` with the shape ``newshape`` (the same number of elements, row-major order)."""
    in_shape, out_shape = shape_of(x), tuple(int(d) for d in newshape)
    blocks = _reshape_blocks(in_shape, out_shape)

    def f(*i):
        idx = [0] * len(in_shape)
        for ins, outs in blocks:
            if len(ins) == 1 and len(outs) == 1:
                idx[ins[0]] = i[outs[0]]
                continue
            flat, stride = None, 1
            for k in reversed(outs):
                term = i[k] if stride == 1 else i[k] * stride
                flat = term if flat is None else flat + term
                stride *= out_shape[k]
            stride = 1
            for pos, k in enumerate(reversed(ins)):
                v = flat if stride == 1 else flat // stride
                idx[k] = v if pos == len(ins) - 1 else v % in_shape[k]
                stride *= in_shape[k]
        return x[tuple(idx)] if idx else x[()]
    return te.compute(out_shape, f, name="reshape")


def transpose(x, axes=None):
    """``x`` with its axes permuted: ``out.shape[k] == x.shape[axes[k]]`` (reversed without axes)."""
    n = len(x.shape)
    axes = tuple(range(n))[::-1] if axes is None else tuple(a % n for a in axes)
    shape = tuple(shape_of(x)[a] for a in axes)

    def f(*i):
        idx = [None] * n
        for k, a in enumerate(axes):
            idx[a] = i[k]
        return x[tuple(idx)]
    return te.compute(shape, f, name="transpose")


def expand_dims(x, axis: int, num_newaxis: int = 1):
    """``x`` with ``num_newaxis`` axes of extent 1 inserted at ``axis``."""
    shape = list(shape_of(x))
    axis = axis % (len(shape) + 1)
    return reshape(x, shape[:axis] + [1] * num_newaxis + shape[axis:])


def squeeze(x, axis=None):
    """``x`` without the axes of extent 1 named in ``axis`` (all of them without)."""
    shape = shape_of(x)
    axes = [a % len(shape) for a in axis] if axis is not None else [k for k, d in enumerate(shape) if d == 1]
    return reshape(x, [d for k, d in enumerate(shape) if k not in axes])


def concatenate(tensors, axis: int = 0):
    """The tensors joined along ``axis`` (their other extents agree)."""
    tensors = list(tensors)
    n = len(tensors[0].shape)
    axis = axis % n
    sizes = [shape_of(t)[axis] for t in tensors]
    shape = list(shape_of(tensors[0]))
    shape[axis] = builtins.sum(sizes)

    starts = [builtins.sum(sizes[:k]) for k in range(len(sizes))]

    def f(*i):
        value = None
        for k in reversed(range(len(tensors))):
            idx = list(i)
            idx[axis] = i[axis] - starts[k] if starts[k] else i[axis]
            v = tensors[k][tuple(idx)]
            # tensor k holds [starts[k], starts[k + 1]); the later ones are already in value
            value = v if value is None else te.if_then_else(i[axis] < starts[k + 1], v, value)
        return value
    return te.compute(tuple(shape), f, name="concatenate")


def strided_slice(x, begin, end, strides=None, axes=None):
    """``x[begin:end:strides]`` on ``axes`` (all axes without); bounds are already clamped and
    non-negative (the graph level normalises them)."""
    shape = shape_of(x)
    axes = list(range(len(begin))) if axes is None else [a % len(shape) for a in axes]
    strides = list(strides) if strides is not None else [1] * len(axes)
    out = list(shape)
    start = [0] * len(shape)
    step = [1] * len(shape)
    for a, b, e, s in zip(axes, begin, end, strides):
        out[a] = builtins.max(0, -(-(e - b) // s)) if s > 0 else builtins.max(0, -(-(b - e) // -s))
        start[a], step[a] = b, s

    def f(*i):
        return x[tuple(st + ix * sp if (st, sp) != (0, 1) else ix for ix, st, sp in zip(i, start, step))]
    return te.compute(tuple(out), f, name="strided_slice")


def take(data, indices, axis: int = 0):
    """``numpy.take(data, indices, axis)``; negative indices count from the end."""
    dshape, ishape = shape_of(data), shape_of(indices)
    axis = axis % len(dshape)
    out = dshape[:axis] + ishape + dshape[axis + 1:]
    extent = dshape[axis]

    def f(*i):
        ind = indices[tuple(i[axis:axis + len(ishape)])] if ishape else indices[()]
        ind = ind.astype("int32") if ind.dtype != "int32" else ind
        ind = te.select(ind < 0, ind + extent, ind)
        return data[tuple(i[:axis]) + (ind,) + tuple(i[axis + len(ishape):])]
    return te.compute(out, f, name="take")


def _reduce(x, axis, keepdims: bool, reducer, name: str, post=None):
    shape = shape_of(x) if post is not None else tuple(x.shape)   # sum/max: symbolic extents too
    axis = (axis,) if isinstance(axis, int) else axis           # TVM takes an int axis too
    axes = sorted(a % len(shape) for a in (range(len(shape)) if axis is None else axis))
    rvs = {a: te.reduce_axis((0, shape[a]), name=f"r{a}") for a in axes}
    if keepdims:
        out = tuple(1 if k in rvs else d for k, d in enumerate(shape))
    else:
        out = tuple(d for k, d in enumerate(shape) if k not in rvs)

    def f(*i):
        it = iter(i)
        idx = []
        for k in range(len(shape)):
            if k in rvs:
                if keepdims:
                    next(it)
                idx.append(rvs[k])
            else:
                idx.append(next(it))
        return reducer(x[tuple(idx)], axis=[rvs[a] for a in axes])
    red = te.compute(out, f, name=name)
    if post is None:
        return red
    count = 1
    for a in axes:
        count *= shape[a]
    return te.compute(out, lambda *i: post(red[i], count), name=name + "_out")


def elemwise_sum(xs):
    """The elementwise sum of tensors of one shape (TVM's ``topi.elemwise_sum``).

    >>> e = topi.elemwise_sum([c, d])
    """
    xs = list(xs)
    if not xs or any(shape_of(t) != shape_of(xs[0]) for t in xs):
        raise ValueError(f"elemwise_sum: expected tensors of one shape, got {[shape_of(t) for t in xs]}")

    def f(*i):
        acc = xs[0][i]
        for t in xs[1:]:
            acc = acc + t[i]
        return acc
    return te.compute(xs[0].shape, f, name="elemwise_sum", tag="elemwise")


def sum(x, axis=None, keepdims: bool = False):  # noqa: A001 - TVM's name
    """The sum over ``axis`` (all axes without)."""
    return _reduce(x, axis, keepdims, te.sum, "sum")


def max(x, axis=None, keepdims: bool = False):  # noqa: A001 - TVM's name
    """The maximum over ``axis``."""
    return _reduce(x, axis, keepdims, te.max, "max")


def mean(x, axis=None, keepdims: bool = False):
    """The mean over ``axis``."""
    return _reduce(x, axis, keepdims, te.sum, "mean",
                   post=lambda v, n: v * te.const(1.0 / n, x.dtype))
