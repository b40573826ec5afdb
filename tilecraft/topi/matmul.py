"""Matmul ``C[M, N] = A[M, K] @ B[K, N]``: a tuning template for the CPU (``llvm``).

The schedule packs ``B`` into panels ``[N / bn, K, bn]`` (``bn`` = the innermost x tile, so a
row of a panel is one contiguous vector load), accumulates a ``yi × xi`` register tile in a
cache-written stage computed inside the ``(yo, xo, ym, xm)`` blocks, splits ``k`` for the cache,
and runs the outer blocks on the thread pool.

    from tilecraft import autotune
    import tilecraft.topi.matmul
    task = autotune.task.create("topi/matmul.llvm", args=(1024, 1024, 1024, "float32"), target="llvm")

Knobs: ``tile_y`` and ``tile_x`` (3 levels: block, cache tile, register tile), ``tile_k``
(2 levels), ``order`` of the register-tile loops inside the k loop, ``unroll_k`` (unroll the
inner k loop by 1, 4 or 8).
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft import te


@autotune.template("topi/matmul.llvm")
def matmul(M: int, N: int, K: int, dtype: str = "float32"):
    """C[M, N] = A[M, K] @ B[K, N] on the CPU: packed B panels, register tile, k split, parallel blocks."""
    cfg = autotune.get_config()
    matmul_config(cfg, M, N, K)
    bn = cfg["tile_x"].size[-1]
    if cfg.is_fallback:
        bn = 16 if N % 16 == 0 else 1
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    C, packed = matmul_compute(A, B, bn)
    s = te.create_schedule(C.op)
    if cfg.is_fallback:
        return s, [A, B, C]
    schedule_matmul(cfg, s, C, packed, C)
    return s, [A, B, C]


def matmul_config(cfg, M: int, N: int, K: int) -> None:
    """Define the template's knobs on ``cfg`` (the graph level defines them on the config of the
    same workload to schedule a fused dense layer as the template schedules a matmul)."""
    # register tile: at most 8 rows of 1-4 vectors of 16 lanes (all that fits in 32 registers)
    cfg.define_split("tile_y", M, num_outputs=3, filter=lambda e: e.size[-1] <= 8)
    cfg.define_split("tile_x", N, num_outputs=3,
                     filter=lambda e: e.size[-1] in (8, 16, 32, 48, 64) or e.size[-1] == N)
    cfg.define_split("tile_k", K, num_outputs=2, filter=lambda e: e.size[-1] % 8 == 0 or e.size[-1] == K)
    cfg.define_knob("order", [0, 1])
    cfg.define_knob("unroll_k", [1, 4, 8])
    cfg.add_flop(2.0 * M * N * K)


def matmul_compute(A, B, bn: int, transpose_b: bool = False):
    """``C = A @ B`` (``A @ B.T`` with ``transpose_b``, B then ``[N, K]`` as a dense layer's
    weight) through B packed into panels ``[N / bn, K, bn]``; returns ``(C, packed)``.

    >>> C, packed = matmul_compute(A, B, 16)      # doctest: +SKIP
    """
    M, K = (int(getattr(d, "value", d)) for d in A.shape)
    N = int(getattr(B.shape[0 if transpose_b else 1], "value", B.shape[0 if transpose_b else 1]))
    if transpose_b:
        packed = te.compute((N // bn, K, bn), lambda xo, k, xi: B[xo * bn + xi, k], name="packedB")
    else:
        packed = te.compute((N // bn, K, bn), lambda xo, k, xi: B[k, xo * bn + xi], name="packedB")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * packed[j // bn, k, j % bn], axis=k), name="C")
    return C, packed


def schedule_matmul(cfg, s, C, packed, out) -> None:
    """Schedule :func:`matmul_compute`'s stages with ``cfg``'s knobs. ``out`` is ``C``, or an
    element-wise epilogue of it of the same shape (bias, activation) whose intermediate stages
    are inlined: the epilogue is then tiled and ``C`` accumulates inside its tiles."""
    if out is C:
        CC = s.cache_write(C, "global")
    else:
        CC = C
    y, x = s[out].op.axis
    yo, ym, yi = cfg["tile_y"].apply(s, out, y)
    xo, xm, xi = cfg["tile_x"].apply(s, out, x)
    s[out].reorder(yo, xo, ym, xm, yi, xi)
    s[out].vectorize(xi)
    fused = s[out].fuse(yo, xo)
    s[out].parallel(fused)
    s[CC].compute_at(s[out], xm)

    yc, xc = s[CC].op.axis
    (kc,) = s[CC].op.reduce_axis
    ko, ki = cfg["tile_k"].apply(s, CC, kc)
    if cfg["order"].val == 0:
        s[CC].reorder(ko, ki, yc, xc)
    else:
        s[CC].reorder(ko, yc, ki, xc)
    s[CC].unroll(yc)
    s[CC].vectorize(xc)
    if cfg["unroll_k"].val > 1:
        _, kii = s[CC].split(ki, factor=cfg["unroll_k"].val)
        s[CC].unroll(kii)

    xo_p, k_p, xi_p = s[packed].op.axis
    s[packed].vectorize(xi_p)
    s[packed].parallel(xo_p)


def _cuda_tiles_ok(M, N, K, bm, bn, vy, vx, ty, tx, kt, double_buffer=True) -> bool:
    """Whether a CUDA SGEMM config is well-formed: tiles divide the matrix, each virtual thread
    owns at least one row and column, the fetches split evenly over the threads, the shared
    tiles fit in 48 KB and a thread holds at most 128 accumulators (more spills registers)."""
    if M % bm or N % bn or K % kt:
        return False
    if bm % (vy * ty) or bn % (vx * tx):
        return False
    if ty * tx > 1024 or ty * tx < 32:
        return False
    if (bm * kt) % (ty * tx * min(4, kt)) or (bn * kt) % (ty * tx * 4):
        return False
    if bm * bn // (ty * tx) > 128:
        return False
    return (bm + bn) * kt * 4 * (2 if double_buffer else 1) <= 48 * 1024


@autotune.template("topi/matmul.cuda")
def matmul_cuda(M: int, N: int, K: int, dtype: str = "float32"):
    """SGEMM for CUDA: the TVM-style schedule of ``tilecraft.topi.cuda_schedules.matmul``
    (shared-memory tiles, register sub-tiles split into virtual threads, double buffering) with
    its sizes as knobs: the block tile, the thread grid, the virtual-thread split of each thread's
    register tile, the depth of the shared tiles, double buffering."""
    from tilecraft.topi import cuda_schedules

    cfg = autotune.get_config()
    cfg.define_knob("block_m", [32, 64, 128, 256])
    cfg.define_knob("block_n", [32, 64, 128, 256])
    cfg.define_knob("threads", [(8, 8), (8, 16), (16, 8), (16, 16), (8, 32), (32, 8), (16, 32), (32, 16)])
    cfg.define_knob("vthreads", [(1, 1), (1, 2), (2, 1), (2, 2), (2, 4), (4, 2)])
    cfg.define_knob("k_tile", [4, 8, 16, 32])
    cfg.define_knob("double_buffer", [1, 0])

    def ok(e):
        return _cuda_tiles_ok(M, N, K, e["block_m"].val, e["block_n"].val, *e["vthreads"].val,
                              *e["threads"].val, e["k_tile"].val, bool(e["double_buffer"].val))

    cfg.multi_filter(ok)
    cfg.add_flop(2.0 * M * N * K)
    if cfg.is_fallback:
        return cuda_schedules.matmul(M, N, K, dtype)
    if not ok(cfg):
        # (only reachable while the space is collected: multi_filter keeps such configs out)
        cfg.raise_error("tile sizes do not divide the problem or the thread block")
        return cuda_schedules.matmul(M, N, K, dtype)
    return cuda_schedules.matmul(M, N, K, dtype, block=(cfg["block_m"].val, cfg["block_n"].val),
                                 vthreads=cfg["vthreads"].val, threads=cfg["threads"].val,
                                 k_tile=cfg["k_tile"].val, double_buffer=bool(cfg["double_buffer"].val))
