"""TVM's ``tir.stmt_functor`` names: ``substitute``, ``post_order_visit``.

>>> tvm.tir.stmt_functor.substitute(n * 2 + 1, {n: 99})     # 99 * 2 + 1
"""
from __future__ import annotations

from ..ir.expr import convert
from ..ir.functor import post_order_visit
from ..ir.functor import substitute as _substitute

__all__ = ["substitute", "post_order_visit"]


def substitute(node, vmap: dict):
    """``node`` (an expression or statement) with each variable of ``vmap`` replaced by its value
    (an expression or a Python number, TVM's ``var_dict``).

    >>> substitute(i * 4 + j, {i: 2, j: io})
    """
    return _substitute(node, {v: convert(x) for v, x in vmap.items()})
