"""2-D convolution, NCHW data and OIHW kernel: a tuning template for the CPU (``llvm``).

    import tilecraft.topi.conv2d
    task = autotune.task.create("topi/conv2d_nchw.llvm",
                                args=(1, 64, 56, 56, 64, 3, 3, 1, 1, "float32"), target="llvm")

The output is tiled over (channel, row, column); a ``fi × yi × xi`` register tile, vectorized
along the output columns, accumulates in a cache-written stage computed inside each
``(fo, yo, xo)`` block; the input channels are split for the cache. Padding is materialised once
(in parallel). Knobs: ``tile_f``, ``tile_y``, ``tile_x`` (2 levels each), ``tile_rc``,
``order`` (where the kernel-window loops sit), ``unroll_kw``.
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft import te


@autotune.template("topi/conv2d_nchw.llvm")
def conv2d_nchw(N, CI, H, W, CO, KH, KW, stride, padding, dtype="float32"):
    cfg = autotune.get_config()
    OH = (H + 2 * padding - KH) // stride + 1
    OW = (W + 2 * padding - KW) // stride + 1
    data = te.placeholder((N, CI, H, W), name="data", dtype=dtype)
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel", dtype=dtype)
    if padding:
        padded = te.compute(
            (N, CI, H + 2 * padding, W + 2 * padding),
            lambda n, c, y, x: te.if_then_else(
                te.all(y >= padding, y < H + padding, x >= padding, x < W + padding),
                data[n, c, y - padding, x - padding], te.const(0.0, dtype)),
            name="pad")
    else:
        padded = data
    rc = te.reduce_axis((0, CI), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    conv = te.compute(
        (N, CO, OH, OW),
        lambda n, f, y, x: te.sum(padded[n, rc, y * stride + ry, x * stride + rx] * kernel[f, rc, ry, rx],
                                  axis=[rc, ry, rx]),
        name="conv")
    s = te.create_schedule(conv.op)

    cfg.define_split("tile_f", CO, num_outputs=2, filter=lambda e: e.size[-1] <= 16)
    cfg.define_split("tile_y", OH, num_outputs=2, filter=lambda e: e.size[-1] <= 8)
    cfg.define_split("tile_x", OW, num_outputs=2, filter=lambda e: e.size[-1] in (4, 7, 8, 14, 16, 28, 32) or e.size[-1] == OW)
    cfg.define_split("tile_rc", CI, num_outputs=2)
    cfg.define_knob("order", [0, 1])
    cfg.define_knob("unroll_kw", [0, 1])
    cfg.add_flop(2.0 * N * CO * OH * OW * CI * KH * KW)
    if cfg.is_fallback:
        return s, [data, kernel, conv]

    if padding:
        pn, pc, py, px = s[padded].op.axis
        s[padded].parallel(s[padded].fuse(pn, pc))

    CC = s.cache_write(conv, "global")
    n, f, y, x = s[conv].op.axis
    fo, fi = cfg["tile_f"].apply(s, conv, f)
    yo, yi = cfg["tile_y"].apply(s, conv, y)
    xo, xi = cfg["tile_x"].apply(s, conv, x)
    s[conv].reorder(n, fo, yo, xo, fi, yi, xi)
    s[conv].vectorize(xi)
    s[conv].parallel(s[conv].fuse(n, fo, yo))
    s[CC].compute_at(s[conv], xo)

    _, fc, yc, xc = s[CC].op.axis
    rcc, ryc, rxc = s[CC].op.reduce_axis
    rco, rci = cfg["tile_rc"].apply(s, CC, rcc)
    if cfg["order"].val == 0:
        s[CC].reorder(rco, ryc, rxc, rci, fc, yc, xc)
    else:
        s[CC].reorder(rco, rci, ryc, rxc, fc, yc, xc)
    s[CC].unroll(fc)
    s[CC].unroll(yc)
    s[CC].vectorize(xc)
    if cfg["unroll_kw"].val:
        s[CC].unroll(rxc)
    return s, [data, kernel, conv]
