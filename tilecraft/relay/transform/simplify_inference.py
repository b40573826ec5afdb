"""``SimplifyInference``: rewrite inference-only operators into arithmetic.

Afterwards there is no ``nn.batch_norm``: ``batch_norm(x, gamma, beta, mean, var).0`` is
``x * scale + shift`` with ``scale = gamma / sqrt(var + epsilon)`` and
``shift = beta - mean * scale``, both shaped to broadcast along the normalised axis (folded to
constants by FoldConstant when the statistics are weights); ``.1`` and ``.2`` are ``mean`` and
``var``. Runs at every opt_level: the kernels have no batch-norm compute.

>>> mod = SimplifyInference()(InferType()(mod))      # doctest: +SKIP
"""
from __future__ import annotations

from .. import op as _op
from ..ir import Call, Function, Tuple, TupleGetItem, const, rewrite, with_children
from .infer_type import infer_expr
from .pass_infra import function_pass


def _expand(v, axis: int, ndim: int):
    trailing = ndim - 1 - axis
    return _op.expand_dims(v, 1, trailing) if trailing else v


def _batch_norm(call: Call):
    x, gamma, beta, mean, var = call.args
    a = call.attrs
    axis = a.axis % x.ty.ndim
    scale = _op.divide(gamma, _op.sqrt(_op.add(var, const(a.epsilon, x.ty.dtype))))
    shift = _op.subtract(beta, _op.multiply(mean, scale))
    out = _op.add(_op.multiply(x, _expand(scale, axis, x.ty.ndim)), _expand(shift, axis, x.ty.ndim))
    return infer_expr(Tuple([out, mean, var]))


def _run(f: Function, mod) -> Function:
    def visit(node, kids):
        new = with_children(node, kids)
        if new is not node:
            new = infer_expr(new)
        if type(new) is Call and getattr(new.op, "name", None) == "nn.batch_norm":
            return _batch_norm(new)
        if type(new) is TupleGetItem and type(new.tuple_value) is Tuple:
            return new.tuple_value.fields[new.index]
        return new
    body = rewrite(f.body, visit)
    return f if body is f.body else Function(f.params, infer_expr(body), body.ty, f.attrs)


def SimplifyInference():
    """The pass (TVM's ``relay.transform.SimplifyInference()``)."""
    return function_pass(_run, "SimplifyInference", 0)
