"""Softmax over the last axis of ``[M, N]``: a tuning template for the CPU (``llvm``).

Three passes (row max, sum of exponentials, normalise); rows run in parallel and the
element-wise passes are split and vectorized by the ``tile_x`` knob.
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft import te


@autotune.template("topi/softmax.llvm")
def softmax(M: int, N: int, dtype: str = "float32"):
    """Softmax over the last axis of X[M, N] on the CPU."""
    cfg = autotune.get_config()
    X = te.placeholder((M, N), name="X", dtype=dtype)
    k1 = te.reduce_axis((0, N), name="k1")
    mx = te.compute((M,), lambda i: te.max(X[i, k1], axis=k1), name="rowmax")
    ex = te.compute((M, N), lambda i, j: te.exp(X[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, N), name="k2")
    sm = te.compute((M,), lambda i: te.sum(ex[i, k2], axis=k2), name="rowsum")
    Y = te.compute((M, N), lambda i, j: ex[i, j] / sm[i], name="Y")
    s = te.create_schedule(Y.op)
    cfg.define_split("tile_x", N, num_outputs=2, filter=lambda e: e.size[-1] in (1, 4, 8, 16, 32, 64))
    cfg.define_split("tile_rows", M, num_outputs=2)
    cfg.define_knob("inline_exp", [0, 1])
    cfg.add_flop(5.0 * M * N)
    if cfg.is_fallback:
        return s, [X, Y]

    i, j = s[Y].op.axis
    io, ii = cfg["tile_rows"].apply(s, Y, i)
    jo, ji = cfg["tile_x"].apply(s, Y, j)
    s[Y].reorder(io, ii, jo, ji)
    s[Y].parallel(io)
    s[Y].vectorize(ji)
    for stage in (mx, sm):
        s[stage].compute_at(s[Y], ii)
    if cfg["inline_exp"].val:
        s[ex].compute_inline()
    else:
        s[ex].compute_at(s[Y], ii)
        ej = s[ex].op.axis[1]
        ejo, eji = s[ex].split(ej, factor=cfg["tile_x"].size[-1])
        s[ex].vectorize(eji)
    return s, [X, Y]
