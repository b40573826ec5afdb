"""How long the compiler itself takes, without running any kernel: lowering and code generation.

    python bench/lower_speed.py                  # GEMM 1024^3 hand schedule (CPU) and SGEMM 4096^3 (CUDA)
    python bench/lower_speed.py --runs 40

For the CPU GEMM hand schedule of ``bench/cpu_gemm.py``: schedule + ``lower()``, LLVM IR text
(``codegen_llvm``) and machine code (``build`` + first use); for the CUDA SGEMM schedule of
``topi/cuda_schedules.matmul``: schedule + ``lower(target="cuda")`` and the CUDA C text (no
nvcc, no GPU). Prints the median and the minimum over ``--runs`` of both wall-clock and process
CPU time (CPU time is steadier on a shared machine). The tuner lowers and builds thousands of
candidates, so these figures are part of the product.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _timed(fn, runs: int):
    wall, cpu = [], []
    for _ in range(runs):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return wall, cpu


def _line(name: str, wall, cpu) -> str:
    return (f"  {name:34s} wall median {statistics.median(wall) * 1e3:7.1f} ms (min {min(wall) * 1e3:7.1f})"
            f"   cpu median {statistics.median(cpu) * 1e3:7.1f} ms (min {min(cpu) * 1e3:7.1f})")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--size", type=int, default=1024, help="CPU GEMM M = N = K")
    p.add_argument("--cuda-size", type=int, default=4096, help="CUDA SGEMM M = N = K")
    p.add_argument("--skip-machine-code", action="store_true", help="leave out the LLVM backend's compile")
    a = p.parse_args(argv)
    import tilecraft as tc
    from tilecraft.topi import cuda_schedules
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.llvm import codegen_llvm
    from cpu_gemm import hand_schedule

    n, m = a.size, a.cuda_size
    print(f"compiler time, {a.runs} runs each, python {sys.version.split()[0]}, load {os.getloadavg()[0]:.1f}")

    def cpu_lower():
        s, args = hand_schedule(n, n, n)
        return tc.lower(s, args, name="gemm")

    f = cpu_lower()
    rows = [("GEMM: schedule + lower", *_timed(cpu_lower, a.runs)),
            ("GEMM: LLVM IR text", *_timed(lambda: codegen_llvm([f]), a.runs))]
    if not a.skip_machine_code:
        def cpu_build():
            s, args = hand_schedule(n, n, n)
            tc.build(s, args, target="llvm", name="gemm").artifact.engine
        rows.append(("GEMM: lower + build + machine code", *_timed(cpu_build, max(3, a.runs // 4))))

    def cuda_lower():
        s, args = cuda_schedules.matmul(m, m, m)
        return tc.lower(s, args, target="cuda")

    g = cuda_lower()
    rows += [("SGEMM (CUDA): schedule + lower", *_timed(cuda_lower, a.runs)),
             ("SGEMM (CUDA): CUDA C text", *_timed(lambda: generate_cuda(g), a.runs))]
    for r in rows:
        print(_line(*r))


if __name__ == "__main__":
    main()
