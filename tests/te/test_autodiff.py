"""``te.gradient``: TVM's autodiff test cases in spirit (elementwise, broadcasting, matmul, dense,
conv2d, softmax, max-pool, reductions, the Jacobian with the identity head). Each gradient is
built with a default schedule and run (``check_llvm``: poisoned outputs, compared with the
interpreter) and compared with central finite differences of ``sum(H * out)`` in float64 on
fresh random inputs, and, where there is one, with the analytic gradient in numpy. The shape
checks say that no generated stage iterates over the whole Jacobian."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te, topi  # noqa: F401
from tilecraft.interp import evaluate
from tilecraft.te import TEError

F = "float64"


def numeric_grad(out, inputs, feed, head, eps=1e-6):
    """d sum(head * out) / d x by central differences, for each x of ``inputs``."""
    grads = []
    for x in inputs:
        base = feed[x]
        g = np.zeros_like(base)
        for idx in np.ndindex(*base.shape):
            vals = []
            for step in (eps, -eps):
                arr = base.copy()
                arr[idx] += step
                vals.append(float(np.sum(head * evaluate(out, {**feed, x: arr}))))
            g[idx] = (vals[0] - vals[1]) / (2 * eps)
        grads.append(g)
    return grads


def check_grad(check_llvm, rand, out, inputs, feed, expected=None, low=-1.0, high=1.0, atol=1e-5):
    """Build and run ``te.gradient(out, inputs, H)`` for a random head ``H``; compare with finite
    differences and ``expected`` (numpy functions of the head). Returns the gradient tensors."""
    H = te.placeholder(out.shape, name="H", dtype=out.dtype)
    head = rand(tuple(int(s.value) for s in out.shape), F, low, high)
    grads = te.gradient(out, inputs, head=H)
    assert [tuple(g.shape) for g in grads] == [tuple(x.shape) for x in inputs]
    s = te.create_schedule([g.op for g in grads])
    want = numeric_grad(out, inputs, feed, head)
    used = [t for t in [*feed, H] if t.op in s.stage_map]     # d(A + B)/dA reads only H
    got = check_llvm(s, [*used, *grads], {t: v for t, v in {**feed, H: head}.items() if t in used},
                     expected=dict(zip(grads, want)), rtol=1e-5, atol=atol)
    for g, fn in zip(grads, expected or []):
        if fn is not None:
            np.testing.assert_allclose(got[g], fn(head), rtol=1e-9, atol=1e-9)
    return grads


def iteration_sizes(tensors):
    """For each compute stage reachable from ``tensors``, the number of points it iterates over
    (output points times reduction points)."""
    from tilecraft.te.tensor import ComputeOp, post_dfs_order
    out = {}
    for op in post_dfs_order([t.op for t in tensors]):
        if isinstance(op, ComputeOp):
            n = 1
            for iv in op.axis + op.reduce_axis:
                n *= int(iv.dom.extent.value)
            out[op.name] = n
    return out


@pytest.mark.parametrize("fn, low, high", [
    (lambda a, b: a + b, -1, 1), (lambda a, b: a - b, -1, 1), (lambda a, b: a * b, -1, 1),
    (lambda a, b: a / b, 0.5, 2), (lambda a, b: te.exp(a) * b, -1, 1),
    (lambda a, b: te.log(a) + te.sqrt(b), 0.5, 2), (lambda a, b: te.sigmoid(a) - te.tanh(b), -2, 2),
    (lambda a, b: te.power(a, b), 0.5, 2), (lambda a, b: te.max(a, b) * te.min(a, b), -1, 1),
    (lambda a, b: te.if_then_else(a > b, a * a, b * 3.0), -1, 1),
    (lambda a, b: -a * te.abs(b) + te.rsqrt(a * a + 1.0), -1, 1),
    (lambda a, b: te.exp2(a) + te.log2(b) + te.log10(b) + te.sin(a) * te.cos(b), 0.5, 2),
    (lambda a, b: te.erf(a) + te.floor(b) * a, 0.1, 2),
    (lambda a, b: a * (b * 4.0).astype("int32").astype(F), -1, 1),
], ids=["add", "sub", "mul", "div", "exp", "log_sqrt", "sigmoid_tanh", "pow", "max_min", "select",
        "neg_abs_rsqrt", "exp2_logs_trig", "erf_floor", "int_cast"])
def test_elementwise_gives_elementwise_adjoints(check_llvm, rand, fn, low, high):
    A = te.placeholder((3, 5), name="A", dtype=F)
    B = te.placeholder((3, 5), name="B", dtype=F)
    C = te.compute((3, 5), lambda i, j: fn(A[i, j], B[i, j]), name="C")
    feed = {A: rand((3, 5), F, low, high), B: rand((3, 5), F, low, high)}
    grads = check_grad(check_llvm, rand, C, [A, B], feed, atol=1e-4)
    for g in grads:
        assert g.op.reduce_axis == () and iteration_sizes([g])[g.op.name] == 15


def test_same_tensor_read_twice_and_by_two_consumers(check_llvm, rand):
    A = te.placeholder((6,), name="A", dtype=F)
    B = te.compute((6,), lambda i: A[i] * A[i] + A[5 - i], name="B")
    C = te.compute((6,), lambda i: B[i] * A[i], name="C")
    a = rand((6,), F)
    check_grad(check_llvm, rand, C, [A], {A: a},
               expected=[lambda h: h * (3 * a * a + a[::-1]) + (h * a)[::-1]])


def test_broadcast_adjoint_sums_over_the_broadcast_axis(check_llvm, rand):
    A = te.placeholder((4, 3), name="A", dtype=F)
    b = te.placeholder((3,), name="b", dtype=F)
    C = A * b + A          # tensor arithmetic broadcasts
    feed = {A: rand((4, 3), F), b: rand((3,), F)}
    dA, db = check_grad(check_llvm, rand, C, [A, b], feed,
                        expected=[lambda h: h * (feed[b] + 1), lambda h: (h * feed[A]).sum(0)])
    assert iteration_sizes([db])[db.op.name] == 12


def test_matmul_adjoints_are_matmuls(check_llvm, rand):
    N, K, M = 5, 7, 4
    A = te.placeholder((N, K), name="A", dtype=F)
    B = te.placeholder((K, M), name="B", dtype=F)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    feed = {A: rand((N, K), F), B: rand((K, M), F)}
    dA, dB = check_grad(check_llvm, rand, C, [A, B], feed,
                        expected=[lambda h: h @ feed[B].T, lambda h: feed[A].T @ h])
    sizes = iteration_sizes([dA, dB])
    assert sizes[dA.op.name] == N * K * M and sizes[dB.op.name] == N * K * M


def test_dense_with_bias_and_relu(check_llvm, rand):
    N, K, M = 4, 6, 3
    X = te.placeholder((N, K), name="X", dtype=F)
    W = te.placeholder((M, K), name="W", dtype=F)
    bias = te.placeholder((M,), name="bias", dtype=F)
    k = te.reduce_axis((0, K), name="k")
    D = te.compute((N, M), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="D")
    R = te.compute((N, M), lambda i, j: te.max(D[i, j] + bias[j], te.const(0.0, F)), name="R")
    feed = {X: rand((N, K), F), W: rand((M, K), F), bias: rand((M,), F)}
    mask = (feed[X] @ feed[W].T + feed[bias]) > 0
    dX, dW, db = check_grad(check_llvm, rand, R, [X, W, bias], feed,
                            expected=[lambda h: (h * mask) @ feed[W], lambda h: (h * mask).T @ feed[X],
                                      lambda h: (h * mask).sum(0)])
    sizes = iteration_sizes([dX, dW])
    assert sizes[dX.op.name] == N * K * M and sizes[dW.op.name] == N * K * M


@pytest.mark.parametrize("stride, pad", [(1, 0), (2, 1)])
def test_conv2d(check_llvm, rand, stride, pad):
    N, C, H, W, F_, KH = 1, 2, 5, 5, 3, 3
    X = te.placeholder((N, C, H, W), name="X", dtype=F)
    Wt = te.placeholder((F_, C, KH, KH), name="Wt", dtype=F)
    P = te.compute((N, C, H + 2 * pad, W + 2 * pad), lambda n, c, y, x: te.if_then_else(
        te.all(y >= pad, y < H + pad, x >= pad, x < W + pad), X[n, c, y - pad, x - pad],
        te.const(0.0, F)), name="P")
    OH = (H + 2 * pad - KH) // stride + 1
    rc = te.reduce_axis((0, C), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KH), name="rx")
    O = te.compute((N, F_, OH, OH), lambda n, f, y, x: te.sum(
        P[n, rc, y * stride + ry, x * stride + rx] * Wt[f, rc, ry, rx], axis=[rc, ry, rx]), name="O")
    feed = {X: rand((N, C, H, W), F), Wt: rand((F_, C, KH, KH), F)}
    dX, dW = check_grad(check_llvm, rand, O, [X, Wt], feed)
    # the input's adjoint sums over the kernel window and the filters, not over the output image
    sizes = iteration_sizes([dX, dW])
    assert sizes["P_grad"] <= N * C * (H + 2 * pad) ** 2 * F_ * KH * KH
    assert sizes[dW.op.name] == F_ * C * KH * KH * N * OH * OH


def test_softmax(check_llvm, rand):
    N, M = 3, 6
    X = te.placeholder((N, M), name="X", dtype=F)
    k = te.reduce_axis((0, M), name="k")
    mx = te.compute((N,), lambda i: te.max(X[i, k], axis=k), name="mx")
    E = te.compute((N, M), lambda i, j: te.exp(X[i, j] - mx[i]), name="E")
    k2 = te.reduce_axis((0, M), name="k2")
    S = te.compute((N,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    Y = te.compute((N, M), lambda i, j: E[i, j] / S[i], name="Y")
    x = rand((N, M), F, -2, 2)
    y = np.exp(x - x.max(1, keepdims=True))
    y /= y.sum(1, keepdims=True)
    check_grad(check_llvm, rand, Y, [X], {X: x},
               expected=[lambda h: y * (h - (h * y).sum(1, keepdims=True))])


def test_max_pool(check_llvm, rand):
    X = te.placeholder((1, 2, 6, 6), name="X", dtype=F)
    ry = te.reduce_axis((0, 2), name="ry")
    rx = te.reduce_axis((0, 2), name="rx")
    Pool = te.compute((1, 2, 3, 3), lambda n, c, y, x: te.max(X[n, c, y * 2 + ry, x * 2 + rx],
                                                                axis=[ry, rx]), name="Pool")
    x = rand((1, 2, 6, 6), F)
    win = x.reshape(1, 2, 3, 2, 3, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 2, 3, 3, 4)
    hit = (win == win.max(-1, keepdims=True))

    def want(h):
        g = (hit * h[..., None]).reshape(1, 2, 3, 3, 2, 2).transpose(0, 1, 2, 4, 3, 5)
        return g.reshape(1, 2, 6, 6)
    (dX,) = check_grad(check_llvm, rand, Pool, [X], {X: x}, expected=[want])
    assert iteration_sizes([dX])[dX.op.name] <= 72 * 4


def test_reductions_where_init_min_and_symbolic_offsets(check_llvm, rand):
    A = te.placeholder((4, 6), name="A", dtype=F)
    B = te.placeholder((4,), name="B", dtype=F)
    k = te.reduce_axis((1, 5), name="k")
    S = te.compute((4,), lambda i: te.sum(A[i, k] * A[i, k - 1], axis=k, where=k != 3, init=B[i] * 2.0),
                   name="S")
    j = te.reduce_axis((0, 6), name="j")
    Mn = te.compute((4,), lambda i: te.min(A[i, j], axis=j), name="Mn")
    T = te.compute((4,), lambda i: S[i] * Mn[i], name="T")
    check_grad(check_llvm, rand, T, [A, B], {A: rand((4, 6), F), B: rand((4,), F)})


def test_whole_tensor_reduction_and_slices(check_llvm, rand):
    A = te.placeholder((5, 4), name="A", dtype=F)
    r = te.reduce_axis((0, 5), name="r")
    c = te.reduce_axis((0, 4), name="c")
    T = te.compute((1,), lambda _: te.sum(A[r, c] * A[r, c], axis=[r, c]), name="T")
    Sl = te.compute((3, 2), lambda i, j: A[i + 2, j * 2 + 1] * T[0], name="Sl")
    a = rand((5, 4), F)
    check_grad(check_llvm, rand, Sl, [A], {A: a})


def test_identity_head_gives_the_jacobian(rand):
    A = te.placeholder((3,), name="A", dtype=F)
    B = te.placeholder((3, 2), name="B", dtype=F)
    C = te.compute((2,), lambda j: A[j] * B[j, 1], name="C")
    (J,) = te.gradient(C, A)
    assert tuple(int(s.value) for s in J.shape) == (2, 3)
    a, b = rand((3,), F), rand((3, 2), F)
    want = np.zeros((2, 3))
    want[0, 0], want[1, 1] = b[0, 1], b[1, 1]
    s = te.create_schedule(J.op)
    f = tc.build(s, [B, J])           # dC/dA reads only B
    got = np.full((2, 3), np.nan)
    f(b, got)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_head_with_a_prefix(check_llvm, rand):
    A = te.placeholder((4,), name="A", dtype=F)
    C = te.compute((4,), lambda i: A[i] * A[i], name="C")
    H = te.placeholder((2, 4), name="H", dtype=F)
    (dA,) = te.gradient(C, [A], head=H)
    assert tuple(int(s.value) for s in dA.shape) == (2, 4)
    a, h = rand((4,), F), rand((2, 4), F)
    s = te.create_schedule(dA.op)
    check_llvm(s, [A, H, dA], {A: a, H: h}, expected={dA: h * 2 * a})


def test_gradient_of_an_intermediate_and_an_unused_input(check_llvm, rand):
    A = te.placeholder((4,), name="A", dtype=F)
    U = te.placeholder((4,), name="U", dtype=F)
    B = te.compute((4,), lambda i: te.exp(A[i]), name="B")
    C = te.compute((4,), lambda i: B[i] * 3.0, name="C")
    H = te.placeholder((4,), name="H", dtype=F)
    dB, dA, dU = te.gradient(C, [B, A, U], head=H)
    a, h = rand((4,), F), rand((4,), F)
    s = te.create_schedule([dB.op, dA.op, dU.op])
    check_llvm(s, [A, H, dB, dA, dU], {A: a, H: h},
               expected={dB: 3 * h, dA: 3 * h * np.exp(a), dU: np.zeros(4)})


def test_float32_symbolic_shape(rand):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.sigmoid(A[i].astype(F)).astype("float32"), name="B")
    H = te.placeholder((n,), name="H")
    (dA,) = te.gradient(B, [A], H)
    s = te.create_schedule(dA.op)
    f = tc.build(s, [A, H, dA])
    a, h = rand((13,), "float32", -3, 3), rand((13,), "float32")
    out = np.full(13, np.nan, "float32")
    f(a, h, out)
    sg = 1 / (1 + np.exp(-a.astype(F)))
    np.testing.assert_allclose(out, h * sg * (1 - sg), rtol=1e-5, atol=1e-6)


def test_errors_name_the_problem():
    A = te.placeholder((4,), name="A", dtype=F)
    I = te.placeholder((4,), name="I", dtype="int32")
    C = te.compute((4,), lambda i: A[i] * 2.0, name="C")
    with pytest.raises(TEError, match="input 'I' is int32; only float tensors have gradients"):
        te.gradient(C, [I])
    with pytest.raises(TEError, match=r"head 'H' has shape \(3,\); it must end with the output 'C''s shape \(4,\)"):
        te.gradient(C, [A], te.placeholder((3,), name="H", dtype=F))
    with pytest.raises(TEError, match="head 'H' is float32 but the output 'C' is float64"):
        te.gradient(C, [A], te.placeholder((4,), name="H"))
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, t), name="prod")
    k = te.reduce_axis((0, 4), name="k")
    P = te.compute((1,), lambda _: prod(A[k], axis=k), name="P")
    with pytest.raises(TEError, match="stage 'P' reduces with 'prod'; only sum, max and min"):
        te.gradient(P, [A])
    E = te.extern((4,), [A], lambda ins, outs: tc.tir.call_extern("int32", "noop"), name="E", dtype=F)
    Y = te.compute((4,), lambda i: E[i] * 2.0, name="Y")
    with pytest.raises(TEError, match="stage 'E' is a ExternOp; only te.compute stages"):
        te.gradient(Y, [A])
    R = te.compute((4,), lambda i: tc.tir.call_pure_extern(F, "myfn", A[i]), name="R")
    with pytest.raises(TEError, match="stage 'R': the function 'myfn' is not differentiable"):
        te.gradient(R, [A])
