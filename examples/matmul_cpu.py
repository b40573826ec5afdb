"""Matrix multiply on the CPU: the naive schedule, then the classic hand schedule (packing of B,
a write cache per block, vectorized inner axis, unrolled k, parallel rows), both checked
against numpy and timed beside numpy.dot.

    python examples/matmul_cpu.py [size]
"""
import sys
import time

import numpy as np

import tilecraft as tc
from tilecraft import te

N = int(sys.argv[1]) if len(sys.argv) > 1 else 512
bn, kf = 32, 4                                   # block size, k unrolling


def declare(packed: bool):
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    if not packed:
        return A, B, None, te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    # B re-laid out as panels of bn columns, so the inner loop reads it contiguously
    packedB = te.compute((N // bn, N, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * packedB[j // bn, k, j % bn], axis=k), name="C")
    return A, B, packedB, C


def naive():
    A, B, _, C = declare(packed=False)
    return te.create_schedule(C.op), [A, B, C]


def blocked():
    A, B, packedB, C = declare(packed=True)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "global")                        # accumulate a block in a small buffer
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    s[CC].compute_at(s[C], jo)                             # ... one block at a time
    ic, jc = s[CC].op.axis
    (kc,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kc, factor=kf)
    s[CC].reorder(ko, ic, ki, jc)
    s[CC].unroll(ki)
    s[CC].vectorize(jc)
    s[C].parallel(io)
    x, y, z = s[packedB].op.axis
    s[packedB].vectorize(z)
    s[packedB].parallel(x)
    return s, [A, B, C]


a = np.random.rand(N, N).astype("float32")
b = np.random.rand(N, N).astype("float32")
want = a @ b
t0 = time.perf_counter()
for _ in range(5):
    np.dot(a, b)
t_np = (time.perf_counter() - t0) / 5
gflop = 2 * N ** 3 / 1e9
print(f"{N}x{N}x{N} fp32, {tc.get_num_threads()} threads")
print(f"{'numpy.dot':<24}{gflop / t_np:8.1f} GFLOP/s")
for label, make in (("tilecraft naive", naive), ("tilecraft blocked", blocked)):
    s, args = make()
    t0 = time.perf_counter()
    f = tc.build(s, args, target="llvm", name="matmul")
    t_build = time.perf_counter() - t0
    c = np.full((N, N), np.nan, "float32")
    f(a, b, c)
    tc.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
    t = f.time_evaluator(f.entry_name, tc.cpu(0), number=1 if make is naive else 5, repeat=3)(a, b, c).median
    print(f"{label:<24}{gflop / t:8.1f} GFLOP/s  ({t_np / t:.2f} x numpy; lower+build {t_build * 1e3:.0f} ms)")
print("\nthe blocked loop nest:")
print(tc.lower(*blocked(), simple_mode=True))
