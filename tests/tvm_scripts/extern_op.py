"""The steps of TVM's extern_op tutorial (gallery/how_to/work_with_schedules/extern_op.py,
TVM <= 0.14) as a TVM user writes them, with `tvm` imported from tilecraft: a matmul by an extern
call of "tvm.contrib.cblas.matmul" plus a bias, the same through `tvm.contrib.cblas`, and a
Python function registered with `tvm.register_func` called from the generated code. Run by
tests/test_tvm_scripts.py as `python extern_op.py`. Prints OK.

The packed function "tvm.contrib.cblas.matmul" is tilecraft's (numpy's matmul, on numpy's BLAS),
not TVM's C binding of a CBLAS library."""
import numpy as np

import tilecraft as tvm
from tilecraft import te
from tilecraft.contrib import cblas
import tilecraft.testing

if not tvm.get_global_func("tvm.contrib.cblas.matmul", allow_missing=True):
    raise Exception("Not compiled with cblas support; can't build this tutorial")

# -- use extern tensor function ----------------------------------------------------------------
n = 1024
l = 128
m = 235
bias = te.var("bias", dtype="float32")
A = te.placeholder((n, l), name="A")
B = te.placeholder((l, m), name="B")
C = te.extern(
    (n, m),
    [A, B],
    lambda ins, outs: tvm.tir.call_packed(
        "tvm.contrib.cblas.matmul", ins[0], ins[1], outs[0], False, False
    ),
    name="C",
)
D = te.compute(C.shape, lambda i, j: C[i, j] + bias, name="D")
s = te.create_schedule(D.op)

# -- verify the result -------------------------------------------------------------------------
dev = tvm.cpu(0)
f = tvm.build(s, [A, B, D, bias], "llvm")
a = tvm.nd.array(np.random.uniform(size=(n, l)).astype(A.dtype), dev)
b = tvm.nd.array(np.random.uniform(size=(l, m)).astype(B.dtype), dev)
d = tvm.nd.array(np.full((n, m), np.nan, dtype=D.dtype), dev)
bb = 10.0
f(a, b, d, bb)
tvm.testing.assert_allclose(d.numpy(), np.dot(a.numpy(), b.numpy()) + 10, rtol=1e-5)

# -- extern contrib wrappers -------------------------------------------------------------------
from tilecraft.contrib import cblas

C = cblas.matmul(A, B)
D = te.compute(C.shape, lambda i, j: C[i, j] + bias, name="D")
s = te.create_schedule(D.op)
f = tvm.build(s, [A, B, D, bias], "llvm")
d = tvm.nd.array(np.full((n, m), np.nan, dtype=D.dtype), dev)
f(a, b, d, bb)
tvm.testing.assert_allclose(d.numpy(), np.dot(a.numpy(), b.numpy()) + 10, rtol=1e-5)

# -- hook a Python function as extern ----------------------------------------------------------
calls = []


@tvm.register_func("tvm.contrib.my_tvm_addone")
def my_tvm_addone(x, y):
    print("my_tvm_addone signatures: %s, %s" % (type(x), type(y)))
    calls.append((type(x), type(y)))
    tvm.nd.array(x.numpy() + 1).copyto(y)


A = te.placeholder((n,), name="A")
B = te.extern(
    A.shape,
    [A],
    lambda ins, outs: tvm.tir.call_packed("tvm.contrib.my_tvm_addone", ins[0], outs[0]),
    name="C",
)
s = te.create_schedule(B.op)
f = tvm.build(s, [A, B], "llvm")
a = tvm.nd.array(np.random.uniform(size=(n,)).astype(A.dtype), dev)
b = tvm.nd.array(np.full((n,), np.nan, dtype=B.dtype), dev)
f(a, b)
tvm.testing.assert_allclose(b.numpy(), a.numpy() + 1, rtol=1e-5)
assert calls == [(tvm.nd.NDArray, tvm.nd.NDArray)], calls
print("OK")
