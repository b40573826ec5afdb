"""``FoldScaleAxis``: fold a per-output-channel scale into the preceding convolution's weights
(batch-norm folding: after SimplifyInference and FoldConstant a batch norm is a constant scale
and shift).

Afterwards no ``multiply(conv, s)`` remains where ``conv`` is an ``nn.conv2d`` with a constant
kernel read by nothing else and ``s`` a constant that varies only along the output channels
(shape ``(C, 1, 1)`` or ``(1, C, 1, 1)``, or a scalar): the kernel is scaled instead,
``conv2d(x, W * s[:, None, None, None])``. Through a bias in between,
``multiply(add(conv, b), s)`` becomes ``add(conv2d(x, W * s), b * s)``. The shift that follows
stays an ``add``, which fusion then puts in the convolution's kernel as its epilogue.

>>> mod = FoldScaleAxis()(mod)      # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from .. import op as _op
from ..ir import Call, Constant, Function, post_order, rewrite, with_children
from .infer_type import infer_expr
from .pass_infra import function_pass


def _channel_scale(s, channels: int):
    """``s``'s values as a vector of ``channels`` when it varies along axis 1 of NCHW only."""
    if type(s) is not Constant:
        return None
    d = s.data
    if d.ndim == 0:
        return np.full(channels, d, d.dtype)
    if d.ndim > 4:
        return None
    d4 = d.reshape((1,) * (4 - d.ndim) + d.shape)
    if d4.shape[0] != 1 or d4.shape[2:] != (1, 1) or d4.shape[1] not in (1, channels):
        return None
    return np.broadcast_to(d4.reshape(-1), (channels,))


def _name(e):
    return getattr(getattr(e, "op", None), "name", None)


def _run(f: Function, mod) -> Function:
    uses: dict = {}
    for n in post_order(f.body):
        for c in (n.args if type(n) is Call else ()):
            uses[id(c)] = uses.get(id(c), 0) + 1

    def single(e):
        return uses.get(id(e), 0) == 1

    def scaled_conv(conv, scale):
        if _name(conv) != "nn.conv2d" or type(conv.args[1]) is not Constant or not single(conv):
            return None
        w = conv.args[1]
        vec = _channel_scale(scale, w.data.shape[0])
        if vec is None or vec.dtype != w.data.dtype:
            return None
        new_w = Constant((w.data * vec.reshape(-1, 1, 1, 1)).astype(w.data.dtype))
        return Call(conv.op, (conv.args[0], new_w), conv.attrs), vec

    def visit(node, kids):
        out = _visit(node, kids)
        uses[id(out)] = uses.get(id(node), 0)   # the rewritten node has the original's readers
        return out

    def _visit(node, kids):
        new = with_children(node, kids)
        uses[id(new)] = uses.get(id(node), 0)
        if _name(new) == "multiply":
            a, s = new.args
            if _channel_scale(a, 0) is not None or type(a) is Constant:
                a, s = s, a
            done = scaled_conv(a, s)
            if done is not None:
                return infer_expr(done[0])
            # multiply(add(conv, b), s) -> add(conv * s, b * s)
            if _name(a) in ("add", "nn.bias_add") and single(a):
                conv, b = a.args
                if type(b) is Constant and type(conv) is Call:
                    done = scaled_conv(conv, s)
                    if done is not None and (_name(a) == "nn.bias_add" or b.data.ndim in (3, 4, 0)):
                        vec = done[1]
                        if _name(a) == "nn.bias_add":
                            bs = Constant((b.data * vec).astype(b.data.dtype))
                            return infer_expr(Call(a.op, (done[0], bs), a.attrs))
                        bb = b.data.reshape((1,) * (4 - b.data.ndim) + b.data.shape)
                        bs = Constant((bb * vec.reshape(1, -1, 1, 1)).astype(b.data.dtype))
                        return infer_expr(_op.add(done[0], bs))
        if new is not node:
            new = infer_expr(new)
        return new
    body = rewrite(f.body, visit)
    return f if body is f.body else Function(f.params, infer_expr(body), body.ty, f.attrs)


def FoldScaleAxis():
    """The pass (TVM's ``relay.transform.FoldScaleAxis()``); runs from opt_level 3."""
    return function_pass(_run, "FoldScaleAxis", 3)
