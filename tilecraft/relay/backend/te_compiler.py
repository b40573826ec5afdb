"""Lower one primitive function (a fused group) to a scheduled TE computation and a ``PrimFunc``.

Each operator call of the group is computed by its table ``compute`` (``topi``); parameters
become placeholders ``p0, p1, ...``, scalar constants ``te.const``. The schedule depends on the
group's *anchor*:

* ``nn.contrib_conv2d_NCHWc`` (made by AlterOpLayout) whose output block is whole vectors: the
  blocked convolution tensorized with the fp32 micro-kernel (``topi/conv2d_microkernel.py``,
  ``schedule_blocked``), with the config of workload ``topi/conv2d_NCHWc_microkernel.llvm`` (tuned
  inside ``autotune.apply_history_best``, else its per-layer-class fallback); the epilogue is
  applied to each output row while it is in the L1 cache. Other blocks (8 channels with AVX-512):
  the loop-level template's schedule with the config of ``topi/conv2d_nchw.llvm``.
* ``nn.conv2d`` that the NCHW[x]c template fits (one group, no dilation, square stride,
  symmetric padding; AlterOpLayout off): computed with the template's stages and scheduled with its config, the
  tuned one inside ``autotune.apply_history_best`` (workload ``topi/conv2d_nchw.llvm``), the
  fallback otherwise; the element-wise epilogue is the stage the template writes.
* ``nn.dense`` of at most ``GEMV_MAX_ROWS`` rows (a batch-1 classifier): a matrix-vector
  product on the weight as it is, a vector of partial sums per output, outputs in parallel;
* other ``nn.dense`` (those AlterOpLayout did not make ``nn.contrib_dense_pack``): computed
  through packed weight panels (``matmul_compute``) and scheduled by the matmul template's schedule with the tuned config of ``topi/matmul.llvm``, or without one a
  fallback of register tiles of up to 8 rows x 2 vectors (the template has no fallback schedule).
* ``nn.batch_matmul`` (neither operand transposed, equal batches): the ``topi/batch_matmul.llvm``
  template's schedule with its tuned config or its fallback (an element-wise epilogue tiled with
  it); other forms: rows of all batches in parallel, columns vectorized inside the k loop;
* ``nn.contrib_attention`` (from FuseAttention): ``topi/attention.py``'s stages (Q, K, V read in
  place) scheduled with the tuned config of ``topi/attention.llvm`` or its fallback;
* a group that is one softmax / layer_norm (last axis) / global pooling: the row-reduction
  template of that operator (``topi/softmax.py``, ``topi/layer_norm.py``, ``topi/pooling.py``)
  computes it whole, on 2-d views of the tensors;
* anything else: every injective stage is inlined; reductions and the output run their outer
  axes in parallel and the output's innermost axis is vectorized when 8 divides it.

>>> func = lower_primitive(mod["main"].body.op, "fused_add_nn_relu", "llvm")   # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from tilecraft import te
from tilecraft.schedule import create_schedule, lower
from tilecraft.topi.conv2d import (conv2d_nchwc_compute, conv2d_nchwc_config, schedule_conv2d_nchwc,
                                   vector_registers)
from tilecraft.topi.matmul import matmul_compute, matmul_config, schedule_matmul

from ..ir import Call, Constant, Function, RelayError, Tuple, TupleGetItem, Var, post_order


_POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d")


def _query(workload):
    from tilecraft.autotune.dispatch import DispatchContext
    from tilecraft.target import Target
    return DispatchContext.current().query(Target.current(), workload)


def _conv_fits(call: Call) -> bool:
    a = call.attrs
    pt, pl, pb, pr = a.padding
    return (a.groups == 1 and tuple(a.dilation) == (1, 1) and a.strides[0] == a.strides[1]
            and pt == pl == pb == pr and call.ty.dtype == "float32")


class _Anchor:
    """What the anchor's special compute produced, for its schedule."""

    def __init__(self, kind, **parts):
        self.kind = kind
        self.parts = parts


