"""``from_onnx``: an ONNX model as a graph module and its weights (TVM's
``relay.frontend.from_onnx``).

Each ONNX node is converted by the function :data:`CONVERTERS` names for its ``op_type``;
initializers become parameters of ``main`` (returned in ``params``, numpy arrays) unless a
converter reads them as static values (shapes, axes, slice bounds), which must be constants.
An operator without a converter, or a node a converter cannot take, is one
:class:`~tilecraft.relay.ir.RelayError` naming the operator and the node. ``onnx`` is imported
only here, when a model is converted.

>>> mod, params = relay.frontend.from_onnx(onnx.load("model.onnx"), shape={"data": (1, 3, 224, 224)})  # doctest: +SKIP
"""
from __future__ import annotations

import math

import numpy as np

from .. import op as _op
from ..ir import Constant, Function, IRModule, RelayError, Tuple, Var, const, free_vars, rewrite, with_children
from ..op import nn as _nn
from . import common
from .common import typed as _typed


class _Context:
    def __init__(self, graph, opset: int):
        self.opset = opset
        self.env: dict = {}          # ONNX value name -> relay expression
        self.values: dict = {}       # ONNX value name -> numpy array, for values known statically
        self.node = None

    def expr(self, name: str):
        if name not in self.env:
            raise RelayError(f"the input {name!r} is not produced by any earlier node")
        return self.env[name]

    def value(self, name: str, what: str) -> np.ndarray:
        if name in self.values:
            return self.values[name]
        e = self.env.get(name)
        if e is not None and type(e) is not Constant and \
                all(v.name_hint in self.values for v in free_vars(e)):
            e = self._fold(e)
        if type(e) is Constant:
            return e.data
        raise RelayError(f"{what} ({name!r}) must be a constant, an initializer or computed from "
                         "them and the static shapes of tensors (Shape); it depends on the inputs' values")

    def _fold(self, e):
        """``e`` (computed from initializers and constants, such as a shape computed with Shape,
        Gather and Concat) evaluated now."""
        from ..transform.fold_constant import fold_expr

        def bind(node, kids):
            if type(node) is Var:
                return const(self.values[node.name_hint])
            return with_children(node, kids)
        return fold_expr(_typed(rewrite(e, bind)))

    def shape(self, e) -> tuple:
        return e.checked_type.shape


def _attrs(node) -> dict:
    from onnx import helper
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _np_dtype(onnx_type: int) -> str:
    from onnx import helper
    return np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type)).name


# ---------------------------------------------------------------------------------------------
# Converters: conv(ctx, inputs (relay exprs or None), attrs, node) -> expr or list of exprs

def _binary(fn):
    return lambda ctx, ins, a, node: fn(ins[0], ins[1])


def _unary(fn):
    return lambda ctx, ins, a, node: fn(ins[0])


def _pads(a, kernel, in_hw, strides, dilations) -> tuple:
    """(top, left, bottom, right) from ONNX pads / auto_pad."""
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        p = list(a.get("pads", [0, 0, 0, 0])) if auto == "NOTSET" else [0, 0, 0, 0]
        return (p[0], p[1], p[2], p[3])
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise RelayError(f"auto_pad {auto!r} is not supported")
    out = []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        total = max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        out.append((small, big) if auto == "SAME_UPPER" else (big, small))
    return (out[0][0], out[1][0], out[0][1], out[1][1])


def _conv(ctx, ins, a, node):
    x, w = ins[0], ins[1]
    if len(ctx.shape(x)) != 4:
        raise RelayError(f"only 2-d convolutions (4-d input) are supported, got input shape {ctx.shape(x)}")
    kernel = ctx.shape(w)[2:]
    strides = tuple(a.get("strides", (1, 1)))
    dil = tuple(a.get("dilations", (1, 1)))
    pads = _pads(a, kernel, ctx.shape(x)[2:], strides, dil)
    out = _nn.conv2d(x, w, strides=strides, padding=pads, dilation=dil, groups=a.get("group", 1),
                     channels=ctx.shape(w)[0], kernel_size=kernel)
    if len(ins) > 2 and ins[2] is not None:
        out = _nn.bias_add(out, ins[2], axis=1)
    return out


def _gemm(ctx, ins, a, node):
    A, B = ins[0], ins[1]
    if a.get("transA", 0):
        A = _op.transpose(A, (1, 0))
    if not a.get("transB", 0):
        B = _op.transpose(B, (1, 0))
    out = _nn.dense(A, B)
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    if alpha != 1.0:
        out = _op.multiply(out, const(alpha))
    if len(ins) > 2 and ins[2] is not None:
        C = ins[2] if beta == 1.0 else _op.multiply(ins[2], const(beta))
        out = _op.add(out, C)
    return out


