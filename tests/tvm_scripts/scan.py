"""The steps of TVM's scan tutorial (gallery/how_to/work_with_schedules/scan.py, TVM <= 0.14) as a
TVM user writes them, with `tvm` imported from tilecraft: a cumulative sum over the rows of X
scheduled for the GPU, a scan cell of two stages (one computed at the other), and a scan with two
states. Run by tests/test_tvm_scripts.py as `python scan.py`; prints OK.

The tutorial builds its first scan for "cuda" and runs it on a GPU. Here, on a machine without one,
the kernels are generated, compiled with nvcc (when present) and run in tilecraft's CPU emulator of
CUDA; with `--gpu` they run on the GPU as in the tutorial. The other two scans are printed (as in
the tutorial) and, in addition, built for "llvm" and checked against numpy."""
import sys

import numpy as np

import tilecraft as tvm
import tilecraft.testing
from tilecraft import te

GPU = "--gpu" in sys.argv

# -- the scan: cumsum over the rows of X -------------------------------------------------------
m = te.var("m")
n = te.var("n")
X = te.placeholder((m, n), name="X")
s_state = te.placeholder((m, n))
s_init = te.compute((1, n), lambda _, i: X[0, i])
s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i])
s_scan = tvm.te.scan(s_init, s_update, s_state, inputs=[X])

# -- schedule the scan cell --------------------------------------------------------------------
s = te.create_schedule(s_scan.op)
num_thread = 256
block_x = te.thread_axis("blockIdx.x")
thread_x = te.thread_axis("threadIdx.x")
xo, xi = s[s_init].split(s_init.op.axis[1], factor=num_thread)
s[s_init].bind(xo, block_x)
s[s_init].bind(xi, thread_x)
xo, xi = s[s_update].split(s_update.op.axis[1], factor=num_thread)
s[s_update].bind(xo, block_x)
s[s_update].bind(xi, thread_x)
print(tvm.lower(s, [X, s_scan], simple_mode=True))

# -- build and verify --------------------------------------------------------------------------
if GPU:
    fscan = tvm.build(s, [X, s_scan], "cuda", name="myscan")
    dev = tvm.cuda(0)
    n = 1024
    m = 10
    a_np = np.random.uniform(size=(m, n)).astype(s_scan.dtype)
    a = tvm.nd.array(a_np, dev)
    b = tvm.nd.array(np.zeros((m, n), dtype=s_scan.dtype), dev)
    fscan(a, b)
    tvm.testing.assert_allclose(b.numpy(), np.cumsum(a_np, axis=0))
else:
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
    from tilecraft.codegen.cuda_emulate import emulate

    f = tvm.lower(s, [X, s_scan], target="cuda", name="myscan")
    if find_nvcc() is not None:
        compile_cuda(generate_cuda(f))
    a_np = np.random.uniform(size=(10, 300)).astype(s_scan.dtype)      # small: the emulator is slow
    b_np = np.full((10, 300), np.nan, dtype=s_scan.dtype)
    emulate(f, [a_np, b_np])
    tvm.testing.assert_allclose(b_np, np.cumsum(a_np, axis=0), rtol=1e-5)

# -- multi-stage scan cell ---------------------------------------------------------------------
m = te.var("m")
n = te.var("n")
X = te.placeholder((m, n), name="X")
s_state = te.placeholder((m, n))
s_init = te.compute((1, n), lambda _, i: X[0, i])
s_update_s1 = te.compute((m, n), lambda t, i: s_state[t - 1, i] * 2, name="s1")
s_update_s2 = te.compute((m, n), lambda t, i: s_update_s1[t, i] + X[t, i], name="s2")
s_scan = tvm.te.scan(s_init, s_update_s2, s_state, inputs=[X])

s = te.create_schedule(s_scan.op)
xo, xi = s[s_update_s2].split(s_update_s2.op.axis[1], factor=32)
s[s_update_s1].compute_at(s[s_update_s2], xo)
print(tvm.lower(s, [X, s_scan], simple_mode=True))

f = tvm.build(s, [X, s_scan], "llvm")
a_np = np.random.uniform(size=(6, 70)).astype("float32")
b_np = np.full((6, 70), np.nan, dtype="float32")
f(a_np, b_np)
want = a_np.astype("float64")
for t in range(1, 6):
    want[t] = want[t - 1] * 2 + a_np[t]
tvm.testing.assert_allclose(b_np, want, rtol=1e-5)

# -- multiple states ---------------------------------------------------------------------------
m = te.var("m")
n = te.var("n")
l = te.var("l")
X = te.placeholder((m, n), name="X")
s_state1 = te.placeholder((m, n))
s_state2 = te.placeholder((m, l))
s_init1 = te.compute((1, n), lambda _, i: X[0, i])
s_init2 = te.compute((1, l), lambda _, i: 0.0)
s_update1 = te.compute((m, n), lambda t, i: s_state1[t - 1, i] + X[t, i])
s_update2 = te.compute((m, l), lambda t, i: s_state2[t - 1, i] + s_state1[t - 1, 0])
s_scan1, s_scan2 = tvm.te.scan(
    [s_init1, s_init2], [s_update1, s_update2], [s_state1, s_state2], inputs=[X]
)
s = te.create_schedule(s_scan1.op)
print(tvm.lower(s, [X, s_scan1, s_scan2], simple_mode=True))

f = tvm.build(s, [X, s_scan1, s_scan2], "llvm")
b1 = np.full((6, 70), np.nan, dtype="float32")
b2 = np.full((6, 3), np.nan, dtype="float32")
f(a_np, b1, b2)
want1 = np.cumsum(a_np.astype("float64"), axis=0)
want2 = np.zeros((6, 3))
for t in range(1, 6):
    want2[t] = want2[t - 1] + want1[t - 1, 0]
tvm.testing.assert_allclose(b1, want1, rtol=1e-5)
tvm.testing.assert_allclose(b2, want2, rtol=1e-5)
print("OK")
