"""2-D convolution, NCHW data and OIHW kernel: tuning templates for the CPU (``llvm``).

    import tilecraft.topi.conv2d
    task = autotune.task.create("topi/conv2d_nchw.llvm",
                                args=(1, 64, 56, 56, 64, 3, 3, 1, 1, "float32"), target="llvm")

``topi/conv2d_nchw.llvm`` is the NCHW[x]c schedule of TVM's x86 ``conv2d_NCHWc``, behind an
NCHW-in, NCHW-out interface. One call runs four stages, all of them inside the timed function:

1. ``data_vec[n, C, h, w, c] = data[n, C*ic_bn + c, h - pad, w - pad]`` (zero outside): the
   input packed into ``ic_bn``-channel blocks, padding included, shape
   ``[N, CI/ic_bn, H + 2 pad, W + 2 pad, ic_bn]``;
2. ``kernel_vec[O, C, kh, kw, ci, co] = kernel[O*oc_bn + co, C*ic_bn + ci, kh, kw]``: the kernel
   packed so that ``oc_bn`` output channels are one contiguous vector (the kernel is packed on
   every call: 37 k floats for a 64→64 3×3 layer, under 1% of the time);
3. ``conv_NCHWc[n, O, y, x, co]``, one ``(n, O, y)`` row of ``OW × oc_bn`` values at a time, in
   register tiles of ``reg_n`` output columns × ``oc_bn`` output channels; the innermost step is
   one broadcast input scalar times an ``oc_bn``-wide kernel vector (FMA), over kernel rows,
   the input channels of a block and (unrolled or not) kernel columns. With ``ic_outer`` off,
   each tile accumulates over all input-channel blocks in a cache-written stage; with it on,
   the row accumulates in place one input-channel block at a time, so that block of the kernel
   stays in the L1 cache while it sweeps the row;
4. the NCHW output, unpacked from the row right after it is computed (still in the L1 cache).

Stages 3 and 4 run in parallel over ``(n, O, y)``; 1 and 2 over their outer axes. Knobs:
``tile_ic`` (``ic_bn``, a divisor of CI), ``tile_oc`` (``oc_bn``: 1, 2 or 4 vector registers;
CO is padded with zero filters up to a multiple of it), ``tile_ow`` (``reg_n``, a divisor of
OW; only tiles whose accumulators fit the vector registers are kept), ``unroll_kw``,
``ic_outer``. The fallback (nothing tuned) picks ``ic_bn`` ≤ 16, ``oc_bn`` = two vectors, the
widest ``reg_n`` that fits, ``unroll_kw`` and ``ic_outer``, as TVM's ``_get_default_config``
picks its defaults.

``topi/conv2d_nchw_direct.llvm`` is the earlier direct schedule (no packing; the output is
tiled over channel, row and column, vectorized along the columns), kept for comparison.
"""
from __future__ import annotations

import functools

import tilecraft.autotune as autotune
from tilecraft import te


@functools.lru_cache(maxsize=None)
def vector_registers() -> tuple[int, int]:
    """(fp32 lanes per vector register, number of vector registers) of the host CPU:
    AVX-512 → (16, 32), otherwise AVX2 → (8, 16). The template's space depends on it, so build
    and tune on machines of the same kind."""
    try:
        import llvmlite.binding as llvm
        llvm.initialize_native_target()
        if llvm.get_host_cpu_features().get("avx512f"):
            return 16, 32
    except Exception:  # no llvmlite: the space is the AVX2 one, which is valid everywhere
        pass
    return 8, 16


def _ic_blocks(CI: int) -> list[int]:
    """Input-channel block sizes: the divisors of CI in [4, 64] (the broadcast loop is scalar, so
    any size vectorizes), or the largest divisor ≤ 64 when there is none (CI = 3 → 3)."""
    divisors = [d for d in range(1, min(CI, 64) + 1) if CI % d == 0]
    return [d for d in divisors if d >= 4] or [divisors[-1]]


