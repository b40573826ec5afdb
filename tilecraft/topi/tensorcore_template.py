"""The tensor-core GEMM as a tuning template: ``topi/matmul_tensorcore.cuda``.

``matmul_tensorcore`` (``topi/tensorcore.py``, the ``mma.sync`` path) with its performance options
as knobs; what the GEMM computes (operand dtype, C's dtype, how B is stored) are the template's
arguments, so every configuration of a task computes the same function.

    tilecraft tune matmul_tensorcore 4096 4096 4096 float16 float16 row_major --target cuda --trials 64

    from tilecraft import autotune
    import tilecraft.topi.tensorcore_template
    task = autotune.task.create("topi/matmul_tensorcore.cuda", args=(4096, 4096, 4096, "float16", "float16",
                                                                     "row_major"), target="cuda")

Knobs: ``block`` (warps of a block along M and N), ``warp`` (16 x 16 tiles of a warp along M
and N), ``chunk`` (tensor-core k steps per shared tile), ``stages`` (0: one synchronous shared
tile, else a ``cp.async`` ring of that many), ``raster`` (block rows per group of the block
numbering, 0: a 2-D grid), ``min_blocks`` (``__launch_bounds__`` blocks per multiprocessor, 0:
none), ``fragment_prefetch`` (1: the next step's first k slice loaded during this step's last,
``matmul_tensorcore``'s option; only with a pipeline and two or more slices a step).
Configurations whose tiles do not divide the problem, that need more than 227 KiB of
shared memory, more than 1024 threads or more than 16 accumulator tiles per warp are filtered out.
The fallback (nothing tuned) is the best measured wgmma configuration where the ``wgmma`` knob
exists (``wgmma_fallback``: 128 x 256 blocks, smaller ones where that makes fewer than 128 blocks),
else session 23's best 4096³ mma.sync schedule where it fits (``mma_fallback``), else run 6's, else the
smallest.

With B stored (N, K) (``col_major``), float16 or float32 operands and an sm_90 target, the knob
``wgmma`` picks sm_90a's ``wgmma`` GEMM instead (``topi/tensorcore_wgmma.py``): ``None`` is the
mma.sync schedule of the knobs above, else a ``(bm, bn, stages, lag)`` of ``matmul_wgmma`` (cp.async
loads) or ``(bm, bn, stages, lag, "tma" | "tma_r")`` (TMA loads; ``_r``: setmaxnreg), ``wgmma_options``
(with ``raster``; the mma.sync knobs are then held at their first values, so each appears once).
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft.ir import dtype as dt
from tilecraft.topi.tensorcore import KINDS, TILE, matmul_tensorcore

SHARED_LIMIT = 227 * 1024          # sm_90's shared memory per block (dynamic)
# session 23 (H100, 4096^3 fp16, shared GPU): 128 x 256 blocks of 8 warps, 64 x 64 warp tiles, 32-deep steps in 4
# stages with fragment_prefetch, 411 TFLOP/s (bf16 alike; for tf32 the prefetch measured slower, so it is off there);
# then run 6's 256 x 128, 64-deep, 3 stages (323 TFLOP/s)
FALLBACKS = [dict(block=(2, 4), warp=(4, 4), chunk=2, stages=4, raster=8, min_blocks=1, fragment_prefetch=True),
             dict(block=(4, 2), warp=(4, 4), chunk=4, stages=3, raster=8, min_blocks=1),
             dict(block=(1, 1), warp=(1, 1), chunk=1, stages=0, raster=0, min_blocks=0)]


def mma_fallback(M, N, K, dtype, layout_b):
    """The mma.sync configuration used when nothing is tuned (and no wgmma fallback applies): the
    first of ``FALLBACKS`` that fits (as it is, else without rasterization), without
    ``fragment_prefetch`` for float32 (tf32) operands.
    ``mma_fallback(4096, 4096, 4096, "float16", "row_major")["block"] == (2, 4)``."""
    for f in FALLBACKS:
        f = dict(f, fragment_prefetch=f.get("fragment_prefetch", False) and dtype != "float32")
        for g in (f, dict(f, raster=0)):
            if fits(M, N, K, dtype, layout_b, g["block"], g["warp"], g["chunk"], g["stages"], g["raster"],
                    g["fragment_prefetch"]):
                return g
    return dict(FALLBACKS[-1], fragment_prefetch=False)


def shared_bytes(dtype: str, layout_b: str, block, warp, chunk: int, stages: int) -> int:
    """Bytes of shared memory the schedule allocates: the A and B tiles (rows padded by 16
    bytes), times the ring's stages (one copy without a pipeline)."""
    kd = KINDS[dtype][0]
    size = dt.bits(dtype) // 8
    pad = 16 // size
    bm, bn = (TILE * b * w for b, w in zip(block, warp))
    depth = kd * chunk
    a = bm * (depth + pad)
    b = bn * (depth + pad) if layout_b == "col_major" else depth * (bn + pad)
    return (a + b) * size * max(stages, 1)