def _gelu(ctx, ins, a, node):
    x = ins[0]
    if a.get("approximate", "none") == "tanh":
        inner = _op.multiply(const(math.sqrt(2 / math.pi)),
                             _op.add(x, _op.multiply(const(0.044715), _op.multiply(x, _op.multiply(x, x)))))
        return _op.multiply(_op.multiply(const(0.5), x), _op.add(const(1.0), _op.tanh(inner)))
    half = _op.multiply(x, const(0.5))
    return _op.multiply(half, _op.add(const(1.0), _op.erf(_op.multiply(x, const(1 / math.sqrt(2))))))


def _softmax(ctx, ins, a, node):
    ndim = len(ctx.shape(ins[0]))
    axis = a.get("axis", -1 if ctx.opset >= 13 else 1)
    if ctx.opset < 13 and axis % ndim != ndim - 1:
        raise RelayError(f"Softmax before opset 13 with axis {axis} (flattening semantics) is not supported")
    return _nn.softmax(ins[0], axis=axis)


def _layer_norm(ctx, ins, a, node):
    x = ins[0]
    ndim = len(ctx.shape(x))
    axis = a.get("axis", -1) % ndim
    if len(node.output) > 1 and any(node.output[1:]):
        raise RelayError("LayerNormalization with its mean and inverse deviation as outputs is not supported")
    beta = ins[2] if len(ins) > 2 else None
    return common.layer_norm(x, ins[1], beta, ndim - axis, a.get("epsilon", 1e-5))


def _batch_norm(ctx, ins, a, node):
    if len(node.output) > 1 and any(node.output[1:]):
        raise RelayError("BatchNormalization in training mode (several outputs) is not supported")
    return _nn.batch_norm(*ins[:5], axis=1, epsilon=a.get("epsilon", 1e-5))[0]


def _pool(kind):
    def conv(ctx, ins, a, node):
        x = ins[0]
        if len(ctx.shape(x)) != 4:
            raise RelayError(f"only 2-d pooling (4-d input) is supported, got {ctx.shape(x)}")
        k = tuple(a["kernel_shape"])
        strides = tuple(a.get("strides", (1, 1)))
        dil = tuple(a.get("dilations", (1, 1)))
        pads = _pads(a, k, ctx.shape(x)[2:], strides, dil)
        grown = False
        if a.get("ceil_mode", 0):
            pads, grown = common.ceil_mode_pads(ctx.shape(x)[2:], k, strides, dil, pads)
        if kind == "max":
            return _nn.max_pool2d(x, k, strides, dil, pads)
        count_pad = bool(a.get("count_include_pad", 0))
        if grown and count_pad:
            raise RelayError("AveragePool with ceil_mode=1 and count_include_pad=1 over a window that "
                             "reaches past the padding is not supported")
        return _nn.avg_pool2d(x, k, strides, dil, pads, count_include_pad=count_pad)
    return conv


def _reshape(ctx, ins, a, node):
    x = ins[0]
    shape = [int(d) for d in ctx.value(node.input[1], "the shape of Reshape")]
    old = ctx.shape(x)
    if not a.get("allowzero", 0):
        shape = [old[k] if d == 0 else d for k, d in enumerate(shape)]
    if shape.count(-1) > 1:
        raise RelayError(f"the shape {shape} has more than one -1")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1]))
        shape[shape.index(-1)] = int(np.prod(old)) // known if known else 0
    return _op.reshape(x, shape)


def _flatten(ctx, ins, a, node):
    s = ctx.shape(ins[0])
    axis = a.get("axis", 1) % (len(s) + 1) if s else 0
    return _op.reshape(ins[0], (int(np.prod(s[:axis])), int(np.prod(s[axis:]))))


def _axes_input(ctx, ins, a, node, k: int, what: str):
    if "axes" in a:
        return list(a["axes"])
    if len(node.input) > k and node.input[k]:
        return [int(v) for v in ctx.value(node.input[k], what)]
    return None


def _unsqueeze(ctx, ins, a, node):
    s = list(ctx.shape(ins[0]))
    axes = _axes_input(ctx, ins, a, node, 1, "the axes of Unsqueeze")
    n = len(s) + len(axes)
    for ax in sorted(x % n for x in axes):
        s.insert(ax, 1)
    return _op.reshape(ins[0], s)


