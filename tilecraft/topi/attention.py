"""Multi-head self-attention in one CPU kernel: per head, ``softmax(scale · Q Kᵀ) · V``.

The operands are 2-d row-major tensors ``[S, W]`` that hold every head side by side (head ``h``
is columns ``offset + h·d .. offset + (h+1)·d``): a transformer's projections as its dense layers
write them, so a combined Q/K/V GEMM's output is read in place (``q``, ``k`` and ``v`` may be the
same tensor at three column offsets). The result ``out[i, h, e]`` is ``[S, heads, d]``: bytewise
the ``[S, heads·d]`` layout the output projection reads. Nothing is transposed outside the kernel:

    KT[h, e, j]  = k[j, ok + h·d + e]                    per head (the only copy: 32 KB at d = 64)
    QK[h, i, j]  = Σ_e q[i, oq + h·d + e] · KT[h, e, j]  register tiles of rows × 2 vectors
    M[h, i]      = max_j scale · QK[h, i, j]             SIMD row reductions
    E[h, i, j]   = exp(scale · QK[h, i, j] - M[h, i])
    Z[h, i]      = Σ_j E[h, i, j]
    O[i, h, e]   = Σ_j E[h, i, j] · v[j, ov + h·d + e]   a block of rows × d, accumulated over j
    out[i, h, e] = O[i, h, e] · (1 / Z[h, i])

The schedule runs the heads in parallel; in each head ``KT`` and ``QK`` are computed whole, then
per block of rows the softmax stages and ``O``, so a block's probabilities are reused from L1.
It is a tuning template (``topi/attention.llvm``, workload ``(S, heads, head_dim, dtype)``):
knobs ``qk_rows`` × ``qk_vectors`` (the ``Q Kᵀ`` register tile: rows × vectors of columns) and
``o_rows`` (the rows of a block: the ``P V`` accumulators are ``o_rows × head_dim``); the
fallback takes about half the vector registers for each (AVX-512 at d = 64: 8 × 2, 4 rows).

    import tilecraft.topi.attention
    task = autotune.task.create("topi/attention.llvm", args=(128, 12, 64, "float32"), target="llvm")

>>> out, _ = attention_compute(qkv, qkv, qkv, heads=12, head_dim=64, scale=0.125,
...                            offsets=(0, 768, 1536))                      # doctest: +SKIP
"""
from __future__ import annotations

import math

import tilecraft.autotune as autotune
from tilecraft import te

from .reduce_schedule import schedule_row_reduction


def _dim(x) -> int:
    return int(getattr(x, "value", x))


def attention_compute(q, k, v, heads: int, head_dim: int, scale: float, offsets=(0, 0, 0)):
    """``(out, stages)``: ``out[i, h, e]`` (``[S, heads, head_dim]``) of ``softmax(scale · Q_h K_hᵀ) V_h``
    per head, ``Q_h[i, e] = q[i, offsets[0] + h·head_dim + e]`` (K, V alike); ``stages`` names the
    intermediate tensors for :func:`schedule_attention`.

    >>> out, stages = attention_compute(q, k, v, 2, 8, 0.35)                  # doctest: +SKIP
    """
    S, d = _dim(q.shape[0]), head_dim
    oq, ok, ov = offsets
    scale = float(scale)
    KT = te.compute((heads, d, S), lambda h, e, j: k[j, ok + h * d + e], name="attn_kt")
    r = te.reduce_axis((0, d), name="r")
    QK = te.compute((heads, S, S), lambda h, i, j: te.sum(q[i, oq + h * d + r] * KT[h, r, j], axis=r),
                    name="attn_qk")
    j1 = te.reduce_axis((0, S), name="j1")
    M = te.compute((heads, S), lambda h, i: te.max(QK[h, i, j1] * scale, axis=j1), name="attn_max")
    E = te.compute((heads, S, S), lambda h, i, j: te.exp(QK[h, i, j] * scale - M[h, i]), name="attn_exp")
    j2 = te.reduce_axis((0, S), name="j2")
    Z = te.compute((heads, S), lambda h, i: te.sum(E[h, i, j2], axis=j2), name="attn_sum")
    j3 = te.reduce_axis((0, S), name="j3")
    O = te.compute((S, heads, d), lambda i, h, e: te.sum(E[h, i, j3] * v[j3, ov + h * d + e], axis=j3),
                   name="attn_pv")
    out = te.compute((S, heads, d), lambda i, h, e: O[i, h, e] * (1.0 / Z[h, i]), name="attention")
    return out, {"KT": KT, "QK": QK, "M": M, "E": E, "Z": Z, "O": O}


