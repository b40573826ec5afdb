"""``Stage.set_store_predicate(pred)``: a condition under which the stage stores its values (TVM
<= 0.14), typically ``tx.var == 0`` so that one of several threads computing the same value
writes it.

The predicate may use the stage's axes (its loops, ``op.axis``, ``op.reduce_axis``), thread
indices bound around it (``te.thread_axis(...).var``, matched by variable or by name),
constants, arithmetic, comparisons and ``&``/``|``/``~``. Lowering (``schedule_ops``) adds it to
the guard of the stage's stores (a reduction's update; its initialisation is not guarded, as in
TVM). A reduction that runs across GPU threads already stores each result once: there a
predicate on the reduction's own thread indices is implied, and any other is refused.

In the record the predicate is a small JSON tree: ``["EQ", ["thread", "threadIdx.x"],
["const", 0, "int32"]]`` (operators by ``BinOp`` name, ``["axis", name]``, ``["thread", name]``,
``["NOT", x]``, ``["NEG", x]``).

Before::                                   After ``s[B].set_store_predicate(tx.var == 0)``::

    for tx in thread_binding(32, "threadIdx.x"):   for tx in thread_binding(32, "threadIdx.x"):
        B[0] = A[0] * 2.0                              if tx == 0:
                                                           B[0] = A[0] * 2.0
"""
from __future__ import annotations

import numbers

from ..ir import dtype as dt
from ..ir.expr import BinOp, Binary, Const, Expr, IterVar, UnOp, Unary, Var, binary, const, convert, logical_not
from ..ir.functor import collect_vars, substitute

_PY_OPS = {BinOp.ADD: "+", BinOp.SUB: "-", BinOp.MUL: "*", BinOp.FLOORDIV: "//", BinOp.FLOORMOD: "%",
           BinOp.EQ: "==", BinOp.NE: "!=", BinOp.LT: "<", BinOp.LE: "<=", BinOp.GT: ">", BinOp.GE: ">=",
           BinOp.AND: "&", BinOp.OR: "|"}
_PY_CALLS = {BinOp.MIN: "te.min", BinOp.MAX: "te.max", BinOp.TRUNCDIV: "te.truncdiv", BinOp.TRUNCMOD: "te.truncmod"}


def _error(msg):
    from .schedule import ScheduleError
    return ScheduleError(msg)


def _axis_by_name(stage, name: str):
    hits = [iv for iv in stage.all_iter_vars if iv.var.name == name]
    if len(hits) != 1:
        raise _error(f"set_store_predicate on stage '{stage.name}': the predicate names the axis '{name}', "
                     f"which is {'not an axis' if not hits else 'ambiguous among the axes'} of the stage")
    return hits[0]


def check_predicate(stage, pred) -> tuple:
    """``(the predicate as an expression, its JSON tree)``, checked to be a bool condition."""
    if isinstance(pred, IterVar):
        pred = pred.var
    try:
        e = convert(pred)
    except TypeError:
        raise _error(f"set_store_predicate on stage '{stage.name}': expected a condition, got {pred!r}") from None
    if not dt.is_bool(e.dtype):
        raise _error(f"set_store_predicate on stage '{stage.name}': the predicate `{e}` is {e.dtype}, "
                     f"not a condition (compare it, e.g. tx.var == 0)")
    return e, to_json(stage, e)


def to_json(stage, e):
    axis_vars = {iv.var for iv in stage.all_iter_vars}
    t = type(e)
    if t is Const:
        return ["const", e.value, e.dtype]
    if isinstance(e, Var):
        return ["axis", e.name] if e in axis_vars else ["thread", e.name]
    if t is Binary and (e.op in _PY_OPS or e.op in _PY_CALLS):
        return [e.op.name, to_json(stage, e.a), to_json(stage, e.b)]
    if t is Unary:
        return [e.op.name, to_json(stage, e.a)]
    raise _error(f"set_store_predicate on stage '{stage.name}': `{e}` ({t.__name__}) cannot be part of a "
                 f"store predicate; use the stage's axes, thread indices, constants, arithmetic and "
                 f"comparisons")


