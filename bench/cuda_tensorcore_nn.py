"""Tensor-core batch_matmul (attention) and dense + bias + GELU (BERT's FFN): tilecraft beside torch.

    python bench/cuda_tensorcore_nn.py                         # every shape, every variant that fits
    python bench/cuda_tensorcore_nn.py --ops bmm --variants fallback,bmm_64x64_w32_k32_s2

The schedules are ``topi/tensorcore_nn.py``'s: ``batch_matmul_tensorcore`` (the batch on
``blockIdx.z``, fp16 in, fp32 accumulation, fp16 out) at attention's shapes, 12 heads x seq 128
and 512 x head dim 64 (``Q @ K^T``: B stored (N, K); ``P @ V``: B stored (K, N)), beside
``torch.bmm``; ``dense_tensorcore`` (``gelu(X @ W.T + b)``, the bias and GELU (erf) applied in
float32 on the way out of a shared tile of the accumulator) at BERT-base's first FFN layer (1024
tokens, 768 -> 3072), beside ``torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))``
and ``linear`` alone, all fp16 in one process on the same inputs. ``fallback`` is the templates'
(``topi/batch_matmul_tensorcore.cuda``, ``topi/dense_tensorcore.cuda``) untuned choice. Each variant
is checked first (output poisoned with NaN, rel. error against float64), then timed with CUDA
events (median). Prints TFLOP/s, the ratio to torch, the share of the fp16 dense peak (989 TFLOP/s,
H100 SXM) and the build time; ``--json FILE`` writes every row.
"""
from __future__ import annotations

import argparse
import json
import math

from cuda_common import build_breakdown, device_line, rel_err, tc_time, torch_time

PEAK_FP16 = 989e12

BMM_SHAPES = [  # (name, batch, M, N, K, layout_b)
    ("QK^T s128", 12, 128, 128, 64, "col_major"),
    ("PV s128", 12, 128, 64, 128, "row_major"),
    ("QK^T s512", 12, 512, 512, 64, "col_major"),
    ("PV s512", 12, 512, 64, 512, "row_major"),
]
DENSE_SHAPES = [("BERT FFN1", 1024, 3072, 768)]

BMM_VARIANTS = {
    "fallback": None,
    "bmm_32x32_k32_s2": dict(block=(1, 1), warp=(2, 2), chunk=2, stages=2),
    "bmm_64x32_k32_s2": dict(block=(2, 1), warp=(2, 2), chunk=2, stages=2),
    "bmm_64x64_w32_k32_s2": dict(block=(2, 2), warp=(2, 2), chunk=2, stages=2),
    "bmm_64x64_w32_k64_s2_mb4": dict(block=(2, 2), warp=(2, 2), chunk=4, stages=2, min_blocks=4),
    "bmm_128x64_w32_k32_s3_mb2": dict(block=(4, 2), warp=(2, 2), chunk=2, stages=3, min_blocks=2),
    "bmm_128x128_w64_k32_s3_mb2": dict(block=(2, 2), warp=(4, 4), chunk=2, stages=3, min_blocks=2),
    # head dim 64 = K of Q @ K^T: 16-deep steps for a 3-4 stage ring
    "bmm_64x64_w32_k16_s4_mb4": dict(block=(2, 2), warp=(2, 2), chunk=1, stages=4, min_blocks=4),
    "bmm_128x64_w32_k16_s4_mb2": dict(block=(4, 2), warp=(2, 2), chunk=1, stages=4, min_blocks=2),
    "bmm_128x128_w64_k16_s4_mb2": dict(block=(2, 2), warp=(4, 4), chunk=1, stages=4, min_blocks=2),
}
DENSE_VARIANTS = {
    "fallback": None,
    "dense_128x128_w64_k32_s3_mb2": dict(block=(2, 2), warp=(4, 4), chunk=2, stages=3, min_blocks=2),
    "dense_128x128_k32_s3_mb2": dict(block=(2, 4), warp=(4, 2), chunk=2, stages=3, min_blocks=2),
    "dense_128x128_w64_k64_s3_mb1_r8": dict(block=(2, 2), warp=(4, 4), chunk=4, stages=3, min_blocks=1, raster=8),
    "dense_256x128_w64_k32_s3_mb1": dict(block=(4, 2), warp=(4, 4), chunk=2, stages=3, min_blocks=1),
    "dense_64x128_w32_k32_s4_mb2": dict(block=(2, 4), warp=(2, 2), chunk=2, stages=4, min_blocks=2),
}


