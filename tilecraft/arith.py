"""TVM's ``tvm.arith.Analyzer``: simplification of index expressions by tilecraft's simplifier
(``ir/simplify.py``: constant folding, affine division and modulo rules).

>>> tvm.arith.Analyzer().simplify(tvm.tir.const(99) * 2 + 1)       # 199
"""
from __future__ import annotations

from .ir.simplify import simplify as _simplify

__all__ = ["Analyzer"]


class Analyzer:
    """TVM's analyzer: ``simplify``, ``canonical_simplify`` and ``rewrite_simplify`` are all
    tilecraft's one simplifier here (no bounds are bound to variables: ``bind`` is not supported)."""

    def simplify(self, expr, steps: int = 2):
        """``expr`` simplified: ``Analyzer().simplify(x * 1 + 0)`` is ``x``."""
        return _simplify(expr)

    def canonical_simplify(self, expr):
        """As :meth:`simplify`."""
        return _simplify(expr)

    def rewrite_simplify(self, expr):
        """As :meth:`simplify`."""
        return _simplify(expr)
