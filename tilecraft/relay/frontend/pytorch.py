"""``from_torch``: a PyTorch module as a graph module and its weights, through ``torch.export``.

``from_torch(module, example_inputs)`` exports the module with ``torch.export.export`` (or takes
an ``ExportedProgram`` as it is, decomposed to the core ATen set or not) and converts each node
of the exported graph with the function :data:`CONVERTERS` names for its ATen operator
(``aten.convolution``, ``aten.linear``, ...). Parameters, buffers and lifted constants become
parameters of ``main`` named by their place in the module (``layer1.0.conv1.weight``), their
values in ``params``; the user inputs come first, named as in ``forward``. An operator without
a converter, or a node a converter cannot take, is one :class:`~tilecraft.relay.ir.RelayError`
naming the operator and the node. ``torch`` is imported only here, when a module is converted.

Why ``torch.export`` and not TVM's ``from_pytorch(script_module, input_infos)``: an exported
program is a flat graph of ATen operators with static shapes, its weights listed by name and
no Python control flow left; TorchScript is deprecated in PyTorch and its graphs hold Python
values, lists and control flow a converter would have to interpret. ``from_pytorch`` is kept
as a name that says so.

>>> mod, params = relay.frontend.from_torch(model.eval(), (torch.randn(1, 3, 224, 224),))  # doctest: +SKIP
"""
from __future__ import annotations

import math

import numpy as np

from .. import op as _op
from ..ir import Expr, Function, IRModule, RelayError, TensorType, Tuple, Var, const, free_vars
from ..op import nn as _nn
from . import common
from .common import shape, typed


def _dtype(torch_dtype) -> str:
    return str(torch_dtype).replace("torch.", "")


def _dt(e) -> str:
    return typed(e).checked_type.dtype


def _is_tensor(v) -> bool:
    return isinstance(v, Expr)


def _scalar_like(v, other):
    """A Python number as a constant of ``other``'s dtype (torch's promotion of a scalar)."""
    return const(np.asarray(v, _dt(other)))


def _promote(a, b):
    """Two operands of one dtype: a Python number takes the tensor's; an integer or bool tensor
    meeting a float one is cast to it; a float number with an integer tensor makes float32."""
    if not _is_tensor(a) and not _is_tensor(b):
        raise RelayError("both operands are numbers")
    if not _is_tensor(a):
        if isinstance(a, float) and _dt(b)[0] != "f":
            b = _op.cast(b, "float32")
        return _scalar_like(a, b), b
    if not _is_tensor(b):
        if isinstance(b, float) and _dt(a)[0] != "f":
            a = _op.cast(a, "float32")
        return a, _scalar_like(b, a)
    da, db = _dt(a), _dt(b)
    if da != db:
        if da[0] == "f" and db[0] != "f":
            b = _op.cast(b, da)
        elif db[0] == "f" and da[0] != "f":
            a = _op.cast(a, db)
        else:
            raise RelayError(f"operands of dtypes {da} and {db}: insert a cast")
    return a, b


def _axis(d, ndim) -> int:
    return int(d) % ndim


def _axes(dims, ndim):
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return None
    dims = [dims] if isinstance(dims, int) else dims
    return [_axis(d, ndim) for d in dims]


# ---------------------------------------------------------------------------------------------
# Converters: conv(a) -> expr or list of exprs; ``a`` holds the node's arguments by schema name,
# defaults filled in, fx nodes replaced by the relay expressions they stand for.

def _binary(fn):
    def conv(a):
        x, y = _promote(a["self"], a["other"])
        alpha = a.get("alpha", 1)
        if alpha is not None and alpha != 1:
            y = _op.multiply(y, _scalar_like(alpha, y))
        return fn(x, y)
    return conv


def _compare(fn):
    return lambda a: fn(*_promote(a["self"], a["other"]))


def _unary(fn):
    return lambda a: fn(a["self"])


def _div(a):
    if a.get("rounding_mode") is not None:
        raise RelayError(f"division with rounding_mode={a['rounding_mode']!r} is not supported")
    x, y = _promote(a["self"], a["other"])
    if _dt(x)[0] != "f":
        x, y = _op.cast(x, "float32"), _op.cast(y, "float32")
    return _op.divide(x, y)


def _pow(a):
    x, y = _promote(a["self"], a["exponent"])
    return _op.power(x, y)