def _template_fallback(name, args):
    import warnings

    import tilecraft as tc
    import tilecraft.autotune as autotune
    import tilecraft.topi.tensorcore_nn  # noqa: F401  (registers the templates)
    task = autotune.task.create(name, args=args, target="cuda")
    with tc.target.Target("cuda"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s, tensors = task.func(*task.args)
    return s, list(tensors)


def _report(rows, row, name, err, build):
    rows.append(row)
    print(f"  {name:34s} {row['tflops']:6.1f} TFLOP/s  {row['ratio']:6.1%} of torch  {row['peak']:5.1%} of peak  "
          f"rel.err {err:.1e}  build {build['total'] * 1e3:.0f} ms (nvcc {build['nvcc'] * 1e3:.0f})")


def bench_bmm(torch, names, repeat, rows):
    from tilecraft.topi.tensorcore_nn import batch_matmul_tensorcore
    from tilecraft.topi.tensorcore_template import fits
    for label, batch, M, N, K, lay in BMM_SHAPES:
        flops = 2.0 * batch * M * N * K
        a = torch.randn(batch, M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(batch, K, N, device="cuda", dtype=torch.float16)
        bx = b if lay == "row_major" else b.transpose(1, 2).contiguous()             # (batch, N, K)
        ref = a.double() @ b.double()
        ref_call = (lambda: torch.bmm(a, b)) if lay == "row_major" else (lambda: torch.bmm(a, bx.transpose(1, 2)))
        t_ref = torch_time(ref_call, repeat=repeat, number=20)
        print(f"{label} ({batch} x {M}x{N}x{K}, B {lay}): torch.bmm {flops / t_ref / 1e12:.1f} TFLOP/s "
              f"({t_ref * 1e6:.1f} us)")
        for name in names:
            kw = BMM_VARIANTS[name]
            if kw is not None and not fits(M, N, K, "float16", lay, kw["block"], kw["warp"], kw["chunk"],
                                           kw["stages"], kw.get("raster", 0)):
                continue
            args = (batch, M, N, K, "float16", "float16", lay)

            def make(kw=kw, args=args):
                if kw is None:
                    return _template_fallback("topi/batch_matmul_tensorcore.cuda", args)
                s, t = batch_matmul_tensorcore(batch, M, N, K, layout_b=lay, out_dtype="float16", **kw)
                return s, list(t)
            build, mod = build_breakdown(make, runs=1)
            c = torch.full((batch, M, N), float("nan"), device="cuda", dtype=torch.float16)
            mod(a, bx, c)
            torch.cuda.synchronize()
            err = rel_err(c, ref)
            t = tc_time(mod, (a, bx, c), repeat=repeat, number=20)
            _report(rows, dict(op="batch_matmul", shape=label, variant=name, tflops=flops / t / 1e12,
                               ratio=t_ref / t, peak=flops / t / PEAK_FP16, rel_err=err, us=t * 1e6,
                               torch_us=t_ref * 1e6, build_s=build["total"]), name, err, build)


def bench_dense(torch, names, repeat, rows):
    import torch.nn.functional as F

    from tilecraft.topi.tensorcore_nn import dense_fits, dense_tensorcore
    for label, M, N, K in DENSE_SHAPES:
        flops = 2.0 * M * N * K
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        w = torch.randn(N, K, device="cuda", dtype=torch.float16) / math.sqrt(K)
        bias = torch.randn(N, device="cuda", dtype=torch.float16)
        ref = F.gelu(x.double() @ w.double().t() + bias.double())
        t_ref = torch_time(lambda: F.gelu(F.linear(x, w, bias)), repeat=repeat, number=20)
        t_lin = torch_time(lambda: F.linear(x, w, bias), repeat=repeat, number=20)
        print(f"{label} ({M}x{N}x{K}): torch linear+gelu {flops / t_ref / 1e12:.1f} TFLOP/s ({t_ref * 1e6:.1f} us), "
              f"linear alone {flops / t_lin / 1e12:.1f} ({t_lin * 1e6:.1f} us)")
        for name in names:
            kw = DENSE_VARIANTS[name]
            if kw is not None and not dense_fits(M, N, K, "float16", kw["block"], kw["warp"], kw["chunk"],
                                                 kw["stages"], kw.get("raster", 0)):
                continue

            def make(kw=kw):
                if kw is None:
                    return _template_fallback("topi/dense_tensorcore.cuda", (M, N, K, "float16", "float16", "erf"))
                s, t = dense_tensorcore(M, N, K, **kw)
                return s, list(t)
            build, mod = build_breakdown(make, runs=1)
            y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
            mod(x, w, bias, y)
            torch.cuda.synchronize()
            err = rel_err(y, ref)
            t = tc_time(mod, (x, w, bias, y), repeat=repeat, number=20)
            _report(rows, dict(op="dense_gelu", shape=label, variant=name, tflops=flops / t / 1e12, ratio=t_ref / t,
                               ratio_linear=t_lin / t, peak=flops / t / PEAK_FP16, rel_err=err, us=t * 1e6,
                               torch_us=t_ref * 1e6, build_s=build["total"]), name, err, build)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", default="bmm,dense")
    p.add_argument("--variants", default=None, help="comma-separated names (default: all that fit)")
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    import torch
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    chosen = a.variants.split(",") if a.variants else None
    rows = []
    print(f"tensor-core batch_matmul and dense + GELU on {device_line()}")
    if "bmm" in a.ops:
        bench_bmm(torch, [n for n in BMM_VARIANTS if chosen is None or n in chosen], a.repeat, rows)
    if "dense" in a.ops:
        bench_dense(torch, [n for n in DENSE_VARIANTS if chosen is None or n in chosen], a.repeat, rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
