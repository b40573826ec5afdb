"""conv2d NHWC fp16 on tensor cores (implicit GEMM, ``mma.sync``) at ResNet-50's layers, batch 32,
beside cuDNN (``torch.nn.functional.conv2d`` on ``channels_last`` fp16, ``cudnn.benchmark=True``), in
one process on the same inputs.

    python bench/cuda_conv2d_tensorcore.py                                   # every layer and variant
    python bench/cuda_conv2d_tensorcore.py --layers 3x3_64@56,3x3_256@14 --variants fallback,64x64_w32_k32_s3_mb4
    python bench/cuda_conv2d_tensorcore.py --dtype bfloat16                  # bf16 operands and output
    python bench/cuda_conv2d_tensorcore.py --gemm-twin                       # + the plain GEMM of each
    python bench/cuda_conv2d_tensorcore.py --layers 3x3_64@56 --build-only & # fill nvcc's disk cache (a
    python bench/cuda_conv2d_tensorcore.py --cached                          # process a layer), then time

The schedule is ``topi/conv2d_nhwc_tensorcore.py``'s (the gather of the padded input fetched by
``cp.async`` with zero-fill at the border, weights KRSC, fp32 accumulation, fp16 output; with
``--dtype bfloat16`` bf16 operands and output beside cuDNN's bf16);
``fallback`` is the template's (``topi/conv2d_nhwc_tensorcore.cuda``) untuned choice. Each variant is
checked first (output poisoned with NaN, rel. error against cuDNN in fp32 with TF32 off), then timed
with CUDA events (median). Prints TFLOP/s, the ratio to cuDNN, the share of the fp16 dense peak (989
TFLOP/s, H100 SXM) and the build time; ``--json FILE`` writes every row. ``--gemm-twin`` also
times, beside each variant, ``matmul_tensorcore`` with the same tile on the GEMM of the same size
(M = N·OH·OW, N = K, K = R·S·C, B stored (N, K)): what the gather costs against a GEMM of that
shape (the variant's ``twin`` row).
"""
from __future__ import annotations

import argparse
import json

from cuda_common import build_breakdown, device_line, rel_err, tc_time, torch_time

PEAK_FP16 = 989e12

LAYERS = {  # name: (N, H, W, C, K, R, S, stride, padding), ResNet-50 at batch 32
    "3x3_64@56": (32, 56, 56, 64, 64, 3, 3, 1, 1),
    "3x3_128@28": (32, 28, 28, 128, 128, 3, 3, 1, 1),
    "3x3_256@14": (32, 14, 14, 256, 256, 3, 3, 1, 1),
    "1x1_256-64@56": (32, 56, 56, 256, 64, 1, 1, 1, 0),
    "1x1_1024-256@14": (32, 14, 14, 1024, 256, 1, 1, 1, 0),
    "3x3_128_s2@56": (32, 56, 56, 128, 128, 3, 3, 2, 1),
}

VARIANTS = {
    "fallback": None,
    "128x128_w64_k32_s3_mb2": dict(block=(2, 2), warp=(4, 4), chunk=2, stages=3, min_blocks=2),
    "128x128_w64_k64_s3_mb1": dict(block=(2, 2), warp=(4, 4), chunk=4, stages=3, min_blocks=1),
    "256x128_w64_k32_s3_mb1": dict(block=(4, 2), warp=(4, 4), chunk=2, stages=3, min_blocks=1),
    "128x64_w64x32_k32_s3_mb2": dict(block=(2, 2), warp=(4, 2), chunk=2, stages=3, min_blocks=2),
    "128x64_w64x32_k32_s4_mb2": dict(block=(2, 2), warp=(4, 2), chunk=2, stages=4, min_blocks=2),
    "256x64_w64x32_k32_s3_mb1": dict(block=(4, 2), warp=(4, 2), chunk=2, stages=3, min_blocks=1),
    "128x64_w32_k32_s3_mb2": dict(block=(4, 2), warp=(2, 2), chunk=2, stages=3, min_blocks=2),
    "64x64_w32_k32_s3_mb4": dict(block=(2, 2), warp=(2, 2), chunk=2, stages=3, min_blocks=4),
    "64x128_w32x64_k32_s3_mb2": dict(block=(2, 2), warp=(2, 4), chunk=2, stages=3, min_blocks=2),
    "128x64_w64x32_k64_s3_mb2": dict(block=(2, 2), warp=(4, 2), chunk=4, stages=3, min_blocks=2),
}