def fits(M, N, K, dtype, layout_b, block, warp, chunk, stages, raster=0, fragment_prefetch=False) -> bool:
    """Whether a configuration's tiles divide the problem (and its groups of ``raster`` block
    rows the block rows) and its block fits the GPU (and ``fragment_prefetch`` has a pipeline of
    two or more k slices a step to work on)."""
    kd = KINDS[dtype][0]
    bm, bn = (TILE * b * w for b, w in zip(block, warp))
    threads = 32 * block[0] * block[1]
    vec = 16 // (dt.bits(dtype) // 8)
    depth = kd * chunk
    whole_fetch = all(rows * depth % (vec * threads) == 0 for rows in (bm, bn))
    return (M % bm == 0 and N % bn == 0 and K % depth == 0 and threads <= 1024 and warp[0] * warp[1] <= 16
            and (raster == 0 or (M // bm) % raster == 0)
            and (not fragment_prefetch or (stages > 0 and chunk >= 2))
            and whole_fetch and (stages == 0 or K // depth >= stages)
            and shared_bytes(dtype, layout_b, block, warp, chunk, stages) <= SHARED_LIMIT)


# (bm, bn, stages, lag) of matmul_wgmma the `wgmma` knob offers (None: mma.sync), cp.async loads; then
# (bm, bn, stages, lag, load) with load "tma", "tma_r" (TMA with setmaxnreg) or "tma_p" (TMA, a persistent
# grid of up to PERSISTENT_SMS blocks): wgmma_options reads them
WGMMA_CHOICES = [None, (128, 256, 4, 2), (128, 256, 4, 1), (256, 128, 4, 2), (256, 128, 4, 1), (128, 128, 6, 3),
                 (128, 128, 5, 2), (128, 256, 3, 1), (64, 256, 4, 2),
                 (128, 256, 4, 1, "tma"), (128, 256, 4, 1, "tma_r"), (256, 128, 4, 1, "tma_r"), (128, 256, 3, 1, "tma_r"),
                 (128, 128, 6, 1, "tma"), (64, 256, 4, 1, "tma"), (128, 256, 4, 1, "tma_p"), (256, 128, 4, 1, "tma_p"),
                 (128, 128, 6, 1, "tma_p")]
PERSISTENT_SMS = 132               # the persistent grid's bound: an H100's (and H200's) multiprocessors
LOADS = ("cp.async", "tma", "tma_r", "tma_p")    # the load knob's values: cp.async, TMA, + setmaxnreg, + persistent


def wgmma_options(choice) -> dict:
    """``matmul_wgmma``'s keyword arguments of a ``wgmma`` knob value:
    ``wgmma_options((128, 256, 4, 1, "tma_r")) == dict(block=(128, 256), stages=4, lag=1, load="tma", maxnreg=1,
    persistent=0)``."""
    bm, bn, stages, lag, *load = choice
    return dict(block=(bm, bn), stages=stages, lag=lag, **load_options(load[0] if load else "cp.async"))


def load_options(load: str) -> dict:
    """``matmul_wgmma``'s ``load``, ``maxnreg``, ``persistent`` of a ``load`` knob value (``LOADS``):
    ``load_options("tma_p") == dict(load="tma", maxnreg=0, persistent=PERSISTENT_SMS)``."""
    if load not in LOADS:
        raise ValueError(f"load {load!r}: one of {', '.join(LOADS)}")
    return dict(load="tma" if load.startswith("tma") else load, maxnreg=int(load == "tma_r"),
                persistent=PERSISTENT_SMS if load == "tma_p" else 0)


_MMA_FIRST = dict(block=(2, 2), warp=(4, 4), chunk=2, stages=3, min_blocks=0,   # each knob's first value
                  fragment_prefetch=0)


def wgmma_target() -> bool:
    """Whether the current target runs sm_90a's wgmma: a CUDA target of arch sm_90 (or none given,
    as ``build`` then picks sm_90)."""
    import tilecraft as tc
    from tilecraft.codegen.cuda_compile import DEFAULT_ARCH
    t = tc.target.Target.current()
    arch = (t.attrs.get("arch") if t is not None and hasattr(t, "attrs") else None) or DEFAULT_ARCH
    return t is not None and str(t.kind) == "cuda" and arch.removesuffix("a") == "sm_90"


@autotune.template("topi/matmul_tensorcore.cuda")
def matmul_tensorcore_cuda(M: int, N: int, K: int, dtype: str = "float16", out_dtype: str = "float32",
                           layout_b: str = "row_major"):
    """``C = A @ B`` (``B`` stored (K, N), or (N, K) with ``layout_b="col_major"``) on tensor cores
    through ``mma.sync``, the schedule's options as knobs (see the module docstring).

    >>> task = autotune.task.create("topi/matmul_tensorcore.cuda", args=(1024, 1024, 1024, "int8", "int32",
    ...                                                                 "col_major"), target="cuda")
    """
    cfg = autotune.get_config()
    cfg.define_knob("block", [(2, 2), (2, 4), (4, 2), (1, 1), (1, 2), (2, 1)])
    cfg.define_knob("warp", [(4, 4), (4, 2), (2, 4), (2, 2), (1, 1)])
    cfg.define_knob("chunk", [2, 4, 1])
    cfg.define_knob("stages", [3, 4, 2, 0])
    cfg.define_knob("raster", [0, 8, 4])
    cfg.define_knob("min_blocks", [0, 1, 2])
    cfg.define_knob("fragment_prefetch", [0, 1])
    from tilecraft.codegen.cuda_wgmma import WGMMA_KINDS
    wg = layout_b == "col_major" and dtype in WGMMA_KINDS and wgmma_target()
    if wg:
        cfg.define_knob("wgmma", WGMMA_CHOICES)

    def ok(e):
        if wg and e["wgmma"].val is not None:
            return (all(e[k].val == v for k, v in _MMA_FIRST.items())
                    and wgmma_fits(M, N, K, dtype, raster=e["raster"].val, **wgmma_options(e["wgmma"].val)))
        return fits(M, N, K, dtype, layout_b, e["block"].val, e["warp"].val, e["chunk"].val, e["stages"].val,
                    e["raster"].val, e["fragment_prefetch"].val)

    cfg.multi_filter(ok)
    cfg.add_flop(2.0 * M * N * K)
    common = dict(impl="mma", dtype=dtype, out_dtype=out_dtype, layout_b=layout_b, double_buffer=False)
    if not cfg.is_fallback and not ok(cfg):
        # (only reachable while the space is collected: multi_filter keeps such configs out); the
        # schedule returned is the fallback's, as matmul_tensorcore refuses tiles that do not divide
        cfg.raise_error("the tiles do not divide the problem or the block does not fit the GPU")
    if cfg.is_fallback or not ok(cfg):
        if wg and wgmma_fallback(M, N, K, dtype) is not None:     # sm_90: wgmma, 1.5x the mma.sync fallback
            from tilecraft.topi.tensorcore_wgmma import matmul_wgmma
            fb = wgmma_fallback(M, N, K, dtype)
            if cfg.is_fallback:
                _record_wgmma_fallback(cfg, fb)
            return matmul_wgmma(M, N, K, dtype=dtype, out_dtype=out_dtype, **fb)
        return matmul_tensorcore(M, N, K, **common, **mma_fallback(M, N, K, dtype, layout_b))
    if wg and cfg["wgmma"].val is not None:
        from tilecraft.topi.tensorcore_wgmma import matmul_wgmma
        return matmul_wgmma(M, N, K, dtype=dtype, out_dtype=out_dtype, raster=cfg["raster"].val,
                            **wgmma_options(cfg["wgmma"].val))
    return matmul_tensorcore(M, N, K, **common, block=cfg["block"].val, warp=cfg["warp"].val,
                             chunk=cfg["chunk"].val, stages=cfg["stages"].val, raster=cfg["raster"].val,
                             min_blocks=cfg["min_blocks"].val, fragment_prefetch=bool(cfg["fragment_prefetch"].val))


def _record_wgmma_fallback(cfg, fb: dict) -> None:
    """Set the fallback configuration's ``wgmma`` and ``raster`` knobs to the wgmma fallback ``fb``
    where the space offers it, so the fallback is a point of the space: ``tune_tasks`` measures it
    first (``model_tuning.fallback_config``), and a tuning run can no longer end slower than the
    untuned template (an H100 run of 256 trials: the space's best measured 395 TFLOP/s at 4096³,
    the fallback 724)."""
    from tilecraft.autotune.space import OtherOptionEntity
    choice = fb["block"] + (fb["stages"], fb["lag"]) + ((fb["load"],) if fb.get("load", "cp.async") != "cp.async" else ())
    if choice in WGMMA_CHOICES and fb["raster"] in [e.val for e in cfg.space_map["raster"].entities]:
        cfg["wgmma"] = OtherOptionEntity(choice)
        cfg["raster"] = OtherOptionEntity(fb["raster"])


# sm_90a wgmma (topi/tensorcore_wgmma.py): block tile, stages, producer lag, rasterization, loads, best first (H100,
# session 23, fp16 4096^3: 128 x 256 with TMA loads 730 TFLOP/s = 0.96x cuBLAS, with cp.async 532; session 21: at
# 1024^3, where 128 x 256 makes 32 blocks, 64 x 128 161, 128 x 128 131)
WGMMA_FALLBACKS = [dict(block=(128, 256), stages=4, lag=1, raster=8, load="tma"),
                   dict(block=(128, 256), stages=4, lag=1, raster=8), dict(block=(128, 128), stages=6, lag=3, raster=8),
                   dict(block=(64, 128), stages=6, lag=3, raster=0), dict(block=(64, 64), stages=3, lag=1, raster=0)]
FALLBACK_MIN_BLOCKS = 128          # about one block per multiprocessor (132 on an H100): a smaller grid idles SMs


def wgmma_fallback(M, N, K, dtype):
    """The wgmma configuration used when nothing is tuned: the first of ``WGMMA_FALLBACKS`` that fits
    and makes at least ``FALLBACK_MIN_BLOCKS`` blocks, else the fitting one with the most blocks
    (None if none fits). ``wgmma_fallback(4096, 4096, 4096, "float16")["block"] == (128, 256)``."""
    fit = [f for f in WGMMA_FALLBACKS if wgmma_fits(M, N, K, dtype, **f)]
    if not fit:
        return None
    blocks = [(M // f["block"][0]) * (N // f["block"][1]) for f in fit]
    return next((f for f, b in zip(fit, blocks) if b >= FALLBACK_MIN_BLOCKS), fit[blocks.index(max(blocks))])


def wgmma_fits(M, N, K, dtype, block, stages, raster=0, lag=1, load="cp.async", maxnreg=0, persistent=0) -> bool:
    """Whether a wgmma configuration tiles the problem and fits a block (``check_config``'s rules)."""
    from tilecraft.topi.tensorcore_wgmma import check_config
    bm, bn = block
    if persistent and (load != "tma" or maxnreg):
        return False
    try:
        check_config(bm, bn, K, dtype, stages, lag, load, maxnreg)
    except ValueError:
        return False
    return M % bm == 0 and N % bn == 0 and (raster == 0 or (M // bm) % raster == 0)


@autotune.template("topi/matmul_wgmma.cuda")
def matmul_wgmma_cuda(M: int, N: int, K: int, dtype: str = "float16", out_dtype: str = "float16"):
    """``C = A @ B.T`` (A (M, K), B (N, K)) on sm_90a's ``wgmma`` (``topi/tensorcore_wgmma.py``), knobs
    ``block`` (bm, bn), ``stages``, ``lag`` (steps of copies the producer keeps in flight), ``raster``,
    ``load`` ("cp.async", "tma", "tma_r": TMA with setmaxnreg, "tma_p": TMA on a persistent grid; with TMA
    ``lag`` stays at its first value, it has no use there); configurations that do not tile the problem or fit the shared memory are filtered out.

    >>> task = autotune.task.create("topi/matmul_wgmma.cuda", args=(4096, 4096, 4096, "float16", "float16"),
    ...                             target="cuda")
    """
    from tilecraft.topi.tensorcore_wgmma import matmul_wgmma
    cfg = autotune.get_config()
    cfg.define_knob("block", [(128, 256), (128, 128), (256, 128), (64, 256), (64, 128), (64, 64)])
    cfg.define_knob("stages", [4, 3, 5, 6])
    cfg.define_knob("raster", [8, 0, 4])
    cfg.define_knob("lag", [1, 2, 3])
    cfg.define_knob("load", list(LOADS))

    def knob_opts(e):
        return dict(block=e["block"].val, stages=e["stages"].val, raster=e["raster"].val, lag=e["lag"].val,
                    **load_options(e["load"].val))

    def ok(e):
        return (e["load"].val == "cp.async" or e["lag"].val == 1) and wgmma_fits(M, N, K, dtype, **knob_opts(e))

    cfg.multi_filter(ok)
    cfg.add_flop(2.0 * M * N * K)
    if not cfg.is_fallback and not ok(cfg):
        cfg.raise_error("the tiles do not divide the problem or the block does not fit the GPU")
    if cfg.is_fallback or not ok(cfg):
        opts = wgmma_fallback(M, N, K, dtype) or WGMMA_FALLBACKS[-1]
        return matmul_wgmma(M, N, K, dtype=dtype, out_dtype=out_dtype, **opts)
    return matmul_wgmma(M, N, K, dtype=dtype, out_dtype=out_dtype, **knob_opts(cfg))
