"""fp32 SGEMM on the GPU: tilecraft's hand schedule beside cuBLAS (PyTorch ``a @ b``, TF32 off).

    python bench/cuda_gemm.py                  # 4096^3, the default schedule and a few variants
    python bench/cuda_gemm.py --size 2048 --variants default

The schedule (tilecraft/topi/cuda_schedules.py: matmul): 128x128 block tiles, 16x16 threads,
an 8x8 register tile per thread as 2x2 virtual threads of 4x4, A fetched transposed and B as is
into double-buffered shared memory by all threads with 16-byte loads, 16-byte shared->register
loads. Prints TFLOP/s medians, the ratio to cuBLAS, and lower + CUDA C + nvcc + load time.
"""
from __future__ import annotations

import argparse

from cuda_common import build_breakdown, device_line, fmt_build, rel_err, tc_time, torch_time

VARIANTS = {
    "default": dict(),
    "k16": dict(k_tile=16),
    "no_double_buffer": dict(double_buffer=False),
    "128x64": dict(block=(128, 64), vthreads=(2, 2), threads=(16, 8)),
    "64x64_8x8thr": dict(block=(64, 64), threads=(8, 8)),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--repeat", type=int, default=7)
    a = p.parse_args(argv)
    import torch
    from tilecraft.topi import cuda_schedules as cs
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    n = a.size
    flops = 2.0 * n * n * n
    A = torch.randn(n, n, device="cuda")
    B = torch.randn(n, n, device="cuda")
    C = torch.full((n, n), float("nan"), device="cuda")
    ref = A.double() @ B.double()
    t_ref = torch_time(lambda: torch.matmul(A, B), repeat=a.repeat, number=10)
    print(f"SGEMM {n}x{n}x{n} fp32 on {device_line()}")
    print(f"cuBLAS (TF32 off): {flops / t_ref / 1e12:.1f} TFLOP/s  ({t_ref*1e3:.3f} ms, median of {a.repeat})")
    rows = []
    for name in a.variants.split(","):
        kw = VARIANTS[name]
        try:
            build, mod = build_breakdown(lambda: cs.matmul(n, n, n, **kw), runs=3 if name == "default" else 1)
        except Exception as e:               # a variant that does not fit this size
            print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        C.fill_(float("nan"))
        mod(A, B, C)
        err = rel_err(C, ref)
        t = tc_time(mod, (A, B, C), repeat=a.repeat, number=10)
        rows.append((name, flops / t / 1e12, t_ref / t, err, build))
        print(f"  {name:20s} {flops / t / 1e12:6.1f} TFLOP/s  {t_ref / t:6.1%} of cuBLAS  rel.err {err:.1e}  "
              f"build {build['total']*1e3:.0f} ms")
    best = max(rows, key=lambda r: r[1])
    print(f"RESULT gemm {n}: tilecraft best '{best[0]}' {best[1]:.1f} TFLOP/s = {best[2]:.1%} of cuBLAS "
          f"{flops / t_ref / 1e12:.1f} TFLOP/s (target >= 60%)")
    d = [r for r in rows if r[0] == "default"]
    if d:
        print(f"RESULT gemm build (default schedule, median of 3, nvcc cache off): {fmt_build(d[0][4])}")


if __name__ == "__main__":
    main()