def llvm_anchor(call: Call, ins: list):
    """``(output, anchor)`` when ``call`` is an anchor the CPU computes with a template's stages
    (conv2d, the blocked conv2d, dense on packed weights, dense), else None."""
    name = call.op.name
    if name == "nn.conv2d" and _conv_fits(call):
        return _conv2d_template(call, ins)
    if name == "nn.contrib_conv2d_NCHWc":
        return _conv2d_blocked_template(call, ins)
    if name == "nn.contrib_dense_pack":
        return _dense_pack_template(call, ins)
    if name == "nn.dense" and call.ty.dtype == "float32":
        return _dense_template(call, ins)
    if name == "nn.contrib_attention":
        return _attention_template(call, ins)
    return None


def _attention_template(call, ins):
    """``nn.contrib_attention`` (made by FuseAttention): ``topi/attention.py``'s stages."""
    from tilecraft.topi.attention import attention_compute, attention_config
    a = call.attrs
    S = call.ty.shape[0]
    params = attention_config(_query(("topi/attention.llvm", S, a.heads, a.head_dim, call.ty.dtype)), S, a.heads,
                              a.head_dim)
    out, stages = attention_compute(*ins, a.heads, a.head_dim, a.scale, a.offsets)
    return out, _Anchor("attention", out=out, stages=stages, params=params)


def compute_group(fn: Function, anchor_of=llvm_anchor):
    """``(inputs, output, anchor)``: the group's placeholders, its output tensor and the
    anchor's stages (None for the generic schedule). ``anchor_of(call, inputs)`` computes the
    group's first anchor the target's way (``(output, anchor)``, or None for the op's compute)."""
    values: dict = {}
    inputs = []
    for k, p in enumerate(fn.params):
        if p.ty is None or not hasattr(p.ty, "shape"):
            raise RelayError(f"lowering {fn.attrs.get('Name', 'fn')}: parameter %{p.name_hint} is not a tensor")
        t = te.placeholder(p.ty.shape, dtype=p.ty.dtype, name=f"p{k}")
        values[id(p)] = t
        inputs.append(t)
    anchor = None
    for n in post_order(fn.body):
        t = type(n)
        if t is Var:
            continue
        if t is Constant:
            if n.data.ndim != 0:
                raise RelayError("lowering: a non-scalar constant inside a primitive function "
                                 "(FuseOps makes weights parameters)")
            values[id(n)] = te.const(n.data.item(), n.data.dtype.name)
        elif t is Tuple:
            values[id(n)] = [values[id(f)] for f in n.fields]
        elif t is TupleGetItem:
            values[id(n)] = values[id(n.tuple_value)][n.index]
        elif t is Call:
            ins = [values[id(a)] for a in n.args]
            name = n.op.name
            special = anchor_of(n, ins) if anchor is None else None
            if special is not None:
                out, anchor = special
            else:
                if n.op.compute is None:
                    raise RelayError(f"lowering: {name} has no compute (run SimplifyInference first)")
                out = n.op.compute(n.attrs, ins, n.ty)
                if name in _POOLS and n.attrs.layout != "NCHW" and anchor is None:
                    anchor = _Anchor("pool_NCHWc", out=out)
                if name == "nn.batch_matmul" and anchor is None:
                    anchor = _Anchor("batch_matmul", bmm=out, cfg=_batch_matmul_config(n))
            values[id(n)] = out
    out = values[id(fn.body)]
    if not hasattr(out, "op"):
        raise RelayError("lowering: a primitive function must return one tensor")
    return inputs, out, anchor


