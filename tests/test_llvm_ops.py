"""Operators built for the CPU (LLVM) and compared with numpy and with the reference interpreter
on fresh random inputs, every output poisoned before the call (see ``check_llvm`` in conftest).
Each test uses a real schedule; which primitives each one exercises is listed in its docstring.
"""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te

argmax = te.comm_reducer(
    lambda x, y: (te.select(x[1] >= y[1], x[0], y[0]), te.max(x[1], y[1])),
    lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")


def test_vector_add_symbolic_n_with_tail(check_llvm, rand):
    """split(factor) with a tail, parallel, vectorize, symbolic extent."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=64)
    s[C].parallel(xo)
    s[C].vectorize(xi)
    for size in (1000, 64, 1):
        a, b = rand(size), rand(size)
        check_llvm(s, [A, B, C], {A: a, B: b}, {C: a + b}, name="vadd")


def test_vector_add_serial_tail(check_llvm, rand):
    """split(factor) with a tail and vectorize, no parallel loop."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] * B[i] - A[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=16)
    s[C].vectorize(xi)
    a, b = rand(1000), rand(1000)
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a * b - a})


def test_broadcast_add(check_llvm, rand):
    """fuse + parallel over a 2-D broadcast."""
    A = te.placeholder((37, 50), name="A")
    b = te.placeholder((50,), name="b")
    c = te.placeholder((37, 1), name="c")
    C = te.compute((37, 50), lambda i, j: A[i, j] + b[j] + c[i, 0], name="C")
    s = te.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    fo, fi = s[C].split(f, factor=128)
    s[C].parallel(fo)
    a, bb, cc = rand((37, 50)), rand(50), rand((37, 1))
    check_llvm(s, [A, b, c, C], {A: a, b: bb, c: cc}, {C: a + bb + cc})


def test_transpose_tiled(check_llvm, rand):
    """tile (non-dividing), reorder, unroll."""
    A = te.placeholder((45, 70), name="A")
    T = te.compute((70, 45), lambda i, j: A[j, i], name="T")
    s = te.create_schedule(T.op)
    io, jo, ii, ji = s[T].tile(T.op.axis[0], T.op.axis[1], 16, 8)
    s[T].unroll(ji)
    a = rand((45, 70))
    check_llvm(s, [A, T], {A: a}, {T: a.T})


def _matmul(M, N, K, dtype="float32"):
    A = te.placeholder((M, K), dtype=dtype, name="A")
    B = te.placeholder((K, N), dtype=dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_matmul_naive(check_llvm, rand):
    A, B, C = _matmul(33, 47, 29)
    s = te.create_schedule(C.op)
    a, b = rand((33, 29)), rand((29, 47))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b}, rtol=1e-4, atol=1e-4)


def blocked_matmul(M, N, K, bn=32, kf=4):
    """The classic CPU GEMM schedule: B packed into panels, a write cache attached at the block,
    the inner axis vectorized, k unrolled, the outer axis parallel."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    packedB = te.compute((N // bn, K, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * packedB[j // bn, k, j % bn], axis=k), name="C")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "global")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    s[CC].compute_at(s[C], jo)
    ic, jc = s[CC].op.axis
    (kc,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kc, factor=kf)
    s[CC].reorder(ko, ic, ki, jc)
    s[CC].unroll(ki)
    s[CC].vectorize(jc)
    s[C].parallel(io)
    x, y, z = s[packedB].op.axis
    s[packedB].vectorize(z)
    s[packedB].parallel(x)
    return s, [A, B, C]


def test_matmul_blocked_hand_schedule(check_llvm, rand):
    """cache_write + compute_at at the block, tile, split, reorder, unroll, vectorize, parallel;
    M is not a multiple of the block (tail tiles)."""
    s, (A, B, C) = blocked_matmul(100, 64, 48)
    a, b = rand((100, 48)), rand((48, 64))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b}, rtol=1e-4, atol=1e-4)


def test_matmul_bench_hand_schedule(check_llvm, rand):
    """The schedule ``bench/cpu_gemm.py`` times, at a small size with tails in M and blocks in K."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "bench" / "cpu_gemm.py"
    spec = importlib.util.spec_from_file_location("cpu_gemm", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    s, (A, B, C) = bench.hand_schedule(100, 64, 96, mb=32, nb=32, kc=32, mr=4, nr=16)
    a, b = rand((100, 96)), rand((96, 64))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b}, rtol=1e-4, atol=1e-4)


