"""Blocked data layouts for the graph level's layout transformation (TVM's ``layout_transform``
and x86 ``conv2d_NCHWc``): tensors in ``NCHW[x]c`` (channels cut into blocks of ``x``, the block
innermost) and kernels in ``OIHW[i]i[o]o``, so that consecutive convolutions read and write
the packed layout directly instead of packing their input and unpacking their output.

* ``layout_transform(x, "NCHW", "NCHW16c")``: ``out[n, C, h, w, c] = x[n, C*16 + c, h, w]``;
  also ``NCHW16c`` → ``NCHW``, ``NCHW32c`` → ``NCHW16c`` and ``OIHW`` → ``OIHW16i32o``
  (``out[O, I, kh, kw, i, o] = w[O*32 + o, I*16 + i, kh, kw]``);
* ``conv2d_NCHWc(data, kernel, strides, padding)``: ``data[N, CI/ic, H, W, ic]`` ⊛
  ``kernel[CO/oc, CI/ic, KH, KW, ic, oc]`` → ``[N, CO/oc, OH, OW, oc]``, the stages of
  ``topi/conv2d.py``'s template without the packing (the weights are packed once, by constant
  folding) and without the unpacking;
* ``schedule_conv2d_NCHWc``: that template's schedule (register tiles of ``reg_n`` columns ×
  ``oc`` channels, ``unroll_kw``, ``ic_outer``) on a blocked output.

>>> from tilecraft import te
>>> from tilecraft.topi import layout
>>> x = te.placeholder((1, 32, 8, 8), name="x")
>>> y = layout.layout_transform(x, "NCHW", "NCHW16c")      # shape (1, 2, 8, 8, 16)
"""
from __future__ import annotations

import re

from tilecraft import te

from .conv2d import blocked_conv
from .nn import pad
from .transform import shape_of

_BLOCKED = re.compile(r"^NCHW(\d+)c$")
_KERNEL = re.compile(r"^OIHW(\d+)i(\d+)o$")


def block_factor(layout: str):
    """The channel block of a data layout: ``"NCHW16c"`` → 16, ``"NCHW"`` → None; ValueError for
    anything else."""
    if layout == "NCHW":
        return None
    m = _BLOCKED.match(layout)
    if not m:
        raise ValueError(f"layout {layout!r} is not NCHW or NCHW<x>c")
    return int(m.group(1))


