"""The simplifier's rewrite rules, as data.

A rule is a small function ``rule(e, an) -> Expr | None`` that looks only at the node ``e`` (whose
children are already simplified) and may ask the :class:`~.arith.Analyzer` ``an`` about linear
forms and intervals. It returns a replacement, or ``None`` when it does not apply. Rules never
walk the tree; the driver (``driver.py``) applies them bottom-up and re-simplifies what they
return. The tables at the bottom say which rules run for which node, in order.

Every rule is sound under the semantics of ``expr.py``: integers wrap, ``//``/``%`` floor,
``truncdiv``/``truncmod`` truncate. Reasoning through a linear form is only done where
``an.fits`` proves the expression does not wrap.
"""
from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..expr import (BinOp, Binary, Broadcast, Cast, Const, Ramp, Select, Unary, UnOp, const, trunc_divide,
                    trunc_remainder)
from ..functor import expr_key, structural_equal
from .arith import Linear, dtype_range, is_index, signed_wrap, wrap

FLOOR_OPS = (BinOp.FLOORDIV, BinOp.FLOORMOD)
DIV_OPS = (BinOp.FLOORDIV, BinOp.TRUNCDIV)


def _cint(e):
    """The value of an integer constant, else None."""
    return e.value if type(e) is Const and is_index(e) else None


def _true(): return Const(True, "bool")
def _false(): return Const(False, "bool")


# ---------------------------------------------------------------------------------------------
# Constant folding

def _int_value(op: BinOp, x: int, y: int, d: str):
    """``x op y`` with the IR's integer semantics, or None where it is undefined."""
    if op is BinOp.ADD: return x + y
    if op is BinOp.SUB: return x - y
    if op is BinOp.MUL: return x * y
    if op is BinOp.FLOORDIV: return x // y if y else None
    if op is BinOp.FLOORMOD: return x % y if y else None
    if op is BinOp.TRUNCDIV: return trunc_divide(x, y) if y else None
    if op is BinOp.TRUNCMOD: return trunc_remainder(x, y) if y else None
    if op is BinOp.MIN: return min(x, y)
    if op is BinOp.MAX: return max(x, y)
    if op is BinOp.BITAND: return x & y
    if op is BinOp.BITOR: return x | y
    if op is BinOp.BITXOR: return x ^ y
    if op is BinOp.SHL: return x << y if 0 <= y < dt.bits(d) else None
    if op is BinOp.SHR: return x >> y if 0 <= y < dt.bits(d) else None
    return None


_COMPARE = {BinOp.EQ: lambda x, y: x == y, BinOp.NE: lambda x, y: x != y,
            BinOp.LT: lambda x, y: x < y, BinOp.LE: lambda x, y: x <= y,
            BinOp.GT: lambda x, y: x > y, BinOp.GE: lambda x, y: x >= y}

_FLOAT_ARITH = {BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply,
                BinOp.DIV: np.divide}


def fold_constants(e, an):
    """``3 + 4 → 7`` (ints wrap), ``2.5f * 2.0f → 5.0f`` (in the float's own precision),
    ``3 < 4 → True``, ``True and False → False``."""
    a, b = e.a, e.b
    if type(a) is not Const or type(b) is not Const:
        return None
    d, op = a.dtype, e.op
    x, y = a.value, b.value
    if dt.is_float(d):
        t = np.dtype(d).type
        x, y = t(x), t(y)
        if op in _COMPARE:
            return Const(bool(_COMPARE[op](x, y)), "bool")
        f = _FLOAT_ARITH.get(op)
        if f is None or (op is BinOp.DIV and y == 0):
            return None
        with np.errstate(all="ignore"):
            return Const(float(f(x, y)), d)
    if op in _COMPARE:
        return Const(bool(_COMPARE[op](x, y)), "bool")
    if dt.is_bool(d):
        if op in (BinOp.AND, BinOp.BITAND): return Const(bool(x and y), "bool")
        if op in (BinOp.OR, BinOp.BITOR): return Const(bool(x or y), "bool")
        if op is BinOp.BITXOR: return Const(bool(x) != bool(y), "bool")
        return None
    r = _int_value(op, x, y, d)
    return None if r is None else Const(wrap(r, d), d)


