"""Expressions of tilecraft's IR.

Semantics (stated once; every pass and backend follows them)
------------------------------------------------------------
* Every expression has a ``dtype`` string (``"int32"``, ``"float32"``, ``"bool"``, or a vector type
  ``"float32x8"``). Operands of a binary operator have the same dtype; the constructors below
  check this and raise :class:`DTypeError` otherwise. The only implicit conversions are Python
  literals (``A[i] * 2`` makes ``2`` a ``float32`` constant) and index widening between integer
  types of 32 bits or more (``int32 + int64`` is ``int64``).
* Integer ``FLOORDIV``/``FLOORMOD`` round towards negative infinity (``-7 // 2 == -4``,
  ``-7 % 2 == 1``), like Python. ``TRUNCDIV``/``TRUNCMOD`` round towards zero, like C
  (``-7 / 2 == -3``, ``-7 % 2 == -1``). ``a / b`` on integers is ``TRUNCDIV``; ``a // b`` and
  ``a % b`` are the floor forms. Division by zero is undefined behaviour.
* Integer arithmetic wraps modulo 2**bits. Index arithmetic is int32 unless a shape says otherwise;
  backends compute addresses in 64 bits.
* Expressions are pure: evaluation order is unobservable, except that ``Select(lazy=True)``
  (``te.if_then_else``) evaluates only the branch its condition picks, so it may guard loads that
  would be out of bounds. ``Select(lazy=False)`` (``te.select``) may evaluate both.
* ``Reduce(combiner, source, axis, condition, value_index, init)`` is the fold of ``combiner`` over
  every point of the reduction domain ``axis`` where ``condition`` holds, starting from ``init``
  (one value per source, in the output's data axes) or, when ``init`` is empty, from
  ``combiner.identity``; an empty domain gives that start value. The order of the fold is
  unspecified (combiners are commutative and associative). A ``Reduce`` may only appear at the
  top of a ``te.compute`` body.
* ``Ramp(base, stride, lanes)`` is the vector ``[base, base+stride, ...]``; ``Broadcast(v, lanes)``
  repeats a scalar. They only appear after vectorization, and in the horizontal step of a
  vectorized reduction.
* ``VectorReduce(op, value)`` is the scalar fold of ``op`` (``+ * min max`` and the bitwise and
  logical ones) over the lanes of the vector ``value``, in an unspecified order (backends and the
  interpreter fold halves, ``v[:n/2] op v[n/2:]``, while more than two lanes are left and their
  number is even, then the rest lane by lane; float ``+``/``*`` may therefore differ from a
  left-to-right fold in the last bits). It is what a reduction over a
  vectorized reduction axis ends with (``schedule_ops``: vector accumulators, then one
  horizontal reduction per output point).
* ``Call`` names a math function (``exp``), a compiler builtin, or one of the calls of
  ``builtin.py`` (``call_extern``: a C function, whose symbol is the first argument, a
  ``StringImm``; ``call_llvm_intrin``: an LLVM intrinsic by name). Those may read and write memory
  through ``AccessPtr`` arguments, so a call that is not known to be pure is never moved, merged
  or dropped. ``AccessPtr``, ``StringImm`` and ``BufferRegion`` have dtype ``"handle"``.

Grammar (fields in order)::

    Expr := Var(name, dtype) | Const(value, dtype)
          | Binary(op, a, b) | Unary(op, a) | Cast(dtype, value)
          | Select(condition, true_value, false_value, lazy)
          | Call(name, args, dtype)
          | TensorLoad(tensor, indices)        -- before lowering: an element of a te.Tensor
          | BufferLoad(buffer, indices)        -- after lowering: an element of a Buffer
          | Reduce(combiner, source, axis, condition, value_index, init)
          | Ramp(base, stride, lanes) | Broadcast(value, lanes) | Let(var, value, body)
          | VectorReduce(op, value)            -- the lanes of a vector folded to one scalar
          | StringImm(value)                   -- a string argument (the symbol of call_extern)
          | AccessPtr(buffer, offset, extent, access_mask)   -- the address of buffer's element offset
          | BufferRegion(buffer, begin, extent, strides)     -- a box of a buffer (buffer_bind_scope)

Nodes are immutable; identity is object identity (``Var`` objects are the variables themselves),
and ``==`` builds a comparison expression rather than comparing nodes (TVM's convention). Use
:func:`tilecraft.ir.functor.structural_equal` to compare trees.

Each class declares its sub-expressions (``child_fields``, in the order ``children()`` gives
them) and the fields that refer to an object by identity (``ref_fields``: the variable a ``Let``
binds, a buffer, a tensor, a reducer); its other fields are plain values. ``children()``,
``with_children()``, ``node_key()``, structural equality and the mutator's defaults are derived
from that declaration (``node.py``), so a new node class is its dataclass plus one line.
"""
from __future__ import annotations

