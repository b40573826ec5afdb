"""Softmax over the last axis of ``[M, N]``: a tuning template for the CPU (``llvm``).

Three passes over each row, all inside the row's iteration (the row stays in L1): the row max,
the exponentials and their sum, then the normalised output. Rows run in parallel; the
element-wise passes are split and vectorized by ``tile_x``; the two row reductions run in SIMD
registers (``vectorize`` on their reduction axis, ``schedule/vector_reduce.py``) with
``reduce_lanes`` lanes and ``reduce_accumulators`` independent vector accumulators (1 lane:
scalar loops). ``reciprocal`` multiplies by ``1 / sum`` instead of dividing each element (one
division per row; at most one more rounding per element).

Without a tuned configuration the template schedules itself: 64-wide element-wise passes (four
independent exp polynomials per step on AVX-512), 8-lane reductions with 2 accumulators, 8-row
blocks, the reciprocal of the sum.
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft import te

from .reduce_schedule import define_reduce_knobs, schedule_row_reduction

@autotune.template("topi/softmax.llvm")
def softmax(M: int, N: int, dtype: str = "float32"):
    """Softmax over the last axis of X[M, N] on the CPU."""
    cfg = autotune.get_config()
    cfg.define_split("tile_x", N, num_outputs=2, filter=lambda e: e.size[-1] in (1, 4, 8, 16, 32, 64))
    cfg.define_split("tile_rows", M, num_outputs=2)
    cfg.define_knob("inline_exp", [0, 1])
    cfg.define_knob("reciprocal", [1, 0])
    define_reduce_knobs(cfg)
    cfg.add_flop(5.0 * M * N)
    if cfg.is_fallback:
        cfg.fallback_split("tile_x", [-1, 64])
        cfg.fallback_split("tile_rows", [-1, 8])

    X = te.placeholder((M, N), name="X", dtype=dtype)
    k1 = te.reduce_axis((0, N), name="k1")
    mx = te.compute((M,), lambda i: te.max(X[i, k1], axis=k1), name="rowmax")
    ex = te.compute((M, N), lambda i, j: te.exp(X[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, N), name="k2")
    sm = te.compute((M,), lambda i: te.sum(ex[i, k2], axis=k2), name="rowsum")
    if cfg["reciprocal"].val:
        Y = te.compute((M, N), lambda i, j: ex[i, j] * (1.0 / sm[i]), name="Y")
    else:
        Y = te.compute((M, N), lambda i, j: ex[i, j] / sm[i], name="Y")
    s = te.create_schedule(Y.op)

    i, j = s[Y].op.axis
    io, ii = cfg["tile_rows"].apply(s, Y, i)
    jo, ji = cfg["tile_x"].apply(s, Y, j)
    s[Y].reorder(io, ii, jo, ji)
    s[Y].parallel(io)
    s[Y].vectorize(ji)
    lanes, accs = cfg["reduce_lanes"].val, cfg["reduce_accumulators"].val
    for stage in (mx, sm):
        s[stage].compute_at(s[Y], ii)
        schedule_row_reduction(s, stage, lanes, accs)
    if cfg["inline_exp"].val:
        s[ex].compute_inline()
    else:
        s[ex].compute_at(s[Y], ii)
        ej = s[ex].op.axis[1]
        ejo, eji = s[ex].split(ej, factor=cfg["tile_x"].size[-1])
        s[ex].vectorize(eji)
    return s, [X, Y]
