"""Corner cases of scheduling and code generation, compiled and compared with the interpreter:
odd extents under vectorize/parallel, chains of compute_at, windows of producers, guarded
loads inside vectors, scalar arguments, every dtype, reductions with ``where``."""
import numpy as np
import pytest

from tilecraft import te


def test_vectorize_odd_extent(check_llvm, rand):
    A = te.placeholder((13, 10), name="A")
    B = te.compute((13, 10), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[1])
    a = rand((13, 10))
    check_llvm(s, [A, B], {A: a}, {B: a * 2 + 1})


def test_parallel_fused_with_tail_and_vectorized_tail(check_llvm, rand):
    A = te.placeholder((7, 9, 11), name="A")
    B = te.compute((7, 9, 11), lambda i, j, k: A[i, j, k] - A[i, 0, k], name="B")
    s = te.create_schedule(B.op)
    i, j, k = B.op.axis
    f = s[B].fuse(i, j)
    fo, fi = s[B].split(f, factor=5)
    ko, ki = s[B].split(k, factor=4)
    s[B].parallel(fo)
    s[B].vectorize(ki)
    a = rand((7, 9, 11))
    check_llvm(s, [A, B], {A: a}, {B: a - a[:, :1, :]})


def test_compute_at_chain(check_llvm, rand):
    """A at B's inner loop, B at C's outer loop, C at D's: regions shrink at each level."""
    A = te.placeholder((16, 24), name="A")
    B = te.compute((16, 24), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((16, 24), lambda i, j: B[i, j] * 2.0, name="C")
    D = te.compute((16, 24), lambda i, j: C[i, j] - B[i, j], name="D")
    s = te.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], factor=4)
    s[C].compute_at(s[D], io)
    s[B].compute_at(s[D], io)
    a = rand((16, 24))
    check_llvm(s, [A, D], {A: a}, {D: (a + 1) * 2 - (a + 1)})


def test_compute_at_sliding_window(check_llvm, rand):
    """A 1-D 3-point stencil whose producer is attached inside the split consumer loop: each
    iteration needs a window of factor + 2 elements."""
    A = te.placeholder((50,), name="A")
    B = te.compute((52,), lambda i: te.if_then_else(te.all(i >= 1, i < 51), A[i - 1], 0.0), name="B")
    r = te.reduce_axis((0, 3), name="r")
    C = te.compute((50,), lambda i: te.sum(B[i + r], axis=r), name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], io)
    a = rand(50)
    ap = np.pad(a, 1)
    check_llvm(s, [A, C], {A: a}, {C: ap[:-2] + ap[1:-1] + ap[2:]}, rtol=1e-5)


def test_compute_at_strided_window_2d(check_llvm, rand):
    """A producer read with stride 2 in both dimensions, attached at the consumer's column tile."""
    A = te.placeholder((20, 20), name="A")
    B = te.compute((20, 20), lambda i, j: A[i, j] * A[i, j], name="B")
    C = te.compute((10, 10), lambda i, j: B[2 * i, 2 * j] + B[2 * i + 1, 2 * j + 1], name="C")
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 3, 4)
    s[B].compute_at(s[C], jo)
    a = rand((20, 20))
    b = a * a
    check_llvm(s, [A, C], {A: a}, {C: b[0::2, 0::2] + b[1::2, 1::2]})


def test_guarded_loads_in_a_vector(check_llvm, rand):
    """if_then_else around an out-of-range read inside a vectorized loop."""
    A = te.placeholder((30,), name="A")
    B = te.compute((40,), lambda i: te.if_then_else(i < 30, A[te.min(i, 29)], -1.0) +
                   te.if_then_else(i >= 35, 5.0, 0.0), name="B")
    C = te.compute((40,), lambda i: te.if_then_else(i < 30, A[i], -2.0), name="C")
    s = te.create_schedule([B.op, C.op])
    s[B].vectorize(s[B].split(B.op.axis[0], factor=8)[1])
    s[C].vectorize(s[C].split(C.op.axis[0], factor=8)[1])
    a = rand(30)
    want_c = np.concatenate([a, np.full(10, -2.0, "float32")])
    check_llvm(s, [A, B, C], {A: a}, {C: want_c})