import enum
import numbers
from dataclasses import dataclass, field
from typing import Any

from . import dtype as dt
from .dtype import DTypeError
from .node import EXPR, EXPRS, Node, ir_node


class BinOp(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"            # float division
    TRUNCDIV = "truncdiv"
    TRUNCMOD = "truncmod"
    FLOORDIV = "//"
    FLOORMOD = "%"
    MIN = "min"
    MAX = "max"
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    AND = "and"
    OR = "or"
    BITAND = "&"
    BITOR = "|"
    BITXOR = "^"
    SHL = "<<"
    SHR = ">>"


COMPARISONS = frozenset({BinOp.EQ, BinOp.NE, BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE})
LOGICAL = frozenset({BinOp.AND, BinOp.OR})
INT_ONLY = frozenset({BinOp.TRUNCMOD, BinOp.FLOORMOD, BinOp.BITAND, BinOp.BITOR, BinOp.BITXOR,
                      BinOp.SHL, BinOp.SHR})


class UnOp(enum.Enum):
    NEG = "-"
    NOT = "not"


class Expr(Node):
    """Base of all expressions. Python operators build IR (``a + 1``, ``a < b``, ``a // 4``).

    Each expression class declares its sub-expressions in ``child_fields`` and the fields that
    refer to objects by identity in ``ref_fields``; ``children()``, ``with_children()``,
    ``node_key()`` and the mutator's defaults are derived from that (see ``node.py``).
    """

    __slots__ = ()
    dtype: str

    __hash__ = object.__hash__

    def __add__(self, o): return binary(BinOp.ADD, self, o)
    def __radd__(self, o): return binary(BinOp.ADD, o, self)
    def __sub__(self, o): return binary(BinOp.SUB, self, o)
    def __rsub__(self, o): return binary(BinOp.SUB, o, self)
    def __mul__(self, o): return binary(BinOp.MUL, self, o)
    def __rmul__(self, o): return binary(BinOp.MUL, o, self)
    def __truediv__(self, o): return div(self, o)
    def __rtruediv__(self, o): return div(o, self)
    def __floordiv__(self, o): return binary(BinOp.FLOORDIV, self, o)
    def __rfloordiv__(self, o): return binary(BinOp.FLOORDIV, o, self)
    def __mod__(self, o): return binary(BinOp.FLOORMOD, self, o)
    def __rmod__(self, o): return binary(BinOp.FLOORMOD, o, self)
    def __neg__(self): return neg(self)
    def __lt__(self, o): return binary(BinOp.LT, self, o)
    def __le__(self, o): return binary(BinOp.LE, self, o)
    def __gt__(self, o): return binary(BinOp.GT, self, o)
    def __ge__(self, o): return binary(BinOp.GE, self, o)
    def __eq__(self, o):  # type: ignore[override]
        if not isinstance(o, (Expr, numbers.Number, IterVar)):
            return NotImplemented
        return binary(BinOp.EQ, self, o)

    def __ne__(self, o):  # type: ignore[override]
        if not isinstance(o, (Expr, numbers.Number, IterVar)):
            return NotImplemented
        return binary(BinOp.NE, self, o)
    def __and__(self, o): return binary(BinOp.AND if dt.is_bool(self.dtype) else BinOp.BITAND, self, o)
    def __rand__(self, o): return binary(BinOp.AND if dt.is_bool(self.dtype) else BinOp.BITAND, o, self)
    def __or__(self, o): return binary(BinOp.OR if dt.is_bool(self.dtype) else BinOp.BITOR, self, o)
    def __ror__(self, o): return binary(BinOp.OR if dt.is_bool(self.dtype) else BinOp.BITOR, o, self)
    def __xor__(self, o): return binary(BinOp.BITXOR, self, o)
    def __lshift__(self, o): return binary(BinOp.SHL, self, o)
    def __rshift__(self, o): return binary(BinOp.SHR, self, o)
    def __invert__(self): return logical_not(self) if dt.is_bool(self.dtype) else binary(BinOp.BITXOR, self, -1)

    def __bool__(self):
        # `a == b` on nodes is a comparison node; as a Python bool it means "the same node" (as in
        # TVM), so `v in [x, y]` and dict look-ups on variables work.
        if type(self) is Binary and self.op is BinOp.EQ:
            return self.a is self.b
        if type(self) is Binary and self.op is BinOp.NE:
            return self.a is not self.b
        if type(self) is Const:
            return bool(self.value)
        raise TypeError(f"the symbolic expression `{self}` has no truth value; "
                        "use te.all/te.any/te.if_then_else to combine conditions")

    def astype(self, dtype: str) -> "Expr":
        """Convert to another dtype: ``A[i].astype("int32")``."""
        return cast(dtype, self)

    def equal(self, other) -> bool:
        """Structural equality (``==`` builds a comparison node instead)."""
        from .functor import structural_equal
        return structural_equal(self, convert(other))

    def __repr__(self) -> str:
        from .printer import expr_str
        return expr_str(self)

    __str__ = __repr__


_frozen = dict(frozen=True, eq=False, slots=True, repr=False)


@ir_node
@dataclass(frozen=True, eq=False, slots=True, repr=False, weakref_slot=True)
class Var(Expr):
    """A scalar variable: loop variables, symbolic shapes (``te.var("n")``), let-bound values."""
    name: str
    dtype: str = "int32"
    child_fields = ()
    unique = True                  # each Var object is its own variable: equal only to itself


@ir_node
@dataclass(**_frozen)
class SizeVar(Var):
    """A variable known to be non-negative (``te.size_var``): shapes."""
    child_fields = ()


@ir_node
@dataclass(**_frozen)
class Const(Expr):
    value: Any
    dtype: str
    child_fields = ()

    def __post_init__(self):
        if dt.lanes(self.dtype) != 1:
            raise DTypeError("constants are scalar; use Broadcast for vectors")

    def node_key(self, kid_keys=()):
        v = self.value
        # 0.0 == -0.0 and True == 1 in Python; the dtype and the sign keep them apart
        return (Const, self.dtype, v, type(v), str(v) if v == 0 else None)


@ir_node
@dataclass(**_frozen)
class Binary(Expr):
    op: BinOp
    a: Expr
    b: Expr
    dtype: str
    child_fields = (("a", EXPR), ("b", EXPR))


@ir_node
@dataclass(**_frozen)
class Unary(Expr):
    op: UnOp
    a: Expr
    dtype: str
    child_fields = (("a", EXPR),)


@ir_node
@dataclass(**_frozen)
class Cast(Expr):
    dtype: str
    value: Expr
    child_fields = (("value", EXPR),)


@ir_node
@dataclass(**_frozen)
class Select(Expr):
    condition: Expr
    true_value: Expr
    false_value: Expr
    lazy: bool = False
    child_fields = (("condition", EXPR), ("true_value", EXPR), ("false_value", EXPR))

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.true_value.dtype


@ir_node
@dataclass(**_frozen)
class Call(Expr):
    """An intrinsic: math functions (``exp``, ``sqrt``, ...) and a few compiler builtins."""
    name: str
    args: tuple
    dtype: str
    child_fields = (("args", EXPRS),)

    @property
    def op(self) -> "Op":
        """TVM's ``call.op``: the operator called, named ``"tir.<name>"`` (``call.op.name``)."""
        return Op("tir." + self.name)


@dataclass(frozen=True)
class Op:
    """The operator of a :class:`Call`, as TVM names it: ``Op("tir.exp").name``."""
    name: str


@ir_node
@dataclass(**_frozen)
class TensorLoad(Expr):
    """``T[i, j]`` for a ``te.Tensor`` T; removed by lowering."""
    tensor: Any
    indices: tuple
    child_fields = (("indices", EXPRS),)
    ref_fields = ("tensor",)

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.tensor.dtype


@ir_node
@dataclass(**_frozen)
class BufferLoad(Expr):
    """An element (or, with a Ramp index, a vector) of a buffer."""
    buffer: Any
    indices: tuple
    dtype: str
    child_fields = (("indices", EXPRS),)
    ref_fields = ("buffer",)


@ir_node
@dataclass(**_frozen)
class Ramp(Expr):
    base: Expr
    stride: Expr
    lanes: int
    child_fields = (("base", EXPR), ("stride", EXPR))

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return dt.with_lanes(self.base.dtype, self.lanes)


@ir_node
@dataclass(**_frozen)
class Broadcast(Expr):
    value: Expr
    lanes: int
    child_fields = (("value", EXPR),)

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return dt.with_lanes(self.value.dtype, self.lanes)


@ir_node
@dataclass(**_frozen)
class Let(Expr):
    var: Var
    value: Expr
    body: Expr
    child_fields = (("value", EXPR), ("body", EXPR))
    ref_fields = ("var",)           # the variable it binds is no child

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.body.dtype


# the operators a VectorReduce may fold with: associative and commutative
VECTOR_REDUCE_OPS = frozenset({BinOp.ADD, BinOp.MUL, BinOp.MIN, BinOp.MAX, BinOp.AND, BinOp.OR,
                               BinOp.BITAND, BinOp.BITOR, BinOp.BITXOR})


@ir_node
@dataclass(**_frozen)
class VectorReduce(Expr):
    """The lanes of a vector folded with ``op`` into one scalar (Halide's ``VectorReduce``):
    ``VectorReduce(BinOp.ADD, acc[ramp(0, 1, 8)])`` is the sum of the eight lanes."""
    op: BinOp
    value: Expr
    child_fields = (("value", EXPR),)

    def __post_init__(self):
        if self.op not in VECTOR_REDUCE_OPS:
            raise DTypeError(f"VectorReduce folds with one of "
                             f"{', '.join(sorted(o.value for o in VECTOR_REDUCE_OPS))}, not '{self.op.value}'")
        if dt.lanes(self.value.dtype) < 2:
            raise DTypeError(f"VectorReduce needs a vector, got the {self.value.dtype} `{self.value}`")

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return dt.element_of(self.value.dtype)


@ir_node
@dataclass(**_frozen)
class StringImm(Expr):
    """A string constant; only as an argument of a call (``call_extern``'s symbol)."""
    value: str
    child_fields = ()

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "handle"


@ir_node
@dataclass(**_frozen)
class AccessPtr(Expr):
    """The address of element ``offset`` of ``buffer`` (counted from its ``data``, so a declared
    buffer's ``elem_offset`` is part of ``offset``), for ``extent`` elements that the callee reads
    (``access_mask`` 1), writes (2) or both (3): what ``Buffer.access_ptr("r")`` builds and an
    external function receives as a pointer."""
    buffer: Any
    offset: Expr
    extent: Expr
    access_mask: int
    child_fields = (("offset", EXPR), ("extent", EXPR))
    ref_fields = ("buffer",)

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "handle"


@ir_node
@dataclass(**_frozen)
class BufferRegion(Expr):
    """The box ``buffer[begin[d] : begin[d] + extent[d]]`` of a buffer: the value of a
    ``buffer_bind_scope`` attribute (a declared buffer views this box). Before storage
    flattening ``begin`` indexes ``buffer``'s dimensions and ``strides`` is empty; afterwards
    ``strides`` are the buffer's strides in elements (the box starts at element
    ``sum(begin[d] * strides[d])`` of the flat buffer)."""
    buffer: Any
    begin: tuple
    extent: tuple
    strides: tuple = ()
    child_fields = (("begin", EXPRS), ("extent", EXPRS), ("strides", EXPRS))
    ref_fields = ("buffer",)

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "handle"


@dataclass(**_frozen)
class Range:
    """The half-open interval ``[min, min + extent)`` of a loop or axis."""
    min: Expr
    extent: Expr

    @staticmethod
    def from_min_extent(lo, extent) -> "Range":
        return Range(convert(lo), convert(extent))

    def __repr__(self) -> str:
        return f"range(min={self.min}, ext={self.extent})"


class IterKind(enum.Enum):
    DATA_PAR = 0
    REDUCE = 2
    THREAD = 1
    ORDERED = 3      # te.scan's time axis: runs in order, each step reads the earlier ones
    OPAQUE = 4


@dataclass(frozen=True, eq=False, slots=True)
class IterVar:
    """An axis: a variable with a domain, and what kind of iteration it is.

    ``C.op.axis[0]`` and ``te.reduce_axis((0, 64), "k")`` are IterVars; schedule primitives take
    and return them.
    """
    dom: Range | None
    var: Var
    kind: IterKind = IterKind.DATA_PAR
    thread_tag: str = ""

    # TVM's iter_type codes (``tvm.te.schedule.IterVar.Vectorized``): what a stage's
    # ``iter_var_attrs[iv].iter_type`` reports for an annotated loop
    DataPar, ThreadIndex, CommReduce, Ordered, DimInfo, Unrolled, Vectorized, Parallelized, Tensorized = range(9)

    def __repr__(self) -> str:
        return f"IterVar({self.var.name}, {self.dom}, {self.kind.name.lower()})"

    # TVM lets an IterVar stand for its variable in arithmetic.
    def _v(self):
        return self.var

    def __add__(self, o): return self.var + o
    def __radd__(self, o): return o + self.var
    def __sub__(self, o): return self.var - o
    def __rsub__(self, o): return o - self.var
    def __mul__(self, o): return self.var * o
    def __rmul__(self, o): return o * self.var
    def __floordiv__(self, o): return self.var // o
    def __mod__(self, o): return self.var % o
    def __lt__(self, o): return self.var < o
    def __le__(self, o): return self.var <= o
    def __gt__(self, o): return self.var > o
    def __ge__(self, o): return self.var >= o

    def __eq__(self, o):  # type: ignore[override]
        # a comparison node, like Expr's; as a Python bool it means "the same axis"
        if isinstance(o, IterVar):
            return self.var == o.var
        if isinstance(o, (Expr, numbers.Number)):
            return self.var == o
        return NotImplemented

    def __ne__(self, o):  # type: ignore[override]
        if isinstance(o, IterVar):
            return self.var != o.var
        if isinstance(o, (Expr, numbers.Number)):
            return self.var != o
        return NotImplemented

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, slots=True)
class CommReducer:
    """A commutative reducer: ``result`` combines ``lhs`` (accumulator) and ``rhs`` (new value)."""
    lhs: tuple
    rhs: tuple
    result: tuple
    identity: tuple
    name: str = "reducer"


