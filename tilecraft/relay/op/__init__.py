"""Graph operators: the table (``registry.OPS``) and the functions that make calls of them,
with TVM's names (``relay.add``, ``relay.nn.conv2d``, ...).

>>> from tilecraft import relay
>>> x = relay.var("x", shape=(1, 8))
>>> y = relay.nn.relu(relay.add(x, relay.const(1.0)))
"""
from __future__ import annotations

from ..ir import Attrs, Call, RelayError, Tuple
from .registry import OPS, REQUIRED, Op, OpPattern, get


def make_call(name: str, args, **attrs) -> Call:
    """A call of operator ``name``; its attributes are checked against the table's schema
    (an unknown one, or a missing required one, is refused) and completed with defaults.

    >>> make_call("nn.softmax", [x], axis=-1)     # doctest: +SKIP
    """
    op = get(name)
    args = tuple(args)
    if op.num_inputs >= 0 and len(args) != op.num_inputs:
        raise RelayError(f"{name}: takes {op.num_inputs} argument{'s' * (op.num_inputs != 1)}, got {len(args)}")
    unknown = sorted(set(attrs) - set(op.attrs))
    if unknown:
        raise RelayError(f"{name}: unknown attribute{'s' * (len(unknown) > 1)} {', '.join(unknown)}; "
                         f"it takes: {', '.join(op.attrs) or 'none'}")
    full = {}
    for key, default in op.attrs.items():
        value = attrs.get(key, default)
        if value is REQUIRED:
            raise RelayError(f"{name}: the attribute {key!r} is required")
        full[key] = value
    return Call(op, args, Attrs(full))


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _pad4(v):
    v = (v,) if isinstance(v, int) else tuple(v)
    return {1: v * 4, 2: v + v, 4: v}[len(v)]


# element-wise
def add(a, b): return make_call("add", [a, b])                      # noqa: E704
def subtract(a, b): return make_call("subtract", [a, b])            # noqa: E704
def multiply(a, b): return make_call("multiply", [a, b])            # noqa: E704
def divide(a, b): return make_call("divide", [a, b])                # noqa: E704
def power(a, b): return make_call("power", [a, b])                  # noqa: E704
def greater(a, b): return make_call("greater", [a, b])              # noqa: E704
def less(a, b): return make_call("less", [a, b])                    # noqa: E704
def equal(a, b): return make_call("equal", [a, b])                  # noqa: E704
def greater_equal(a, b): return make_call("greater_equal", [a, b])  # noqa: E704
def less_equal(a, b): return make_call("less_equal", [a, b])        # noqa: E704
def not_equal(a, b): return make_call("not_equal", [a, b])          # noqa: E704
def maximum(a, b): return make_call("maximum", [a, b])              # noqa: E704
def minimum(a, b): return make_call("minimum", [a, b])              # noqa: E704
def logical_and(a, b): return make_call("logical_and", [a, b])      # noqa: E704
def logical_or(a, b): return make_call("logical_or", [a, b])        # noqa: E704
def logical_not(x): return make_call("logical_not", [x])            # noqa: E704
def log(x): return make_call("log", [x])                            # noqa: E704
def abs(x): return make_call("abs", [x])                            # noqa: A001,E704
def rsqrt(x): return make_call("rsqrt", [x])                        # noqa: E704
def clip(x, a_min, a_max): return make_call("clip", [x], a_min=float(a_min), a_max=float(a_max))  # noqa: E704
def broadcast_to(x, shape): return make_call("broadcast_to", [x], shape=tuple(int(d) for d in shape))  # noqa: E704,E501
def layout_transform(x, src_layout, dst_layout): return make_call("layout_transform", [x], src_layout=src_layout, dst_layout=dst_layout)  # noqa: E704,E501
def where(c, a, b): return make_call("where", [c, a, b])            # noqa: E704
def exp(x): return make_call("exp", [x])                            # noqa: E704
def sqrt(x): return make_call("sqrt", [x])                          # noqa: E704
def tanh(x): return make_call("tanh", [x])                          # noqa: E704
def sigmoid(x): return make_call("sigmoid", [x])                    # noqa: E704
def erf(x): return make_call("erf", [x])                            # noqa: E704
def negative(x): return make_call("negative", [x])                  # noqa: E704
def copy(x): return make_call("copy", [x])                          # noqa: E704
def cast(x, dtype): return make_call("cast", [x], dtype=str(dtype))  # noqa: E704


# layout
def reshape(x, newshape): return make_call("reshape", [x], newshape=tuple(newshape))   # noqa: E704
def transpose(x, axes=None): return make_call("transpose", [x], axes=None if axes is None else tuple(axes))  # noqa: E704,E501
def expand_dims(x, axis, num_newaxis=1): return make_call("expand_dims", [x], axis=axis, num_newaxis=num_newaxis)  # noqa: E704,E501
def squeeze(x, axis=None): return make_call("squeeze", [x], axis=None if axis is None else tuple(axis))  # noqa: E704,E501
def take(data, indices, axis=0): return make_call("take", [data, indices], axis=axis)  # noqa: E704


def concatenate(data, axis=0):
    """The tensors of ``data`` (a list or a relay Tuple) joined along ``axis``."""
    if not isinstance(data, Tuple):
        data = Tuple(list(data))
    return make_call("concatenate", [data], axis=axis)


def strided_slice(x, begin, end, strides=None, axes=None):
    """``x[begin:end:strides]`` on ``axes`` (bounds already within the axes)."""
    strides = tuple(strides) if strides is not None else (1,) * len(begin)
    return make_call("strided_slice", [x], begin=tuple(begin), end=tuple(end), strides=strides,
                     axes=None if axes is None else tuple(axes))


# reductions
def _axes(axis):
    return None if axis is None else ((axis,) if isinstance(axis, int) else tuple(axis))


def sum(x, axis=None, keepdims=False): return make_call("sum", [x], axis=_axes(axis), keepdims=bool(keepdims))  # noqa: A001,E704,E501
def mean(x, axis=None, keepdims=False): return make_call("mean", [x], axis=_axes(axis), keepdims=bool(keepdims))  # noqa: E704,E501
def max(x, axis=None, keepdims=False): return make_call("max", [x], axis=_axes(axis), keepdims=bool(keepdims))  # noqa: A001,E704,E501


from . import nn  # noqa: E402  (relay.nn.*: the layer operators)

__all__ = ["OPS", "Op", "OpPattern", "get", "make_call", "nn"]
