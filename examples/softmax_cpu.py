"""Row softmax: four stages (max, exp, sum, divide), the first three computed inside the row loop
of the last with compute_at, rows in parallel. Checked against numpy and the reference
interpreter.

    python examples/softmax_cpu.py
"""
import numpy as np

import tilecraft as tc
from tilecraft import te
from tilecraft.interp import evaluate

m, n = 256, 1000
A = te.placeholder((m, n), name="A")
k1 = te.reduce_axis((0, n), name="k1")
k2 = te.reduce_axis((0, n), name="k2")
row_max = te.compute((m,), lambda i: te.max(A[i, k1], axis=k1), name="row_max")
e = te.compute((m, n), lambda i, j: te.exp(A[i, j] - row_max[i]), name="e")
row_sum = te.compute((m,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
out = te.compute((m, n), lambda i, j: e[i, j] / row_sum[i], name="out")

s = te.create_schedule(out.op)
i, j = out.op.axis
for t in (row_max, e, row_sum):
    s[t].compute_at(s[out], i)        # each row's intermediates live in small per-row buffers
s[out].parallel(i)
jo, ji = s[out].split(j, factor=16)
s[out].vectorize(ji)
print(tc.lower(s, [A, out], simple_mode=True))

f = tc.build(s, [A, out], target="llvm", name="softmax")
a = np.random.randn(m, n).astype("float32")
o = np.empty_like(a)
f(a, o)
x = np.exp(a - a.max(1, keepdims=True))
tc.testing.assert_allclose(o, x / x.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
tc.testing.assert_allclose(o, evaluate(out, {A: a}), rtol=1e-5, atol=1e-7)
print("softmax matches numpy and the reference interpreter; rows sum to", o.sum(1)[:3])
t = f.time_evaluator(f.entry_name, tc.cpu(0), number=20, repeat=3)(a, o).median


def numpy_softmax(a):
    x = np.exp(a - a.max(1, keepdims=True))
    return x / x.sum(1, keepdims=True)


import timeit
t_np = min(timeit.repeat(lambda: numpy_softmax(a), number=20, repeat=3)) / 20
print(f"{m}x{n} softmax: tilecraft {t * 1e6:.0f} us, numpy {t_np * 1e6:.0f} us")
