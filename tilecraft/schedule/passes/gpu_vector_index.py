"""Vector indices back into ``Ramp`` form, so that vector accesses stay 16-byte loads/stores.

Vectorizing a loop over a fused axis leaves indices like ``(ramp(b, 1, 4) // 64) * 64 +
ramp(b, 1, 4) % 64``. When ``b`` is provably a multiple of the lane count and the divisor a
multiple of it too, the four lanes never cross a multiple of the divisor, so
``ramp(b, 1, 4) // 64 → broadcast(b // 64, 4)`` and ``ramp(b, 1, 4) % 64 → ramp(b % 64, 1, 4)``;
arithmetic on ramps and broadcasts is then folded again (``broadcast(x) + ramp(b, s) →
ramp(x + b, s)``, ``ramp(b, s) * broadcast(c) → ramp(b*c, s*c)``).

Afterwards every vector index that is affine within a 4/8-lane group is a ``Ramp``.
(The vectorizer could produce these directly; until then this pass does it for the GPU.)
"""
from __future__ import annotations

import math

from ...ir.expr import BinOp, Binary, Broadcast, Cast, Const, Ramp
from ...ir.functor import IRMutator


def known_multiple(e) -> int:
    """A number ``e`` is provably a multiple of (1 if nothing is known)."""
    t = type(e)
    if t is Const:
        v = abs(int(e.value))
        return v if v else 1 << 30
    if t is Binary:
        if e.op in (BinOp.ADD, BinOp.SUB):
            return math.gcd(known_multiple(e.a), known_multiple(e.b))
        if e.op is BinOp.MUL:
            return min(known_multiple(e.a) * known_multiple(e.b), 1 << 30)
        if e.op in (BinOp.FLOORMOD, BinOp.TRUNCMOD) and isinstance(e.b, Const):
            return math.gcd(known_multiple(e.a), abs(int(e.b.value)) or 1)
        if e.op is BinOp.SHL and isinstance(e.b, Const):
            return min(known_multiple(e.a) << int(e.b.value), 1 << 30)
    if t is Cast:
        return known_multiple(e.value)
    return 1


def _const(e):
    if isinstance(e, Broadcast) and isinstance(e.value, Const):
        return int(e.value.value)
    return None


class _Canonical(IRMutator):
    def visit_Binary(self, e):
        e = super().visit_Binary(e)
        a, b, op = e.a, e.b, e.op
        ra, rb = isinstance(a, Ramp), isinstance(b, Ramp)
        ba, bb = isinstance(a, Broadcast), isinstance(b, Broadcast)
        if op in (BinOp.FLOORDIV, BinOp.FLOORMOD) and ra and bb:
            c = _const(b)
            unit = isinstance(a.stride, Const) and a.stride.value == 1
            if c and c > 0 and unit and c % a.lanes == 0 and known_multiple(a.base) % a.lanes == 0:
                if op is BinOp.FLOORDIV:
                    return Broadcast(a.base // c, a.lanes)
                return Ramp(a.base % c, a.stride, a.lanes)
        if op is BinOp.ADD:
            if ra and rb:
                return Ramp(a.base + b.base, a.stride + b.stride, a.lanes)
            if ra and bb:
                return Ramp(a.base + b.value, a.stride, a.lanes)
            if ba and rb:
                return Ramp(a.value + b.base, b.stride, b.lanes)
            if ba and bb:
                return Broadcast(a.value + b.value, a.lanes)
        if op is BinOp.SUB:
            if ra and bb:
                return Ramp(a.base - b.value, a.stride, a.lanes)
            if ba and bb:
                return Broadcast(a.value - b.value, a.lanes)
        if op is BinOp.MUL:
            if ra and bb:
                return Ramp(a.base * b.value, a.stride * b.value, a.lanes)
            if ba and rb:
                return Ramp(b.base * a.value, b.stride * a.value, b.lanes)
            if ba and bb:
                return Broadcast(a.value * b.value, a.lanes)
        return e


def canonicalize_vector_indices(stmt):
    """Fold vector index arithmetic back into Ramps (see the module docstring)."""
    return _Canonical().visit_stmt(stmt)