@ir_node
@dataclass(**_frozen)
class Reduce(Expr):
    combiner: CommReducer
    source: tuple
    axis: tuple                   # IterVars, compared with == (the same axes)
    condition: Expr
    value_index: int = 0
    init: tuple = ()              # start values (TVM's Reduce.init); () = the combiner's identity
    child_fields = (("source", EXPRS), ("init", EXPRS), ("condition", EXPR))
    ref_fields = ("combiner",)

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.source[self.value_index].dtype


# ---------------------------------------------------------------------------------------------
# Constructors with type checking. These are what Python operators and the te layer call.

def const(value, dtype: str | None = None) -> Const:
    """A scalar constant. The dtype defaults to int32, float32 or bool from the Python value."""
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, numbers.Integral):
            dtype = "int32" if -2**31 <= int(value) < 2**31 else "int64"
        elif isinstance(value, numbers.Real):
            dtype = "float32"
        else:
            raise DTypeError(f"cannot make a constant of {value!r}")
    dtype = dt.normalize(dtype)
    if dt.is_bool(dtype):
        value = bool(value)
    elif dt.is_int(dtype):
        if isinstance(value, float) and not value.is_integer():
            raise DTypeError(f"the constant {value!r} is not an integer but the dtype is {dtype}")
        value = _wrap_int(int(value), dtype)
    else:
        value = float(value)
    return Const(value, dtype)


