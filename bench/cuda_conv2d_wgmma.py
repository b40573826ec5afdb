"""conv2d NHWC fp16 on sm_90a's wgmma (``topi/conv2d_nhwc_wgmma.py``: the implicit GEMM on the
wgmma pipeline, the producer gathering A) at ResNet-50's batch-32 layers, beside cuDNN
(``channels_last`` fp16, ``cudnn.benchmark=True``) in one process on the same inputs; with
``--gemm-twin`` also the wgmma GEMM of the same size and tile (``matmul_wgmma``: M = N·OH·OW,
N = K, K = R·S·C, A a plain matrix): the gather's cost against the GEMM core's.

    python bench/cuda_conv2d_wgmma.py                                    # every layer and variant
    python bench/cuda_conv2d_wgmma.py --layers 3x3_256@14 --variants 128x128_s4 --gemm-twin

Every variant is nvcc-built first (threads in parallel, nvcc's disk cache), checked (output
poisoned with NaN, rel. error against cuDNN in fp32 with TF32 off), then timed with CUDA events
(median). Prints TFLOP/s, the ratio to cuDNN, the share of the fp16 dense peak (989 TFLOP/s, H100
SXM) and the nvcc time; ``--json FILE`` writes every row.
"""
from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

from cuda_common import device_line, rel_err, tc_time, torch_time
from cuda_conv2d_tensorcore import LAYERS

PEAK_FP16 = 989e12

# name: (block (bm, bn), stages, lag)
VARIANTS = {
    "128x64_s4": ((128, 64), 4, 1),
    "128x64_s6_l2": ((128, 64), 6, 2),
    "256x64_s4": ((256, 64), 4, 1),
    "128x128_s4": ((128, 128), 4, 1),
    "128x128_s5_l2": ((128, 128), 5, 2),
    "128x256_s3": ((128, 256), 3, 1),
    "128x256_s4_l2": ((128, 256), 4, 2),
    "256x128_s4": ((256, 128), 4, 1),
}


def _fitting(shape, names, dtype="float16"):
    from tilecraft.topi.conv2d_nhwc_wgmma import check_conv_wgmma
    out = []
    for n in names:
        block, stages, lag = VARIANTS[n]
        try:
            check_conv_wgmma(*shape, dtype, dtype, block, stages, lag)
        except ValueError:
            continue
        out.append(n)
    return out


def _build(shape, name, dtype="float16"):
    """(conv, nvcc seconds) of variant ``name`` at layer ``shape``, nvcc's disk cache filled."""
    from tilecraft.topi.conv2d_nhwc_wgmma import conv2d_nhwc_wgmma
    block, stages, lag = VARIANTS[name]
    conv = conv2d_nhwc_wgmma(*shape, dtype=dtype, out_dtype=dtype, block=block, stages=stages, lag=lag)
    t0 = time.perf_counter()
    conv.build()
    return conv, time.perf_counter() - t0


def _twin(torch, shape, name, repeat, flops, dtype="float16"):
    """Seconds of the wgmma GEMM of the layer's size with variant ``name``'s tile (and its rel. error)."""
    import tilecraft as tc
    from tilecraft.topi.conv2d_nhwc_tensorcore import out_size
    from tilecraft.topi.tensorcore_wgmma import matmul_wgmma
    N, H, W, C, K, R, S, st, pad = shape
    OH, OW = out_size(H, W, R, S, st, pad)
    M, KG = N * OH * OW, R * S * C
    block, stages, lag = VARIANTS[name]
    s, (A, B, Cm) = matmul_wgmma(M, K, KG, dtype=dtype, block=block, stages=stages, lag=lag, out_dtype=dtype)
    mod = tc.build(s, [A, B, Cm], target="cuda")
    tdt = getattr(torch, dtype)
    a = torch.randn(M, KG, device="cuda", dtype=tdt)
    b = torch.randn(K, KG, device="cuda", dtype=tdt) / KG ** 0.5
    y = torch.full((M, K), float("nan"), device="cuda", dtype=tdt)
    mod(a, b, y)
    torch.cuda.synchronize()
    err = rel_err(y, a.float() @ b.float().t())
    return tc_time(mod, (a, b, y), repeat=repeat, number=20), err


