"""Time LLVM code generation.

    python3 bench/codegen_speed.py

Prints, median of 10: the time to emit LLVM IR text, and to parse + optimise (O3) + JIT it, for
a ~100-statement function (20 loop nests of 5 stores, 5 of them parallel, exp in half the stores)
and for two hand-lowered 1024^3 GEMMs (a 4x16 register micro-kernel; TVM's tutorial schedule).
"""
import os
import statistics
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "codegen"))     # llvm_ir_helpers: IR built by hand
sys.path.insert(0, ROOT)

from llvm_ir_helpers import buf, func, ld, loop, st  # noqa: E402
from tilecraft.codegen.llvm import codegen_llvm  # noqa: E402
from tilecraft.codegen.llvm_jit import compile_llvm  # noqa: E402
from tilecraft.ir import Allocate, Broadcast, Call, ForKind, Var, const, select, seq  # noqa: E402


def hundred_statements():
    n = Var("n")
    A, B = buf("A", (n,)), buf("B", (n,))
    outs = [buf(f"C{s}", (n,)) for s in range(5)]
    nests = []
    for t in range(20):
        i = Var(f"i{t}")
        stores = []
        for s in range(5):
            x = ld(A, i) * float(s + 1) + ld(B, i)
            if s % 2:
                x = select(x > 0.0, x, Call("exp", (x,), "float32"))
            stores.append(st(outs[s], i, x))
        nests.append(loop(i, n, seq(*stores), ForKind.PARALLEL if t % 4 == 0 else ForKind.SERIAL))
    return func("hundred", (A, B, *outs, n), seq(*nests))


def gemm(N=1024, mr=4, nr=16, tutorial=False):
    """C = A @ B with B packed into nr-wide panels; an mr x nr (or, tutorial-style, 32 x 32)
    accumulator per block, the k loop innermost (or unrolled by 4 in the tutorial's way)."""
    if tutorial:
        mr, nr = 32, 32
    A, B, C = buf("A", (N, N)), buf("B", (N, N)), buf("C", (N, N))
    P, CC = buf("packedB", (N // nr, N, nr)), buf("CC", (mr, nr), scope="local")
    x, y, xo, yo, r0, r1, r2, k, ki = (Var(v) for v in ("x", "y", "xo", "yo", "r0", "r1", "r2", "k", "ki"))
    pack = loop(x, N // nr, loop(y, N, st(P, x * (N * nr) + y * nr, ld(B, y * N + x * nr, nr), nr)), ForKind.PARALLEL)
    init = loop(r0, mr, st(CC, r0 * nr, Broadcast(const(0.0), nr), nr), ForKind.UNROLLED)
    kk = k * 4 + ki if tutorial else k
    upd = loop(r1, mr, st(CC, r1 * nr, ld(CC, r1 * nr, nr) + Broadcast(ld(A, (xo * mr + r1) * N + kk), nr)
                          * ld(P, yo * (N * nr) + kk * nr, nr), nr), ForKind.UNROLLED)
    upd = loop(k, N // 4, loop(ki, 4, upd, ForKind.UNROLLED)) if tutorial else loop(k, N, upd)
    out = loop(r2, mr, st(C, (xo * mr + r2) * N + yo * nr, ld(CC, r2 * nr, nr), nr))
    body = loop(xo, N // mr, Allocate(CC, loop(yo, N // nr, seq(init, upd, out))), ForKind.PARALLEL)
    return func("gemm", (A, B, C), Allocate(P, seq(pack, body)))


def measure(name, f, target="llvm", reps=10):
    emit, jit = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        src = codegen_llvm(f, target)
        t1 = time.perf_counter()
        compile_llvm(src)
        t2 = time.perf_counter()
        emit.append(t1 - t0)
        jit.append(t2 - t1)
    print(f"{name:42s} emit {statistics.median(emit) * 1e3:6.1f} ms   parse+O3+MCJIT "
          f"{statistics.median(jit) * 1e3:6.1f} ms   ({src.text.count(chr(10))} IR lines)")


if __name__ == "__main__":
    import llvmlite.binding as llvm
    print(f"# host cpu {llvm.get_host_cpu_name()}, load average {os.getloadavg()[0]:.1f}, median of 10")
    measure("~100 statements, 20 loop nests", hundred_statements())
    measure("GEMM 1024, 4x16 register micro-kernel", gemm())
    measure("GEMM 1024, TVM tutorial schedule", gemm(tutorial=True))