def _gelu(a):
    x = a["self"]
    if a.get("approximate", "none") == "tanh":
        inner = _op.multiply(const(math.sqrt(2 / math.pi)),
                             _op.add(x, _op.multiply(const(0.044715), _op.multiply(x, _op.multiply(x, x)))))
        return _op.multiply(_op.multiply(const(0.5), x), _op.add(const(1.0), _op.tanh(inner)))
    half = _op.multiply(x, const(0.5))
    return _op.multiply(half, _op.add(const(1.0), _op.erf(_op.multiply(x, const(1 / math.sqrt(2))))))


def _conv(a):
    x, w = a["input"], a["weight"]
    if a.get("transposed"):
        raise RelayError("transposed convolutions are not supported yet")
    if len(shape(x)) != 4:
        raise RelayError(f"only 2-d convolutions (4-d input) are supported, got input shape {shape(x)}")
    pad = a["padding"]
    if isinstance(pad, str):
        raise RelayError(f"padding={pad!r} is not supported; give the padding as numbers")
    pad = tuple(pad) * (2 if len(pad) == 1 else 1)
    stride = tuple(a["stride"]) * (2 if len(a["stride"]) == 1 else 1)
    dil = tuple(a["dilation"]) * (2 if len(a["dilation"]) == 1 else 1)
    out = _nn.conv2d(x, w, strides=stride, padding=(pad[0], pad[1], pad[0], pad[1]), dilation=dil,
                     groups=a["groups"], channels=shape(w)[0], kernel_size=shape(w)[2:])
    if a.get("bias") is not None:
        out = _nn.bias_add(out, a["bias"], axis=1)
    return out


def _linear(a):
    x, w, b = a["input"], a["weight"], a.get("bias")
    s = shape(x)
    flat = x if len(s) == 2 else _op.reshape(x, (int(np.prod(s[:-1])), s[-1]))
    out = _nn.dense(flat, w)
    if b is not None:
        out = _op.add(out, b)
    return out if len(s) == 2 else _op.reshape(out, s[:-1] + (shape(w)[0],))


def _addmm(a):
    out = common.matmul(a["mat1"], a["mat2"])
    if a.get("alpha", 1) != 1:
        out = _op.multiply(out, _scalar_like(a["alpha"], out))
    bias = a["self"]
    if a.get("beta", 1) != 1:
        bias = _op.multiply(bias, _scalar_like(a["beta"], bias))
    return _op.add(out, bias)


def _layer_norm(a):
    naxes = len(a["normalized_shape"])
    out = common.layer_norm(a["input"], a.get("weight"), a.get("bias"), naxes, a.get("eps", 1e-5))
    return out if a["_op"] == "aten.layer_norm" else [out, None, None]


def _batch_norm(a):
    if a.get("training"):
        raise RelayError("batch_norm in training mode: call module.eval() before exporting")
    x = a["input"]
    c = shape(x)[1]
    gamma = a["weight"] if a.get("weight") is not None else const(np.ones(c, _dt(x)))
    beta = a["bias"] if a.get("bias") is not None else const(np.zeros(c, _dt(x)))
    out = _nn.batch_norm(x, gamma, beta, a["running_mean"], a["running_var"], axis=1, epsilon=a["eps"])[0]
    return out if a["_op"] == "aten.batch_norm" else [out, None, None]


def _softmax(a):
    x = a["self"]
    if a.get("dtype") is not None and _dtype(a["dtype"]) != _dt(x):
        x = _op.cast(x, _dtype(a["dtype"]))
    return _nn.softmax(x, axis=a["dim"])


def _pool_args(a, x):
    k = tuple(a["kernel_size"]) * (2 if len(a["kernel_size"]) == 1 else 1)
    stride = tuple(a.get("stride") or k)
    stride = stride * (2 if len(stride) == 1 else 1)
    pad = tuple(a.get("padding", (0, 0)))
    pad = pad * (2 if len(pad) == 1 else 1)
    dil = tuple(a.get("dilation", (1, 1)))
    dil = dil * (2 if len(dil) == 1 else 1)
    pads = (pad[0], pad[1], pad[0], pad[1])
    grown = False
    if a.get("ceil_mode"):
        pads, grown = common.ceil_mode_pads(shape(x)[2:], k, stride, dil, pads)
    return k, stride, dil, pads, grown