def fold_neg(e, an):
    """``-(2.5) → -2.5``; integers go through the linear form."""
    if type(e.a) is Const and dt.is_float(e.dtype):
        return Const(-e.a.value, e.dtype)
    return None


def fold_not(e, an):
    """``not True → False``."""
    if type(e.a) is Const:
        return Const(not e.a.value, "bool")
    return None


def fold_cast(e, an):
    """``float32(3) → 3.0f``, ``int8(300) → 44``, ``int32(2.7f) → 2``; a cast to the operand's
    own dtype disappears. Casts that would be undefined (NaN or out-of-range float to int) stay."""
    v = e.value
    if v.dtype == e.dtype:
        return v
    if type(v) is not Const:
        return None
    src, d = v.dtype, e.dtype
    x = v.value
    if dt.is_bool(d):
        return Const(bool(x), "bool")
    if dt.is_float(d):
        if dt.is_float(src):
            x = np.dtype(src).type(x)
        elif abs(int(x)) > 2 ** 53:
            return None           # int → float must round once, from the integer itself
        return Const(float(np.dtype(d).type(x)), d)
    if dt.is_int(d) and dt.lanes(d) == 1:
        if dt.is_float(src):
            x = float(np.dtype(src).type(x))
            lo, hi = dtype_range(d)
            if not (np.isfinite(x) and lo - 1 < x < hi + 1):
                return None
        return Const(wrap(int(x), d), d)
    return None


# ---------------------------------------------------------------------------------------------
# Identities

def canonical_linear(e, an):
    """Integer ``+``, ``-``, ``*`` by a constant and negation become one canonical sum:
    ``(x + 3) + 4 → x + 7``, ``x * 1 → x``, ``x * 0 → 0``, ``x - x → 0``,
    ``xo * 32 + 31 - xo * 32 + 1 → 32``, ``(x + 1) * 4 → x * 4 + 4``."""
    if not is_index(e) or id(e) in an.canonical:
        return None
    new = an.build(an.linear(e), e.dtype)
    if structural_equal(new, e):
        an.canonical[id(e)] = e
        return None
    return new


_DIV_OF_MOD = {BinOp.FLOORMOD: BinOp.FLOORDIV, BinOp.TRUNCMOD: BinOp.TRUNCDIV}


def divmod_recombine(e, an):
    """``x // c * c + x % c → x`` (and with any common factor, and for truncdiv/truncmod):
    ``fused // 10 * 20 + fused % 10 * 2 → fused * 2``."""
    if not is_index(e):
        return None
    lin = an.linear(e)
    d = e.dtype
    for key, (atom, k) in lin.terms.items():
        if type(atom) is not Binary or atom.op not in _DIV_OF_MOD:
            continue
        c = _cint(atom.b)
        if c is None or c <= 0:
            continue
        div_key = expr_key(Binary(_DIV_OF_MOD[atom.op], atom.a, atom.b, d))
        div = lin.terms.get(div_key)
        if div is None or signed_wrap(div[1] - k * c, d) != 0:
            continue
        rest = dict(lin.terms)
        del rest[key], rest[div_key]
        return an.build(Linear(rest, lin.const).plus(an.linear(atom.a).scaled(k, d), d), d)
    return None


def float_mul_one(e, an):
    """``x * 1.0 → x`` and ``1.0 * x → x`` (exact in IEEE arithmetic)."""
    if not dt.is_float(e.dtype):
        return None
    if type(e.b) is Const and e.b.value == 1.0:
        return e.a
    if type(e.a) is Const and e.a.value == 1.0:
        return e.b
    return None


def float_div_one(e, an):
    """``x / 1.0 → x``."""
    if type(e.b) is Const and e.b.value == 1.0:
        return e.a
    return None


# ---------------------------------------------------------------------------------------------
# Division and modulo

