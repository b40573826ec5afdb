"""The steps of TVM's reduction tutorial (gallery/how_to/work_with_schedules/reduction.py,
TVM <= 0.14) with `tvm` imported from tilecraft: the row sum (default, split, bound to GPU
threads), rfactor, the cross-thread reduction with set_store_predicate built for "cuda", a 2-D
convolution as a 2-D reduction, and a commutative reducer. Run by tests/test_tvm_scripts.py as
`python reduction.py`; prints OK.

The tutorial runs the cross-thread kernel on a GPU; here (no GPU) it is compiled with nvcc and
run in tilecraft's CUDA emulator, with `--gpu` on the device. The schedules the tutorial only
prints are also built for the CPU and checked against numpy, and outputs start as NaN, not zeros."""
import sys

import numpy as np

import tilecraft as tvm
import tilecraft.testing
from tilecraft import te

GPU = "--gpu" in sys.argv
rng = np.random.default_rng()
a_np = rng.uniform(size=(45, 37)).astype("float32")      # tails for the splits by 32 and 16


def check_cpu(s, args, inputs, want, rtol=1e-5):
    out = np.full(want.shape, np.nan, want.dtype)
    tvm.build(s, args, "llvm")(*inputs, out)
    tvm.testing.assert_allclose(out, want, rtol=rtol)


n = te.var("n")
m = te.var("m")
A = te.placeholder((n, m), name="A")
k = te.reduce_axis((0, m), "k")
B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")

s = te.create_schedule(B.op)
print(tvm.lower(s, [A, B], simple_mode=True))
check_cpu(s, [A, B], [a_np], a_np.sum(1))

ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
xo, xi = s[B].split(B.op.axis[0], factor=32)
print(tvm.lower(s, [A, B], simple_mode=True))
check_cpu(s, [A, B], [a_np], a_np.sum(1))

s[B].bind(xo, te.thread_axis("blockIdx.x"))
s[B].bind(xi, te.thread_axis("threadIdx.x"))
print(tvm.lower(s, [A, B], simple_mode=True))

s = te.create_schedule(B.op)
ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
BF = s.rfactor(B, ki)
print(tvm.lower(s, [A, B], simple_mode=True))
check_cpu(s, [A, B], [a_np], a_np.sum(1))
print(s[B].op.body)

xo, xi = s[B].split(s[B].op.axis[0], factor=32)
s[B].bind(xo, te.thread_axis("blockIdx.x"))
s[B].bind(xi, te.thread_axis("threadIdx.y"))
tx = te.thread_axis("threadIdx.x")
s[B].bind(s[B].op.reduce_axis[0], tx)
s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
s[B].set_store_predicate(tx.var.equal(0))
fcuda = tvm.build(s, [A, B], "cuda")
print(fcuda.imported_modules[0].get_source())

if GPU:
    nn = 128
    dev = tvm.cuda(0)
    a = tvm.nd.array(np.random.uniform(size=(nn, nn)).astype(A.dtype), dev)
    b = tvm.nd.array(np.full(nn, np.nan, dtype=B.dtype), dev)
    fcuda(a, b)
    tvm.testing.assert_allclose(b.numpy(), np.sum(a.numpy(), axis=1), rtol=1e-4)
else:
    from tilecraft.codegen.cuda_emulate import emulate
    b_np = np.full(45, np.nan, "float32")
    emulate(tvm.lower(s, [A, B], target="cuda"), [a_np, b_np])
    tvm.testing.assert_allclose(b_np, a_np.sum(1), rtol=1e-4)

n = te.var("n")
Input = te.placeholder((n, n), name="Input")
Filter = te.placeholder((3, 3), name="Filter")
di = te.reduce_axis((0, 3), name="di")
dj = te.reduce_axis((0, 3), name="dj")
Output = te.compute(
    (n - 2, n - 2),
    lambda i, j: te.sum(Input[i + di, j + dj] * Filter[di, dj], axis=[di, dj]),
    name="Output",
)
s = te.create_schedule(Output.op)
print(tvm.lower(s, [Input, Filter, Output], simple_mode=True))
inp = rng.standard_normal((11, 11)).astype("float32")
flt = rng.standard_normal((3, 3)).astype("float32")
want = sum(inp[i:i + 9, j:j + 9] * flt[i, j] for i in range(3) for j in range(3))
check_cpu(s, [Input, Filter, Output], [inp, flt], want, rtol=1e-4)

n = te.var("n")
m = te.var("m")
product = te.comm_reducer(lambda x, y: x * y, lambda t: tvm.tir.const(1, dtype=t), name="product")
A = te.placeholder((n, m), name="A")
k = te.reduce_axis((0, m), name="k")
B = te.compute((n,), lambda i: product(A[i, k], axis=k), name="B")
s = te.create_schedule(B.op)
p_np = rng.uniform(0.5, 1.5, size=(9, 13)).astype("float32")
check_cpu(s, [A, B], [p_np], p_np.prod(1), rtol=1e-4)
print("OK")
