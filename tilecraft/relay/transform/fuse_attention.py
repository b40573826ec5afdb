"""``FuseAttention``: a transformer's self-attention written out in operators becomes one
``nn.contrib_attention`` that reads Q, K and V in place.

Afterwards no batch-1 attention block of this shape is left (the ONNX / PyTorch exporters'
form; ``H`` heads of ``d`` columns, ``S`` rows, reshapes anywhere along the chains):

    Q = reshape(transpose(reshape(q2d, [1, S, H, d]), [0, 2, 1, 3]), [H, S, d])     (V alike)
    Kt = reshape(transpose(reshape(k2d, [1, S, H, d]), [0, 2, 3, 1]), [H, d, S])
         (or K as Q with ``batch_matmul(Q, K, transpose_b=True)``)
    P = softmax(multiply(batch_matmul(Q, Kt), scale), axis=-1)     (or divide by it, or no scale)
    ctx = transpose(reshape(batch_matmul(P, V), [1, H, S, d]), [0, 2, 1, 3])
 →  ctx = reshape(nn.contrib_attention(q2d, k2d, v2d, heads=H, head_dim=d, scale=scale), [1, S, H, d])

where ``q2d`` etc. are the values before their reshapes (any shape holding ``S × H·d``
elements in row-major order, viewed as ``[S, H·d]``); when one is a column slice of a 2-d
tensor (``strided_slice`` on the last axis, stride 1: a combined Q/K/V dense layer's output,
see ``CombineParallelDense``) the attention reads that tensor at the slice's column offset, so
no kernel copies Q, K or V into per-head layouts, and the context is written in the layout the
output projection reads (``[S, H, d]`` = ``[S, H·d]``). Anything else (another permutation, a
batch above 1, a mask added to the scores, a softmax on another axis, a non-float32 dtype) is
left as it is.

It rewrites for the CPU (``topi/attention.py`` computes and schedules the op there): under a
current target of another kind (``with Target("cuda"):``) it changes nothing. Run after
``CombineParallelDense`` (so that the slices it reads are those of the combined layer).

>>> mod = FuseAttention()(InferType()(mod))                                  # doctest: +SKIP
"""
from __future__ import annotations

from .. import op as _op
from ..ir import Call, Constant, Function, children, post_order, with_children
from .infer_type import infer_expr
from .pass_infra import function_pass

_HEADS = (0, 2, 1, 3)        # [1, S, H, d] -> [1, H, S, d]
_HEADS_T = (0, 2, 3, 1)      # [1, S, H, d] -> [1, H, d, S]


def _is(node, name: str) -> bool:
    return type(node) is Call and not isinstance(node.op, Function) and node.op.name == name


def _through_reshapes(node):
    while _is(node, "reshape"):
        node = node.args[0]
    return node


def _scalar(node):
    """The value of a one-element constant, else None."""
    if type(node) is Constant and node.data.size == 1:
        return float(node.data.reshape(()))
    return None


def _operand(x, perm):
    """``(source, column offset, (S, H, d))`` when ``x`` is per-head data made by ``perm`` from a
    ``[1, S, H, d]`` view of a source (reshapes around it), else None. The source is a 2-d tensor
    the heads are columns of: the tensor a column slice cuts, or the value itself."""
    t = _through_reshapes(x)
    if not _is(t, "transpose") or t.attrs.axes is None or tuple(t.attrs.axes) != perm:
        return None
    inner = t.args[0]
    if inner.ty is None or len(inner.ty.shape) != 4 or inner.ty.shape[0] != 1:
        return None
    _, S, H, d = inner.ty.shape
    src = _through_reshapes(inner)
    if src.ty is None or src.ty.size != S * H * d:
        return None
    if _is(src, "strided_slice") and src.ty.shape == (S, H * d):
        base, a = src.args[0], src.attrs
        axes = tuple(a.axes) if a.axes is not None else tuple(range(len(a.begin)))
        cols = {ax % 2: (b, st) for ax, b, st in zip(axes, a.begin, a.strides)}
        if base.ty is not None and len(base.ty.shape) == 2 and base.ty.shape[0] == S and \
                cols.get(0, (0, 1)) == (0, 1) and cols.get(1, (0, 1))[1] == 1:
            return base, cols.get(1, (0, 1))[0], (S, H, d)
    return src, 0, (S, H, d)


