"""A reference evaluator for integer/bool IR expressions, written from the semantics stated in
``tilecraft/ir/expr.py`` and nothing else: Python integers, ``//``/``%`` floor, truncdiv/truncmod
truncate (computed with exact fractions), integers wrap to their dtype's width."""
from fractions import Fraction
import math

from tilecraft.ir import Binary, BinOp, Broadcast, Cast, Const, Ramp, Select, Unary, UnOp, Var


class Undefined(Exception):
    """Division by zero or an out-of-range shift: undefined behaviour, any result is allowed."""


def wrap32(v: int) -> int:
    return (v + 2 ** 31) % 2 ** 32 - 2 ** 31


def wrap_to(v: int, dtype: str) -> int:
    """``v`` modulo 2**bits, as the signed or unsigned integer type ``dtype`` holds it."""
    dtype = dtype.partition("x")[0]          # a vector wraps like its lanes
    signed = dtype.startswith("int")
    bits = int(dtype[3:] if signed else dtype[4:])
    v %= 2 ** bits
    return v - 2 ** bits if signed and v >= 2 ** (bits - 1) else v


def reference(e, env, lane=0):
    """Evaluate with Python integers; everything is evaluated (``select`` is eager). Vector
    expressions are evaluated at one ``lane``."""
    t = type(e)
    if t is Ramp:
        return wrap_to(reference(e.base, env) + lane * reference(e.stride, env), e.base.dtype)
    if t is Broadcast:
        return reference(e.value, env)
    if t is Var:
        return env[e]
    if t is Const:
        return e.value
    if t is Unary:
        a = reference(e.a, env, lane)
        return (not a) if e.op is UnOp.NOT else wrap_to(-a, e.dtype)
    if t is Select:
        c = reference(e.condition, env, lane)
        a, b = reference(e.true_value, env, lane), reference(e.false_value, env, lane)
        return a if c else b
    if t is Cast:
        v = reference(e.value, env, lane)
        return bool(v) if e.dtype == "bool" else wrap_to(int(v), e.dtype)
    assert t is Binary, e
    a, b = reference(e.a, env, lane), reference(e.b, env, lane)
    op = e.op
    if op in (BinOp.FLOORDIV, BinOp.FLOORMOD, BinOp.TRUNCDIV, BinOp.TRUNCMOD) and b == 0:
        raise Undefined
    r = {
        BinOp.ADD: lambda: a + b, BinOp.SUB: lambda: a - b, BinOp.MUL: lambda: a * b,
        BinOp.FLOORDIV: lambda: math.floor(Fraction(a, b or 1)),
        BinOp.FLOORMOD: lambda: a - b * math.floor(Fraction(a, b or 1)),
        BinOp.TRUNCDIV: lambda: math.trunc(Fraction(a, b or 1)),
        BinOp.TRUNCMOD: lambda: a - b * math.trunc(Fraction(a, b or 1)),
        BinOp.MIN: lambda: min(a, b), BinOp.MAX: lambda: max(a, b),
        BinOp.EQ: lambda: a == b, BinOp.NE: lambda: a != b, BinOp.LT: lambda: a < b,
        BinOp.LE: lambda: a <= b, BinOp.GT: lambda: a > b, BinOp.GE: lambda: a >= b,
        BinOp.AND: lambda: bool(a and b), BinOp.OR: lambda: bool(a or b),
    }[op]()
    return r if isinstance(r, bool) else wrap_to(r, e.dtype)
