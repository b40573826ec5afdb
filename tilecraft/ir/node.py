"""The structure of IR nodes: declared once on each node class, everything else derived from it.

Every ``Expr`` and ``Stmt`` class says, next to its fields, which of them hold sub-nodes::

    @ir_node
    @dataclass(frozen=True, eq=False, slots=True, repr=False)
    class For(Stmt):
        loop_var: Var
        min: Expr
        extent: Expr
        kind: ForKind
        body: Stmt
        thread_tag: str = ""
        annotations: tuple = ()
        child_fields = (("min", EXPR), ("extent", EXPR), ("body", STMT))
        ref_fields = ("loop_var",)

``child_fields`` lists the fields that hold sub-nodes, in the order ``children()`` returns them,
each with its kind:

* ``EXPR`` / ``STMT``: one expression / statement;
* ``EXPRS`` / ``STMTS``: a tuple of them (``Call.args``, ``SeqStmt.seq``);
* ``OPTIONAL_EXPR`` / ``OPTIONAL_STMT``: a node when the field holds one, else a plain value
  that is no child (``IfThenElse.else_case`` may be None, ``AttrStmt.value`` a string).

``ref_fields`` lists the other fields that refer to an object by identity (a bound variable, a
buffer, a tensor, a reducer). Every remaining field is a plain value (an operator, a dtype, a lane
count) compared with ``==``. A class whose objects are equal only to themselves sets
``unique = True`` (``Var``: each object is its own variable).

From this and the dataclass fields, :func:`ir_node` checks the declaration (a name that is no
field, an unknown kind: ``TypeError`` naming the class) and gives the class

* ``children()``: the sub-nodes, a tuple in ``child_fields`` order;
* ``with_children(kids)``: the node with new sub-nodes (same order); the node itself when every
  kid is the very object it replaces (rewrites that change nothing keep identity);
* ``node_key(kid_keys=())``: a flat hashable key of the node itself (class, plain values, ids of
  referenced objects, and the tuple lengths where two tuples could trade elements) followed by
  ``kid_keys``. Two nodes are structurally equal when their keys are equal and so are their
  children, pairwise: ``functor.structural_equal``, the simplifier's and CSE's hash-consing
  (``kid_keys`` are then the children's structure numbers) and ``functor.expr_key`` all build
  on it. A class may write its own ``node_key`` (``Const`` does: ``0.0 == -0.0`` in Python);

and :func:`mutator_default` gives ``IRMutator`` its default ``visit_<Class>``: visit every child
(``visit_expr`` or ``visit_stmt`` by kind), rebuild only when one changed.

These small functions run for every node of every candidate the tuner lowers, so they are
generated as Python source once per class, as :mod:`dataclasses` does for ``__init__``:
``print(node_source(For))`` shows them, and tracebacks show their lines.

Example::

    >>> e = Binary(BinOp.ADD, x, y, "int32")
    >>> e.children()
    (x, y)
    >>> e.with_children((x, y)) is e
    True
    >>> e.with_children((y, x))
    y + x
"""
from __future__ import annotations

import dataclasses
import linecache
from operator import is_
from typing import ClassVar

EXPR = "expr"
STMT = "stmt"
EXPRS = "expr*"
STMTS = "stmt*"
OPTIONAL_EXPR = "expr?"
OPTIONAL_STMT = "stmt?"
KINDS = (EXPR, STMT, EXPRS, STMTS, OPTIONAL_EXPR, OPTIONAL_STMT)
_TUPLE_KINDS = (EXPRS, STMTS)
_OPTIONAL_KINDS = (OPTIONAL_EXPR, OPTIONAL_STMT)


class Node:
    """Base of ``Expr`` and ``Stmt``: an immutable tree node whose sub-nodes ``child_fields``
    names (see the module docstring)."""

    __slots__ = ()
    child_fields: ClassVar[tuple] = ()
    ref_fields: ClassVar[tuple] = ()
    unique: ClassVar[bool] = False


_SOURCES: dict = {}          # class -> the source of its derived methods (node_source)


