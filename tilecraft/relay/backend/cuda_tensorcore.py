"""Fused groups on tensor cores for ``relay.build(target="cuda")``: convolutions (NHWC, made by
``transform/tensorcore_layout.py``), dense layers and batch_matmuls of float16 (and TF32
convolutions), each with its element-wise epilogue, plus float16 softmax and layer-norm rows.

The anchor is computed as a GEMM accumulated in float32 by the tensor-core templates' computes:

* ``nn.conv2d`` NHWC / OHWI: ``conv2d_nhwc_gemm`` (``topi/conv2d_nhwc_tensorcore.py``: the
  implicit GEMM, M = N·OH·OW output pixels, N = the output channels, the input gathered into the
  shared-memory fetch with ``cp.async`` zero-fill at the borders);
* ``nn.dense`` (``X @ W.T``) and ``nn.batch_matmul`` (equal batches, ``y`` transposed or not):
  ``gemm_compute`` (``topi/tensorcore.py``), B ``col_major`` for ``W`` and ``y.T``.

The schedule is ``dense_tensorcore``'s (``topi/tensorcore_nn.py``): the GEMM main loop of
``schedule_mainloop`` (``mma.sync`` m16n8k16, a ``cp.async`` ring of ``stages``), the warps'
float32 accumulators stored to a shared tile in the anchor's dtype (rounded to float16 as the
graph's anchor result is: half the shared memory of a float32 tile), and all threads of the
block then reading it ``VEC`` elements at a time to apply the group's epilogue (bias,
batch-norm shift, ReLU, a residual add: whatever element-wise operators fusion put after the
anchor) and write the output. A convolution's output is written as its (N·OH·OW, K) view (the
kernel's ``arg_shapes``), which is the NHWC tensor's memory.

The configuration (``block``, ``warp``, ``chunk``, ``stages``, ``raster``, ``min_blocks``) is the
template's for the workload, tuned inside ``autotune.apply_history_best`` (workloads
``topi/conv2d_nhwc_tensorcore.cuda``, ``topi/dense_tensorcore.cuda`` with ``gelu_form="none"``,
``topi/batch_matmul_tensorcore.cuda``: what ``extract_from_program`` yields) when it also fits
with the epilogue's shared tile, else ``fallback_options``: the largest of a list of block
tiles that fits and fills the GPU.

>>> out, anchor = tensorcore_anchor(call, ins)                        # doctest: +SKIP
>>> s, Y, shapes = schedule_tensorcore_group(out, anchor, inputs)     # doctest: +SKIP
"""
from __future__ import annotations

from tilecraft import te
from tilecraft.schedule import create_schedule

from ..ir import Call, RelayError
from .te_compiler import _Anchor, _inline_injective, _query, _shape

VEC = 4                  # epilogue elements per thread step
GEMM_DTYPES = ("float16",)


# untuned: block tiles (warps per block, 16 x 16 tiles per warp), largest first, each with the
# deepest pipeline that fits; the first giving at least MIN_BLOCKS blocks (one per multiprocessor
# of an H100), else the one with the most. Between the conv template's 128 x 64 and 16 x 16 this
# has 32-row tiles (ResNet-50's 7 x 7 layers at batch 32 have 1568 = 49 x 32 rows) and keeps a
# cp.async ring on small ones (a BERT layer's 128-row GEMMs)
FALLBACK_TILES = [((2, 2), (4, 4)), ((2, 2), (4, 2)), ((2, 2), (2, 4)), ((2, 2), (2, 2)), ((2, 2), (2, 1)),
                  ((2, 2), (1, 2)), ((2, 2), (1, 1)), ((2, 1), (1, 1)), ((1, 2), (1, 1)), ((1, 1), (1, 1))]
PIPELINES = ((2, 3), (2, 2), (1, 3), (1, 2), (1, 0))          # (chunk, stages)
MIN_BLOCKS = 132