def _conv2d_template(call, ins):
    data, kernel = ins
    N, CI, H, W = call.args[0].ty.shape
    CO, _, KH, KW = call.args[1].ty.shape
    stride, padding = call.attrs.strides[0], call.attrs.padding[0]
    wl = ("topi/conv2d_nchw.llvm", N, CI, H, W, CO, KH, KW, stride, padding, call.ty.dtype)
    cfg = _query(wl)
    ic_bn, oc_bn, reg_n, unroll_kw, ic_outer = conv2d_nchwc_config(cfg, N, CI, H, W, CO, KH, KW, stride, padding)
    out, (data_vec, kernel_vec, conv) = conv2d_nchwc_compute(data, kernel, stride, padding, ic_bn, oc_bn)
    return out, _Anchor("conv2d", out=out, data_vec=data_vec, kernel_vec=kernel_vec, conv=conv, reg_n=reg_n,
                        unroll_kw=unroll_kw, ic_outer=ic_outer)


def _conv2d_blocked_template(call, ins):
    """``nn.contrib_conv2d_NCHWc`` (made by AlterOpLayout): the convolution stage on blocked data
    and a packed kernel, on the fp32 micro-kernel (``topi/conv2d_microkernel.py``, the config of
    workload ``topi/conv2d_NCHWc_microkernel.llvm``) where its output block is whole vectors, else
    the loop-level template's schedule with the config of ``topi/conv2d_nchw.llvm``."""
    from tilecraft.topi import conv2d_microkernel as mk
    from tilecraft.topi.layout import conv2d_NCHWc
    N, CIc, H, W, ic = call.args[0].ty.shape
    COc, _, KH, KW, _, oc = call.args[1].ty.shape
    stride, padding = call.attrs.strides[0], call.attrs.padding[0]
    shape = (N, CIc * ic, H, W, COc * oc, KH, KW, stride, padding)
    out, data_pad = conv2d_NCHWc(ins[0], ins[1], call.attrs.strides, call.attrs.padding)
    if mk.blocked_fits(ic, oc, call.ty.dtype):
        reg_n, ic_outer, k_unroll = mk.blocked_config(_query((mk.WORKLOAD,) + shape + (ic, oc, call.ty.dtype)),
                                                      *shape, ic, oc)
        return out, _Anchor("conv2d_NCHWc_mk", out=out, data_pad=data_pad, stride=stride, reg_n=reg_n,
                            ic_outer=ic_outer, k_unroll=k_unroll)
    wl = ("topi/conv2d_nchw.llvm",) + shape + (call.ty.dtype,)
    _, _, reg_n, unroll_kw, ic_outer = conv2d_nchwc_config(_query(wl), *shape)
    return out, _Anchor("conv2d_NCHWc", out=out, data_pad=data_pad, reg_n=reg_n, unroll_kw=unroll_kw,
                        ic_outer=ic_outer)


# at most this many rows, a dense layer is a matrix-vector product: the weight read once, in its
# own layout (no panels packed per run: ResNet-18's 1 x 512 x 1000 classifier took 0.42 ms
# packing its 2 MB weight on every run, onnxruntime 0.07 ms)
GEMV_MAX_ROWS = 2


