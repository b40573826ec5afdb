"""Random integer expressions compiled for the CPU (scalar and vectorized) must equal the
interpreter exactly: floor/trunc division and modulo by signed divisors, wraparound, narrowing
casts, min/max, comparisons and selects. This exercises the simplifier, the vectorizer and the
LLVM backend together on real data."""
import numpy as np
import pytest

from tilecraft import te

CASES = 12
SIZE = 24


def random_expr(rng, X, Y, D, i, depth):
    """An int32 expression of the loads X[i], Y[i], D[i] (D never 0 or -1) and constants."""
    if depth == 0 or rng.random() < 0.15:
        leaf = rng.integers(0, 4)
        return (X[i], Y[i], D[i], te.const(int(rng.integers(-50, 50)), "int32"))[leaf]
    a = random_expr(rng, X, Y, D, i, depth - 1)
    kind = rng.integers(0, 12)
    if kind <= 2:
        b = random_expr(rng, X, Y, D, i, depth - 1)
        return (a + b, a - b, a * b)[kind]
    if kind <= 6:   # division and modulo: by D[i] or a nonzero constant other than -1
        d = D[i] if rng.random() < 0.5 else te.const(int(rng.choice([2, 3, 4, 7, 8, 16, -2, -3, -4, -8])), "int32")
        return (a // d, a % d, te.truncdiv(a, d), te.truncmod(a, d))[kind - 3]
    if kind == 7:
        b = random_expr(rng, X, Y, D, i, depth - 1)
        return te.min(a, b) if rng.random() < 0.5 else te.max(a, b)
    if kind == 8:
        b = random_expr(rng, X, Y, D, i, depth - 1)
        c = random_expr(rng, X, Y, D, i, depth - 1)
        return te.select(a < b, c, a)
    if kind == 9:
        return a.astype(str(rng.choice(["int8", "int16", "uint8"]))).astype("int32")
    if kind == 10:
        return -a
    return te.abs(a)


def pytest_generate_tests(metafunc):
    """``case``: CASES integer and CASES // 2 float expressions, or ``--fuzz-cases`` of each."""
    if "case" in metafunc.fixturenames:
        n = metafunc.config.getoption("--fuzz-cases")
        if n is None:
            n = CASES if metafunc.function.__name__ == "test_random_integer_expression" else CASES // 2
        metafunc.parametrize("case", range(n))


@pytest.mark.parametrize("vectorized", [False, True], ids=["scalar", "vector"])
def test_random_integer_expression(case, vectorized, rng, check_llvm):
    X = te.placeholder((SIZE,), dtype="int32", name="X")
    Y = te.placeholder((SIZE,), dtype="int32", name="Y")
    D = te.placeholder((SIZE,), dtype="int32", name="D")
    out = te.compute((SIZE,), lambda i: random_expr(rng, X, Y, D, i, 4), name="E")
    s = te.create_schedule(out.op)
    if vectorized:
        s[out].vectorize(s[out].split(out.op.axis[0], factor=8)[1])
    x = rng.integers(-2**31, 2**31, SIZE).astype("int32")
    x[: SIZE // 2] = rng.integers(-1000, 1000, SIZE // 2)
    y = rng.integers(-1000, 1000, SIZE).astype("int32")
    d = rng.choice(np.r_[-9:-1, 2:10], SIZE).astype("int32")
    used = [t for t in (X, Y, D) if t in out.op.input_tensors]
    feed = {t: v for t, v in ((X, x), (Y, y), (D, d)) if t in used}
    check_llvm(s, used + [out], feed, rtol=0, atol=0)


def random_float_expr(rng, X, Y, i, depth):
    """A float32 expression that stays bounded (so tolerances are meaningful)."""
    if depth == 0 or rng.random() < 0.15:
        return (X[i], Y[i], te.const(float(rng.uniform(-2, 2)), "float32"))[rng.integers(0, 3)]
    a = random_float_expr(rng, X, Y, i, depth - 1)
    kind = rng.integers(0, 10)
    if kind <= 2:
        b = random_float_expr(rng, X, Y, i, depth - 1)
        return (a + b, a - b, te.tanh(a) * b)[kind]
    if kind == 3:
        return a / (te.abs(random_float_expr(rng, X, Y, i, depth - 1)) + 1.0)
    if kind == 4:
        b = random_float_expr(rng, X, Y, i, depth - 1)
        return te.min(a, b) if rng.random() < 0.5 else te.max(a, b)
    if kind == 5:
        b = random_float_expr(rng, X, Y, i, depth - 1)
        return te.if_then_else(a < b, b, a * 0.5)
    # Rounding is discontinuous: applied to a computed value, a one-ulp difference (FMA
    # contraction, inline exp/tanh) can flip the result. So it is applied to an input, whose
    # chance of landing within an ulp of an integer boundary is negligible.
    leaf = (X[i], Y[i])[rng.integers(0, 2)]
    if kind == 6:
        f = (te.floor, te.ceil, te.round, te.trunc)[rng.integers(0, 4)]
        return f(leaf * 3.1 + 0.05) + a
    if kind == 7:
        return (leaf * 37.3 + 0.05).astype("int32").astype("float32") * 0.01 + a
    if kind == 8:
        return te.sqrt(te.abs(a)) + te.exp(te.tanh(a))
    return te.sigmoid(a) - 0.5


@pytest.mark.parametrize("vectorized", [False, True], ids=["scalar", "vector"])
def test_random_float_expression(case, vectorized, rng, check_llvm):
    X = te.placeholder((SIZE,), name="X")
    Y = te.placeholder((SIZE,), name="Y")
    out = te.compute((SIZE,), lambda i: random_float_expr(rng, X, Y, i, 4), name="E")
    s = te.create_schedule(out.op)
    if vectorized:
        s[out].vectorize(s[out].split(out.op.axis[0], factor=8)[1])
    x, y = rng.uniform(-2, 2, SIZE).astype("float32"), rng.uniform(-2, 2, SIZE).astype("float32")
    used = [t for t in (X, Y) if t in out.op.input_tensors]
    feed = {t: v for t, v in ((X, x), (Y, y)) if t in used}
    check_llvm(s, used + [out], feed, rtol=1e-4, atol=1e-4)
