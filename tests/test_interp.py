"""The reference interpreter against hand-written numpy, one semantic rule at a time."""
import math

import numpy as np
import pytest

from tilecraft import te
from tilecraft.interp import InterpError, evaluate

argmax = te.comm_reducer(
    lambda x, y: (te.select(x[1] >= y[1], x[0], y[0]), te.max(x[1], y[1])),
    lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")


def test_elementwise_symbolic_shape(rand):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] * B[i] + 1.0, name="C")
    a, b = rand(37), rand(37)
    out = evaluate(C, {A: a, B: b})
    assert out.dtype == np.float32 and out.shape == (37,)
    np.testing.assert_allclose(out, a * b + 1, rtol=1e-6, atol=1e-6)
    # the extent can also be fed explicitly, and it must agree with the array
    np.testing.assert_allclose(evaluate(C, {A: a, B: b, n: 37}), a * b + 1, rtol=1e-6, atol=1e-6)
    with pytest.raises(InterpError, match="placeholder 'A' expects float32\\[36\\]"):
        evaluate(C, {A: a, B: b[:36], n: 36})


def test_broadcast_transpose_and_index_arithmetic(rand):
    A = te.placeholder((4, 6), name="A")
    b = te.placeholder((6,), name="b")
    C = te.compute((6, 4), lambda j, i: A[i, j] + b[j], name="C")
    F = te.compute((24,), lambda k: A[k // 6, k % 6], name="F")
    a, bb = rand((4, 6)), rand(6)
    c, f = evaluate([C, F], {A: a, b: bb})
    np.testing.assert_allclose(c, (a + bb).T, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(f, a.reshape(-1))


def test_floor_and_trunc_division_of_negative_numbers():
    X = te.placeholder((8,), dtype="int32", name="X")
    D = te.placeholder((8,), dtype="int32", name="D")
    ops = {
        "floordiv": (lambda i: X[i] // D[i], lambda x, d: np.floor_divide(x, d)),
        "floormod": (lambda i: X[i] % D[i], lambda x, d: np.mod(x, d)),
        "truncdiv": (lambda i: te.truncdiv(X[i], D[i]), lambda x, d: np.array([int(a / b) for a, b in zip(x, d)])),
        "truncmod": (lambda i: te.truncmod(X[i], D[i]), lambda x, d: np.array([a - int(a / b) * b for a, b in zip(x, d)])),
        "div": (lambda i: X[i] / D[i], lambda x, d: np.array([int(a / b) for a, b in zip(x, d)])),
    }
    x = np.array([-7, 7, -7, 7, -8, 0, 5, -1], "int32")
    d = np.array([2, 2, -2, -2, 4, 3, -3, 5], "int32")
    for name, (body, ref) in ops.items():
        T = te.compute((8,), body, name=name)
        np.testing.assert_array_equal(evaluate(T, {X: x, D: d}), ref(x, d), err_msg=name)
    # the examples of the semantics docstring
    T = te.compute((1,), lambda i: te.const(-7) // 2 + X[i] * 0, name="T")
    assert evaluate(T, {X: x})[0] == -4


def test_integer_arithmetic_wraps():
    A = te.placeholder((3,), dtype="int8", name="A")
    B = te.compute((3,), lambda i: A[i] + A[i], name="B")                  # int8 wraps
    C = te.compute((3,), lambda i: A[i].astype("int32") * 20000000, name="C")   # int32 wraps
    a = np.array([100, -100, 3], "int8")
    b, c = evaluate([B, C], {A: a})
    np.testing.assert_array_equal(b, np.array([-56, 56, 6], "int8"))
    wrap = lambda v: (v + 2**31) % 2**32 - 2**31
    np.testing.assert_array_equal(c, [wrap(100 * 20000000), wrap(-100 * 20000000), 60000000])
    assert b.dtype == np.int8 and c.dtype == np.int32


def test_casts(rand):
    A = te.placeholder((6,), name="A")
    a = np.array([-2.7, -0.5, 0.0, 0.5, 2.7, 300.0], "float32")
    I = te.compute((6,), lambda i: A[i].astype("int32"), name="I")
    U = te.compute((6,), lambda i: A[i].astype("int32").astype("int8"), name="U")
    Bo = te.compute((6,), lambda i: A[i].astype("bool"), name="Bo")
    H = te.compute((6,), lambda i: A[i].astype("float16"), name="H")
    i, u, bo, h = evaluate([I, U, Bo, H], {A: a})
    np.testing.assert_array_equal(i, [-2, 0, 0, 0, 2, 300])          # towards zero
    np.testing.assert_array_equal(u, [-2, 0, 0, 0, 2, 44])           # 300 wraps to 44
    np.testing.assert_array_equal(bo, [True, True, False, True, True, True])
    assert h.dtype == np.float16
    np.testing.assert_array_equal(h, a.astype("float16"))


def test_float16_stays_float16(rand):
    A = te.placeholder((16,), dtype="float16", name="A")
    B = te.compute((16,), lambda i: A[i] * A[i] + te.const(1.5, "float16"), name="B")
    a = rand(16, "float16")
    out = evaluate(B, {A: a})
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, a * a + np.float16(1.5))


def test_bitwise_logical_and_select():
    A = te.placeholder((5,), dtype="int32", name="A")
    a = np.array([-8, -3, 0, 5, 12], "int32")
    bodies = {
        "and": (lambda i: A[i] & 6, a & 6), "or": (lambda i: A[i] | 1, a | 1),
        "xor": (lambda i: A[i] ^ 5, a ^ 5), "shl": (lambda i: A[i] << 2, a << 2),
        "shr": (lambda i: A[i] >> 1, a >> 1),   # arithmetic shift for signed integers
        "sel": (lambda i: te.select(te.all(A[i] > -5, A[i] < 6), A[i], -1), np.where((a > -5) & (a < 6), a, -1)),
        "any": (lambda i: te.select(te.any(A[i] < -5, A[i] > 6), 1, 0), ((a < -5) | (a > 6)).astype("int32")),
        "abs": (lambda i: te.abs(A[i]), np.abs(a)), "neg": (lambda i: -A[i], -a),
        "min": (lambda i: te.min(A[i], 1), np.minimum(a, 1)),
    }
    for name, (body, want) in bodies.items():
        np.testing.assert_array_equal(evaluate(te.compute((5,), body, name=name), {A: a}), want, err_msg=name)


@pytest.mark.parametrize("name, ref", [
    ("exp", np.exp), ("exp2", np.exp2), ("log", np.log), ("log2", np.log2), ("log10", np.log10),
    ("sqrt", np.sqrt), ("rsqrt", lambda x: 1 / np.sqrt(x)), ("tanh", np.tanh),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x))), ("erf", np.vectorize(math.erf)),
    ("floor", np.floor), ("ceil", np.ceil), ("round", np.round), ("trunc", np.trunc),
    ("sin", np.sin), ("cos", np.cos), ("abs", np.abs),
])
def test_intrinsics(name, ref, rand):
    A = te.placeholder((50,), dtype="float64", name="A")
    a = rand(50, "float64", 0.1, 4.0)
    a[:4] = [0.5, 1.5, 2.5, 3.5]     # round: half to even
    B = te.compute((50,), lambda i: getattr(te, name)(A[i]), name="B")
    np.testing.assert_allclose(evaluate(B, {A: a}), ref(a), rtol=1e-12)


def test_power_fma_and_extreme_values(rand):
    A = te.placeholder((10,), name="A")
    a = rand(10, "float32", 0.5, 2.0)
    P = te.compute((10,), lambda i: te.power(A[i], 3.0), name="P")
    F = te.compute((10,), lambda i: te.fma(A[i], A[i], A[i]), name="F")
    M = te.compute((2,), lambda i: te.select(i == 0, te.max_value("float32"), te.min_value("float32")), name="M")
    p, f, m = evaluate([P, F, M], {A: a})
    np.testing.assert_allclose(p, a ** 3, rtol=1e-6)
    np.testing.assert_allclose(f, a * a + a, rtol=1e-6)
    np.testing.assert_array_equal(m, [np.finfo("float32").max, np.finfo("float32").min])


def test_if_then_else_never_reads_out_of_bounds(rand):
    A = te.placeholder((5,), name="A")
    P = te.compute((9,), lambda i: te.if_then_else(te.all(i >= 2, i < 7), A[i - 2], 0.0), name="P")
    a = rand(5)
    np.testing.assert_array_equal(evaluate(P, {A: a}), np.pad(a, 2))
    # an unguarded read is reported, naming the tensor
    Q = te.compute((9,), lambda i: A[i - 2], name="Q")
    with pytest.raises(InterpError, match=r"out-of-bounds read A\[-2\]"):
        evaluate(Q, {A: a})
    # select (eager) may evaluate both sides, so the interpreter reports the read
    R = te.compute((9,), lambda i: te.select(te.all(i >= 2, i < 7), A[i - 2], 0.0), name="R")
    with pytest.raises(InterpError, match="out-of-bounds"):
        evaluate(R, {A: a})


def test_out_of_bounds_read_names_the_stage_the_index_and_the_point(rand):
    n = te.var("n")
    A = te.placeholder((n, 4), name="A")
    C = te.compute((n, 4), lambda i, j: A[i, j + 1], name="C")
    with pytest.raises(InterpError, match=r"compute 'C': out-of-bounds read A\[0, 4\] \(index 1 is `j \+ 1`, "
                                          r"dimension 1 of 'A' has extent 4\) where i=0, j=3"):
        evaluate(C, {A: rand((3, 4))})
    k = te.reduce_axis((0, 5), name="k")
    S = te.compute((2,), lambda r: te.sum(A[r, k], axis=k), name="S")
    with pytest.raises(InterpError, match=r"compute 'S': out-of-bounds read A\[0, 4\] .* where r=0, k=4"):
        evaluate(S, {A: rand((3, 4))})


def test_gather(rand):
    A = te.placeholder((10, 3), name="A")
    idx = te.placeholder((6,), dtype="int32", name="idx")
    G = te.compute((6, 3), lambda i, j: A[idx[i], j], name="G")
    a = rand((10, 3))
    ix = np.array([9, 0, 3, 3, 7, 1], "int32")
    np.testing.assert_array_equal(evaluate(G, {A: a, idx: ix}), a[ix])


def test_sum_max_min_with_where(rand):
    A = te.placeholder((6, 20), name="A")
    k = te.reduce_axis((0, 20), name="k")
    S = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="S")
    M = te.compute((6,), lambda i: te.max(A[i, k], axis=k), name="M")
    N = te.compute((6,), lambda i: te.min(A[i, k], axis=k, where=k % 3 == 1), name="N")
    E = te.compute((6,), lambda i: te.sum(A[i, k], axis=k, where=k > 100), name="E")   # empty: identity
    a = rand((6, 20))
    s, m, mn, e = evaluate([S, M, N, E], {A: a})
    np.testing.assert_allclose(s, a.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(m, a.max(1))
    np.testing.assert_array_equal(mn, a[:, 1::3].min(1))
    np.testing.assert_array_equal(e, np.zeros(6, "float32"))


def test_where_guards_the_reduction_source(rand):
    """Points where ``where`` fails are not evaluated (the compiled code skips them)."""
    A = te.placeholder((5,), name="A")
    k = te.reduce_axis((0, 8), name="k")
    S = te.compute((1,), lambda _: te.sum(A[k], axis=k, where=k < 5), name="S")
    a = rand(5)
    np.testing.assert_allclose(evaluate(S, {A: a}), [a.sum()], rtol=1e-6, atol=1e-6)


def test_multi_axis_reduction_and_offset_domain(rand):
    A = te.placeholder((4, 5, 6), name="A")
    r = te.reduce_axis((1, 5), name="r")
    c = te.reduce_axis((0, 6), name="c")
    S = te.compute((4,), lambda i: te.sum(A[i, r, c] * 2.0, axis=[r, c]), name="S")
    a = rand((4, 5, 6))
    np.testing.assert_allclose(evaluate(S, {A: a}), 2 * a[:, 1:, :].sum((1, 2)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("budget", [1, 7, 1 << 22])
def test_argmax_first_index_on_ties(budget):
    """Whatever the chunking, the tuple reducer gives the result of a sequential fold: the first
    index of the maximum."""
    A = te.placeholder((5, 9), name="A")
    k = te.reduce_axis((0, 9), name="k")
    I, V = te.compute((5,), lambda i: argmax((k, A[i, k]), axis=k), name="AM")
    a = np.array([[1, 3, 3, 0, 3, 1, 2, 3, 0],
                  [5, 5, 5, 5, 5, 5, 5, 5, 5],
                  [0, 0, 0, 0, 0, 0, 0, 0, 9],
                  [9, 1, 2, 3, 4, 5, 6, 7, 9],
                  [-1, -2, -1, -3, -1, -5, -6, -7, -8]], "float32")
    i, v = evaluate([I, V], {A: a}, budget=budget)
    np.testing.assert_array_equal(i, a.argmax(1))
    np.testing.assert_array_equal(v, a.max(1))
    assert i.dtype == np.int32


def test_chunked_reduction_matches_one_chunk(rand):
    A = te.placeholder((3, 1000), name="A")
    k = te.reduce_axis((0, 1000), name="k")
    S = te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="S")
    a = rand((3, 1000))
    np.testing.assert_allclose(evaluate(S, {A: a}, budget=64), a.sum(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(evaluate(S, {A: a}), a.sum(1), rtol=1e-4, atol=1e-4)


def test_chained_stages_and_int8_accumulation(rand):
    A = te.placeholder((8, 16), dtype="int8", name="A")
    B = te.placeholder((16, 4), dtype="int8", name="B")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((8, 4), lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k), name="C")
    D = te.compute((8, 4), lambda i, j: (C[i, j] * 3).astype("int8"), name="D")
    a, b = rand((8, 16), "int8", -128, 127), rand((16, 4), "int8", -128, 127)
    c, d = evaluate([C, D], {A: a, B: b})
    want = a.astype("int32") @ b.astype("int32")
    np.testing.assert_array_equal(c, want)
    np.testing.assert_array_equal(d, (want * 3).astype("int8"))


def test_feed_errors(rand):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    m = te.var("m")
    B = te.compute((m,), lambda i: A[i], name="B")
    with pytest.raises(InterpError, match="no value for placeholder 'A'"):
        evaluate(B, {})
    with pytest.raises(InterpError, match="'m', which is not in the feed"):
        evaluate(B, {A: rand(4)})
    with pytest.raises(InterpError, match="expects float32"):
        evaluate(B, {A: rand(4, "float64"), m: 4})


def test_float_scalar_variable(rand):
    alpha = te.var("alpha", dtype="float32")
    A = te.placeholder((5,), name="A")
    B = te.compute((5,), lambda i: A[i] * alpha, name="B")
    a = rand(5)
    out = evaluate(B, {A: a, alpha: 2.5})
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, a * np.float32(2.5), rtol=1e-7)


def test_docstring_example():
    import doctest
    import tilecraft.interp
    assert doctest.testmod(tilecraft.interp).failed == 0


def test_reduce_axis_equality_builds_a_condition(rand):
    A = te.placeholder((3, 9), name="A")
    k = te.reduce_axis((0, 9), name="k")
    S = te.compute((3,), lambda i: te.sum(A[i, k], axis=k, where=k != 4), name="S")
    a = rand((3, 9))
    np.testing.assert_allclose(evaluate(S, {A: a}), a.sum(1) - a[:, 4], rtol=1e-5, atol=1e-5)
