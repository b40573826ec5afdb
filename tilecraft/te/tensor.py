"""Tensors and the operations that produce them.

A ``Tensor`` is one output of an ``Operation``: a ``PlaceholderOp`` (an input) or a ``ComputeOp``
(an index formula). Indexing a tensor, ``A[i, j]``, builds a ``TensorLoad`` expression.
"""
from __future__ import annotations

import numbers
import weakref
from dataclasses import dataclass, field

from ..ir import dtype as dt
from ..ir.expr import Expr, IterVar, TensorLoad, Var, convert, Reduce
from ..ir.functor import post_order_visit
from ..error import TVMError


class TEError(ValueError, TVMError):
    """A tensor expression is malformed; the message says where."""


# Variables created by te.reduce_axis, so that a reduction axis used outside a reduction can be
# reported at definition time.
_reduce_vars: "weakref.WeakValueDictionary[int, Var]" = weakref.WeakValueDictionary()


def is_reduce_var(v: Var) -> bool:
    return _reduce_vars.get(id(v)) is v


def register_reduce_var(v: Var) -> None:
    _reduce_vars[id(v)] = v


class Tensor:
    """An n-dimensional array produced by an operation. ``A[i, j]`` reads an element."""

    __slots__ = ("op", "value_index", "shape", "dtype", "name", "__weakref__")

    def __init__(self, op, value_index: int, shape: tuple, dtype: str, name: str):
        self.op = op
        self.value_index = value_index
        self.shape = shape
        self.dtype = dtype
        self.name = name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> TensorLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) == 1 and isinstance(indices[0], (list, tuple)):
            indices = tuple(indices[0])
        if len(indices) < len(self.shape):
            return TensorSlice(self, indices)       # T[i][j]: completed by further indexing
        if len(indices) > len(self.shape):
            raise _index_count_error(self, indices)
        out = []
        for pos, i in enumerate(indices):
            if isinstance(i, slice):
                raise TEError(f"tensor '{self.name}': slices are not supported as indices (position {pos})")
            if isinstance(i, bool) or not isinstance(i, (numbers.Integral, Expr, IterVar)):
                raise TEError(f"tensor '{self.name}': index {pos} must be an integer expression, "
                              f"got {type(i).__name__} {i!r}")
            e = convert(i)
            if not dt.is_int(e.dtype) or dt.lanes(e.dtype) != 1:
                raise TEError(f"tensor '{self.name}': index {pos} `{e}` has dtype {e.dtype}; "
                              f"indices must be integers (use .astype('int32') for a computed index)")
            out.append(e)
        return TensorLoad(self, tuple(out))

    __call__ = lambda self, *idx: self.__getitem__(idx)

    # Whole-tensor arithmetic (TVM's te tensor overloads, from topi): ``A + B`` with numpy-style
    # broadcasting, ``A * 2``, ``1 - A``; a new elementwise compute stage (tensor_ops.py).
    def __add__(self, o): return _tensor_binary("add", self, o)
    def __radd__(self, o): return _tensor_binary("add", o, self)
    def __sub__(self, o): return _tensor_binary("subtract", self, o)
    def __rsub__(self, o): return _tensor_binary("subtract", o, self)
    def __mul__(self, o): return _tensor_binary("multiply", self, o)
    def __rmul__(self, o): return _tensor_binary("multiply", o, self)
    def __truediv__(self, o): return _tensor_binary("divide", self, o)
    def __rtruediv__(self, o): return _tensor_binary("divide", o, self)

    def __repr__(self) -> str:
        shape = ", ".join(str(s) for s in self.shape)
        return f"Tensor({self.name}, shape=({shape}), dtype={self.dtype})"

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


def _tensor_binary(name, a, b):
    from .tensor_ops import tensor_binary      # tensor_ops builds computes (operation.py)
    return tensor_binary(name, a, b)


def _index_count_error(t: Tensor, indices) -> TEError:
    return TEError(f"tensor '{t.name}' has {len(t.shape)} dimension(s) but was indexed "
                   f"with {len(indices)} index(es): {t.name}[{', '.join(map(str, indices))}]")


