"""Tensor-core schedules and tuning templates for two network operators, on ``matmul_tensorcore``'s
machinery (``topi/tensorcore.py``: ``gemm_compute``, ``block_axes``, ``schedule_mainloop``):

* ``batch_matmul_tensorcore``: ``C[b] = A[b] @ B[b]`` (``layout_b="row_major"``, B stored (K, N),
  attention's ``P @ V``) or ``A[b] @ B[b].T`` (``"col_major"``, B stored (N, K), ``Q @ K^T``), the
  batch bound to ``blockIdx.z``; template ``topi/batch_matmul_tensorcore.cuda``.
* ``dense_tensorcore``: ``Y = gelu(X @ W.T + bias)`` (W stored (N, K) as ``torch.nn.Linear``'s
  weight), the accumulator stored by the warps to a shared tile and the bias add and GELU (erf
  form, torch's default, or the tanh form) applied by all threads on the way to global memory, in
  float32, ``vec`` elements per thread at a time; Y float16 or float32; template
  ``topi/dense_tensorcore.cuda``.

    tilecraft tune batch_matmul_tensorcore 12 128 128 64 float16 float16 col_major --target cuda
    tilecraft tune dense_tensorcore 1024 3072 768 float16 float16 erf --target cuda

>>> s, (A, B, C) = batch_matmul_tensorcore(12, 128, 128, 64, layout_b="col_major", block=(2, 2), warp=(2, 2))
>>> s, (X, W, bias, Y) = dense_tensorcore(1024, 3072, 768, block=(2, 2), warp=(4, 4), stages=3)
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft import te
from tilecraft.topi.tensorcore import (KINDS, TILE, _kind, accumulator_stage, block_axes, cast_output,
                                       gemm_compute, schedule_mainloop, store_matrix)
from tilecraft.topi.tensorcore_template import SHARED_LIMIT, fits, shared_bytes

GELUS = ("erf", "tanh", "none")


def _options(impl, layout_b, block, warp, chunk, pad, double_buffer, unroll, stages, prefetch, dtype):
    return dict(impl=impl, layout_b=layout_b, block=block, warp=warp, chunk=chunk, pad=pad,
                double_buffer=double_buffer, unroll=unroll, stages=stages, prefetch=prefetch, dtype=dtype)


def batch_matmul_tensorcore(batch, M, N, K, impl="mma", layout_b="row_major", block=(2, 2), warp=(2, 2), chunk=2,
                            pad=None, double_buffer=False, unroll=True, stages=2, prefetch=False,
                            dtype="float16", out_dtype=None, raster=0, min_blocks=0):
    """``C[b] = A[b] @ B[b]`` on tensor cores for ``b < batch``: ``A`` is (batch, M, K); ``B`` is
    (batch, K, N) (``layout_b="row_major"``) or (batch, N, K) (``"col_major"``: ``A[b] @ B[b].T``,
    attention's ``Q @ K^T``). Each block computes one block tile of one batch element
    (``blockIdx.z``); the options are ``matmul_tensorcore``'s (float32 and int8 operands need
    ``layout_b="col_major"``; ``out_dtype="float16"`` rounds a float32 accumulator at the store).

    >>> s, (Q, Kt, S) = batch_matmul_tensorcore(12, 512, 512, 64, layout_b="col_major", out_dtype="float16",
    ...                                         block=(2, 2), warp=(4, 4), chunk=2, stages=2)
    """
    kd, acc = _kind(dtype, impl)
    out_dtype = out_dtype or acc
    if dtype != "float16" and layout_b != "col_major":
        raise ValueError(f"a tensor-core batch_matmul of {dtype} operands takes B as (batch, N, K), "
                         f"layout_b='col_major': ldmatrix transposes 16-bit elements only")
    store = store_matrix(impl, acc=acc, out=out_dtype)
    A = te.placeholder((batch, M, K), name="A", dtype=dtype)
    B = te.placeholder((batch, K, N) if layout_b == "row_major" else (batch, N, K), name="B", dtype=dtype)
    Cacc = gemm_compute(A, B, layout_b, acc)
    C = cast_output(Cacc, out_dtype)
    s = te.create_schedule(C.op)
    CF = accumulator_stage(s, Cacc, C, impl)
    _, ii, jj = block_axes(s, C, block, warp, raster, min_blocks)
    schedule_mainloop(s, A, B, CF, C, ii, jj, store,
                      **_options(impl, layout_b, block, warp, chunk, pad, double_buffer, unroll, stages, prefetch,
                                 dtype))
    return s, (A, B, C)


def gelu(x, form: str = "erf"):
    """GELU of a float32 expression: ``x·Φ(x) = 0.5·x·(1 + erf(x/√2))`` (``"erf"``, torch's
    default), ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`` (``"tanh"``), or ``x`` (``"none"``).

    >>> y = gelu(te.var("x", "float32"), "tanh")
    """
    if form == "erf":
        return 0.5 * x * (1.0 + te.erf(x * 0.7071067811865476))
    if form == "tanh":
        return 0.5 * x * (1.0 + te.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    if form == "none":
        return x
    raise ValueError(f"gelu must be one of {', '.join(map(repr, GELUS))}, got {form!r}")


def dense_tensorcore(M, N, K, dtype="float16", out_dtype="float16", gelu_form="erf", block=(2, 2), warp=(2, 2),
                     chunk=2, pad=None, unroll=True, stages=2, prefetch=False, raster=0, min_blocks=0, vec=4):
    """``Y = gelu(X @ W.T + bias)`` on tensor cores (``mma.sync``): ``X`` (M, K) and ``W`` (N, K)
    of ``dtype`` (float16, or float32 through tf32), ``bias`` (N,) and ``Y`` (M, N) of
    ``out_dtype`` (float16 or float32). The GEMM is ``matmul_tensorcore``'s schedule (same
    options); each warp stores its float32 accumulator tiles to a shared tile of the block
    (rows padded by 16 bytes), and all threads then read it ``vec`` elements at a time, add the
    bias, apply ``gelu_form`` (``"erf"``, ``"tanh"``, ``"none"``; in float32) and write Y, rounding
    once. The shared tile (16·block·warp squared, float32) comes on top of the operand tiles.

    >>> s, (X, W, bias, Y) = dense_tensorcore(1024, 3072, 768, block=(2, 4), warp=(4, 2), chunk=4, stages=3)
    """
    if dtype not in ("float16", "float32") or out_dtype not in ("float16", "float32"):
        raise ValueError(f"dense_tensorcore takes float16 or float32 operands and output, got {dtype!r} -> "
                         f"{out_dtype!r}")
    if gelu_form not in GELUS:
        raise ValueError(f"gelu must be one of {', '.join(map(repr, GELUS))}, got {gelu_form!r}")
    _, acc = _kind(dtype, "mma")
    X = te.placeholder((M, K), name="X", dtype=dtype)
    W = te.placeholder((N, K), name="W", dtype=dtype)
    bias = te.placeholder((N,), name="bias", dtype=out_dtype)
    Cacc = gemm_compute(X, W, "col_major", acc, name="dense")
    Y = te.compute((M, N), lambda i, j: gelu(Cacc[i, j] + bias[j].astype(acc), gelu_form).astype(out_dtype),
                   name="Y")
    s = te.create_schedule(Y.op)
    accumulator_stage(s, Cacc, Y, "mma")
    CS = s.cache_read(Cacc, "shared", [Y])
    bx, yi, yj = block_axes(s, Y, block, warp, raster, min_blocks)
    s[CS].compute_at(s[Y], bx)
    ci, cj = CS.op.axis
    schedule_mainloop(s, X, W, Cacc, CS, ci, cj, store_matrix("mma", dst_scope="shared", acc=acc),
                      **_options("mma", "col_major", block, warp, chunk, pad, False, unroll, stages, prefetch,
                                 dtype))
    bn_tile = TILE * block[1] * warp[1]
    s[CS].storage_align(ci, bn_tile, 4)              # rows 16 bytes apart in banks
    # the epilogue: all threads of the block, `vec` consecutive elements of a row each
    f = s[Y].fuse(yi, yj)
    f, v = s[Y].split(f, factor=vec)
    f, tx = s[Y].split(f, factor=32)
    f, ty = s[Y].split(f, factor=block[0])
    f, tz = s[Y].split(f, factor=block[1])
    s[Y].bind(tx, te.thread_axis("threadIdx.x"))
    s[Y].bind(ty, te.thread_axis("threadIdx.y"))
    s[Y].bind(tz, te.thread_axis("threadIdx.z"))
    s[Y].vectorize(v)
    return s, (X, W, bias, Y)


# -- the tuning templates ------------------------------------------------------------------------

def check_shape(template: str, M, N, K, dtype):
    """Refuse a problem no tensor-core configuration can tile: M and N must be multiples of 16 and
    K of the instruction's depth (16 for float16, 8 for tf32, 32 for int8), naming the dimension.

    >>> check_shape("topi/dense_tensorcore.cuda", 1000, 3072, 768, "float16")
    Traceback (most recent call last):
    ValueError: topi/dense_tensorcore.cuda: M=1000 is not a multiple of 16 (the tensor-core tile) ...
    """
    kd = KINDS[dtype][0]
    for name, size, step, what in (("M", M, TILE, "the tensor-core tile"), ("N", N, TILE, "the tensor-core tile"),
                                   ("K", K, kd, f"the {dtype} mma.sync depth")):
        if size % step:
            raise ValueError(f"{template}: {name}={size} is not a multiple of {step} ({what}); no configuration "
                             f"tiles it: pad the operands to a multiple of {step}")


def _knobs(cfg):
    cfg.define_knob("block", [(2, 2), (2, 4), (4, 2), (1, 1), (1, 2), (2, 1)])
    cfg.define_knob("warp", [(4, 4), (4, 2), (2, 4), (2, 2), (1, 1)])
    cfg.define_knob("chunk", [2, 4, 1])
    cfg.define_knob("stages", [3, 4, 2, 0])
    cfg.define_knob("raster", [0, 8, 4])
    cfg.define_knob("min_blocks", [0, 1, 2])


def _vals(e):
    return {k: e[k].val for k in ("block", "warp", "chunk", "stages", "raster", "min_blocks")}


def _fallback(fits_one, options):
    """The first of a few known configurations that fits, largest first."""
    for o in options:
        if fits_one(o):
            return o
    raise ValueError("no tensor-core configuration tiles this problem")   # check_shape keeps this unreachable


FALLBACKS = [dict(block=(2, 2), warp=(4, 4), chunk=2, stages=3, raster=0, min_blocks=2),
             dict(block=(2, 2), warp=(2, 2), chunk=2, stages=2, raster=0, min_blocks=0),
             dict(block=(1, 1), warp=(1, 1), chunk=1, stages=0, raster=0, min_blocks=0)]


@autotune.template("topi/batch_matmul_tensorcore.cuda")
def batch_matmul_tensorcore_cuda(batch: int, M: int, N: int, K: int, dtype: str = "float16",
                                 out_dtype: str = "float32", layout_b: str = "row_major"):
    """``C[b] = A[b] @ B[b]`` (or ``A[b] @ B[b].T``, ``layout_b="col_major"``) on tensor cores, the
    knobs of ``topi/matmul_tensorcore.cuda`` (same filter, per batch element).

    >>> task = autotune.task.create("topi/batch_matmul_tensorcore.cuda",
    ...                             args=(12, 128, 128, 64, "float16", "float16", "col_major"), target="cuda")
    """
    check_shape("topi/batch_matmul_tensorcore.cuda", M, N, K, dtype)
    cfg = autotune.get_config()
    _knobs(cfg)

    def ok(o):
        return fits(M, N, K, dtype, layout_b, o["block"], o["warp"], o["chunk"], o["stages"], o["raster"])

    cfg.multi_filter(lambda e: ok(_vals(e)))
    cfg.add_flop(2.0 * batch * M * N * K)
    opts = None if cfg.is_fallback else _vals(cfg)
    if opts is not None and not ok(opts):
        # only while the space is collected (multi_filter keeps such configs out): flagged, and
        # the schedule built is the fallback's, as block_axes refuses tiles that do not divide
        cfg.raise_error("the tiles do not divide the problem or the block does not fit the GPU")
        opts = None
    opts = opts or _fallback(ok, FALLBACKS)
    return batch_matmul_tensorcore(batch, M, N, K, impl="mma", layout_b=layout_b, dtype=dtype, out_dtype=out_dtype,
                                   double_buffer=False, **opts)


def dense_fits(M, N, K, dtype, block, warp, chunk, stages, raster=0, vec=4) -> bool:
    """``fits`` for the GEMM plus the epilogue: the shared float32 tile of the block on top of the
    operand tiles, and the block tile whole ``vec``-element steps of all threads."""
    if not fits(M, N, K, dtype, "col_major", block, warp, chunk, stages, raster):
        return False
    bm, bn = (TILE * b * w for b, w in zip(block, warp))
    threads = 32 * block[0] * block[1]
    epilogue = bm * (bn + 4) * 4
    return (bm * bn % (vec * threads) == 0
            and shared_bytes(dtype, "col_major", block, warp, chunk, stages) + epilogue <= SHARED_LIMIT)


@autotune.template("topi/dense_tensorcore.cuda")
def dense_tensorcore_cuda(M: int, N: int, K: int, dtype: str = "float16", out_dtype: str = "float16",
                          gelu_form: str = "erf"):
    """``Y = gelu(X @ W.T + bias)`` on tensor cores with the epilogue fused (``dense_tensorcore``):
    the knobs of ``topi/matmul_tensorcore.cuda`` and ``vec`` (epilogue elements per thread step).

    >>> task = autotune.task.create("topi/dense_tensorcore.cuda", args=(1024, 3072, 768, "float16", "float16",
    ...                                                                "erf"), target="cuda")
    """
    check_shape("topi/dense_tensorcore.cuda", M, N, K, dtype)
    cfg = autotune.get_config()
    _knobs(cfg)
    cfg.define_knob("vec", [4, 2])

    def ok(o, vec):
        return dense_fits(M, N, K, dtype, o["block"], o["warp"], o["chunk"], o["stages"], o["raster"], vec)

    cfg.multi_filter(lambda e: ok(_vals(e), e["vec"].val))
    cfg.add_flop(2.0 * M * N * K)
    opts, vec = (None, 4) if cfg.is_fallback else (_vals(cfg), cfg["vec"].val)
    if opts is not None and not ok(opts, vec):
        cfg.raise_error("the tiles do not divide the problem or the block does not fit the GPU")   # as above
        opts, vec = None, 4
    opts = opts or _fallback(lambda o: ok(o, 4), FALLBACKS)
    return dense_tensorcore(M, N, K, dtype=dtype, out_dtype=out_dtype, gelu_form=gelu_form, vec=vec, **opts)
