"""The steps of TVM's schedule_primitives tutorial (gallery/how_to/work_with_schedules/
schedule_primitives.py, TVM <= 0.14) with `tvm` imported from tilecraft: split (factor, nparts),
tile, fuse, reorder, bind, compute_at, compute_inline, compute_root, each printed with
tvm.lower(..., simple_mode=True) as in the tutorial. Run by tests/test_tvm_scripts.py as
`python schedule_primitives.py`; prints OK.

The tutorial only prints; here each schedule is also built and run on fresh inputs (m = 37,
n = 23: tails for every split) against numpy: on the CPU, the bound one in the CUDA emulator."""
import numpy as np

import tilecraft as tvm
import tilecraft.testing
from tilecraft import te

rng = np.random.default_rng()
M, N = 37, 23


def check(s, args, want, cuda=False):
    """Build (or emulate) ``s`` and compare its output (the last argument) with ``want(inputs)``."""
    ins = [rng.standard_normal([M if str(d) == "m" else N for d in t.shape]).astype("float32") for t in args[:-1]]
    out = np.full([M if str(d) == "m" else N for d in args[-1].shape], np.nan, "float32")
    if cuda:
        from tilecraft.codegen.cuda_emulate import emulate
        emulate(tvm.lower(s, args, target="cuda"), ins + [out])
    else:
        tvm.build(s, args, "llvm")(*ins, out)
    tvm.testing.assert_allclose(out, want(*ins), rtol=1e-6)


# declare some variables for use later
n = te.var("n")
m = te.var("m")

# declare a matrix element-wise multiply
A = te.placeholder((m, n), name="A")
B = te.placeholder((m, n), name="B")
C = te.compute((m, n), lambda i, j: A[i, j] * B[i, j], name="C")
s = te.create_schedule([C.op])
print(tvm.lower(s, [A, B, C], simple_mode=True))
check(s, [A, B, C], lambda a, b: a * b)

# split
A = te.placeholder((m,), name="A")
B = te.compute((m,), lambda i: A[i] * 2, name="B")
s = te.create_schedule(B.op)
xo, xi = s[B].split(B.op.axis[0], factor=32)
print(tvm.lower(s, [A, B], simple_mode=True))
check(s, [A, B], lambda a: a * 2)

A = te.placeholder((m,), name="A")
B = te.compute((m,), lambda i: A[i], name="B")
s = te.create_schedule(B.op)
bx, tx = s[B].split(B.op.axis[0], nparts=32)
print(tvm.lower(s, [A, B], simple_mode=True))
check(s, [A, B], lambda a: a)

# tile
A = te.placeholder((m, n), name="A")
B = te.compute((m, n), lambda i, j: A[i, j], name="B")
s = te.create_schedule(B.op)
xo, yo, xi, yi = s[B].tile(B.op.axis[0], B.op.axis[1], x_factor=10, y_factor=5)
print(tvm.lower(s, [A, B], simple_mode=True))
check(s, [A, B], lambda a: a)

# fuse
A = te.placeholder((m, n), name="A")
B = te.compute((m, n), lambda i, j: A[i, j], name="B")
s = te.create_schedule(B.op)
xo, yo, xi, yi = s[B].tile(B.op.axis[0], B.op.axis[1], x_factor=10, y_factor=5)
fused = s[B].fuse(xi, yi)
print(tvm.lower(s, [A, B], simple_mode=True))
check(s, [A, B], lambda a: a)

# reorder
A = te.placeholder((m, n), name="A")
B = te.compute((m, n), lambda i, j: A[i, j], name="B")
s = te.create_schedule(B.op)
xo, yo, xi, yi = s[B].tile(B.op.axis[0], B.op.axis[1], x_factor=10, y_factor=5)
s[B].reorder(xi, yo, xo, yi)
print(tvm.lower(s, [A, B], simple_mode=True))
check(s, [A, B], lambda a: a)

# bind
A = te.placeholder((n,), name="A")
B = te.compute(A.shape, lambda i: A[i] * 2, name="B")
s = te.create_schedule(B.op)
bx, tx = s[B].split(B.op.axis[0], factor=64)
s[B].bind(bx, te.thread_axis("blockIdx.x"))
s[B].bind(tx, te.thread_axis("threadIdx.x"))
print(tvm.lower(s, [A, B], simple_mode=True))
check(s, [A, B], lambda a: a * 2, cuda=True)

# compute_at
A = te.placeholder((m,), name="A")
B = te.compute((m,), lambda i: A[i] + 1, name="B")
C = te.compute((m,), lambda i: B[i] * 2, name="C")
s = te.create_schedule(C.op)
print(tvm.lower(s, [A, B, C], simple_mode=True))

A = te.placeholder((m,), name="A")
B = te.compute((m,), lambda i: A[i] + 1, name="B")
C = te.compute((m,), lambda i: B[i] * 2, name="C")
s = te.create_schedule(C.op)
s[B].compute_at(s[C], C.op.axis[0])
print(tvm.lower(s, [A, B, C], simple_mode=True))
check(s, [A, C], lambda a: (a + 1) * 2)

# compute_inline
A = te.placeholder((m,), name="A")
B = te.compute((m,), lambda i: A[i] + 1, name="B")
C = te.compute((m,), lambda i: B[i] * 2, name="C")
s = te.create_schedule(C.op)
s[B].compute_inline()
print(tvm.lower(s, [A, B, C], simple_mode=True))
check(s, [A, C], lambda a: (a + 1) * 2)

# compute_root
A = te.placeholder((m,), name="A")
B = te.compute((m,), lambda i: A[i] + 1, name="B")
C = te.compute((m,), lambda i: B[i] * 2, name="C")
s = te.create_schedule(C.op)
s[B].compute_at(s[C], C.op.axis[0])
s[B].compute_root()
print(tvm.lower(s, [A, B, C], simple_mode=True))
check(s, [A, C], lambda a: (a + 1) * 2)
print("OK")