def test_scalar_argument(check_llvm, rand):
    n = te.var("n")
    alpha = te.var("alpha", dtype="float32")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * alpha, name="B")
    s = te.create_schedule(B.op)
    a = rand(77)
    got = check_llvm(s, [A, B, alpha], {A: a}, {B: a * np.float32(2.5)}, scalars={alpha: 2.5})


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "float32", "float64"])
def test_dtypes_elementwise(dtype, check_llvm, rand):
    A = te.placeholder((50,), dtype=dtype, name="A")
    B = te.placeholder((50,), dtype=dtype, name="B")
    C = te.compute((50,), lambda i: te.max(A[i] * B[i] - A[i], B[i]), name="C")
    s = te.create_schedule(C.op)
    s[C].vectorize(s[C].split(C.op.axis[0], factor=16)[1])
    lo, hi = (0, 255) if dtype == "uint8" else (-100, 100) if "int" in dtype else (-1, 1)
    a, b = rand(50, dtype, lo, hi), rand(50, dtype, lo, hi)
    with np.errstate(over="ignore"):
        want = np.maximum(a * b - a, b)
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: want}, rtol=0 if "int" in dtype else 1e-6, atol=0 if "int" in dtype else 1e-6)


def test_bool_output_and_bitwise(check_llvm, rand):
    A = te.placeholder((64,), dtype="int32", name="A")
    M = te.compute((64,), lambda i: te.all(A[i] > -10, A[i] < 10), name="M")
    X = te.compute((64,), lambda i: (A[i] & 12) ^ (A[i] >> 2) | (A[i] << 3), name="X")
    s = te.create_schedule([M.op, X.op])
    a = rand(64, "int32", -30, 30)
    check_llvm(s, [A, M, X], {A: a}, {M: (a > -10) & (a < 10), X: (a & 12) ^ (a >> 2) | (a << 3)}, rtol=0, atol=0)


def test_casts_compiled(check_llvm, rand):
    A = te.placeholder((64,), name="A")
    I = te.compute((64,), lambda i: (A[i] * 100.0).astype("int32"), name="I")
    U = te.compute((64,), lambda i: (A[i] * 100.0).astype("int32").astype("int8"), name="U")
    H = te.compute((64,), lambda i: A[i].astype("float16"), name="H")
    D = te.compute((64,), lambda i: I[i].astype("float64") / 3.0, name="D")
    s = te.create_schedule([U.op, H.op, D.op])
    a = rand(64, low=-3, high=3)
    i = (a * np.float32(100)).astype("int32")
    check_llvm(s, [A, U, H, D], {A: a}, {U: i.astype("int8"), H: a.astype("float16"), D: i / 3.0}, rtol=0, atol=0)


def test_reduction_with_where(check_llvm, rand):
    """Lower-triangular row sums through ``where`` (a condition on the data axis)."""
    A = te.placeholder((20, 20), name="A")
    k = te.reduce_axis((0, 20), name="k")
    S = te.compute((20,), lambda i: te.sum(A[i, k], axis=k, where=k <= i), name="S")
    M = te.compute((20,), lambda i: te.min(A[i, k], axis=k, where=k % 2 == 0), name="M")
    s = te.create_schedule([S.op, M.op])
    a = rand((20, 20))
    check_llvm(s, [A, S, M], {A: a}, {S: np.tril(a).sum(1), M: a[:, ::2].min(1)}, rtol=1e-5)


def test_gather_guarded_by_if_then_else(check_llvm, rand):
    """Indices outside the table are skipped by if_then_else, never read."""
    A = te.placeholder((10,), name="A")
    idx = te.placeholder((40,), dtype="int32", name="idx")
    G = te.compute((40,), lambda i: te.if_then_else(te.all(idx[i] >= 0, idx[i] < 10), A[idx[i]], 0.0), name="G")
    s = te.create_schedule(G.op)
    a = rand(10)
    ix = rand(40, "int32", -20, 30)
    check_llvm(s, [A, idx, G], {A: a, idx: ix}, {G: np.where((ix >= 0) & (ix < 10), a[np.clip(ix, 0, 9)], 0)})


