"""Truncating integer division (``BinOp.TRUNCDIV``/``TRUNCMOD``, C's ``/`` and ``%``): the one
definition in ``tilecraft/ir/expr.py`` that constant folding, the simplifier, the interpreter, the
CUDA emulator and shape evaluation all call, checked against exact fractions."""
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

from tilecraft.ir import BinOp, Const
from tilecraft.ir import expr as ir_expr
from tilecraft.ir.expr import trunc_divide, trunc_remainder


def _trunc_ref(a, b):
    return math.trunc(Fraction(a, b))


@given(st.integers(-2 ** 70, 2 ** 70), st.integers(-2 ** 40, 2 ** 40).filter(bool))
def test_trunc_divide_on_python_ints(a, b):
    assert trunc_divide(a, b) == _trunc_ref(a, b)
    assert trunc_remainder(a, b) == a - b * _trunc_ref(a, b)
    assert trunc_remainder(a, b) == 0 or (trunc_remainder(a, b) < 0) == (a < 0)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint16"])
def test_trunc_divide_on_numpy_arrays(rng, dtype):
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, size=4096, endpoint=True, dtype=dtype)
    b = rng.integers(info.min, info.max, size=4096, endpoint=True, dtype=dtype)
    b[b == 0] = 3
    a[:4] = [info.min, info.max, 7, info.min + 1]
    b[:4] = [7, 2, 1, 3] if info.min == 0 else [7, -2, -1, 3]
    if info.min:                                  # INT_MIN / -1 overflows (undefined)
        keep = ~((a == info.min) & (b == -1))
        a, b = a[keep], b[keep]
    q, r = trunc_divide(a, b), trunc_remainder(a, b)
    assert q.dtype == np.dtype(dtype) and r.dtype == np.dtype(dtype)
    assert [int(v) for v in q] == [_trunc_ref(int(x), int(y)) for x, y in zip(a, b)]
    assert [int(v) for v in r] == [int(x) - int(y) * _trunc_ref(int(x), int(y)) for x, y in zip(a, b)]


def test_constant_folding_truncates_exactly_beyond_float_precision():
    big = 2 ** 60 + 7
    q = ir_expr.binary(BinOp.TRUNCDIV, Const(-big, "int64"), Const(3, "int64"))
    assert type(q) is Const and q.value == -((big) // 3)
    m = ir_expr.binary(BinOp.TRUNCMOD, Const(-big, "int64"), Const(3, "int64"))
    assert type(m) is Const and m.value == -(big % 3)
