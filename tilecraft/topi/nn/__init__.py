"""Neural-network computes (TVM's ``topi.nn`` names): ``conv2d_nchw`` (groups, stride,
dilation, asymmetric padding), ``conv2d_hwcn``, ``dense``, ``batch_matmul``, ``relu``, ``pool2d``,
``global_pool``, ``softmax``, ``layer_norm``, ``batch_norm`` (inference).

They declare tensors only; the graph level (``tilecraft.relay``) fuses and schedules them (the
tuned NCHW[x]c and matmul templates take over the convolutions and dense layers they fit).

>>> from tilecraft import te, topi
>>> x = te.placeholder((1, 3, 8, 8), name="x"); w = te.placeholder((4, 3, 3, 3), name="w")
>>> y = topi.nn.conv2d_nchw(x, w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))
"""
from __future__ import annotations

from tilecraft import te

from ..transform import shape_of


def pad(data, pad_before, pad_after, pad_value=0.0, name: str = "pad"):
    """``data`` with ``pad_before[k]``/``pad_after[k]`` elements of ``pad_value`` around axis k."""
    shape = shape_of(data)
    if not any(pad_before) and not any(pad_after):
        return data
    out = tuple(d + b + a for d, b, a in zip(shape, pad_before, pad_after))
    fill = te.const(pad_value, data.dtype)

    def f(*i):
        conds, idx = [], []
        for ix, d, b, a in zip(i, shape, pad_before, pad_after):
            if b:
                conds.append(ix >= b)
            if a:
                conds.append(ix < d + b)
            idx.append(ix - b if b else ix)
        if not conds:
            return data[tuple(idx)]
        return te.if_then_else(te.all(*conds), data[tuple(idx)], fill)
    return te.compute(out, f, name=name)


def _pair(v, what: str) -> tuple:
    """TVM's int-or-pair arguments (stride, dilation): ``2`` → ``(2, 2)``."""
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise ValueError(f"conv2d_nchw: {what} must be an int or a pair, got {v}")
    return v