def test_matmul_cache_read_and_pragma(check_llvm, rand):
    """cache_read attached with compute_at, pragma auto_unroll_max_step, split(nparts)."""
    A, B, C = _matmul(40, 24, 36)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "global", [C])
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    io, ii = s[C].split(i, nparts=5)
    ko, ki = s[C].split(k, factor=6)
    s[C].reorder(io, ko, ii, j, ki)
    s[AA].compute_at(s[C], ko)
    s[C].pragma(io, "auto_unroll_max_step", 16)
    a, b = rand((40, 36)), rand((36, 24))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b}, rtol=1e-4, atol=1e-4)


def test_batch_matmul(check_llvm, rand):
    """fuse of the batch and row axes, parallel, vectorize."""
    Bt, M, N, K = 3, 17, 24, 20
    A = te.placeholder((Bt, M, K), name="A")
    B = te.placeholder((Bt, K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((Bt, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    b, i, j = C.op.axis
    (kk,) = C.op.reduce_axis
    bi = s[C].fuse(b, i)
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(bi, jo, kk, ji)
    s[C].parallel(bi)
    s[C].vectorize(ji)
    a, bb = rand((Bt, M, K)), rand((Bt, K, N))
    check_llvm(s, [A, B, C], {A: a, B: bb}, {C: a @ bb}, rtol=1e-4, atol=1e-4)


def _pad(A, pad, value=0.0):
    N, C, H, W = A.shape
    return te.compute((N, C, H + 2 * pad, W + 2 * pad),
                      lambda n, c, h, w: te.if_then_else(
                          te.all(h >= pad, h < H + pad, w >= pad, w < W + pad),
                          A[n, c, h - pad, w - pad], te.const(value, A.dtype)), name="Apad")


def np_conv2d(a, w, stride, pad):
    n, c, h, wd = a.shape
    f, _, kh, kw = w.shape
    ap = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, f, oh, ow), a.dtype)
    for y in range(kh):
        for x in range(kw):
            patch = ap[:, :, y:y + stride * oh:stride, x:x + stride * ow:stride]   # n c oh ow
            out += np.einsum("ncij,fc->nfij", patch, w[:, :, y, x])
    return out


def conv2d_nchw(N, C, H, W, F, K, stride, pad):
    A = te.placeholder((N, C, H, W), name="A")
    Wt = te.placeholder((F, C, K, K), name="W")
    Apad = _pad(A, pad)
    OH, OW = (H + 2 * pad - K) // stride + 1, (W + 2 * pad - K) // stride + 1
    rc = te.reduce_axis((0, C), name="rc")
    ry = te.reduce_axis((0, K), name="ry")
    rx = te.reduce_axis((0, K), name="rx")
    Out = te.compute((N, F, OH, OW), lambda n, f, y, x: te.sum(
        Apad[n, rc, y * stride + ry, x * stride + rx] * Wt[f, rc, ry, rx], axis=[rc, ry, rx]), name="Out")
    return A, Wt, Apad, Out


def test_conv2d_nchw_pad_inlined_stride2(check_llvm, rand):
    """compute_inline of the padding stage; fuse, parallel, unroll of reduction axes."""
    A, Wt, Apad, Out = conv2d_nchw(2, 3, 15, 14, 4, 3, stride=2, pad=1)
    s = te.create_schedule(Out.op)
    s[Apad].compute_inline()
    n, f, y, x = Out.op.axis
    rc, ry, rx = Out.op.reduce_axis
    s[Out].reorder(n, f, y, rc, ry, rx, x)
    s[Out].parallel(s[Out].fuse(n, f))
    s[Out].unroll(rx)
    a, w = rand((2, 3, 15, 14)), rand((4, 3, 3, 3))
    check_llvm(s, [A, Wt, Out], {A: a, Wt: w}, {Out: np_conv2d(a, w, 2, 1)}, rtol=1e-4, atol=1e-4)


def test_conv2d_pad_stage_compute_at(check_llvm, rand):
    """The padding stage computed per output row with compute_at (bound inference of a strided
    window), and the output row vectorized."""
    A, Wt, Apad, Out = conv2d_nchw(1, 2, 12, 16, 3, 3, stride=2, pad=1)
    s = te.create_schedule(Out.op)
    n, f, y, x = Out.op.axis
    s[Apad].compute_at(s[Out], y)
    a, w = rand((1, 2, 12, 16)), rand((3, 2, 3, 3))
    check_llvm(s, [A, Wt, Out], {A: a, Wt: w}, {Out: np_conv2d(a, w, 2, 1)}, rtol=1e-4, atol=1e-4)


def test_depthwise_conv2d(check_llvm, rand):
    """Depthwise 3x3, pad 1: padding inlined, x vectorized, channels parallel."""
    N, C, H, W, K = 1, 8, 10, 16, 3
    A = te.placeholder((N, C, H, W), name="A")
    Wt = te.placeholder((C, K, K), name="W")
    Apad = _pad(A, 1)
    ry = te.reduce_axis((0, K), name="ry")
    rx = te.reduce_axis((0, K), name="rx")
    Out = te.compute((N, C, H, W), lambda n, c, y, x: te.sum(Apad[n, c, y + ry, x + rx] * Wt[c, ry, rx],
                                                             axis=[ry, rx]), name="Out")
    s = te.create_schedule(Out.op)
    s[Apad].compute_inline()
    n, c, y, x = Out.op.axis
    ry_, rx_ = Out.op.reduce_axis
    s[Out].reorder(n, c, y, ry_, rx_, x)
    s[Out].vectorize(x)
    s[Out].parallel(c)
    a, w = rand((N, C, H, W)), rand((C, K, K))
    ap = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = sum(ap[:, :, i:i + H, j:j + W] * w[None, :, i, j, None, None] for i in range(K) for j in range(K))
    check_llvm(s, [A, Wt, Out], {A: a, Wt: w}, {Out: want}, rtol=1e-4, atol=1e-4)


def test_max_pool_with_padding(check_llvm, rand):
    """3x3 max pool, stride 2, pad 1 (padding with the dtype's minimum, inlined)."""
    N, C, H, W = 2, 3, 11, 12
    A = te.placeholder((N, C, H, W), name="A")
    Apad = _pad(A, 1, value=float(np.finfo("float32").min))
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    OH, OW = (H + 2 - 3) // 2 + 1, (W + 2 - 3) // 2 + 1
    P = te.compute((N, C, OH, OW), lambda n, c, y, x: te.max(Apad[n, c, 2 * y + ry, 2 * x + rx], axis=[ry, rx]),
                   name="P")
    s = te.create_schedule(P.op)
    s[Apad].compute_inline()
    s[P].parallel(s[P].fuse(*P.op.axis[:2]))
    a = rand((N, C, H, W))
    ap = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want = np.max([ap[:, :, i:i + 2 * OH:2, j:j + 2 * OW:2] for i in range(3) for j in range(3)], axis=0)
    check_llvm(s, [A, P], {A: a}, {P: want})


def test_avg_pool(check_llvm, rand):
    """2x2 average pool, stride 2: a sum stage and a divide stage attached with compute_at."""
    N, C, H, W = 2, 4, 10, 14
    A = te.placeholder((N, C, H, W), name="A")
    ry = te.reduce_axis((0, 2), name="ry")
    rx = te.reduce_axis((0, 2), name="rx")
    S = te.compute((N, C, H // 2, W // 2), lambda n, c, y, x: te.sum(A[n, c, 2 * y + ry, 2 * x + rx], axis=[ry, rx]),
                   name="S")
    P = te.compute(S.shape, lambda n, c, y, x: S[n, c, y, x] / 4.0, name="P")
    s = te.create_schedule(P.op)
    s[S].compute_at(s[P], P.op.axis[2])
    a = rand((N, C, H, W))
    want = a.reshape(N, C, H // 2, 2, W // 2, 2).mean((3, 5))
    check_llvm(s, [A, P], {A: a}, {P: want})


def softmax(m, n):
    A = te.placeholder((m, n), name="A")
    k1 = te.reduce_axis((0, n), name="k1")
    k2 = te.reduce_axis((0, n), name="k2")
    mx = te.compute((m,), lambda i: te.max(A[i, k1], axis=k1), name="mx")
    e = te.compute((m, n), lambda i, j: te.exp(A[i, j] - mx[i]), name="e")
    sm = te.compute((m,), lambda i: te.sum(e[i, k2], axis=k2), name="sm")
    out = te.compute((m, n), lambda i, j: e[i, j] / sm[i], name="out")
    s = te.create_schedule(out.op)
    i, j = out.op.axis
    for t in (mx, e, sm):
        s[t].compute_at(s[out], i)
    s[out].parallel(i)
    return s, A, out


def test_row_softmax(check_llvm, rand):
    """max, exp, sum, divide; three stages attached with compute_at at the row loop."""
    s, A, out = softmax(19, 70)
    a = rand((19, 70), low=-4, high=4)
    e = np.exp(a - a.max(1, keepdims=True))
    check_llvm(s, [A, out], {A: a}, {out: e / e.sum(1, keepdims=True)}, rtol=1e-5, atol=1e-6)


def test_layer_norm(check_llvm, rand):
    """mean and variance stages: one compute_at then compute_root (undo), one computed at root."""
    m, n, eps = 12, 50, 1e-5
    X = te.placeholder((m, n), name="X")
    g = te.placeholder((n,), name="g")
    b = te.placeholder((n,), name="b")
    k1 = te.reduce_axis((0, n), name="k1")
    k2 = te.reduce_axis((0, n), name="k2")
    mean = te.compute((m,), lambda i: te.sum(X[i, k1], axis=k1) , name="mean")
    mu = te.compute((m,), lambda i: mean[i] / float(n), name="mu")
    var = te.compute((m,), lambda i: te.sum((X[i, k2] - mu[i]) * (X[i, k2] - mu[i]), axis=k2), name="var")
    Y = te.compute((m, n), lambda i, j: (X[i, j] - mu[i]) * te.rsqrt(var[i] / float(n) + eps) * g[j] + b[j],
                   name="Y")
    s = te.create_schedule(Y.op)
    s[mu].compute_inline()
    s[var].compute_at(s[Y], Y.op.axis[0])
    s[mean].compute_at(s[Y], Y.op.axis[0])
    s[mean].compute_root()
    x, gg, bb = rand((m, n)), rand(n), rand(n)
    want = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + eps) * gg + bb
    check_llvm(s, [X, g, b, Y], {X: x, g: gg, b: bb}, {Y: want}, rtol=1e-4, atol=1e-4)


def test_argmax_tuple_reducer(check_llvm, rand):
    """A tuple comm_reducer with two outputs; ties resolve to the first index."""
    A = te.placeholder((9, 40), name="A")
    k = te.reduce_axis((0, 40), name="k")
    I, V = te.compute((9,), lambda i: argmax((k, A[i, k]), axis=k), name="AM")
    s = te.create_schedule(I.op)
    a = rand((9, 40), "int32", -3, 3).astype("float32")   # many ties
    check_llvm(s, [A, I, V], {A: a}, {I: a.argmax(1), V: a.max(1)})


def test_gather(check_llvm, rand):
    """Indirect indexing ``A[idx[i], j]``; the inner axis vectorized."""
    A = te.placeholder((50, 16), name="A")
    idx = te.placeholder((30,), dtype="int32", name="idx")
    G = te.compute((30, 16), lambda i, j: A[idx[i], j], name="G")
    s = te.create_schedule(G.op)
    s[G].vectorize(G.op.axis[1])
    a = rand((50, 16))
    ix = rand(30, "int32", 0, 49)
    check_llvm(s, [A, idx, G], {A: a, idx: ix}, {G: a[ix]})


def test_rfactor_long_sum_in_parallel(check_llvm, rand):
    """split(nparts) of a long reduction, rfactor, the partial sums in parallel."""
    n = 1 << 16
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n), name="k")
    S = te.compute((1,), lambda _: te.sum(A[k], axis=k), name="S")
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(k, nparts=8)
    SF = s.rfactor(S, ko)
    s[SF].parallel(SF.op.axis[0])
    a = rand(n)
    check_llvm(s, [A, S], {A: a}, {S: a.astype("float64").sum().reshape(1)}, rtol=1e-4, atol=1e-3)


def test_rfactor_vectorized_inner(check_llvm, rand):
    """rfactor over the inner split axis, vectorizing the partial sums (TVM's tutorial)."""
    A = te.placeholder((20, 200), name="A")
    k = te.reduce_axis((0, 200), name="k")
    S = te.compute((20,), lambda i: te.sum(A[i, k], axis=k), name="S")
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(S.op.reduce_axis[0], factor=16)
    SF = s.rfactor(S, ki)
    s[SF].compute_at(s[S], s[S].op.axis[0])
    a = rand((20, 200))
    check_llvm(s, [A, S], {A: a}, {S: a.sum(1)}, rtol=1e-4, atol=1e-4)


def test_float16_arithmetic(check_llvm, rand):
    A = te.placeholder((300,), dtype="float16", name="A")
    B = te.placeholder((300,), dtype="float16", name="B")
    C = te.compute((300,), lambda i: A[i] * B[i] + A[i] / te.const(4.0, "float16"), name="C")
    D = te.compute((300,), lambda i: C[i].astype("float32") * 2.0, name="D")
    s = te.create_schedule(D.op)
    xo, xi = s[D].split(D.op.axis[0], factor=16)
    s[D].vectorize(xi)
    a, b = rand(300, "float16"), rand(300, "float16")
    got = check_llvm(s, [A, B, C, D], {A: a, B: b}, {C: a * b + a / np.float16(4)}, rtol=2e-3, atol=2e-3)
    assert got[C].dtype == np.float16


def test_int8_to_int32_arithmetic(check_llvm, rand):
    """int8 dot products accumulated in int32 (exact), and int8 wraparound."""
    A = te.placeholder((16, 64), dtype="int8", name="A")
    B = te.placeholder((64, 8), dtype="int8", name="B")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((16, 8), lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k),
                   name="C")
    W = te.compute((16, 64), lambda i, j: A[i, j] + A[i, j] * te.const(3, "int8"), name="W")
    s = te.create_schedule([C.op, W.op])
    s[C].vectorize(C.op.axis[1])
    a, b = rand((16, 64), "int8", -128, 127), rand((64, 8), "int8", -128, 127)
    check_llvm(s, [A, B, C, W], {A: a, B: b},
               {C: a.astype("int32") @ b.astype("int32"), W: (a.astype("int32") * 4).astype("int8")},
               rtol=0, atol=0)


