"""The graph IR (TVM's Relay, static shapes): types, expressions, functions and modules.

Semantics, stated once:

* A program is an :class:`IRModule` of named :class:`Function` s; ``mod["main"]`` is the model.
  A function's body is a **dataflow graph**: an expression whose sub-expressions may be shared
  (a node used twice is computed once). There is no control flow, no ``let`` and no mutation.
* Every value is a tensor (``Tensor[(1, 64, 56, 56), float32]``: a static shape of
  non-negative integers and a dtype) or a tuple of values. Shapes are known when the graph is
  built; symbolic dimensions are not supported yet.
* Nodes are immutable and compared by identity. A rewrite that changes nothing returns the same
  node; :func:`post_order` visits each shared node once.
* ``Call(op, args, attrs)`` applies an operator of the table (``tilecraft/relay/op/registry.py``)
  or a :class:`Function` (after fusion: a *primitive* function, ``Primitive=1``, one kernel).
  ``attrs`` are the operator's static parameters (strides, axes, ...), checked against its
  schema when the call is made.
* ``Constant`` holds a read-only numpy array (weights); ``Var`` is a function parameter.
* ``checked_type`` is filled by :func:`tilecraft.relay.transform.InferType`, which returns new
  nodes: every node of its result has its type.

Grammar (the printed form, ``print(mod)``)::

    module   := function*                      def @main(%x: Tensor[(1, 3), float32]) -> ... { body }
    expr     := %var | const | op(expr, ..., attr=value, ...) | (expr, ...) | expr.N | fn (...) { }

>>> from tilecraft import relay
>>> x = relay.var("x", shape=(1, 4))
>>> y = relay.nn.relu(relay.add(x, relay.const(1.0)))
>>> mod = relay.transform.InferType()(relay.IRModule.from_expr(relay.Function([x], y)))
>>> print(mod["main"].body.checked_type)
Tensor[(1, 4), float32]
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np


class RelayError(ValueError):
    """A graph-level error in the user's terms: which operator, node or tensor, and what is wrong."""


# ------------------------------------------------------------------------------------------------
# Types

@dataclass(frozen=True)
class TensorType:
    """``Tensor[(1, 3, 224, 224), float32]``: a static shape and a dtype."""
    shape: tuple
    dtype: str = "float32"

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __str__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"Tensor[({dims}{',' if len(self.shape) == 1 else ''}), {self.dtype}]"


@dataclass(frozen=True)
class TupleType:
    """``(Tensor[...], Tensor[...])``: the type of a tuple (split's result, batch_norm's)."""
    fields: tuple

    def __str__(self) -> str:
        return "(" + ", ".join(str(f) for f in self.fields) + ("," if len(self.fields) == 1 else "") + ")"


def flatten_type(ty) -> list:
    """The tensor types of a (possibly nested) tuple type, in order."""
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in flatten_type(f)]
    return [ty]


# ------------------------------------------------------------------------------------------------
# Attributes

class Attrs:
    """An operator call's static parameters: immutable, read as ``attrs.strides`` or
    ``attrs["strides"]``. Lists become tuples and numpy scalars Python numbers."""

    __slots__ = ("_items",)

    def __init__(self, items=None):
        object.__setattr__(self, "_items", tuple((k, _freeze(v)) for k, v in dict(items or {}).items()))

    def __getattr__(self, name):
        for k, v in object.__getattribute__(self, "_items"):
            if k == name:
                return v
        raise AttributeError(f"the attributes have no {name!r}; they have: "
                             f"{', '.join(k for k, _ in self._items) or 'none'}")

    def __getitem__(self, name):
        return self.__getattr__(name)

    def __setattr__(self, name, value):
        raise AttributeError("Attrs are immutable: make a new call with other attributes")

    def get(self, name, default=None):
        return dict(self._items).get(name, default)

    def items(self):
        return self._items

    def keys(self):
        return [k for k, _ in self._items]

    def __contains__(self, name) -> bool:
        return any(k == name for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other) -> bool:
        return isinstance(other, Attrs) and self._items == other._items

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return "Attrs(" + ", ".join(f"{k}={v!r}" for k, v in self._items) + ")"


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    return v


# ------------------------------------------------------------------------------------------------
# Expressions

