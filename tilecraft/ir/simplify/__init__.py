"""Local simplification of tilecraft IR: small rules (``rules.py``) run by one driver
(``driver.py``), with integer facts from ``arith.py``.

    >>> from tilecraft.ir.simplify import simplify
    >>> simplify((x + 3) + 4)
    x + 7
"""
from .arith import Analyzer
from .driver import Simplifier, simplify

__all__ = ["simplify", "Simplifier", "Analyzer"]
