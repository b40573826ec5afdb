"""Differential tests: ``simplify`` never changes the value of an integer expression.

Random int32 expressions over three variables are evaluated by a small reference evaluator
(below, written from the semantics in ``tilecraft/ir/expr.py``: ``//``/``%`` floor, truncdiv/
truncmod truncate, int32 wraps) before and after simplification, at random points inside the
variables' bounds, the bounds being passed to ``simplify``.
"""
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from tilecraft.ir import Binary, BinOp, Broadcast, Cast, Const, Ramp, Select, Unary, UnOp, Var
from tilecraft.ir.simplify import simplify

X, Y, Z = Var("x"), Var("y"), Var("z")
VARS = (X, Y, Z)


from ir_reference import Undefined, reference


def i32(v: int) -> Const:
    return Const(v, "int32")


ARITH = (BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.MIN, BinOp.MAX)
DIVMOD = (BinOp.FLOORDIV, BinOp.FLOORMOD, BinOp.TRUNCDIV, BinOp.TRUNCMOD)
COMPARE = (BinOp.EQ, BinOp.NE, BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE)

small_consts = st.integers(-40, 40).map(i32)
edge_consts = st.sampled_from([2 ** 31 - 1, -2 ** 31, 2 ** 30, -2 ** 30 - 7, 65536]).map(i32)
divisors = st.sampled_from([1, 2, 3, 4, 8, 16, 32, 7, -1, -2, -4, -3]).map(i32)
leaves = st.one_of(st.sampled_from(VARS), small_consts, small_consts, edge_consts)


def _extend(ints):
    """Build one level of int32 expression over ``ints`` (which are themselves int expressions)."""
    bools = st.one_of(
        st.builds(lambda op, a, b: Binary(op, a, b, "bool"), st.sampled_from(COMPARE), ints, ints),
        st.booleans().map(lambda v: Const(v, "bool")))
    bools = st.one_of(
        bools,
        st.builds(lambda op, a, b: Binary(op, a, b, "bool"),
                  st.sampled_from((BinOp.AND, BinOp.OR)), bools, bools),
        bools.map(lambda c: Unary(UnOp.NOT, c, "bool")))
    return st.one_of(
        st.builds(lambda op, a, b: Binary(op, a, b, "int32"), st.sampled_from(ARITH), ints, ints),
        st.builds(lambda op, a, b: Binary(op, a, b, "int32"), st.sampled_from(DIVMOD), ints,
                  st.one_of(divisors, divisors, ints)),
        ints.map(lambda a: Unary(UnOp.NEG, a, "int32")),
        st.builds(lambda c, a, b: Select(c, a, b), bools, ints, ints),
        st.builds(lambda c: Cast("int32", c), bools),
    )


int_exprs = st.recursive(leaves, _extend, max_leaves=14)


def bool_of(ints):
    return st.builds(lambda op, a, b: Binary(op, a, b, "bool"), st.sampled_from(COMPARE), ints, ints)


@st.composite
def bounded_env(draw):
    """Per-variable bounds (sometimes none: full int32 range) and a point inside them."""
    bounds, env = {}, {}
    for v in VARS:
        kind = draw(st.sampled_from(["small", "small", "negative", "wide", "none"]))
        if kind == "none":
            env[v] = draw(st.one_of(st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(-100, 100)))
            continue
        if kind == "small":
            lo = draw(st.integers(0, 40))
            hi = lo + draw(st.integers(0, 70))
        elif kind == "negative":
            lo = draw(st.integers(-100, 0))
            hi = lo + draw(st.integers(0, 100))
        else:
            lo = draw(st.integers(-2 ** 31, 2 ** 31 - 1))
            hi = min(2 ** 31 - 1, lo + draw(st.integers(0, 2 ** 31)))
        bounds[v] = (lo, hi)
        env[v] = draw(st.integers(lo, hi))
    return bounds, env


def check_same_value(e, bounds, env):
    try:
        expected = reference(e, env)
    except Undefined:
        assume(False)
    s = simplify(e, bounds)
    got = reference(s, env)
    assert got == expected, f"{e}  ->  {s}  at {({v.name: x for v, x in env.items()})}, bounds {bounds}"


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(int_exprs, bounded_env())
def test_simplify_preserves_int_value(e, be):
    check_same_value(e, *be)


@SETTINGS
@given(bool_of(int_exprs), bounded_env())
def test_simplify_preserves_comparisons(e, be):
    check_same_value(e, *be)


def _affine(coefs, k):
    e = i32(k)
    for v, c in zip(VARS, coefs):
        e = Binary(BinOp.ADD, Binary(BinOp.MUL, v, i32(c), "int32"), e, "int32")
    return e


@SETTINGS
@given(st.lists(st.sampled_from([0, 1, -1, 2, 4, 8, 16, 32, 33, -32, 64]), min_size=3, max_size=3),
       st.integers(-70, 70), st.sampled_from(DIVMOD), st.sampled_from([1, 2, 4, 8, 16, 32, 3, 5]),
       bounded_env())
