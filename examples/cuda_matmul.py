"""Matrix multiply on an NVIDIA GPU, written out step by step: thread binding, shared-memory tiles
fetched by all threads of a block, a register tile, then build, run, check and time.

    python examples/cuda_matmul.py [size]

Without a GPU (or without pycuda) it still prints the lowered IR and the CUDA C, checks the
kernel in the CPU emulator on a small size, and compiles it with nvcc if nvcc is there.
"""
import sys

import numpy as np

import tilecraft as tc
from tilecraft import te

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1024


def schedule(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])          # tiles of A and B in shared memory
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")               # the accumulators in registers

    i, j = s[C].op.axis
    bi, ii = s[C].split(i, factor=64)            # a 64x64 tile of C per block
    bj, jj = s[C].split(j, factor=64)
    ti, ii = s[C].split(ii, nparts=16)           # 16x16 threads, 4x4 results each
    tj, jj = s[C].split(jj, nparts=16)
    s[C].reorder(bi, bj, ti, tj, ii, jj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))

    s[CL].compute_at(s[C], tj)                   # each thread accumulates its 4x4 tile
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=16)
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    s[CL].unroll(ki)
    s[AS].compute_at(s[CL], ko)                  # fetch a 64x16 tile of A and 16x64 of B per ko
    s[BS].compute_at(s[CL], ko)
    for X in (AS, BS):                           # ... cooperatively: 256 threads, 4 floats each
        f = s[X].fuse(*s[X].op.axis)
        f, v = s[X].split(f, factor=4)
        f, t = s[X].split(f, factor=256)
        t_y, t_x = s[X].split(t, factor=16)
        s[X].bind(t_y, te.thread_axis("threadIdx.y"))
        s[X].bind(t_x, te.thread_axis("threadIdx.x"))
        s[X].vectorize(v)                        # 16-byte loads and stores
    return s, [A, B, C]


s, args = schedule(64)
print(tc.lower(s, args, target="cuda"))          # barriers are placed by the compiler
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_emulate import emulate
print(generate_cuda(tc.lower(s, args, target="cuda")).split("extern \"C\"")[1][:1500], "...")

a = np.random.rand(64, 64).astype("float32")
b = np.random.rand(64, 64).astype("float32")
c = np.full((64, 64), np.nan, "float32")
emulate(tc.lower(s, args, target="cuda"), [a, b, c])   # lock-step CPU emulation, race checks
np.testing.assert_allclose(c, a @ b, rtol=1e-5)
print("emulator: correct on 64x64")

try:
    s, args = schedule(N)
    mod = tc.build(s, args, target="cuda")       # CUDA C -> nvcc -> cubin (cached on disk)
except Exception as e:
    sys.exit(f"could not compile ({e}); is nvcc installed?")
try:
    from tilecraft.runtime import cuda_ndarray
    dev = tc.cuda(0)
    a = np.random.rand(N, N).astype("float32")
    b = np.random.rand(N, N).astype("float32")
    A_, B_ = cuda_ndarray.array(a, dev), cuda_ndarray.array(b, dev)
    C_ = cuda_ndarray.empty((N, N), "float32", dev)
    mod(A_, B_, C_)
except RuntimeError as e:
    sys.exit(f"compiled; not run: {e}")
np.testing.assert_allclose(C_.numpy(), a @ b, rtol=1e-4)
t = mod.time_evaluator(mod.entry_name, dev, number=20, repeat=5)(A_, B_, C_).median
print(f"{N}x{N}x{N}: {2 * N**3 / t / 1e12:.2f} TFLOP/s ({t * 1e3:.3f} ms, CUDA events, median of 5)")
