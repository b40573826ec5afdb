"""``AlterOpLayout``: convolutions on the CPU in the blocked ``NCHW[x]c`` layout, and the values
between them kept in it.

Afterwards every ``nn.conv2d`` that the NCHW[x]c template fits (one group, no dilation, square
stride, symmetric padding, float32, channels divisible by the blocks) is an
``nn.contrib_conv2d_NCHWc`` reading ``NCHW<ic>c`` data and an ``OIHW<ic>i<oc>o`` kernel (constant
weights packed by the pass itself, other kernels through a ``layout_transform``) and writing ``NCHW<oc>c``.
Where the output channels are whole vectors the micro-kernel conv computes it
(``conv2d_microkernel.graph_blocks``): ``oc`` is two vectors (one where two do not divide), the
same for every layer, so no config changes a layout. Otherwise ``oc`` is the loop-level
template's output block for the workload (``topi/conv2d_nchw.llvm``: the tuned config's inside
``apply_history_best``, else its fallback). ``ic`` is the block the input already has, so
consecutive convolutions need no transform between them (for an ``NCHW`` input: ``oc`` when it
divides the input channels, the config's input block otherwise; the template's tuned
``tile_ic`` is not used). Element-wise operators and
broadcasting arithmetic with per-channel or scalar constants (bias, batch-norm shift, ReLU, a
residual add of two blocked values) stay in the blocked layout. A ``layout_transform`` remains
only where a blocked value meets something that needs ``NCHW`` (pooling, reshape, dense, the
function's result: layout-sensitive operators) or where an ``NCHW`` value enters a blocked
convolution (the graph input); each such value is transformed once.

It rewrites for the CPU: under a current target of another kind (``with Target("cuda"):``) it
changes nothing.

>>> with tilecraft.transform.PassContext(opt_level=3):
...     mod = AlterOpLayout()(InferType()(mod))          # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from ..ir import Call, Constant, Function, Tuple, TupleGetItem, Var, children, post_order, with_children
from ..op import OpPattern, layout_transform, make_call
from ..op import nn as _nn
from .infer_type import infer_expr
from .pass_infra import function_pass

_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum")
_POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d")


def _query(workload):
    from tilecraft.autotune.dispatch import DispatchContext
    from tilecraft.target import Target
    return DispatchContext.current().query(Target.current(), workload)


def _blocks(call: Call, in_block):
    """``(ic, oc)`` for a convolution the template fits, or None."""
    from tilecraft.topi.conv2d import conv2d_nchwc_config
    from tilecraft.topi.conv2d_microkernel import graph_blocks
    a = call.attrs
    x, w = call.args[0].checked_type, call.args[1].checked_type
    pt, pl, pb, pr = a.padding
    if not (a.groups == 1 and tuple(a.dilation) == (1, 1) and a.strides[0] == a.strides[1]
            and pt == pl == pb == pr and call.checked_type.dtype == "float32" and x.ndim == 4
            and a.data_layout == "NCHW" and a.kernel_layout == "OIHW"):
        return None
    N, CI, H, W = x.shape
    CO, _, KH, KW = w.shape
    shape = (N, CI, H, W, CO, KH, KW, a.strides[0], pt)
    blocks = graph_blocks(CI, CO, in_block)
    if blocks is not None:  # the micro-kernel conv: whole vectors of output channels
        return blocks
    # the loop-level template's blocks
    ic, oc = conv2d_nchwc_config(_query(("topi/conv2d_nchw.llvm",) + shape + ("float32",)), *shape)[:2]
    if CO % oc:
        oc = next((b for b in (16, 8) if CO % b == 0), None)
    if in_block is not None and CI % in_block == 0:
        ic = in_block                       # no transform between consecutive convolutions
    elif in_block is None and oc is not None and CI % oc == 0:
        ic = oc                             # an NCHW input: the block a residual add will want too
    if oc is None or CI % ic:
        return None
    return ic, oc


class _Rewriter:
    def __init__(self):
        self.new: dict = {}        # id(old node) -> ("plain", expr) or ("blocked", expr, block)
        self.cache: dict = {}      # (id(old node), layout) -> transformed expr
        self.packed_dense = 0      # dense layers rewritten to nn.contrib_dense_pack

    def plain(self, n):
        state = self.new[id(n)]
        if state[0] == "plain":
            return state[1]
        key = (id(n), "NCHW")
        if key not in self.cache:
            self.cache[key] = layout_transform(state[1], f"NCHW{state[2]}c", "NCHW")
        return self.cache[key]

    def blocked(self, n, block: int):
        state = self.new[id(n)]
        if state[0] == "blocked" and state[2] == block:
            return state[1]
        key = (id(n), block)
        if key not in self.cache:
            src = "NCHW" if state[0] == "plain" else f"NCHW{state[2]}c"
            self.cache[key] = layout_transform(state[1], src, f"NCHW{block}c")
        return self.cache[key]

    def block_of(self, n):
        state = self.new.get(id(n))
        return state[2] if state is not None and state[0] == "blocked" else None

    def visit(self, n):
        t = type(n)
        if t is Var or t is Constant or t is Function:
            return ("plain", n)
        if t is Tuple or t is TupleGetItem:
            return ("plain", with_children(n, tuple(self.plain(c) for c in children(n))))
        name = getattr(n.op, "name", None)
        if name == "nn.conv2d":
            blocks = _blocks(n, self.block_of(n.args[0]))
            if blocks is not None:
                return self.conv(n, *blocks)
        elif name in _POOLS and n.attrs.layout == "NCHW" and self.block_of(n.args[0]) is not None:
            b = self.block_of(n.args[0])
            attrs = dict(n.attrs.items(), layout=f"NCHW{b}c")
            return ("blocked", make_call(name, [self.new[id(n.args[0])][1]], **attrs), b)
        elif name == "nn.dense":
            packed = self.dense(n)
            if packed is not None:
                return ("plain", packed)
        elif name is not None and n.op.pattern == OpPattern.ELEMWISE and len(n.args) == 1 \
                and self.block_of(n.args[0]) is not None:
            b = self.block_of(n.args[0])
            return ("blocked", Call(n.op, (self.new[id(n.args[0])][1],), n.attrs), b)
        elif name in _BINARY or (name == "nn.bias_add" and n.attrs.axis % 4 == 1):
            out = self.binary(n)
            if out is not None:
                return out
        return ("plain", with_children(n, tuple(self.plain(c) for c in children(n))))

    def conv(self, n, ic, oc):
        a = n.attrs
        data = self.blocked(n.args[0], ic)
        w = n.args[1]
        if type(w) is Constant:             # packed here: folding the transform would interpret it
            O, I, KH, KW = w.data.shape
            kernel = Constant(np.ascontiguousarray(
                w.data.reshape(O // oc, oc, I // ic, ic, KH, KW).transpose(0, 2, 4, 5, 3, 1)))
        else:
            kernel = layout_transform(w, "OIHW", f"OIHW{ic}i{oc}o")
        out = _nn.contrib_conv2d_nchwc(data, kernel, strides=a.strides, padding=a.padding, channels=a.channels,
                                       kernel_size=a.kernel_size, data_layout=f"NCHW{ic}c",
                                       kernel_layout=f"OIHW{ic}i{oc}o", out_layout=f"NCHW{oc}c")
        return ("blocked", out, oc)

    def dense(self, n):
        """``nn.contrib_dense_pack`` with the constant weight packed here into the panels of
        the template's config for the workload; None when the weight is not a constant or no
        micro-kernel fits."""
        w = n.args[1]
        if type(w) is not Constant or n.checked_type.dtype != "float32" or n.args[0].checked_type.ndim != 2:
            return None
        from tilecraft.topi.dense_pack import dense_pack_config, dense_pack_fits, pack_weight
        (M, K), N = n.args[0].checked_type.shape, w.data.shape[0]
        if not dense_pack_fits(M, N, K):
            return None
        params = dense_pack_config(_query(("topi/dense_pack.llvm", M, N, K, "float32")), M, N, K)
        if params is None:
            return None
        nr = params[1]
        self.packed_dense += 1
        return _nn.contrib_dense_pack(self.plain(n.args[0]), Constant(pack_weight(w.data, nr)),
                                      weight_layout=f"NK{nr}n", units=n.attrs.units)

    def binary(self, n):
        """A broadcasting operator with a blocked operand: its other operand blocked as well (a
        value of the same NCHW shape), or a per-channel or scalar constant reshaped to
        ``[1, C/x, 1, 1, x]``; None when an operand fits neither."""
        out_ty = n.checked_type
        blocks = [self.block_of(a) for a in n.args if self.block_of(a) is not None]
        if not blocks or out_ty.ndim != 4:
            return None
        b = blocks[0]
        N, C, H, W = out_ty.shape
        args = []
        for k, arg in enumerate(n.args):
            ty = arg.checked_type
            if ty.shape == out_ty.shape:
                args.append(self.blocked(arg, b))
                continue
            if type(arg) is not Constant:
                return None
            data = arg.data
            bias = n.op.name == "nn.bias_add"
            if (bias and data.shape == (C,)) or (not bias and _per_channel(data.shape, C)):
                args.append(Constant(np.ascontiguousarray(data.reshape(1, C // b, b, 1, 1).transpose(0, 1, 3, 4, 2))))
            elif data.size == 1 and not bias:
                args.append(Constant(data.reshape(())))
            else:
                return None
        if n.op.name == "nn.bias_add":
            return ("blocked", make_call("add", args), b)
        return ("blocked", Call(n.op, tuple(args), n.attrs), b)


def _per_channel(shape: tuple, C: int) -> bool:
    """A constant of this shape broadcasts per channel against NCHW: (C, 1, 1), (1, C, 1, 1)."""
    return len(shape) >= 3 and shape[-3:] == (C, 1, 1) and all(d == 1 for d in shape[:-3])


def alter_layout(f: Function) -> Function:
    """``f`` with its convolutions in blocked layouts (see the module docstring); ``f`` itself
    when no convolution fits."""
    from tilecraft.target import Target
    target = Target.current()
    if target is not None and target.kind != "llvm":
        return f                            # the blocked layouts are the CPU template's
    nodes = post_order(f.body)
    if not any(type(n) is Call and getattr(n.op, "name", None) in ("nn.conv2d", "nn.dense") for n in nodes):
        return f
    rw = _Rewriter()
    for n in nodes:
        rw.new[id(n)] = rw.visit(n)
    if not rw.packed_dense and not any(s[0] == "blocked" for s in rw.new.values()):
        return f
    body = infer_expr(rw.plain(f.body))
    return Function(f.params, body, body.ty, f.attrs)


def _run(f: Function, mod) -> Function:
    return alter_layout(f)


def AlterOpLayout():
    """The pass (TVM's ``relay.transform.AlterOpLayout()``); runs from opt_level 3."""
    return function_pass(_run, "AlterOpLayout", 3)
