"""bf16 GEMM on tensor cores (``mma.sync.m16n8k16`` bf16 and sm_90a ``wgmma`` bf16, fp32 accumulation) beside cuBLAS
(``torch.matmul`` on ``bfloat16``), and the same schedules on fp16 for comparison, in one process.

    python bench/cuda_tensorcore_bf16.py                     # 4096^3
    python bench/cuda_tensorcore_bf16.py --sizes 1024,4096,8192

The schedules are ``matmul_tensorcore``'s (``topi/tensorcore.py``) with ``dtype="bfloat16"``, and
``matmul_wgmma``'s (``wgmma_*`` variants, B passed stored (N, K)); C is
of the operands' dtype as cuBLAS's (rounded once at the store; ``--out float32``: float32 C). Each
variant is checked first (output poisoned with NaN, rel. error against the float64 product of the
same bf16 inputs), then timed with CUDA events (median). Prints TFLOP/s, the ratio to cuBLAS, the
share of the bf16 dense peak (989 TFLOP/s, H100 SXM) and the build time; ``--json FILE`` writes
every row.
"""
from __future__ import annotations

import argparse
import json

from cuda_common import build_breakdown, device_line, rel_err, tc_time, torch_time

PEAK = 989e12
VARIANTS = {  # the fp16 GEMM bench's best shapes (bench/cuda_tensorcore.py)
    "128x128_w64_k64_s3_mb2": dict(block=(2, 2), warp=(4, 4), chunk=4, stages=3, min_blocks=2),
    "256x128_w64_k64_s3_mb1_r8": dict(block=(4, 2), warp=(4, 4), chunk=4, stages=3, min_blocks=1, raster=8),
    "128x256_w64_k64_s4_mb1": dict(block=(2, 4), warp=(4, 4), chunk=4, stages=4, min_blocks=1),
    # sm_90a wgmma (topi/tensorcore_wgmma.py: B stored (N, K), the same product)
    "wgmma_128x256_s4": dict(block=(128, 256), stages=4, lag=1),
    "wgmma_128x256_s4_l2": dict(block=(128, 256), stages=4, lag=2),
    "wgmma_128x128_s5_l2": dict(block=(128, 128), stages=5, lag=2),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="4096")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--json", default=None)
    p.add_argument("--out", default="same", choices=("same", "float32"), help="C's dtype (same: the operands')")
    a = p.parse_args(argv)
    import torch

    from tilecraft.topi.tensorcore import matmul_tensorcore
    from tilecraft.topi.tensorcore_template import fits
    from tilecraft.topi.tensorcore_wgmma import matmul_wgmma
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    print(f"bf16 GEMM (fp32 accumulate) on tensor cores on {device_line()}")
    rows = []
    for n in (int(x) for x in a.sizes.split(",")):
        flops = 2.0 * n ** 3
        for dtype, tdt in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
            A = torch.randn(n, n, device="cuda").to(tdt)
            B = torch.randn(n, n, device="cuda").to(tdt)
            ref = A.double() @ B.double()
            t_ref = torch_time(lambda: torch.matmul(A, B), repeat=a.repeat, number=10)
            print(f"{dtype} {n}^3: cuBLAS (torch.matmul, {dtype} out) {flops / t_ref / 1e12:.1f} TFLOP/s", flush=True)
            for name in a.variants.split(","):
                kw = VARIANTS[name]
                wgmma = name.startswith("wgmma")
                if not wgmma and not fits(n, n, n, dtype, "row_major", kw["block"], kw["warp"], kw["chunk"], kw["stages"],
                            kw.get("raster", 0)):
                    continue

                out = dtype if a.out == "same" else "float32"

                def make(kw=kw, dtype=dtype, out=out, wgmma=wgmma):
                    if wgmma:
                        s, t = matmul_wgmma(n, n, n, dtype=dtype, out_dtype=out, **kw)
                        return s, list(t)
                    s, t = matmul_tensorcore(n, n, n, impl="mma", dtype=dtype, out_dtype=out, double_buffer=False,
                                             **kw)
                    return s, list(t)
                build, mod = build_breakdown(make, runs=1)
                C = torch.full((n, n), float("nan"), device="cuda", dtype=getattr(torch, out))
                args = (A, B.t().contiguous() if wgmma else B, C)
                mod(*args)
                torch.cuda.synchronize()
                err = rel_err(C, ref)
                t = tc_time(mod, args, repeat=a.repeat, number=10)
                row = dict(dtype=dtype, out=out, n=n, variant=name, tflops=flops / t / 1e12, ratio=t_ref / t,
                           cublas_tflops=flops / t_ref / 1e12, peak=flops / t / PEAK, rel_err=err,
                           build_s=build["total"])
                rows.append(row)
                print(f"  {name:28s} {row['tflops']:6.1f} TFLOP/s  {row['ratio']:6.1%} of cuBLAS  "
                      f"{row['peak']:5.1%} of peak  rel.err {err:.1e}  build {build['total'] * 1e3:.0f} ms", flush=True)
    for dtype in ("bfloat16", "float16"):
        got = [r for r in rows if r["dtype"] == dtype and r["rel_err"] < (1e-4 if r["out"] == "float32" else 1e-2)]
        if got:
            b = max(got, key=lambda r: r["tflops"])
            print(f"RESULT {dtype} GEMM {b['n']}^3: best '{b['variant']}' {b['tflops']:.1f} TFLOP/s = "
                  f"{b['ratio']:.2f}x cuBLAS {b['cublas_tflops']:.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
