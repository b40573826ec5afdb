"""The vectorizer keeps ``ramp(b, 1, L) // d`` scalar when no lane crosses a multiple of ``d``
(``b`` provably a multiple of L, ``d`` a constant multiple of L): a fused axis's row index and
the border condition computed from it stay one value for all lanes, so a guarded load (a padded
gather, a tail) is one vector load. Anything else keeps the lane-wise form.

Each case is checked against numpy and the interpreters (``check_llvm``: every pass, poisoned
outputs) on fresh inputs; the lowered loop nest says whether the loop became vectors.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilecraft as tc
from tilecraft import te
from tilecraft.ir.expr import BinOp, Binary, Broadcast, Const, Ramp, Var
from tilecraft.schedule.passes.vectorize import _Vectorizer


def _guarded(n, lanes, div, shift):
    """``Y[i] = A[i] if (i + shift) // div is even else 0``, the loop split by ``lanes`` and vectorized."""
    A = te.placeholder((n,), name="A")
    Y = te.compute((n,), lambda i: te.if_then_else((i + shift) // div % 2 == 0, A[i], te.const(0.0, "float32")),
                   name="Y")
    s = te.create_schedule(Y.op)
    _, vi = s[Y].split(Y.op.axis[0], factor=lanes)
    s[Y].vectorize(vi)
    return s, A, Y


def _expected(a, div, shift):
    i = np.arange(len(a))
    return np.where((i + shift) // div % 2 == 0, a, 0).astype("float32")


CASES = [  # (lanes, divisor, shift, vectorized?)
    (8, 8, 0, True), (8, 16, 0, True), (4, 12, 4, True), (4, 8, -8, True),
    (8, 12, 0, False),          # 12 is not a multiple of 8: lanes 4..7 of the first group differ
    (4, 8, 1, False),           # the base is not a multiple of 4
]


@pytest.mark.parametrize("lanes,div,shift,vectorized", CASES,
                         ids=[f"L{a}-d{b}-s{c}" for a, b, c, _ in CASES])
def test_guarded_load_with_a_lane_invariant_condition(lanes, div, shift, vectorized, rng, check_llvm):
    n = 96
    s, A, Y = _guarded(n, lanes, div, shift)
    text = str(tc.lower(s, [A, Y], simple_mode=True))
    assert ("vectorized(" not in text and "ramp(" in text) == vectorized, text
    a = rng.uniform(1, 2, n).astype("float32")
    check_llvm(s, [A, Y], {A: a}, {Y: _expected(a, div, shift)})


@settings(max_examples=200, deadline=None)
@given(lanes=st.sampled_from([2, 4, 8, 16]), k=st.integers(1, 6), base=st.integers(-50, 50),
       extra=st.integers(0, 3))
def test_the_rule_is_exact_lane_by_lane(lanes, k, base, extra):
    """``ramp(x·L + e, 1, L) // d`` and ``% d`` as the vectorizer rewrites them, evaluated at
    ``x = base``, equal the lane-by-lane values (the rule applies only when ``e`` keeps the base
    a multiple of L)."""
    d = lanes * k + (extra if extra and lanes > 2 else 0)       # sometimes not a multiple of L
    x = Var("x", "int32")
    r = Ramp(x * lanes + Const(lanes * extra, "int32"), Const(1, "int32"), lanes)
    vec = _Vectorizer(Var("v", "int32"), lanes)
    for op, f in ((BinOp.FLOORDIV, lambda q: q // d), (BinOp.FLOORMOD, lambda q: q % d)):
        out = vec.binary(op, r, Const(d, "int32"))
        b = base * lanes + lanes * extra
        want = [f(b + j) for j in range(lanes)]
        got = _eval(out, x, base, lanes)
        assert got == want, (op, lanes, d, base, out)
        if d % lanes:                                  # no rule: the lane-wise form is kept
            assert isinstance(out, Binary)


def _eval(e, x, value, lanes):
    """The lanes of ``e`` (a scalar, a ramp or a lane-wise binary of a ramp and a constant) at x = value."""
    from tilecraft.ir.functor import substitute
    from tilecraft.ir.simplify import simplify
    if isinstance(e, Ramp):
        b = int(simplify(substitute(e.base, {x: Const(value, "int32")})).value)
        return [b + j for j in range(lanes)]
    if isinstance(e, Binary) and isinstance(e.a, Ramp):
        lanes_a = _eval(e.a, x, value, lanes)
        d = int(e.b.value.value if isinstance(e.b, Broadcast) else e.b.value)
        return [q // d if e.op is BinOp.FLOORDIV else q % d for q in lanes_a]
    return [int(simplify(substitute(e, {x: Const(value, "int32")})).value)] * lanes
