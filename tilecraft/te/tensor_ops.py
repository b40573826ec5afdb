"""Whole-tensor arithmetic: ``A + B``, ``A * 2``, ``1 - A``, ``A / B`` on ``te.Tensor``s, as
TVM's te tensor overloads (from topi): each makes a new elementwise compute stage.

Two tensors broadcast as numpy arrays do: shapes are aligned on the right, and a dimension of
constant extent 1 stretches to the other's; other extents must be equal (the same constant or
the same expression). The stage is named ``T_add`` / ``T_subtract`` / ``T_multiply`` /
``T_divide`` and tagged ``"broadcast"``; with a scalar (a number or a scalar expression such as
a ``te.var``) it is tagged ``"elemwise"``. ``/`` divides as ``te.div`` (C semantics: truncating
for integers).

>>> A = te.placeholder((4, 3), name="A"); B = te.placeholder((3,), name="B")
>>> C = A + B                  # C[i, j] = A[i, j] + B[j], shape (4, 3)
>>> D = 1.0 - C * 2            # two more stages
"""
from __future__ import annotations

import numbers

from ..ir.expr import Const, Expr, IterVar, div
from ..ir.simplify import simplify
from .tensor import TEError, Tensor

_OPS = {
    "add": lambda x, y: x + y,
    "subtract": lambda x, y: x - y,
    "multiply": lambda x, y: x * y,
    "divide": div,
}
_SYMBOL = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}


def broadcast_shape(a: tuple, b: tuple, what: str) -> tuple:
    """The shape two tensors of shapes ``a`` and ``b`` broadcast to (numpy's rule)."""
    n = max(len(a), len(b))
    a = (None,) * (n - len(a)) + tuple(a)
    b = (None,) * (n - len(b)) + tuple(b)
    out = []
    for d, (x, y) in enumerate(zip(a, b)):
        if x is None or _is_one(x):
            out.append(y if y is not None else x)
        elif y is None or _is_one(y) or _same(x, y):
            out.append(x)
        else:
            raise TEError(f"{what}: shapes ({_dims(a)}) and ({_dims(b)}) do not broadcast: dimension "
                          f"{d} is {x} in one and {y} in the other (each must be equal or 1)")
    return tuple(out)


def _is_one(e) -> bool:
    return isinstance(e, Const) and e.value == 1


def _same(x, y) -> bool:
    d = simplify(x - y)
    return isinstance(d, Const) and d.value == 0


def _dims(shape) -> str:
    return ", ".join(str(s) for s in shape if s is not None)


def _element(t, idx: tuple, out_shape: tuple):
    """``t`` at the output index ``idx``: a tensor broadcast to ``out_shape``, or a scalar."""
    if not isinstance(t, Tensor):
        return t
    lead = len(out_shape) - len(t.shape)
    return t[tuple(idx[lead + d] if not (_is_one(s) and not _is_one(out_shape[lead + d])) else 0
                   for d, s in enumerate(t.shape))]


def tensor_binary(name: str, a, b) -> Tensor:
    """``a <op> b`` where at least one side is a tensor; the other a tensor or a scalar."""
    for x, other in ((a, b), (b, a)):
        if not isinstance(x, (Tensor, Expr, IterVar, numbers.Number)) or isinstance(x, bool):
            t = other if isinstance(other, Tensor) else x
            raise TEError(f"tensor '{t.name}' {_SYMBOL[name]} {type(x).__name__}: a tensor combines with "
                          f"a tensor, a number or a scalar expression, not {x!r}")
    both = isinstance(a, Tensor) and isinstance(b, Tensor)
    if both:
        shape = broadcast_shape(a.shape, b.shape, f"'{a.name}' {_SYMBOL[name]} '{b.name}'")
    else:
        shape = (a if isinstance(a, Tensor) else b).shape
    from .operation import compute_tagged   # operation.py imports tensor.py, which calls this
    fop = _OPS[name]
    return compute_tagged(shape, lambda *idx: fop(_element(a, idx, shape), _element(b, idx, shape)),
                          f"T_{name}", "broadcast" if both else "elemwise")