def _dense_gemv(data, weight, lanes: int):
    """``C[i, j] = sum_k data[i, k] * weight[j, k]`` as ``lanes`` partial sums per output
    (``part[i, j, l]`` over ``k = ko * lanes + l``, a vector FMA per step), then their sum."""
    M, K = _shape(data)
    N = _shape(weight)[0]
    ko = te.reduce_axis((0, K // lanes), name="ko")
    part = te.compute((M, N, lanes), lambda i, j, l: te.sum(data[i, ko * lanes + l] * weight[j, ko * lanes + l],
                                                            axis=ko), name="dense_part")
    l = te.reduce_axis((0, lanes), name="l")
    C = te.compute((M, N), lambda i, j: te.sum(part[i, j, l], axis=l), name="dense_gemv")
    return C, part


def _dense_template(call, ins):
    data, weight = ins
    M, K = call.args[0].ty.shape
    N = call.args[1].ty.shape[0]
    lanes, _ = vector_registers()
    if M <= GEMV_MAX_ROWS and K % lanes == 0:
        C, part = _dense_gemv(data, weight, lanes)
        return C, _Anchor("dense_gemv", C=C, part=part)
    cfg = _query(("topi/matmul.llvm", M, N, K, call.ty.dtype))
    matmul_config(cfg, M, N, K)
    if cfg.is_fallback:
        # the template leaves its fallback unscheduled; the graph level's: a register tile of up
        # to 8 rows x 2 vectors, up to 4 of them per cache block, k in blocks of up to 256
        lanes, _ = vector_registers()
        cfg.fallback_split("tile_y", [-1, 4, 8])
        cfg.fallback_split("tile_x", [-1, 4, 2 * lanes])
        cfg.fallback_split("tile_k", [-1, 256])
    bn = cfg["tile_x"].size[-1]
    C, packed = matmul_compute(data, weight, bn, transpose_b=True)
    return C, _Anchor("dense", C=C, packed=packed, cfg=cfg)


def _batch_matmul_config(call):
    """The ``topi/batch_matmul.llvm`` config of a batch_matmul the template computes (float32,
    neither operand transposed, equal batches), tuned or the fallback; None otherwise."""
    from tilecraft.topi.batch_matmul import batch_matmul_config
    a = call.attrs
    (B1, M, K), (B2, _, N) = call.args[0].ty.shape, call.args[1].ty.shape
    if a.transpose_a or a.transpose_b or B1 != B2 or call.ty.dtype != "float32":
        return None
    cfg = _query(("topi/batch_matmul.llvm", B1, M, N, K, "float32"))
    batch_matmul_config(cfg, B1, M, N, K)
    return cfg


def _dense_pack_template(call, ins):
    """``nn.contrib_dense_pack`` (made by AlterOpLayout): the micro-kernel GEMM on the packed
    panels, with the config of ``topi/dense_pack.llvm`` (tuned, or its fallback)."""
    from tilecraft.topi.dense_pack import dense_pack_compute, dense_pack_config
    M, K = call.args[0].ty.shape
    N = call.ty.shape[1]
    params = dense_pack_config(_query(("topi/dense_pack.llvm", M, N, K, call.ty.dtype)), M, N, K)
    nr = call.args[1].ty.shape[2]
    if params is None or params[1] != nr:
        # the weight was packed for another config (a log applied at build but not at optimise)
        raise RelayError(f"lowering nn.contrib_dense_pack: the weight is packed in panels of {nr}, the "
                         f"configuration of topi/dense_pack.llvm {(M, N, K)} wants "
                         f"{None if params is None else params[1]}")
    C = dense_pack_compute(*ins)
    return C, _Anchor("dense_pack", C=C, params=params)


def _inline_injective(s, keep):
    for st in s.stages:
        op = st.op
        if type(op).__name__ != "ComputeOp" or st.is_output or op in keep:
            continue
        if not op.reduce_axis:
            st.compute_inline()


def _shape(t) -> tuple:
    return tuple(int(getattr(d, "value", d)) for d in t.shape)


def _extent(iv) -> int:
    return int(getattr(iv.dom.extent, "value", iv.dom.extent))


def _schedule_output(s, out):
    st = s[out]
    axes = list(st.op.axis)
    if not axes:
        return
    inner = None
    if not st.op.reduce_axis and _extent(axes[-1]) % 8 == 0 and _extent(axes[-1]) >= 8:
        outer_last, inner = st.split(axes[-1], factor=8)
        axes = axes[:-1] + [outer_last]
    if len(axes) > 1:
        fused = st.fuse(*axes[:-1]) if len(axes) > 2 else axes[0]
        if _extent(fused) > 1:
            st.parallel(fused)
    elif _extent(axes[0]) > 1 and inner is None:
        st.parallel(axes[0])
    if inner is not None:
        st.vectorize(inner)


def schedule_group(out, anchor):
    """The schedule of a group's output (see the module docstring)."""
    s = create_schedule(out.op)
    if anchor is not None and anchor.kind == "conv2d" and _shape(out) == _shape(anchor.parts["out"]):
        p = anchor.parts
        _inline_injective(s, keep={p["data_vec"].op, p["kernel_vec"].op})
        schedule_conv2d_nchwc(s, p["data_vec"], p["kernel_vec"], p["conv"], out, p["reg_n"], p["unroll_kw"],
                              p["ic_outer"])
        return s
    if anchor is not None and anchor.kind == "conv2d_NCHWc" and _shape(out) == _shape(anchor.parts["out"]):
        from tilecraft.topi.layout import schedule_conv2d_NCHWc
        p = anchor.parts
        _inline_injective(s, keep={p["data_pad"].op})
        schedule_conv2d_NCHWc(s, p["data_pad"], p["out"], out, p["reg_n"], p["unroll_kw"], p["ic_outer"])
        return s
    if anchor is not None and anchor.kind == "conv2d_NCHWc_mk" and _shape(out) == _shape(anchor.parts["out"]):
        from tilecraft.topi.conv2d_microkernel import schedule_blocked
        p = anchor.parts
        _inline_injective(s, keep={p["data_pad"].op})
        schedule_blocked(s, p["data_pad"], p["out"], out, p["stride"], p["reg_n"], p["ic_outer"], p["k_unroll"])
        return s
    if anchor is not None and anchor.kind == "dense_pack" and _shape(out) == _shape(anchor.parts["C"]):
        from tilecraft.topi.dense_pack import schedule_dense_pack
        _inline_injective(s, keep=set())
        schedule_dense_pack(s, anchor.parts["C"], out, anchor.parts["params"])
        return s
    if anchor is not None and anchor.kind == "attention" and out is anchor.parts["out"]:
        from tilecraft.topi.attention import schedule_attention
        schedule_attention(s, out, anchor.parts["stages"], anchor.parts["params"])
        return s
    if anchor is not None and anchor.kind == "dense_gemv":
        _schedule_dense_gemv(s, anchor.parts["C"], anchor.parts["part"], out)
        return s
    if anchor is not None and anchor.kind == "dense":
        p = anchor.parts
        C, packed = p["C"], p["packed"]
        _inline_injective(s, keep={packed.op})
        if _shape(out) == _shape(C):
            schedule_matmul(p["cfg"], s, C, packed, out)
            return s
        bn = int(getattr(packed.shape[2], "value", packed.shape[2]))
        i, j = s[C].op.axis
        (k,) = s[C].op.reduce_axis
        jo, ji = s[C].split(j, factor=bn)
        s[C].reorder(i, jo, k, ji)
        if bn > 1:
            s[C].vectorize(ji)
        if _extent(i) > 1:
            s[C].parallel(i)
        else:
            s[C].parallel(jo)
        xo = s[packed].op.axis[0]
        if _extent(xo) > 1:
            s[packed].parallel(xo)
        if out is not C:
            _schedule_output(s, out)
        return s
    if anchor is not None and anchor.kind == "pool_NCHWc":
        from tilecraft.topi.layout import schedule_pool_NCHWc
        _inline_injective(s, keep=set())
        schedule_pool_NCHWc(s, out)
        return s
    if anchor is not None and anchor.kind == "batch_matmul":
        bmm, cfg = anchor.parts["bmm"], anchor.parts["cfg"]
        _inline_injective(s, keep=set())
        if cfg is not None and _shape(out) == _shape(bmm):
            from tilecraft.topi.batch_matmul import schedule_batch_matmul
            schedule_batch_matmul(cfg, s, bmm, out)
            return s
        _schedule_batch_matmul(s, bmm)
        if out is not bmm:
            _schedule_output(s, out)
        return s
    _inline_injective(s, keep=set())
    for st in s.stages:
        if type(st.op).__name__ == "ComputeOp" and st.attach_type == "root" and not st.is_output:
            axes = list(st.op.axis)
            if axes:
                outer = st.fuse(*axes) if len(axes) > 1 else axes[0]
                if _extent(outer) > 1:
                    st.parallel(outer)
    _schedule_output(s, out)
    return s


def _schedule_dense_gemv(s, C, part, out) -> None:
    """Outputs in blocks of 16 columns, the blocks in parallel; per output the partial sums
    (one vector) accumulate over k, then sum; an epilogue (``out``) is inlined into its block."""
    _inline_injective(s, keep=set())
    i, j = s[out].op.axis
    jo, ji = s[out].split(j, factor=16)
    s[out].parallel(jo)
    if out is not C:
        s[C].compute_at(s[out], ji)
        s[part].compute_at(s[C], s[C].op.axis[1])
    else:
        s[part].compute_at(s[out], ji)
    pi, pj, pl = s[part].op.axis
    (ko,) = s[part].op.reduce_axis
    s[part].reorder(pi, pj, ko, pl)
    s[part].vectorize(pl)


def template_kernel(fn: Function):
    """``(schedule, args, arg_shapes)`` when the group is one operator a row-reduction template
    computes whole (``topi/softmax.llvm``, ``topi/layer_norm.llvm``, ``topi/global_pool.llvm``),
    scheduled by its tuned config or its own fallback; None otherwise. The templates take 2-d
    ``[rows, N]`` tensors: ``arg_shapes`` are the shapes the kernel sees (the executor passes
    reshaped views of the graph's arrays)."""
    from tilecraft.topi.layer_norm import layer_norm
    from tilecraft.topi.pooling import global_pool
    from tilecraft.topi.softmax import softmax
    body = fn.body
    if type(body) is not Call or isinstance(body.op, Function) or body.ty.dtype != "float32" or \
            any(type(a) is not Var for a in body.args):
        return None
    name, ty = body.op.name, body.ty
    if name == "nn.softmax" and body.attrs.axis % ty.ndim == ty.ndim - 1:
        rows, n = ty.size // ty.shape[-1], ty.shape[-1]
        s, args = softmax(rows, n, "float32")
        return s, args, [(rows, n), (rows, n)]
    # the template's epsilon is 1e-5 (an ONNX model's is that in float32)
    if name == "nn.layer_norm" and np.float32(body.attrs.epsilon) == np.float32(1e-5):
        rows, n = ty.size // ty.shape[-1], ty.shape[-1]
        s, args = layer_norm(rows, n, "float32")
        return s, args, [(rows, n), (n,), (n,), (rows, n)]
    if name in ("nn.global_avg_pool2d", "nn.global_max_pool2d") and body.attrs.layout == "NCHW":
        N, C, H, W = body.args[0].ty.shape
        s, args = global_pool(N, C, H, W, "avg" if name == "nn.global_avg_pool2d" else "max", "float32")
        return s, args, [(N, C, H, W), (N, C)]
    return None


def _schedule_batch_matmul(s, bmm) -> None:
    """Rows of all batches in parallel; in each, the columns in vectors of 16 (8, 4) that
    accumulate over k (contiguous loads when the second operand is not transposed)."""
    st = s[bmm]
    b, i, j = st.op.axis
    (k,) = st.op.reduce_axis
    width = next((w for w in (16, 8, 4) if _extent(j) % w == 0), 1)
    if width > 1:
        jo, ji = st.split(j, factor=width)
        st.reorder(b, i, jo, k, ji)
        st.vectorize(ji)
    rows = st.fuse(b, i)
    if _extent(rows) > 1:
        st.parallel(rows)


def lower_primitive(fn: Function, name: str, target: str = "llvm"):
    """``(PrimFunc, arg_shapes)`` of a primitive function: arguments ``p0, p1, ...`` then the
    output; ``arg_shapes`` is None when the kernel takes the graph's shapes, else the shapes it
    takes (see :func:`template_kernel`)."""
    whole = template_kernel(fn)
    if whole is not None:
        s, args, shapes = whole
        return lower(s, args, name=name, target=target), shapes
    inputs, out, anchor = compute_group(fn)
    s = schedule_group(out, anchor)
    return lower(s, inputs + [out], name=name, target=target), None