def test_rfactor_factor_axis_1(check_llvm, rand):
    A = te.placeholder((6, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    S = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="S")
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(k, factor=8)
    SF = s.rfactor(S, ki, factor_axis=1)
    s[SF].vectorize(SF.op.axis[1])
    a = rand((6, 64))
    check_llvm(s, [A, S], {A: a}, {S: a.sum(1)}, rtol=1e-5)


def test_two_outputs_with_a_shared_producer(check_llvm, rand):
    A = te.placeholder((32, 8), name="A")
    B = te.compute((32, 8), lambda i, j: te.exp(A[i, j]), name="B")
    C = te.compute((32, 8), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((32,), lambda i: B[i, 0] * B[i, 7], name="D")
    s = te.create_schedule([C.op, D.op])
    s[C].parallel(C.op.axis[0])
    a = rand((32, 8))
    e = np.exp(a)
    check_llvm(s, [A, C, D], {A: a}, {C: e + 1, D: e[:, 0] * e[:, 7]})


def test_unroll_and_pragma_on_symbolic_outer(check_llvm, rand):
    n = te.var("n")
    A = te.placeholder((n, 6), name="A")
    B = te.compute((n, 6), lambda i, j: A[i, j] * 3.0, name="B")
    s = te.create_schedule(B.op)
    s[B].unroll(B.op.axis[1])
    s[B].pragma(B.op.axis[0], "auto_unroll_max_step", 8)
    a = rand((11, 6))
    check_llvm(s, [A, B], {A: a}, {B: a * 3})


def test_split_of_a_split_with_tails(check_llvm, rand):
    A = te.placeholder((101,), name="A")
    B = te.compute((101,), lambda i: A[i] + 0.5, name="B")
    s = te.create_schedule(B.op)
    o, i = s[B].split(B.op.axis[0], factor=20)
    io, ii = s[B].split(i, factor=6)
    oo, oi = s[B].split(o, nparts=2)
    s[B].parallel(oo)
    s[B].vectorize(ii)
    a = rand(101)
    check_llvm(s, [A, B], {A: a}, {B: a + 0.5})


def test_cache_write_local_with_tails(check_llvm, rand):
    A = te.placeholder((30, 22), name="A")
    k = te.reduce_axis((0, 22), name="k")
    C = te.compute((30, 30), lambda i, j: te.sum(A[i, k] * A[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[CL].compute_at(s[C], jo)
    s[CL].vectorize(s[CL].op.axis[1])
    a = rand((30, 22))
    check_llvm(s, [A, C], {A: a}, {C: a @ a.T}, rtol=1e-5, atol=1e-5)


def _fused_symbolic():
    n = te.var("n")
    A = te.placeholder((n, 7), name="A")
    P = te.compute((n, 7), lambda i, j: A[i, j] * 2.0, name="P")
    C = te.compute((n, 7), lambda i, j: P[i, j] + 1.0, name="C")
    return A, P, C, te.create_schedule(C.op)


def test_compute_at_split_of_fused_symbolic_axis(check_llvm, rand):
    """Regression: the producer's region varied with the attach loop and its allocation named
    that loop's variable, which loop partitioning then left dangling in the tail copy."""
    A, P, C, s = _fused_symbolic()
    f = s[C].fuse(*C.op.axis)
    o, i = s[C].split(f, factor=2)
    s[P].compute_at(s[C], o)
    a = rand((13, 7))
    check_llvm(s, [A, C], {A: a}, {C: a * 2 + 1})


def test_compute_at_outer_of_nparts_split_of_fused_axis(check_llvm, rand):
    """Regression: interval arithmetic returned the unrelaxed product ``(oi + oo) * ((7n+2)//3)``,
    so the producer's allocation named a loop nested inside the attach point."""
    A, P, C, s = _fused_symbolic()
    f = s[C].fuse(*C.op.axis)
    o, i = s[C].split(f, nparts=3)
    oo, oi = s[C].split(o, factor=1)
    s[P].compute_at(s[C], oo)
    a = rand((13, 7))
    check_llvm(s, [A, C], {A: a}, {C: a * 2 + 1})


def test_rfactor_with_symbolic_rows(check_llvm, rand):
    """rfactor where only the data axis is symbolic (TVM's reduction tutorial shape)."""
    n = te.var("n")
    A = te.placeholder((n, 100), name="A")
    k = te.reduce_axis((0, 100), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    s[BF].compute_at(s[B], s[B].op.axis[0])
    s[B].parallel(s[B].op.axis[0])
    a = rand((13, 100))
    check_llvm(s, [A, B], {A: a}, {B: a.sum(1)}, rtol=1e-5)


@pytest.mark.parametrize("parallel_rf", [False, True])
def test_rfactor_symbolic_reduction(check_llvm, rand, parallel_rf):
    """TVM's reduction tutorial: n and m symbolic, k split by 16 (m not a multiple), rfactor."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    if parallel_rf:
        s[BF].parallel(BF.op.axis[0])
    for rows, cols in ((7, 50), (3, 16), (5, 3)):
        a = rand((rows, cols))
        check_llvm(s, [A, B], {A: a}, {B: a.sum(1)}, rtol=1e-5)


@pytest.mark.parametrize("vectorized", [False, True])
def test_integer_wraparound_is_not_assumed_away(check_llvm, vectorized):
    """int32 arithmetic wraps (ir/expr.py): neither the simplifier nor LLVM may fold
    ``(x * c) // c`` to ``x`` or ``x + 1 > x`` to true; division by constants of both signs."""
    A = te.placeholder((8,), dtype="int32", name="A")
    bodies = {
        "md": lambda i: (A[i] * 1000000) // 1000000, "gt": lambda i: te.select(A[i] + 1 > A[i], 1, 0),
        "td": lambda i: te.truncdiv(A[i] * 4, 4), "fd4": lambda i: A[i] // 4, "fm4": lambda i: A[i] % 4,
        "fdm3": lambda i: A[i] // -3, "fmm3": lambda i: A[i] % -3, "tm4": lambda i: te.truncmod(A[i], 4),
        "neg": lambda i: -A[i], "i8": lambda i: (A[i].astype("int8") * te.const(3, "int8")).astype("int32"),
    }
    outs = [te.compute((8,), body, name=name) for name, body in bodies.items()]
    s = te.create_schedule([o.op for o in outs])
    if vectorized:
        for o in outs:
            s[o].vectorize(o.op.axis[0])
    a = np.array([5000, 2**31 - 1, -7, -2**31, 7, -1, 100, 2**30], "int32")
    wrap = lambda v: (np.asarray(v, "int64") + 2**31) % 2**32 - 2**31
    check_llvm(s, [A] + outs, {A: a}, {outs[0]: wrap(a.astype("int64") * 1000000) // 1000000,
                                       outs[1]: (wrap(a.astype("int64") + 1) > a).astype("int32")},
               rtol=0, atol=0)


def test_argmax_rfactor_parallel_then_consumer(check_llvm, rand):
    """A tuple reducer factored with rfactor (partials in parallel), consumed by another stage:
    the first index of the maximum survives the two-level fold."""
    argmax = te.comm_reducer(lambda x, y: (te.select(x[1] >= y[1], x[0], y[0]), te.max(x[1], y[1])),
                             lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    A = te.placeholder((6, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    I, V = te.compute((6,), lambda i: argmax((k, A[i, k]), axis=k), name="AM")
    O = te.compute((6,), lambda i: I[i] * 2, name="O")
    s = te.create_schedule(O.op)
    ko, ki = s[I].split(s[I].op.reduce_axis[0], nparts=4)
    RI, RV = s.rfactor(I, ko)
    s[RI.op].parallel(RI.op.axis[0])
    a = rand((6, 64), "int32", 0, 3).astype("float32")
    check_llvm(s, [A, O], {A: a}, {O: a.argmax(1) * 2}, rtol=0, atol=0)


def test_tuple_compute_without_reduction(check_llvm, rand):
    """One op with two outputs, split and vectorized, attached to a consumer of both."""
    A = te.placeholder((10,), name="A")
    X, Y = te.compute((10,), lambda i: (A[i] + 1.0, A[i] * 2.0), name="XY")
    Z = te.compute((10,), lambda i: X[i] - Y[9 - i], name="Z")
    s = te.create_schedule([X.op, Z.op])
    s[X].vectorize(s[X].split(X.op.axis[0], factor=4)[1])
    a = rand(10)
    check_llvm(s, [A, X, Y, Z], {A: a}, {X: a + 1, Y: 2 * a, Z: (a + 1) - 2 * a[::-1]})


def test_rfactor_of_the_whole_reduction_axis(check_llvm, rand):
    """Regression: rfactor of an unsplit axis left a Reduce over no axes in the partial stage
    ('the LLVM backend cannot compile a Reduce expression')."""
    A = te.placeholder((7, 9), name="A")
    k = te.reduce_axis((0, 9), name="k")
    S = te.compute((7,), lambda i: te.sum(A[i, k], axis=k, where=te.any(k < 4, k > 4)), name="S")
    s = te.create_schedule(S.op)
    SF = s.rfactor(S, k)
    s[SF].parallel(SF.op.axis[0])
    a = rand((7, 9))
    check_llvm(s, [A, S], {A: a}, {S: a.sum(1) - a[:, 4]}, rtol=1e-5)


def test_argmax_rfactor_of_the_whole_axis(check_llvm, rand):
    argmax = te.comm_reducer(lambda x, y: (te.select(x[1] >= y[1], x[0], y[0]), te.max(x[1], y[1])),
                             lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    A = te.placeholder((5, 12), name="A")
    k = te.reduce_axis((0, 12), name="k")
    I, V = te.compute((5,), lambda i: argmax((k, A[i, k]), axis=k), name="AM")
    s = te.create_schedule(I.op)
    s.rfactor(I, k)
    a = rand((5, 12), "int32", 0, 2).astype("float32")
    check_llvm(s, [A, I, V], {A: a}, {I: a.argmax(1), V: a.max(1)}, rtol=0, atol=0)