def _squeeze(ctx, ins, a, node):
    axes = _axes_input(ctx, ins, a, node, 1, "the axes of Squeeze")
    return _op.squeeze(ins[0], axes)


def _split(ctx, ins, a, node):
    x = ins[0]
    s = ctx.shape(x)
    axis = a.get("axis", 0) % len(s)
    if "split" in a:
        sizes = list(a["split"])
    elif len(node.input) > 1 and node.input[1]:
        sizes = [int(v) for v in ctx.value(node.input[1], "the sizes of Split")]
    else:
        n = a.get("num_outputs", len(node.output))
        step = -(-s[axis] // n)
        sizes = [min(step, s[axis] - k * step) for k in range(n)]
    outs, start = [], 0
    for size in sizes:
        outs.append(_op.strided_slice(x, [start], [start + size], [1], axes=[axis]))
        start += size
    return outs


def _slice(ctx, ins, a, node):
    x = ins[0]
    s = ctx.shape(x)
    if ctx.opset < 10:
        starts, ends, axes, steps = a["starts"], a["ends"], a.get("axes"), None
    else:
        starts = ctx.value(node.input[1], "the starts of Slice")
        ends = ctx.value(node.input[2], "the ends of Slice")
        axes = ctx.value(node.input[3], "the axes of Slice") if len(node.input) > 3 and node.input[3] else None
        steps = ctx.value(node.input[4], "the steps of Slice") if len(node.input) > 4 and node.input[4] else None
    axes = [int(v) % len(s) for v in (axes if axes is not None else range(len(starts)))]
    steps = [int(v) for v in steps] if steps is not None else [1] * len(axes)
    begin, end = [], []
    for ax, b, e, st in zip(axes, starts, ends, steps):
        dim = s[ax]
        b, e = int(b), int(e)
        b = b + dim if b < 0 else b
        e = e + dim if e < 0 else e
        if st > 0:
            b, e = min(max(b, 0), dim), min(max(e, 0), dim)
        else:
            b, e = min(max(b, -1), dim - 1), min(max(e, -1), dim - 1)
        begin.append(b)
        end.append(e)
    return _op.strided_slice(x, begin, end, steps, axes=axes)


def _reduce(fn):
    def conv(ctx, ins, a, node):
        axes = _axes_input(ctx, ins, a, node, 1, f"the axes of {node.op_type}")
        if axes is None and a.get("noop_with_empty_axes", 0):
            return ins[0]
        return fn(ins[0], axes, keepdims=bool(a.get("keepdims", 1)))
    return conv


def _shape(ctx, ins, a, node):
    s = ctx.shape(ins[0])
    start, end = a.get("start", 0), a.get("end", len(s))
    return const(np.asarray(s[start:end], "int64"))


def _constant_of_shape(ctx, ins, a, node):
    from onnx import numpy_helper
    dims = tuple(int(d) for d in ctx.value(node.input[0], "the shape of ConstantOfShape"))
    value = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, "float32")
    return const(np.full(dims, value.reshape(-1)[0], value.dtype))


def _expand(ctx, ins, a, node):
    x = ins[0]
    to = tuple(int(d) for d in ctx.value(node.input[1], "the shape of Expand"))
    return common.broadcast(x, np.broadcast_shapes(ctx.shape(x), to))


def _clip(ctx, ins, a, node):
    x = ins[0]
    if ctx.opset < 11:
        lo, hi = a.get("min", -np.inf), a.get("max", np.inf)
    else:
        bound = [ctx.value(node.input[k], f"the {what} of Clip").item() if len(node.input) > k and node.input[k]
                 else default for k, what, default in ((1, "min", -np.inf), (2, "max", np.inf))]
        lo, hi = bound
    return _op.clip(x, lo, hi)


def _pad(ctx, ins, a, node):
    x = ins[0]
    mode = a.get("mode", "constant")
    if mode != "constant":
        raise RelayError(f"Pad with mode {mode!r} is not supported (only 'constant')")
    ndim = len(ctx.shape(x))
    if ctx.opset < 11:
        pads, value, axes = list(a["pads"]), a.get("value", 0.0), None
    else:
        pads = [int(v) for v in ctx.value(node.input[1], "the pads of Pad")]
        value = ctx.value(node.input[2], "the value of Pad").item() if len(node.input) > 2 and node.input[2] else 0.0
        axes = [int(v) % ndim for v in ctx.value(node.input[3], "the axes of Pad")] \
            if len(node.input) > 3 and node.input[3] else None
    axes = axes if axes is not None else list(range(ndim))
    if any(p < 0 for p in pads):
        raise RelayError(f"Pad with negative pads {pads} (cropping) is not supported")
    width = [(0, 0)] * ndim
    for k, ax in enumerate(axes):
        width[ax] = (pads[k], pads[k + len(axes)])
    return _nn.pad(x, width, value)


