"""Global pooling of an NCHW tensor (``[N, C, H, W]`` → ``[N, C]``): a tuning template for the
CPU (``llvm``).

Each output is a reduction over the ``H * W`` contiguous elements of one channel: the two
reduction axes are fused into one and run in SIMD registers (``reduce_lanes`` lanes,
``reduce_accumulators`` vector accumulators); the ``N * C`` outputs run in parallel.
``pool="avg"`` divides the sum by ``H * W``, ``pool="max"`` takes the maximum, as
``torch.nn.functional.adaptive_avg_pool2d(x, 1)`` / ``adaptive_max_pool2d(x, 1)``.
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft import te

from .reduce_schedule import define_reduce_knobs, schedule_row_reduction


def global_pool_compute(N: int, C: int, H: int, W: int, pool: str = "avg", dtype: str = "float32"):
    """The input ``X``, the reduction stage and the output ``[N, C]``.

    >>> X, red, out = global_pool_compute(8, 256, 28, 28, "avg")
    """
    if pool not in ("avg", "max"):
        raise ValueError(f"global pooling: pool must be 'avg' or 'max', got {pool!r}")
    X = te.placeholder((N, C, H, W), name="X", dtype=dtype)
    rh = te.reduce_axis((0, H), name="rh")
    rw = te.reduce_axis((0, W), name="rw")
    reducer = te.sum if pool == "avg" else te.max
    red = te.compute((N, C), lambda n, c: reducer(X[n, c, rh, rw], axis=[rh, rw]), name=f"{pool}_pool")
    if pool == "max":
        return X, red, red
    out = te.compute((N, C), lambda n, c: red[n, c] * (1.0 / (H * W)), name="out")
    return X, red, out


@autotune.template("topi/global_pool.llvm")
def global_pool(N: int, C: int, H: int, W: int, pool: str = "avg", dtype: str = "float32"):
    """Global average or max pooling of X[N, C, H, W] on the CPU."""
    cfg = autotune.get_config()
    cfg.define_split("tile_c", C, num_outputs=2)
    define_reduce_knobs(cfg)
    cfg.add_flop(1.0 * N * C * H * W)
    if cfg.is_fallback:
        cfg.fallback_split("tile_c", [-1, 8])

    X, red, out = global_pool_compute(N, C, H, W, pool, dtype)
    s = te.create_schedule(out.op)
    n, c = s[out].op.axis
    co, ci = cfg["tile_c"].apply(s, out, c)
    nc = s[out].fuse(n, co)
    s[out].parallel(nc)
    if red is not out:
        s[red].compute_at(s[out], ci)
    rh, rw = s[red].op.reduce_axis
    hw = s[red].fuse(rh, rw)
    schedule_row_reduction(s, red, cfg["reduce_lanes"].val, cfg["reduce_accumulators"].val, axis=hw)
    return s, [X, out]
