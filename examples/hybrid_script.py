"""Hybrid script (``te.hybrid.script``): a kernel written as plain Python loops. Called with
tensors it is a stage that compiles with the rest of the graph; called with numpy arrays it runs
as Python (handy for checking it).

    python examples/hybrid_script.py
"""
import numpy as np

import tilecraft as tc
from tilecraft import te


@te.hybrid.script
def running_max(a):
    """Per row, the running maximum of the row and where it was reached."""
    best = output_tensor(a.shape, a.dtype)
    where = output_tensor(a.shape, "int32")
    for i in parallel(a.shape[0]):
        m = a[i, 0]
        k = 0
        for j in range(a.shape[1]):
            if a[i, j] > m:
                m = a[i, j]
                k = j
            best[i, j] = m
            where[i, j] = k
    return best, where


n = te.var("n")
A = te.placeholder((n, 100), name="A")
best, where = running_max(A)                    # two tensors of one HybridOp stage
scaled = te.compute(best.shape, lambda i, j: best[i, j] * 2.0, name="scaled")
s = te.create_schedule(scaled.op)
print(tc.lower(s, [A, scaled, where], simple_mode=True))
f = tc.build(s, [A, scaled, where], target="llvm")

a = np.random.default_rng(0).standard_normal((37, 100)).astype("float32")
out, idx = np.empty((37, 100), "float32"), np.empty((37, 100), "int32")
f(a, out, idx)
tc.testing.assert_allclose(out, 2 * np.maximum.accumulate(a, axis=1))
py_best, py_where = running_max(a)             # the same script, run as Python on numpy arrays
np.testing.assert_array_equal(idx, py_where)
print("compiled hybrid script matches numpy and the script run as Python")