def div_by_one(e, an):
    """``x // 1 → x``, ``truncdiv(x, 1) → x``."""
    return e.a if _cint(e.b) == 1 else None


def mod_by_one(e, an):
    """``x % 1 → 0``, ``truncmod(x, ±1) → 0``."""
    c = _cint(e.b)
    return const(0, e.dtype) if c is not None and abs(c) == 1 else None


def nested_div(e, an):
    """``(x // a) // b → x // (a*b)`` for positive constants (also for truncdiv)."""
    inner = e.a
    if type(inner) is not Binary or inner.op is not e.op:
        return None
    c1, c2 = _cint(inner.b), _cint(e.b)
    if c1 is None or c2 is None or c1 <= 0 or c2 <= 0 or c1 * c2 > dtype_range(e.dtype)[1]:
        return None
    return Binary(e.op, inner.a, const(c1 * c2, e.dtype), e.dtype)


def nested_mod(e, an):
    """``(x % a) % b → x % b`` when b divides a (positive constants; also for truncmod)."""
    inner = e.a
    if type(inner) is not Binary or inner.op is not e.op:
        return None
    c1, c2 = _cint(inner.b), _cint(e.b)
    if c1 is None or c2 is None or c1 <= 0 or c2 <= 0 or c1 % c2:
        return None
    return Binary(e.op, inner.a, e.b, e.dtype)


