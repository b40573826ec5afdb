"""``EliminateCommonSubexpr``: compute each distinct operator call once.

Afterwards no two calls in a function have the same operator, the same attributes and the same
arguments (the same nodes; constants count as the same when their arrays are equal): the later
one is replaced by the earlier, so its readers share it. Run bottom-up, this merges whole
repeated sub-graphs (a model that computes ``x * scale`` in three places computes it once).

>>> mod = EliminateCommonSubexpr()(InferType()(mod))      # doctest: +SKIP
"""
from __future__ import annotations

from ..ir import Call, Constant, Function, Tuple, TupleGetItem, rewrite, with_children
from .infer_type import infer_function
from .pass_infra import function_pass


def _key(node, const_ids: dict):
    t = type(node)
    if t is Call and not isinstance(node.op, Function):
        return ("call", node.op.name, node.attrs, tuple(const_ids.get(id(a), id(a)) for a in node.args))
    if t is Tuple:
        return ("tuple", tuple(const_ids.get(id(f), id(f)) for f in node.fields))
    if t is TupleGetItem:
        return ("get", id(node.tuple_value), node.index)
    return None


def eliminate_expr(e):
    """``e`` with its common sub-expressions merged."""
    seen: dict = {}
    const_ids: dict = {}      # id(constant) -> id of the first equal constant (small ones only)
    first_const: dict = {}

    def visit(node, kids):
        new = with_children(node, kids)
        if type(new) is Constant:
            if new.data.size <= 16:     # hashing big weights costs more than it saves
                k = (new.data.dtype.str, new.data.shape, new.data.tobytes())
                const_ids[id(new)] = id(first_const.setdefault(k, new))
            return new
        k = _key(new, const_ids)
        if k is None:
            return new
        return seen.setdefault(k, new)
    return rewrite(e, visit)


def _run(f: Function, mod) -> Function:
    body = eliminate_expr(f.body)
    return f if body is f.body else infer_function(Function(f.params, body, None, f.attrs))


def EliminateCommonSubexpr():
    """The pass (TVM's ``relay.transform.EliminateCommonSubexpr()``); runs from opt_level 3."""
    return function_pass(_run, "EliminateCommonSubexpr", 3)
