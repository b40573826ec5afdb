"""Lower one primitive function (a fused group) for the GPU: a scheduled TE computation and a
``PrimFunc`` for ``target="cuda"``.

The group is computed as on the CPU (``te_compiler.compute_group``: each operator by its topi
compute) except for its anchor, and scheduled by that anchor:

* an NHWC ``nn.conv2d`` (``TensorCoreLayout``'s), a float16 ``nn.dense`` or ``nn.batch_matmul``
  that the tensor cores take: ``cuda_tensorcore.py`` (implicit GEMM / GEMM on ``mma.sync``, the
  epilogue applied from a shared tile); a convolution group is computed on the (N·OH·OW, K) view
  (``compute_conv_group``);
* ``nn.conv2d`` (one group, no dilation, square stride, symmetric padding, float32, or float16
  summed in float32): the direct
  convolution of ``topi/conv2d_nchw.cuda`` (``topi/cuda_schedules.conv2d_nchw``: a block per
  ``tile_co`` channels x ``tile_y x tile_x`` pixels, the padded input patch and the transposed
  weights in shared memory, a register tile per thread), with the template's config for the
  workload (tuned inside ``autotune.apply_history_best``, the template's fallback tiles
  otherwise). The element-wise epilogue (bias, batch-norm shift, ReLU, a residual add) is the
  stage the threads write; the convolution is their register accumulator.
* ``nn.dense`` and ``nn.batch_matmul``: with at least 16 rows, shared-memory tiles of 64 x 64
  outputs (32 x 32 when that gives fewer than 128 blocks), 16 deep, 16 x 16 threads each holding
  a 4 x 4 (2 x 2) register tile of neighbouring rows and columns, the shared rows padded by a
  word (fewer bank conflicts); with fewer rows (a batch-1 classifier) a block per output whose
  threads split the reduction (a cross-thread sum).
  Float16 ones the tensor cores do not take: the same on a float32 accumulator.
* a group that is one softmax or layer_norm over the last axis: the one-kernel row schedules of
  ``topi/cuda_schedules.py`` (a block per row, cross-thread reductions) on ``[rows, N]`` views;
  float16: ``cuda_tensorcore.fp16_row_kernel`` (the same, summed in float32).
* an NHWC pooling (``TensorCoreLayout``'s): ``topi/pooling_cuda.py`` (a thread per output pixel
  and 16 bytes of channels, the window reduced in registers, vectorized over the channels);
* anything else (element-wise and injective groups, NCHW pooling, reductions): injective stages
  inlined; every remaining stage one thread per output element, 256 threads per block.

>>> func, views = lower_primitive_cuda(fn, "fused_nn_conv2d_add_nn_relu")   # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from tilecraft import te
from tilecraft.schedule import create_schedule, lower

from ..ir import Call, Function, RelayError, Var, post_order
from .te_compiler import _POOLS, _Anchor, _extent, _inline_injective, _query, _shape, compute_group

THREADS = 256            # threads per block of the one-thread-per-element schedule
GEMM_TILE = 64           # output rows and columns per block of the tiled GEMM
GEMM_THREADS = 16        # threads per block side (16 x 16); each thread holds 4 x 4 outputs
GEMM_DEPTH = 16          # k per shared-memory tile
GEMV_ROWS = 16           # fewer rows than this: a block per output, the reduction over its threads
GEMV_THREADS = 64
MIN_BLOCKS = 256         # a conv2d fallback with fewer blocks splits its input channels (132 SMs on an H100)
BATCH_TILES_MIN_N = 8    # untuned conv2d on this many images or more: larger register tiles (_batch_tiles)


def _bx():
    return te.thread_axis("blockIdx.x")


def _tx():
    return te.thread_axis("threadIdx.x")


def conv2d_workload(call: Call) -> tuple:
    """The ``topi/conv2d_nchw.cuda`` workload of an NCHW conv2d call (what the log is asked)."""
    N, CI, H, W = call.args[0].ty.shape
    CO, _, KH, KW = call.args[1].ty.shape
    return ("topi/conv2d_nchw.cuda", N, CI, H, W, CO, KH, KW, call.attrs.strides[0], call.attrs.padding[0],
            call.ty.dtype)


def conv2d_tiles(call: Call) -> dict:
    """The CUDA conv2d template's tile sizes for this call: the config the dispatch context
    gives (a tuned one from a log), or the template's fallback tiles."""
    from tilecraft.topi.conv2d_cuda import conv_tiles_ok, fallback_tiles
    wl = conv2d_workload(call)
    _, N, CI, H, W, CO, KH, KW, stride, pad, _ = wl
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1
    cfg = _query(wl)
    tiles = None
    if cfg is not None and not getattr(cfg, "is_fallback", True):
        try:
            knobs = {k: cfg[k].val for k in ("tile_co", "tile_y", "tile_x", "co_per_thread", "ci_tile",
                                             "x_per_thread")}
            knobs["k_split"] = cfg["k_split"].val if OH * OW <= 64 else 1
            knobs["n_per_block"] = cfg["n_per_block"].val if N > 1 else 1
        except (KeyError, AttributeError):
            knobs = None
        if knobs and conv_tiles_ok(CI, OH, OW, CO, KH, KW, knobs["tile_co"], knobs["tile_y"], knobs["tile_x"],
                                   knobs["co_per_thread"], knobs["ci_tile"], knobs["x_per_thread"], stride,
                                   knobs["k_split"], knobs["n_per_block"], N):
            tiles = knobs
    if tiles is None and N >= BATCH_TILES_MIN_N:
        tiles = _batch_tiles(N, CI, OH, OW, CO, KH, KW, stride)
    if tiles is None:
        tiles = dict(fallback_tiles(CI, OH, OW, CO, KH, KW, stride), x_per_thread=1, k_split=1, n_per_block=1)
        tiles["k_split"] = _fallback_k_split(N, CI, OH, OW, CO, tiles)
    return tiles


