"""The LLVM backend on hand-built lowered IR, checked against numpy on fresh random inputs."""
import numpy as np
import pytest

from tilecraft.codegen.llvm import CodegenError, build_llvm, codegen_llvm
from tilecraft.ir import (Allocate, AttrStmt, BinOp, Binary, Broadcast, Call, Cast, Const, Evaluate,
                          ForKind, IfThenElse, Let, LetStmt, Ramp, Select, Var, cast, const, seq,
                          select)
from tilecraft.ir.expr import Unary, UnOp
from tilecraft import runtime
from tilecraft.testing import assert_sum_close

from llvm_ir_helpers import buf, func, ld, loop, poisoned, rand, splat, st

pytestmark = pytest.mark.usefixtures("seeded_ir_helpers")   # rand() replays with the seed


def vadd_func(n=None, kind=ForKind.SERIAL):
    n = n if n is not None else Var("n")
    A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
    i = Var("i")
    body = loop(i, n, st(C, i, ld(A, i) + ld(B, i)), kind)
    params = (A, B, C) + ((n,) if isinstance(n, Var) else ())
    return func("vadd", params, body)


def test_scalar_loop_static_shape():
    mod = build_llvm(vadd_func(1000))
    a, b, c = rand(1000), rand(1000), poisoned(1000)
    mod(a, b, c)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