def trunc_divide(a, b):
    """Integer division rounding towards zero (``BinOp.TRUNCDIV``, C's ``/``):
    ``trunc_divide(-7, 2) == -3``. For Python ints and, element by element, numpy integer arrays
    (there it wraps as the dtype does); ``b`` must not be zero. The one definition every
    evaluator of the IR uses (constant folding, the interpreter, the CUDA emulator, shapes)."""
    q = a // b
    # floor and truncation differ where the quotient is negative and inexact
    return q + ((q < 0) & (a % b != 0))


def trunc_remainder(a, b):
    """The remainder of :func:`trunc_divide` (``BinOp.TRUNCMOD``, C's ``%``), with the sign of
    ``a``: ``trunc_remainder(-7, 2) == -1``."""
    return a - trunc_divide(a, b) * b


def _wrap_int(v: int, dtype: str) -> int:
    b = dt.bits(dtype)
    v &= (1 << b) - 1
    if not dt.is_uint(dtype) and v >= 1 << (b - 1):
        v -= 1 << b
    return v


def convert(value, dtype: str | None = None) -> Expr:
    """Turn a Python number, an IterVar or an Expr into an Expr."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if isinstance(value, (bool, numbers.Number)):
        try:
            import numpy as np
            if isinstance(value, np.generic) and dtype is None:
                dtype = dt.normalize(value.dtype)
        except ImportError:  # pragma: no cover
            pass
        return const(value, dtype)
    if hasattr(value, "asobject"):      # TVM's ObjectGeneric: a te.TensorSlice says what it lacks
        return convert(value.asobject(), dtype)
    raise TypeError(f"expected an expression or a number, got {type(value).__name__}: {value!r}")


def _literal_for(value, other: Expr) -> Expr:
    """A Python literal takes the dtype of the expression it meets."""
    d = dt.element_of(other.dtype)
    if isinstance(value, bool):
        e = const(value, "bool") if dt.is_bool(d) else const(int(value), d)
    elif isinstance(value, numbers.Integral):
        e = const(value, d if not dt.is_bool(d) else "int32")
    elif isinstance(value, numbers.Real):
        if not dt.is_float(d):
            raise DTypeError(f"cannot combine the float literal {value!r} with the {other.dtype} "
                             f"expression `{other}`: cast one side with .astype()")
        e = const(value, d)
    else:
        return convert(value)
    n = dt.lanes(other.dtype)
    return Broadcast(e, n) if n > 1 else e


def match_types(a, b, what: str = "operator") -> tuple[Expr, Expr]:
    if isinstance(a, IterVar):
        a = a.var
    if isinstance(b, IterVar):
        b = b.var
    a_is, b_is = isinstance(a, Expr), isinstance(b, Expr)
    if a_is and not b_is:
        b = _literal_for(b, a)
    elif b_is and not a_is:
        a = _literal_for(a, b)
    elif not a_is and not b_is:
        a, b = convert(a), convert(b)
    if a.dtype == b.dtype:
        return a, b
    da, db = a.dtype, b.dtype
    if dt.lanes(da) != dt.lanes(db):
        if dt.lanes(da) == 1 and dt.element_of(db) == da:
            return Broadcast(a, dt.lanes(db)), b
        if dt.lanes(db) == 1 and dt.element_of(da) == db:
            return a, Broadcast(b, dt.lanes(da))
    if dt.is_int(da) and dt.is_int(db) and dt.bits(da) >= 32 and dt.bits(db) >= 32 \
            and dt.lanes(da) == dt.lanes(db):
        wide = da if dt.bits(da) >= dt.bits(db) else db
        return cast(wide, a), cast(wide, b)
    raise DTypeError(f"mismatched dtypes in {what}: `{a}` is {da} but `{b}` is {db}; "
                     f"convert one side explicitly with .astype(...)")


def binary(op: BinOp, a, b) -> Expr:
    a, b = match_types(a, b, f"'{op.value}'")
    d = a.dtype
    if op in INT_ONLY and not (dt.is_int(d) or (dt.is_bool(d) and op in (BinOp.BITAND, BinOp.BITOR, BinOp.BITXOR))):
        raise DTypeError(f"'{op.value}' needs integer operands, got {d} in `{a}` {op.value} `{b}`")
    if op in LOGICAL and not dt.is_bool(d):
        raise DTypeError(f"'{op.value}' needs bool operands, got {d}")
    if op in (BinOp.FLOORDIV, BinOp.TRUNCDIV) and dt.is_float(d):
        # floor division of floats: floor(a / b), as Python does
        return Call("floor", (Binary(BinOp.DIV, a, b, d),), d)
    out = dt.with_lanes("bool", dt.lanes(d)) if op in COMPARISONS else d
    if isinstance(a, Const) and isinstance(b, Const):
        folded = _fold(op, a.value, b.value, d)
        if folded is not None:
            return Const(folded, out)
    return Binary(op, a, b, out)


def _fold(op: BinOp, x, y, d: str):
    """Constant folding at construction, for integer and bool constants only."""
    if not (dt.is_int(d) or dt.is_bool(d)):
        return None
    try:
        if op is BinOp.ADD: r = x + y
        elif op is BinOp.SUB: r = x - y
        elif op is BinOp.MUL: r = x * y
        elif op is BinOp.FLOORDIV: r = x // y if y else None
        elif op is BinOp.FLOORMOD: r = x % y if y else None
        elif op is BinOp.TRUNCDIV: r = trunc_divide(x, y) if y else None
        elif op is BinOp.TRUNCMOD: r = trunc_remainder(x, y) if y else None
        elif op is BinOp.MIN: r = min(x, y)
        elif op is BinOp.MAX: r = max(x, y)
        elif op is BinOp.EQ: return x == y
        elif op is BinOp.NE: return x != y
        elif op is BinOp.LT: return x < y
        elif op is BinOp.LE: return x <= y
        elif op is BinOp.GT: return x > y
        elif op is BinOp.GE: return x >= y
        elif op is BinOp.AND: return bool(x and y)
        elif op is BinOp.OR: return bool(x or y)
        else: return None
    except (ZeroDivisionError, OverflowError):
        return None
    if r is None or dt.is_bool(d):
        return None
    return _wrap_int(int(r), d)


def div(a, b) -> Expr:
    a, b = match_types(a, b, "'/'")
    if dt.is_float(a.dtype):
        return Binary(BinOp.DIV, a, b, a.dtype)
    return binary(BinOp.TRUNCDIV, a, b)


def neg(a) -> Expr:
    a = convert(a)
    if isinstance(a, Const) and not dt.is_bool(a.dtype):
        return const(-a.value, a.dtype)
    return Unary(UnOp.NEG, a, a.dtype)


def logical_not(a) -> Expr:
    a = convert(a)
    if not dt.is_bool(a.dtype):
        raise DTypeError(f"'not' needs a bool operand, got {a.dtype} in `{a}`")
    if isinstance(a, Const):
        return Const(not a.value, "bool")
    return Unary(UnOp.NOT, a, a.dtype)


def cast(dtype: str, value) -> Expr:
    dtype = dt.normalize(dtype)
    value = convert(value)
    if dt.lanes(value.dtype) > 1 and dt.lanes(dtype) == 1:
        dtype = dt.with_lanes(dtype, dt.lanes(value.dtype))
    if value.dtype == dtype:
        return value
    if isinstance(value, Const):
        v = value.value
        if dt.is_float(dtype):
            return const(float(v), dtype)
        if dt.is_bool(dtype):
            return const(bool(v), dtype)
        if dt.is_float(value.dtype):
            import math
            if not math.isfinite(v):
                return Cast(dtype, value)
            v = int(v)
        return const(int(v), dtype)
    return Cast(dtype, value)


def select(cond, t, f, lazy: bool = False) -> Expr:
    cond = convert(cond)
    if not dt.is_bool(dt.element_of(cond.dtype)):
        raise DTypeError(f"a select condition must be bool, got {cond.dtype} in `{cond}`")
    t, f = match_types(t, f, "select")
    return Select(cond, t, f, lazy)


def min_expr(a, b) -> Expr:
    return binary(BinOp.MIN, a, b)


def max_expr(a, b) -> Expr:
    return binary(BinOp.MAX, a, b)


def is_const_int(e, value=None) -> bool:
    return isinstance(e, Const) and dt.is_int(e.dtype) and (value is None or e.value == value)


def const_value(e):
    """The Python value of a constant expression, else None."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, (int, float)):
        return e
    return None