def ir_node(cls):
    """Class decorator (outside ``@dataclass``): check ``cls``'s structure declaration and add
    ``children``, ``with_children`` and ``node_key`` derived from it (a ``node_key`` written in
    the class body is kept). See the module docstring."""
    fields = [f.name for f in dataclasses.fields(cls)]
    kids = _checked_declaration(cls, fields)
    parts = [_children_source(kids), _with_children_source(cls, fields, kids)]
    if "node_key" not in cls.__dict__:
        parts.append(_node_key_source(cls, fields, kids))
    source = "\n\n".join(parts) + "\n"
    ns = _compile(source, f"<ir_node {cls.__name__}>", {cls.__name__: cls})
    for name in ("children", "with_children", "node_key"):
        if name in ns:
            fn = ns[name]
            fn.__qualname__ = f"{cls.__name__}.{name}"
            setattr(cls, name, fn)
    _SOURCES[cls] = source
    return cls


def mutator_default(cls):
    """The default ``IRMutator.visit_<Class>`` for a node class: visit each child with the
    mutator's ``visit_expr``/``visit_stmt`` (tuples through ``_exprs``/``_stmts``, which return
    the same tuple when nothing changed), and rebuild the node only when a child changed."""
    name = f"visit_{cls.__name__}"
    kids = cls.child_fields
    if not kids:
        source = f"def {name}(self, node):\n    return node\n"
    else:
        lines = [f"def {name}(self, node):"]
        same = []
        for f, kind in kids:
            if kind in _TUPLE_KINDS:
                visit = "self._exprs" if kind == EXPRS else "self._stmts"
                lines.append(f"    new_{f} = {visit}(node.{f})")
            elif kind in _OPTIONAL_KINDS:
                visit = "self.visit_expr" if kind == OPTIONAL_EXPR else "self.visit_stmt"
                lines.append(f"    new_{f} = node.{f}")
                lines.append(f"    if isinstance(new_{f}, Node):")
                lines.append(f"        new_{f} = {visit}(new_{f})")
            else:
                visit = "self.visit_expr" if kind == EXPR else "self.visit_stmt"
                lines.append(f"    new_{f} = {visit}(node.{f})")
            same.append(f"new_{f} is node.{f}")
        lines.append(f"    if {' and '.join(same)}:")
        lines.append("        return node")
        lines.append(f"    return {_constructor(cls, [f.name for f in dataclasses.fields(cls)], kids, 'node')}")
        source = "\n".join(lines) + "\n"
    ns = _compile(source, f"<mutator_default {cls.__name__}>", {cls.__name__: cls})
    fn = ns[name]
    fn.__qualname__ = f"IRMutator.{name}"
    _SOURCES[("mutator", cls)] = source
    return fn


def node_source(cls) -> str:
    """The Python source of what :func:`ir_node` and :func:`mutator_default` derived for ``cls``."""
    out = _SOURCES.get(cls, "")
    if ("mutator", cls) in _SOURCES:
        out += "\n" + _SOURCES[("mutator", cls)]
    return out


# ---------------------------------------------------------------------------------------------
# the generators

def _checked_declaration(cls, fields: list) -> tuple:
    kids = cls.__dict__.get("child_fields", cls.child_fields)
    if not isinstance(kids, tuple) or not all(isinstance(k, tuple) and len(k) == 2 for k in kids):
        raise TypeError(f"{cls.__name__}.child_fields must be a tuple of (field name, kind) pairs")
    for f, kind in kids:
        if f not in fields:
            raise TypeError(f"{cls.__name__}.child_fields names {f!r}, which is not one of its fields {fields}")
        if kind not in KINDS:
            raise TypeError(f"{cls.__name__}.child_fields: the kind of {f!r} is {kind!r}, not one of {KINDS}")
    names = [f for f, _ in kids]
    if len(set(names)) != len(names):
        raise TypeError(f"{cls.__name__}.child_fields names a field twice: {names}")
    for f in cls.ref_fields:
        if f not in fields or f in names:
            raise TypeError(f"{cls.__name__}.ref_fields names {f!r}, which is not a non-child field")
    return kids


def _tuple_source(items: list) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _children_source(kids: tuple) -> str:
    if not kids:
        return "def children(self):\n    return ()"
    parts, singles = [], []
    for f, kind in kids:
        if kind in _TUPLE_KINDS or kind in _OPTIONAL_KINDS:
            if singles:
                parts.append(_tuple_source(singles))
                singles = []
            if kind in _TUPLE_KINDS:
                parts.append(f"self.{f}")
            else:
                parts.append(f"((self.{f},) if isinstance(self.{f}, Node) else ())")
        else:
            singles.append(f"self.{f}")
    if singles:
        parts.append(_tuple_source(singles))
    return "def children(self):\n    return " + " + ".join(parts)


