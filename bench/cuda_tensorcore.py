"""fp16 GEMM on tensor cores (fp32 accumulation): tilecraft's tensorized schedules beside cuBLAS.

    python bench/cuda_tensorcore.py                       # 4096^3, every variant
    python bench/cuda_tensorcore.py --sizes 1024,4096 --variants mma_128x128

The schedule is ``topi/tensorcore.py: matmul_tensorcore``: a block of warps, each computing a
tile of 16 x 16 tensor-core tiles; A and B staged in shared memory (padded rows, double
buffering through registers); the wmma implementation (nvcuda::wmma) or the PTX one (ldmatrix +
mma.sync.m16n8k16). Each variant is checked first (output poisoned with NaN, fresh random
inputs, rel. error against a float64 product), then timed with CUDA events (median), beside
cuBLAS (``torch.matmul`` on float16, fp32 accumulation) timed in the same run. Prints TFLOP/s,
the ratio to cuBLAS, the share of the dense fp16 peak (989 TFLOP/s on an H100 SXM) and the build
time; with ``--json FILE`` writes every row.
"""
from __future__ import annotations

import argparse
import json

from cuda_common import build_breakdown, device_line, rel_err, tc_time, torch_time

PEAK_FP16 = 989e12          # H100 SXM, dense fp16 with fp32 accumulation (datasheet)

VARIANTS = {
    "wmma_64x64": dict(impl="wmma", block=(2, 2), warp=(2, 2), chunk=2),
    "wmma_128x128": dict(impl="wmma", block=(2, 4), warp=(4, 2), chunk=2),
    "mma_64x64": dict(impl="mma", block=(2, 2), warp=(2, 2), chunk=2),
    "mma_128x128": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=2),
    "mma_128x128_nt": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=2, layout_b="col_major"),
    "mma_128x128_k64_nodb": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=4, double_buffer=False),
    "mma_128x128_nodb": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=2, double_buffer=False),
    # warp tiles of 64 x 64 (4 x 4 tensor-core tiles: 8 ldmatrix per 16 mma.sync instead of 6 per 8)
    "mma_128x128_w64_nodb": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, double_buffer=False),
    "mma_128x128_w64_k64_nodb": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=4, double_buffer=False),
    "mma_128x128_w64": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2),
    "mma_128x256_w64_nodb": dict(impl="mma", block=(2, 4), warp=(4, 4), chunk=2, double_buffer=False),
    "mma_256x128_w64_nodb": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=2, double_buffer=False),
    # cp.async pipelines (Stage.pipeline): ring of `stages` shared buffers, k step 16 or 32
    "mma_128x128_w64_s3": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=1, stages=3),
    "mma_128x128_w64_s4": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=1, stages=4),
    "mma_128x128_w64_k32_s2": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, stages=2),
    "mma_128x128_s4": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=1, stages=4),
    "mma_128x256_w64_s3": dict(impl="mma", block=(2, 4), warp=(4, 4), chunk=1, stages=3),
    # k step 32 or 64 with 3-4 stages: more than 48 KiB, dynamic shared memory
    "mma_128x128_w64_k32_s3": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, stages=3),
    "mma_128x128_w64_k32_s4": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, stages=4),
    "mma_128x128_k32_s4": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=2, stages=4),
    "mma_128x128_k64_s3": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=4, stages=3),
    "mma_128x256_w64_k32_s3": dict(impl="mma", block=(2, 4), warp=(4, 4), chunk=2, stages=3),
    "mma_256x128_w64_k32_s3": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=2, stages=3),
    # all fragments of a step loaded before its first mma (ldmatrix overlapping mma.sync)
    "mma_128x128_k64_nodb_pf": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=4, double_buffer=False,
                                    prefetch=True),
    "mma_128x128_k64_s3_pf": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=4, stages=3, prefetch=True),
    "mma_128x128_k32_s4_pf": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=2, stages=4, prefetch=True),
    "mma_128x128_w64_k32_s3_pf": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, stages=3, prefetch=True),
    "mma_128x256_w64_k32_s3_pf": dict(impl="mma", block=(2, 4), warp=(4, 4), chunk=2, stages=3, prefetch=True),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="4096")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    import torch
    from tilecraft.topi.tensorcore import matmul_tensorcore
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    rows = []
    print(f"fp16 GEMM (fp32 accumulation) on {device_line()}")
    for n in (int(x) for x in a.sizes.split(",")):
        flops = 2.0 * n * n * n
        A = torch.randn(n, n, device="cuda").half()
        B = torch.randn(n, n, device="cuda").half()
        Bt = B.t().contiguous()
        ref = A.double() @ B.double()
        t_ref = torch_time(lambda: torch.matmul(A, B), repeat=a.repeat, number=10)
        print(f"{n}^3: cuBLAS {flops / t_ref / 1e12:.1f} TFLOP/s ({t_ref * 1e3:.3f} ms, fp16 out), "
              f"{flops / t_ref / PEAK_FP16:.0%} of peak")
        for name in a.variants.split(","):
            kw = dict(VARIANTS[name])
            lay = kw.pop("layout_b", "row_major")
            try:
                build, mod = build_breakdown(lambda: _make(matmul_tensorcore, n, lay, kw), runs=1)
            except Exception as e:                    # a variant that does not fit this size
                print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            C = torch.full((n, n), float("nan"), device="cuda")
            Bx = B if lay == "row_major" else Bt
            mod(A, Bx, C)
            torch.cuda.synchronize()
            err = rel_err(C, ref)
            t = tc_time(mod, (A, Bx, C), repeat=a.repeat, number=10)
            row = dict(size=n, variant=name, tflops=flops / t / 1e12, ratio=t_ref / t, peak=flops / t / PEAK_FP16,
                       rel_err=err, build_s=build["total"], nvcc_s=build["nvcc"], cublas_tflops=flops / t_ref / 1e12)
            rows.append(row)
            print(f"  {name:18s} {row['tflops']:6.1f} TFLOP/s  {row['ratio']:6.1%} of cuBLAS  "
                  f"{row['peak']:5.1%} of peak  rel.err {err:.1e}  build {build['total'] * 1e3:.0f} ms "
                  f"(nvcc {build['nvcc'] * 1e3:.0f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


def _make(fn, n, lay, kw):
    s, (A, B, C) = fn(n, n, n, layout_b=lay, **kw)
    return s, [A, B, C]


if __name__ == "__main__":
    main()
