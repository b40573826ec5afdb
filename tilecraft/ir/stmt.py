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

A buffer made by :func:`decl_buffer` (a tensor intrinsic's view of its operands) may have
variables for its shape, strides and ``elem_offset`` (where it starts in ``data``, in elements).
``AttrStmt("buffer_bind_scope", declared, BufferRegion(target, begin, extent), body)`` makes it
view that box of ``target`` in ``body``: storage flattening gives the variables their values (the
box's extents, the target's strides, the box's first element) and turns the declared buffer's
accesses and pointers into ones of ``target``.

As expressions do, each statement class declares its sub-nodes (``child_fields``: expressions and
statements, in the order ``children()`` gives them) and its by-identity fields (``ref_fields``:
the loop or let variable it binds, the buffer it stores to or allocates); see ``node.py``.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from . import dtype as dt
from .expr import Const, Expr, Var, convert
from .node import EXPR, EXPRS, OPTIONAL_EXPR, OPTIONAL_STMT, STMT, STMTS, Node, ir_node


# AttrStmt keys of a tensorized region (schedule/tensorize.py): a declared buffer viewing a box of
# another (node: the declared Buffer, value: a BufferRegion), and one use of a tensor intrinsic
# (node: the TensorIntrin, value: "body", "reset" or "update"; body: that part of its lowering)
BUFFER_BIND_SCOPE = "buffer_bind_scope"
TENSOR_INTRIN_SCOPE = "tensor_intrin"


class ForKind(enum.Enum):
    SERIAL = "for"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "launch_thread"


@dataclass(frozen=True, eq=False, slots=True)
class Buffer:
    """A typed region of memory. ``shape`` and ``strides`` are tuples of expressions (strides are
    in elements; ``None`` means compact row-major). ``elem_offset`` (None: 0), ``offset_factor``
    and ``data_alignment`` describe a buffer declared with :func:`decl_buffer`."""
    name: str
    shape: tuple
    dtype: str
    scope: str = "global"
    strides: tuple | None = None
    data: Var | None = None
    elem_offset: Expr | None = None
    offset_factor: int = 0
    data_alignment: int = -1

    def __post_init__(self):
        if self.data is None:
            object.__setattr__(self, "data", Var(self.name, "handle"))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def access_ptr(self, access_mask, ptr_type: str = "handle", content_lanes: int = 1, offset=0,
                   extent=None):
        """The address of element ``offset`` of this buffer (after its ``elem_offset``), for an
        external function that reads (``"r"``), writes (``"w"``) or does both (``"rw"``) with
        it, as TVM's ``Buffer.access_ptr``. ``extent`` (elements the callee may touch) defaults
        to the rest of the buffer: from ``offset`` to its last element (with strides, the span
        ``1 + sum((shape[d] - 1) * strides[d])``; bounds-checked builds check that range).

        >>> call_extern("int32", "gemv_update", cc.access_ptr("w"), aa.access_ptr("r"))
        """
        from .expr import AccessPtr, const
        mask = _access_mask(access_mask, self.name)
        if ptr_type != "handle" or content_lanes != 1:
            raise ValueError(f"access_ptr of buffer '{self.name}': only ptr_type='handle' and "
                             f"content_lanes=1 are supported, got {ptr_type!r} and {content_lanes!r}")
        offset = convert(offset)
        zero = isinstance(offset, Const) and offset.value == 0
        if extent is None:
            if not self.shape:
                extent = const(1)
            elif self.strides is not None:      # the span from the first element to the last
                extent = const(1)
                for n, st in zip(self.shape, self.strides):
                    extent = extent + (n - 1) * st
            else:
                extent = self.shape[0]
                for d in self.shape[1:]:
                    extent = extent * d
            extent = extent if zero else extent - offset
        base = self.elem_offset
        start = offset if base is None or (isinstance(base, Const) and base.value == 0) else \
            (base if zero else base + offset)
        return AccessPtr(self, start, convert(extent), mask)

    def vload(self, begin, dtype: str | None = None):
        """The element at index ``begin`` (one index per dimension), or with a vector ``dtype``
        (``"float32x8"``) that many elements from there along the last dimension.

        >>> Ab.vload([0, 0], "float32x8")
        """
        from .expr import BufferLoad
        dtype = dt.normalize(dtype) if dtype is not None else self.dtype
        return BufferLoad(self, self._vector_index(begin, dtype, "vload"), dtype)

    def vstore(self, begin, value):
        """Store ``value`` (a scalar, or a vector written along the last dimension) at index
        ``begin``; returns the statement.

        >>> Cb.vstore([0], value)
        """
        value = convert(value)
        return BufferStore(self, value, self._vector_index(begin, value.dtype, "vstore"))

    def _vector_index(self, begin, dtype: str, what: str) -> tuple:
        from .expr import Ramp, const
        idx = tuple(convert(i) for i in (begin if isinstance(begin, (list, tuple)) else [begin]))
        if len(idx) != len(self.shape):
            raise ValueError(f"{what} of buffer '{self.name}': it has {len(self.shape)} dimension(s), "
                             f"got {len(idx)} index(es)")
        if dt.element_of(dtype) != dt.element_of(self.dtype):
            raise ValueError(f"{what} of buffer '{self.name}' ({self.dtype}) as {dtype}: the element "
                             f"types differ")
        lanes = dt.lanes(dtype)
        if lanes > 1:
            if not idx:
                raise ValueError(f"{what} of {lanes} lanes from the 0-d buffer '{self.name}'")
            idx = idx[:-1] + (Ramp(idx[-1], const(1, idx[-1].dtype), lanes),)
        return idx

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

    def __getitem__(self, k: int) -> Stmt:       # TVM's seq[k], len(seq)
        return self.seq[k]

    def __len__(self) -> int:
        return len(self.seq)

    def __bool__(self) -> bool:                  # a statement is always true, empty or not
        return True


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
    """An expression computed for its effect (a call); ``Evaluate(0)`` does nothing."""
    value: Expr
    child_fields = (("value", EXPR),)

    def __post_init__(self):
        if not isinstance(self.value, Expr):
            object.__setattr__(self, "value", convert(self.value))


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


def _access_mask(mask, name: str) -> int:
    """``"r"`` → 1, ``"w"`` → 2, ``"rw"``/``"wr"`` → 3; an int 1..3 as it is."""
    if isinstance(mask, int) and not isinstance(mask, bool) and 1 <= mask <= 3:
        return mask
    if isinstance(mask, str) and mask and set(mask) <= {"r", "w"}:
        return ("r" in mask) | (2 if "w" in mask else 0)
    raise ValueError(f"access_ptr of buffer '{name}': the access mask must be 'r', 'w' or 'rw' "
                     f"(or 1, 2, 3), got {mask!r}")


def decl_buffer(shape, dtype: str = "float32", name: str = "buffer", data=None, strides=None,
                elem_offset=None, scope: str = "", data_alignment: int = -1, offset_factor: int = 0,
                buffer_type: str = "", axis_separators=None, span=None) -> Buffer:
    """A buffer that views memory it does not own, as TVM's ``tvm.tir.decl_buffer``: a tensor
    intrinsic's operands (``te.decl_tensor_intrin(..., binds={a: Ab})``).

    ``strides`` (elements; None: compact row-major) and ``elem_offset`` may hold variables
    (``te.var("s1")``) that take the values of the region the buffer is bound to. Without
    ``elem_offset``, ``offset_factor=0`` means the buffer starts at element 0 of its memory;
    ``offset_factor=k > 0`` gives it a variable offset that must be a multiple of ``k``.
    ``scope=""`` is global memory.

    >>> Bb = decl_buffer((16, 64), "float32", name="B", offset_factor=1, strides=[te.var("s1"), 1])
    """
    if isinstance(shape, (int, Expr)) and not isinstance(shape, bool):
        shape = (shape,)
    shape = tuple(convert(d) for d in shape)
    dtype = dt.normalize(dtype)
    if strides is not None:
        strides = tuple(convert(x) for x in strides)
        if len(strides) != len(shape):
            raise ValueError(f"decl_buffer '{name}': {len(strides)} strides for {len(shape)} dimensions")
    if not isinstance(offset_factor, int) or isinstance(offset_factor, bool) or offset_factor < 0:
        raise ValueError(f"decl_buffer '{name}': offset_factor must be an integer >= 0, got {offset_factor!r}")
    if elem_offset is None:
        elem_offset = Var(f"{name}_elem_offset", "int32") if offset_factor else convert(0)
    else:
        elem_offset = convert(elem_offset)
    if data is not None and not (isinstance(data, Var) and data.dtype == "handle"):
        raise ValueError(f"decl_buffer '{name}': data must be a handle variable, got {data!r}")
    if axis_separators:
        raise ValueError(f"decl_buffer '{name}': axis_separators are not supported")
    return Buffer(name, shape, dtype, scope or "global", strides, data, elem_offset, offset_factor,
                  64 if data_alignment == -1 else int(data_alignment))