def from_json(stage, obj) -> Expr:
    head = obj[0]
    if head == "const":
        return const(obj[1], obj[2])
    if head == "axis":
        return _axis_by_name(stage, obj[1]).var
    if head == "thread":
        return Var(obj[1], "int32")
    if head == "NOT":
        return logical_not(from_json(stage, obj[1]))
    if head == "NEG":
        return -from_json(stage, obj[1])
    return binary(BinOp[head], from_json(stage, obj[1]), from_json(stage, obj[2]))


def python(p, stage_ref: str, obj) -> str:
    """The predicate as Python for ``to_python`` (axes by the printer's variables)."""
    head = obj[0]
    if head == "const":
        v, d = obj[1], obj[2]
        default = ("bool" if isinstance(v, bool) else "int32" if isinstance(v, numbers.Integral) else "float32")
        return repr(v) if d == default else f"te.const({v!r}, {d!r})"
    if head == "axis":
        st = p.s[stage_ref]
        iv = _axis_by_name(st, obj[1])
        if iv in st.leaf_iter_vars:
            return p.axis(stage_ref, st._axis_ref(iv))
        if iv in st.op.axis:
            return p.root_axis(stage_ref, st._root_axis_ref(iv))
        raise _error(f"to_python: the store predicate of stage '{st.name}' uses '{iv.var.name}', which is "
                     f"neither a loop nor a root axis of the stage now")
    if head == "thread":
        return f"te.var({obj[1]!r})"
    if head == "NOT":
        return f"~({python(p, stage_ref, obj[1])})"
    if head == "NEG":
        return f"-({python(p, stage_ref, obj[1])})"
    op = BinOp[head]
    a, b = python(p, stage_ref, obj[1]), python(p, stage_ref, obj[2])
    return f"({a} {_PY_OPS[op]} {b})" if op in _PY_OPS else f"{_PY_CALLS[op]}({a}, {b})"


def lowered_predicate(st, info, enclosing, cross_thread_tags) -> Expr | None:
    """The stage's store predicate in its loop variables (None: no guard to add). ``enclosing``
    are the ``(stage, IterVar)`` loops around the stage; ``cross_thread_tags`` the launch tags its
    reduction loops are bound to (then the predicate must be implied, see the module)."""
    pred = st.store_predicate
    if pred is None:
        return None
    vmap = {}
    for d, iv in enumerate(st.op.axis):
        vmap[iv.var] = info.root_value(iv, d)
    for iv in st.all_iter_vars:
        if iv.var not in vmap and iv in info.value:
            vmap[iv.var] = info.value[iv]
    by_name = {}
    for owner, iv in list(enclosing) + [(st, iv) for iv in st.leaf_iter_vars]:
        a = owner.iter_var_attrs.get(iv)
        if a is not None and a.bind is not None:
            vmap[a.bind.var] = iv.var
            by_name.setdefault(a.bind.var.name, iv.var)
            by_name.setdefault(a.bind.thread_tag, iv.var)
    for v in collect_vars(pred):
        if v not in vmap:
            if v.name not in by_name:
                raise _error(f"set_store_predicate on stage '{st.name}': the predicate uses '{v.name}', which is "
                             f"neither an axis of the stage nor a thread index bound around it")
            vmap[v] = by_name[v.name]
    if cross_thread_tags:
        reduce_threads = {iv.var for iv in st.leaf_iter_vars if st.iter_var_attrs.get(iv) is not None
                          and st.iter_var_attrs[iv].bind is not None
                          and st.iter_var_attrs[iv].bind.thread_tag in cross_thread_tags}
        if not {vmap[v] for v in collect_vars(pred)} <= reduce_threads:
            raise _error(f"set_store_predicate on stage '{st.name}': its reduction runs across GPU threads "
                         f"({', '.join(cross_thread_tags)}), which store each result once; a predicate on other "
                         f"variables is not supported there")
        return None
    return substitute(pred, vmap)