def pad_tuple(padding, kernel_hw) -> tuple:
    """(top, left, bottom, right) from TVM's padding forms (``topi.nn.get_pad_tuple``): an int
    (every side), ``(pad_h, pad_w)`` (both sides of each axis), a 4-tuple as it is, ``"VALID"``
    (none) or ``"SAME"`` (the output keeps the input's size at stride 1; the odd pixel goes to
    the bottom/right): ``pad_tuple((1, 2), (3, 3)) == (1, 2, 1, 2)``."""
    if isinstance(padding, str):
        if padding.upper() == "VALID":
            return (0, 0, 0, 0)
        if padding.upper() != "SAME":
            raise ValueError(f"padding must be an int, a tuple, 'SAME' or 'VALID', got {padding!r}")
        ph, pw = kernel_hw[0] - 1, kernel_hw[1] - 1
        return (ph // 2, pw // 2, ph - ph // 2, pw - pw // 2)
    if isinstance(padding, int):
        return (padding,) * 4
    padding = tuple(int(x) for x in padding)
    if len(padding) == 2:
        return padding + padding
    if len(padding) == 4:
        return padding
    raise ValueError(f"padding must be an int, a pair or a 4-tuple, got {padding}")


def conv2d_nchw(data, kernel, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1,
                out_dtype=None):
    """2-D convolution, NCHW data and OIHW kernel (``kernel.shape[1] == C / groups``);
    ``padding`` is (top, left, bottom, right) or one of TVM's other forms (:func:`pad_tuple`),
    ``strides`` and ``dilation`` an int or a pair (TVM's ``topi.nn.conv2d_nchw(Input, Filter,
    stride, padding, dilation, out_dtype)``); ``out_dtype`` (default: the data's) is the dtype
    the products are summed in."""
    N, CI, H, W = shape_of(data)
    CO, CIg, KH, KW = shape_of(kernel)
    sh, sw = _pair(strides, "the stride")
    dh, dw = _pair(dilation, "the dilation")
    pt, pl, pb, pr = pad_tuple(padding, ((KH - 1) * dh + 1, (KW - 1) * dw + 1))
    OH = (H + pt + pb - (KH - 1) * dh - 1) // sh + 1
    OW = (W + pl + pr - (KW - 1) * dw - 1) // sw + 1
    padded = pad(data, (0, 0, pt, pl), (0, 0, pb, pr), name="pad_data")
    rc = te.reduce_axis((0, CIg), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    out_dtype = out_dtype or data.dtype

    def mul(a, b):
        return a * b if out_dtype == data.dtype else a.astype(out_dtype) * b.astype(out_dtype)
    COg = CO // groups

    if groups == 1:
        def f(n, c, y, x):
            return te.sum(mul(padded[n, rc, y * sh + ry * dh, x * sw + rx * dw], kernel[c, rc, ry, rx]),
                          axis=[rc, ry, rx])
    else:
        def f(n, c, y, x):
            return te.sum(mul(padded[n, (c // COg) * CIg + rc, y * sh + ry * dh, x * sw + rx * dw],
                              kernel[c, rc, ry, rx]), axis=[rc, ry, rx])
    return te.compute((N, CO, OH, OW), f, name="conv2d")


def conv2d_hwcn(Input, Filter, stride, padding, dilation, out_dtype=None):
    """2-D convolution with HWCN data ``(H, W, C, N)`` and HWIO filter ``(KH, KW, C, CO)``, output
    ``(OH, OW, CO, N)`` (TVM's ``topi.nn.conv2d_hwcn``); ``stride``/``dilation`` an int or a pair,
    ``padding`` any of :func:`pad_tuple`'s forms, ``out_dtype`` the dtype summed in (default: the
    input's).

    >>> out = topi.nn.conv2d_hwcn(A, W, 1, "SAME", 1)
    """
    H, W, C, N = shape_of(Input)
    KH, KW, _, CO = shape_of(Filter)
    sh, sw = _pair(stride, "the stride")
    dh, dw = _pair(dilation, "the dilation")
    pt, pl, pb, pr = pad_tuple(padding, ((KH - 1) * dh + 1, (KW - 1) * dw + 1))
    OH = (H + pt + pb - (KH - 1) * dh - 1) // sh + 1
    OW = (W + pl + pr - (KW - 1) * dw - 1) // sw + 1
    padded = pad(Input, (pt, pl, 0, 0), (pb, pr, 0, 0), name="PaddedInput")
    rc = te.reduce_axis((0, C), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    out_dtype = out_dtype or Input.dtype

    def f(yy, xx, ff, nn):
        a = padded[yy * sh + ry * dh, xx * sw + rx * dw, rc, nn]
        b = Filter[ry, rx, rc, ff]
        if out_dtype != Input.dtype:
            a, b = a.astype(out_dtype), b.astype(out_dtype)
        return te.sum(a * b, axis=[ry, rx, rc])
    return te.compute((OH, OW, CO, N), f, name="Conv2dOutput", tag="conv2d_hwcn")


def dense(data, weight):
    """``out[i, j] = sum_k data[i, k] * weight[j, k]`` (a linear layer: ``data @ weight.T``)."""
    M, K = shape_of(data)
    N, _ = shape_of(weight)
    k = te.reduce_axis((0, K), name="k")
    return te.compute((M, N), lambda i, j: te.sum(data[i, k] * weight[j, k], axis=k), name="dense")


def batch_matmul(x, y, transpose_a: bool = False, transpose_b: bool = True):
    """``out[b] = x[b] @ y[b]`` (``y[b].T`` with ``transpose_b``, TVM's default); a batch of 1
    broadcasts."""
    B1, M, K = shape_of(x) if not transpose_a else (shape_of(x)[0], shape_of(x)[2], shape_of(x)[1])
    sy = shape_of(y)
    B2, N = sy[0], (sy[1] if transpose_b else sy[2])
    B = max(B1, B2)
    k = te.reduce_axis((0, K), name="k")

    def f(b, i, j):
        bx = 0 if B1 == 1 else b
        by = 0 if B2 == 1 else b
        a = x[bx, k, i] if transpose_a else x[bx, i, k]
        c = y[by, j, k] if transpose_b else y[by, k, j]
        return te.sum(a * c, axis=k)
    return te.compute((B, M, N), f, name="batch_matmul")


def relu(x):
    """max(x, 0) element-wise."""
    zero = te.const(0.0, x.dtype)
    return te.compute(x.shape, lambda *i: te.select(x[i] > zero, x[i], zero), name="relu")


def pool2d(data, pool_type: str, pool_size, strides, padding, dilation=(1, 1), count_include_pad=False):
    """Max or average pooling over the last two axes of NCHW data; ``padding`` is (top, left,
    bottom, right); padded elements never win a max and count toward an average only with
    ``count_include_pad``."""
    N, C, H, W = shape_of(data)
    KH, KW = pool_size
    sh, sw = strides
    dh, dw = dilation
    pt, pl, pb, pr = padding
    OH = (H + pt + pb - (KH - 1) * dh - 1) // sh + 1
    OW = (W + pl + pr - (KW - 1) * dw - 1) // sw + 1
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    if pool_type == "max":
        padded = pad(data, (0, 0, pt, pl), (0, 0, pb, pr), pad_value=float("-inf"), name="pad_data")
        return te.compute((N, C, OH, OW), lambda n, c, y, x: te.max(
            padded[n, c, y * sh + ry * dh, x * sw + rx * dw], axis=[ry, rx]), name="max_pool2d")
    padded = pad(data, (0, 0, pt, pl), (0, 0, pb, pr), name="pad_data")
    total = te.compute((N, C, OH, OW), lambda n, c, y, x: te.sum(
        padded[n, c, y * sh + ry * dh, x * sw + rx * dw], axis=[ry, rx]), name="pool_sum")
    if count_include_pad or not any(padding):
        inv = te.const(1.0 / (KH * KW), data.dtype)
        return te.compute((N, C, OH, OW), lambda n, c, y, x: total[n, c, y, x] * inv, name="avg_pool2d")

    def f(n, c, y, x):
        ch = _inside(y * sh - pt, KH, H, dh)
        cw = _inside(x * sw - pl, KW, W, dw)
        count = ch * cw
        # a window wholly in the padding averages nothing: 0, not 0 / 0
        return total[n, c, y, x] / te.select(count > 0, count, 1).astype(data.dtype)
    return te.compute((N, C, OH, OW), f, name="avg_pool2d")


def _inside(start, size, extent, dil):
    """How many of ``start, start + dil, ..., start + (size-1) dil`` lie in ``[0, extent)``."""
    n = None
    for k in range(size):
        pos = start + k * dil
        term = te.select(te.all(pos >= 0, pos < extent), 1, 0)
        n = term if n is None else n + term
    return n


def global_pool(data, pool_type: str):
    """Global max or average pooling of NCHW data → ``[N, C, 1, 1]``."""
    N, C, H, W = shape_of(data)
    ry = te.reduce_axis((0, H), name="ry")
    rx = te.reduce_axis((0, W), name="rx")
    if pool_type == "max":
        return te.compute((N, C, 1, 1), lambda n, c, y, x: te.max(data[n, c, ry, rx], axis=[ry, rx]),
                          name="global_max_pool2d")
    total = te.compute((N, C, 1, 1), lambda n, c, y, x: te.sum(data[n, c, ry, rx], axis=[ry, rx]),
                       name="pool_sum")
    inv = te.const(1.0 / (H * W), data.dtype)
    return te.compute((N, C, 1, 1), lambda *i: total[i] * inv, name="global_avg_pool2d")


def _reduce_last(x, axis, reducer, name, value=None):
    """A reduction of ``value(i)`` (default ``x[i]``) over ``axis``, keeping the axis (extent 1
    broadcast back by indexing it with 0)."""
    shape = shape_of(x)
    r = te.reduce_axis((0, shape[axis]), name="r")
    value = value or (lambda idx: x[idx])
    out = tuple(1 if k == axis else d for k, d in enumerate(shape))

    def f(*i):
        idx = tuple(r if k == axis else ix for k, ix in enumerate(i))
        return reducer(value(idx), axis=r)
    return te.compute(out, f, name=name)


def _at0(i, axis):
    return tuple(0 if k == axis else ix for k, ix in enumerate(i))


def softmax(x, axis: int = -1):
    """exp(x - max) / sum(exp(x - max)) along ``axis``."""
    axis = axis % len(x.shape)
    mx = _reduce_last(x, axis, te.max, "softmax_max")
    ex = te.compute(x.shape, lambda *i: te.exp(x[i] - mx[_at0(i, axis)]), name="softmax_exp")
    sm = _reduce_last(ex, axis, te.sum, "softmax_sum")
    return te.compute(x.shape, lambda *i: ex[i] / sm[_at0(i, axis)], name="softmax")


def layer_norm(x, gamma, beta, axis: int = -1, epsilon: float = 1e-5):
    """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` over the last axis (``gamma`` and
    ``beta`` have that axis's extent)."""
    axis = axis % len(x.shape)
    n = shape_of(x)[axis]
    inv_n = te.const(1.0 / n, x.dtype)
    total = _reduce_last(x, axis, te.sum, "ln_sum")
    mean = te.compute(total.shape, lambda *i: total[i] * inv_n, name="ln_mean")
    sq = _reduce_last(x, axis, te.sum, "ln_sqsum",
                      value=lambda idx: (x[idx] - mean[_at0(idx, axis)]) * (x[idx] - mean[_at0(idx, axis)]))
    eps = te.const(epsilon, x.dtype)
    rstd = te.compute(total.shape, lambda *i: te.rsqrt(sq[i] * inv_n + eps), name="ln_rstd")
    return te.compute(x.shape, lambda *i: (x[i] - mean[_at0(i, axis)]) * rstd[_at0(i, axis)]
                      * gamma[i[axis]] + beta[i[axis]], name="layer_norm")


def batch_norm(x, gamma, beta, moving_mean, moving_var, axis: int = 1, epsilon: float = 1e-5):
    """Inference batch norm: ``(x - mean) / sqrt(var + epsilon) * gamma + beta`` per channel
    ``axis``."""
    eps = te.const(epsilon, x.dtype)
    return te.compute(x.shape, lambda *i: (x[i] - moving_mean[i[axis]]) * te.rsqrt(moving_var[i[axis]] + eps)
                      * gamma[i[axis]] + beta[i[axis]], name="batch_norm")
