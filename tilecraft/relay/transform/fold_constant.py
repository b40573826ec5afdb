"""``FoldConstant``: evaluate, at compile time, every operator call whose arguments are constants.

Afterwards no call of a table operator has only constant arguments (tuples of constants count as
constant): each such call is replaced by a :class:`Constant` holding its value, computed with the
operator's ``topi`` compute by the reference interpreter (``tilecraft.interp``), the same
definition the compiled kernel uses. A projection ``(c0, c1).N`` of constants folds too.
Weights transposed, reshaped or scaled by the frontend are folded this way.

>>> mod = FoldConstant()(InferType()(mod))      # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from ..ir import Call, Constant, Function, Tuple, TupleGetItem, rewrite, with_children
from .infer_type import infer_expr
from .pass_infra import function_pass


def evaluate_call(call: Call) -> np.ndarray:
    """The value of a typed call of a table operator whose arguments are constants (or tuples
    of constants), computed with its topi compute by the reference interpreter."""
    from tilecraft import te
    from tilecraft.interp import evaluate
    feed = {}

    def placeholder(c: Constant, k: int):
        t = te.placeholder(c.data.shape, dtype=c.data.dtype.name, name=f"c{k}")
        feed[t] = np.array(c.data)          # a copy: 0-d stays 0-d
        return t
    inputs = []
    for k, a in enumerate(call.args):
        if isinstance(a, Tuple):
            inputs.append([placeholder(f, f"{k}_{j}") for j, f in enumerate(a.fields)])
        else:
            inputs.append(placeholder(a, k))
    out = call.op.compute(call.attrs, inputs, call.ty)
    return np.asarray(evaluate(out, feed))


def _is_const(e) -> bool:
    return type(e) is Constant or (type(e) is Tuple and all(type(f) is Constant for f in e.fields))


def fold_expr(e):
    """``e`` with its constant calls folded (typed input, typed output)."""
    def visit(node, kids):
        new = with_children(node, kids)
        if new is not node:
            new = infer_expr(new)
        t = type(new)
        if t is Call and not isinstance(new.op, Function) and new.op.compute is not None \
                and new.args and all(_is_const(a) for a in new.args):
            return Constant(evaluate_call(new))
        if t is TupleGetItem and type(new.tuple_value) is Tuple:
            field = new.tuple_value.fields[new.index]
            if type(field) is Constant:
                return field
        return new
    return rewrite(e, visit)


def _run(f: Function, mod) -> Function:
    body = fold_expr(f.body)
    return f if body is f.body else Function(f.params, infer_expr(body), body.ty, f.attrs)


def FoldConstant():
    """The pass (TVM's ``relay.transform.FoldConstant()``); runs from opt_level 2."""
    return function_pass(_run, "FoldConstant", 2)
