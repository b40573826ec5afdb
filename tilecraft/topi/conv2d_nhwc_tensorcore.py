"""conv2d NHWC on tensor cores as an implicit GEMM (``mma.sync``, float16 or bfloat16 operands,
float32 accumulation), on ``matmul_tensorcore``'s machinery (``topi/tensorcore.py``: ``block_axes``,
``schedule_mainloop``, the store intrinsic), and its tuning template
``topi/conv2d_nhwc_tensorcore.cuda``.

The convolution of ``X`` (N, H, W, C) with ``Wt`` (K, R, S, C) (KRSC: torch's ``channels_last``
weight, permuted) is the GEMM ``Y[m, k] = sum_{rs, c} A[rs, m, c] · B[rs, k, c]`` with
``m = (n·OH + oh)·OW + ow`` (M = N·OH·OW rows), ``k`` the output channel (GEMM N = K) and the
reduction over the R·S filter taps times the C input channels (GEMM K = R·S·C):

* ``A[rs, m, c] = X[n, oh·stride + r - pad, ow·stride + s - pad, c]``, 0 outside the image: the
  gather, inlined into the shared-memory fetch. Its 8 float16 elements of 16 bytes lie along
  ``c`` (contiguous in NHWC) and share one border condition, so the fetch is ``cp.async`` copies
  of 16 bytes, ``tc_cp_async_zfill`` (src-size 0: zeros) where the tap falls into the padding;
* ``B[rs, k, c] = Wt[k, r, s, c]``: the weights, B stored (N, K) per tap (``layout_b="col_major"``);
* ``Y`` (N·OH·OW, K): the NHWC output, flattened (``y.view(N, OH, OW, K)``), float16 or
  bfloat16 (rounded once at the store) or float32.

The reduction walks the taps outermost and ``C`` in steps of ``16·chunk`` inside each (one loop
of R·S·C / (16·chunk) steps through the ``stages`` ring), so a step never straddles two taps:
C must be a multiple of the step (16·chunk), else the schedule refuses it, naming C.

>>> s, (X, Wt, Y) = conv2d_nhwc_tensorcore(32, 56, 56, 64, 64, 3, 3, stride=1, padding=1,
...                                        block=(2, 2), warp=(4, 4), chunk=2, stages=3)
>>> mod = tilecraft.build(s, [X, Wt, Y], target="cuda")
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft import te
from tilecraft.topi.tensorcore import (TILE, _kind, accumulator_stage, block_axes, cast_output, schedule_mainloop,
                                       store_matrix)
from tilecraft.topi.tensorcore_template import SHARED_LIMIT, shared_bytes

TEMPLATE = "topi/conv2d_nhwc_tensorcore.cuda"


def out_size(H, W, R, S, stride, padding):
    """``(OH, OW)`` of a convolution (``(H + 2·padding - R) // stride + 1``, likewise W).

    >>> out_size(56, 56, 3, 3, 2, 1)
    (28, 28)
    """
    return (H + 2 * padding - R) // stride + 1, (W + 2 * padding - S) // stride + 1


def conv2d_nhwc_gemm(X, Wt, stride: int, padding: int, acc: str = "float32"):
    """The implicit GEMM of a NHWC convolution: ``(A, B, Yacc)``, ``A`` (R·S, N·OH·OW, C) the
    gathered input (zero-padded), ``B`` (R·S, K, C) the weights per tap, ``Yacc`` (N·OH·OW, K)
    their product accumulated in ``acc`` over the taps and channels. ``A`` and ``B`` are views to
    be inlined into the fetches that read them.

    >>> X = te.placeholder((2, 8, 8, 32), "float16", name="X"); Wt = te.placeholder((32, 3, 3, 32), "float16", name="W")
    >>> A, B, Y = conv2d_nhwc_gemm(X, Wt, stride=1, padding=1)      # Y: (128, 32)
    """
    N, H, W, C = (int(x.value) for x in X.shape)
    K, R, S, C2 = (int(x.value) for x in Wt.shape)
    if C2 != C:
        raise ValueError(f"conv2d NHWC: the input {X.op.name} has C={C} channels but the weights {Wt.op.name} "
                         f"(K, R, S, C) have {C2}")
    OH, OW = out_size(H, W, R, S, stride, padding)
    if OH < 1 or OW < 1:
        raise ValueError(f"conv2d NHWC: a {R}x{S} filter with stride {stride} and padding {padding} leaves no "
                         f"output of the {H}x{W} input")

    def gather(rs, m, c):
        n, oh, ow = m // (OH * OW), m // OW % OH, m % OW
        h, w = oh * stride + rs // S - padding, ow * stride + rs % S - padding
        inside = te.all(h >= 0, h < H, w >= 0, w < W) if padding else None
        v = X[n, h, w, c]
        return v if inside is None else te.if_then_else(inside, v, te.const(0, X.dtype))
    A = te.compute((R * S, N * OH * OW, C), gather, name="A_gather")
    B = te.compute((R * S, K, C), lambda rs, k, c: Wt[k, rs // S, rs % S, c], name="B_taps")
    rs = te.reduce_axis((0, R * S), name="rs")
    c = te.reduce_axis((0, C), name="c")
    Y = te.compute((N * OH * OW, K), lambda m, k: te.sum(A[rs, m, c].astype(acc) * B[rs, k, c].astype(acc),
                                                         axis=[rs, c]), name="Y")
    return A, B, Y


def conv2d_nhwc_tensorcore(N, H, W, C, K, R, S, stride=1, padding=0, dtype="float16", out_dtype="float16",
                           block=(2, 2), warp=(2, 2), chunk=2, stages=3, raster=0, min_blocks=0, pad=None,
                           unroll=True):
    """conv2d of ``X`` (N, H, W, C) with ``Wt`` (K, R, S, C), both ``dtype`` (float16 or bfloat16),
    on tensor cores (the implicit GEMM of the module docstring): returns ``s, (X, Wt, Y)`` with
    ``Y`` (N·OH·OW, K) of ``out_dtype``
    (float16, bfloat16 or float32, rounded once at the store; accumulation in float32). The GEMM options are ``matmul_tensorcore``'s:
    ``block`` warps of ``warp`` 16 x 16 tiles each (a block computes ``16·block[0]·warp[0]``
    output pixels × ``16·block[1]·warp[1]`` output channels), ``16·chunk``-deep steps through a
    ring of ``stages`` cp.async buffers (0: one synchronous tile), ``raster``, ``min_blocks``.
    N·OH·OW and K must be multiples of the block tile, C of the step.

    >>> s, (X, Wt, Y) = conv2d_nhwc_tensorcore(32, 14, 14, 256, 256, 3, 3, padding=1, block=(2, 2), warp=(2, 4))
    """
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"conv2d_nhwc_tensorcore takes float16 or bfloat16 input and weights, got {dtype!r}")
    if out_dtype not in ("float16", "bfloat16", "float32"):
        raise ValueError(f"conv2d_nhwc_tensorcore writes float16, bfloat16 or float32, "
                         f"got out_dtype={out_dtype!r}")
    kd, acc = _kind(dtype, "mma")
    step = kd * chunk
    if C % step:
        raise ValueError(f"conv2d_nhwc_tensorcore: C={C} input channels is not a multiple of the reduction "
                         f"step's {step} ({kd} x chunk={chunk}): a step must not straddle two filter taps; "
                         f"choose a chunk with 16·chunk dividing C (or pad the channels)")
    OH, OW = out_size(H, W, R, S, stride, padding)
    for what, size, axis in ((f"N·OH·OW={N * OH * OW} output pixels ({N}x{OH}x{OW})", N * OH * OW, 0),
                             (f"K={K} output channels", K, 1)):
        tile = TILE * block[axis] * warp[axis]
        if size % tile:
            raise ValueError(f"conv2d_nhwc_tensorcore: {what} is not a multiple of the block tile's {tile} "
                             f"(16 x block[{axis}]={block[axis]} x warp[{axis}]={warp[axis]})")
    X = te.placeholder((N, H, W, C), name="X", dtype=dtype)
    Wt = te.placeholder((K, R, S, C), name="W", dtype=dtype)
    A, B, Yacc = conv2d_nhwc_gemm(X, Wt, stride, padding, acc)
    Y = cast_output(Yacc, out_dtype)
    s = te.create_schedule(Y.op)
    CF = accumulator_stage(s, Yacc, Y, "mma")
    _, ii, jj = block_axes(s, Y, block, warp, raster, min_blocks)
    schedule_mainloop(s, A, B, CF, Y, ii, jj, store_matrix("mma", acc=acc, out=out_dtype), impl="mma",
                      layout_b="col_major", block=block, warp=warp, chunk=chunk, pad=pad, double_buffer=False,
                      unroll=unroll, stages=stages, prefetch=False, dtype=dtype)
    s[A].compute_inline()
    s[B].compute_inline()
    return s, (X, Wt, Y)


# -- the tuning template --------------------------------------------------------------------------

def conv_fits(M, K, C, R, S, block, warp, chunk, stages, raster=0) -> bool:
    """Whether a configuration tiles the implicit GEMM (M = N·OH·OW rows, K output channels, C
    input channels per tap) and fits an sm_90 block: tiles dividing M and K, steps dividing C,
    whole 16-byte fetches by every thread, ``stages`` no more than the steps, shared memory
    within 227 KiB, at most 16 accumulator tiles per warp.

    >>> conv_fits(32 * 56 * 56, 64, 64, 3, 3, (2, 2), (4, 2), 2, 3)
    True
    """
    bm, bn = (TILE * b * w for b, w in zip(block, warp))
    threads = 32 * block[0] * block[1]
    depth = 16 * chunk
    steps = R * S * C // depth
    whole_fetch = all(rows * depth % (8 * threads) == 0 for rows in (bm, bn))
    return (M % bm == 0 and K % bn == 0 and C % depth == 0 and threads <= 1024 and warp[0] * warp[1] <= 16
            and (raster == 0 or (M // bm) % raster == 0) and whole_fetch and (stages == 0 or steps >= stages)
            and shared_bytes("float16", "col_major", block, warp, chunk, stages) <= SHARED_LIMIT)   # bf16: same size


# untuned: the first of these (largest first) that fits and gives the GPU at least MIN_BLOCKS blocks
# (one per multiprocessor of an H100); if none does, the one with the most blocks. On an H100 at
# ResNet-50's six batch-32 layers this picks the fastest variant measured at four, 5% and 15%
# (1x1 256->64 @56, where 64-deep steps win) behind it at the other two
# (bench/results/h100_2026-11-24_s21_tcconv: 128 x 64 at 14x14 is 196 blocks and 27% faster than
# 64 x 64, which an earlier bound of two blocks per multiprocessor chose)
MIN_BLOCKS = 132
FALLBACKS = [dict(block=(2, 2), warp=(4, 4), chunk=2, stages=3, raster=0, min_blocks=2),
             dict(block=(2, 2), warp=(4, 2), chunk=2, stages=3, raster=0, min_blocks=2),
             dict(block=(2, 2), warp=(2, 2), chunk=2, stages=3, raster=0, min_blocks=0),
             dict(block=(2, 2), warp=(2, 2), chunk=1, stages=2, raster=0, min_blocks=0),
             dict(block=(1, 1), warp=(1, 1), chunk=1, stages=0, raster=0, min_blocks=0)]
KNOBS = ("block", "warp", "chunk", "stages", "raster", "min_blocks")


def fallback(M: int, K: int, ok) -> dict:
    """The untuned configuration of a layer with M = N·OH·OW output pixels and K output channels:
    the first of ``FALLBACKS`` that ``ok`` accepts and that gives at least ``MIN_BLOCKS`` blocks,
    else the accepted one with the most blocks (a late ResNet layer, 6272 x 256 at batch 32, has
    98 blocks of 128 x 128: too few for 132 multiprocessors; it gets 196 of 128 x 64).

    >>> fallback(32 * 14 * 14, 256, lambda o: True)["warp"]
    (4, 2)
    """
    def blocks(o):
        return (M // (TILE * o["block"][0] * o["warp"][0])) * (K // (TILE * o["block"][1] * o["warp"][1]))
    fitting = [o for o in FALLBACKS if ok(o)]
    return next((o for o in fitting if blocks(o) >= MIN_BLOCKS), None) or max(fitting, key=blocks)


def check_conv_shape(N, H, W, C, K, R, S, stride, padding):
    """Refuse a layer no configuration tiles, naming what to change: N·OH·OW and K multiples of
    16, C of 16 (the float16 mma depth).

    >>> check_conv_shape(32, 56, 56, 3, 64, 7, 7, 2, 3)
    Traceback (most recent call last):
    ValueError: topi/conv2d_nhwc_tensorcore.cuda: C=3 input channels is not a multiple of 16 ...
    """
    OH, OW = out_size(H, W, R, S, stride, padding)
    for name, size, what in (("N·OH·OW", N * OH * OW, "output pixels"), ("K", K, "output channels"),
                             ("C", C, "input channels")):
        if size % TILE:
            raise ValueError(f"{TEMPLATE}: {name}={size} {what} is not a multiple of 16 (the tensor-core tile); "
                             f"no configuration tiles it: pad the {what} to a multiple of 16")


@autotune.template(TEMPLATE)
def conv2d_nhwc_tensorcore_cuda(N: int, H: int, W: int, C: int, K: int, R: int, S: int, stride: int = 1,
                                padding: int = 0, out_dtype: str = "float16", dtype: str = "float16"):
    """conv2d NHWC (float16 or bfloat16 operands, float32 accumulation) as an implicit GEMM on tensor cores
    (``conv2d_nhwc_tensorcore``), its GEMM options as knobs: ``block``, ``warp``, ``chunk``
    (k-chunk: 16-deep mma steps per shared tile), ``stages`` (the cp.async ring, 0: synchronous),
    ``raster``, ``min_blocks``; ``conv_fits`` filters them. On sm_90 with C a multiple of 64 a
    ``wgmma`` knob: None (those knobs) or ``(bm, bn, stages, lag)`` of the wgmma conv
    (``topi/conv2d_nhwc_wgmma.py``), which is then the fallback (``wgmma_conv_fallback``).

    >>> task = autotune.task.create("topi/conv2d_nhwc_tensorcore.cuda", args=(32, 56, 56, 64, 64, 3, 3, 1, 1,
    ...                                                                        "float16"), target="cuda")
    """
    check_conv_shape(N, H, W, C, K, R, S, stride, padding)
    OH, OW = out_size(H, W, R, S, stride, padding)
    M = N * OH * OW
    cfg = autotune.get_config()
    cfg.define_knob("block", [(2, 2), (2, 4), (4, 2), (1, 2), (2, 1), (1, 1), (4, 1)])
    cfg.define_knob("warp", [(4, 4), (4, 2), (2, 4), (2, 2), (4, 1), (1, 1)])
    cfg.define_knob("chunk", [2, 4, 1])
    cfg.define_knob("stages", [3, 4, 2, 0])
    cfg.define_knob("raster", [0, 8, 4])
    cfg.define_knob("min_blocks", [0, 1, 2])
    from tilecraft.topi.tensorcore_template import wgmma_target
    wg = C % 64 == 0 and wgmma_target()           # sm_90a: the wgmma conv (topi/conv2d_nhwc_wgmma.py)
    if wg:
        cfg.define_knob("wgmma", WGMMA_CONV_CHOICES)

    def ok(o):
        if o.get("wgmma") is not None:
            return (all(o[k] == v for k, v in _MMA_FIRST.items())
                    and wgmma_conv_fits((N, H, W, C, K, R, S, stride, padding), dtype, o["wgmma"], o["raster"]))
        return conv_fits(M, K, C, R, S, o["block"], o["warp"], o["chunk"], o["stages"], o["raster"])

    knobs = KNOBS + (("wgmma",) if wg else ())
    cfg.multi_filter(lambda e: ok({k: e[k].val for k in knobs}))
    cfg.add_flop(2.0 * M * K * C * R * S)
    opts = None if cfg.is_fallback else {k: cfg[k].val for k in knobs}
    if opts is not None and not ok(opts):
        # only while the space is collected (multi_filter keeps such configs out): flagged, and the
        # schedule built is the fallback's, as block_axes refuses tiles that do not divide
        cfg.raise_error("the tiles do not divide the layer or the block does not fit the GPU")
        opts = None
    if opts is None and wg:
        choice = wgmma_conv_fallback((N, H, W, C, K, R, S, stride, padding), dtype)
        opts = None if choice is None else dict(_MMA_FIRST, raster=0, wgmma=choice)
    opts = opts or fallback(M, K, ok)
    if opts.get("wgmma") is not None:
        from tilecraft.topi.conv2d_nhwc_wgmma import conv2d_nhwc_wgmma_te
        bm, bn, stages, lag = opts["wgmma"]
        return conv2d_nhwc_wgmma_te(N, H, W, C, K, R, S, stride, padding, dtype, out_dtype, block=(bm, bn),
                                    stages=stages, lag=lag, raster=opts["raster"])
    opts.pop("wgmma", None)
    return conv2d_nhwc_tensorcore(N, H, W, C, K, R, S, stride=stride, padding=padding, dtype=dtype,
                                  out_dtype=out_dtype, **opts)


# sm_90a: (bm, bn, stages, lag) of the wgmma conv the `wgmma` knob offers (None: mma.sync, the
# knobs above); with a wgmma value the mma.sync knobs stay at their first values (no duplicates)
WGMMA_CONV_CHOICES = [None, (128, 64, 4, 1), (128, 128, 4, 1), (128, 256, 4, 2), (256, 64, 4, 1), (128, 128, 5, 2),
                      (128, 256, 3, 1), (256, 128, 4, 1), (128, 64, 6, 2)]
_MMA_FIRST = dict(block=(2, 2), warp=(4, 4), chunk=2, stages=3, min_blocks=0)
# untuned on sm_90a: the first that fits. On an H100 (session 22's mid run, GPU shared: indicative;
# bench/results/h100_2026-11-25_s22_tcconv2/) this is the fastest variant measured at five of
# ResNet-50's six batch-32 layers and 0.4% behind at the sixth; 128 x 256 blocks and a lag of 2
# were slower everywhere, and so were smaller tiles that give more blocks (98 blocks of 256 x 128
# beat 196 of 128 x 128 at 28 x 28 by 9%)
WGMMA_CONV_FALLBACKS = [(256, 128, 4, 1), (128, 128, 4, 1), (256, 64, 4, 1), (128, 64, 4, 1), (64, 64, 4, 1)]


def wgmma_conv_fits(shape, dtype, choice, raster=0) -> bool:
    """Whether a wgmma conv configuration ``(bm, bn, stages, lag)`` runs the layer ``shape`` =
    (N, H, W, C, K, R, S, stride, padding): ``check_conv_wgmma``'s rules, and ``raster`` dividing
    the row blocks.

    >>> wgmma_conv_fits((32, 14, 14, 256, 256, 3, 3, 1, 1), "float16", (128, 128, 4, 1))
    True
    """
    from tilecraft.topi.conv2d_nhwc_wgmma import check_conv_wgmma
    N, H, W, C, K, R, S, stride, padding = shape
    bm, bn, stages, lag = choice
    try:
        check_conv_wgmma(N, H, W, C, K, R, S, stride, padding, dtype, "float32", (bm, bn), stages, lag)
    except ValueError:
        return False
    OH, OW = out_size(H, W, R, S, stride, padding)
    return raster == 0 or (N * OH * OW // bm) % raster == 0


def wgmma_conv_fallback(shape, dtype):
    """The untuned wgmma configuration of a layer: the first of ``WGMMA_CONV_FALLBACKS`` that fits
    (None if none does).

    >>> wgmma_conv_fallback((32, 14, 14, 256, 256, 3, 3, 1, 1), "float16")
    (128, 128, 4, 1)
    """
    return next((c for c in WGMMA_CONV_FALLBACKS if wgmma_conv_fits(shape, dtype, c)), None)
