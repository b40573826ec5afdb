"""Local simplification of tilecraft IR.

``simplify(node, bounds=None)`` takes an ``Expr``, a ``Stmt`` or a ``PrimFunc``; ``bounds`` maps
variables to inclusive integer bounds ``(lo, hi)``. Loop variables get theirs from their ``For``
(constant or symbolic extents), let variables from their value.

What holds afterwards:

* constants are folded (integers wrap to their dtype; floats only where exact, in their own
  precision); integer ``+``/``-``/``*``-by-constant/negation is one canonical sum with its terms
  in a fixed order (``(x + 3) + 4`` prints ``x + 7``, ``xo*32 + 31 - xo*32 + 1`` is ``32``);
* integer division and modulo of an affine sum by a constant are split where the bounds allow
  (``(i*32 + j) // 32 → i``, ``% 32 → j`` for ``0 <= j < 32``); nested ones merged;
  ``x // c * c + x % c → x``;
* ``min``/``max``/comparisons that the bounds decide are gone; ``select``, ``and``/``or``/``not``
  with constant operands are folded;
* ``if`` with a decided condition, loops that run zero times, serial/unrolled/vectorized loops
  that run once, and empty bodies are gone.

Nothing is assumed about overflow: a rule that reasons through a linear form first proves the
form cannot wrap. Rewrites that change nothing return the very same node.

Layout: ``rules.py`` (the rules, and the tables saying which run for which node), ``driver.py``
(the one driver), ``arith.py`` (linear forms and intervals), ``structure.py`` (node keys).

    >>> from tilecraft.ir import Var
    >>> from tilecraft.ir.simplify import simplify
    >>> x = Var("x")
    >>> simplify((x + 3) + 4)
    x + 7
"""
from .arith import Analyzer
from .driver import Simplifier, simplify

__all__ = ["simplify", "Simplifier", "Analyzer"]