def test_integer_division_semantics_compiled(check_llvm, rand):
    """floor/trunc division and modulo of negative numbers, compiled."""
    X = te.placeholder((64,), dtype="int32", name="X")
    D = te.placeholder((64,), dtype="int32", name="D")
    outs = [te.compute((64,), lambda i: X[i] // D[i], name="fd"),
            te.compute((64,), lambda i: X[i] % D[i], name="fm"),
            te.compute((64,), lambda i: te.truncdiv(X[i], D[i]), name="td"),
            te.compute((64,), lambda i: te.truncmod(X[i], D[i]), name="tm")]
    s = te.create_schedule([o.op for o in outs])
    x = rand(64, "int32", -100, 100)
    d = rand(64, "int32", 1, 9) * np.where(rand(64, "int32", 0, 1) > 0, 1, -1).astype("int32")
    trunc = (np.abs(x) // np.abs(d)) * np.sign(x) * np.sign(d)
    check_llvm(s, [X, D] + outs, {X: x, D: d},
               {outs[0]: x // d, outs[1]: x % d, outs[2]: trunc, outs[3]: x - trunc * d}, rtol=0, atol=0)


def test_storage_align_on_cache_stage(check_llvm, rand):
    """storage_align of a cache_read stage (padded row stride) still gives the right values."""
    A = te.placeholder((24, 30), name="A")
    B = te.compute((24, 30), lambda i, j: A[i, j] * 3.0, name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "global", [B])
    s[AA].storage_align(AA.op.axis[0], 16, 1)
    a = rand((24, 30))
    check_llvm(s, [A, B], {A: a}, {B: a * 3})


def test_intrinsics_compiled(check_llvm, rand):
    A = te.placeholder((64,), name="A")
    names = ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "abs"]

    def unary(nm):
        f = getattr(te, nm)
        return te.compute((64,), lambda i: f(A[i]), name=nm)
    outs = [unary(nm) for nm in names]
    outs.append(te.compute((64,), lambda i: te.power(A[i], 1.5), name="pow"))
    s = te.create_schedule([o.op for o in outs])
    for o in outs[:4]:
        s[o].vectorize(o.op.axis[0])
    a = rand(64, low=0.1, high=3.0)
    check_llvm(s, [A] + outs, {A: a}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid"])
def test_math_bench_schedules(name, check_llvm, rng):
    """The schedules ``bench/cpu_math.py`` times (vector + parallel, with a tail), against numpy."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "bench" / "cpu_math.py"
    spec = importlib.util.spec_from_file_location("cpu_math", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    n = 8 * 64 * 3 + 13
    s, (A, C) = bench.schedule(name, n)
    a = bench.inputs(name, n, rng)
    check_llvm(s, [A, C], {A: a}, {C: bench.reference(name, a).astype("float32")}, rtol=1e-6, atol=1e-7)
