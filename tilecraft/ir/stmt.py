"""Statements of tilecraft's IR, and buffers.

Grammar (fields in order)::

    Stmt := For(loop_var, min, extent, kind, body, thread_tag, annotations)
          | BufferStore(buffer, value, indices)
          | Allocate(buffer, body)              -- buffer lives for the duration of body
          | SeqStmt(seq)
          | IfThenElse(condition, then_case, else_case)
          | LetStmt(var, value, body)
          | Evaluate(value)                     -- a call for its effect (barriers)
          | AttrStmt(key, node, value, body)    -- scoped annotations ("pragma_*", "realize")

``For`` runs ``body`` for ``loop_var`` in ``[min, min + extent)``. Its ``kind`` says how:
serially, in parallel on the CPU thread pool (iterations must be independent), as one vector
operation (extent must be a constant), unrolled, or bound to a GPU thread/block index
(``thread_tag`` names it; the loop is then implicit in the launch).

A ``Buffer`` is a named, typed, n-dimensional region of memory in a ``scope`` (``global``,
``shared``, ``local``). ``BufferLoad``/``BufferStore`` index it with one index per dimension
until storage flattening, after which every buffer is one-dimensional and indices are element
offsets (vector accesses use a ``Ramp`` index).

As expressions do, each statement class declares its sub-nodes (``child_fields``: expressions and
statements, in the order ``children()`` gives them) and its by-identity fields (``ref_fields``:
the loop or let variable it binds, the buffer it stores to or allocates); see ``node.py``.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from . import dtype as dt
from .expr import Expr, Var, convert
from .node import EXPR, EXPRS, OPTIONAL_EXPR, OPTIONAL_STMT, STMT, STMTS, Node, ir_node


class ForKind(enum.Enum):
    SERIAL = "for"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "launch_thread"


@dataclass(frozen=True, eq=False, slots=True)
class Buffer:
    """A typed region of memory. ``shape`` and ``strides`` are tuples of expressions (strides are
    in elements; ``None`` means compact row-major)."""
    name: str
    shape: tuple
    dtype: str
    scope: str = "global"
    strides: tuple | None = None
    data: Var | None = None

    def __post_init__(self):
        if self.data is None:
            object.__setattr__(self, "data", Var(self.name, "handle"))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {list(self.shape)}, {self.dtype}, {self.scope})"


class Stmt(Node):
    """Base of all statements. Each class declares its sub-nodes in ``child_fields`` and the
    fields that refer to objects by identity in ``ref_fields`` (see ``node.py``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        from .printer import stmt_str
        return stmt_str(self)

    __str__ = __repr__


_frozen = dict(frozen=True, eq=False, slots=True, repr=False)


@ir_node
@dataclass(**_frozen)
class For(Stmt):
    loop_var: Var
    min: Expr
    extent: Expr
    kind: ForKind
    body: Stmt
    thread_tag: str = ""
    annotations: tuple = ()           # ((key, value), ...), e.g. ("pragma_auto_unroll_max_step", 16)
    child_fields = (("min", EXPR), ("extent", EXPR), ("body", STMT))
    ref_fields = ("loop_var",)

    def annotation(self, key, default=None):
        for k, v in self.annotations:
            if k == key:
                return v
        return default


@ir_node
@dataclass(**_frozen)
class BufferStore(Stmt):
    buffer: Buffer
    value: Expr
    indices: tuple
    child_fields = (("value", EXPR), ("indices", EXPRS))
    ref_fields = ("buffer",)


@ir_node
@dataclass(**_frozen)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt
    child_fields = (("body", STMT),)
    ref_fields = ("buffer",)


@ir_node
@dataclass(**_frozen)
class SeqStmt(Stmt):
    seq: tuple
    child_fields = (("seq", STMTS),)


@ir_node
@dataclass(**_frozen)
class IfThenElse(Stmt):
    condition: Expr
    then_case: Stmt
    else_case: Stmt | None = None
    child_fields = (("condition", EXPR), ("then_case", STMT), ("else_case", OPTIONAL_STMT))


@ir_node
@dataclass(**_frozen)
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt
    child_fields = (("value", EXPR), ("body", STMT))
    ref_fields = ("var",)


@ir_node
@dataclass(**_frozen)
class Evaluate(Stmt):
    value: Expr
    child_fields = (("value", EXPR),)


@ir_node
@dataclass(**_frozen)
class AttrStmt(Stmt):
    key: str
    node: Any                         # a stage name, a KernelInfo, ...: compared with ==
    value: Any                        # an expression (a child) or a plain value
    body: Stmt
    child_fields = (("value", OPTIONAL_EXPR), ("body", STMT))


def seq(*stmts) -> Stmt:
    """Sequence statements, flattening nested sequences and dropping empty ones."""
    out = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            out.extend(s.seq)
        elif isinstance(s, (list, tuple)):
            inner = seq(*s)
            if inner is not None:
                out.extend(inner.seq if isinstance(inner, SeqStmt) else [inner])
        else:
            out.append(s)
    if not out:
        return None
    if len(out) == 1:
        return out[0]
    return SeqStmt(tuple(out))


@dataclass(frozen=True, eq=False, slots=True)
class PrimFunc:
    """A lowered function: parameters (buffers and scalar variables) and a body.

    ``params`` lists, in call order, the Buffers of the tensors the user passed to
    ``lower``/``build`` followed by the symbolic shape variables they need.
    """
    name: str
    params: tuple
    body: Stmt
    attrs: tuple = ()

    def attr(self, key, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def with_body(self, body: Stmt) -> "PrimFunc":
        if body is self.body:
            return self
        return PrimFunc(self.name, self.params, body, self.attrs)

    def __repr__(self) -> str:
        from .printer import func_str
        return func_str(self)

    __str__ = __repr__

    def script(self) -> str:
        return str(self)
