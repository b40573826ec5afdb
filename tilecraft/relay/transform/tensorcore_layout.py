"""``TensorCoreLayout``: on a ``cuda`` target, the convolutions that the tensor-core implicit GEMM
(``topi/conv2d_nhwc_tensorcore.py``) takes in NHWC, and the values between them kept in NHWC.

Afterwards every ``nn.conv2d`` that the tensor cores fit is ``nn.conv2d(data_layout="NHWC",
kernel_layout="OHWI")``: one group, no dilation, square stride, symmetric padding, a constant
kernel, float16 (or float32 when ``PassContext(config={"cuda.allow_tf32": True})``: TF32
operands, float32 accumulation, as torch's convolutions by default), and a configuration of the
template that tiles it (``backend/cuda_tensorcore.conv_fits``: output channels and output
pixels N·OH·OW multiples of 16). The kernel is transposed to OHWI here (a constant);
input channels that are not a multiple of 16 (an RGB image's 3) are padded with zeros, the
kernel's with zero weights and the data's by an ``nn.pad`` of its last axis. Element-wise
operators and broadcasting arithmetic with a same-shaped value or a constant (bias, batch-norm
shift, ReLU, a residual add) stay in NHWC (constants transposed here), and so does pooling of
an NHWC value (max, average, global: ``layout="NHWC"``, ``topi/pooling_cuda.py`` on the GPU); a
``transpose`` back to NCHW remains only where an NHWC value meets anything else (reshape, dense,
a direct convolution, the function's result), and a ``transpose`` to NHWC where an NCHW value
enters (the graph input, a direct convolution's output); each value is transposed at most once
each way, and a value of 1 x 1 pixels (a global pool's) is only reshaped: the bytes are the same. A convolution that the tensor
cores do not fit (a batch-1 7x7 layer: 49 pixels) stays NCHW for the direct convolution.

A float16 ``nn.dense`` with a constant weight whose output columns are not a multiple of 16 (a
1000-class classifier) but whose rows and depth are gets zero weight rows up to the next multiple
of 16 (a constant) and a ``strided_slice`` of its result back to the columns it had, so that it
runs on tensor cores.

Under a current target of another kind (or none) it changes nothing.

>>> with tilecraft.target.Target("cuda"), tilecraft.transform.PassContext(opt_level=3):
...     mod = TensorCoreLayout()(InferType()(mod))                          # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from .. import op as _op
from ..ir import Call, Constant, Function, children, post_order, with_children
from ..op import OpPattern, make_call
from .infer_type import infer_expr
from .pass_infra import function_pass

_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum")
_POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d")
TILE = 16                 # the tensor-core tile: output channels, output pixels and input channels
NHWC_POOLING = True       # pooling of NHWC values in NHWC (False: NCHW between transposes; bench/relay_cuda.py --nchw-pool)


def tensorcore_dtypes() -> tuple:
    """The convolution dtypes that go to tensor cores under the current ``PassContext``."""
    from tilecraft.transform import PassContext
    return ("float16", "float32") if PassContext.current().get("cuda.allow_tf32") else ("float16",)


def tensorcore_conv(call: Call) -> bool:
    """Whether an NCHW ``nn.conv2d`` call goes to the tensor-core implicit GEMM (module docstring)."""
    a = call.attrs
    if a.data_layout != "NCHW" or a.kernel_layout != "OIHW" or type(call.args[1]) is not Constant:
        return False
    pt, pl, pb, pr = a.padding
    N, _, OH, OW = call.checked_type.shape
    K = call.args[1].data.shape[0]
    if not (a.groups == 1 and tuple(a.dilation) == (1, 1) and a.strides[0] == a.strides[1]
            and pt == pl == pb == pr and call.checked_type.dtype in tensorcore_dtypes()):
        return False
    from ..backend.cuda_tensorcore import conv_fits
    _, C, R, S = call.args[1].data.shape
    return conv_fits(N * OH * OW, K, -(-C // TILE) * TILE, R, S, call.checked_type.dtype)


def _pad_dense(call: Call) -> bool:
    """Whether a dense layer gets zero weight rows (module docstring)."""
    if type(call.args[1]) is not Constant or call.checked_type.dtype != "float16":
        return False
    (M, K), N = call.args[0].checked_type.shape, call.args[1].data.shape[0]
    return M % TILE == 0 and K % TILE == 0 and N % TILE != 0


class _Rewriter:
    def __init__(self):
        self.new: dict = {}        # id(old node) -> (layout "NCHW" | "NHWC", new expr)
        self.cache: dict = {}      # (id(old node), layout) -> the transposed expr

    def as_layout(self, n, layout: str):
        have, e = self.new[id(n)]
        if have == layout:
            return e
        key = (id(n), layout)
        if key not in self.cache:
            N, C, H, W = n.checked_type.shape
            if H == W == 1:                  # only size-1 axes move: the same bytes, a reshape (a view)
                self.cache[key] = _op.reshape(e, (N, 1, 1, C) if layout == "NHWC" else (N, C, 1, 1))
            else:
                self.cache[key] = _op.transpose(e, (0, 2, 3, 1) if layout == "NHWC" else (0, 3, 1, 2))
        return self.cache[key]

    def nhwc(self, n) -> bool:
        return self.new.get(id(n), ("NCHW",))[0] == "NHWC"

    def visit(self, n):
        t = type(n)
        if t is not Call or isinstance(n.op, Function):
            if not children(n):
                return ("NCHW", n)
            return ("NCHW", with_children(n, tuple(self.as_layout(c, "NCHW") for c in children(n))))
        name = n.op.name
        if name == "nn.conv2d" and tensorcore_conv(n):
            return ("NHWC", self.conv(n))
        if name == "nn.dense" and _pad_dense(n):
            return ("NCHW", self.dense(n))
        if name in _POOLS and n.attrs.layout == "NCHW" and self.nhwc(n.args[0]) and NHWC_POOLING:
            return ("NHWC", make_call(name, [self.new[id(n.args[0])][1]], **dict(n.attrs.items(), layout="NHWC")))
        if n.op.pattern == OpPattern.ELEMWISE and len(n.args) == 1 and self.nhwc(n.args[0]):
            return ("NHWC", Call(n.op, (self.new[id(n.args[0])][1],), n.attrs))
        if name in _BINARY or (name == "nn.bias_add" and n.attrs.axis % 4 == 1):
            out = self.binary(n)
            if out is not None:
                return ("NHWC", out)
        return ("NCHW", with_children(n, tuple(self.as_layout(c, "NCHW") for c in n.args)))

    def conv(self, n):
        a = n.attrs
        w = n.args[1].data.transpose(0, 2, 3, 1)                 # OIHW -> OHWI
        data = self.as_layout(n.args[0], "NHWC")
        C = w.shape[3]
        if C % TILE:
            extra = TILE - C % TILE
            w = np.concatenate([w, np.zeros(w.shape[:3] + (extra,), w.dtype)], axis=3)
            data = _op.nn.pad(data, ((0, 0), (0, 0), (0, 0), (0, extra)))
        return make_call("nn.conv2d", [data, Constant(np.ascontiguousarray(w))], strides=a.strides, padding=a.padding,
                         dilation=a.dilation, groups=1, channels=a.channels, kernel_size=a.kernel_size,
                         data_layout="NHWC", kernel_layout="OHWI")

    def dense(self, n):
        w = n.args[1].data
        extra = TILE - w.shape[0] % TILE
        wide = Constant(np.concatenate([w, np.zeros((extra, w.shape[1]), w.dtype)]))
        y = make_call("nn.dense", [self.as_layout(n.args[0], "NCHW"), wide], units=None)
        M, N = n.checked_type.shape
        return _op.strided_slice(y, [0, 0], [M, N])

    def binary(self, n):
        """The operator on NHWC operands: an NHWC value as it is, a same-shaped NCHW value
        transposed, a constant transposed here; None without an NHWC operand or with an operand
        of another shape that is not a constant."""
        out_ty = n.checked_type
        if out_ty.ndim != 4 or not any(self.nhwc(a) for a in n.args):
            return None
        args = []
        for arg in n.args:
            ty = arg.checked_type
            if ty.shape == out_ty.shape:
                args.append(self.as_layout(arg, "NHWC"))
            elif type(arg) is Constant and n.op.name == "nn.bias_add":
                args.append(arg)                                    # (C,): bias_add on axis 3
            elif type(arg) is Constant and arg.data.ndim <= 4:
                d4 = arg.data.reshape((1,) * (4 - arg.data.ndim) + arg.data.shape)
                args.append(Constant(np.ascontiguousarray(d4.transpose(0, 2, 3, 1))))
            else:
                return None
        if n.op.name == "nn.bias_add":
            return make_call("nn.bias_add", args, axis=3)
        return Call(n.op, tuple(args), n.attrs)


def tensorcore_layout(f: Function) -> Function:
    """``f`` with its tensor-core convolutions in NHWC (module docstring); ``f`` itself when there
    are none or the current target is not ``cuda``."""
    from tilecraft.target import Target
    target = Target.current()
    if target is None or target.kind != "cuda":
        return f
    nodes = post_order(f.body)
    if not any(type(n) is Call and (getattr(n.op, "name", None) == "nn.conv2d" and tensorcore_conv(n)
                                    or getattr(n.op, "name", None) == "nn.dense" and _pad_dense(n)) for n in nodes):
        return f
    rw = _Rewriter()
    for n in nodes:
        rw.new[id(n)] = rw.visit(n)
    body = infer_expr(rw.as_layout(f.body, "NCHW"))
    return Function(f.params, body, body.ty, f.attrs)


def TensorCoreLayout():
    """The pass; runs from opt_level 3 (module docstring)."""
    return function_pass(lambda f, mod: tensorcore_layout(f), "TensorCoreLayout", 3)