@pytest.mark.parametrize("n", [1000, 64, 63, 1, 0])
def test_symbolic_n_with_tail_guard(n):
    """for io in 0..ceil(n/64): for ii in 0..64: if io*64+ii < n: C[..] = A[..] * B[..] + 1"""
    nv = Var("n")
    A, B, C = buf("A", (nv,)), buf("B", (nv,)), buf("C", (nv,))
    io, ii = Var("io"), Var("ii")
    idx = io * 64 + ii
    body = loop(io, (nv + 63) // 64, loop(ii, 64, IfThenElse(idx < nv, st(C, idx, ld(A, idx) * ld(B, idx) + 1.0))))
    mod = build_llvm(func("tail", (A, B, C, nv), body))
    a, b, c = rand(n), rand(n), poisoned(n)
    mod(a, b, c)
    np.testing.assert_allclose(c, a * b + 1, rtol=1e-5, atol=1e-6)


def test_vector_ramp_broadcast_load_store():
    n = 1024
    A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
    s = Var("s", "float32")
    i = Var("i")
    body = loop(i, n // 8, st(C, i * 8, ld(A, i * 8, 8) * splat(s, 8) + ld(B, i * 8, 8) + 0.5, 8))
    mod = build_llvm(func("axpy", (A, B, C, s), body))
    a, b, c = rand(n), rand(n), poisoned(n)
    mod(a, b, c, 1.5)
    np.testing.assert_allclose(c, a * 1.5 + b + 0.5, rtol=1e-5, atol=1e-6)
    assert "<8 x float>" in mod.get_source("ll-raw")


def test_strided_gather_and_scatter():
    """Transpose of an 8x16 matrix with vector gathers (stride 16) and scatters (stride 8)."""
    A, B = buf("A", (8 * 16,)), buf("B", (16 * 8,))
    j = Var("j")
    # B[j, 0:8] = A[0:8, j]   (gather: stride 16)
    g = loop(j, 16, st(B, Ramp(j * 8, const(1), 8), ld(A, Ramp(j, const(16), 8))))
    mod = build_llvm(func("t_gather", (A, B), g))
    a, b = rand(128), poisoned(128)
    mod(a, b)
    np.testing.assert_array_equal(b.reshape(16, 8), a.reshape(8, 16).T)
    # B[0:8, j] (scatter, stride 16) = A[j, 0:8]: same result computed the other way round
    A2, B2 = buf("A", (16 * 8,)), buf("B", (8 * 16,))
    sc = loop(j, 16, st(B2, Ramp(j, const(16), 8), ld(A2, Ramp(j * 8, const(1), 8))))
    mod2 = build_llvm(func("t_scatter", (A2, B2), sc))
    a2, b2 = rand(128), poisoned(128)
    mod2(a2, b2)
    np.testing.assert_array_equal(b2.reshape(8, 16), a2.reshape(16, 8).T)


def test_gather_by_index_vector(rng):
    """C[i:i+8] = A[idx[i:i+8]]: an indirect vector load."""
    n, m = 64, 100
    A, I, C = buf("A", (m,)), buf("I", (n,), "int32"), buf("C", (n,))
    i = Var("i")
    mod = build_llvm(func("gather", (A, I, C), loop(i, n // 8, st(C, i * 8, ld(A, ld(I, i * 8, 8)), 8))))
    a, idx, c = rand(m), rng.integers(0, m, n).astype("int32"), poisoned(n)
    mod(a, idx, c)
    np.testing.assert_array_equal(c, a[idx])


@pytest.mark.parametrize("extent", [0, 1, 2, 3, 7, 1000])
@pytest.mark.parametrize("threads", [1, 2, 5])
def test_parallel_loop(extent, threads):
    """Fewer and more iterations than threads; the body uses a captured scalar and a let value."""
    old = runtime.get_num_threads()
    runtime.set_num_threads(threads)
    try:
        n = Var("n")
        A, C = buf("A", (n, 16)), buf("C", (n, 16))
        i, j, k = Var("i"), Var("j"), Var("k")
        body = loop(i, n, LetStmt(k, i * 16, loop(j, 16, st(C, k + j, ld(A, k + j) * 2.0 + cast("float32", i)))),
                    ForKind.PARALLEL)
        mod = build_llvm(func("par", (A, C, n), body))
        a, c = rand((extent, 16)), poisoned((extent, 16))
        mod(a, c)
        np.testing.assert_allclose(c, a * 2 + np.arange(extent, dtype="float32")[:, None], rtol=1e-5, atol=1e-6)
    finally:
        runtime.set_num_threads(old)


def test_nested_parallel_runs_inner_serially():
    n, m = 37, 29
    A, C = buf("A", (n * m,)), buf("C", (n * m,))
    i, j = Var("i"), Var("j")
    body = loop(i, n, loop(j, m, st(C, i * m + j, ld(A, i * m + j) + 1.0), ForKind.PARALLEL), ForKind.PARALLEL)
    mod = build_llvm(func("nested", (A, C), body))
    assert mod.get_source("ll-raw").count("call void @GOMP_parallel") == 1
    a, c = rand(n * m), poisoned(n * m)
    mod(a, c)
    np.testing.assert_allclose(c, a + 1, rtol=1e-6)


def test_two_parallel_loops_and_matmul_nest():
    """C = A @ B with a parallel outer loop, then D = C + 1 in a second parallel region."""
    M, K, N = 33, 17, 20
    A, B, C, D = buf("A", (M, K)), buf("B", (K, N)), buf("C", (M, N)), buf("D", (M, N))  # n-d params, flat accesses
    i, j, k, i2 = Var("i"), Var("j"), Var("k"), Var("i2")
    mm = loop(i, M, loop(j, N, seq(st(C, i * N + j, const(0.0)),
                                   loop(k, K, st(C, i * N + j, ld(C, i * N + j) + ld(A, i * K + k) * ld(B, k * N + j))))),
              ForKind.PARALLEL)
    inc = loop(i2, M * N, st(D, i2, ld(C, i2) + 1.0), ForKind.PARALLEL)
    mod = build_llvm(func("mm", (A, B, C, D), seq(mm, inc)))
    a, b, c, d = rand((M, K)), rand((K, N)), poisoned((M, N)), poisoned((M, N))
    mod(a, b, c, d)
    # K products summed in float32 (maybe fused), against float64: the error scales with sum |a b|
    exact, abs_sum = a.astype("float64") @ b, np.abs(a).astype("float64") @ np.abs(b)
    assert_sum_close(c, exact, abs_sum, K)
    assert_sum_close(d, exact + 1, abs_sum + 1, K + 1)


@pytest.mark.parametrize("size", [16, 40000])      # 64 B on the stack, 160 KB on the heap
def test_local_allocation(size):
    """tmp = A * 3 (local buffer), then C = tmp reversed."""
    A, C = buf("A", (size,)), buf("C", (size,))
    T = buf("tmp", (size,), scope="local")
    i, j = Var("i"), Var("j")
    body = Allocate(T, seq(loop(i, size, st(T, i, ld(A, i) * 3.0)),
                           loop(j, size, st(C, j, ld(T, size - 1 - j)))))
    mod = build_llvm(func("local", (A, C), body))
    raw = mod.get_source("ll-raw")
    assert ("alloca [16 x float], align 64" in raw) == (size == 16)
    assert ("aligned_alloc" in raw) == (size != 16)
    a, c = rand(size), poisoned(size)
    mod(a, c)
    np.testing.assert_allclose(c, (a * 3)[::-1], rtol=1e-6)


def test_symbolic_allocation_inside_parallel_loop():
    n = Var("n")
    A, C = buf("A", (n, n)), buf("C", (n, n))
    i, j, j2 = Var("i"), Var("j"), Var("j2")
    row = buf("row", (n,), scope="local")
    body = loop(i, n, Allocate(row, seq(loop(j, n, st(row, j, ld(A, i * n + j) + 1.0)),
                                        loop(j2, n, st(C, i * n + j2, ld(row, n - 1 - j2))))), ForKind.PARALLEL)
    mod = build_llvm(func("rows", (A, C, n), body))
    a, c = rand((50, 50)), poisoned((50, 50))
    mod(a, c)
    np.testing.assert_allclose(c, (a + 1)[:, ::-1], rtol=1e-6)


def test_lazy_select_guards_out_of_range_load():
    """B[i] = i + 1 < n ? A[i + 1] : -1; the untaken side would read a billion elements away."""
    n = Var("n")
    A, B = buf("A", (n,)), buf("B", (n,))
    i = Var("i")
    far = ld(A, i + 1000000000)
    value = select(i + 1 < n, ld(A, i + 1), select(i < 0, far, const(-1.0), lazy=True), lazy=True)
    mod = build_llvm(func("shift", (A, B, n), loop(i, n, st(B, i, value))))
    a, b = rand(1000), poisoned(1000)
    mod(a, b)
    np.testing.assert_array_equal(b, np.append(a[1:], -1.0).astype("float32"))


def test_lazy_select_guards_integer_division_by_zero():
    A, B, C = buf("A", (100,), "int32"), buf("B", (100,), "int32"), buf("C", (100,), "int32")
    i = Var("i")
    q = select(ld(B, i) != 0, ld(A, i) // ld(B, i), const(7), lazy=True)
    mod = build_llvm(func("safe_div", (A, B, C), loop(i, 100, st(C, i, q))))
    a, b, c = rand(100, "int32"), rand(100, "int32"), poisoned(100, "int32")
    b[::3] = 0
    mod(a, b, c)
    expect = np.where(b != 0, a // np.where(b == 0, 1, b), 7)
    np.testing.assert_array_equal(c, expect)


def test_vector_lazy_select_masks_loads():
    """A vector if_then_else padding: lanes past n read nothing (masked loads)."""
    n = Var("n")
    A, C = buf("A", (n,)), buf("C", ((n + 7) // 8 * 8,))
    i = Var("i")
    idx = Ramp(i * 8, const(1), 8)
    value = Select(idx < Broadcast(n, 8), ld(A, idx), splat(const(0.0), 8), True)
    mod = build_llvm(func("pad", (A, C, n), loop(i, (n + 7) // 8, st(C, idx, value))))
    assert "masked.load" in mod.get_source("ll-raw")
    a = rand(13)
    c = poisoned(16)
    mod(a, c)
    np.testing.assert_array_equal(c, np.concatenate([a, np.zeros(3, "float32")]))


INT_OPS = [
    (BinOp.FLOORDIV, np.floor_divide),
    (BinOp.FLOORMOD, np.mod),
    (BinOp.TRUNCDIV, lambda a, b: (np.trunc(a.astype(float) / b)).astype(a.dtype)),
    (BinOp.TRUNCMOD, np.fmod),
]


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
@pytest.mark.parametrize("op,ref", INT_OPS, ids=[o.name for o, _ in INT_OPS])
@pytest.mark.parametrize("lanes", [1, 8])
def test_integer_division_of_negatives(dtype, op, ref, lanes):
    n = 256
    A, B, C = buf("A", (n,), dtype), buf("B", (n,), dtype), buf("C", (n,), dtype)
    i = Var("i")
    body = loop(i, n // lanes, st(C, i * lanes, Binary(op, ld(A, i * lanes, lanes), ld(B, i * lanes, lanes),
                                                       ld(A, i * lanes, lanes).dtype), lanes))
    mod = build_llvm(func("idiv", (A, B, C), body))
    a, b, c = rand(n, dtype, -4, 4), rand(n, dtype, -1, 1), poisoned(n, dtype)
    assert (a < 0).any() and (b < 0).any() and (b > 0).any()
    mod(a, b, c)
    np.testing.assert_array_equal(c, ref(a, b))


def test_division_by_constants_is_exact():
    A, C = buf("A", (200,), "int32"), buf("C", (200 * 4,), "int32")
    i = Var("i")
    x = ld(A, i)
    body = loop(i, 200, seq(st(C, i * 4, x // 8), st(C, i * 4 + 1, x % 8), st(C, i * 4 + 2, x // -3),
                            st(C, i * 4 + 3, x % -3)))
    mod = build_llvm(func("cdiv", (A, C), body))
    a, c = np.arange(-100, 100, dtype="int32"), poisoned(800, "int32")
    mod(a, c)
    np.testing.assert_array_equal(c.reshape(200, 4), np.stack([a // 8, a % 8, a // -3, a % -3], axis=1))


CASTS = [
    ("float32", "float16"), ("float16", "float32"), ("float64", "float16"), ("float16", "float64"),
    ("int8", "int32"), ("int32", "int8"), ("uint8", "float32"), ("uint8", "int32"), ("int32", "uint8"),
    ("float32", "int32"), ("float64", "int64"), ("int64", "float32"), ("int64", "float16"),
    ("float16", "int8"), ("int32", "float64"), ("float32", "float64"), ("float64", "float32"),
    ("bool", "int32"), ("bool", "float32"), ("int32", "bool"), ("float32", "bool"),
    ("int16", "int64"), ("uint8", "int8"), ("int8", "uint8"),
]


@pytest.mark.parametrize("src,dst", CASTS, ids=[f"{s}->{d}" for s, d in CASTS])
@pytest.mark.parametrize("lanes", [1, 8])
def test_casts(src, dst, lanes):
    n = 64
    A, C = buf("A", (n,), src), buf("C", (n,), dst)
    i = Var("i")
    body = loop(i, n // lanes, st(C, i * lanes, Cast(dst if lanes == 1 else f"{dst}x{lanes}", ld(A, i * lanes, lanes)), lanes))
    mod = build_llvm(func("cast", (A, C), body))
    lo, hi = (-100, 100) if np.dtype(src).kind != "u" else (0, 200)
    a = rand(n, src, lo / 25, hi / 25) if np.dtype(src).kind in "iu" else rand(n, src, lo, hi)
    if np.dtype(dst).kind == "u" and np.dtype(src).kind != "u":
        a = np.abs(a)
    if np.dtype(dst).kind in "iu" and np.dtype(src).kind in "iu" and np.dtype(dst).itemsize < np.dtype(src).itemsize:
        a = (a * 37).astype(src)      # make wrapping visible
    if src == "int32" and dst == "bool":
        a[::4] = 0
    c = poisoned(n, dst)
    mod(a, c)
    np.testing.assert_array_equal(c, a.astype(dst))


@pytest.mark.parametrize("lanes", [1, 8])
def test_float64_to_float16_is_rounded_once(lanes, rng):
    # values next to float16 halfway points: rounding through float32 to nearest twice gets these
    # wrong; the conversion must match numpy's single rounding for every one
    n = 4096
    A, C = buf("A", (n,), "float64"), buf("C", (n,), "float16")
    i = Var("i")
    dst = "float16" if lanes == 1 else f"float16x{lanes}"
    body = loop(i, n // lanes, st(C, i * lanes, Cast(dst, ld(A, i * lanes, lanes)), lanes))
    mod = build_llvm(func("cast64to16", (A, C), body))
    h = (rng.standard_normal(n) * 100).astype(np.float16)
    mid = (h.astype(np.float64) + np.nextafter(h, np.float16(np.inf)).astype(np.float64)) / 2
    a = mid + rng.choice([-1.0, 0.0, 1.0], n) * np.abs(mid) * 2.0 ** -40
    a[:9] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 65519.99, 65520.0, 1e-300, -6e-8]
    c = poisoned(n, "float16")
    mod(a, c)
    with np.errstate(over="ignore"):
        ref = a.astype(np.float16)
    np.testing.assert_array_equal(c, ref)
    assert np.signbit(c[4]) and not np.signbit(c[3])


def test_float16_arithmetic_matches_numpy():
    n = 256
    A, B, C = buf("A", (n,), "float16"), buf("B", (n,), "float16"), buf("C", (n,), "float16")
    i = Var("i")
    mod = build_llvm(func("h", (A, B, C), loop(i, n, st(C, i, (ld(A, i) * ld(B, i) - ld(A, i)) / ld(B, i)))))
    a, b, c = rand(n, "float16", 0.5, 4), rand(n, "float16", 0.5, 4), poisoned(n, "float16")
    mod(a, b, c)
    expect = ((a * b - a) / b)
    np.testing.assert_allclose(c.astype("float32"), expect.astype("float32"), rtol=2e-3, atol=2e-3)


def test_int8_to_int32_dot():
    """C[i] = sum_k int32(A[i,k]) * int32(B[k]): the int8 → int32 accumulation pattern."""
    n, K = 16, 64
    A, B, C = buf("A", (n, K), "int8"), buf("B", (K,), "int8"), buf("C", (n,), "int32")
    i, k = Var("i"), Var("k")
    body = loop(i, n, seq(st(C, i, const(0)),
                          loop(k, K, st(C, i, ld(C, i) + cast("int32", ld(A, i * K + k)) * cast("int32", ld(B, k))))))
    mod = build_llvm(func("dot8", (A, B, C), body))
    a, b, c = rand((n, K), "int8", -5, 5), rand(K, "int8", -5, 5), poisoned(n, "int32")
    mod(a, b, c)
    np.testing.assert_array_equal(c, a.astype("int32") @ b.astype("int32"))


MATH = {
    "exp": (np.exp, -3, 3), "log": (np.log, 0.1, 10), "sqrt": (np.sqrt, 0.1, 10),
    "rsqrt": (lambda x: 1 / np.sqrt(x), 0.1, 10), "tanh": (np.tanh, -4, 4),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), -6, 6), "fabs": (np.abs, -4, 4), "floor": (np.floor, -4, 4),
    "ceil": (np.ceil, -4, 4), "round": (np.round, -4, 4), "trunc": (np.trunc, -4, 4),
    "exp2": (np.exp2, -3, 3), "log2": (np.log2, 0.1, 10), "log10": (np.log10, 0.1, 10),
    "sin": (np.sin, -4, 4), "cos": (np.cos, -4, 4),
}


def _erf(x):
    import math
    return np.vectorize(math.erf)(x.astype("float64"))


MATH["erf"] = (_erf, -3, 3)


@pytest.mark.parametrize("name", sorted(MATH))
@pytest.mark.parametrize("dtype,lanes", [("float32", 1), ("float32", 8), ("float64", 1), ("float64", 4),
                                         ("float16", 1), ("float16", 8)])
def test_math_intrinsics(name, dtype, lanes):
    ref, lo, hi = MATH[name]
    n = 64
    A, C = buf("A", (n,), dtype), buf("C", (n,), dtype)
    i = Var("i")
    x = ld(A, i * lanes, lanes)
    mod = build_llvm(func(f"m_{name}", (A, C), loop(i, n // lanes, st(C, i * lanes, Call(name, (x,), x.dtype), lanes))))
    a, c = rand(n, dtype, lo, hi), poisoned(n, dtype)
    if name == "round":
        a[:8] = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -3.5], dtype)
    mod(a, c)
    expect = ref(a.astype("float64")).astype(dtype)
    tol = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-12}[dtype]
    np.testing.assert_allclose(c.astype("float64"), expect.astype("float64"), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,lanes", [("float32", 1), ("float32", 8), ("float64", 1)])
def test_pow_and_fma(dtype, lanes):
    n = 64
    A, B, C, D = (buf(x, (n,), dtype) for x in "ABCD")
    i = Var("i")
    a_, b_, c_ = (ld(X, i * lanes, lanes) for X in (A, B, C))
    body = loop(i, n // lanes, seq(st(D, i * lanes, Call("pow", (a_, b_), a_.dtype), lanes),
                                   st(C, i * lanes, Call("fma", (a_, b_, c_), a_.dtype), lanes)))
    mod = build_llvm(func("pf", (A, B, C, D), body))
    a, b, c, d = rand(n, dtype, 0.5, 3), rand(n, dtype, -2, 2), rand(n, dtype), poisoned(n, dtype)
    c0 = c.copy()
    mod(a, b, c, d)
    tol = 2e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(d, np.power(a, b), rtol=tol)
    np.testing.assert_allclose(c, a * b + c0, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8", "int64"])
@pytest.mark.parametrize("lanes", [1, 8])
def test_min_max_compare_select(dtype, lanes):
    n = 64
    A, B = buf("A", (n,), dtype), buf("B", (n,), dtype)
    C, D, E = buf("C", (n,), dtype), buf("D", (n,), dtype), buf("E", (n,), "bool")
    i = Var("i")
    a_, b_ = ld(A, i * lanes, lanes), ld(B, i * lanes, lanes)
    body = loop(i, n // lanes, seq(st(C, i * lanes, Binary(BinOp.MIN, a_, b_, a_.dtype), lanes),
                                   st(D, i * lanes, select(a_ <= b_, Binary(BinOp.MAX, a_, b_, a_.dtype), a_ - b_), lanes),
                                   st(E, i * lanes, (a_ > b_) & (a_ != b_), lanes)))
    mod = build_llvm(func("mm", (A, B, C, D, E), body))
    lo, hi = (0, 5) if dtype == "uint8" else (-4, 4)
    a, b = rand(n, dtype, lo, hi), rand(n, dtype, lo, hi)
    b[:4] = a[:4]
    c, d, e = poisoned(n, dtype), poisoned(n, dtype), poisoned(n, "bool")
    e[:] = True
    mod(a, b, c, d, e)
    np.testing.assert_array_equal(c, np.minimum(a, b))
    np.testing.assert_array_equal(d, np.where(a <= b, np.maximum(a, b), a - b))
    np.testing.assert_array_equal(e, a > b)


def test_bitwise_shift_and_unary():
    n = 64
    A, B, C = buf("A", (n,), "int32"), buf("B", (n,), "int32"), buf("C", (n * 6,), "int32")
    i = Var("i")
    a_, b_ = ld(A, i), ld(B, i)
    sh = b_ & 7
    outs = [a_ & b_, a_ | b_, a_ ^ b_, a_ << sh, a_ >> sh, -a_]
    body = loop(i, n, seq(*[st(C, i * 6 + k, v) for k, v in enumerate(outs)]))
    mod = build_llvm(func("bits", (A, B, C), body))
    a, b, c = rand(n, "int32"), rand(n, "int32"), poisoned(n * 6, "int32")
    mod(a, b, c)
    s = b & 7
    np.testing.assert_array_equal(c.reshape(n, 6), np.stack([a & b, a | b, a ^ b, a << s, a >> s, -a], axis=1))


def test_bool_buffers_and_logic():
    n = 64
    P, Q, R = buf("P", (n,), "bool"), buf("Q", (n,), "bool"), buf("R", (n * 3,), "bool")
    i = Var("i")
    p_, q_ = ld(P, i), ld(Q, i)
    body = loop(i, n, seq(st(R, i * 3, p_ & q_), st(R, i * 3 + 1, p_ | q_),
                          st(R, i * 3 + 2, Unary(UnOp.NOT, p_, "bool"))))
    mod = build_llvm(func("logic", (P, Q, R), body))
    p, q = rand(n, "bool"), rand(n, "bool")
    for fill in (False, True):      # an element left unwritten shows under one of the two
        r = np.full(n * 3, fill)
        mod(p, q, r)
        np.testing.assert_array_equal(r.reshape(n, 3), np.stack([p & q, p | q, ~p], axis=1))


def test_let_letstmt_attr_evaluate_if_else():
    n = 100
    A, C = buf("A", (n,)), buf("C", (n,))
    i, x, y = Var("i"), Var("x", "float32"), Var("y", "float32")
    then = st(C, i, Let(y, ld(A, i) * 2.0, y + y))
    other = st(C, i, -ld(A, i))
    body = AttrStmt("pragma_whatever", None, 1,
                    seq(Evaluate(const(0)),
                        loop(i, n, LetStmt(x, ld(A, i), IfThenElse(x > 0.0, then, other)))))
    mod = build_llvm(func("misc", (A, C), body))
    a, c = rand(n), poisoned(n)
    mod(a, c)
    np.testing.assert_allclose(c, np.where(a > 0, a * 4, -a), rtol=1e-6)


def test_unrolled_and_vectorized_loop_kinds():
    n = 64
    A, C = buf("A", (n,)), buf("C", (n,))
    i, j = Var("i"), Var("j")
    body = loop(i, n // 4, loop(j, 4, st(C, i * 4 + j, ld(A, i * 4 + j) + 1.0), ForKind.UNROLLED), ForKind.VECTORIZED)
    mod = build_llvm(func("kinds", (A, C), body))
    raw = mod.get_source("ll-raw")
    assert "llvm.loop.unroll.full" in raw and "llvm.loop.vectorize.enable" in raw
    a, c = rand(n), poisoned(n)
    mod(a, c)
    np.testing.assert_allclose(c, a + 1, rtol=1e-6)


def test_loop_with_nonzero_min_and_int64_index():
    n = 50
    A, C = buf("A", (n,)), buf("C", (n,))
    i = Var("i", "int64")
    mod = build_llvm(func("mn", (A, C), loop(i, 40, st(C, i, ld(A, i) * 3.0), lo=10)))
    a, c = rand(n), poisoned(n)
    mod(a, c)
    assert np.isnan(c[:10]).all()
    np.testing.assert_allclose(c[10:], a[10:] * 3, rtol=1e-6)


def test_int64_parallel_loop_var():
    n = 1000
    A, C = buf("A", (n,)), buf("C", (n,))
    i = Var("i", "int64")
    mod = build_llvm(func("p64", (A, C), loop(i, n, st(C, i, ld(A, i) + 2.0), ForKind.PARALLEL)))
    a, c = rand(n), poisoned(n)
    mod(a, c)
    np.testing.assert_allclose(c, a + 2, rtol=1e-6)


def test_fma_contraction_in_assembly():
    from tilecraft.codegen.llvm_target import parse_target
    if "+fma" not in parse_target("llvm").features:
        pytest.skip("the host has no FMA")
    n = 64
    A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
    i = Var("i")
    mod = build_llvm(func("muladd", (A, B, C), loop(i, n, st(C, i, ld(A, i) * ld(B, i) + ld(C, i)))))
    assert "vfmadd" in mod.get_source("asm")


def test_module_with_several_functions():
    f1 = vadd_func(16)
    A, C = buf("A", (16,)), buf("C", (16,))
    i = Var("i")
    f2 = func("neg", (A, C), loop(i, 16, st(C, i, -ld(A, i))))
    mod = build_llvm([f1, f2])
    assert mod.entry_name == "vadd" and sorted(mod.function_names) == ["neg", "vadd"]
    a, c = rand(16), poisoned(16)
    mod["neg"](a, c)
    np.testing.assert_array_equal(c, -a)
    mod2 = build_llvm([f1, f2], entry_name="neg")
    c2 = poisoned(16)
    mod2(a, c2)
    np.testing.assert_array_equal(c2, -a)
    with pytest.raises(KeyError, match="no function 'nope'; it has: vadd, neg"):
        mod["nope"]


def test_target_string_options():
    src = codegen_llvm(vadd_func(8), "llvm -mcpu=haswell")
    assert '"target-cpu"="haswell"' in src.text and src.options.features == ""
    src = codegen_llvm(vadd_func(8), "llvm -mcpu=x86-64 -mattr=+sse2 -fast-math")
    assert src.options.features == "+sse2" and "fadd fast" in src.text
    mod = build_llvm(vadd_func(8), "llvm -mcpu=x86-64 -opt-level=1")
    a, b, c = rand(8), rand(8), poisoned(8)
    mod(a, b, c)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)
    with pytest.raises(CodegenError, match="target 'llvm'"):
        codegen_llvm(vadd_func(8), "cuda")


# --- errors --------------------------------------------------------------------------------

def test_error_unknown_intrinsic():
    A = buf("A", (4,))
    i = Var("i")
    with pytest.raises(CodegenError, match="unknown intrinsic 'frobnicate'"):
        codegen_llvm(func("f", (A,), loop(i, 4, st(A, i, Call("frobnicate", (ld(A, i),), "float32")))))


def test_error_unbound_variable():
    A = buf("A", (4,))
    i, k = Var("i"), Var("k")
    with pytest.raises(CodegenError, match="variable 'k' is used but not defined"):
        codegen_llvm(func("f", (A,), loop(i, 4, st(A, i, ld(A, k)))))


def test_error_unflattened_buffer():
    A = buf("A", (4, 4))
    i = Var("i")
    from tilecraft.ir import BufferStore
    with pytest.raises(CodegenError, match="accessed with 2 indices"):
        codegen_llvm(func("f", (A,), loop(i, 4, BufferStore(A, const(1.0), (i, i)))))


def test_error_unknown_buffer_and_bad_names():
    A, Z = buf("A", (4,)), buf("Z", (4,))
    i = Var("i")
    with pytest.raises(CodegenError, match="buffer 'Z' is neither a parameter nor allocated"):
        codegen_llvm(func("f", (A,), loop(i, 4, st(A, i, ld(Z, i)))))
    with pytest.raises(CodegenError, match="not a C identifier"):
        codegen_llvm(func("my-func", (A,), loop(i, 4, st(A, i, const(1.0)))))
    with pytest.raises(CodegenError, match="function name 'expf' would shadow a C library or runtime symbol"):
        codegen_llvm(func("expf", (A,), loop(i, 4, st(A, i, const(1.0)))))
    with pytest.raises(CodegenError, match="two functions are named 'vadd'"):
        codegen_llvm([vadd_func(4), vadd_func(4)])


def test_error_shape_uses_unknown_variable():
    m = Var("m")
    A = buf("A", (m,))
    i = Var("i")
    with pytest.raises(CodegenError, match="uses 'm', which is not a parameter"):
        codegen_llvm(func("f", (A,), loop(i, 4, st(A, i, const(1.0)))))


def test_error_thread_binding_needs_cuda():
    from tilecraft.ir import For
    A = buf("A", (4,))
    i = Var("i")
    body = For(i, const(0), const(4), ForKind.THREAD_BINDING, st(A, i, const(1.0)), "threadIdx.x")
    with pytest.raises(CodegenError, match="threadIdx.x; thread bindings need the CUDA target"):
        build_llvm(func("f", (A,), body))


@pytest.mark.parametrize("dtype,value", [("int8", -5), ("uint8", 200), ("int16", -300), ("bool", True),
                                         ("int64", -(2 ** 40)), ("float64", -2.25), ("float16", 1.5),
                                         ("float32", 0.1)])
def test_scalar_parameters_of_every_width(dtype, value):
    """A scalar parameter that is not a shape: the caller passes it after the arrays."""
    C = buf("C", (4,), dtype)
    v = Var("v", dtype)
    i = Var("i")
    mod = build_llvm(func("fill", (C, v), loop(i, 4, st(C, i, v))))
    c = poisoned(4, dtype)
    mod(c, value)
    np.testing.assert_array_equal(c, np.full(4, value, dtype))


def test_parallel_after_fork_runs_on_one_thread():
    """libgomp hangs in a child forked after the parent ran a parallel region with >1 thread:
    the runtime drops such children to one thread (with a warning) instead of hanging."""
    import os, subprocess, sys, textwrap
    script = textwrap.dedent("""
        import os, sys, warnings
        import numpy as np
        sys.path.insert(0, %r)
        from llvm_ir_helpers import buf, func, ld, loop, st
        from tilecraft.ir import Var, ForKind
        from tilecraft.codegen.llvm import build_llvm
        import tilecraft.runtime as rt
        rt.set_num_threads(2)
        n = Var("n"); A = buf("A", (n,)); i = Var("i")
        mod = build_llvm(func("p", (A, n), loop(i, n, st(A, i, ld(A, i) + 1.0), ForKind.PARALLEL)))
        a = np.zeros(1000, "float32"); mod(a)
        pid = os.fork()
        if pid == 0:
            with warnings.catch_warnings(record=True):
                b = np.zeros(1000, "float32"); mod(b)
                ok = b.sum() == 1000 and rt.get_num_threads() == 1
                try:
                    rt.set_num_threads(2)
                except RuntimeError as e:
                    ok = ok and "spawn" in str(e)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print("child status", status)
    """) % os.path.dirname(__file__)
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=repo))
    assert out.returncode == 0, out.stderr
    assert "child status 0" in out.stdout, out.stdout + out.stderr


def test_vector_access_at_a_scalar_index():
    """BufferLoad(A, (i,), "float32x8") with a scalar index means the 8 elements from i on."""
    from tilecraft.ir import BufferLoad, BufferStore
    A, C = buf("A", (64,)), buf("C", (64,))
    i = Var("i")
    body = loop(i, 8, BufferStore(C, BufferLoad(A, (i * 8,), "float32x8") + 1.0, (i * 8,)))
    mod = build_llvm(func("sv", (A, C), body))
    a, c = rand(64), poisoned(64)
    mod(a, c)
    np.testing.assert_allclose(c, a + 1, rtol=1e-6)


@pytest.mark.parametrize("lanes", [8, 16, 32, 64])
def test_vector_exp_whole_float32_range(lanes):
    """float32 vector exp is computed inline (not 8 libm calls): ~1 ulp, and exact at the ends
    (16 lanes on an AVX-512 host: 2**n by vscalefps, which must round to inf, subnormals and 0
    there by itself; a quarter of the inputs give subnormal results)."""
    n = 4096
    A, C = buf("A", (n,)), buf("C", (n,))
    i = Var("i")
    x = ld(A, i * lanes, lanes)
    mod = build_llvm(func("vexp", (A, C), loop(i, n // lanes, st(C, i * lanes, Call("exp", (x,), x.dtype), lanes))))
    assert "@expf" not in mod.get_source("ll")
    a = rand(n, "float32", -110, 95)
    a[n // 2:n // 2 + n // 4] = rand(n // 4, "float32", -104.5, -87)
    a[:16] = [0, -0.0, 1, -1, 88.7, 88.72283, 88.7229, 88.8, 89.5, -87.3, -88.5, -103.9, -104, np.inf, -np.inf,
              np.nan]
    c = poisoned(n)
    mod(a, c)
    with np.errstate(over="ignore"):
        ref = np.exp(a.astype("float64")).astype("float32")
    np.testing.assert_allclose(c, ref, rtol=3e-7, atol=1e-44)


@pytest.mark.parametrize("target, fused", [("llvm -mcpu=haswell", True), ("llvm -mcpu=x86-64", False)])
def test_vector_exp_fuses_its_multiply_adds_where_the_target_has_fma(target, fused):
    """The range reduction and the 6 Horner steps of the polynomial are FMAs on an FMA target (7
    ``vfmadd`` per vector; 24% more exps per second on Zen 5), a multiply and an add without."""
    A, C = buf("A", (64,)), buf("C", (64,))
    i = Var("i")
    x = ld(A, i * 8, 8)
    asm = build_llvm(func("vexp", (A, C), loop(i, 8, st(C, i * 8, Call("exp", (x,), x.dtype), 8))),
                     target=target).get_source("asm")
    fmas = asm.count("vfmadd") + asm.count("vfmsub") + asm.count("vfnmadd")
    assert (fmas >= 7) == fused and "fmaf" not in asm, fmas


@pytest.mark.parametrize("lanes", [16, 32])
@pytest.mark.parametrize("target, scalef", [("llvm -mcpu=skylake-avx512", True), ("llvm -mcpu=haswell", False)])
def test_vector_exp_scales_by_vscalefps_on_avx512(target, scalef, lanes):
    """On multiples of 16 lanes with AVX-512F, 2**n is one ``vscalefps`` per 16 (and no
    exponent-bit arithmetic: 17 instructions a vector instead of 21); elsewhere the bits are
    built."""
    A, C = buf("A", (256,)), buf("C", (256,))
    i = Var("i")
    x = ld(A, i * lanes, lanes)
    asm = build_llvm(func("vexp", (A, C), loop(i, 256 // lanes, st(C, i * lanes, Call("exp", (x,), x.dtype), lanes))),
                     target=target).get_source("asm")
    assert ("vscalefps" in asm) == scalef and ("vpslld" in asm) != scalef, asm
    if scalef:
        assert asm.count("vscalefps") % (lanes // 16) == 0 and "vperm" not in asm, asm


def test_vector_tanh_whole_float32_range():
    n = 4096
    A, C = buf("A", (n,)), buf("C", (n,))
    i = Var("i")
    x = ld(A, i * 8, 8)
    mod = build_llvm(func("vtanh", (A, C), loop(i, n // 8, st(C, i * 8, Call("tanh", (x,), x.dtype), 8))))
    assert "@tanhf" not in mod.get_source("ll")
    a = np.concatenate([rand(n // 2, "float32", -12, 12), rand(n // 4, "float32", -1, 1),
                        (10.0 ** rand(n // 4, "float64", -30, 0)).astype("float32")])
    a[:8] = [0, 0.625, -0.625, 9, 20, np.inf, -np.inf, np.nan]
    c = poisoned(n)
    mod(a, c)
    np.testing.assert_allclose(c, np.tanh(a.astype("float64")).astype("float32"), rtol=3e-7, atol=0)


def test_vector_log_whole_float32_range(rng):
    """float32 vector log is computed inline: within 1 ulp over every positive float (random bit
    patterns, subnormals included), and numpy's answer at 0, negatives, inf and NaN."""
    n = 8192
    A, C = buf("A", (n,)), buf("C", (n,))
    i = Var("i")
    x = ld(A, i * 8, 8)
    mod = build_llvm(func("vlog", (A, C), loop(i, n // 8, st(C, i * 8, Call("log", (x,), x.dtype), 8))))
    src = mod.get_source("ll")
    assert "@logf" not in src and "@llvm.log." not in src      # LLVM would call logf lane by lane
    bits = rng.integers(1, 0x7F800000, n).astype("uint32")
    a = bits.view("float32").copy()
    a[:12] = [0, -0.0, 1, -1, -1e-40, np.inf, -np.inf, np.nan, 1e-45, 3.4e38, 0.70710677, 0.70710683]
    c = poisoned(n)
    mod(a, c)
    with np.errstate(divide="ignore", invalid="ignore"):
        ref = np.log(a.astype("float64")).astype("float32")
    np.testing.assert_array_equal(c[:8], ref[:8])
    ok = np.isfinite(ref)
    ulps = np.abs(c[ok].astype("float64") - ref[ok]) / np.spacing(np.abs(ref[ok])).astype("float64")
    assert ulps.max() <= 1.0, (ulps.max(), a[ok][ulps.argmax()])


def test_vector_lazy_select_guards_scalar_loads():
    """C[i*8:(i+1)*8] = lanes < n - i*8 ? A[i + 10**9 * (i >= rows)] (a scalar load) : -1.
    For blocks where no lane is valid the scalar load would be out of bounds: it must not run."""
    n = Var("n")
    A, C = buf("A", (n,)), buf("C", (64,))
    i = Var("i")
    lanes = Ramp(i * 8, const(1), 8)
    far = i + Binary(BinOp.MUL, cast("int32", i >= n), const(1000000000), "int32")
    value = Select(lanes < Broadcast(n, 8), Broadcast(ld(A, far), 8), splat(const(-1.0), 8), True)
    mod = build_llvm(func("sl", (A, C, n), loop(i, 8, st(C, lanes, value))))
    a, c = rand(20), poisoned(64)
    mod(a, c)
    expect = np.array([a[k // 8] if k < 20 else -1.0 for k in range(64)], "float32")
    np.testing.assert_array_equal(c, expect)


def test_vector_lazy_select_guards_integer_division():
    n = 64
    A, B, C = buf("A", (n,), "int32"), buf("B", (n,), "int32"), buf("C", (n,), "int32")
    i = Var("i")
    a_, b_ = ld(A, i * 8, 8), ld(B, i * 8, 8)
    q = Select(b_ != Broadcast(const(0), 8), Binary(BinOp.FLOORMOD, a_, b_, a_.dtype), splat(const(7), 8), True)
    mod = build_llvm(func("vdiv", (A, B, C), loop(i, n // 8, st(C, i * 8, q, 8))))
    a, b, c = rand(n, "int32"), rand(n, "int32"), poisoned(n, "int32")
    b[::3] = 0
    mod(a, b, c)
    np.testing.assert_array_equal(c, np.where(b != 0, a % np.where(b == 0, 1, b), 7))


@pytest.mark.parametrize("kind", [ForKind.SERIAL, ForKind.PARALLEL])
def test_loop_bounds_of_another_int_type(kind):
    """An int64 loop variable over int32 bounds: the bounds are widened."""
    from tilecraft.ir import For
    n = Var("n")
    A = buf("A", (n,))
    i = Var("i", "int64")
    mod = build_llvm(func("wide", (A, n), For(i, const(0), n, kind, st(A, i, ld(A, i) * 2.0))))
    a = rand(100)
    expect = a * 2
    mod(a)
    np.testing.assert_array_equal(a, expect)


def test_error_dtype_of_access_differs_from_buffer():
    from tilecraft.ir import BufferLoad
    A, C = buf("A", (4,)), buf("C", (4,), "float64")
    i = Var("i")
    with pytest.raises(CodegenError, match="storing a float32 value into C, a float64 buffer"):
        codegen_llvm(func("f", (A, C), loop(i, 4, st(C, i, ld(A, i)))))
    with pytest.raises(CodegenError, match="a int32 load from A, a float32 buffer"):
        codegen_llvm(func("g", (A, C), loop(i, 4, st(C, i, cast("float64", BufferLoad(A, (i,), "int32"))))))


def test_a_long_chain_of_lets_compiles():
    """CSE binds each repeated subexpression of an unrolled micro-kernel in a LetStmt, a chain of
    hundreds; the code generator binds a chain in a loop (it recursed a few Python frames per
    let and hit the recursion limit at about 250 before)."""
    import tilecraft as tc
    from tilecraft import tir
    from tilecraft.ir import Var

    n = 300
    A = tir.decl_buffer((4,), "float32", name="A")
    B = tir.decl_buffer((4,), "float32", name="B")
    xs = [Var(f"x{i}", "float32") for i in range(n)]
    body = B.vstore([0], xs[-1])
    for i in range(n - 1, 0, -1):
        body = tir.LetStmt(xs[i], xs[i - 1] + A.vload([i % 4]), body)
    body = tir.LetStmt(xs[0], A.vload([0]), body)
    f = tc.build(tir.PrimFunc("lets", (A, B), body), target="llvm")
    a, b = np.arange(1, 5, dtype="float32"), np.full(4, np.nan, "float32")
    f(a, b)
    assert b[0] == a[0] + sum(a[i % 4] for i in range(1, n))
