"""Pooling in NHWC for the GPU: the layout that ``TensorCoreLayout`` keeps between tensor-core
convolutions, so a ResNet's max pool and global pool read the convolutions' NHWC output directly
(no ``transpose`` on either side).

* ``pool2d_nhwc(x, "max" | "avg", pool_size, strides, padding, dilation, count_include_pad)``:
  ``[N, H, W, C]`` → ``[N, OH, OW, C]``, the windows, padding and averaging rules of
  ``topi.nn.pooling.pool2d``; a float16 average sums in float32 and rounds once;
* ``global_pool_nhwc(x, kind)``: ``[N, H, W, C]`` → ``[N, 1, 1, C]`` (a float16 mean summed in
  float32);
* ``schedule_pool_nhwc(s, out, red)``: one kernel per group: each thread computes ``vec``
  neighbouring channels of one output pixel (``vec`` = 16 bytes of channels where ``C`` allows:
  8 float16, 4 float32), looping over the window with the channels innermost and vectorized, so a
  warp reads whole rows of channels (coalesced 16-byte loads); the reduction is computed in the
  thread's registers at the output's thread, and an epilogue (an average's division, a cast,
  element-wise operators fused after the pool) is applied on the way out.

>>> from tilecraft import te
from tilecraft.ir import dtype as dt
>>> x = te.placeholder((2, 8, 8, 64), name="x", dtype="float16")
>>> y, red = pool2d_nhwc(x, "max", (3, 3), (2, 2), (1, 1, 1, 1))
>>> tuple(int(d) for d in y.shape)
(2, 4, 4, 64)
"""
from __future__ import annotations

from tilecraft import te
from tilecraft.ir import dtype as dt

from .nn import _inside, pad
from .transform import shape_of

THREADS = 256          # threads per block


def pool2d_nhwc(data, pool_type: str, pool_size, strides, padding, dilation=(1, 1), count_include_pad=False):
    """``(out, reduction)``: max or average pooling of NHWC ``data`` (module docstring); the
    reduction stage is what :func:`schedule_pool_nhwc` computes in each thread's registers, the
    output (a copy of it, or the average's division) what the thread writes."""
    N, H, W, C = shape_of(data)
    KH, KW = pool_size
    sh, sw = strides
    dh, dw = dilation
    pt, pl, pb, pr = padding
    OH = (H + pt + pb - (KH - 1) * dh - 1) // sh + 1
    OW = (W + pl + pr - (KW - 1) * dw - 1) // sw + 1
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    shape = (N, OH, OW, C)
    if pool_type == "max":
        padded = pad(data, (0, pt, pl, 0), (0, pb, pr, 0), pad_value=float("-inf"), name="pad_data")
        red = te.compute(shape, lambda n, y, x, c: te.max(padded[n, y * sh + ry * dh, x * sw + rx * dw, c],
                                                          axis=[ry, rx]), name="pool_max")
        return te.compute(shape, lambda *i: red[i], name="max_pool2d"), red
    acc = "float32" if data.dtype == "float16" else data.dtype
    padded = pad(data, (0, pt, pl, 0), (0, pb, pr, 0), name="pad_data")
    red = te.compute(shape, lambda n, y, x, c: te.sum(
        padded[n, y * sh + ry * dh, x * sw + rx * dw, c].astype(acc), axis=[ry, rx]), name="pool_sum")
    if count_include_pad or not any(padding):
        inv = te.const(1.0 / (KH * KW), acc)
        return te.compute(shape, lambda *i: (red[i] * inv).astype(data.dtype), name="avg_pool2d"), red

    def f(n, y, x, c):
        count = _inside(y * sh - pt, KH, H, dh) * _inside(x * sw - pl, KW, W, dw)
        return (red[n, y, x, c] / te.select(count > 0, count, 1).astype(acc)).astype(data.dtype)
    return te.compute(shape, f, name="avg_pool2d"), red


def global_pool_nhwc(data, pool_type: str):
    """``(out, reduction)``: global max or average pooling of NHWC ``data`` → ``[N, 1, 1, C]``."""
    N, H, W, C = shape_of(data)
    ry = te.reduce_axis((0, H), name="ry")
    rx = te.reduce_axis((0, W), name="rx")
    shape = (N, 1, 1, C)
    if pool_type == "max":
        red = te.compute(shape, lambda n, y, x, c: te.max(data[n, ry, rx, c], axis=[ry, rx]), name="pool_max")
        return te.compute(shape, lambda *i: red[i], name="global_max_pool2d"), red
    acc = "float32" if data.dtype == "float16" else data.dtype
    red = te.compute(shape, lambda n, y, x, c: te.sum(data[n, ry, rx, c].astype(acc), axis=[ry, rx]), name="pool_sum")
    inv = te.const(1.0 / (H * W), acc)
    return te.compute(shape, lambda *i: (red[i] * inv).astype(data.dtype), name="global_avg_pool2d"), red


def channel_vector(C: int, dtype: str) -> int:
    """Channels per thread: 16 bytes of them where ``C`` is a multiple, else fewer (1 at least)."""
    vec = max(1, 16 // dt.nbytes(dtype))
    while vec > 1 and C % vec:
        vec //= 2
    return vec


def schedule_pool_nhwc(s, out, red, threads: int = THREADS) -> None:
    """The GPU schedule of a pooling group whose output ``out`` is NHWC-shaped like the pooling's
    reduction ``red`` (module docstring; ``out`` is not ``red``); injective stages are inlined
    first by the caller.

    Before: ``for n, y, x, c: out[n, y, x, c] = f(red[n, y, x, c])`` with ``red`` a window loop
    of its own. After::

        blockIdx.x, threadIdx.x <- (n, y, x, c // vec)        # one thread: vec channels
          red_local[0:vec] = init; for ry, rx: for ci in vec (vectorized): red_local[ci] op= data[...]
          for ci in vec (vectorized): out[n, y, x, c*vec + ci] = f(red_local[ci])
    """
    N, OH, OW, C = (int(getattr(d, "value", d)) for d in out.shape)
    vec = channel_vector(C, out.dtype)
    n, y, x, c = s[out].op.axis
    co, ci = s[out].split(c, factor=vec)
    f = s[out].fuse(n, y, x, co)
    b, t = s[out].split(f, factor=threads)
    s[out].bind(b, te.thread_axis("blockIdx.x"))
    s[out].bind(t, te.thread_axis("threadIdx.x"))
    if vec > 1:
        s[out].vectorize(ci)
    s[red].set_scope("local")
    s[red].compute_at(s[out], t)
    rn, ry_, rx_, rc = s[red].op.axis
    s[red].reorder(rn, ry_, rx_, *s[red].op.reduce_axis, rc)
    if vec > 1:
        s[red].vectorize(rc)