def _max_pool(a):
    x = a["self"]
    if len(shape(x)) != 4:
        raise RelayError(f"only 2-d pooling of NCHW data is supported, got {shape(x)}")
    k, stride, dil, pads, _ = _pool_args(a, x)
    out = _nn.max_pool2d(x, k, stride, dil, pads)
    return [out, None] if a["_op"] == "aten.max_pool2d_with_indices" else out


def _avg_pool(a):
    x = a["self"]
    if len(shape(x)) != 4:
        raise RelayError(f"only 2-d pooling of NCHW data is supported, got {shape(x)}")
    if a.get("divisor_override") is not None:
        raise RelayError("avg_pool2d with divisor_override is not supported")
    k, stride, dil, pads, grown = _pool_args(a, x)
    count_pad = bool(a.get("count_include_pad", True))
    if grown and count_pad and any(pads):
        raise RelayError("avg_pool2d with ceil_mode and count_include_pad over a grown window is not supported")
    return _nn.avg_pool2d(x, k, stride, dil, pads, count_include_pad=count_pad)


def _adaptive_avg_pool(a):
    x = a["self"]
    n, c, h, w = shape(x)
    oh, ow = (tuple(a["output_size"]) * 2)[:2] if len(a["output_size"]) == 1 else tuple(a["output_size"])
    if (oh, ow) == (1, 1):
        return _nn.global_avg_pool2d(x)
    if h % oh or w % ow:
        raise RelayError(f"adaptive_avg_pool2d from {h}x{w} to {oh}x{ow} (not a divisor) is not supported")
    return _nn.avg_pool2d(x, (h // oh, w // ow), (h // oh, w // ow))


def _reshape_to(x, size):
    old = shape(x)
    size = [int(d) for d in size]
    if size.count(-1) > 1:
        raise RelayError(f"the shape {size} has more than one -1")
    if -1 in size:
        known = int(np.prod([d for d in size if d != -1]))
        size[size.index(-1)] = int(np.prod(old)) // known if known else 0
    return _op.reshape(x, size)


def _flatten(a):
    x = a["self"]
    s = shape(x)
    if not s:
        return _op.reshape(x, (1,))
    start, end = _axis(a.get("start_dim", 0), len(s)), _axis(a.get("end_dim", -1), len(s))
    return _op.reshape(x, s[:start] + (int(np.prod(s[start:end + 1])),) + s[end + 1:])


def _transpose(a):
    x = a["self"]
    n = len(shape(x))
    perm = list(range(n))
    d0, d1 = _axis(a["dim0"], n), _axis(a["dim1"], n)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _op.transpose(x, perm)


def _slice(a):
    x = a["self"]
    s = shape(x)
    ax = _axis(a.get("dim", 0), len(s))
    dim = s[ax]
    start = a.get("start") or 0
    end = a.get("end")
    end = dim if end is None else end
    step = a.get("step", 1)
    start, end = (start + dim if start < 0 else start), (end + dim if end < 0 else end)
    start, end = min(max(start, 0), dim), min(max(end, start if start <= dim else dim), dim)
    return _op.strided_slice(x, [start], [end], [step], axes=[ax])


def _select(a):
    x = a["self"]
    s = shape(x)
    ax = _axis(a["dim"], len(s))
    i = int(a["index"]) % s[ax]
    return _op.reshape(_op.strided_slice(x, [i], [i + 1], [1], axes=[ax]), s[:ax] + s[ax + 1:])


def _split(a):
    x = a["self"]
    s = shape(x)
    ax = _axis(a.get("dim", 0), len(s))
    if a["_op"] == "aten.split_with_sizes":
        sizes = list(a["split_sizes"])
    else:
        step = int(a["split_size"])
        sizes = [min(step, s[ax] - k) for k in range(0, s[ax], step)]
    outs, start = [], 0
    for size in sizes:
        outs.append(_op.strided_slice(x, [start], [start + size], [1], axes=[ax]))
        start += size
    return outs


def _chunk(a):
    s = shape(a["self"])
    ax = _axis(a.get("dim", 0), len(s))
    step = -(-s[ax] // int(a["chunks"]))
    return _split({"_op": "aten.split", "self": a["self"], "split_size": step, "dim": ax})


def _unsqueeze(a):
    s = list(shape(a["self"]))
    s.insert(_axis(a["dim"], len(s) + 1), 1)
    return _op.reshape(a["self"], s)


def _squeeze(a):
    x = a["self"]
    s = shape(x)
    dims = a.get("dim", a.get("dims"))
    axes = [k for k, d in enumerate(s) if d == 1] if dims is None else \
        [k for k in _axes(dims, len(s)) or [] if s[k] == 1]
    return _op.reshape(x, [d for k, d in enumerate(s) if k not in axes]) if axes else x


def _expand(a):
    x = a["self"]
    s = shape(x)
    size = [int(d) for d in a["size"]]
    lead = len(size) - len(s)
    full = [s[k - lead] if d == -1 else d for k, d in enumerate(size)]
    return common.broadcast(x, full)


def _cat(a):
    ts = [t for t in a["tensors"] if shape(t) != (0,)]
    return _op.concatenate(ts, axis=_axis(a.get("dim", 0), len(shape(ts[0]))))


def _where(a):
    c = a["condition"]
    x, y = a["self"], a["other"]
    if not _is_tensor(x) and not _is_tensor(y):
        x = const(np.float32(x) if isinstance(x, float) else x)
    x, y = _promote(x, y)
    return _op.where(c, x, y)


def _reduce(fn):
    def conv(a):
        x = a["self"]
        if a.get("dtype") is not None:
            x = _op.cast(x, _dtype(a["dtype"]))
        return fn(x, _axes(a.get("dim"), len(shape(x))), keepdims=bool(a.get("keepdim", False)))
    return conv


def _max(a):
    """``aten.max``: over all axes, over one (``.dim``: values and indices), or of two tensors."""
    x = a["self"]
    if "other" in a:
        return _op.maximum(*_promote(x, a["other"]))
    if "dim" not in a:
        return _op.max(x)
    return [_op.max(x, _axis(a["dim"], len(shape(x))), keepdims=bool(a.get("keepdim", False))), None]


def _any(a):
    """``aten.any``: whether some element over ``dim`` is true (a max of 0/1 values)."""
    x = a["self"]
    ones = _op.cast(x, "float32") if _dt(x) == "bool" else _op.cast(_op.not_equal(x, _scalar_like(0, x)), "float32")
    axes = _axes(a.get("dim"), len(shape(x)))
    return _op.greater(_op.max(ones, axes, keepdims=bool(a.get("keepdim", False))), const(np.float32(0)))


def _to_dtype(a):
    dt = a.get("dtype")
    x = a["self"]
    return x if dt is None or _dtype(dt) == _dt(x) else _op.cast(x, _dtype(dt))


def _silu(a):
    return _op.multiply(a["self"], _op.sigmoid(a["self"]))


def _hardtanh(a):
    return _op.clip(a["self"], a.get("min_val", -1.0), a.get("max_val", 1.0))


def _clamp(a):
    x = a["self"]
    lo = -np.inf if a.get("min") is None else a["min"]
    hi = np.inf if a.get("max") is None else a["max"]
    if _is_tensor(lo) or _is_tensor(hi):
        raise RelayError("clamp with tensor bounds is not supported")
    return _op.clip(x, lo, hi)


def _sdpa(a):
    """softmax(q @ kᵀ · scale + mask) @ v over the last two axes, by batch_matmul."""
    q, k, v = a["query"], a["key"], a["value"]
    sq, sk, sv = shape(q), shape(k), shape(v)
    if a.get("dropout_p", 0.0):
        raise RelayError("scaled_dot_product_attention with dropout_p > 0 (training) is not supported")
    if a.get("enable_gqa"):
        raise RelayError("scaled_dot_product_attention with enable_gqa is not supported")
    if len(sq) < 3 or sq[:-2] != sk[:-2] or sk[:-2] != sv[:-2]:
        raise RelayError(f"scaled_dot_product_attention: query {sq}, key {sk} and value {sv} must share "
                         "their batch axes")
    L, E, S = sq[-2], sq[-1], sk[-2]
    batch = sq[:-2]
    nb = int(np.prod(batch))
    scale = a.get("scale")
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    s = _nn.batch_matmul(_op.reshape(q, (nb, L, E)), _op.reshape(k, (nb, S, E)), transpose_b=True)
    s = _op.multiply(s, const(np.float32(scale)))
    s = _op.reshape(s, batch + (L, S))
    if a.get("is_causal"):
        allowed = np.tril(np.ones((L, S), bool))
        s = _op.where(const(allowed), s, const(np.float32(-np.inf)))
    mask = a.get("attn_mask")
    if mask is not None:
        s = _op.where(mask, s, const(np.float32(-np.inf))) if _dt(mask) == "bool" else _op.add(s, mask)
    p = _op.reshape(_nn.softmax(s, axis=-1), (nb, L, S))
    out = _nn.batch_matmul(p, _op.reshape(v, (nb, S, sv[-1])), transpose_b=False)
    return _op.reshape(out, batch + (L, sv[-1]))


def _full(a):
    dt = _dtype(a["dtype"]) if a.get("dtype") is not None else \
        ("float32" if isinstance(a["fill_value"], float) else "bool" if isinstance(a["fill_value"], bool) else "int64")
    return const(np.full(tuple(a["size"]), a["fill_value"], dt))


def _full_like(a, value=None):
    x = a["self"]
    dt = _dtype(a["dtype"]) if a.get("dtype") is not None else _dt(x)
    return const(np.full(shape(x), a["fill_value"] if value is None else value, dt))


def _arange(a):
    start, end, step = a.get("start", 0), a["end"], a.get("step", 1)
    dt = _dtype(a["dtype"]) if a.get("dtype") is not None else \
        ("float32" if any(isinstance(v, float) for v in (start, end, step)) else "int64")
    return const(np.arange(start, end, step, dtype=dt))


def _scalar_tensor(a):
    dt = _dtype(a["dtype"]) if a.get("dtype") is not None else "float32"
    return const(np.asarray(a["s"], dt))


def _identity(a):
    return a["self"]


CONVERTERS = {
    "aten.add": _binary(_op.add), "aten.sub": _binary(_op.subtract), "aten.mul": _compare(_op.multiply),
    "aten.div": _div, "aten.pow": _pow, "aten.maximum": _compare(_op.maximum),
    "aten.minimum": _compare(_op.minimum),
    "aten.gt": _compare(_op.greater), "aten.lt": _compare(_op.less), "aten.ge": _compare(_op.greater_equal),
    "aten.le": _compare(_op.less_equal), "aten.eq": _compare(_op.equal), "aten.ne": _compare(_op.not_equal),
    "aten.logical_and": _compare(_op.logical_and), "aten.logical_or": _compare(_op.logical_or),
    "aten.logical_not": _unary(_op.logical_not),
    "aten.relu": _unary(_nn.relu), "aten.relu6": lambda a: _op.clip(a["self"], 0.0, 6.0),
    "aten.hardtanh": _hardtanh, "aten.clamp": _clamp, "aten.gelu": _gelu, "aten.silu": _silu,
    "aten.sigmoid": _unary(_op.sigmoid), "aten.tanh": _unary(_op.tanh), "aten.exp": _unary(_op.exp),
    "aten.sqrt": _unary(_op.sqrt), "aten.rsqrt": _unary(_op.rsqrt), "aten.log": _unary(_op.log),
    "aten.abs": _unary(_op.abs), "aten.neg": _unary(_op.negative), "aten.erf": _unary(_op.erf),
    "aten.conv2d": _conv, "aten.convolution": _conv, "aten.linear": _linear, "aten.addmm": _addmm,
    "aten.mm": lambda a: common.matmul(a["self"], a["mat2"]),
    "aten.bmm": lambda a: _nn.batch_matmul(a["self"], a["mat2"], transpose_b=False),
    "aten.matmul": lambda a: common.matmul(a["self"], a["other"]),
    "aten.layer_norm": _layer_norm, "aten.native_layer_norm": _layer_norm,
    "aten.batch_norm": _batch_norm, "aten._native_batch_norm_legit_no_training": _batch_norm,
    "aten.softmax": _softmax, "aten._softmax": _softmax,
    "aten.max_pool2d": _max_pool, "aten.max_pool2d_with_indices": _max_pool, "aten.avg_pool2d": _avg_pool,
    "aten.adaptive_avg_pool2d": _adaptive_avg_pool, "aten._adaptive_avg_pool2d": _adaptive_avg_pool,
    "aten.view": lambda a: _reshape_to(a["self"], a["size"]),
    "aten.reshape": lambda a: _reshape_to(a["self"], a["shape"]),
    "aten._unsafe_view": lambda a: _reshape_to(a["self"], a["size"]),
    "aten.flatten": _flatten, "aten.permute": lambda a: _op.transpose(a["self"], a["dims"]),
    "aten.transpose": _transpose, "aten.t": lambda a: _op.transpose(a["self"], (1, 0)),
    "aten.cat": _cat, "aten.split": _split, "aten.split_with_sizes": _split, "aten.chunk": _chunk,
    "aten.slice": _slice, "aten.select": _select, "aten.unsqueeze": _unsqueeze, "aten.squeeze": _squeeze,
    "aten.expand": _expand, "aten.embedding": lambda a: _op.take(a["weight"], a["indices"], axis=0),
    "aten.where": _where,
    "aten.sum": _reduce(_op.sum), "aten.mean": _reduce(_op.mean), "aten.amax": _reduce(_op.max),
    "aten.max": _max, "aten.any": _any,
    "aten._to_copy": _to_dtype, "aten.to": _to_dtype,
    "aten.clone": _identity, "aten.contiguous": _identity, "aten.alias": _identity, "aten.detach": _identity,
    "aten.dropout": lambda a: a["input"], "aten.lift_fresh_copy": _identity,
    "aten.scaled_dot_product_attention": _sdpa,
    "aten.full": _full, "aten.full_like": _full_like, "aten.zeros_like": lambda a: _full_like(a, 0),
    "aten.ones_like": lambda a: _full_like(a, 1), "aten.arange": _arange, "aten.scalar_tensor": _scalar_tensor,
}


def _op_name(target) -> str:
    """``aten.conv2d`` for the overload ``aten.conv2d.default``."""
    return str(getattr(target, "overloadpacket", target))


def _bind(node, env: dict) -> dict:
    """The node's arguments by schema name (defaults filled in), fx nodes replaced by their
    relay expressions."""
    def value(v):
        if hasattr(v, "op") and hasattr(v, "target") and hasattr(v, "graph"):     # an fx.Node
            return env[v.name]
        if isinstance(v, (list, tuple)):
            return type(v)(value(x) for x in v)
        return v
    out = {}
    for k, arg in enumerate(node.target._schema.arguments):
        if k < len(node.args) and not arg.kwarg_only:
            v = node.args[k]
        elif arg.name in node.kwargs:
            v = node.kwargs[arg.name]
        elif arg.has_default_value():
            v = arg.default_value
        else:
            v = None
        out[arg.name] = value(v)
    return out


def _export(module, example_inputs):
    import torch
    if isinstance(module, torch.export.ExportedProgram):
        return module
    if isinstance(module, torch.jit.ScriptModule):
        raise RelayError("from_torch: a TorchScript module (torch.jit.trace/script) cannot be converted: "
                         "pass the nn.Module itself and its example inputs, "
                         "relay.frontend.from_torch(module, example_inputs); it is exported with torch.export")
    if not isinstance(module, torch.nn.Module):
        raise RelayError(f"from_torch: expects a torch.nn.Module or a torch.export.ExportedProgram, "
                         f"got {type(module).__name__}")
    if example_inputs is None:
        raise RelayError("from_torch: give example_inputs (a tuple of tensors) to export the module with")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    return torch.export.export(module, tuple(example_inputs))


def from_torch(module, example_inputs=None):
    """``(mod, params)`` from a ``torch.nn.Module`` (exported with ``torch.export.export(module,
    example_inputs)``; call ``module.eval()`` first) or an ``ExportedProgram``. ``main``'s
    parameters: the user inputs (named as in ``forward``, the example inputs' shapes and
    dtypes), then the weights it reads, named by their place in the module.

    >>> mod, params = from_torch(torch.nn.Linear(4, 3).eval(), (torch.randn(2, 4),))   # doctest: +SKIP
    >>> mod["main"].params[1].name_hint, params["weight"].shape                       # doctest: +SKIP
    ('weight', (3, 4))
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ImportError("relay.frontend.from_torch needs PyTorch: pip install torch") from None
    from torch.export.graph_signature import InputKind, OutputKind
    ep = _export(module, example_inputs)
    sig = ep.graph_signature
    mutated = sorted(getattr(sig, "buffers_to_mutate", {}).values())
    if mutated:
        raise RelayError(f"from_torch: the module updates its buffers {', '.join(mutated)} when it runs "
                         "(training mode): call module.eval() before exporting")
    state = dict(ep.state_dict)
    consts = dict(getattr(ep, "constants", {}) or {})
    specs = {s.arg.name: s for s in sig.input_specs}
    env, inputs, weights, params = {}, [], [], {}
    for node in ep.graph_module.graph.nodes:
        if node.op == "placeholder":
            spec = specs[node.name]
            if spec.kind == InputKind.USER_INPUT:
                val = node.meta.get("val")
                if val is None or not hasattr(val, "shape"):
                    raise RelayError(f"from_torch: the input {node.name!r} is not a tensor")
                v = Var(node.name, TensorType(tuple(int(d) for d in val.shape), _dtype(val.dtype)))
                inputs.append(v)
            else:
                t = state.get(spec.target) if spec.target in state else consts.get(spec.target)
                if t is None:
                    raise RelayError(f"from_torch: no value for {spec.kind.name.lower()} {spec.target!r}")
                arr = np.ascontiguousarray(t.detach().cpu().numpy())
                v = Var(spec.target, TensorType(arr.shape, arr.dtype.name))
                weights.append(v)
                params[spec.target] = arr
            env[node.name] = v
        elif node.op == "call_function":
            env[node.name] = _convert(node, env)
        elif node.op == "output":
            outs = node.args[0]
            user = [o for o, s in zip(outs, sig.output_specs) if s.kind == OutputKind.USER_OUTPUT]
            if len(user) != len(outs):
                raise RelayError("from_torch: the program has outputs other than the user's "
                                 f"({', '.join(s.kind.name for s in sig.output_specs)})")
            results = [env[o.name] for o in user]
        else:
            raise RelayError(f"from_torch: graph node {node.name!r} of kind {node.op!r} is not supported")
    body = results[0] if len(results) == 1 else Tuple(results)
    used = {id(v) for v in free_vars(body)}
    weights = [w for w in weights if id(w) in used]
    params = {w.name_hint: params[w.name_hint] for w in weights}
    return IRModule({"main": Function(inputs + weights, typed(body))}), params


def _convert(node, env):
    import operator
    if node.target is operator.getitem:
        src, index = env[node.args[0].name], node.args[1]
        if not isinstance(src, list):
            raise RelayError(f"from_torch: node {node.name!r} projects a value that is not a list")
        if src[index] is None:
            raise RelayError(f"from_torch: node {node.name!r} reads output {index} of {node.args[0].name!r}, "
                             "which is not computed (only the first output of batch_norm, layer_norm, "
                             "max_pool2d_with_indices and max.dim is)")
        return src[index]
    name = _op_name(node.target)
    schema = getattr(node.target, "_schema", None)
    if schema is not None and schema.is_mutable:
        raise RelayError(f"from_torch: {name} (node {node.name!r}) updates a tensor in place (a buffer in "
                         "training mode?): call module.eval() before exporting")
    conv = CONVERTERS.get(name)
    if conv is None:
        if name.startswith("aten._assert") or name.startswith("aten.sym_constrain"):
            return None
        raise RelayError(f"from_torch: operator {name!r} (node {node.name!r}) is not supported; "
                         f"supported: {', '.join(sorted(CONVERTERS))}")
    try:
        a = _bind(node, env) if hasattr(node.target, "_schema") else {}
        a["_op"] = name
        out = conv(a)
        return [typed(o) if o is not None else None for o in out] if isinstance(out, list) else typed(out)
    except RelayError as e:
        raise RelayError(f"from_torch: {name} (node {node.name!r}): {e}") from None
    except (KeyError, ValueError, TypeError, IndexError) as e:
        raise RelayError(f"from_torch: {name} (node {node.name!r}): cannot convert it "
                         f"({type(e).__name__}: {e})") from None


def from_pytorch(script_module, input_infos=None, *args, **kwargs):
    """TVM's name, which takes a TorchScript module: tilecraft reads ``torch.export`` programs
    instead; this says so (see :func:`from_torch`)."""
    raise RelayError("relay.frontend.from_pytorch (TorchScript) is not supported: call "
                     "relay.frontend.from_torch(module, example_inputs) with the nn.Module itself; "
                     "it is exported with torch.export")