def _trilu(ctx, ins, a, node):
    """Upper (``upper=1``) or lower triangle of the last two axes, from diagonal ``k``; the rest
    zero (a causal attention mask)."""
    x = ins[0]
    s = ctx.shape(x)
    k = int(ctx.value(node.input[1], "the diagonal of Trilu").item()) if len(node.input) > 1 and node.input[1] else 0
    keep = np.triu(np.ones(s[-2:], bool), k) if a.get("upper", 1) else np.tril(np.ones(s[-2:], bool), k)
    dtype = x.checked_type.dtype
    return _op.where(const(keep), x, const(np.zeros((), dtype)))


def _variadic(fn):
    def conv(ctx, ins, a, node):
        out = ins[0]
        for x in ins[1:]:
            out = fn(out, x)
        return out
    return conv


def _constant(ctx, ins, a, node):
    from onnx import numpy_helper
    if "value" in a:
        return const(numpy_helper.to_array(a["value"]))
    for key, dtype in (("value_float", "float32"), ("value_int", "int64")):
        if key in a:
            return const(np.asarray(a[key], dtype))
    for key, dtype in (("value_floats", "float32"), ("value_ints", "int64")):
        if key in a:
            return const(np.asarray(list(a[key]), dtype))
    raise RelayError(f"Constant with attributes {sorted(a)} is not supported")


CONVERTERS = {
    "Add": _binary(_op.add), "Sub": _binary(_op.subtract), "Mul": _binary(_op.multiply),
    "Div": _binary(_op.divide), "Pow": _binary(_op.power),
    "Greater": _binary(_op.greater), "Less": _binary(_op.less), "Equal": _binary(_op.equal),
    "GreaterOrEqual": _binary(_op.greater_equal), "LessOrEqual": _binary(_op.less_equal),
    "Not": _unary(_op.logical_not), "And": _binary(_op.logical_and), "Or": _binary(_op.logical_or),
    "Max": _variadic(_op.maximum), "Min": _variadic(_op.minimum), "Abs": _unary(_op.abs), "Log": _unary(_op.log),
    "Clip": _clip, "Pad": _pad, "Trilu": _trilu, "Expand": _expand, "Shape": _shape, "ConstantOfShape": _constant_of_shape,
    "Relu": _unary(_nn.relu), "Sigmoid": _unary(_op.sigmoid), "Tanh": _unary(_op.tanh), "Erf": _unary(_op.erf),
    "Exp": _unary(_op.exp), "Sqrt": _unary(_op.sqrt), "Neg": _unary(_op.negative), "Gelu": _gelu,
    "Conv": _conv, "Gemm": _gemm, "MatMul": lambda ctx, ins, a, node: common.matmul(ins[0], ins[1]),
    "Softmax": _softmax, "LayerNormalization": _layer_norm, "BatchNormalization": _batch_norm,
    "MaxPool": _pool("max"), "AveragePool": _pool("avg"),
    "GlobalAveragePool": _unary(_nn.global_avg_pool2d), "GlobalMaxPool": _unary(_nn.global_max_pool2d),
    "Reshape": _reshape, "Flatten": _flatten,
    "Transpose": lambda ctx, ins, a, node: _op.transpose(ins[0], a.get("perm")),
    "Concat": lambda ctx, ins, a, node: _op.concatenate(ins, axis=a["axis"]),
    "Split": _split, "Slice": _slice,
    "Gather": lambda ctx, ins, a, node: _op.take(ins[0], ins[1], axis=a.get("axis", 0)),
    "Where": lambda ctx, ins, a, node: _op.where(*ins),
    "ReduceSum": _reduce(_op.sum), "ReduceMean": _reduce(_op.mean), "ReduceMax": _reduce(_op.max),
    "Cast": lambda ctx, ins, a, node: _op.cast(ins[0], _np_dtype(a["to"])),
    "Constant": _constant, "Identity": lambda ctx, ins, a, node: ins[0],
    "Unsqueeze": _unsqueeze, "Squeeze": _squeeze,
}