def _oc_blocks(CO: int, lanes: int) -> list[int]:
    """Output-channel block sizes: 1, 2 or 4 vector registers, at most CO rounded up to a vector."""
    limit = -(-CO // lanes) * lanes
    return [v for v in (lanes, 2 * lanes, 4 * lanes) if v <= limit]


def _tile_fits(reg_n: int, oc_bn: int, lanes: int, nregs: int) -> bool:
    """The register tile's accumulators, one kernel row and a broadcast fit the vector registers."""
    vecs = -(-oc_bn // lanes)
    return reg_n * vecs + vecs + 1 <= nregs


def _fallback_config(CI, CO, OW, lanes, nregs):
    """ic_bn ≤ 16; the register tile with the most accumulators up to 8 (FMA latency × FMAs per
    cycle), then two vectors of channels, then fewer registers; unroll_kw and ic_outer."""
    ic_bn = max([d for d in _ic_blocks(CI) if d <= 16] or [min(_ic_blocks(CI))])
    tiles = [(min(reg_n * (oc_bn // lanes), 8), oc_bn == 2 * lanes, -reg_n * (oc_bn // lanes), reg_n, oc_bn)
             for oc_bn in _oc_blocks(CO, lanes) for reg_n in range(1, OW + 1)
             if OW % reg_n == 0 and _tile_fits(reg_n, oc_bn, lanes, nregs)]
    *_, reg_n, oc_bn = max(tiles)
    return ic_bn, oc_bn, reg_n, True, True


@autotune.template("topi/conv2d_nchw.llvm")
def conv2d_nchw(N: int, CI: int, H: int, W: int, CO: int, KH: int, KW: int, stride: int, padding: int,
                dtype: str = "float32"):
    """conv2d NCHW in, NCHW out, computed in the NCHW[x]c layout (see the module docstring)."""
    cfg = autotune.get_config()
    ic_bn, oc_bn, reg_n, unroll_kw, ic_outer = conv2d_nchwc_config(cfg, N, CI, H, W, CO, KH, KW, stride, padding)
    data = te.placeholder((N, CI, H, W), name="data", dtype=dtype)
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel", dtype=dtype)
    out, (data_vec, kernel_vec, conv) = conv2d_nchwc_compute(data, kernel, stride, padding, ic_bn, oc_bn)
    s = te.create_schedule(out.op)
    schedule_conv2d_nchwc(s, data_vec, kernel_vec, conv, out, reg_n, unroll_kw, ic_outer)
    return s, [data, kernel, out]


def conv2d_nchwc_config(cfg, N: int, CI: int, H: int, W: int, CO: int, KH: int, KW: int, stride: int,
                        padding: int) -> tuple:
    """Define the template's knobs on ``cfg`` and return the parameters it chooses,
    ``(ic_bn, oc_bn, reg_n, unroll_kw, ic_outer)`` (the fallback's without a tuned config). The
    graph level (``relay``) calls it with the config of the same workload, so a tuned
    configuration schedules a fused convolution as it scheduled the template.

    >>> conv2d_nchwc_config(autotune.FallbackConfigEntity(), 1, 64, 56, 56, 64, 3, 3, 1, 1)  # doctest: +SKIP
    (16, 32, 7, True, True)
    """
    lanes, nregs = vector_registers()
    OW = (W + 2 * padding - KW) // stride + 1
    OH = (H + 2 * padding - KH) // stride + 1
    cfg.define_split("tile_ic", CI, num_outputs=2, policy="candidate",
                     candidate=[[-1, d] for d in _ic_blocks(CI)])
    cfg.define_split("tile_oc", CO, num_outputs=2, policy="candidate",
                     candidate=[[-1, v] for v in _oc_blocks(CO, lanes)])
    cfg.define_split("tile_ow", OW, num_outputs=2, policy="factors",
                     filter=lambda e: _tile_fits(e.size[-1], lanes, lanes, nregs))
    cfg.define_knob("unroll_kw", [True, False])
    cfg.define_knob("ic_outer", [False, True])
    cfg.multi_filter(lambda e: _tile_fits(e["tile_ow"].size[-1], e["tile_oc"].size[-1], lanes, nregs)
                     and (e["tile_ow"].size[-1] * e["tile_oc"].size[-1] >= 4 * lanes
                          or e["tile_ow"].size[-1] == OW))
    cfg.add_flop(2.0 * N * CO * OH * OW * CI * KH * KW)

    if cfg.is_fallback:
        return _fallback_config(CI, CO, OW, lanes, nregs)
    return (cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1], cfg["tile_ow"].size[-1], cfg["unroll_kw"].val,
            cfg["ic_outer"].val)


def blocked_conv(data_vec, kernel_vec, out_shape, sh: int, sw: int):
    """The NCHW[x]c convolution stage ``conv_NCHWc`` of shape ``out_shape`` (N, COc, OH, OW, oc):
    ``data_vec`` (N, CIc, H, W, ic), already padded, and ``kernel_vec`` (COc, CIc, KH, KW, ic, oc)."""
    _, CIc, KH, KW, ic, _ = (int(getattr(d, "value", d)) for d in kernel_vec.shape)
    icc = te.reduce_axis((0, CIc), name="icc")
    icb = te.reduce_axis((0, ic), name="icb")
    kh = te.reduce_axis((0, KH), name="kh")
    kw = te.reduce_axis((0, KW), name="kw")
    return te.compute(
        out_shape,
        lambda n, O, y, x, co: te.sum(data_vec[n, icc, y * sh + kh, x * sw + kw, icb]
                                      * kernel_vec[O, icc, kh, kw, icb, co], axis=[icc, kh, kw, icb]),
        name="conv_NCHWc")


def conv2d_nchwc_compute(data, kernel, stride, padding, ic_bn, oc_bn):
    """The NCHW output of ``data ⊛ kernel`` and the stages it is computed through: packed data,
    packed kernel (zero filters pad CO up to a multiple of ``oc_bn``), the NCHW[x]c convolution."""
    N, CI, H, W = (int(getattr(d, "value", d)) for d in data.shape)
    CO, _, KH, KW = (int(getattr(d, "value", d)) for d in kernel.shape)
    dtype = data.dtype
    OH = (H + 2 * padding - KH) // stride + 1
    OW = (W + 2 * padding - KW) // stride + 1
    n_oc = -(-CO // oc_bn)
    zero = te.const(0.0, dtype)

    if padding:
        def pack_data(n, C, h, w, c):
            inside = te.all(h >= padding, h < H + padding, w >= padding, w < W + padding)
            return te.if_then_else(inside, data[n, C * ic_bn + c, h - padding, w - padding], zero)
    else:
        def pack_data(n, C, h, w, c):
            return data[n, C * ic_bn + c, h, w]
    data_vec = te.compute((N, CI // ic_bn, H + 2 * padding, W + 2 * padding, ic_bn), pack_data,
                          name="data_vec")

    if n_oc * oc_bn != CO:
        def pack_kernel(O, C, kh, kw, ci, co):
            return te.if_then_else(O * oc_bn + co < CO, kernel[O * oc_bn + co, C * ic_bn + ci, kh, kw], zero)
    else:
        def pack_kernel(O, C, kh, kw, ci, co):
            return kernel[O * oc_bn + co, C * ic_bn + ci, kh, kw]
    kernel_vec = te.compute((n_oc, CI // ic_bn, KH, KW, ic_bn, oc_bn), pack_kernel, name="kernel_vec")

    conv = blocked_conv(data_vec, kernel_vec, (N, n_oc, OH, OW, oc_bn), stride, stride)
    out = te.compute((N, CO, OH, OW), lambda n, c, y, x: conv[n, c // oc_bn, y, x, c % oc_bn], name="conv")
    return out, (data_vec, kernel_vec, conv)


def schedule_conv2d_nchwc(s, data_vec, kernel_vec, conv, out, reg_n, unroll_kw, ic_outer):
    """Schedule the stages of :func:`conv2d_nchwc_compute`. ``out`` is the NCHW output, or an
    element-wise epilogue of it of the same shape (bias, ReLU, ...) into which the unpacking was
    inlined: the graph level fuses those into the convolution."""
    oc_bn = int(getattr(conv.shape[-1], "value", conv.shape[-1]))
    # with zero filters padding CO, the last block's lanes are guarded: left scalar
    whole_blocks = int(getattr(out.shape[1], "value", out.shape[1])) % oc_bn == 0
    n, C, h, w, c = s[data_vec].op.axis
    s[data_vec].parallel(s[data_vec].fuse(n, C, h))

    O, C, _, _, _, co = s[kernel_vec].op.axis
    s[kernel_vec].parallel(s[kernel_vec].fuse(O, C))
    if whole_blocks:
        s[kernel_vec].vectorize(co)

    # the output: one (n, O, y) row of the packed convolution, then its unpacking; the channels
    # are unrolled, not vectorized: LLVM then reads the row as interleaved vectors and stores
    # whole rows of the output (3x faster than a scatter per column)
    n, c, y, x = s[out].op.axis
    co, ci = s[out].split(c, factor=oc_bn)
    s[out].reorder(n, co, y, x, ci)
    row = s[out].fuse(n, co, y)
    s[out].parallel(row)
    s[out].unroll(ci)
    s[conv].compute_at(s[out], row)

    if ic_outer:
        # the row accumulates in place, one input-channel block at a time: each block of the
        # kernel (ic_bn × KH × KW × oc_bn) stays in the L1 cache while it sweeps the row's tiles
        _, _, _, x, co = s[conv].op.axis
        icc, kh, kw, icb = s[conv].op.reduce_axis
        xo, xi = s[conv].split(x, factor=reg_n)
        _reorder_tile(s, conv, [icc, xo], kh, kw, icb, xi, co, unroll_kw)
    else:
        # each reg_n × oc_bn tile accumulates over all input channels in a cache-written stage
        CC = s.cache_write(conv, "global")
        _, _, _, x, co = s[conv].op.axis
        xo, xi = s[conv].split(x, factor=reg_n)
        s[conv].reorder(xo, xi, co)
        s[conv].vectorize(co)
        s[CC].compute_at(s[conv], xo)
        _, _, _, xc, coc = s[CC].op.axis
        icc, kh, kw, icb = s[CC].op.reduce_axis
        _reorder_tile(s, CC, [icc], kh, kw, icb, xc, coc, unroll_kw)


def _reorder_tile(s, stage, outer, kh, kw, icb, x, co, unroll_kw):
    """The register tile's loops: kernel rows, channels of the block and kernel columns (or
    columns, then channels) around the unrolled reg_n columns × vectorized oc_bn channels."""
    if unroll_kw:
        s[stage].reorder(*outer, kh, icb, kw, x, co)
        s[stage].unroll(kw)
    else:
        s[stage].reorder(*outer, kh, kw, icb, x, co)
    s[stage].unroll(x)
    s[stage].vectorize(co)


@autotune.template("topi/conv2d_nchw_direct.llvm")
def conv2d_nchw_direct(N: int, CI: int, H: int, W: int, CO: int, KH: int, KW: int, stride: int, padding: int,
                       dtype: str = "float32"):
    """conv2d NCHW, the direct schedule (no packing), kept for comparison.

    The output is tiled over (channel, row, column); a ``fi × yi × xi``
    register tile, vectorized along the output columns, accumulates in a cache-written stage
    computed inside each ``(fo, yo, xo)`` block; the input channels are split for the cache.
    Padding is materialised once (in parallel). Knobs: ``tile_f``, ``tile_y``, ``tile_x``
    (2 levels each), ``tile_rc``, ``order`` (where the kernel-window loops sit), ``unroll_kw``."""
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