def _batch_tiles(N, CI, OH, OW, CO, KH, KW, stride) -> dict | None:
    """Without a tuned config, on a batch of ``BATCH_TILES_MIN_N`` images or more (blocks to
    spare): the shape of the best configs of the H100 batch-32 tuning logs
    (bench/results/cuda_tuning/cuda_conv2d_*_b32.jsonl): 32 channels x up to 14 x 14 pixels per
    block, 4 channels x 2 pixels x 2 images per thread; None when it does not fit the layer."""
    from tilecraft.topi.conv2d_cuda import conv_tiles_ok

    def best_div(n, want):
        return max(d for d in range(1, min(n, want) + 1) if n % d == 0)
    ty, tx = best_div(OH, 14), best_div(OW, 14)
    xpt, npb = (2 if tx % 2 == 0 else 1), (2 if N % 2 == 0 else 1)
    for tile_co, cpt in ((32, 4), (16, 4)):
        for ci_tile in (16, 8, 4):
            if conv_tiles_ok(CI, OH, OW, CO, KH, KW, tile_co, ty, tx, cpt, ci_tile, xpt, stride, 1, npb, N):
                return dict(tile_co=tile_co, tile_y=ty, tile_x=tx, co_per_thread=cpt, ci_tile=ci_tile,
                            x_per_thread=xpt, k_split=1, n_per_block=npb)
    return None


