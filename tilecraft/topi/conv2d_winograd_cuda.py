"""Winograd convolution F(m×m, 3×3) for 3×3 stride-1 NCHW float32 on CUDA, and its tuning template.

    import tilecraft.topi
    from tilecraft.topi.conv2d_winograd_cuda import winograd_weight_transform
    task = autotune.task.create("topi/conv2d_nchw_winograd.cuda",
                                args=(32, 256, 14, 14, 256, 3, 3, 1, 1, "float32"), target="cuda")
    U = winograd_weight_transform(w)            # at build time: (alpha, alpha, CI, CO)
    mod(data, U, out)

The arguments are those of ``topi/conv2d_nchw.cuda`` (``N, CI, H, W, CO, KH, KW, stride, padding,
dtype``; 3×3, stride 1 only). As TVM's ``conv2d_nchw_winograd_without_weight_transform``, the
kernel takes the filter already transformed, ``U[eps, nu, ci, co] = (G w[co, ci] Gᵀ)[eps, nu]``
(:func:`winograd_weight_transform`, numpy, once per set of weights), so the three kernels are:

1. input transform: each thread takes one (input channel, tile of m×m outputs), loads the
   ``alpha × alpha`` input patch (``alpha = m + 2``, zero outside the image) into registers and
   writes ``V[eps, nu, ci, p] = (Bᵀ d B)[eps, nu]`` (rows, then columns: 2·alpha³ terms); ``p`` runs over the ``N · ⌈OH/m⌉ · ⌈OW/m⌉``
   tiles, rounded up to a multiple of the GEMM's block (the extra columns are zero);
2. a batched GEMM over the ``alpha²`` transform positions, ``M[eps, nu, co, p] = Σ_ci U[eps, nu, ci, co]
   · V[eps, nu, ci, p]``, scheduled like the SGEMM template (shared tiles of both operands, both
   already K-major, double-buffered; a register tile per thread split into virtual threads);
3. output transform: each thread takes one (output channel, tile), loads the ``alpha × alpha``
   values of ``M`` into registers and writes the ``m × m`` outputs ``(Aᵀ M A)`` (rows, then columns), clipped at the
   image's edge (tails where m does not divide the output), through the optional epilogue
   (bias, ReLU, ...: an expression of the value and its indices).

Each pass of a transform is a ``Select`` chain over a transform index whose branches are the
explicit sums (zero terms left out); the loops over those indices are unrolled, so lowering folds
each copy to its own sum.

Numerics: the products are those of fp32, but the transforms add and subtract values of the
size of the inputs, so the error grows with the tile: F(2×2) stays within a few ulps of a direct
fp32 convolution (relative error ~1e-6 against float64); F(4×4) has coefficients up to 8 and
1/24 and loses about one decimal digit (~1e-5). The tests hold them to 1e-5 and 1e-4.
"""
from __future__ import annotations

from fractions import Fraction as Fr

import tilecraft.autotune as autotune

TEMPLATE = "topi/conv2d_nchw_winograd.cuda"

