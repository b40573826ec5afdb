"""conv2d templates built on the CPU micro-kernels of ``cpu_intrinsics``: NCHW in and out,
computed in the NCHW[x]c layout (as ``topi/conv2d_nchw.llvm``), with the register tile of each
output row tensorized: fp32 (``conv_fp32``: FMAs) and int8 (``conv_u8s8s32``: ``uint8`` data ×
``int8`` kernel → ``int32``, VNNI where the target has it).

    import tilecraft.topi.conv2d_microkernel
    task = autotune.task.create("topi/conv2d_nchwc_tensorized.llvm",
                                args=(1, 64, 56, 56, 64, 3, 3, 1, 1, "float32"), target="llvm")

One call runs four stages:

1. ``data_vec[n, C, h, w, c]``: the input in ``ic_bn``-channel blocks, zero padding included;
2. ``kernel_vec``: the kernel with ``oc_bn`` output channels contiguous, ``[O, C, kh, kw, ic_bn,
   oc_bn]`` (fp32) or ``[O, C, kh, kw, ic_bn / 4, oc_bn, 4]`` (int8: four input channels of one
   output channel together, the layout ``vpdpbusd`` reads); zero filters pad CO to ``oc_bn``;
3. ``conv_NCHWc[n, O, y, x, co]``, one ``(n, O, y)`` row at a time: for each block of input
   channels (``icc``) and each ``reg_n``-column tile, the micro-kernel accumulates ``reg_n ×
   oc_bn`` outputs in registers over the kernel window and the block's channels (its reset /
   update when there are several blocks, its body when ``ic_bn = CI``);
4. the NCHW output, unpacked from the row while it is in the L1 cache.

Knobs: ``tile_ic`` (``ic_bn``: divisors of CI; int8: multiples of 4), ``tile_oc`` (``oc_bn``: 1-4
vectors), ``tile_ow`` (``reg_n``: divisors of OW whose tile fits the registers), ``ic_outer``
(the ``icc`` loop outside the column tiles, so a kernel block stays in cache while it sweeps
the row, or inside), ``k_unroll`` (channel steps per micro-kernel loop iteration). The int8
template computes plain integer convolution (zero padding; no zero points or requantization).

The graph level (``relay``) runs its blocked convolutions (``nn.contrib_conv2d_NCHWc``: NCHW[ic]c
data, the kernel packed once at build time to OIHW[ic]i[oc]o, which is ``kernel_vec``'s layout)
on the fp32 micro-kernel with stage 3 only: :func:`graph_blocks` (the blocks: two vectors of
output channels, the input's own block), the template ``topi/conv2d_NCHWc_microkernel.llvm``
(that kernel as it runs in the model, blocked in and out: what a model's tasks tune),
:func:`blocked_config` (its knobs), :func:`blocked_fallback` (its untuned config by layer
class) and :func:`schedule_blocked` (rows in parallel, the epilogue per row). Stride 2, 1×1 and the 7×7 stem with 3 input channels (``ic_bn = 3``) need nothing special:
the micro-kernel's window is ``[kh, (reg_n - 1)*stride + kw, ic_bn]``.
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft import te
from tilecraft.topi import cpu_amx, cpu_intrinsics


def _ints(shape) -> list[int]:
    return [int(getattr(d, "value", d)) for d in shape]


def packed_conv2d(data, kernel, stride: int, padding: int, ic_bn: int, oc_bn: int):
    """The NCHW output of ``data ⊛ kernel`` and its stages ``(data_vec, kernel_vec, conv)``
    (see the module docstring); int8 when ``data`` is uint8 (``kernel`` int8, output int32)."""
    N, CI, H, W = _ints(data.shape)
    CO, _, KH, KW = _ints(kernel.shape)
    int8 = data.dtype == "uint8"
    out_dtype = "int32" if int8 else data.dtype
    OH = (H + 2 * padding - KH) // stride + 1
    OW = (W + 2 * padding - KW) // stride + 1
    n_oc = -(-CO // oc_bn)

    def pack_data(n, C, h, w, c):
        value = data[n, C * ic_bn + c, h - padding, w - padding]
        if not padding:
            return value
        inside = te.all(h >= padding, h < H + padding, w >= padding, w < W + padding)
        return te.if_then_else(inside, value, te.const(0, data.dtype))
    data_vec = te.compute((N, CI // ic_bn, H + 2 * padding, W + 2 * padding, ic_bn), pack_data, name="data_vec")

    def weight(O, C, kh, kw, ci, co):
        value = kernel[O * oc_bn + co, C * ic_bn + ci, kh, kw]
        if n_oc * oc_bn == CO:
            return value
        return te.if_then_else(O * oc_bn + co < CO, value, te.const(0, kernel.dtype))

    icc = te.reduce_axis((0, CI // ic_bn), name="icc")
    kh = te.reduce_axis((0, KH), name="kh")
    kw = te.reduce_axis((0, KW), name="kw")
    if int8:
        kernel_vec = te.compute((n_oc, CI // ic_bn, KH, KW, ic_bn // 4, oc_bn, 4),
                                lambda O, C, y, x, c4, co, cb: weight(O, C, y, x, c4 * 4 + cb, co), name="kernel_vec")
        c4 = te.reduce_axis((0, ic_bn // 4), name="c4")
        cb = te.reduce_axis((0, 4), name="cb")
        conv = te.compute(
            (N, n_oc, OH, OW, oc_bn),
            lambda n, O, y, x, co: te.sum(
                data_vec[n, icc, y * stride + kh, x * stride + kw, c4 * 4 + cb].astype("int32")
                * kernel_vec[O, icc, kh, kw, c4, co, cb].astype("int32"), axis=[icc, kh, kw, c4, cb]),
            name="conv_NCHWc")
    else:
        kernel_vec = te.compute((n_oc, CI // ic_bn, KH, KW, ic_bn, oc_bn), weight, name="kernel_vec")
        icb = te.reduce_axis((0, ic_bn), name="icb")
        conv = te.compute(
            (N, n_oc, OH, OW, oc_bn),
            lambda n, O, y, x, co: te.sum(data_vec[n, icc, y * stride + kh, x * stride + kw, icb]
                                          * kernel_vec[O, icc, kh, kw, icb, co], axis=[icc, kh, kw, icb]),
            name="conv_NCHWc")
    out = te.compute((N, CO, OH, OW), lambda n, c, y, x: conv[n, c // oc_bn, y, x, c % oc_bn].astype(out_dtype),
                     name="conv")
    return out, (data_vec, kernel_vec, conv)


def _schedule(s, data_vec, kernel_vec, conv, out, reg_n, ic_outer, mk, import_llvm=None):
    oc_bn = _ints(conv.shape)[-1]
    n, C, h, w, c = s[data_vec].op.axis
    s[data_vec].parallel(s[data_vec].fuse(n, C, h))
    kv = s[kernel_vec].op.axis
    s[kernel_vec].parallel(s[kernel_vec].fuse(kv[0], kv[1]))

    n, c, y, x = s[out].op.axis
    co, ci = s[out].split(c, factor=oc_bn)
    s[out].reorder(n, co, y, x, ci)
    row = s[out].fuse(n, co, y)
    s[out].parallel(row)
    s[out].unroll(ci)
    if import_llvm:
        s[out].pragma(row, "import_llvm", import_llvm)
    s[conv].compute_at(s[out], row)

    _, _, _, x, co = s[conv].op.axis
    icc, *inner = s[conv].op.reduce_axis
    xo, xi = s[conv].split(x, factor=reg_n)
    outer = [icc, xo] if ic_outer else [xo, icc]
    s[conv].reorder(*outer, xi, co, *inner)
    s[conv].tensorize(xi, mk)


def _ic_blocks(CI: int, multiple: int) -> list[int]:
    return [d for d in range(multiple, min(CI, 128) + 1, multiple) if CI % d == 0] or [CI]


def _oc_blocks(CO: int, lanes: int) -> list[int]:
    limit = -(-CO // lanes) * lanes
    return [v for v in (lanes, 2 * lanes, 3 * lanes, 4 * lanes) if v <= limit]


def _fits(reg_n: int, oc_bn: int, lanes: int, registers: int, extra: int) -> bool:
    vecs = oc_bn // lanes
    return reg_n * vecs + vecs + extra <= registers


def _conv_template(cfg, isa, lanes, extra, multiple, N, CI, H, W, CO, KH, KW, stride, padding, amx=False):
    """The knobs, filters and fallback of both templates: ``(ic_bn, oc_bn, reg_n, ic_outer,
    k_unroll)`` of the config (and, with ``amx``, a knob ``amx`` whose configs take AMX tiles:
    ``ic_bn`` a multiple of 64, ``oc_bn`` 16 or 32, up to 32 columns)."""
    OH = (H + 2 * padding - KH) // stride + 1
    OW = (W + 2 * padding - KW) // stride + 1
    cfg.define_split("tile_ic", CI, num_outputs=2, policy="candidate",
                     candidate=[[-1, d] for d in _ic_blocks(CI, multiple)])
    cfg.define_split("tile_oc", CO, num_outputs=2, policy="candidate",
                     candidate=[[-1, v] for v in _oc_blocks(CO, lanes)])
    cfg.define_split("tile_ow", OW, num_outputs=2, policy="factors",
                     filter=lambda e: _fits(e.size[-1], lanes, lanes, isa.registers, extra)
                     or (amx and cpu_amx.amx_conv_tiles(e.size[-1], 16) is not None))
    cfg.define_knob("ic_outer", [False, True])
    cfg.define_knob("k_unroll", [1, 2, 4])
    if amx:             # only where the target has AMX: other targets' spaces (and logs) stay as they were
        cfg.define_knob("amx", [False, True])

    def vector_tile(e):
        return (_fits(e["tile_ow"].size[-1], e["tile_oc"].size[-1], lanes, isa.registers, extra)
                and (e["tile_ow"].size[-1] * e["tile_oc"].size[-1] >= 8 * lanes or e["tile_ow"].size[-1] == OW)
                and (e["tile_ic"].size[-1] // multiple) % e["k_unroll"].val == 0)

    def amx_tile(e):
        return (cpu_amx.amx_conv_tiles(e["tile_ow"].size[-1], e["tile_oc"].size[-1]) is not None
                and e["tile_ic"].size[-1] % 64 == 0 and e["k_unroll"].val == 1)
    cfg.multi_filter(lambda e: amx_tile(e) if amx and e["amx"].val else vector_tile(e))
    cfg.add_flop(2.0 * N * CO * OH * OW * CI * KH * KW)
    if cfg.is_fallback:
        ic_bn = max(d for d in _ic_blocks(CI, multiple) if d <= 64 or d == _ic_blocks(CI, multiple)[0])
        tiles = [(reg_n * (oc_bn // lanes), oc_bn == 2 * lanes, reg_n, oc_bn)
                 for oc_bn in _oc_blocks(CO, lanes) for reg_n in range(1, OW + 1)
                 if OW % reg_n == 0 and _fits(reg_n, oc_bn, lanes, isa.registers, extra)]
        _, _, reg_n, oc_bn = max(tiles)
        return ic_bn, oc_bn, reg_n, True, 1
    return (cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1], cfg["tile_ow"].size[-1], cfg["ic_outer"].val,
            cfg["k_unroll"].val)


@autotune.template("topi/conv2d_nchwc_tensorized.llvm")
def conv2d_nchwc_tensorized(N: int, CI: int, H: int, W: int, CO: int, KH: int, KW: int, stride: int,
                            padding: int, dtype: str = "float32"):
    """conv2d NCHW, fp32, in NCHW[x]c with the FMA micro-kernel on each output row tile."""
    if dtype != "float32":
        raise ValueError(f"topi/conv2d_nchwc_tensorized.llvm computes float32 (got dtype {dtype!r}); "
                         f"int8 is topi/conv2d_nchwc_int8.llvm")
    cfg = autotune.get_config()
    isa = cpu_intrinsics.vector_isa()
    ic_bn, oc_bn, reg_n, ic_outer, k_unroll = _conv_template(cfg, isa, isa.lanes, 1, 1, N, CI, H, W, CO, KH,
                                                             KW, stride, padding)
    data = te.placeholder((N, CI, H, W), name="data", dtype=dtype)
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel", dtype=dtype)
    out, (data_vec, kernel_vec, conv) = packed_conv2d(data, kernel, stride, padding, ic_bn, oc_bn)
    s = te.create_schedule(out.op)
    mk = cpu_intrinsics.conv_fp32(reg_n, oc_bn, KH, KW, ic_bn, stride, isa=isa, unroll=k_unroll)
    _schedule(s, data_vec, kernel_vec, conv, out, reg_n, ic_outer, mk)
    return s, [data, kernel, out]


@autotune.template("topi/conv2d_nchwc_int8.llvm")
def conv2d_nchwc_int8(N: int, CI: int, H: int, W: int, CO: int, KH: int, KW: int, stride: int, padding: int,
                      amx_config: str = "kept"):
    """conv2d NCHW, uint8 data × int8 kernel → int32, in NCHW[x]c with the int8 micro-kernel:
    the vector one (VNNI where present), or where the target has AMX and CI is a multiple of 64,
    with knob ``amx``, ``cpu_amx.conv_u8s8s32_amx`` (the tuner's choice; the fallback keeps the
    vector kernel), its tile configuration kept across calls (``amx_config="kept"``, the
    default) or loaded per call (``"call"``, LLVM's)."""
    if amx_config not in ("call", "kept"):
        raise ValueError(f"topi/conv2d_nchwc_int8.llvm: amx_config is 'call' or 'kept', got {amx_config!r}")
    cfg = autotune.get_config()
    isa = cpu_intrinsics.vector_isa()
    if isa.int8 is None:
        raise ValueError("topi/conv2d_nchwc_int8.llvm needs AVX2 at least; the target has no int8 dot product")
    if CI % 4:
        raise ValueError(f"topi/conv2d_nchwc_int8.llvm: CI = {CI} must be a multiple of 4")
    extra = 1 if isa.int8 in ("avx512vnni", "avxvnni") else 4
    amx = isa.amx and CI % 64 == 0 and isa.int8_lanes == 16
    ic_bn, oc_bn, reg_n, ic_outer, k_unroll = _conv_template(cfg, isa, isa.int8_lanes, extra, 4, N, CI, H, W, CO,
                                                             KH, KW, stride, padding, amx=amx)
    on_amx = amx and not cfg.is_fallback and cfg["amx"].val     # the fallback keeps the vector kernel
    data = te.placeholder((N, CI, H, W), name="data", dtype="uint8")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel", dtype="int8")
    out, (data_vec, kernel_vec, conv) = packed_conv2d(data, kernel, stride, padding, ic_bn, oc_bn)
    s = te.create_schedule(out.op)
    if on_amx:
        keep = amx_config == "kept"
        mk = cpu_amx.conv_u8s8s32_amx(reg_n, oc_bn, KH, KW, ic_bn, stride, keep_config=keep)
        ir = cpu_amx.amx_conv_kernel_ir(reg_n, oc_bn, KH, KW, ic_bn, stride, keep_config=keep)
    else:
        mk = cpu_intrinsics.conv_u8s8s32(reg_n, oc_bn, KH, KW, ic_bn, stride, isa=isa, unroll=k_unroll)
        ir = None
    _schedule(s, data_vec, kernel_vec, conv, out, reg_n, ic_outer, mk, import_llvm=ir)
    return s, [data, kernel, out]


# ------------------------------------------------------------------------------------------------
# the graph level's blocked convolution (``nn.contrib_conv2d_NCHWc``) on the micro-kernel

WORKLOAD = "topi/conv2d_NCHWc_microkernel.llvm"


def graph_blocks(CI: int, CO: int, in_block: int | None, isa=None):
    """``(ic, oc)``: the blocks of a convolution the graph level runs on the micro-kernel, or
    None when its output channels are not whole vectors (the loop-level template then). ``oc``
    is two vectors with 32 vector registers (AVX-512) where they divide CO (every ResNet layer:
    one block throughout, so no transform between layers), else one (AVX2's 16 registers hold
    a 14-column tile of one vector, a 6-column one of two); ``ic`` the block the input already has
    (``in_block``) when it divides CI, else ``oc`` when that does (an NCHW input: the block a
    residual add will want too), else the largest divisor of CI up to 64 (3 for the stem).

    >>> graph_blocks(3, 64, None, cpu_intrinsics.vector_isa("llvm -mcpu=skylake-avx512"))
    (3, 32)
    """
    isa = isa or cpu_intrinsics.vector_isa()
    lanes = isa.lanes
    if CO % lanes:
        return None
    oc = 2 * lanes if CO % (2 * lanes) == 0 and isa.registers >= 32 else lanes
    if in_block is not None and CI % in_block == 0:
        return in_block, oc
    if CI % oc == 0:
        return oc, oc
    return max(d for d in _ic_blocks(CI, 1) if d <= 64 or d == _ic_blocks(CI, 1)[0]), oc


def blocked_fits(ic: int, oc: int, dtype: str, isa=None) -> bool:
    """The fp32 micro-kernel computes a blocked convolution with input block ``ic`` and output
    block ``oc`` when ``oc`` is a whole number of vectors (any ``ic``: the block is the
    micro-kernel's innermost reduction). Otherwise the loop-level template of ``topi/conv2d.py``
    computes it (AVX-512 with ``oc = 8``, say)."""
    isa = isa or cpu_intrinsics.vector_isa()
    return dtype == "float32" and oc % isa.lanes == 0 and ic >= 1


def blocked_config(cfg, N: int, CI: int, H: int, W: int, CO: int, KH: int, KW: int, stride: int,
                   padding: int, ic: int, oc: int) -> tuple:
    """Define the knobs of ``topi/conv2d_NCHWc_microkernel.llvm`` on ``cfg`` and return
    ``(reg_n, ic_outer, k_unroll)``: the tuned values, or :func:`blocked_fallback`'s. Knobs:
    ``tile_ow`` (``reg_n`` columns per register tile: divisors of OW whose ``reg_n × oc`` tile
    fits the registers), ``ic_outer`` (input-channel blocks outside the column tiles),
    ``k_unroll`` (channel steps per micro-kernel loop iteration, dividing ``ic``).

    >>> blocked_config(autotune.FallbackConfigEntity(), 1, 64, 56, 56, 64, 3, 3, 1, 1, 32, 32)  # doctest: +SKIP
    (8, False, 4)
    """
    isa = cpu_intrinsics.vector_isa()
    lanes, regs = isa.lanes, isa.registers
    OW = (W + 2 * padding - KW) // stride + 1
    OH = (H + 2 * padding - KH) // stride + 1
    cfg.define_split("tile_ow", OW, num_outputs=2, policy="factors",
                     filter=lambda e: _fits(e.size[-1], oc, lanes, regs, 1))
    cfg.define_knob("ic_outer", [False, True])
    cfg.define_knob("k_unroll", [1, 2, 4])
    cfg.multi_filter(lambda e: e["k_unroll"].val == 1 or (e["k_unroll"].val <= ic and ic % e["k_unroll"].val == 0))
    cfg.add_flop(2.0 * N * CO * OH * OW * CI * KH * KW)
    if cfg.is_fallback:
        return blocked_fallback(isa, OW, ic, oc)
    return cfg["tile_ow"].size[-1], cfg["ic_outer"].val, cfg["k_unroll"].val


def blocked_fallback(isa, OW: int, ic: int, oc: int) -> tuple:
    """The untuned ``(reg_n, ic_outer, k_unroll)`` of a blocked convolution, by layer class
    (measured first: ``bench/relay_conv_variants.py``, docs/relay.md): the widest register tile
    dividing OW that fits the registers (14 columns × 2 vectors on ResNet's 14- to 112-wide rows
    with AVX-512, 7 on the 7-wide: on Emerald Rapids the 14-column tile was the fastest or tied
    in 6 of 7 layer classes, up to 1.19x the 7- and 8-column ones); the input-channel blocks
    inside the column tiles (``ic_outer`` off); ``k_unroll`` 4 (2, 1 where that does not divide
    the input block).

    >>> blocked_fallback(cpu_intrinsics.vector_isa("llvm -mcpu=skylake-avx512"), 56, 32, 32)
    (14, False, 4)
    """
    reg_n = max(r for r in range(1, OW + 1) if OW % r == 0 and _fits(r, oc, isa.lanes, isa.registers, 1))
    return reg_n, False, next(u for u in (4, 2, 1) if ic % u == 0)


def schedule_blocked(s, data_pad, conv, out, stride: int, reg_n: int, ic_outer: bool, k_unroll: int) -> None:
    """Schedule ``topi.layout.conv2d_NCHWc``'s stages on the fp32 micro-kernel: rows ``(n, O, y)``
    of the output in parallel; in a row, ``reg_n`` × ``oc`` register tiles (``conv_fp32``) over
    the window and the input-channel blocks (``ic_outer``: blocks outside the column tiles), then
    the row's epilogue (``out``: bias, ReLU, a residual add inlined into one blocked stage, or
    ``conv`` itself) while the row is in the L1 cache. A padding stage (``data_pad``) is its own
    parallel stage."""
    _, _, KH, KW, ic, oc = _ints(conv.op.input_tensors[1].shape)
    mk = cpu_intrinsics.conv_fp32(reg_n, oc, KH, KW, ic, stride, unroll=k_unroll)
    if type(data_pad.op).__name__ == "ComputeOp":
        n, C, h, w, c = s[data_pad].op.axis
        s[data_pad].parallel(s[data_pad].fuse(n, C, h))
        if ic % 8 == 0:
            s[data_pad].vectorize(c)
    if out is not conv:
        n, O, y, x, co = s[out].op.axis
        row = s[out].fuse(n, O, y)
        s[out].parallel(row)
        s[out].vectorize(co)
        s[conv].compute_at(s[out], row)
    n, O, y, x, co = s[conv].op.axis
    icc, *inner = s[conv].op.reduce_axis
    xo, xi = s[conv].split(x, factor=reg_n)
    if out is conv:
        s[conv].parallel(s[conv].fuse(n, O, y))
    outer = [icc, xo] if ic_outer else [xo, icc]
    s[conv].reorder(*outer, xi, co, *inner)
    s[conv].tensorize(xi, mk)


@autotune.template(WORKLOAD)
def conv2d_NCHWc_microkernel(N: int, CI: int, H: int, W: int, CO: int, KH: int, KW: int, stride: int,
                             padding: int, ic: int, oc: int, dtype: str = "float32"):
    """The graph level's blocked convolution, fp32, as it runs in a model: ``data[N, CI/ic, H, W,
    ic]`` ⊛ ``kernel[CO/oc, CI/ic, KH, KW, ic, oc]`` (packed once, at build time) →
    ``[N, CO/oc, OH, OW, oc]``, on the micro-kernel (:func:`schedule_blocked`; knobs:
    :func:`blocked_config`). Task extraction makes one task per distinct layer of a model.

    >>> task = autotune.task.create("topi/conv2d_NCHWc_microkernel.llvm",
    ...                             args=(1, 64, 56, 56, 64, 3, 3, 1, 1, 32, 32, "float32"), target="llvm")  # doctest: +SKIP
    """
    from tilecraft.topi.layout import conv2d_NCHWc
    if dtype != "float32" or CI % ic or CO % oc:
        raise ValueError(f"{WORKLOAD}: float32 with blocks dividing the channels (CI {CI} by ic {ic}, CO {CO} "
                         f"by oc {oc}), got dtype {dtype!r}")
    cfg = autotune.get_config()
    reg_n, ic_outer, k_unroll = blocked_config(cfg, N, CI, H, W, CO, KH, KW, stride, padding, ic, oc)
    data = te.placeholder((N, CI // ic, H, W, ic), name="data", dtype=dtype)
    kernel = te.placeholder((CO // oc, CI // ic, KH, KW, ic, oc), name="kernel", dtype=dtype)
    out, data_pad = conv2d_NCHWc(data, kernel, (stride, stride), (padding,) * 4)
    s = te.create_schedule(out.op)
    schedule_blocked(s, data_pad, out, out, stride, reg_n, ic_outer, k_unroll)
    return s, [data, kernel, out]
