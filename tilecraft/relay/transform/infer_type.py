"""``InferType``: fill in the type of every node.

Afterwards every expression of every function (primitive functions included) has its
``checked_type``: a Var its annotation, a Constant its array's, a call its operator's type
relation applied to its arguments' types (a call of a function: the function's body type), a
tuple the tuple of its fields', ``t.N`` field N of ``t``'s. A mismatch is one
:class:`~tilecraft.relay.ir.RelayError` naming the operator; it never leaves a half-typed module.

>>> mod = InferType()(mod)        # doctest: +SKIP
>>> mod["main"].body.checked_type # doctest: +SKIP
"""
from __future__ import annotations

from ..ir import (Call, Constant, Function, IRModule, RelayError, Tuple, TupleGetItem, TupleType, Var,
                  rewrite, with_children)
from .pass_infra import function_pass


def infer_expr(e):
    """``e`` with every node typed (the same object when all were typed already)."""
    def visit(node, kids):
        new = with_children(node, kids)
        if type(new) is Call and isinstance(new.op, Function):
            fn = infer_function(new.op)
            if fn is not new.op:
                new = Call(fn, new.args, new.attrs)
        if new.ty is not None:
            return new
        return new.with_type(_type_of(new))
    return rewrite(e, visit)


def infer_function(f: Function) -> Function:
    """A function with its body typed and its ``ret_type`` set."""
    for p in f.params:
        if p.ty is None:
            raise RelayError(f"InferType: parameter %{p.name_hint} has no type; give relay.var a shape")
    body = infer_expr(f.body)
    if body is f.body and f.ty is not None:
        return f
    new = Function(f.params, body, body.ty, f.attrs)
    object.__setattr__(new, "ty", body.ty)   # a function's own type: its result's (no FuncType yet)
    return new


def _type_of(e):
    t = type(e)
    if t is Var:
        raise RelayError(f"InferType: %{e.name_hint} has no type")
    if t is Constant:
        return e.ty
    if t is Tuple:
        return TupleType(tuple(f.ty for f in e.fields))
    if t is TupleGetItem:
        tt = e.tuple_value.ty
        if not isinstance(tt, TupleType):
            raise RelayError(f"InferType: .{e.index} of a value that is not a tuple ({tt})")
        if not 0 <= e.index < len(tt.fields):
            raise RelayError(f"InferType: .{e.index} of a tuple of {len(tt.fields)} fields")
        return tt.fields[e.index]
    if t is Call:
        if isinstance(e.op, Function):
            _check_args(e.op, e.args)
            return e.op.body.ty
        arg_types = [a.ty for a in e.args]
        return e.op.type_rel(e.op.name, arg_types, e.attrs)
    if t is Function:
        return infer_function(e).ty
    raise RelayError(f"InferType: cannot type {t.__name__}")


def _check_args(fn: Function, args) -> None:
    if len(args) != len(fn.params):
        raise RelayError(f"InferType: a function of {len(fn.params)} parameters called with {len(args)} arguments")
    for p, a in zip(fn.params, args):
        if p.ty != a.ty:
            raise RelayError(f"InferType: argument for %{p.name_hint} has type {a.ty}, expected {p.ty}")


def _run(f: Function, mod: IRModule) -> Function:
    return infer_function(f)


def InferType():
    """The pass (TVM's ``relay.transform.InferType()``)."""
    return function_pass(_run, "InferType", 0)