def affine_divmod(e, an):
    """Division of an affine sum by a positive constant ``c``. Split the numerator into
    ``c*Q + R`` (``Q``: terms whose coefficient ``c`` divides; ``R``: the rest and the
    constant's remainder). When ``R`` provably stays in one period ``[m*c, m*c + c)``:
    ``N // c → Q + m`` and ``N % c → R - m*c``; so ``(i*32 + j) // 32 → i`` and
    ``(i*32 + j) % 32 → j`` when ``0 <= j < 32``, and ``j % 32 → j``. Otherwise, when ``Q`` has
    variables: ``N // c → Q + R // c`` and ``N % c → R % c``.

    Only where the numerator (and ``R``) provably do not wrap; for truncdiv/truncmod only where
    they are provably non-negative, where truncation equals flooring.
    """
    if not is_index(e):
        return None
    c = _cint(e.b)
    n = e.a
    if c is None or c <= 0 or not an.fits(n):
        return None
    floor = e.op in FLOOR_OPS
    if not floor and an.bound(n)[0] < 0:
        return None
    d = e.dtype
    lin = an.linear(n)
    q_terms, r_terms = {}, {}
    for key, (atom, coef) in lin.terms.items():
        if coef % c == 0:
            q_terms[key] = (atom, coef // c)
        else:
            r_terms[key] = (atom, coef)
    qk, rk = divmod(lin.const, c)
    rlo, rhi = an.linear_interval(Linear(r_terms, rk))
    is_div = e.op in DIV_OPS
    m = rlo // c
    if rhi // c == m:
        if is_div:
            return an.build(Linear(q_terms, qk + m), d)
        return an.build(Linear(r_terms, rk - m * c), d)
    dlo, dhi = dtype_range(d)
    if not q_terms or rlo < dlo or rhi > dhi or (not floor and rlo < 0):
        return None
    r = Binary(e.op, an.build(Linear(r_terms, rk), d), e.b, d)
    if is_div:
        return Binary(BinOp.ADD, an.build(Linear(q_terms, qk), d), r, d)
    return r


# ---------------------------------------------------------------------------------------------
# min / max and comparisons

def minmax_same(e, an):
    """``min(x, x) → x``, ``max(x, x) → x``."""
    return e.a if structural_equal(e.a, e.b) else None


def minmax_by_order(e, an):
    """``min(a, b) → a`` when ``a <= b`` provably (and so on): ``min(i, 64) → i`` for i < 64,
    ``max(x + 1, x) → x + 1``."""
    if not is_index(e):
        return None
    lo, hi = an.difference(e.a, e.b)
    if hi <= 0:
        return e.a if e.op is BinOp.MIN else e.b
    if lo >= 0:
        return e.b if e.op is BinOp.MIN else e.a
    return None


def compare_same(e, an):
    """``x == x → True``, ``x < x → False`` for integers (not floats: NaN)."""
    if not is_index(e.a) or not structural_equal(e.a, e.b):
        return None
    return Const(e.op in (BinOp.EQ, BinOp.LE, BinOp.GE), "bool")


def compare_by_bounds(e, an):
    """Integer comparisons that the bounds decide: ``i < 64 → True`` for i in [0, 63],
    ``x + 1 > x → True`` (when x + 1 cannot wrap)."""
    if not is_index(e.a):
        return None
    lo, hi = an.difference(e.a, e.b)     # a - b
    op = e.op
    verdict = None
    if op is BinOp.LT: verdict = True if hi < 0 else False if lo >= 0 else None
    elif op is BinOp.LE: verdict = True if hi <= 0 else False if lo > 0 else None
    elif op is BinOp.GT: verdict = True if lo > 0 else False if hi <= 0 else None
    elif op is BinOp.GE: verdict = True if lo >= 0 else False if hi < 0 else None
    elif op is BinOp.EQ: verdict = True if lo == hi == 0 else False if (lo > 0 or hi < 0) else None
    elif op is BinOp.NE: verdict = False if lo == hi == 0 else True if (lo > 0 or hi < 0) else None
    return None if verdict is None else Const(verdict, "bool")


# ---------------------------------------------------------------------------------------------
# Logic

def and_const(e, an):
    """``True and x → x``, ``False and x → False`` (either side)."""
    for c, other in ((e.a, e.b), (e.b, e.a)):
        if type(c) is Const and dt.lanes(e.dtype) == 1:
            return other if c.value else c
    return None


def or_const(e, an):
    """``False or x → x``, ``True or x → True`` (either side)."""
    for c, other in ((e.a, e.b), (e.b, e.a)):
        if type(c) is Const and dt.lanes(e.dtype) == 1:
            return c if c.value else other
    return None


def logic_same(e, an):
    """``x and x → x``, ``x or x → x``."""
    return e.a if structural_equal(e.a, e.b) else None


def not_not(e, an):
    """``not not x → x``."""
    a = e.a
    return a.a if type(a) is Unary and a.op is UnOp.NOT else None


_NEGATED = {BinOp.EQ: BinOp.NE, BinOp.NE: BinOp.EQ, BinOp.LT: BinOp.GE, BinOp.GE: BinOp.LT,
            BinOp.LE: BinOp.GT, BinOp.GT: BinOp.LE}


def not_compare(e, an):
    """``not (a < b) → a >= b`` for integers (for floats NaN makes them differ)."""
    a = e.a
    if type(a) is Binary and a.op in _NEGATED and is_index(a.a):
        return Binary(_NEGATED[a.op], a.a, a.b, a.dtype)
    return None


# ---------------------------------------------------------------------------------------------
# select

def select_const_condition(e, an):
    """``select(True, a, b) → a``, ``select(False, a, b) → b``."""
    c = e.condition
    if type(c) is Const:
        return e.true_value if c.value else e.false_value
    return None


def select_same_branches(e, an):
    """``select(c, a, a) → a``."""
    return e.true_value if structural_equal(e.true_value, e.false_value) else None


# ---------------------------------------------------------------------------------------------
# Vectors (after vectorization): keep index vectors as ramps, so loads stay contiguous

def broadcast_op(e, an):
    """``broadcast(a, n) op broadcast(b, n) → broadcast(a op b, n)`` (lane by lane the same)."""
    a, b = e.a, e.b
    if type(a) is Broadcast and type(b) is Broadcast and a.lanes == b.lanes:
        return Broadcast(Binary(e.op, a.value, b.value, dt.element_of(e.dtype)), a.lanes)
    return None


def ramp_arith(e, an):
    """Integer ramps absorb broadcasts and other ramps: ``ramp(b, s, n) + broadcast(x, n) →
    ramp(b + x, s, n)``, ``ramp(b1, s1, n) - ramp(b2, s2, n) → ramp(b1 - b2, s1 - s2, n)``,
    ``ramp(b, s, n) * broadcast(c, n) → ramp(b * c, s * c, n)`` (exact: integers wrap)."""
    a, b, op = e.a, e.b, e.op
    if not dt.is_int(e.dtype) or (type(a) is not Ramp and type(b) is not Ramp):
        return None
    d = dt.element_of(e.dtype)

    def parts(v):             # (base, stride) of a ramp or a broadcast, else None
        if type(v) is Ramp:
            return v.base, v.stride
        if type(v) is Broadcast:
            return v.value, Const(0, d)
        return None
    pa, pb = parts(a), parts(b)
    if pa is None or pb is None:
        return None
    n = a.lanes
    if op is BinOp.ADD or op is BinOp.SUB:
        return Ramp(Binary(op, pa[0], pb[0], d), Binary(op, pa[1], pb[1], d), n)
    if op is BinOp.MUL:
        if type(b) is Broadcast:
            return Ramp(Binary(op, pa[0], b.value, d), Binary(op, pa[1], b.value, d), n)
        if type(a) is Broadcast:
            return Ramp(Binary(op, a.value, pb[0], d), Binary(op, a.value, pb[1], d), n)
    return None


def neg_ramp(e, an):
    """``-ramp(b, s, n) → ramp(-b, -s, n)``."""
    a = e.a
    if type(a) is Ramp and dt.is_int(e.dtype):
        d = a.base.dtype
        return Ramp(Unary(UnOp.NEG, a.base, d), Unary(UnOp.NEG, a.stride, d), a.lanes)
    return None


# ---------------------------------------------------------------------------------------------
# The tables the driver reads: which rules run, in order, for which node.

_ARITH = (fold_constants, divmod_recombine, canonical_linear, ramp_arith, broadcast_op)
_DIV = (fold_constants, div_by_one, nested_div, affine_divmod, broadcast_op)
_MOD = (fold_constants, mod_by_one, nested_mod, affine_divmod, broadcast_op)
_MINMAX = (fold_constants, minmax_same, minmax_by_order, broadcast_op)
_CMP = (fold_constants, compare_same, compare_by_bounds, broadcast_op)

BINARY_RULES: dict = {
    BinOp.ADD: _ARITH,
    BinOp.SUB: _ARITH,
    BinOp.MUL: (fold_constants, float_mul_one, canonical_linear, ramp_arith, broadcast_op),
    BinOp.DIV: (fold_constants, float_div_one, broadcast_op),
    BinOp.FLOORDIV: _DIV, BinOp.TRUNCDIV: _DIV,
    BinOp.FLOORMOD: _MOD, BinOp.TRUNCMOD: _MOD,
    BinOp.MIN: _MINMAX, BinOp.MAX: _MINMAX,
    BinOp.EQ: _CMP, BinOp.NE: _CMP, BinOp.LT: _CMP, BinOp.LE: _CMP, BinOp.GT: _CMP, BinOp.GE: _CMP,
    BinOp.AND: (fold_constants, and_const, logic_same),
    BinOp.OR: (fold_constants, or_const, logic_same),
    BinOp.BITAND: (fold_constants,), BinOp.BITOR: (fold_constants,), BinOp.BITXOR: (fold_constants,),
    BinOp.SHL: (fold_constants,), BinOp.SHR: (fold_constants,),
}

UNARY_RULES: dict = {
    UnOp.NEG: (fold_neg, canonical_linear, neg_ramp),
    UnOp.NOT: (fold_not, not_not, not_compare),
}

NODE_RULES: dict = {
    Select: (select_const_condition, select_same_branches),
    Cast: (fold_cast,),
}


def rules_for(e) -> tuple:
    t = type(e)
    if t is Binary:
        return BINARY_RULES.get(e.op, ())
    if t is Unary:
        return UNARY_RULES.get(e.op, ())
    return NODE_RULES.get(t, ())
