"""``SinkReshape``: reshapes that keep the last axis move after the element-wise operators,
softmaxes and layer norms that read them, so that a dense layer's epilogue fuses into it.

A frontend writes ``x @ W + b`` on a ``[1, S, H]`` value as ``reshape(dense(reshape(x, [S,
H]), W), [1, S, N]) + b``: the reshape after ``dense`` is an injective operator, which ends the
dense layer's fused group (TVM's rule), so the bias, a GELU and a residual add each become
kernels of their own that read and write the whole tensor again. All of these operators act
on the last axis, or on each element, so they commute with a reshape that only regroups the
leading axes: ``f(reshape(y)) == reshape(f(y))``.

Afterwards, for every value ``reshape(y, shape)`` with ``shape[-1] == y.shape[-1]``:

* a unary element-wise operator of it, a broadcasting ``add`` / ``subtract`` / ``multiply`` /
  ``divide`` / ``maximum`` / ``minimum`` / ``power`` of it with a scalar constant, a constant that
  varies along the last axis only (a bias), or a value of the same shape (then reshaped to
  ``y``'s), a ``nn.softmax`` or ``nn.layer_norm`` over the last axis, is computed on ``y``
  and reshaped after;
* a reshape of it back to ``y``'s shape is ``y`` itself, another one keeping the last axis is
  one reshape of ``y``;
* anything else reads the value reshaped as before (one reshape per value, shared by its
  readers).

So the reshape lands after the last such operator, where something that needs the shape
(a transpose, another dense layer, the function's result) reads it. Runs at opt_level 3.

>>> with tilecraft.transform.PassContext(opt_level=3):
...     mod = SinkReshape()(InferType()(mod))             # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from ..ir import Call, Constant, Function, Var, children, post_order, with_children
from ..op import OpPattern, make_call
from ..op import reshape as _reshape
from .infer_type import infer_expr
from .pass_infra import function_pass

_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power")
_LAST_AXIS = ("nn.softmax", "nn.layer_norm")


class _Sinker:
    def __init__(self):
        self.new: dict = {}       # id(old node) -> ("plain", expr) or ("view", base expr, shape)
        self.cache: dict = {}     # id(old node) -> its view materialised (one reshape)
        self.moved = 0            # operators now computed before a reshape

    def plain(self, n):
        state = self.new[id(n)]
        if state[0] == "plain":
            return state[1]
        if id(n) not in self.cache:
            self.cache[id(n)] = _reshape(state[1], state[2])
        return self.cache[id(n)]

    def visit(self, n):
        if type(n) is not Call or isinstance(n.op, Function):
            if type(n) in (Var, Constant, Function):
                return ("plain", n)
            return ("plain", with_children(n, tuple(self.plain(c) for c in children(n))))
        name = n.op.name
        views = [self.new[id(a)] for a in n.args if self.new[id(a)][0] == "view"]
        if name == "reshape":
            return self.reshape(n)
        if views and n.op.pattern == OpPattern.ELEMWISE and len(n.args) == 1:
            self.moved += 1
            return ("view", Call(n.op, (views[0][1],), n.attrs), views[0][2])
        if views and name in _LAST_AXIS and n.attrs.axis % n.checked_type.ndim == n.checked_type.ndim - 1 \
                and self.new[id(n.args[0])][0] == "view":
            base, shape = self.new[id(n.args[0])][1:]
            attrs = dict(n.attrs.items(), axis=-1)
            self.moved += 1
            return ("view", make_call(name, [base] + [self.plain(a) for a in n.args[1:]], **attrs), shape)
        if views and name in _BINARY:
            out = self.binary(n, views)
            if out is not None:
                return out
        return ("plain", with_children(n, tuple(self.plain(c) for c in children(n))))

    def reshape(self, n):
        target = tuple(n.checked_type.shape)
        state = self.new[id(n.args[0])]
        base, base_shape = (state[1], tuple(n.args[0].checked_type.shape)) if state[0] == "plain" else \
            (state[1], tuple(state[1].checked_type.shape))
        if target == base_shape:
            return ("plain", base)
        if base_shape and target and target[-1] == base_shape[-1]:
            return ("view", base, target)
        return ("plain", _reshape(base, target))

    def binary(self, n, views):
        """The operator on the views' base, or None when an operand does not fit (see the
        module docstring)."""
        base_ty = views[0][1].checked_type
        shape = views[0][2]
        if tuple(n.checked_type.shape) != shape or \
                any(v[2] != shape or tuple(v[1].checked_type.shape) != tuple(base_ty.shape) for v in views):
            return None
        args = []
        for a in n.args:
            state = self.new[id(a)]
            if state[0] == "view":
                args.append(state[1])
            elif tuple(a.checked_type.shape) == shape:
                args.append(_reshape(state[1], base_ty.shape))
            elif type(a) is Constant and a.data.size == 1:
                args.append(Constant(a.data.reshape(())))
            elif type(a) is Constant and a.data.ndim >= 1 and a.data.shape[-1] == shape[-1] \
                    and all(d == 1 for d in a.data.shape[:-1]):
                args.append(Constant(np.ascontiguousarray(a.data.reshape(shape[-1]))))
            else:
                return None
        self.moved += 1
        return ("view", Call(n.op, tuple(args), n.attrs), shape)


def sink_reshapes(f: Function) -> Function:
    """``f`` with its reshapes moved after the operators they commute with (see the module
    docstring); ``f`` itself when nothing moves."""
    nodes = post_order(f.body)
    if not any(type(n) is Call and getattr(n.op, "name", None) == "reshape" for n in nodes):
        return f
    sk = _Sinker()
    for n in nodes:
        state = sk.visit(n)
        if state[0] == "view":
            state = ("view", infer_expr(state[1]), state[2])     # types of the base for later nodes
        sk.new[id(n)] = state
    if not sk.moved:
        return f
    body = infer_expr(sk.plain(f.body))
    return Function(f.params, body, body.ty, f.attrs)


def _run(f: Function, mod) -> Function:
    return sink_reshapes(f)


def SinkReshape():
    """The pass; runs from opt_level 3."""
    return function_pass(_run, "SinkReshape", 3)