@dataclass(frozen=True, eq=False, repr=False)
class Expr:
    """Base of the graph's nodes. ``checked_type`` is set by InferType."""

    @property
    def checked_type(self):
        ty = self.ty
        if ty is None:
            raise RelayError(f"the type of {type(self).__name__} {_short(self)} is not known yet: "
                             "run relay.transform.InferType() on the module first")
        return ty

    def with_type(self, ty) -> "Expr":
        return self if self.ty == ty else replace(self, ty=ty)

    def __str__(self) -> str:
        from .printer import astext
        return astext(self)

    def __repr__(self) -> str:         # short: a node's fields hold the whole graph below it
        ty = f" : {self.ty}" if self.ty is not None else ""
        return f"<relay.{type(self).__name__} {_short(self)}{ty}>".replace(" >", ">").replace("  ", " ")


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A function parameter: ``relay.var("data", shape=(1, 3, 224, 224), dtype="float32")``."""
    name_hint: str
    type_annotation: object = None
    ty: object = None

    def __post_init__(self):
        if self.ty is None and self.type_annotation is not None:
            object.__setattr__(self, "ty", self.type_annotation)


@dataclass(frozen=True, eq=False, repr=False)
class Constant(Expr):
    """A constant tensor (a weight): its ``data`` is a read-only numpy array."""
    data: np.ndarray
    ty: object = None

    def __post_init__(self):
        data = np.asarray(self.data)
        if data.flags.writeable:
            data = data.copy()
            data.flags.writeable = False
        object.__setattr__(self, "data", data)
        if self.ty is None:
            object.__setattr__(self, "ty", TensorType(data.shape, data.dtype.name))


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """``op(args..., attrs)``: an operator of the table (an :class:`~tilecraft.relay.op.Op`) or a
    (primitive) :class:`Function`."""
    op: object
    args: tuple
    attrs: Attrs = field(default_factory=Attrs)
    ty: object = None

    def __post_init__(self):
        object.__setattr__(self, "args", tuple(self.args))

    @property
    def op_name(self) -> str:
        return getattr(self.op, "name", "fn")


@dataclass(frozen=True, eq=False, repr=False)
class Tuple(Expr):
    """``(a, b, ...)``: several values as one (concatenate's input, a model's outputs)."""
    fields: tuple
    ty: object = None

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))


@dataclass(frozen=True, eq=False, repr=False)
class TupleGetItem(Expr):
    """``t.N``: field ``index`` of a tuple-valued expression."""
    tuple_value: Expr
    index: int
    ty: object = None


@dataclass(frozen=True, eq=False, repr=False)
class Function(Expr):
    """``fn (%x: Tensor[...], ...) { body }``. ``attrs`` holds ``Primitive=1`` for a fused group."""
    params: tuple
    body: Expr
    ret_type: object = None
    attrs: Attrs = field(default_factory=Attrs)
    ty: object = None

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        for p in self.params:
            if not isinstance(p, Var):
                raise RelayError(f"Function: parameters must be relay.var(...), got {type(p).__name__}")

    @property
    def is_primitive(self) -> bool:
        return bool(self.attrs.get("Primitive", 0))

    def tuning_workloads(self, target="llvm", params=None, ops=None) -> list:
        """The model's distinct tunable workloads (``relay/backend/task_extraction.py``); how
        ``autotune.task.extract_from_program``, a lower layer, reaches the graph level."""
        from .backend.task_extraction import tuning_workloads
        return tuning_workloads(self, target, params, ops)


def _short(e) -> str:
    if isinstance(e, Var):
        return f"%{e.name_hint}"
    if isinstance(e, Call):
        return f"{e.op_name}(...)"
    return ""


# ------------------------------------------------------------------------------------------------
# Helpers that build nodes

def var(name_hint: str, type_annotation=None, shape=None, dtype: str = "float32") -> Var:
    """A parameter: ``relay.var("x", shape=(1, 4))`` or ``relay.var("x", TensorType(...))``.

    >>> var("x", shape=(2, 3)).checked_type
    TensorType(shape=(2, 3), dtype='float32')
    """
    if type_annotation is None:
        if shape is None:
            raise RelayError(f"relay.var({name_hint!r}): give its shape (shapes are static), e.g. "
                             f"relay.var({name_hint!r}, shape=(1, 3, 224, 224))")
        type_annotation = TensorType(tuple(shape), str(np.dtype(dtype)))
    if not isinstance(type_annotation, (TensorType, TupleType)):
        raise RelayError(f"relay.var({name_hint!r}): the type must be a TensorType or TupleType, "
                         f"got {type(type_annotation).__name__}")
    return Var(name_hint, type_annotation)


def const(value, dtype: str | None = None) -> Constant:
    """A constant: ``relay.const(1.0)`` (float32 scalar), ``relay.const(np_array)``.

    >>> const(2.0).data.dtype
    dtype('float32')
    """
    if isinstance(value, Constant):
        return value
    if dtype is None and isinstance(value, float):
        dtype = "float32"
    if dtype is None and isinstance(value, bool):
        dtype = "bool"
    if dtype is None and isinstance(value, int):
        dtype = "int32"
    return Constant(np.asarray(value, dtype=dtype))


# ------------------------------------------------------------------------------------------------
# Traversal

def children(e: Expr) -> tuple:
    """The expressions ``e`` reads (a Function's body is not a child: it is its own scope)."""
    t = type(e)
    if t is Call:
        return e.args
    if t is Tuple:
        return e.fields
    if t is TupleGetItem:
        return (e.tuple_value,)
    return ()


def post_order(root: Expr) -> list:
    """Every node reachable from ``root`` (not entering functions), each once, children first."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for c in reversed(children(node)):
            if id(c) not in seen:
                stack.append((c, False))
    return order


def rewrite(root: Expr, visit) -> Expr:
    """Rebuild ``root`` bottom-up: ``visit(node, new_children)`` returns the node's replacement,
    given its children already rewritten (``with_children(node, new_children)`` rebuilds it).
    Shared nodes are rewritten once; an unchanged graph comes back as the same object."""
    memo: dict = {}
    for node in post_order(root):
        new_kids = tuple(memo[id(c)] for c in children(node))
        memo[id(node)] = visit(node, new_kids)
    return memo[id(root)]


def with_children(node: Expr, kids: tuple) -> Expr:
    """``node`` with its children replaced (the same node when they are the same); the type is
    kept only when nothing changed."""
    old = children(node)
    if len(old) == len(kids) and all(a is b for a, b in zip(old, kids)):
        return node
    t = type(node)
    if t is Call:
        return Call(node.op, kids, node.attrs)
    if t is Tuple:
        return Tuple(kids)
    if t is TupleGetItem:
        return TupleGetItem(kids[0], node.index)
    raise RelayError(f"{t.__name__} has no children to replace")


def free_vars(e: Expr) -> list:
    """The Vars ``e`` reads, in the order first met."""
    return [n for n in post_order(e) if type(n) is Var]


# ------------------------------------------------------------------------------------------------
# Modules

class IRModule:
    """Named functions; ``mod["main"]`` is the model. Immutable: passes return new modules.

    >>> mod = IRModule.from_expr(Function([x], y))      # doctest: +SKIP
    >>> mod["main"]                                      # doctest: +SKIP
    """

    def __init__(self, functions: dict | None = None):
        self._functions = dict(functions or {})
        for name, f in self._functions.items():
            if not isinstance(f, Function):
                raise RelayError(f"IRModule: {name!r} must be a relay.Function, got {type(f).__name__}")

    @staticmethod
    def from_expr(expr: Expr) -> "IRModule":
        """A module whose ``main`` is ``expr`` (a Function, or an expression whose free
        variables become main's parameters)."""
        if not isinstance(expr, Function):
            expr = Function(free_vars(expr), expr)
        return IRModule({"main": expr})

    def __getitem__(self, name: str) -> Function:
        try:
            return self._functions[name]
        except KeyError:
            raise KeyError(f"the module has no function {name!r}; it has: {', '.join(self._functions)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._functions

    def functions(self) -> dict:
        return dict(self._functions)

    def with_function(self, name: str, func: Function) -> "IRModule":
        """A module with ``name`` replaced (self when it is the same function)."""
        if self._functions.get(name) is func:
            return self
        return IRModule({**self._functions, name: func})

    def tuning_workloads(self, target="llvm", params=None, ops=None) -> list:
        """The model's distinct tunable workloads (``relay/backend/task_extraction.py``); how
        ``autotune.task.extract_from_program``, a lower layer, reaches the graph level."""
        from .backend.task_extraction import tuning_workloads
        return tuning_workloads(self, target, params, ops)

    def astext(self) -> str:
        from .printer import astext
        return astext(self)

    def __str__(self) -> str:
        return self.astext()

    def __repr__(self) -> str:
        return f"<relay.IRModule [{', '.join(self._functions)}]>"
