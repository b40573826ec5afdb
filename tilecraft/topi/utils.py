"""TVM's ``tvm.topi.utils`` helpers that scripts use: ``get_const_tuple``."""
from __future__ import annotations

from ..ir.expr import Const, Expr, IterVar


def get_const_tuple(in_tuple) -> tuple:
    """The integers of a shape (``A.shape``): ``get_const_tuple(A.shape) == (1024, 64)``; a
    symbolic dimension stays an expression."""
    out = []
    for x in in_tuple:
        if isinstance(x, IterVar):
            x = x.dom.extent
        out.append(int(x.value) if isinstance(x, Const) else x if isinstance(x, Expr) else int(x))
    return tuple(out)