def _input_type(vi, shape: dict, dtype):
    name = vi.name
    t = vi.type.tensor_type
    dims = []
    for k, d in enumerate(t.shape.dim):
        dims.append(d.dim_value if d.HasField("dim_value") else None)
    if name in shape:
        given = tuple(int(d) for d in shape[name])
        if dims and len(given) != len(dims):
            raise RelayError(f"from_onnx: input {name!r} has {len(dims)} dimensions, shape= gives {given}")
        dims = list(given)
    if any(d is None or d <= 0 for d in dims):
        raise RelayError(f"from_onnx: input {name!r} has a dynamic shape {dims}; give it with "
                         f"shape={{{name!r}: (...)}}")
    dt = dtype.get(name, "float32") if isinstance(dtype, dict) else dtype
    if t.elem_type:
        dt = _np_dtype(t.elem_type) if name not in (dtype if isinstance(dtype, dict) else {}) else dt
    return tuple(dims), dt


def from_onnx(model, shape: dict | None = None, dtype="float32", opset: int | None = None,
              freeze_params: bool = False):
    """``(mod, params)``: the model's graph as ``mod["main"]`` (parameters: the graph inputs,
    then the initializers it reads as tensors) and the initializers' values by name.
    ``shape`` fixes input shapes (required for dynamic dimensions); ``dtype`` is the inputs'
    dtype where the model does not say; ``freeze_params`` makes the weights constants of the
    graph instead (``params`` is then empty).

    >>> mod, params = from_onnx(model, shape={"x": (1, 8)})     # doctest: +SKIP
    """
    try:
        from onnx import numpy_helper
    except ImportError:
        raise ImportError('relay.frontend.from_onnx needs the onnx package: pip install onnx '
                          '(or pip install -e ".[relay]")') from None
    shape = dict(shape or {})
    graph = model.graph
    if opset is None:
        opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=13)
    ctx = _Context(graph, opset)
    init_names = {t.name for t in graph.initializer}
    inputs = []
    for vi in graph.input:
        if vi.name in init_names:
            continue
        s, dt = _input_type(vi, shape, dtype)
        v = Var(vi.name, _tensor_type(s, dt))
        ctx.env[vi.name] = v
        inputs.append(v)
    unknown = sorted(set(shape) - {v.name_hint for v in inputs})
    if unknown:
        raise RelayError(f"from_onnx: shape= names {', '.join(unknown)}, which "
                         f"{'is not an input' if len(unknown) == 1 else 'are not inputs'} of the model (its inputs: {', '.join(v.name_hint for v in inputs)})")
    params = {}
    for t in graph.initializer:
        arr = numpy_helper.to_array(t)
        ctx.values[t.name] = arr
        if freeze_params:
            ctx.env[t.name] = const(arr)
        else:
            ctx.env[t.name] = Var(t.name, _tensor_type(arr.shape, arr.dtype.name))
            params[t.name] = arr
    for node in graph.node:
        conv = CONVERTERS.get(node.op_type)
        where = f"node {node.name!r}" if node.name else f"the node with output {node.output[0]!r}"
        if node.domain not in ("", "ai.onnx") or conv is None:
            raise RelayError(f"from_onnx: operator {node.op_type!r} ({where}) is not supported; "
                             f"supported: {', '.join(sorted(CONVERTERS))}")
        try:
            ins = [ctx.expr(n) if n else None for n in node.input]
            out = conv(ctx, ins, _attrs(node), node)
            outs = out if isinstance(out, list) else [out]
            outs = [_typed(o) for o in outs]
        except RelayError as e:
            raise RelayError(f"from_onnx: {node.op_type} ({where}): {e}") from None
        except (KeyError, ValueError, TypeError, IndexError) as e:
            raise RelayError(f"from_onnx: {node.op_type} ({where}): cannot convert it ({type(e).__name__}: {e})") from None
        for name, o in zip(node.output, outs):
            if name:
                ctx.env[name] = o
    results = [ctx.expr(o.name) for o in graph.output]
    body = results[0] if len(results) == 1 else Tuple(results)
    used = {id(v) for v in free_vars(body)}
    weights = [ctx.env[t.name] for t in graph.initializer
               if type(ctx.env[t.name]) is Var and id(ctx.env[t.name]) in used]
    params = {v.name_hint: params[v.name_hint] for v in weights}
    func = Function(inputs + weights, body)
    return IRModule({"main": func}), params


def _tensor_type(shape, dtype):
    from ..ir import TensorType
    return TensorType(tuple(shape), str(np.dtype(dtype)))


