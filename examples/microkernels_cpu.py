"""CPU micro-kernels: a GEMM tensorized with an FMA register tile, and an int8 dense layer.

    python examples/microkernels_cpu.py
    python examples/microkernels_cpu.py --target "llvm -mcpu=znver3"    # build for AVX2 (runs on any AVX2 host)

1. The register tile itself: ``gemm_fp32(8, 32, 256)`` is ``C[8, 32] += A[8, 256] @ B[256, 32]``
   as a tensor intrinsic; tensorizing a blocked GEMM's inner loops with it puts 16 vector
   accumulators (AVX-512; 8 × 16 on AVX2 uses 8) in registers. The hot loop of the machine code
   is printed.
2. The ready templates: ``topi/matmul_tensorized.llvm`` (fp32) and ``topi/dense_int8.llvm``
   (uint8 × int8 → int32, VNNI where the target has it), untuned configs, against numpy.
   ``tilecraft tune matmul_tensorized 1024 1024 1024`` tunes the first.
"""
import argparse
import sys
import time

import numpy as np

import tilecraft as tc
import tilecraft.autotune as autotune
from tilecraft import te
from tilecraft.topi import cpu_intrinsics
from tilecraft.topi import matmul_microkernel  # noqa: F401  (registers the templates)


def tensorized_gemm(M, N, K, isa):
    """C = A @ B, B packed in nr-wide panels, the register tile tensorized."""
    mr, nr, kc = 8 if isa.lanes == 16 else 4, 2 * isa.lanes, min(256, K)
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    Bp = te.compute((N // nr, K, nr), lambda x, k, z: B[k, x * nr + z], name="Bp")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * Bp[j // nr, k, j % nr], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, mi = s[C].split(C.op.axis[0], factor=mr)
    jo, ni = s[C].split(C.op.axis[1], factor=nr)
    ko, ki = s[C].split(k, factor=kc)
    s[C].reorder(io, jo, ko, mi, ni, ki)
    s[C].parallel(io)
    s[C].tensorize(mi, cpu_intrinsics.gemm_fp32(mr, nr, kc, isa=isa, unroll=4))
    s[Bp].parallel(Bp.op.axis[0])
    return s, [A, B, C]


def gflops(f, args, flop):
    t = f.time_evaluator(f.entry_name, tc.cpu(0), number=3, repeat=5)(*args).median
    return flop / t / 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="llvm")
    p.add_argument("--n", type=int, default=512)
    args = p.parse_args()
    isa = cpu_intrinsics.vector_isa(args.target)
    host = cpu_intrinsics.vector_isa("llvm")
    runs = host.lanes >= isa.lanes and (isa.int8 in (None, host.int8, "avx2") or host.int8 == "avx512vnni")
    print(f"target {args.target!r}: {isa}; host: {host}")
    n = args.n
    rng = np.random.default_rng(0)

    s, targs = tensorized_gemm(n, n, n, isa)
    print(tc.lower(s, targs).body if n <= 64 else "(tc.lower(s, args) shows the tensor_intrin scopes)")
    f = tc.build(s, targs, target=args.target)
    asm = f.get_source("asm").splitlines()
    fmas = [i for i, line in enumerate(asm) if "vfmadd" in line]
    print(f"{len(fmas)} vfmadd instructions; the first ones of the hot loop:")
    print("\n".join(asm[fmas[0] - 4:fmas[0] + 8]) if fmas else "(none)")
    if not runs:
        print("the host lacks the target's instructions: built, not run")
        return 0
    a, b = rng.uniform(-1, 1, (n, n)).astype("float32"), rng.uniform(-1, 1, (n, n)).astype("float32")
    c = np.full((n, n), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)
    a @ b                                            # numpy's thread pool starts
    t0 = time.perf_counter()
    for _ in range(5):
        a @ b
    np_g = 2 * n ** 3 / ((time.perf_counter() - t0) / 5) / 1e9
    print(f"hand-tensorized GEMM {n}³: {gflops(f, (a, b, c), 2 * n ** 3):.1f} GFLOP/s (numpy {np_g:.1f})")

    with tc.target.Target(args.target):
        task = autotune.task.create("topi/dense_int8.llvm", args=(n, n, n), target=args.target)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # no tuning log: the fallback config
            s, targs = task.func(n, n, n)
    g = tc.build(s, targs, target=args.target)
    x = rng.integers(0, 256, (n, n)).astype("uint8")
    w = rng.integers(-128, 128, (n, n)).astype("int8")
    out = np.zeros((n, n), "int32")
    g(x, w, out)
    assert (out == x.astype(np.int64) @ w.astype(np.int64).T).all()
    print(f"int8 dense {n}³ ({isa.int8}, exact): {gflops(g, (x, w, out), 2 * n ** 3):.1f} Gop/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
