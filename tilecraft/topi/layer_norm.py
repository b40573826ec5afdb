"""Layer normalisation over the last axis of ``[M, N]``: a tuning template for the CPU (``llvm``).

``Y[i, j] = (X[i, j] - mean_i) / sqrt(var_i + eps) * gamma[j] + beta[j]`` with the mean and the
(biased) variance of row ``i``, as ``torch.nn.functional.layer_norm``. Two passes over each row
(the mean, then the variance as the mean of squared deviations: no cancellation), both
reductions in SIMD registers (``reduce_lanes``, ``reduce_accumulators``), then one vectorized
pass that writes the row (``tile_x``). Rows run in parallel, ``tile_rows`` at a time.

Without a tuned configuration the template uses the same defaults as ``topi/softmax.llvm``.
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft import te

from .reduce_schedule import define_reduce_knobs, schedule_row_reduction


def layer_norm_compute(M: int, N: int, dtype: str = "float32", eps: float = 1e-5):
    """The tensors: ``X, gamma, beta`` and the stages ``mean, var, rstd, Y``.

    >>> X, gamma, beta, (mean, var, rstd), Y = layer_norm_compute(4096, 1024)
    """
    X = te.placeholder((M, N), name="X", dtype=dtype)
    gamma = te.placeholder((N,), name="gamma", dtype=dtype)
    beta = te.placeholder((N,), name="beta", dtype=dtype)
    k1 = te.reduce_axis((0, N), name="k1")
    total = te.compute((M,), lambda i: te.sum(X[i, k1], axis=k1), name="rowsum")
    mean = te.compute((M,), lambda i: total[i] * (1.0 / N), name="mean")
    k2 = te.reduce_axis((0, N), name="k2")
    sq = te.compute((M,), lambda i: te.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]), axis=k2),
                    name="sqdev")
    rstd = te.compute((M,), lambda i: te.rsqrt(sq[i] * (1.0 / N) + eps), name="rstd")
    Y = te.compute((M, N), lambda i, j: (X[i, j] - mean[i]) * rstd[i] * gamma[j] + beta[j], name="Y")
    return X, gamma, beta, (total, mean, sq, rstd), Y


@autotune.template("topi/layer_norm.llvm")
def layer_norm(M: int, N: int, dtype: str = "float32"):
    """Layer norm over the last axis of X[M, N] (eps 1e-5) on the CPU: args X, gamma, beta, Y."""
    cfg = autotune.get_config()
    cfg.define_split("tile_x", N, num_outputs=2, filter=lambda e: e.size[-1] in (1, 4, 8, 16, 32, 64))
    cfg.define_split("tile_rows", M, num_outputs=2)
    define_reduce_knobs(cfg)
    cfg.add_flop(8.0 * M * N)
    if cfg.is_fallback:
        cfg.fallback_split("tile_x", [-1, 16])
        cfg.fallback_split("tile_rows", [-1, 8])

    X, gamma, beta, (total, mean, sq, rstd), Y = layer_norm_compute(M, N, dtype)
    s = te.create_schedule(Y.op)
    i, j = s[Y].op.axis
    io, ii = cfg["tile_rows"].apply(s, Y, i)
    jo, ji = cfg["tile_x"].apply(s, Y, j)
    s[Y].reorder(io, ii, jo, ji)
    s[Y].parallel(io)
    s[Y].vectorize(ji)
    lanes, accs = cfg["reduce_lanes"].val, cfg["reduce_accumulators"].val
    for stage in (total, mean, sq, rstd):
        s[stage].compute_at(s[Y], ii)
    for stage in (total, sq):
        schedule_row_reduction(s, stage, lanes, accs)
    return s, [X, gamma, beta, Y]
