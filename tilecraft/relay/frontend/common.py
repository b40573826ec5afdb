"""What the frontends share: typing new nodes as they are made, and the conversions that are
the same for ONNX and PyTorch (matrix products of any rank, layer normalisation over several
trailing axes, pooling with ``ceil_mode``).

>>> y = common.matmul(relay.var("a", shape=(5,)), relay.var("b", shape=(2, 5, 3)))   # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from .. import op as _op
from ..ir import RelayError, children, const, with_children
from ..op import nn as _nn
from ..transform.infer_type import _type_of


def typed(e):
    """``e`` with its new (untyped) nodes typed; typed sub-graphs are not walked again."""
    if e.ty is not None:
        return e
    new = with_children(e, tuple(typed(c) for c in children(e)))
    return new if new.ty is not None else new.with_type(_type_of(new))


def shape(e) -> tuple:
    """The static shape of a typed expression."""
    return typed(e).checked_type.shape


def broadcast(x, shape_to):
    """``x`` broadcast to ``shape_to`` (``x`` itself when it has that shape)."""
    if shape(x) == tuple(shape_to):
        return x
    return _op.broadcast_to(x, shape_to)


def matmul(a, b):
    """numpy's ``matmul``: 1-d operands gain an axis that the result drops again, the leading
    (batch) axes broadcast. 2-d ``b``: one dense; otherwise one batch_matmul."""
    sa, sb = shape(a), shape(b)
    if not sa or not sb:
        raise RelayError(f"matmul of a 0-d operand (shapes {sa} and {sb})")
    if len(sa) == 1:
        out = matmul(_op.reshape(a, (1, sa[0])), b)
        so = shape(out)
        return _op.reshape(out, so[:-2] + so[-1:])
    if len(sb) == 1:
        out = matmul(a, _op.reshape(b, (sb[0], 1)))
        return _op.reshape(out, shape(out)[:-1])
    if sa[-1] != sb[-2]:
        raise RelayError(f"matmul: shapes {sa} and {sb} do not multiply ({sa[-1]} != {sb[-2]})")
    K, N = sb[-2], sb[-1]
    if len(sb) == 2:
        M = int(np.prod(sa[:-1]))
        out = _nn.dense(_op.reshape(a, (M, K)) if len(sa) != 2 else a, _op.transpose(b, (1, 0)))
        return out if len(sa) == 2 else _op.reshape(out, sa[:-1] + (N,))
    batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    nb = int(np.prod(batch))
    a3 = _op.reshape(broadcast(a, batch + sa[-2:]), (nb,) + sa[-2:])
    if int(np.prod(sb[:-2])) == 1:
        b3 = _op.reshape(b, (1, K, N))
    else:
        b3 = _op.reshape(broadcast(b, batch + sb[-2:]), (nb, K, N))
    out = _nn.batch_matmul(a3, b3, transpose_b=False)
    return _op.reshape(out, batch + (sa[-2], N))


def layer_norm(x, gamma, beta, naxes: int, epsilon: float):
    """Layer normalisation over the last ``naxes`` axes of ``x``: one ``nn.layer_norm`` over the
    last axis of a ``[rows, prod(normalised axes)]`` view. ``gamma``/``beta`` (None: 1 and 0)
    broadcast to the normalised shape."""
    s = shape(x)
    norm = s[len(s) - naxes:]
    n = int(np.prod(norm))
    dtype = typed(x).checked_type.dtype
    params = []
    for p, fill in ((gamma, 1.0), (beta, 0.0)):
        if p is None:
            params.append(const(np.full(n, fill, dtype)))
            continue
        if len(shape(p)) > naxes:
            raise RelayError(f"layer_norm: the scale/bias of shape {shape(p)} has more axes than the "
                             f"{naxes} normalised ones {norm}")
        params.append(_op.reshape(broadcast(p, norm), (n,)))
    if naxes == 1:
        return _nn.layer_norm(x, params[0], params[1], axis=-1, epsilon=epsilon)
    flat = _op.reshape(x, (int(np.prod(s[:len(s) - naxes])), n))
    return _op.reshape(_nn.layer_norm(flat, params[0], params[1], axis=-1, epsilon=epsilon), s)


def ceil_mode_pads(in_hw, kernel, strides, dilation, pads) -> tuple:
    """``pads`` (top, left, bottom, right) grown at the bottom/right so that a floor-mode pool
    has the extents of a ``ceil_mode`` one (ONNX's and PyTorch's rule: the last window starts
    inside the input or the leading padding). Returns ``(pads, grown)``."""
    pads = list(pads)
    grown = False
    for d, (size, k, s, dil) in enumerate(zip(in_hw, kernel, strides, dilation)):
        lo, hi = pads[d], pads[d + 2]
        span = size + lo + hi - dil * (k - 1) - 1
        out = -(-span // s) + 1
        if (out - 1) * s >= size + lo:
            out -= 1
        extra = (out - 1) * s + dil * (k - 1) + 1 - (size + lo + hi)
        if extra > 0:
            pads[d + 2] += extra
            grown = True
    return tuple(pads), grown
