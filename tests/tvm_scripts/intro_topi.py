"""The steps of TVM's TOPI tutorial (gallery/tutorial/intro_topi.py, TVM <= 0.14) with `tvm`
imported from tilecraft: a row sum by hand and as `topi.sum`, tensor arithmetic with
broadcasting and `topi.elemwise_sum`, `topi.cuda.schedule_reduce` under `tvm.target.cuda()`
built for "cuda", `topi.cuda.schedule_softmax` of `topi.nn.softmax`, `topi.cuda.conv2d_nchw` +
`topi.nn.relu` with `topi.cuda.schedule_conv2d_nchw`. Run by tests/test_tvm_scripts.py as
`python intro_topi.py`; prints OK.

Changes besides the imports: `tvm.lower(s, [A])` of a schedule whose output is not an argument
is `tvm.lower(s, [A, B])` (tilecraft refuses an output left out of the arguments, where TVM
allocates it inside the function); the tutorial runs the reduction on a GPU; here (no GPU) the kernel
is built for "cuda" (nvcc where present) and run in tilecraft's CUDA emulator, with `--gpu` on
the device. The softmax and conv2d kernels, which the tutorial only prints, are also run
(emulated at a smaller size, or at the tutorial's with `--gpu`) against numpy; outputs start as
NaN, not zeros."""
import sys

import numpy as np

import tilecraft as tvm
import tilecraft.testing
from tilecraft import te
from tilecraft import topi

GPU = "--gpu" in sys.argv
rng = np.random.default_rng()


def run_cuda(s, args, inputs, want, rtol=1e-5):
    """Run the CUDA kernel on the GPU (--gpu) or in the emulator, against numpy."""
    out = np.full(want.shape, np.nan, want.dtype)
    if GPU:
        dev = tvm.cuda(0)
        func = tvm.build(s, args, "cuda")
        nd_out = tvm.nd.array(out, dev)
        func(*[tvm.nd.array(x, dev) for x in inputs], nd_out)
        out = nd_out.numpy()
    else:
        from tilecraft.codegen.cuda_emulate import emulate
        emulate(tvm.lower(s, args, target="cuda"), [*inputs, out])
    tvm.testing.assert_allclose(out, want, rtol=rtol, atol=1e-5)


n = te.var("n")
m = te.var("m")
A = te.placeholder((n, m), name="A")
k = te.reduce_axis((0, m), "k")
B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
s = te.create_schedule(B.op)
print(tvm.lower(s, [A, B], simple_mode=True))

C = topi.sum(A, axis=1)
ts = te.create_schedule(C.op)
print(tvm.lower(ts, [A, C], simple_mode=True))
a_np = rng.standard_normal((13, 7)).astype("float32")
c_np = np.full(13, np.nan, "float32")
tvm.build(ts, [A, C], "llvm")(a_np, c_np)
tvm.testing.assert_allclose(c_np, a_np.sum(1), rtol=1e-5)

x, y = 100, 10
a = te.placeholder((x, y, y), name="a")
b = te.placeholder((y, y), name="b")
c = a + b  # same as topi.broadcast_add
d = a * b  # same as topi.broadcast_mul

e = topi.elemwise_sum([c, d])
f = e / 2.0
g = topi.sum(f)
with tvm.target.cuda():
    sg = topi.cuda.schedule_reduce(g)
    print(tvm.lower(sg, [a, b, g], simple_mode=True))
print(sg.stages)

func = tvm.build(sg, [a, b, g], "cuda")
a_np = np.random.uniform(size=(x, y, y)).astype(a.dtype)
b_np = np.random.uniform(size=(y, y)).astype(b.dtype)
g_np = np.sum(np.add(a_np + b_np, a_np * b_np) / 2.0)
run_cuda(sg, [a, b, g], [a_np, b_np], np.asarray(g_np, "float32"))

rows, cols = (512, 512) if GPU else (24, 150)
tarray = te.placeholder((512, 512), name="tarray")
softmax_topi = topi.nn.softmax(tarray)
with tvm.target.Target("cuda"):
    sst = topi.cuda.schedule_softmax(softmax_topi)
    print(tvm.lower(sst, [tarray, softmax_topi], simple_mode=True))
small = te.placeholder((rows, cols), name="tarray")
sm = topi.nn.softmax(small)
with tvm.target.Target("cuda"):
    sst = topi.cuda.schedule_softmax(sm)
t_np = rng.standard_normal((rows, cols)).astype("float32")
ex = np.exp(t_np - t_np.max(1, keepdims=True))
run_cuda(sst, [small, sm], [t_np], ex / ex.sum(1, keepdims=True))

data = te.placeholder((1, 3, 224, 224))
kernel = te.placeholder((10, 3, 5, 5))

with tvm.target.Target("cuda"):
    conv = topi.cuda.conv2d_nchw(data, kernel, 1, 2, 1)
    out = topi.nn.relu(conv)
    sconv = topi.cuda.schedule_conv2d_nchw([out])
    print(tvm.lower(sconv, [data, kernel, out], simple_mode=True))

hw = 224 if GPU else 20
data = te.placeholder((1, 3, hw, hw))
with tvm.target.Target("cuda"):
    conv = topi.cuda.conv2d_nchw(data, kernel, 1, 2, 1)
    out = topi.nn.relu(conv)
    sconv = topi.cuda.schedule_conv2d_nchw([out])
d_np = rng.standard_normal((1, 3, hw, hw)).astype("float32")
k_np = rng.standard_normal((10, 3, 5, 5)).astype("float32")
want = np.maximum(tvm.topi.testing.conv2d_nchw_python(d_np, k_np, 1, 2), 0).astype("float32")
run_cuda(sconv, [data, kernel, out], [d_np, k_np], want, rtol=1e-4)
print("OK")
