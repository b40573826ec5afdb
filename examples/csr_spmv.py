"""CSR sparse matrix × vector as a tensor expression with a ragged reduction axis.

The inner loop of a CSR product runs from row_ptr[i] to row_ptr[i + 1]: a reduce axis whose
bounds are tensor loads. tilecraft loads them once per row, and the loop can be scheduled like
any other (here: rows in dynamically balanced parallel chunks, the nonzeros in 8 vector lanes).

    python3 examples/csr_spmv.py
"""
import numpy as np
import scipy.sparse as sp

import tilecraft as tc
from tilecraft import te

m, n, nnz = te.var("m"), te.var("n"), te.var("nnz")
row_ptr = te.placeholder((m + 1,), dtype="int32", name="row_ptr")
col_idx = te.placeholder((nnz,), dtype="int32", name="col_idx")
val = te.placeholder((nnz,), name="val")
x = te.placeholder((n,), name="x")


def row(i):
    j = te.reduce_axis((row_ptr[i], row_ptr[i + 1]), "j")      # a ragged axis
    return te.sum(val[j] * x[col_idx[j]], axis=j)


y = te.compute((m,), row, name="y")
s = te.create_schedule(y.op)
print(tc.lower(s, [row_ptr, col_idx, val, x, y], simple_mode=True))   # the loop

io, ii = s[y].split(y.op.axis[0], factor=16)
s[y].parallel(io)
s[y].pragma(io, "parallel_dynamic", 1)      # chunks of 16 rows handed to threads as they free up
jo, ji = s[y].split(y.op.reduce_axis[0], factor=8)
s[y].vectorize(ji)                           # 8 vector accumulators; the row's tail is guarded
f = tc.build(s, [row_ptr, col_idx, val, x, y], target="llvm", name="csr_spmv")

A = sp.random(2000, 1500, density=0.01, format="csr", dtype=np.float32, random_state=0)
xv = np.random.default_rng(0).uniform(-1, 1, 1500).astype("float32")
out = np.empty(2000, "float32")
f(A.indptr.astype("int32"), A.indices.astype("int32"), A.data, xv, out)
np.testing.assert_allclose(out, A @ xv, rtol=1e-4, atol=1e-5)
print("matches scipy:", A.shape, A.nnz, "nonzeros")

# the same with the ready operator, which takes the scipy matrix itself
from tilecraft.topi import sparse  # noqa: E402
np.testing.assert_allclose(sparse.build_spmv()(A, xv), A @ xv, rtol=1e-4, atol=1e-5)
