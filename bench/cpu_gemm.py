"""fp32 GEMM on the CPU: tilecraft's hand schedule (and the naive one) beside numpy.dot.

    python bench/cpu_gemm.py                 # 1024x1024x1024, 2 threads
    python bench/cpu_gemm.py --size 512 --threads 1 --repeat 9

Prints GFLOP/s medians measured in the same run (each side in its own process, in turns:
``process_timing.py``), the ratio to numpy (OpenBLAS), and the time to lower + build + machine
code of the hand schedule (median of 10).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1024, help="M = N = K")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=7, help="timed repeats (median is reported)")
    p.add_argument("--skip-naive", action="store_true")
    return p.parse_args(argv)


def register_tile() -> tuple[int, int]:
    """(mr, nr) for the host: an mr x nr accumulator tile of two vector registers per row that
    fits the register file (AVX2: 16 ymm → 4 x 16; AVX-512: 32 zmm → 8 x 32)."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    feats = llvm.get_host_cpu_features()
    if feats.get("avx512f"):
        return 8, 32
    return 4, 16


def hand_schedule(M: int, N: int, K: int, dtype: str = "float32", mb: int = 64, nb: int = 64,
                  kc: int = 256, mr: int | None = None, nr: int | None = None):
    """The classic blocked GEMM: B packed into nr-wide panels, a write cache per (mb x nb) block
    attached at the block, an mr x nr register tile (rows unrolled, columns vectorized) that
    accumulates over a kc-long slice of k, and the row blocks run in parallel."""
    from tilecraft import te
    if mr is None or nr is None:
        mr, nr = register_tile()
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    packedB = te.compute((N // nr, K, nr), lambda x, y, z: B[y, x * nr + z], name="packedB")
    C = te.compute((M, N), lambda x, y: te.sum(A[x, k] * packedB[y // nr, k, te.indexmod(y, nr)], axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], mb, nb)
    s[CC].compute_at(s[C], yo)
    xc, yc = s[CC].op.axis
    (kk,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kk, factor=kc)
    xco, xci = s[CC].split(xc, factor=mr)
    yco, yci = s[CC].split(yc, factor=nr)
    s[CC].reorder(ko, yco, xco, ki, xci, yci)
    s[CC].unroll(xci)
    s[CC].vectorize(yci)
    yio, yii = s[C].split(yi, factor=nr)
    s[C].vectorize(yii)
    s[C].parallel(xo)
    x, y, z = s[packedB].op.axis
    s[packedB].vectorize(z)
    s[packedB].parallel(x)
    return s, [A, B, C]


def naive_schedule(M: int, N: int, K: int, dtype: str = "float32"):
    from tilecraft import te
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda x, y: te.sum(A[x, k] * B[k, y], axis=k), name="C")
    return te.create_schedule(C.op), [A, B, C]


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def gemm_inputs(n: int):
    """Seeded inputs (every worker process has the same) and the float64 product."""
    import numpy as np
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def setup_hand(n: int):
    """The hand schedule, built and checked (a contestant of ``process_timing``)."""
    import numpy as np
    import tilecraft as tc
    a, b, ref = gemm_inputs(n)
    f = tc.build(*hand_schedule(n, n, n), target="llvm", name="gemm")
    c = np.full((n, n), np.nan, dtype=np.float32)
    f(a, b, c)
    err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
    assert err < 1e-5, f"hand-scheduled GEMM is wrong: relative error {err:.2e}"
    return lambda: f(a, b, c)


def setup_numpy(n: int):
    import numpy as np
    a, b, _ = gemm_inputs(n)
    return lambda: np.dot(a, b)


def main(argv=None):
    args = parse_args(argv)
    os.environ["TILECRAFT_NUM_THREADS"] = str(args.threads)
    import numpy as np
    import tilecraft as tc

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import process_timing

    tc.set_num_threads(args.threads)
    n = args.size
    flops = 2.0 * n * n * n
    compile_times = []
    for _ in range(10):
        t0 = time.perf_counter()
        s, targs = hand_schedule(n, n, n)
        f = tc.build(s, targs, target="llvm", name="gemm")
        f.artifact.engine          # machine code (build() defers it to the first use)
        compile_times.append(time.perf_counter() - t0)

    # Each side in its own process (process_timing): two thread pools in one process (libgomp's
    # and OpenBLAS's) spin for a while after each call and on 2 cores steal the other's cycles.
    me = os.path.abspath(__file__)
    t = process_timing.time_apart({"tilecraft": process_timing.Contestant(me, "setup_hand", {"n": n}),
                                   "numpy": process_timing.Contestant(me, "setup_numpy", {"n": n})},
                                  threads=args.threads, rounds=args.repeat)
    tc_g, np_g = flops / t["tilecraft"].median / 1e9, flops / t["numpy"].median / 1e9
    a, b, ref = gemm_inputs(n)

    naive_g = None
    if not args.skip_naive:
        s, targs = naive_schedule(n, n, n)
        g = tc.build(s, targs, target="llvm", name="gemm_naive")
        c2 = np.full((n, n), np.nan, dtype=np.float32)
        g(a, b, c2)
        err2 = np.linalg.norm(c2 - ref) / np.linalg.norm(ref)
        assert err2 < 1e-5, f"naive GEMM is wrong: relative error {err2:.2e}"
        t = g.time_evaluator(g.entry_name, tc.cpu(0), number=1, repeat=3)(a, b, c2)
        naive_g = flops / t.median / 1e9

    import llvmlite.binding as llvm
    mr, nr = register_tile()
    print(f"# fp32 GEMM {n}x{n}x{n}, threads={args.threads}, cpu={llvm.get_host_cpu_name()} "
          f"({platform.machine()}), register tile {mr}x{nr}, numpy {np.__version__}, "
          f"median of {args.repeat} rounds, each side in its own process")
    print(f"{'variant':<28}{'GFLOP/s':>10}{'vs numpy':>10}")
    print(f"{'numpy.dot (OpenBLAS)':<28}{np_g:>10.1f}{1.0:>10.2f}")
    print(f"{'tilecraft hand schedule':<28}{tc_g:>10.1f}{tc_g / np_g:>10.2f}")
    if naive_g is not None:
        print(f"{'tilecraft naive schedule':<28}{naive_g:>10.1f}{naive_g / np_g:>10.2f}")
    print(f"lower+build+machine code of the hand schedule: median {median(compile_times) * 1e3:.1f} ms over 10 "
          f"(min {min(compile_times) * 1e3:.1f} ms)")
    return tc_g / np_g


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