def fallback_options(M: int, N: int, ok):
    """The untuned configuration of an M x N tensor-core GEMM (``FALLBACK_TILES``), or None when
    none fits ``ok``.

    >>> fallback_options(1568, 512, _fits(1568, 512, 4608, "float16", "col_major"))["warp"]   # 32 x 64
    (1, 2)
    """
    from tilecraft.topi.tensorcore import TILE
    fitting = []
    for block, warp in FALLBACK_TILES:
        for chunk, stages in PIPELINES:
            o = dict(block=block, warp=warp, chunk=chunk, stages=stages, raster=0,
                     min_blocks=2 if warp[0] * warp[1] >= 8 else 0)
            if ok(o):
                fitting.append(o)
                break

    def blocks(o):
        return (M // (TILE * o["block"][0] * o["warp"][0])) * (N // (TILE * o["block"][1] * o["warp"][1]))
    if not fitting:
        return None
    return next((o for o in fitting if blocks(o) >= MIN_BLOCKS), None) or max(fitting, key=blocks)


def _opts(cfg, knobs, ok, M, N):
    """The tuned configuration when the log has one that fits ``ok``, else the fallback."""
    if cfg is not None and not getattr(cfg, "is_fallback", True):
        try:
            tuned = {k: cfg[k].val for k in knobs}
        except (KeyError, AttributeError):
            tuned = None
        if tuned is not None and ok(tuned):
            return tuned
    return fallback_options(M, N, ok)


def _bytes(dtype: str) -> int:
    return 2 if dtype == "float16" else 4


def _fits(M, N, K, dtype, layout_b):
    """``ok(options)``: the GEMM tiles fit (``tensorcore_template.fits``) and so does the
    epilogue's shared tile (of ``dtype``, rows padded by 16 bytes), its elements whole ``VEC``
    steps of all threads."""
    from tilecraft.topi.tensorcore import TILE
    from tilecraft.topi.tensorcore_template import SHARED_LIMIT, fits, shared_bytes

    def ok(o):
        if not fits(M, N, K, dtype, layout_b, o["block"], o["warp"], o["chunk"], o["stages"], o.get("raster", 0)):
            return False
        bm, bn = (TILE * b * w for b, w in zip(o["block"], o["warp"]))
        threads = 32 * o["block"][0] * o["block"][1]
        return (bm * bn % (VEC * threads) == 0 and
                shared_bytes(dtype, layout_b, o["block"], o["warp"], o["chunk"], o["stages"])
                + bm * (bn + 16 // _bytes(dtype)) * _bytes(dtype) <= SHARED_LIMIT)
    return ok


_KNOBS = ("block", "warp", "chunk", "stages", "raster", "min_blocks")


def tensorcore_anchor(call: Call, ins: list):
    """``(output, anchor)`` when the call runs on tensor cores (module docstring), else None."""
    name = call.op.name
    if name == "nn.conv2d" and call.attrs.data_layout == "NHWC":
        return _conv(call, ins)
    if call.ty.dtype not in GEMM_DTYPES:
        return None
    # the dense / batch_matmul templates, whose workloads are asked (and extracted as tasks)
    import tilecraft.topi.tensorcore_nn  # noqa: F401
    if name == "nn.dense":
        (M, K), N = call.args[0].ty.shape, call.args[1].ty.shape[0]
        ok = _fits(M, N, K, call.ty.dtype, "col_major")
        if M % 16 or N % 16 or K % 16 or _opts(None, _KNOBS, ok, M, N) is None:
            return None
        cfg = _query(("topi/dense_tensorcore.cuda", M, N, K, call.ty.dtype, call.ty.dtype, "none"))
        return _gemm(call, ins[0], ins[1], "col_major", _opts(cfg, _KNOBS, ok, M, N))
    if name == "nn.batch_matmul" and not call.attrs.transpose_a:
        x, y = call.args[0].ty.shape, call.args[1].ty.shape
        if x[0] != y[0]:
            return None
        layout_b = "col_major" if call.attrs.transpose_b else "row_major"
        batch, M, K = x
        N = y[1] if call.attrs.transpose_b else y[2]
        if M % 16 or N % 16 or K % 16:
            return None
        ok = _fits(M, N, K, call.ty.dtype, layout_b)
        if _opts(None, _KNOBS, ok, batch * M, N) is None:
            return None
        cfg = _query(("topi/batch_matmul_tensorcore.cuda", batch, M, N, K, call.ty.dtype, call.ty.dtype, layout_b))
        # the fallback counts the blocks of all batches (blockIdx.z)
        return _gemm(call, ins[0], ins[1], layout_b, _opts(cfg, _KNOBS, ok, batch * M, N))
    return None


def _gemm(call, A, B, layout_b, opts):
    from tilecraft.topi.tensorcore import gemm_compute
    dtype = call.ty.dtype
    Cacc = gemm_compute(A, B, layout_b, "float32", name="gemm")
    CS = _shared_copy(Cacc, dtype)
    out = te.compute(Cacc.shape, lambda *i: CS[i], name="gemm_out")
    return out, _Anchor("tensorcore", A=A, B=B, Cacc=Cacc, CS=CS, out=out, dtype=dtype, layout_b=layout_b, opts=opts,
                        inline=())


def conv_ok(M, K, C, R, S, dtype):
    """``ok(options)`` of an implicit-GEMM convolution: ``_fits`` with the reduction over R·S
    taps of C channels, a step within one tap."""
    from tilecraft.topi.tensorcore import KINDS
    gemm_ok = _fits(M, K, R * S * C, dtype, "col_major")
    return lambda o: C % (KINDS[dtype][0] * o["chunk"]) == 0 and gemm_ok(o)


def conv_fits(M, K, C, R, S, dtype) -> bool:
    """Whether some configuration runs this convolution on tensor cores (``TensorCoreLayout`` asks).

    >>> conv_fits(32 * 56 * 56, 64, 64, 3, 3, "float16"), conv_fits(49, 512, 512, 3, 3, "float16")
    (True, False)
    """
    return _opts(None, _KNOBS, conv_ok(M, K, C, R, S, dtype), M, K) is not None


def _conv(call, ins):
    from tilecraft.topi.conv2d_nhwc_tensorcore import conv2d_nhwc_gemm, out_size
    X, Wt = ins
    N, H, W, C = call.args[0].ty.shape
    K, R, S, _ = call.args[1].ty.shape
    stride, pad = call.attrs.strides[0], call.attrs.padding[0]
    dtype = call.ty.dtype
    OH, OW = out_size(H, W, R, S, stride, pad)
    M = N * OH * OW
    A, B, Yacc = conv2d_nhwc_gemm(X, Wt, stride, pad, "float32")
    CS = _shared_copy(Yacc, dtype)
    # the group's value as the relay type has it (what compute_group and task extraction see) and
    # as the kernel computes it: the (N·OH·OW, K) view, whose reads of CS bound inference follows
    out = te.compute((N, OH, OW, K), lambda n, h, w, k: CS[(n * OH + h) * OW + w, k], name="conv_nhwc")
    out2 = te.compute((M, K), lambda m, k: CS[m, k], name="conv_nhwc")
    ok = conv_ok(M, K, C, R, S, dtype)
    cfg = None
    if dtype == "float16":       # the template's workload (it takes float16 / bfloat16 operands; TF32: fallback)
        cfg = _query(("topi/conv2d_nhwc_tensorcore.cuda", N, H, W, C, K, R, S, stride, pad, dtype, dtype))
    return out, _Anchor("tensorcore", A=A, B=B, Cacc=Yacc, CS=CS, out=out, dtype=dtype, layout_b="col_major",
                        opts=_opts(cfg, _KNOBS, ok, M, K), inline=(A, B), out2=out2)


def compute_conv_group(fn, conv):
    """``(inputs, output, anchor)`` of a group whose anchor is the NHWC convolution ``conv``,
    computed on the (N·OH·OW, K) view of the output: the epilogue reads a same-shaped input
    through a 2-d view of it, a per-channel constant (``[1, 1, 1, K]``, ``[K]``) as ``[K]``."""
    from ..ir import Constant, Var, post_order
    inputs = [te.placeholder(p.ty.shape, dtype=p.ty.dtype, name=f"p{k}") for k, p in enumerate(fn.params)]
    values = {id(p): t for p, t in zip(fn.params, inputs)}
    _, anchor = tensorcore_anchor(conv, [values[id(a)] for a in conv.args])
    out2 = anchor.parts["out2"]
    M, K = _shape(out2)
    full = tuple(conv.ty.shape)
    views: dict = {}

    def as_2d(node, t):
        """A value of the relay shape (the output's, or per channel) as the kernel reads it."""
        if id(node) not in views:
            shape = _shape(t)
            if shape == full:
                views[id(node)] = te.compute((M, K), lambda m, k: t[m // (full[1] * full[2]), m // full[2] % full[1],
                                                                    m % full[2], k], name=f"{t.op.name}_2d")
            elif shape and all(d == 1 for d in shape[:-1]) and shape[-1] in (1, K):
                views[id(node)] = te.compute((shape[-1],), lambda k: t[(0,) * (len(shape) - 1) + (k,)],
                                             name=f"{t.op.name}_k")
            else:
                raise RelayError(f"lowering {fn.attrs.get('Name', 'fn')}: the convolution's epilogue reads a "
                                 f"{list(shape)} value, neither the output's shape {list(full)} nor per channel")
        return views[id(node)]
    flat = set()                 # the values computed on the (N·OH·OW, K) view
    for n in post_order(fn.body):
        t = type(n)
        if t is Var:
            continue
        if t is Constant:
            values[id(n)] = te.const(n.data.item(), n.data.dtype.name)
        elif n is conv:
            values[id(n)], _ = out2, flat.add(id(n))
        else:
            if any(id(a) in flat for a in n.args):
                ins = [values[id(a)] if id(a) in flat or type(a) is Constant else as_2d(a, values[id(a)])
                       for a in n.args]
                flat.add(id(n))
            else:
                ins = [values[id(a)] for a in n.args]
            values[id(n)] = n.op.compute(n.attrs, ins, n.ty)
    return inputs, values[id(fn.body)], anchor


def _shared_copy(Cacc, dtype):
    """The stage the warps store their accumulator tiles to (shared memory), which the epilogue
    reads: rounded to the anchor's dtype, as the graph has the anchor's result (float16: half the
    shared memory, so two 128 x 128 blocks fit a multiprocessor)."""
    return te.compute(Cacc.shape, lambda *i: Cacc[i].astype(dtype) if dtype != Cacc.dtype else Cacc[i],
                      name="acc_shared")


def schedule_tensorcore_group(out, anchor, inputs):
    """``(schedule, output tensor, arg_shapes)`` of a group whose anchor is ``tensorcore_anchor``'s
    and whose output ``out`` has the anchor's shape (module docstring); ``arg_shapes`` is None
    or the shapes the kernel's arguments are passed as (a convolution's output as 2-d)."""
    from tilecraft.topi.tensorcore import TILE, accumulator_stage, block_axes, schedule_mainloop, store_matrix
    p = anchor.parts
    A, B, Cacc, CS, o = p["A"], p["B"], p["Cacc"], p["CS"], p["opts"]
    Y = out
    shapes = [_shape(t) for t in inputs] + [_shape(Y)] if "out2" in p else None
    s = create_schedule(Y.op)
    _inline_injective(s, keep={A.op, B.op, CS.op} if p["inline"] else {CS.op})
    accumulator_stage(s, Cacc, CS, "mma")
    s[CS].set_scope("shared")
    block, warp = o["block"], o["warp"]
    bx, yi, yj = block_axes(s, Y, block, warp, o.get("raster", 0), o.get("min_blocks", 0))
    s[CS].compute_at(s[Y], bx)
    ci, cj = CS.op.axis[-2:]
    schedule_mainloop(s, A, B, Cacc, CS, ci, cj, store_matrix("mma", dst_scope="shared", acc="float32", out=CS.dtype),
                      impl="mma", layout_b=p["layout_b"], block=block, warp=warp, chunk=o["chunk"], pad=None,
                      double_buffer=False, unroll=True, stages=o["stages"], prefetch=False, dtype=A.dtype)
    s[CS].storage_align(ci, TILE * block[1] * warp[1], 16 // _bytes(CS.dtype))     # rows 16 bytes apart in banks
    f = s[Y].fuse(yi, yj)
    f, v = s[Y].split(f, factor=VEC)
    f, tx = s[Y].split(f, factor=32)
    f, ty = s[Y].split(f, factor=block[0])
    f, tz = s[Y].split(f, factor=block[1])
    s[Y].bind(tx, te.thread_axis("threadIdx.x"))
    s[Y].bind(ty, te.thread_axis("threadIdx.y"))
    s[Y].bind(tz, te.thread_axis("threadIdx.z"))
    s[Y].vectorize(v)
    for t in p["inline"]:
        s[t].compute_inline()
    return s, Y, shapes


def fp16_row_kernel(fn_body):
    """``(schedule, args, arg_shapes)`` of a float16 softmax or layer_norm over the last axis (a
    block per row, the row in shared memory, cross-thread sums in float32, the output rounded
    once), or None for anything else."""
    from tilecraft.topi.cuda_schedules import bx, tx
    name, ty = fn_body.op.name, fn_body.ty
    rows, n = ty.size // ty.shape[-1], ty.shape[-1]
    if fn_body.attrs.axis % ty.ndim != ty.ndim - 1:
        return None
    f32 = "float32"
    X = te.placeholder((rows, n), "float16", name="X")
    k1 = te.reduce_axis((0, n), "k1")
    k2 = te.reduce_axis((0, n), "k2")
    threads = min(256 if name == "nn.softmax" else 128, _pow2_at_least(n // 2))
    if name == "nn.softmax":
        R1 = te.compute((rows,), lambda i: te.max(X[i, k1].astype(f32), axis=k1), name="Mx")
        R2 = te.compute((rows,), lambda i: te.sum(te.exp(X[i, k2].astype(f32) - R1[i]), axis=k2), name="Sm")
        Y = te.compute((rows, n), lambda i, j: (te.exp(X[i, j].astype(f32) - R1[i]) / R2[i]).astype("float16"),
                       name="Y")
        args, shapes = [X, Y], [(rows, n), (rows, n)]
    elif name == "nn.layer_norm" and fn_body.attrs.center and fn_body.attrs.scale:
        eps = float(fn_body.attrs.epsilon)
        G = te.placeholder((n,), "float16", name="gamma")
        Bt = te.placeholder((n,), "float16", name="beta")
        R1 = te.compute((rows,), lambda i: te.sum(X[i, k1].astype(f32), axis=k1), name="S1")
        R2 = te.compute((rows,), lambda i: te.sum(X[i, k2].astype(f32) * X[i, k2].astype(f32), axis=k2), name="S2")
        inv = 1.0 / n

        def norm(i, j):
            mean = R1[i] * inv
            var = R2[i] * inv - mean * mean
            return ((X[i, j].astype(f32) - mean) * te.rsqrt(var + eps) * G[j].astype(f32)
                    + Bt[j].astype(f32)).astype("float16")
        Y = te.compute((rows, n), norm, name="Y")
        args, shapes = [X, G, Bt, Y], [(rows, n), (n,), (n,), (rows, n)]
    else:
        return None
    s = te.create_schedule(Y.op)
    XS = s.cache_read(X, "shared", [R1, R2, Y])
    i, j = s[Y].op.axis
    s[Y].bind(i, bx())
    jo, jv = s[Y].split(j, factor=2 if n % 2 == 0 else 1)
    jo, jt = s[Y].split(jo, factor=threads)
    s[Y].bind(jt, tx())
    s[Y].vectorize(jv)
    for R in (R1, R2):
        s[R].set_scope("local")
        s[R].compute_at(s[Y], i)
        _, kt = s[R].split(s[R].op.reduce_axis[0], factor=threads)
        s[R].bind(kt, tx())
    s[XS].compute_at(s[Y], i)
    vec = 8 if n % 8 == 0 else 1
    f = s[XS].fuse(*s[XS].op.axis)
    f, v = s[XS].split(f, factor=vec)
    f, t0 = s[XS].split(f, factor=threads)
    s[XS].bind(t0, tx())
    s[XS].vectorize(v)
    return s, args, shapes


def _pow2_at_least(n: int) -> int:
    p = 32
    while p < n:
        p *= 2
    return p
