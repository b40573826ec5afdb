"""``ToMixedPrecision``: compute a float32 model in float16 (TVM's name), its inputs and outputs
kept float32.

Afterwards every float32 value inside the function is float16: each float32 parameter is read
through one ``cast`` to float16, each float32 constant (a weight, a bias, a scalar) holds its
value rounded to float16, a ``cast`` to float32 casts to float16 instead, and each float32
result of the function is cast back to float32 at the end. Integer and boolean values are left
alone. It is ``model.half()`` with float32 at the boundary: what keeps the precision is the
kernels, which accumulate in float32 (the tensor-core convolutions, dense layers and
batch_matmuls of ``relay/backend/cuda_tensorcore.py``; its softmax and layer-norm row kernels sum
in float32), not a list of operators left in float32 as TVM's pass keeps. Parameters bound later
by ``relay.build(..., params=...)`` are float32 values behind a cast, folded by FoldConstant.

>>> mod = relay.transform.ToMixedPrecision("float16")(mod)        # doctest: +SKIP
>>> lib = relay.build(mod, target="cuda", params=params)          # doctest: +SKIP
"""
from __future__ import annotations

from .. import op as _op
from ..ir import Call, Constant, Function, RelayError, Tuple, TensorType, Var, rewrite, with_children
from .infer_type import infer_expr
from .pass_infra import function_pass


def _to_low(node, kids, low: str):
    t = type(node)
    if t is Var:
        return _op.cast(node, low) if isinstance(node.ty, TensorType) and node.ty.dtype == "float32" else node
    if t is Constant:
        return Constant(node.data.astype(low)) if node.data.dtype.name == "float32" else node
    new = with_children(node, kids)
    if t is Call and getattr(new.op, "name", None) == "cast" and new.attrs.dtype == "float32":
        new = _op.cast(new.args[0], low)
    return new if new is node else infer_expr(new)


def ToMixedPrecision(mixed_precision_type: str = "float16"):
    """The pass: float32 computed as ``mixed_precision_type`` (``"float16"``), float32 at the
    function's boundary (see the module docstring).

    >>> mod = ToMixedPrecision()(InferType()(mod))                     # doctest: +SKIP
    """
    if mixed_precision_type != "float16":
        raise RelayError(f"ToMixedPrecision: mixed_precision_type must be 'float16', got {mixed_precision_type!r}")

    def run(f: Function, mod) -> Function:
        body = rewrite(f.body, lambda n, kids: _to_low(n, kids, mixed_precision_type))
        if body is f.body:
            return f
        old = f.body

        def back(new, orig):
            if isinstance(orig.checked_type, TensorType) and orig.checked_type.dtype == "float32":
                return infer_expr(_op.cast(new, "float32"))
            return new
        if type(old) is Tuple:
            body = infer_expr(Tuple([back(n, o) for n, o in zip(body.fields, old.fields)]))
        else:
            body = back(body, old)
        return Function(f.params, body, body.ty, f.attrs)
    return function_pass(run, "ToMixedPrecision", 0)
