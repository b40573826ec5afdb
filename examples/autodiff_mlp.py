"""Reverse-mode autodiff (``te.gradient``): the gradients of a two-layer perceptron's loss,
built as TE stages, compiled for the CPU, checked against numpy and used for a few steps of
gradient descent.

    python examples/autodiff_mlp.py
"""
import time

import numpy as np

import tilecraft as tc
from tilecraft import te

N, D, Hd = 64, 32, 16                        # batch, inputs, hidden units
X = te.placeholder((N, D), name="X")
W1 = te.placeholder((Hd, D), name="W1")
W2 = te.placeholder((Hd,), name="W2")
Y = te.placeholder((N,), name="Y")

k = te.reduce_axis((0, D), name="k")
Z = te.compute((N, Hd), lambda i, j: te.sum(X[i, k] * W1[j, k], axis=k), name="Z")
H = te.compute((N, Hd), lambda i, j: te.tanh(Z[i, j]), name="H")
h = te.reduce_axis((0, Hd), name="h")
P = te.compute((N,), lambda i: te.sum(H[i, h] * W2[h], axis=h), name="P")
b = te.reduce_axis((0, N), name="b")
L = te.compute((1,), lambda _: te.sum((P[b] - Y[b]) * (P[b] - Y[b]) / N, axis=b), name="L")

# 1. The gradients of the loss (the head of a scalar loss is one number: 1.0)
ONE = te.compute((1,), lambda _: te.const(1.0, "float32"), name="one")
t0 = time.perf_counter()
dW1, dW2 = te.gradient(L, [W1, W2], head=ONE)
print(f"te.gradient: {time.perf_counter() - t0:.3f} s; dW1 is stage '{dW1.op.name}' {dW1.shape}")

# 2. A default schedule for loss and gradients; print the loop nest of dW1
s = te.create_schedule([L.op, dW1.op, dW2.op])
print(tc.lower(s, [X, W1, W2, Y, L, dW1, dW2], simple_mode=True))
f = tc.build(s, [X, W1, W2, Y, L, dW1, dW2], target="llvm", name="mlp_grad")

# 3. Check against numpy's hand-written backward pass, then descend
rng = np.random.default_rng(0)
x = rng.standard_normal((N, D)).astype("float32")
w1 = (rng.standard_normal((Hd, D)) * 0.3).astype("float32")
w2 = (rng.standard_normal(Hd) * 0.3).astype("float32")
y = np.sin(x[:, 0]).astype("float32")
loss, g1, g2 = np.zeros(1, "float32"), np.zeros((Hd, D), "float32"), np.zeros(Hd, "float32")
f(x, w1, w2, y, loss, g1, g2)
hid = np.tanh(x @ w1.T)
err = 2 * (hid @ w2 - y) / N
tc.testing.assert_allclose(g2, hid.T @ err, rtol=1e-4, atol=1e-5)
tc.testing.assert_allclose(g1, ((err[:, None] * w2) * (1 - hid ** 2)).T @ x, rtol=1e-4, atol=1e-5)
print("gradients match numpy")
first = float(loss[0])
for step in range(50):
    f(x, w1, w2, y, loss, g1, g2)
    w1 -= 0.5 * g1
    w2 -= 0.5 * g2
print(f"loss {first:.4f} -> {float(loss[0]):.4f} after 50 steps of gradient descent")
assert loss[0] < first