def _match(ctx):
    """The attention's parts ``(q, k, v, offsets, (S, H, d), scale)`` when ``ctx`` (a transpose)
    ends an attention block of the module docstring's form, else None."""
    if not _is(ctx, "transpose") or ctx.attrs.axes is None or tuple(ctx.attrs.axes) != _HEADS:
        return None
    pv = _through_reshapes(ctx.args[0])
    if not _is(pv, "nn.batch_matmul") or pv.attrs.transpose_a or pv.attrs.transpose_b or pv.ty.dtype != "float32":
        return None
    probs = _through_reshapes(pv.args[0])
    if not _is(probs, "nn.softmax") or probs.attrs.axis not in (-1, len(probs.ty.shape) - 1):
        return None
    scores, scale = _through_reshapes(probs.args[0]), 1.0
    if _is(scores, "multiply"):
        a, b = scores.args
        if _scalar(b) is not None:
            scale, scores = _scalar(b), _through_reshapes(a)
        elif _scalar(a) is not None:
            scale, scores = _scalar(a), _through_reshapes(b)
        else:
            return None
    elif _is(scores, "divide"):
        c = _scalar(scores.args[1])
        if not c:
            return None
        scale, scores = 1.0 / c, _through_reshapes(scores.args[0])
    if not _is(scores, "nn.batch_matmul") or scores.attrs.transpose_a:
        return None
    q = _operand(scores.args[0], _HEADS)
    k = _operand(scores.args[1], _HEADS if scores.attrs.transpose_b else _HEADS_T)
    v = _operand(pv.args[1], _HEADS)
    if q is None or k is None or v is None or not q[2] == k[2] == v[2]:
        return None
    S, H, d = q[2]
    if probs.ty.shape[-1] != S or ctx.ty.shape != (1, S, H, d):
        return None
    return (q[0], k[0], v[0]), (q[1], k[1], v[1]), (S, H, d), scale


def fuse_attention(f: Function) -> Function:
    """``f`` with its attention blocks as ``nn.contrib_attention`` (see the module docstring);
    ``f`` itself when there is none."""
    from tilecraft.target import Target
    target = Target.current()
    if target is not None and target.kind != "llvm":
        return f                            # the fused kernel is the CPU's
    nodes = post_order(f.body)
    found = {id(n): m for n in nodes if _is(n, "transpose") for m in [_match(n)] if m is not None}
    if not found:
        return f
    memo: dict = {}
    for n in nodes:
        if id(n) in found:
            (q, k, v), offsets, (S, H, d), scale = found[id(n)]
            ins = [memo[id(x)] if len(x.ty.shape) == 2 and x.ty.shape[0] == S else _op.reshape(memo[id(x)], (S, H * d))
                   for x in (q, k, v)]
            att = _op.nn.contrib_attention(*ins, heads=H, head_dim=d, scale=scale, offsets=offsets)
            memo[id(n)] = _op.reshape(att, (1, S, H, d))
        else:
            memo[id(n)] = with_children(n, tuple(memo[id(c)] for c in children(n)))
    body = infer_expr(memo[id(f.body)])
    return Function(f.params, body, body.ty, f.attrs)


def _run(f: Function, mod) -> Function:
    return fuse_attention(f)


def FuseAttention():
    """The pass (no TVM counterpart: TVM reaches a fused attention through BYOC or its
    meta-schedule); runs from opt_level 3.

    >>> mod = relay.transform.FuseAttention()(mod)                           # doctest: +SKIP
    """
    return function_pass(_run, "FuseAttention", 3)