def bench_layer(torch, label, shape, names, convs, repeat, rows, twin=False, dtype="float16"):
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
    for name in names:
        got = convs.get((label, name))
        if isinstance(got, Exception) or got is None:
            print(f"  {name}: {type(got).__name__}: {str(got).splitlines()[0] if got else 'not built'}", flush=True)
            continue
        conv, nvcc_s = got
        try:
            y = torch.full((M, K), float("nan"), device="cuda", dtype=tdt)
            conv(xn, wn, y)
            torch.cuda.synchronize()
            err = rel_err(y, ref)
            t = torch_time(lambda: conv(xn, wn, y), repeat=repeat, number=20)
        except Exception as e:              # a bench goes on: the failure is printed
            print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
            continue
        row = dict(layer=label, dtype=dtype, variant="wgmma " + name, tflops=flops / t / 1e12, ratio=t_ref / t,
                   peak=flops / t / PEAK_FP16, rel_err=err, us=t * 1e6, cudnn_us=t_ref * 1e6,
                   cudnn_tflops=flops / t_ref / 1e12, nvcc_s=nvcc_s)
        rows.append(row)
        print(f"  wgmma {name:16s} {row['tflops']:6.1f} TFLOP/s  {row['ratio']:6.1%} of cuDNN  {row['peak']:5.1%} of "
              f"peak  rel.err {err:.1e}  nvcc {nvcc_s * 1e3:.0f} ms", flush=True)
        if twin:
            try:
                tt, terr = _twin(torch, shape, name, repeat, flops, dtype)
            except Exception as e:
                print(f"  wgmma {name + ' twin':16s} {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
                continue
            rows.append(dict(layer=label, dtype=dtype, variant="wgmma " + name + " twin", tflops=flops / tt / 1e12,
                             ratio=t_ref / tt, peak=flops / tt / PEAK_FP16, rel_err=terr, us=tt * 1e6,
                             cudnn_us=t_ref * 1e6, cudnn_tflops=flops / t_ref / 1e12, twin=True))
            print(f"  wgmma {name + ' twin':16s} {flops / tt / 1e12:6.1f} TFLOP/s  {t_ref / tt:6.1%} of cuDNN  (the "
                  f"GEMM {M}x{K}x{R * S * C}, same tile; the gather costs {t / tt - 1:+.0%})  rel.err {terr:.1e}",
                  flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", default=",".join(LAYERS))
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--json", default=None)
    p.add_argument("--gemm-twin", action="store_true", help="also time the wgmma GEMM of each layer and tile")
    p.add_argument("--jobs", type=int, default=8, help="parallel nvcc builds")
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"), help="operands and output")
    p.add_argument("--build-only", action="store_true", help="build the variants (nvcc's disk cache) and stop")
    a = p.parse_args(argv)
    layers = a.layers.split(",")
    work = [(label, n) for label in layers for n in _fitting(LAYERS[label], a.variants.split(","), a.dtype)]
    convs = {}

    def build(item):
        try:
            convs[item] = _build(LAYERS[item[0]], item[1], a.dtype)
        except Exception as e:
            convs[item] = e
    t0 = time.perf_counter()
    with ThreadPoolExecutor(a.jobs) as ex:
        list(ex.map(build, work))
    print(f"built {len(work)} wgmma conv kernels in {time.perf_counter() - t0:.1f} s ({a.jobs} nvcc at a time)")
    for item, got in convs.items():
        if isinstance(got, Exception):
            print(f"  {item[0]} {item[1]}: {type(got).__name__}: {str(got).splitlines()[0]}")
    if a.build_only:
        return
    import torch
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    rows = []
    print(f"conv2d NHWC {a.dtype} (fp32 accumulate, {a.dtype} out) on wgmma (sm_90a), batch 32, on {device_line()}")
    for label in layers:
        bench_layer(torch, label, LAYERS[label], [n for lab, n in work if lab == label], convs, a.repeat, rows,
                    a.gemm_twin, a.dtype)
    for label in layers:
        got = [r for r in rows if r["layer"] == label and r["rel_err"] < 1e-2 and not r.get("twin")]
        if got:
            b = max(got, key=lambda r: r["tflops"])
            print(f"RESULT wgmma {a.dtype} {label}: best '{b['variant']}' {b['tflops']:.1f} TFLOP/s = "
                  f"{b['ratio']:.2f}x cuDNN {b['cudnn_tflops']:.1f} (target >= 0.7x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