class TensorSlice:
    """A tensor indexed in fewer dimensions than it has (TVM's ``TensorSlice``): ``A[i]`` of a
    2-D ``A``; indexing it again, ``A[i][j]``, reads the element. Anywhere else (in arithmetic,
    as a compute body) it is the error of a missing index.

    >>> te.compute((n, m), lambda i, j: A[i][j] * 2)
    """

    __slots__ = ("tensor", "indices")

    def __init__(self, tensor: Tensor, indices: tuple):
        self.tensor, self.indices = tensor, tuple(indices)

    def __getitem__(self, more):
        more = more if isinstance(more, tuple) else (more,)
        return self.tensor[self.indices + more]

    @property
    def dtype(self) -> str:
        return self.tensor.dtype

    def asobject(self):
        """The element this slice reads; a slice with indices missing is an error saying so."""
        raise _index_count_error(self.tensor, self.indices)

    def _refuse(self, *_):
        return self.asobject()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __neg__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    astype = _refuse

    def __repr__(self) -> str:
        return f"{self.tensor.name}[{', '.join(map(str, self.indices))}]"


class Operation:
    __slots__ = ()
    name: str

    def output(self, i: int) -> Tensor:
        return self.outputs[i]

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


class PlaceholderOp(Operation):
    """An input tensor: ``te.placeholder((n, m), name="A")``."""

    __slots__ = ("name", "shape", "dtype", "outputs", "tag", "attrs", "__weakref__")

    def __init__(self, name: str, shape: tuple, dtype: str):
        self.name, self.shape, self.dtype = name, shape, dtype
        self.tag, self.attrs = "", {}
        self.outputs = (Tensor(self, 0, shape, dtype, name),)

    @property
    def input_tensors(self) -> list:
        return []

    axis = ()
    reduce_axis = ()

    def __repr__(self):
        return f"PlaceholderOp({self.name})"


class ComputeOp(Operation):
    """``te.compute``: each output element is ``body[value_index]`` evaluated at its index.

    ``axis`` are the data-parallel IterVars (one per output dimension), ``reduce_axis`` the
    reduction IterVars if the body is a ``Reduce``. Several outputs share one op when the body is
    a tuple (tuple reductions such as argmax).
    """

    __slots__ = ("name", "tag", "attrs", "axis", "reduce_axis", "body", "outputs", "_inputs", "__weakref__")

    def __init__(self, name: str, tag: str, attrs: dict, axis: tuple, reduce_axis: tuple, body: tuple,
                 output_names: tuple | None = None):
        self.name, self.tag, self.attrs = name, tag, dict(attrs or {})
        self.axis, self.reduce_axis, self.body = tuple(axis), tuple(reduce_axis), tuple(body)
        shape = tuple(iv.dom.extent for iv in self.axis)
        names = output_names or ((name,) if len(body) == 1 else tuple(f"{name}.v{i}" for i in range(len(body))))
        self.outputs = tuple(Tensor(self, i, shape, b.dtype, names[i]) for i, b in enumerate(self.body))
        self._inputs = None

    @property
    def shape(self) -> tuple:
        return self.outputs[0].shape

    @property
    def input_tensors(self) -> list:
        """Tensors read by the body and by the bounds of ragged reduce axes (``row_ptr`` in
        ``te.reduce_axis((row_ptr[i], row_ptr[i + 1]))``), in first-use order, bounds first."""
        if self._inputs is None:
            seen, out = set(), []

            def f(n):
                if isinstance(n, TensorLoad) and id(n.tensor) not in seen:
                    seen.add(id(n.tensor))
                    out.append(n.tensor)
            for r in self.reduce_axis:
                post_order_visit(r.dom.min, f)
                post_order_visit(r.dom.extent, f)
            for b in self.body:
                post_order_visit(b, f)
            self._inputs = out
        return list(self._inputs)

    def __repr__(self):
        return f"ComputeOp({self.name})"


def is_ragged_axis(op, iv) -> bool:
    """Whether the reduce axis ``iv`` of ``op`` is *ragged*: its bounds read tensors or the op's
    own axes, as in ``te.reduce_axis((row_ptr[i], row_ptr[i + 1]))``, so its range changes with
    the output point (``docs/ragged.md``)."""
    data = {a.var for a in op.axis}
    found = []

    def f(n):
        if isinstance(n, TensorLoad) or (isinstance(n, Var) and n in data):
            found.append(1)
    post_order_visit(iv.dom.min, f)
    post_order_visit(iv.dom.extent, f)
    return bool(found)


def post_dfs_order(ops) -> list:
    """All operations reachable from ``ops``, producers before consumers."""
    order, seen = [], set()

    def visit(op):
        stack = [(op, False)]
        while stack:
            o, done = stack.pop()
            if done:
                if id(o) not in seen:
                    seen.add(id(o))
                    order.append(o)
                continue
            if id(o) in seen:
                continue
            stack.append((o, True))
            for t in reversed(o.input_tensors):
                if id(t.op) not in seen:
                    stack.append((t.op, False))
    for op in ops:
        visit(op)
    return order
