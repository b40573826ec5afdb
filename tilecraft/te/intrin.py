"""Math intrinsics and helpers with TVM's names: ``te.exp``, ``te.if_then_else``, ``te.all``, ..."""
from __future__ import annotations

import functools

from ..ir import dtype as dt
from ..ir import intrinsics
from ..ir.expr import BinOp, binary, const as _const, convert, select as _select, neg


def const(value, dtype: str | None = None):
    """A constant: ``te.const(0.5, "float16")``."""
    return _const(value, dtype)


def _float_unary(name: str):
    def f(x):
        return intrinsics.call(name, x)
    f.__name__ = name
    f.__doc__ = (f"Elementwise ``{name}`` of a float expression (float16 computes in float32): "
                 f"``te.{name}(A[i])``. Its dtype rule and reference: ``tilecraft.ir.intrinsics``.")
    return f


exp = _float_unary("exp")
exp2 = _float_unary("exp2")
log = _float_unary("log")
log2 = _float_unary("log2")
log10 = _float_unary("log10")
sqrt = _float_unary("sqrt")
rsqrt = _float_unary("rsqrt")
tanh = _float_unary("tanh")
sigmoid = _float_unary("sigmoid")
erf = _float_unary("erf")
floor = _float_unary("floor")
ceil = _float_unary("ceil")
round = _float_unary("round")  # noqa: A001 - TVM's name; rounds half to even, like numpy
trunc = _float_unary("trunc")
sin = _float_unary("sin")
cos = _float_unary("cos")


def popcount(x):
    """The number of set bits of an int32/uint32/int64/uint64 expression, in its dtype (TVM's
    ``tir.popcount``; LLVM ``ctpop``, CUDA ``__popc``/``__popcll``): ``te.popcount(A[i])``."""
    return intrinsics.call("popcount", x)


def abs(x):  # noqa: A001
    """Absolute value of a float or integer expression: ``te.abs(A[i] - B[i])``."""
    x = convert(x)
    if dt.is_float(x.dtype):
        return intrinsics.call("fabs", x, api="te.abs")
    if dt.is_uint(x.dtype) or dt.is_bool(x.dtype):
        return x
    return _select(x < 0, neg(x), x)


def power(x, y):
    """``x ** y`` for float expressions of one dtype (a number takes x's): ``te.power(A[i], 1.5)``."""
    return intrinsics.call("pow", x, y, api="te.power")


pow = power  # noqa: A001


def fma(a, b, c):
    """``a * b + c`` rounded once, for float expressions of one dtype: ``te.fma(A[i], B[i], C[i])``."""
    return intrinsics.call("fma", a, b, c, api="te.fma")


def if_then_else(cond, t, f):
    """``t`` where ``cond`` holds, else ``f``; only the chosen side is evaluated, so it may guard an
    out-of-bounds read (padding)."""
    return _select(cond, t, f, lazy=True)


def select(cond, t, f):
    """Like ``if_then_else`` but both sides may be evaluated (cheaper: no branch)."""
    return _select(cond, t, f, lazy=False)


def all(*conds):  # noqa: A001
    """Logical and of several conditions."""
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        conds = tuple(conds[0])
    if not conds:
        return _const(True, "bool")
    return functools.reduce(lambda a, b: binary(BinOp.AND, a, b), [convert(c) for c in conds])


def any(*conds):  # noqa: A001
    """Logical or of several conditions."""
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        conds = tuple(conds[0])
    if not conds:
        return _const(False, "bool")
    return functools.reduce(lambda a, b: binary(BinOp.OR, a, b), [convert(c) for c in conds])


def floordiv(a, b):
    return binary(BinOp.FLOORDIV, a, b)


def floormod(a, b):
    return binary(BinOp.FLOORMOD, a, b)


def truncdiv(a, b):
    return binary(BinOp.TRUNCDIV, a, b)


def truncmod(a, b):
    return binary(BinOp.TRUNCMOD, a, b)


indexdiv = floordiv
indexmod = floormod


def max_value(dtype: str):
    """The largest value of a dtype, as a constant."""
    return _const(dt.max_value(dt.normalize(dtype)), dtype)


def min_value(dtype: str):
    """The smallest (most negative) value of a dtype, as a constant."""
    return _const(dt.min_value(dt.normalize(dtype)), dtype)


def isnan(x):
    x = convert(x)
    return x != x