def _template_fallback(args):
    import warnings

    import tilecraft as tc
    import tilecraft.autotune as autotune
    import tilecraft.topi.conv2d_nhwc_tensorcore  # noqa: F401  (registers the template)
    task = autotune.task.create("topi/conv2d_nhwc_tensorcore.cuda", args=args, target="cuda")
    with tc.target.Target("cuda"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s, tensors = task.func(*task.args)
    return s, list(tensors)


def _make(shape, kw, dtype, out_dtype):
    """The (schedule, tensors) of variant ``kw`` (None: the template's fallback) at layer ``shape``."""
    from tilecraft.topi.conv2d_nhwc_tensorcore import conv2d_nhwc_tensorcore
    if kw is None:
        return _template_fallback((*shape, out_dtype, dtype))
    s, t = conv2d_nhwc_tensorcore(*shape, dtype=dtype, out_dtype=out_dtype, **kw)
    return s, list(t)


def _fitting(shape, names):
    from tilecraft.topi.conv2d_nhwc_tensorcore import conv_fits, out_size
    N, H, W, C, K, R, S, st, pad = shape
    OH, OW = out_size(H, W, R, S, st, pad)
    return [n for n in names if VARIANTS[n] is None or conv_fits(
        N * OH * OW, K, C, R, S, VARIANTS[n]["block"], VARIANTS[n]["warp"], VARIANTS[n]["chunk"],
        VARIANTS[n]["stages"], VARIANTS[n].get("raster", 0))]


def _twin(shape, kw, dtype, out_dtype):
    """The plain GEMM of a layer's implicit GEMM with variant ``kw``'s tile: ``(s, [A, B, C])``."""
    from tilecraft.topi.conv2d_nhwc_tensorcore import out_size
    from tilecraft.topi.tensorcore import matmul_tensorcore
    N, H, W, C, K, R, S, st, pad = shape
    OH, OW = out_size(H, W, R, S, st, pad)
    s, t = matmul_tensorcore(N * OH * OW, K, R * S * C, impl="mma", layout_b="col_major", dtype=dtype,
                             out_dtype=out_dtype, double_buffer=False, **kw)
    return s, list(t)


def build_only(label, shape, names, dtype, out_dtype):
    """Build every fitting variant of a layer into nvcc's disk cache (a later run with ``--cached``
    finds the cubins), printing the build times (nvcc's: a cache miss on a fresh machine); no GPU
    needed."""
    import time

    import tilecraft as tc
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.cuda_compile import compile_cuda
    for name in _fitting(shape, names):
        try:
            s, t = _make(shape, VARIANTS[name], dtype, out_dtype)
            t0 = time.perf_counter()
            src = generate_cuda(tc.lower(s, t, target="cuda"))
            t1 = time.perf_counter()
            compile_cuda(src, "sm_90", use_cache=True)
            t2 = time.perf_counter()
        except Exception as e:              # the timing run prints it again
            print(f"  {label} {name}: {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
            continue
        print(f"BUILD {dtype} {label} {name}: lower + codegen {(t1 - t0) * 1e3:.0f} ms, nvcc {(t2 - t1) * 1e3:.0f} ms",
              flush=True)


def bench_layer(torch, label, shape, names, repeat, rows, dtype="float16", out_dtype="float16", cache=False,
                twin=False):
    import torch.nn.functional as F

    from tilecraft.topi.conv2d_nhwc_tensorcore import out_size
    N, H, W, C, K, R, S, st, pad = shape
    OH, OW = out_size(H, W, R, S, st, pad)
    M = N * OH * OW
    flops = 2.0 * M * K * C * R * S
    tdt = getattr(torch, dtype)
    x = torch.randn(N, C, H, W, device="cuda", dtype=tdt).to(memory_format=torch.channels_last)
    w = (torch.randn(K, C, R, S, device="cuda", dtype=tdt) / (C * R * S) ** 0.5).to(
        memory_format=torch.channels_last)
    ref = F.conv2d(x.float(), w.float(), stride=st, padding=pad).permute(0, 2, 3, 1).reshape(M, K)
    t_ref = torch_time(lambda: F.conv2d(x, w, stride=st, padding=pad), repeat=repeat, number=20)
    xn, wn = x.permute(0, 2, 3, 1), w.permute(0, 2, 3, 1)          # NHWC and KRSC views, no copy
    assert xn.is_contiguous() and wn.is_contiguous()
    print(f"{label} (N={N} {H}x{W}x{C} -> {OH}x{OW}x{K}, {R}x{S} stride {st} pad {pad}): cuDNN "
          f"{flops / t_ref / 1e12:.1f} TFLOP/s ({t_ref * 1e6:.1f} us)", flush=True)
    for name in _fitting(shape, names):
        try:
            build, mod = build_breakdown(lambda: _make(shape, VARIANTS[name], dtype, out_dtype), runs=1,
                                         cache=cache)
        except Exception as e:              # a bench goes on: the failure is printed
            print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
            continue
        y = torch.full((M, K), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
        mod(xn, wn, y)
        torch.cuda.synchronize()
        err = rel_err(y, ref)
        t = tc_time(mod, (xn, wn, y), repeat=repeat, number=20)
        row = dict(layer=label, dtype=dtype, variant=name, tflops=flops / t / 1e12, ratio=t_ref / t,
                   peak=flops / t / PEAK_FP16,
                   rel_err=err, us=t * 1e6, cudnn_us=t_ref * 1e6, cudnn_tflops=flops / t_ref / 1e12,
                   build_s=build["total"])
        rows.append(row)
        print(f"  {name:28s} {row['tflops']:6.1f} TFLOP/s  {row['ratio']:6.1%} of cuDNN  {row['peak']:5.1%} of peak  "
              f"rel.err {err:.1e}  build {build['total'] * 1e3:.0f} ms (nvcc {build['nvcc'] * 1e3:.0f})", flush=True)
        if twin:
            _bench_twin(torch, label, shape, name, repeat, rows, dtype, out_dtype, flops, t_ref)


def _bench_twin(torch, label, shape, name, repeat, rows, dtype, out_dtype, flops, t_ref):
    """The plain GEMM of the layer's size with variant ``name``'s tile (the fallback's: the
    template's choice), timed like the conv, checked against torch in float32."""
    from tilecraft.topi.conv2d_nhwc_tensorcore import conv_fits, fallback, out_size
    N, H, W, C, K, R, S, st, pad = shape
    OH, OW = out_size(H, W, R, S, st, pad)
    M = N * OH * OW
    kw = VARIANTS[name] or fallback(M, K, lambda o: conv_fits(M, K, C, R, S, o["block"], o["warp"], o["chunk"],
                                                              o["stages"], o["raster"]))
    tdt = getattr(torch, dtype)
    a = torch.randn(M, R * S * C, device="cuda", dtype=tdt)
    b = (torch.randn(K, R * S * C, device="cuda", dtype=tdt) / (C * R * S) ** 0.5)
    try:
        build, mod = build_breakdown(lambda: _twin(shape, kw, dtype, out_dtype), runs=1)
    except Exception as e:
        print(f"  {name + ' twin':28s} {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
        return
    y = torch.full((M, K), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
    mod(a, b, y)
    torch.cuda.synchronize()
    err = rel_err(y, a.float() @ b.float().t())
    t = tc_time(mod, (a, b, y), repeat=repeat, number=20)
    rows.append(dict(layer=label, dtype=dtype, variant=name + " twin", tflops=flops / t / 1e12, ratio=t_ref / t,
                     peak=flops / t / PEAK_FP16, rel_err=err, us=t * 1e6, cudnn_us=t_ref * 1e6,
                     cudnn_tflops=flops / t_ref / 1e12, build_s=build["total"], twin=True))
    print(f"  {name + ' twin':28s} {flops / t / 1e12:6.1f} TFLOP/s  (the GEMM {M}x{K}x{R * S * C}, same tile)  "
          f"rel.err {err:.1e}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", default=",".join(LAYERS))
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--json", default=None)
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    p.add_argument("--out-dtype", default=None, choices=("float16", "bfloat16", "float32"),
                   help="default: the operands' dtype (as cuDNN's)")
    p.add_argument("--build-only", action="store_true", help="build the variants (nvcc's disk cache) and stop")
    p.add_argument("--gemm-twin", action="store_true", help="also time the plain GEMM of each layer and tile")
    p.add_argument("--cached", action="store_true",
                   help="take cubins from nvcc's disk cache (the build column then times cache hits)")
    a = p.parse_args(argv)
    out_dtype = a.out_dtype or a.dtype
    if a.build_only:
        for label in a.layers.split(","):
            build_only(label, LAYERS[label], a.variants.split(","), a.dtype, out_dtype)
        return
    import torch
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    rows = []
    print(f"conv2d NHWC {a.dtype} (fp32 accumulate, {out_dtype} out) on tensor cores, batch 32, "
          f"on {device_line()}")
    for label in a.layers.split(","):
        bench_layer(torch, label, LAYERS[label], a.variants.split(","), a.repeat, rows, a.dtype, out_dtype, a.cached,
                    a.gemm_twin)
    for label in a.layers.split(","):
        got = [r for r in rows if r["layer"] == label and r["rel_err"] < 1e-2 and not r.get("twin")]
        if got:
            b = max(got, key=lambda r: r["tflops"])
            print(f"RESULT {a.dtype} {label}: best '{b['variant']}' {b['tflops']:.1f} TFLOP/s = "
                  f"{b['ratio']:.2f}x cuDNN "
                  f"{b['cudnn_tflops']:.1f} (target >= 0.7x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