def test_affine_divmod_preserves_value(coefs, k, op, c, be):
    """The shapes lowering produces: (a*xo + b*xi + k) // c and % c, with negative values too."""
    e = Binary(op, _affine(coefs, k), i32(c), "int32")
    check_same_value(e, *be)
    nested = Binary(op, e, i32(c), "int32") if op in (BinOp.FLOORDIV, BinOp.TRUNCDIV) else \
        Binary(op, Binary(op, _affine(coefs, k), i32(c * 4), "int32"), i32(c), "int32")
    check_same_value(nested, *be)


@SETTINGS
@given(int_exprs, st.sampled_from([1, 2, 3, 8, 10]), st.integers(-3, 3),
       st.sampled_from([(BinOp.FLOORDIV, BinOp.FLOORMOD), (BinOp.TRUNCDIV, BinOp.TRUNCMOD)]),
       bounded_env())
def test_div_mod_recombination_preserves_value(x, c, k, ops, be):
    """x // c * (k*c) + x % c * k, the shape fused loops produce, in any wrap-around case."""
    div, mod = (Binary(op, x, i32(c), "int32") for op in ops)
    e = Binary(BinOp.ADD, Binary(BinOp.MUL, div, i32(k * c), "int32"),
               Binary(BinOp.MUL, mod, i32(k), "int32"), "int32")
    check_same_value(e, *be)


@SETTINGS
@given(int_exprs, bounded_env())
def test_simplify_is_idempotent(e, be):
    """A second simplify finds nothing to do and returns the very same object."""
    bounds, _ = be
    once = simplify(e, bounds)
    assert simplify(once, bounds) is once, f"{e} -> {once} -> {simplify(once, bounds)}"


def _typed_exprs(d):
    """Expressions of another integer type (wrap at 8 or 64 bits, unsigned values)."""
    lo, hi = (0, 255) if d == "uint8" else (-128, 127) if d == "int8" else (-2 ** 63, 2 ** 63 - 1)
    vs = tuple(Var(n, d) for n in ("p", "q"))
    leaf = st.one_of(st.sampled_from(vs), st.integers(-9, 9).map(lambda v: Const(v % 256 if d == "uint8" else v, d)),
                     st.sampled_from([lo, hi, hi // 2 + 1]).map(lambda v: Const(v, d)))
    ops = ARITH + DIVMOD
    grow = lambda sub: st.one_of(
        st.builds(lambda op, a, b: Binary(op, a, b, d), st.sampled_from(ops), sub, sub),
        st.builds(lambda op, a, c: Binary(op, a, Const(c, d), d), st.sampled_from(DIVMOD), sub,
                  st.sampled_from([1, 2, 3, 4, 16])),
        sub.map(lambda a: Unary(UnOp.NEG, a, d)))
    return st.recursive(leaf, grow, max_leaves=10), vs, (lo, hi)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["int8", "uint8", "int64"]), st.data())
def test_simplify_preserves_value_in_other_int_types(d, data):
    exprs, vs, (lo, hi) = _typed_exprs(d)
    e = data.draw(exprs)
    bounds, env = {}, {}
    for v in vs:
        a = data.draw(st.integers(lo, hi))
        b = data.draw(st.integers(a, min(hi, a + data.draw(st.sampled_from([0, 5, 40, hi - lo])))))
        if data.draw(st.booleans()):
            bounds[v] = (a, b)
        env[v] = data.draw(st.integers(a, b))
    check_same_value(e, bounds, env)


def _vectors(n=4):
    scalars = st.recursive(leaves, lambda sub: st.builds(
        lambda op, a, b: Binary(op, a, b, "int32"), st.sampled_from(ARITH), sub, sub), max_leaves=4)
    ramps = st.builds(lambda b, s: Ramp(b, s, n), scalars, scalars)
    bcasts = scalars.map(lambda v: Broadcast(v, n))
    vd = f"int32x{n}"
    ops = st.sampled_from((BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.MIN, BinOp.FLOORDIV))
    mixed = st.one_of(                      # the shapes the ramp rules rewrite, in both orders
        st.builds(lambda op, a, b: Binary(op, a, b, vd), ops, ramps, bcasts),
        st.builds(lambda op, a, b: Binary(op, a, b, vd), ops, bcasts, ramps))
    return st.recursive(st.one_of(ramps, bcasts, mixed), lambda sub: st.one_of(
        st.builds(lambda op, a, b: Binary(op, a, b, vd), ops, sub, sub),
        sub.map(lambda a: Unary(UnOp.NEG, a, vd))), max_leaves=5)


@pytest.mark.slow
@SETTINGS
@given(_vectors(), bounded_env())
def test_simplify_preserves_vector_lanes(e, be):
    """Ramps and broadcasts after vectorization: every lane keeps its value."""
    bounds, env = be
    s = simplify(e, bounds)
    for lane in range(4):
        try:
            want = reference(e, env, lane)
        except Undefined:
            return
        assert reference(s, env, lane) == want, f"{e} -> {s} at lane {lane}"