def _fallback_k_split(N, CI, OH, OW, CO, tiles) -> int:
    """Without a tuned config: split the input channels over 2, 4 or 8 blocks (a second kernel
    sums the parts) while the output alone gives fewer than ``MIN_BLOCKS`` blocks and each part
    keeps at least 64 channels: the deep layers of a batch-1 network (7 x 7 and 14 x 14 images,
    hundreds of channels) would otherwise leave most multiprocessors idle."""
    blocks = N * (CO // tiles["tile_co"]) * (OH // tiles["tile_y"]) * (OW // tiles["tile_x"])
    k = 1
    while k < 8 and blocks * k < MIN_BLOCKS and CI % (tiles["ci_tile"] * k * 2) == 0 and CI // (k * 2) >= 64:
        k *= 2
    return k


def _conv2d_cuda(call: Call, ins: list):
    """The stages of ``topi/cuda_schedules.conv2d_nchw`` on the group's tensors."""
    data, kernel = ins
    N, CI, H, W = call.args[0].ty.shape
    CO, _, KH, KW = call.args[1].ty.shape
    stride, pad = call.attrs.strides[0], call.attrs.padding[0]
    dtype = call.ty.dtype
    tiles = conv2d_tiles(call)
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1
    if KH == KW == 1 and (stride > 1 or pad > 0):
        # a 1x1 convolution reads every stride-th pixel: gather just those (a stride-1 convolution
        # of them), so the shared patch holds what is used, not the strided span (4x at stride 2)
        def pixel(n, c, y, x):
            if pad == 0:
                return data[n, c, y * stride, x * stride]
            return te.if_then_else(te.all(y * stride >= pad, y * stride < H + pad, x * stride >= pad,
                                          x * stride < W + pad),
                                   data[n, c, y * stride - pad, x * stride - pad], te.const(0, dtype))
        Pad, step = te.compute((N, CI, OH, OW), pixel, name="Pad"), 1
    else:
        step = stride
        Pad = te.compute((N, CI, H + 2 * pad, W + 2 * pad),
                         lambda n, c, y, x: te.if_then_else(
                             te.all(y >= pad, y < H + pad, x >= pad, x < W + pad),
                             data[n, c, y - pad, x - pad], te.const(0, dtype)), name="Pad")
    WT = te.compute((CI, KH, KW, CO), lambda c, ry, rx, o: kernel[o, c, ry, rx], name="WT")
    k_split = tiles["k_split"]
    cs = CI // k_split
    rc = te.reduce_axis((0, cs), "rc")
    ry = te.reduce_axis((0, KH), "ry")
    rx = te.reduce_axis((0, KW), "rx")
    acc = "float32"                      # float16 operands: products summed in float32, rounded once

    def prod(a, b):
        return a * b if dtype == acc else a.astype(acc) * b.astype(acc)
    if k_split == 1:
        Conv = Acc = te.compute((N, CO, OH, OW), lambda n, o, y, x: te.sum(
            prod(Pad[n, rc, y * step + ry, x * step + rx], WT[rc, ry, rx, o]), axis=[rc, ry, rx]), name="conv")
    else:
        Acc = te.compute((k_split, N, CO, OH, OW), lambda k, n, o, y, x: te.sum(
            prod(Pad[n, k * cs + rc, y * step + ry, x * step + rx], WT[k * cs + rc, ry, rx, o]),
            axis=[rc, ry, rx]), name="conv_partial")
        kk = te.reduce_axis((0, k_split), "kk")
        Conv = te.compute((N, CO, OH, OW), lambda n, o, y, x: te.sum(Acc[kk, n, o, y, x], axis=kk), name="conv")
    Out = Conv if dtype == acc else te.compute(Conv.shape, lambda *i: Conv[i].astype(dtype), name="conv_cast")
    return Out, _Anchor("conv2d_cuda", Pad=Pad, WT=WT, Acc=Acc, Conv=Conv, Out=Out, tiles=tiles,
                        split_k=k_split > 1)


def cuda_anchor(call: Call, ins: list):
    """``(output, anchor)`` for an anchor the GPU schedules specially (conv2d, dense,
    batch_matmul: on tensor cores where ``cuda_tensorcore.tensorcore_anchor`` takes them), else
    None (``compute_group``'s ``anchor_of``)."""
    from .cuda_tensorcore import tensorcore_anchor
    name = call.op.name
    tc = tensorcore_anchor(call, ins)
    if tc is not None:
        return tc
    if name == "nn.conv2d" and call.attrs.data_layout == "NCHW" and _conv_fits_cuda(call):
        return _conv2d_cuda(call, ins)
    if name in _POOLS and call.attrs.layout == "NHWC":
        from tilecraft.topi import pooling_cuda
        a = call.attrs
        if name in ("nn.max_pool2d", "nn.avg_pool2d"):
            out, red = pooling_cuda.pool2d_nhwc(ins[0], name[3:6], a.pool_size, a.strides, a.padding, a.dilation,
                                                a.get("count_include_pad", False))
        else:
            out, red = pooling_cuda.global_pool_nhwc(ins[0], name[10:13])
        return out, _Anchor("pool_nhwc", out=out, red=red)
    if name in ("nn.dense", "nn.batch_matmul") and call.ty.dtype in ("float32", "float16"):
        if call.ty.dtype == "float32":
            out = call.op.compute(call.attrs, ins, call.ty)
            return out, _Anchor("gemm", C=out)
        # float16: the same schedule on a float32 accumulator, rounded once by the epilogue
        C = _gemm_f32(call, *ins)
        return te.compute(C.shape, lambda *i: C[i].astype("float16"), name="gemm_out"), _Anchor("gemm", C=C)
    return None


def _gemm_f32(call: Call, x, y):
    """A float16 dense (``x @ y.T``) or batch_matmul summed in float32 (``topi.nn``'s indexing)."""
    f32 = "float32"
    if call.op.name == "nn.dense":
        (M, K), N = _shape(x), _shape(y)[0]
        k = te.reduce_axis((0, K), name="k")
        return te.compute((M, N), lambda i, j: te.sum(x[i, k].astype(f32) * y[j, k].astype(f32), axis=k),
                          name="dense")
    ta, tb = call.attrs.transpose_a, call.attrs.transpose_b
    B, M, N = call.ty.shape
    K = _shape(x)[1] if ta else _shape(x)[2]
    B1, B2 = _shape(x)[0], _shape(y)[0]
    k = te.reduce_axis((0, K), name="k")

    def f(b, i, j):
        bx, by = (0 if B1 == 1 else b), (0 if B2 == 1 else b)
        a = x[bx, k, i] if ta else x[bx, i, k]
        c = y[by, j, k] if tb else y[by, k, j]
        return te.sum(a.astype(f32) * c.astype(f32), axis=k)
    return te.compute((B, M, N), f, name="batch_matmul")


def _conv_fits_cuda(call: Call) -> bool:
    """``_conv_fits`` for the GPU's direct convolution, which takes float16 too (summed in float32)."""
    a = call.attrs
    pt, pl, pb, pr = a.padding
    return (a.groups == 1 and tuple(a.dilation) == (1, 1) and a.strides[0] == a.strides[1]
            and pt == pl == pb == pr and call.ty.dtype in ("float32", "float16"))


def _bind_threads(s, stage, threads: int = THREADS) -> None:
    """One thread per element of ``stage``: its axes fused, ``threads`` per block."""
    axes = list(s[stage].op.axis)
    if not axes:
        return
    f = s[stage].fuse(*axes) if len(axes) > 1 else axes[0]
    b, t = s[stage].split(f, factor=threads)
    s[stage].bind(b, _bx())
    s[stage].bind(t, _tx())


def _schedule_conv2d(s, p: dict, out) -> None:
    """``topi/cuda_schedules.conv2d_nchw``'s schedule with the group's epilogue: the stage the
    threads bind is the group's output; the convolution is computed into registers at each
    thread (the template's ``cache_write(..., "local")``)."""
    Pad, WT, Acc, Conv, t = p["Pad"], p["WT"], p["Acc"], p["Conv"], p["tiles"]
    s[Pad].compute_inline()
    s[WT].set_scope("shared")
    PS = s.cache_read(Pad, "shared", [Acc])
    WL = s.cache_read(WT, "local", [Acc])
    split_k = p["split_k"]
    if split_k or out is Acc:
        OL, bound = s.cache_write(Acc, "local"), Acc
    else:                        # the epilogue writes; the convolution accumulates in its registers
        s[Acc].set_scope("local")
        OL, bound = Acc, out
    from tilecraft.topi.cuda_schedules import conv2d_nchw_block
    conv2d_nchw_block(s, bound, OL, PS, WT, WL, **{k: t[k] for k in (
        "tile_co", "tile_y", "tile_x", "co_per_thread", "x_per_thread", "n_per_block", "ci_tile")})
    if split_k:                  # the parts' sum (and the epilogue) one thread per output
        if out is Conv:
            _bind_threads(s, Conv, 128)
        else:
            s[Conv].set_scope("local")
            f = s[out].fuse(*s[out].op.axis)
            b, th = s[out].split(f, factor=128)
            s[out].bind(b, _bx())
            s[out].bind(th, _tx())
            s[Conv].compute_at(s[out], th)


def _schedule_gemm(s, C, out) -> None:
    """Dense / batch_matmul ``C[(b,) i, j] = sum_k ...`` with its epilogue ``out`` (see the
    module docstring for the two shapes of schedule)."""
    *batch, i, j = s[out].op.axis
    rows = _extent(i) * int(np.prod([_extent(b) for b in batch], dtype=np.int64))
    if out is C:
        local = s.cache_write(C, "local")
    else:
        s[C].set_scope("local")
        local = C
    if _extent(i) < GEMV_ROWS:
        # a block per output; its threads sum parts of k, then one of them writes
        f = s[out].fuse(*s[out].op.axis)
        s[out].bind(f, _bx())
        s[local].compute_at(s[out], f)
        (k,) = s[local].op.reduce_axis
        _, kt = s[local].split(k, factor=GEMV_THREADS)
        s[local].bind(kt, _tx())
        return
    tile, th = GEMM_TILE, GEMM_THREADS
    if rows // tile * (_extent(j) // tile) < MIN_BLOCKS // 2:
        tile = GEMM_TILE // 2        # more, smaller blocks (2 x 2 outputs per thread) on small GEMMs
    bi, ii = s[out].split(i, factor=tile)
    bj, jj = s[out].split(j, factor=tile)
    # a thread's rows and columns are neighbours (interleaving them with the other threads' would
    # need virtual threads: bound inference would give the register tile the whole span)
    it, iv = s[out].split(ii, factor=tile // th)
    jt, jv = s[out].split(jj, factor=tile // th)
    s[out].reorder(*batch, bi, bj, it, jt, iv, jv)
    if batch:
        s[out].bind(s[out].fuse(*batch) if len(batch) > 1 else batch[0], te.thread_axis("blockIdx.z"))
    s[out].bind(bi, te.thread_axis("blockIdx.y"))
    s[out].bind(bj, _bx())
    s[out].bind(it, te.thread_axis("threadIdx.y"))
    s[out].bind(jt, _tx())
    s[local].compute_at(s[out], jt)
    (k,) = s[local].op.reduce_axis
    ko, ki = s[local].split(k, factor=GEMM_DEPTH)
    s[local].reorder(ko, ki, *s[local].op.axis)
    for ax in s[local].op.axis[-2:]:
        s[local].unroll(ax)
    for operand in C.op.input_tensors:
        S = s.cache_read(operand, "shared", [local])
        s[S].compute_at(s[local], ko)
        # one word of padding per row: threads reading a column hit different banks
        s[S].storage_align(s[S].op.axis[-2], GEMM_DEPTH, 1)
        f = s[S].fuse(*s[S].op.axis)
        f, t0 = s[S].split(f, factor=th)
        f, t1 = s[S].split(f, factor=th)
        s[S].bind(t1, te.thread_axis("threadIdx.y"))
        s[S].bind(t0, _tx())


def schedule_group_cuda(out, anchor):
    """The GPU schedule of a group's output (see the module docstring)."""
    s = create_schedule(out.op)
    if anchor is not None and anchor.kind == "conv2d_cuda" and _shape(out) == _shape(anchor.parts["Out"]):
        p = anchor.parts
        _inline_injective(s, keep={p["WT"].op, p["Pad"].op})
        _schedule_conv2d(s, p, out)
        return s
    if anchor is not None and anchor.kind == "pool_nhwc" and _shape(out) == _shape(anchor.parts["out"]):
        from tilecraft.topi.pooling_cuda import schedule_pool_nhwc
        _inline_injective(s, keep=set())
        schedule_pool_nhwc(s, out, anchor.parts["red"])
        return s
    if anchor is not None and anchor.kind == "gemm" and _shape(out) == _shape(anchor.parts["C"]):
        _inline_injective(s, keep=set())
        _schedule_gemm(s, anchor.parts["C"], out)
        return s
    _inline_injective(s, keep=set())
    for st in s.stages:
        if type(st.op).__name__ == "ComputeOp" and st.attach_type == "root":
            _bind_threads(s, st.op.output(0))
    return s


def template_kernel_cuda(fn: Function):
    """``(schedule, args, arg_shapes)`` when the group is one softmax or layer_norm over the last
    axis (float32): the row schedules of ``topi/cuda_schedules.py`` on ``[rows, N]`` views;
    None otherwise."""
    from tilecraft.topi import cuda_schedules

    from .cuda_tensorcore import fp16_row_kernel
    body = fn.body
    if type(body) is not Call or isinstance(body.op, Function) or body.ty.dtype not in ("float32", "float16") or \
            any(type(a) is not Var for a in body.args):
        return None
    name, ty = body.op.name, body.ty
    if name in ("nn.softmax", "nn.layer_norm") and ty.dtype == "float16":
        return fp16_row_kernel(body)
    if ty.dtype != "float32":
        return None
    rows, n = ty.size // ty.shape[-1], ty.shape[-1]
    if name == "nn.softmax" and body.attrs.axis % ty.ndim == ty.ndim - 1:
        s, args = cuda_schedules.softmax(rows, n, "float32", threads=min(256, _pow2_at_least(n // 4)),
                                         vec=4 if n % 4 == 0 else 1)
        return s, args, [(rows, n), (rows, n)]
    if name == "nn.layer_norm" and body.attrs.axis % ty.ndim == ty.ndim - 1 and body.attrs.center and \
            body.attrs.scale:
        s, args = cuda_schedules.layer_norm(rows, n, float(body.attrs.epsilon), "float32",
                                            threads=min(128, _pow2_at_least(n)))
        return s, args, [(rows, n), (n,), (n,), (rows, n)]
    return None


def _pow2_at_least(n: int) -> int:
    """The smallest power of two >= ``n`` and >= 32 (a warp)."""
    p = 32
    while p < n:
        p *= 2
    return p


def lower_primitive_cuda(fn: Function, name: str):
    """``(PrimFunc, arg_shapes)`` of a primitive function lowered for the GPU: arguments
    ``p0, p1, ...`` then the output; ``arg_shapes`` as ``te_compiler.lower_primitive``'s."""
    whole = template_kernel_cuda(fn)
    if whole is not None:
        s, args, shapes = whole
        return lower(s, args, name=name, target="cuda"), shapes
    from .cuda_tensorcore import compute_conv_group, schedule_tensorcore_group
    conv = next((n for n in post_order(fn.body) if type(n) is Call and getattr(n.op, "name", None) == "nn.conv2d"
                 and n.attrs.data_layout == "NHWC"), None)
    if conv is not None:
        inputs, out, anchor = compute_conv_group(fn, conv)
        s, Y, shapes = schedule_tensorcore_group(out, anchor, inputs)
        return lower(s, inputs + [Y], name=name, target="cuda"), shapes
    inputs, out, anchor = compute_group(fn, cuda_anchor)
    if anchor is not None and anchor.kind == "tensorcore":
        if _shape(out) != _shape(anchor.parts["out"]):
            raise RelayError(f"lowering {name}: the tensor-core {fn.attrs.get('Name', 'group')} must end with "
                             f"element-wise operators (its result {_shape(out)}, the anchor's "
                             f"{_shape(anchor.parts['out'])})")
        s, Y, shapes = schedule_tensorcore_group(out, anchor, inputs)
        return lower(s, inputs + [Y], name=name, target="cuda"), shapes
    s = schedule_group_cuda(out, anchor)
    return lower(s, inputs + [out], name=name, target="cuda"), None