def _with_children_source(cls, fields: list, kids: tuple) -> str:
    name = cls.__name__
    lines = ["def with_children(self, kids):"]
    variable = [f for f, kind in kids if kind in _TUPLE_KINDS or kind in _OPTIONAL_KINDS]
    if not kids:
        lines += ["    if kids:",
                  f"        raise ValueError('{name} has no children, got ' + str(len(kids)))",
                  "    return self"]
    elif not variable:
        lines.append(f"    {', '.join(f'new_{f}' for f, _ in kids)}{',' if len(kids) == 1 else ''} = kids")
        lines.append(f"    if {' and '.join(f'new_{f} is self.{f}' for f, _ in kids)}:")
        lines.append("        return self")
    else:
        lines += ["    old = self.children()",
                  "    if len(kids) == len(old) and all(map(is_, kids, old)):",
                  "        return self"]
        if len(variable) == 1 and dict(kids)[variable[0]] in _TUPLE_KINDS:
            # one tuple: it takes every kid that is not a fixed child (a Call may gain arguments)
            at = [f for f, _ in kids].index(variable[0])
            after = len(kids) - at - 1
            for k, (f, kind) in enumerate(kids):
                if k < at:
                    lines.append(f"    new_{f} = kids[{k}]")
                elif k == at:
                    part = f"kids[{k}:len(kids) - {after}]" if after else (f"kids[{k}:]" if k else "kids")
                    lines.append(f"    new_{f} = tuple({part})")
                else:
                    lines.append(f"    new_{f} = kids[{k - len(kids)}]")
        else:
            # several variable parts: each keeps its present length
            for f, kind in kids:
                if kind in _TUPLE_KINDS:
                    lines.append(f"    n_{f} = len(self.{f})")
                elif kind in _OPTIONAL_KINDS:
                    lines.append(f"    n_{f} = 1 if isinstance(self.{f}, Node) else 0")
            total = " + ".join([str(len(kids) - len(variable))] + [f"n_{f}" for f in variable])
            lines.append(f"    if len(kids) != {total}:")
            lines.append(f"        raise ValueError('{name}.with_children: expected ' + str({total}) "
                         "+ ' children, got ' + str(len(kids)))")
            lines.append("    at = 0")
            for k, (f, kind) in enumerate(kids):
                step = "1"
                if kind in _TUPLE_KINDS:
                    lines.append(f"    new_{f} = tuple(kids[at:at + n_{f}])")
                    step = f"n_{f}"
                elif kind in _OPTIONAL_KINDS:
                    lines.append(f"    new_{f} = kids[at] if n_{f} else self.{f}")
                    step = f"n_{f}"
                else:
                    lines.append(f"    new_{f} = kids[at]")
                if k < len(kids) - 1:
                    lines.append(f"    at += {step}")
    if kids:
        lines.append(f"    return {_constructor(cls, fields, kids, 'self')}")
    return "\n".join(lines)


def _node_key_source(cls, fields: list, kids: tuple) -> str:
    if cls.unique:
        return f"def node_key(self, kid_keys=()):\n    return ({cls.__name__}, id(self))"
    child_names = {f for f, _ in kids}
    items = [cls.__name__]
    for f in fields:
        if f not in child_names:
            items.append(f"id(self.{f})" if f in cls.ref_fields else f"self.{f}")
    variable = [f for f, kind in kids if kind in _TUPLE_KINDS or kind in _OPTIONAL_KINDS]
    for f, kind in kids:
        if kind in _OPTIONAL_KINDS:
            # a plain value (None, a string) is part of the node; a node is a child
            items.append(f"(None if isinstance(self.{f}, Node) else self.{f})")
        elif kind in _TUPLE_KINDS and len(variable) > 1:
            # where two tuples sit side by side, their lengths keep (a, b) + () from (a,) + (b,)
            items.append(f"len(self.{f})")
    return f"def node_key(self, kid_keys=()):\n    return {_tuple_source(items)} + kid_keys"


def _constructor(cls, fields: list, kids: tuple, obj: str) -> str:
    child_names = {f for f, _ in kids}
    args = [f"new_{f}" if f in child_names else f"{obj}.{f}" for f in fields]
    return f"{cls.__name__}({', '.join(args)})"


def _compile(source: str, filename: str, names: dict) -> dict:
    # registered with linecache so that tracebacks through the derived code show its lines
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = {"Node": Node, "is_": is_, **names}
    exec(compile(source, filename, "exec"), ns)
    return ns
