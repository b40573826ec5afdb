"""The operator table: one row per graph operator, as plain data.

Each :class:`Op` says, for the operator's name (TVM's: ``nn.conv2d``, ``add``, ...):

* ``attrs``: its static parameters and their defaults (:data:`REQUIRED` where the caller must
  give one); a call with an unknown or missing attribute is refused when it is made;
* ``type_rel``: its type relation (``type_rel.py``): the result type from the arguments';
* ``compute``: ``compute(attrs, inputs, out_type) -> te.Tensor``, the ``topi`` compute that
  computes it inside a fused group (``relay/build_module.py``) and in constant folding;
* ``pattern``: its :class:`OpPattern`, which decides what fuses with what (``transform/fuse_ops.py``).

Adding an operator is adding a row here (and, for a frontend, a converter).

>>> OPS["nn.relu"].pattern
<OpPattern.ELEMWISE: 0>
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

from tilecraft import te
from tilecraft.topi import attention as tat
from tilecraft.topi import layout as tl
from tilecraft.topi import nn as tnn
from tilecraft.topi import transform as tt

from . import type_rel as rel


class OpPattern(enum.IntEnum):
    """TVM's ``relay.op.OpPattern``: how an operator's output element depends on its inputs."""
    ELEMWISE = 0              # out[i] from in[i] of the same shape
    BROADCAST = 1             # out[i] from in[i'] where i' drops or zeroes axes
    INJECTIVE = 2             # each output element reads one element of each input (reshape, ...)
    COMM_REDUCE = 3           # a commutative reduction
    OUT_ELEMWISE_FUSABLE = 4  # complex (conv2d, dense): element-wise ops after it may fuse
    TUPLE = 7                 # makes a tuple
    OPAQUE = 8                # fuses with nothing


REQUIRED = object()


@dataclass(frozen=True)
class Op:
    """A graph operator: name, attribute schema, type relation, compute and fusion pattern."""
    name: str
    num_inputs: int
    attrs: dict
    type_rel: Callable
    compute: Callable
    pattern: OpPattern
    doc: str = ""

    def __repr__(self) -> str:
        return f"Op({self.name})"


def _unary(fn):
    return lambda attrs, ins, ty: fn(ins[0])


def _binary(fn):
    return lambda attrs, ins, ty: fn(ins[0], ins[1])


def _bias_add(attrs, ins, ty):
    x, b = ins
    axis = attrs.axis % len(x.shape)
    return te.compute(x.shape, lambda *i: x[i] + b[i[axis]], name="bias_add")


_CONV_ATTRS = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
               "channels": None, "kernel_size": None, "data_layout": "NCHW", "kernel_layout": "OIHW"}
_POOL_ATTRS = {"pool_size": REQUIRED, "strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1),
               "layout": "NCHW"}
_E, _B, _I, _R, _O, _X = (OpPattern.ELEMWISE, OpPattern.BROADCAST, OpPattern.INJECTIVE,
                          OpPattern.COMM_REDUCE, OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.OPAQUE)


def _row(name, n, attrs, type_rel, compute, pattern, doc):
    return name, Op(name, n, attrs, type_rel, compute, pattern, doc)


OPS = dict([
    # element-wise and broadcasting arithmetic
    _row("add", 2, {}, rel.broadcast_rel, _binary(tt.add), _B, "a + b (numpy broadcasting)"),
    _row("subtract", 2, {}, rel.broadcast_rel, _binary(tt.subtract), _B, "a - b"),
    _row("multiply", 2, {}, rel.broadcast_rel, _binary(tt.multiply), _B, "a * b"),
    _row("divide", 2, {}, rel.broadcast_rel, _binary(tt.divide), _B, "a / b"),
    _row("power", 2, {}, rel.broadcast_rel, _binary(tt.power), _B, "a ** b"),
    _row("greater", 2, {}, rel.compare_rel, _binary(tt.greater), _B, "a > b (bool)"),
    _row("less", 2, {}, rel.compare_rel, _binary(tt.less), _B, "a < b (bool)"),
    _row("equal", 2, {}, rel.compare_rel, _binary(tt.equal), _B, "a == b (bool)"),
    _row("greater_equal", 2, {}, rel.compare_rel, _binary(tt.greater_equal), _B, "a >= b (bool)"),
    _row("less_equal", 2, {}, rel.compare_rel, _binary(tt.less_equal), _B, "a <= b (bool)"),
    _row("not_equal", 2, {}, rel.compare_rel, _binary(tt.not_equal), _B, "a != b (bool)"),
    _row("maximum", 2, {}, rel.broadcast_rel, _binary(tt.maximum), _B, "the larger of a and b"),
    _row("minimum", 2, {}, rel.broadcast_rel, _binary(tt.minimum), _B, "the smaller of a and b"),
    _row("logical_and", 2, {}, rel.logical_rel, _binary(tt.logical_and), _B, "a and b (bool)"),
    _row("logical_or", 2, {}, rel.logical_rel, _binary(tt.logical_or), _B, "a or b (bool)"),
    _row("logical_not", 1, {}, rel.logical_rel, _unary(tt.logical_not), _E, "not x (bool)"),
    _row("where", 3, {}, rel.where_rel, lambda a, ins, ty: tt.where(*ins), _B, "b where cond else c"),
    _row("exp", 1, {}, rel.unary_rel, _unary(tt.exp), _E, "e ** x"),
    _row("sqrt", 1, {}, rel.unary_rel, _unary(tt.sqrt), _E, "square root"),
    _row("tanh", 1, {}, rel.unary_rel, _unary(tt.tanh), _E, "tanh"),
    _row("sigmoid", 1, {}, rel.unary_rel, _unary(tt.sigmoid), _E, "1 / (1 + e ** -x)"),
    _row("erf", 1, {}, rel.unary_rel, _unary(tt.erf), _E, "the error function"),
    _row("log", 1, {}, rel.unary_rel, _unary(tt.log), _E, "natural logarithm"),
    _row("abs", 1, {}, rel.unary_rel, _unary(tt.abs), _E, "|x|"),
    _row("rsqrt", 1, {}, rel.unary_rel, _unary(tt.rsqrt), _E, "1 / sqrt(x)"),
    _row("clip", 1, {"a_min": REQUIRED, "a_max": REQUIRED}, rel.clip_rel,
         lambda a, ins, ty: tt.clip(ins[0], a.a_min, a.a_max), _E, "x limited to [a_min, a_max] (relu6)"),
    _row("negative", 1, {}, rel.unary_rel, _unary(tt.negative), _E, "-x"),
    _row("copy", 1, {}, rel.unary_rel, _unary(tt.identity), _E, "a copy"),
    _row("cast", 1, {"dtype": REQUIRED}, rel.cast_rel, lambda a, ins, ty: tt.cast(ins[0], a.dtype), _E,
         "x converted to dtype"),
    _row("nn.relu", 1, {}, rel.unary_rel, _unary(tnn.relu), _E, "max(x, 0)"),
    _row("nn.bias_add", 2, {"axis": 1}, rel.bias_add_rel, _bias_add, _B, "x + bias along axis"),
    # layout (injective)
    _row("reshape", 1, {"newshape": REQUIRED}, rel.reshape_rel,
         lambda a, ins, ty: tt.reshape(ins[0], ty.shape), _I, "x with another shape (row-major)"),
    _row("nn.batch_flatten", 1, {}, rel.batch_flatten_rel,
         lambda a, ins, ty: tt.reshape(ins[0], ty.shape), _I, "x as [N, rest]"),
    _row("transpose", 1, {"axes": None}, rel.transpose_rel,
         lambda a, ins, ty: tt.transpose(ins[0], a.axes), _I, "axes permuted"),
    _row("expand_dims", 1, {"axis": REQUIRED, "num_newaxis": 1}, rel.expand_dims_rel,
         lambda a, ins, ty: tt.reshape(ins[0], ty.shape), _I, "new axes of extent 1"),
    _row("squeeze", 1, {"axis": None}, rel.squeeze_rel,
         lambda a, ins, ty: tt.reshape(ins[0], ty.shape), _I, "axes of extent 1 dropped"),
    _row("concatenate", 1, {"axis": 0}, rel.concatenate_rel,
         lambda a, ins, ty: tt.concatenate(ins[0], a.axis), _I, "a tuple's tensors joined along axis"),
    _row("strided_slice", 1, {"begin": REQUIRED, "end": REQUIRED, "strides": None, "axes": None},
         rel.strided_slice_rel,
         lambda a, ins, ty: tt.strided_slice(ins[0], a.begin, a.end, a.strides, a.axes), _I,
         "x[begin:end:strides] on axes (bounds normalised)"),
    _row("broadcast_to", 1, {"shape": REQUIRED}, rel.broadcast_to_rel,
         lambda a, ins, ty: tt.broadcast_to(ins[0], a.shape), _B, "x broadcast to shape"),
    _row("nn.pad", 1, {"pad_width": REQUIRED, "pad_value": 0.0}, rel.pad_rel,
         lambda a, ins, ty: tnn.pad(ins[0], [p[0] for p in a.pad_width], [p[1] for p in a.pad_width],
                                    a.pad_value, name="pad"), _I,
         "x with pad_value around each axis: pad_width ((before, after), ...)"),
    _row("layout_transform", 1, {"src_layout": REQUIRED, "dst_layout": REQUIRED}, rel.layout_transform_rel,
         lambda a, ins, ty: tl.layout_transform(ins[0], a.src_layout, a.dst_layout), _I,
         "x from src_layout to dst_layout (NCHW, NCHW<x>c; OIHW to OIHW<i>i<o>o)"),
    _row("take", 2, {"axis": 0}, rel.take_rel, lambda a, ins, ty: tt.take(ins[0], ins[1], a.axis), _I,
         "numpy.take (gather)"),
    # reductions
    _row("sum", 1, {"axis": None, "keepdims": False}, rel.reduce_rel,
         lambda a, ins, ty: tt.sum(ins[0], a.axis, a.keepdims), _R, "sum over axes"),
    _row("mean", 1, {"axis": None, "keepdims": False}, rel.reduce_rel,
         lambda a, ins, ty: tt.mean(ins[0], a.axis, a.keepdims), _R, "mean over axes"),
    _row("max", 1, {"axis": None, "keepdims": False}, rel.reduce_rel,
         lambda a, ins, ty: tt.max(ins[0], a.axis, a.keepdims), _R, "maximum over axes"),
    # neural-network layers
    _row("nn.conv2d", 2, _CONV_ATTRS, rel.conv2d_rel,
         lambda a, ins, ty: _conv2d(a, ins), _O,
         "2-d convolution, NCHW data, OIHW kernel (or NHWC data, OHWI kernel: data_layout, kernel_layout); "
         "padding (top, left, bottom, right)"),
    _row("nn.contrib_conv2d_NCHWc", 2, {"strides": (1, 1), "padding": (0, 0, 0, 0), "channels": None,
                                        "kernel_size": None, "data_layout": REQUIRED, "kernel_layout": REQUIRED,
                                        "out_layout": REQUIRED},
         rel.conv2d_nchwc_rel, lambda a, ins, ty: tl.conv2d_NCHWc(ins[0], ins[1], a.strides, a.padding)[0], _O,
         "2-d convolution in blocked layouts: NCHW<ic>c data, OIHW<ic>i<oc>o kernel, NCHW<oc>c result "
         "(AlterOpLayout makes it)"),
    _row("nn.dense", 2, {"units": None}, rel.dense_rel, _binary(tnn.dense), _O, "data @ weight.T"),
    _row("nn.contrib_dense_pack", 2, {"units": None, "weight_layout": REQUIRED}, rel.dense_pack_rel,
         lambda a, ins, ty: _dense_pack(ins), _O,
         "data @ weight.T with the weight packed as [N/nr, K, nr] panels, weight_layout 'NK<nr>n' "
         "(AlterOpLayout makes it)"),
    _row("nn.batch_matmul", 2, {"transpose_a": False, "transpose_b": True}, rel.batch_matmul_rel,
         lambda a, ins, ty: tnn.batch_matmul(ins[0], ins[1], a.transpose_a, a.transpose_b), _O,
         "x[b] @ y[b] (y[b].T with transpose_b)"),
    _row("nn.contrib_attention", 3, {"heads": REQUIRED, "head_dim": REQUIRED, "scale": REQUIRED,
                                     "offsets": (0, 0, 0)}, rel.attention_rel,
         lambda a, ins, ty: tat.attention_compute(*ins, a.heads, a.head_dim, a.scale, a.offsets)[0], _X,
         "multi-head self-attention softmax(scale * Q K^T) V per head, Q, K, V read in place from [S, W] "
         "tensors at column offsets; result [S, heads, head_dim] (FuseAttention makes it)"),
    _row("nn.max_pool2d", 1, _POOL_ATTRS, rel.pool2d_rel,
         lambda a, ins, ty: _pool(a, ins, "max"), _O, "max pooling (NCHW, or NCHW<x>c: layout)"),
    _row("nn.avg_pool2d", 1, dict(_POOL_ATTRS, count_include_pad=False), rel.pool2d_rel,
         lambda a, ins, ty: _pool(a, ins, "avg"), _O, "average pooling (NCHW, or NCHW<x>c: layout)"),
    _row("nn.global_avg_pool2d", 1, {"layout": "NCHW"}, rel.global_pool_rel,
         lambda a, ins, ty: _global_pool(a, ins, "avg"), _O, "mean over H and W"),
    _row("nn.global_max_pool2d", 1, {"layout": "NCHW"}, rel.global_pool_rel,
         lambda a, ins, ty: _global_pool(a, ins, "max"), _O, "maximum over H and W"),
    _row("nn.softmax", 1, {"axis": -1}, rel.softmax_rel,
         lambda a, ins, ty: tnn.softmax(ins[0], a.axis), _X, "softmax along axis"),
    _row("nn.layer_norm", 3, {"axis": -1, "epsilon": 1e-5, "center": True, "scale": True},
         rel.layer_norm_rel,
         lambda a, ins, ty: tnn.layer_norm(ins[0], ins[1], ins[2], a.axis, a.epsilon), _X,
         "layer normalisation over the last axis"),
    _row("nn.batch_norm", 5, {"axis": 1, "epsilon": 1e-5, "center": True, "scale": True}, rel.batch_norm_rel,
         None, _X, "inference batch norm; a tuple (out, mean, var) of which only .0 is computed: "
                   "SimplifyInference rewrites it"),
])


def _conv2d(a, ins):
    if a.data_layout == "NCHW":
        return tnn.conv2d_nchw(ins[0], ins[1], a.strides, a.padding, a.dilation, a.groups)
    # NHWC / OHWI (TensorCoreLayout's): the NCHW convolution of transposed views, transposed back
    x, w = ins
    xc = te.compute((x.shape[0], x.shape[3], x.shape[1], x.shape[2]), lambda n, c, h, v: x[n, h, v, c], name="nchw")
    wc = te.compute((w.shape[0], w.shape[3], w.shape[1], w.shape[2]), lambda o, i, h, v: w[o, h, v, i], name="oihw")
    y = tnn.conv2d_nchw(xc, wc, a.strides, a.padding, a.dilation, a.groups)
    return te.compute((y.shape[0], y.shape[2], y.shape[3], y.shape[1]), lambda n, h, v, c: y[n, c, h, v],
                      name="conv2d_nhwc")


def _pool(a, ins, kind):
    if a.layout == "NHWC":                     # TensorCoreLayout's, on the GPU (topi/pooling_cuda.py)
        from tilecraft.topi.pooling_cuda import pool2d_nhwc
        return pool2d_nhwc(ins[0], kind, a.pool_size, a.strides, a.padding, a.dilation,
                           a.get("count_include_pad", False))[0]
    if a.layout == "NCHW":
        return tnn.pool2d(ins[0], kind, a.pool_size, a.strides, a.padding, a.dilation, a.get("count_include_pad", False))
    return tl.pool2d_NCHWc(ins[0], kind, a.pool_size, a.strides, a.padding, a.dilation, a.get("count_include_pad", False))


def _global_pool(a, ins, kind):
    if a.layout == "NHWC":
        from tilecraft.topi.pooling_cuda import global_pool_nhwc
        return global_pool_nhwc(ins[0], kind)[0]
    return tnn.global_pool(ins[0], kind) if a.layout == "NCHW" else tl.global_pool_NCHWc(ins[0], kind)


def _dense_pack(ins):
    from tilecraft.topi.dense_pack import dense_pack_compute      # the template module, when used
    return dense_pack_compute(ins[0], ins[1])


def get(name: str) -> Op:
    """The operator ``name`` (TVM's ``relay.op.get``), or an error listing the known ones."""
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"no graph operator {name!r}; known: {', '.join(sorted(OPS))}") from None