def attention_tiles(head_dim: int, lanes: int, registers: int) -> tuple:
    """``(qk_rows, o_rows)``: rows of the ``Q Kᵀ`` register tile (× 2 vectors) and of the ``P V``
    block (× ``head_dim`` columns), so that the accumulators take about half the vector
    registers (AVX-512: 8 and 4 at d = 64; AVX2: 4 and 1).

    >>> attention_tiles(64, 16, 32)
    (8, 4)
    """
    qk_rows = max(1, registers // 4)
    o_rows = max(1, (registers // 2) // max(1, -(-head_dim // lanes)))
    return qk_rows, o_rows


def attention_config(cfg, S: int, heads: int, head_dim: int) -> tuple:
    """Define the template's knobs on ``cfg`` and return ``(qk_rows, qk_cols, o_rows, lanes)``:
    the tuned values or the fallback's (:func:`attention_tiles`, two vectors of columns).

    >>> attention_config(FallbackConfigEntity(), 128, 12, 64)          # doctest: +SKIP
    (8, 32, 4, 16)                                                      # AVX-512 (AVX2: 4, 16, 1, 8)
    """
    from tilecraft.autotune.space import OtherOptionEntity
    from tilecraft.topi.cpu_intrinsics import vector_isa
    isa = vector_isa()
    cfg.define_knob("qk_rows", [1, 2, 4, 6, 8, 12, 16])
    cfg.define_knob("qk_vectors", [1, 2, 3, 4])
    cfg.define_knob("o_rows", [1, 2, 4, 8])
    regs, d_vectors = isa.registers, -(-head_dim // isa.lanes)
    cfg.multi_filter(lambda e: e["qk_rows"].val * e["qk_vectors"].val + e["qk_vectors"].val < regs
                     and e["o_rows"].val * d_vectors < regs)
    cfg.add_flop(4.0 * heads * S * S * head_dim)
    if cfg.is_fallback:
        qk_rows, o_rows = attention_tiles(head_dim, isa.lanes, regs)
        # recorded on the fallback too: tune_tasks measures it as the task's first candidate
        for name, val in (("qk_rows", qk_rows), ("qk_vectors", 2), ("o_rows", o_rows)):
            cfg[name] = OtherOptionEntity(val)
    return (cfg["qk_rows"].val, cfg["qk_vectors"].val * isa.lanes, cfg["o_rows"].val, isa.lanes)


@autotune.template("topi/attention.llvm")
def attention(S: int, heads: int, head_dim: int, dtype: str = "float32"):
    """Self-attention of ``heads`` heads of ``head_dim`` over ``S`` rows on the CPU, Q, K and V
    read from one ``[S, 3 · heads · head_dim]`` tensor (a combined projection's output)."""
    if dtype != "float32":
        raise ValueError(f"topi/attention.llvm computes float32 (got dtype {dtype!r})")
    cfg = autotune.get_config()
    params = attention_config(cfg, S, heads, head_dim)
    C = heads * head_dim
    qkv = te.placeholder((S, 3 * C), name="qkv", dtype=dtype)
    out, stages = attention_compute(qkv, qkv, qkv, heads, head_dim, 1.0 / math.sqrt(head_dim), (0, C, 2 * C))
    s = te.create_schedule(out.op)
    schedule_attention(s, out, stages, params)
    return s, [qkv, out]


def schedule_attention(s, out, stages: dict, params: tuple) -> None:
    """Schedule :func:`attention_compute`'s stages on the CPU with ``params`` (``(qk_rows,
    qk_cols, o_rows, lanes)`` from :func:`attention_config`; see the module docstring): heads in
    parallel; ``KT`` and ``Q Kᵀ`` per head (register tiles, accumulated in a cache-written
    stage); per block of rows the row max, the exponentials, their sum (SIMD reductions) and
    the ``P V`` product (rows × head_dim accumulators over ``j``), then the normalised output,
    vectorized along the head's columns.

    >>> schedule_attention(s, out, stages, (8, 32, 4, 16))                    # doctest: +SKIP
    """
    KT, QK, M, E, Z, O = (stages[n] for n in ("KT", "QK", "M", "E", "Z", "O"))
    S = _dim(out.shape[0])
    qk_rows, qk_cols, o_rows, lanes = params
    QKc = s.cache_write(QK, "global")
    i, h, e = s[out].op.axis
    io, ii = s[out].split(i, factor=o_rows)
    s[out].reorder(h, io, ii, e)
    s[out].parallel(h)
    s[out].vectorize(e)
    s[KT].compute_at(s[out], h)
    s[QK].compute_at(s[out], h)
    _, qi, qj = s[QK].op.axis
    qio, qii = s[QK].split(qi, factor=qk_rows)
    qjo, qji = s[QK].split(qj, factor=min(S, qk_cols))
    s[QK].reorder(qio, qjo, qii, qji)
    s[QK].vectorize(qji)
    s[QKc].compute_at(s[QK], qjo)
    _, ci, cj = s[QKc].op.axis
    (cr,) = s[QKc].op.reduce_axis
    s[QKc].reorder(cr, ci, cj)
    s[QKc].unroll(ci)
    s[QKc].vectorize(cj)
    for st in (M, E, Z):
        s[st].compute_at(s[out], io)
    for st in (M, Z):
        schedule_row_reduction(s, st, lanes, 2)
    ej = s[E].op.axis[2]
    _, eji = s[E].split(ej, factor=min(S, 4 * lanes))
    s[E].vectorize(eji)
    s[O].compute_at(s[out], io)
    oi, _, oe = s[O].op.axis
    (oj,) = s[O].op.reduce_axis
    s[O].reorder(oj, oi, oe)
    s[O].unroll(oi)
    s[O].vectorize(oe)