# Lavin & Gray's matrices, from the interpolation points (0, 1, -1) and (0, 1, -1, 1/2, -2) plus infinity
_MATRICES = {
    2: dict(AT=[[1, 1, 1, 0], [0, 1, -1, -1]],
            G=[[1, 0, 0], [Fr(1, 2), Fr(1, 2), Fr(1, 2)], [Fr(1, 2), Fr(-1, 2), Fr(1, 2)], [0, 0, 1]],
            BT=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
    4: dict(AT=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
            G=[[Fr(1, 4), 0, 0], [Fr(-1, 6), Fr(-1, 6), Fr(-1, 6)], [Fr(-1, 6), Fr(1, 6), Fr(-1, 6)],
               [Fr(1, 24), Fr(1, 12), Fr(1, 6)], [Fr(1, 24), Fr(-1, 12), Fr(1, 6)], [0, 0, 1]],
            BT=[[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]),
}


def winograd_matrices(m: int = 2):
    """``(AT, G, BT)`` of F(m, 3) as float64 numpy arrays (m = 2 or 4): ``AT`` is m × alpha, ``G``
    alpha × 3, ``BT`` alpha × alpha, with ``y = AT [(G g) * (BT d)]`` the 1-D correlation of ``d``
    (alpha values) with ``g`` (3 taps).

        AT, G, BT = winograd_matrices(2)
    """
    import numpy as np
    if m not in _MATRICES:
        raise ValueError(f"Winograd tile m={m} is not supported: use 2 or 4")
    return tuple(np.array([[float(v) for v in row] for row in _MATRICES[m][k]]) for k in ("AT", "G", "BT"))


def winograd_weight_transform(w, m: int = 2):
    """The filter ``w`` (CO, CI, 3, 3) transformed for :func:`conv2d_nchw_winograd`:
    ``U[eps, nu, ci, co] = (G w[co, ci] Gᵀ)[eps, nu]``, computed in float64 and returned in
    ``w``'s dtype (done once at build time, as TVM's ``conv2d_winograd_weight_transform``).

        U = winograd_weight_transform(np.random.rand(64, 32, 3, 3).astype("float32"))   # (4, 4, 32, 64)
    """
    import numpy as np
    w = np.asarray(w)
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise ValueError(f"Winograd weight transform: the filter must be (CO, CI, 3, 3), got {w.shape}")
    _, G, _ = winograd_matrices(m)
    u = np.einsum("ak,oikl,bl->abio", G, w.astype("float64"), G)
    return np.ascontiguousarray(u.astype(w.dtype))


def _pick(i, values):
    """``values[i]`` for a symbolic index ``i``: a Select chain over its values, folded to the one
    chosen once ``i``'s loop is unrolled."""
    from tilecraft import te
    expr = values[-1]
    for r in range(len(values) - 2, -1, -1):
        expr = te.select(i == r, values[r], expr)
    return expr


def _combination(row, load):
    """``Σ_a row[a] · load(a)`` for a constant row, zero terms left out (``0 · x`` is not folded
    for floats: it is NaN for an infinite x) and ±1 as additions and subtractions."""
    from tilecraft import te
    expr = None
    for a, c in enumerate(row):
        c = Fr(c)
        if c == 0:
            continue
        x = load(a)
        if abs(c) != 1:
            x = te.const(float(abs(c)), "float32") * x
        expr = x if expr is None and c > 0 else (-x if expr is None else (expr + x if c > 0 else expr - x))
    return expr


def _apply_rows(mat, i, load):
    """``(mat · x)[i]`` with ``x[a] = load(a)``, for a symbolic row index ``i``."""
    return _pick(i, [_combination(row, load) for row in mat])


def winograd_tiles(N: int, OH: int, OW: int, m: int, block_p: int = 1):
    """``(nH, nW, P, P_pad)``: tiles per column and row, tiles in all, and P rounded up to a
    multiple of ``block_p`` (the GEMM's column block)."""
    nH, nW = -(-OH // m), -(-OW // m)
    P = N * nH * nW
    return nH, nW, P, -(-P // block_p) * block_p


def gemm_tiles_ok(CI, CO, block_co, block_p, vthreads, threads, k_tile, double_buffer=True) -> bool:
    """Whether the batched GEMM's tiles fit: ``block_co`` divides CO, ``k_tile`` divides CI, each
    virtual thread owns at least a row and a column, the fetches split evenly over the threads,
    at most 64 accumulators a thread, the shared tiles within 48 KB."""
    vy, vx = vthreads
    ty, tx = threads
    if CO % block_co or CI % k_tile or block_co % (vy * ty) or block_p % (vx * tx):
        return False
    nthreads = ty * tx
    if not 32 <= nthreads <= 1024:
        return False
    if (block_co * k_tile) % (nthreads * 4) or (block_p * k_tile) % (nthreads * 4):
        return False
    if block_co * block_p // nthreads > 64:
        return False
    return (block_co + block_p) * k_tile * 4 * (2 if double_buffer else 1) <= 48 * 1024


def conv2d_nchw_winograd(N, CI, H, W, CO, padding=1, dtype="float32", m=2, block_co=64, block_p=64,
                         vthreads=(2, 2), threads=(8, 8), k_tile=8, double_buffer=True, transform_threads=128,
                         epilogue=None, epilogue_args=()):
    """Winograd F(m×m, 3×3) convolution, stride 1, NCHW: ``Out = conv2d(Data, w)`` given
    ``U = winograd_weight_transform(w, m)``. Returns ``(schedule, [Data, U, *epilogue_args, Out])``.

    ``epilogue(value, n, co, y, x)`` (optional) rewrites each output value in the output
    transform's kernel, reading the placeholders ``epilogue_args`` (bias, batch-norm shift,
    ReLU, residual: ``lambda v, n, c, y, x: te.max(v + B[c], 0.0)``).

    Three kernels (input transform, batched GEMM, output transform; see the module's docstring).
    The GEMM computes a ``block_co × block_p`` tile of each transform position per block with
    ``threads`` (ty, tx) threads, each holding its register tile as ``vthreads`` interleaved
    parts; both operands are fetched ``k_tile`` input channels at a time into shared memory
    (double-buffered). The transforms run ``transform_threads`` threads per block.

        s, (D, U, Y) = conv2d_nchw_winograd(2, 8, 7, 7, 16, block_co=16, block_p=32, threads=(4, 8), k_tile=4)
    """
    from tilecraft import te
    from tilecraft.topi.cuda_schedules import _fetch, bx, by, bz, tx, ty

    if m not in _MATRICES:
        raise ValueError(f"Winograd tile m={m} is not supported: use 2 or 4")
    if not gemm_tiles_ok(CI, CO, block_co, block_p, vthreads, threads, k_tile, double_buffer):
        raise ValueError(f"Winograd GEMM tiles do not fit the layer CI={CI}, CO={CO}: block_co={block_co}, "
                         f"block_p={block_p}, vthreads={vthreads}, threads={threads}, k_tile={k_tile}")
    AT, _, BT = (_MATRICES[m][k] for k in ("AT", "G", "BT"))
    alpha = m + 2
    OH, OW = H + 2 * padding - 2, W + 2 * padding - 2
    nH, nW, P, PP = winograd_tiles(N, OH, OW, m, block_p)
    Data = te.placeholder((N, CI, H, W), dtype, name="Data")
    U = te.placeholder((alpha, alpha, CI, CO), dtype, name="U")
    zero = te.const(0, dtype)

    def tile_of(p):
        return p // (nH * nW), p // nW % nH, p % nW

    def patch(c, p, a, b):
        n, ty_, tx_ = tile_of(p)
        y, x = ty_ * m + a - padding, tx_ * m + b - padding
        return te.if_then_else(te.all(p < P, y >= 0, y < H, x >= 0, x < W), Data[n, c, y, x], zero)

    D = te.compute((CI, PP, alpha, alpha), patch, name="D")

    # Bᵀ d B in two passes (rows, then columns): 2·alpha³ terms instead of alpha⁴
    DB = te.compute((CI, PP, alpha, alpha), lambda c, p, e, b: _apply_rows(BT, e, lambda a: D[c, p, a, b]), name="DB")
    V = te.compute((alpha, alpha, CI, PP), lambda e, u, c, p: _apply_rows(BT, u, lambda b: DB[c, p, e, b]), name="V")
    rc = te.reduce_axis((0, CI), "rc")
    Mt = te.compute((alpha, alpha, CO, PP), lambda e, u, o, p: te.sum(U[e, u, rc, o] * V[e, u, rc, p], axis=rc),
                    name="M")
    MT = te.compute((CO, PP, alpha, alpha), lambda o, p, e, u: Mt[e, u, o, p], name="MT")

    MA = te.compute((CO, PP, m, alpha), lambda o, p, v, b: _apply_rows(AT, v, lambda a: MT[o, p, a, b]), name="MA")

    def output_transform(n, o, y, x):
        p = (n * nH + y // m) * nW + x // m
        value = _apply_rows(AT, x % m, lambda b: MA[o, p, y % m, b])
        return value if epilogue is None else epilogue(value, n, o, y, x)

    Out = te.compute((N, CO, OH, OW), output_transform, name="Out")
    s = te.create_schedule(Out.op)

    # 1. input transform: one thread per (channel, tile), the patch in registers
    e, u, c, p = s[V].op.axis
    s[V].reorder(c, p, e, u)
    f = s[V].fuse(c, p)
    b, t = s[V].split(f, factor=transform_threads)
    s[V].bind(b, bx())
    s[V].bind(t, tx())
    s[V].unroll(e)
    s[V].unroll(u)
    for X in (D, DB):
        s[X].set_scope("local")
        s[X].compute_at(s[V], t)
        for ax in s[X].op.axis[2:]:
            s[X].unroll(ax)

    # 2. the batched GEMM, as the SGEMM schedule (U is already K × CO, V K × P)
    US = s.cache_read(U, "shared", [Mt])
    VS = s.cache_read(V, "shared", [Mt])
    UL = s.cache_read(US, "local", [Mt])
    VL = s.cache_read(VS, "local", [Mt])
    ML = s.cache_write(Mt, "local")
    vy, vx = vthreads
    ty_n, tx_n = threads
    rn = block_p // (vx * tx_n)
    rm = block_co // (vy * ty_n)
    e, u, o, p = s[Mt].op.axis
    bo, oi = s[Mt].split(o, factor=block_co)
    bp, pi = s[Mt].split(p, factor=block_p)
    vo, oi = s[Mt].split(oi, nparts=vy)
    vp, pi = s[Mt].split(pi, nparts=vx)
    to, oi = s[Mt].split(oi, nparts=ty_n)
    tp, pi = s[Mt].split(pi, nparts=tx_n)
    s[Mt].reorder(e, u, bo, bp, vo, vp, to, tp, oi, pi)
    s[Mt].bind(s[Mt].fuse(e, u), bz())
    s[Mt].bind(bo, by())
    s[Mt].bind(bp, bx())
    s[Mt].bind(vo, te.thread_axis("vthread", name="vy"))
    s[Mt].bind(vp, te.thread_axis("vthread", name="vx"))
    s[Mt].bind(to, ty())
    s[Mt].bind(tp, tx())
    if rn in (2, 4):
        s[Mt].vectorize(pi)
    s[ML].compute_at(s[Mt], tp)
    *_, co_, cp_ = s[ML].op.axis
    ko, ki = s[ML].split(ML.op.reduce_axis[0], factor=k_tile)
    s[ML].reorder(ko, ki, co_, cp_)
    s[ML].unroll(ki)
    s[ML].unroll(co_)
    s[ML].unroll(cp_)
    for X in (US, VS):
        s[X].compute_at(s[ML], ko)
    for X, ext in ((UL, rm), (VL, rn)):
        s[X].compute_at(s[ML], ki)
        ax = s[X].op.axis[-1]
        if ext in (2, 4):
            s[X].vectorize(ax)
        elif ext % 4 == 0:
            s[X].vectorize(s[X].split(ax, factor=4)[1])
    _fetch(s, US, (tx_n, ty_n), 4)
    _fetch(s, VS, (tx_n, ty_n), 4)
    if double_buffer:
        s[US].double_buffer()
        s[VS].double_buffer()

    # 3. output transform: one thread per (channel, tile), the alpha x alpha values of M in registers
    n, o, y, x = s[Out].op.axis
    yo, yi = s[Out].split(y, factor=m)
    xo, xi = s[Out].split(x, factor=m)
    s[Out].reorder(o, n, yo, xo, yi, xi)
    f = s[Out].fuse(o, n, yo, xo)
    b, t = s[Out].split(f, factor=transform_threads)
    s[Out].bind(b, bx())
    s[Out].bind(t, tx())
    s[Out].unroll(yi)
    s[Out].unroll(xi)
    for X in (MT, MA):
        s[X].set_scope("local")
        s[X].compute_at(s[Out], t)
        for ax in s[X].op.axis[2:]:
            s[X].unroll(ax)
    return s, [Data, U, *epilogue_args, Out]


def winograd_tile_size(H: int) -> int:
    """The output tile m the template uses for an image of height ``H`` (stride 1, pad 1): 4 from
    6 rows up, else 2. On an H100 at batch 32 F(4×4) beat F(2×2) at 14×14 (67 vs 60 TFLOP/s
    untuned, 77.6 vs 70.3 tuned) and at 7×7 (71 vs 49), tiles past the edge included
    (``bench/results/h100_2026-11-25_s23_conv32_mid/``); TVM's rule (4 where 8 divides H) picked 2
    at both. ``winograd_weight_transform(w, winograd_tile_size(H))`` gives the kernel's ``U``."""
    return 4 if H >= 6 else 2


def fallback_tiles(CI: int, CO: int) -> dict:
    """GEMM tiles for the untuned template: 64 × 64 blocks of 8 × 8 threads where they fit the
    layer, else the first of smaller blocks that does."""
    for bco, bp, vt, th, kt in ((64, 64, (2, 2), (8, 8), 8), (32, 64, (2, 2), (4, 8), 8), (32, 32, (1, 1), (4, 8), 8),
                                (16, 32, (1, 1), (4, 8), 8), (16, 32, (1, 1), (4, 8), 4)):
        if gemm_tiles_ok(CI, CO, bco, bp, vt, th, kt):
            return dict(block_co=bco, block_p=bp, vthreads=vt, threads=th, k_tile=kt)
    raise ValueError(f"Winograd conv2d: no GEMM tile fits CI={CI}, CO={CO} (CO must be a multiple of 16, "
                     f"CI of 4)")


@autotune.template(TEMPLATE)
def conv2d_nchw_winograd_cuda(N: int, CI: int, H: int, W: int, CO: int, KH: int, KW: int, stride: int,
                              padding: int, dtype: str = "float32", tile_m: int = 0):
    """Winograd conv2d NCHW on the GPU (3×3, stride 1), the kernel's filter pre-transformed
    (``U`` of :func:`winograd_weight_transform` with ``m = tile_m or winograd_tile_size(H)``); the
    batched GEMM's tiles are the knobs (as ``topi/matmul.cuda``'s), plus the transforms' block
    size. The tile m is an argument, not a knob: it fixes the shape of the kernel's ``U``.

        task = autotune.task.create("topi/conv2d_nchw_winograd.cuda",
                                    args=(32, 256, 14, 14, 256, 3, 3, 1, 1, "float32"), target="cuda")
    """
    if (KH, KW) != (3, 3) or stride != 1:
        raise ValueError(f"Winograd conv2d takes 3x3 filters at stride 1, got {KH}x{KW} at stride {stride}: "
                         f"use topi/conv2d_nchw.cuda")
    if dtype != "float32":
        raise ValueError(f"Winograd conv2d is float32 only, got {dtype}")
    m = tile_m or winograd_tile_size(H)
    cfg = autotune.get_config()
    cfg.define_knob("block_co", [16, 32, 64, 128])
    cfg.define_knob("block_p", [32, 64, 128])
    cfg.define_knob("threads", [(4, 8), (8, 8), (8, 16), (16, 8), (16, 16), (8, 32), (32, 8)])
    cfg.define_knob("vthreads", [(1, 1), (1, 2), (2, 1), (2, 2)])
    cfg.define_knob("k_tile", [4, 8, 16])
    cfg.define_knob("double_buffer", [1, 0])
    cfg.define_knob("transform_threads", [128, 256])

    def ok(e):
        return gemm_tiles_ok(CI, CO, e["block_co"].val, e["block_p"].val, e["vthreads"].val, e["threads"].val,
                             e["k_tile"].val, bool(e["double_buffer"].val))

    cfg.multi_filter(ok)
    OH, OW = H + 2 * padding - 2, W + 2 * padding - 2
    cfg.add_flop(2.0 * N * CO * OH * OW * CI * 9)
    if cfg.is_fallback:
        return conv2d_nchw_winograd(N, CI, H, W, CO, padding, dtype, m=m, **fallback_tiles(CI, CO))
    if not ok(cfg):
        cfg.raise_error("GEMM tiles do not divide the layer or do not fit a thread block")
        return conv2d_nchw_winograd(N, CI, H, W, CO, padding, dtype, m=m, **fallback_tiles(CI, CO))
    return conv2d_nchw_winograd(N, CI, H, W, CO, padding, dtype, m=m, block_co=cfg["block_co"].val,
                                block_p=cfg["block_p"].val, vthreads=cfg["vthreads"].val,
                                threads=cfg["threads"].val, k_tile=cfg["k_tile"].val,
                                double_buffer=bool(cfg["double_buffer"].val),
                                transform_threads=cfg["transform_threads"].val)