def transformed_shape(shape: tuple, src: str, dst: str) -> tuple:
    """The shape of a ``shape`` tensor in layout ``src`` after ``layout_transform(.., src, dst)``;
    ValueError naming what does not fit."""
    if src == "OIHW" or dst.startswith("OIHW") and dst != "OIHW":
        m = _KERNEL.match(dst)
        if src != "OIHW" or not m or len(shape) != 4:
            raise ValueError(f"a kernel transforms from OIHW to OIHW<i>i<o>o, not {src} to {dst} (shape {shape})")
        bi, bo = int(m.group(1)), int(m.group(2))
        O, I, KH, KW = shape
        if O % bo or I % bi:
            raise ValueError(f"OIHW kernel {shape}: {O} output channels by {bo}, {I} input by {bi} do not divide")
        return (O // bo, I // bi, KH, KW, bi, bo)
    a, b = block_factor(src), block_factor(dst)
    if len(shape) != (4 if a is None else 5):
        raise ValueError(f"a {len(shape)}-d tensor {shape} is not in layout {src}")
    N, C0, H, W = shape[:4]
    C = C0 if a is None else C0 * a
    if b is None:
        return (N, C, H, W)
    if C % b:
        raise ValueError(f"{C} channels do not split into blocks of {b}")
    return (N, C // b, H, W, b)


def layout_transform(x, src: str, dst: str):
    """``x`` (in layout ``src``) in layout ``dst``: NCHW ↔ NCHW[x]c, NCHW[a]c → NCHW[b]c, or
    OIHW → OIHW[i]i[o]o (see the module docstring)."""
    shape = transformed_shape(shape_of(x), src, dst)
    if src == "OIHW":
        bi, bo = shape[4], shape[5]
        return te.compute(shape, lambda O, I, kh, kw, i, o: x[O * bo + o, I * bi + i, kh, kw],
                          name="layout_transform")
    a, b = block_factor(src), block_factor(dst)

    def at(n, c, h, w):                 # x at logical NCHW coordinates
        return x[n, c, h, w] if a is None else x[n, c // a, h, w, c % a]
    if b is None:
        return te.compute(shape, lambda n, c, h, w: at(n, c, h, w), name="layout_transform")
    if a is None:
        return te.compute(shape, lambda n, C, h, w, c: x[n, C * b + c, h, w], name="layout_transform")
    return te.compute(shape, lambda n, C, h, w, c: at(n, C * b + c, h, w), name="layout_transform")


def conv2d_NCHWc(data, kernel, strides=(1, 1), padding=(0, 0, 0, 0)):
    """``(out, data_pad)``: the blocked convolution (see the module docstring) and its padded
    input stage (``data`` itself without padding); ``padding`` is (top, left, bottom, right)."""
    N, CIc, H, W, ic = shape_of(data)
    COc, CIc2, KH, KW, ic2, oc = shape_of(kernel)
    if (CIc, ic) != (CIc2, ic2):
        raise ValueError(f"conv2d_NCHWc: data {shape_of(data)} and kernel {shape_of(kernel)} block the "
                         "input channels differently")
    sh, sw = strides
    pt, pl, pb, pr = padding
    OH = (H + pt + pb - KH) // sh + 1
    OW = (W + pl + pr - KW) // sw + 1
    data_pad = pad(data, (0, 0, pt, pl, 0), (0, 0, pb, pr, 0), name="data_pad")
    return blocked_conv(data_pad, kernel, (N, COc, OH, OW, oc), sh, sw), data_pad


def schedule_conv2d_NCHWc(s, data_pad, conv, out, reg_n, unroll_kw, ic_outer):
    """Schedule :func:`conv2d_NCHWc`'s stages; ``out`` is ``conv`` or a blocked element-wise
    epilogue of it (bias, ReLU, a residual add) already inlined into one stage. Rows ``(n, O, y)``
    run in parallel; in a row, register tiles of ``reg_n`` columns × the ``oc`` channels of a
    block, accumulated over the input-channel blocks in place (``ic_outer``) or in a
    cache-written tile."""
    from .conv2d import _reorder_tile
    if type(data_pad.op).__name__ == "ComputeOp":            # padding: a stage of its own
        n, C, h, w, c = s[data_pad].op.axis
        s[data_pad].parallel(s[data_pad].fuse(n, C, h))
    if out is not conv:
        n, O, y, x, co = s[out].op.axis
        row = s[out].fuse(n, O, y)
        s[out].parallel(row)
        s[out].vectorize(co)
        s[conv].compute_at(s[out], row)
    if ic_outer:
        _, _, _, x, co = s[conv].op.axis
        icc, kh, kw, icb = s[conv].op.reduce_axis
        xo, xi = s[conv].split(x, factor=reg_n)
        if out is conv:
            n, O, y = s[conv].op.axis[:3]
            s[conv].parallel(s[conv].fuse(n, O, y))
        _reorder_tile(s, conv, [icc, xo], kh, kw, icb, xi, co, unroll_kw)
    else:
        CC = s.cache_write(conv, "global")
        n, O, y, x, co = s[conv].op.axis
        xo, xi = s[conv].split(x, factor=reg_n)
        if out is conv:
            s[conv].parallel(s[conv].fuse(n, O, y))
        s[conv].reorder(xo, xi, co)
        s[conv].vectorize(co)
        s[CC].compute_at(s[conv], xo)
        _, _, _, xc, coc = s[CC].op.axis
        icc, kh, kw, icb = s[CC].op.reduce_axis
        _reorder_tile(s, CC, [icc], kh, kw, icb, xc, coc, unroll_kw)


def pool2d_NCHWc(data, pool_type: str, pool_size, strides, padding, dilation=(1, 1), count_include_pad=False):
    """``topi.nn.pool2d`` on ``NCHW[x]c`` data: ``[N, C/x, H, W, x]`` → ``[N, C/x, OH, OW, x]``,
    the same windows, padding and averaging rules, the channel block innermost (so a schedule
    vectorizes it: one window step is one vector of channels).

    >>> y = pool2d_NCHWc(x, "max", (3, 3), (2, 2), (1, 1, 1, 1))      # doctest: +SKIP
    """
    from .nn import _inside
    N, CB, H, W, B = shape_of(data)
    KH, KW = pool_size
    sh, sw = strides
    dh, dw = dilation
    pt, pl, pb, pr = padding
    OH = (H + pt + pb - (KH - 1) * dh - 1) // sh + 1
    OW = (W + pl + pr - (KW - 1) * dw - 1) // sw + 1
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    shape = (N, CB, OH, OW, B)
    if pool_type == "max":
        padded = pad(data, (0, 0, pt, pl, 0), (0, 0, pb, pr, 0), pad_value=float("-inf"), name="pad_data")
        return te.compute(shape, lambda n, c, y, x, b: te.max(
            padded[n, c, y * sh + ry * dh, x * sw + rx * dw, b], axis=[ry, rx]), name="max_pool2d")
    padded = pad(data, (0, 0, pt, pl, 0), (0, 0, pb, pr, 0), name="pad_data")
    total = te.compute(shape, lambda n, c, y, x, b: te.sum(
        padded[n, c, y * sh + ry * dh, x * sw + rx * dw, b], axis=[ry, rx]), name="pool_sum")
    if count_include_pad or not any(padding):
        inv = te.const(1.0 / (KH * KW), data.dtype)
        return te.compute(shape, lambda *i: total[i] * inv, name="avg_pool2d")

    def f(n, c, y, x, b):
        count = _inside(y * sh - pt, KH, H, dh) * _inside(x * sw - pl, KW, W, dw)
        return total[n, c, y, x, b] / te.select(count > 0, count, 1).astype(data.dtype)
    return te.compute(shape, f, name="avg_pool2d")


def global_pool_NCHWc(data, pool_type: str):
    """Global max or average pooling of ``NCHW[x]c`` data → ``[N, C/x, 1, 1, x]``.

    >>> y = global_pool_NCHWc(x, "avg")                               # doctest: +SKIP
    """
    N, CB, H, W, B = shape_of(data)
    ry = te.reduce_axis((0, H), name="ry")
    rx = te.reduce_axis((0, W), name="rx")
    shape = (N, CB, 1, 1, B)
    if pool_type == "max":
        return te.compute(shape, lambda n, c, y, x, b: te.max(data[n, c, ry, rx, b], axis=[ry, rx]),
                          name="global_max_pool2d")
    total = te.compute(shape, lambda n, c, y, x, b: te.sum(data[n, c, ry, rx, b], axis=[ry, rx]), name="pool_sum")
    inv = te.const(1.0 / (H * W), data.dtype)
    return te.compute(shape, lambda *i: total[i] * inv, name="global_avg_pool2d")


def schedule_pool_NCHWc(s, out) -> None:
    """Every stage of a blocked pooling group left at the root (the window reduction, an
    average's division, an epilogue): the channel block innermost and vectorized, inside the
    window loops; batch, channel blocks and output rows fused and run in parallel."""
    for st in s.stages:
        op = st.op
        if type(op).__name__ != "ComputeOp" or st.attach_type != "root" or len(op.axis) != 5:
            continue
        n, c, y, x, b = op.axis
        st.reorder(n, c, y, x, *op.reduce_axis, b)
        st.vectorize(b)
        st.parallel(st.fuse(n, c, y))
