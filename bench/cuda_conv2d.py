"""ResNet-18's 3x3 convolution (64->64 channels, 56x56, batch 1, fp32, stride 1, pad 1; or 256->256 at 14x14) on the GPU:
tilecraft's hand schedule beside cuDNN (``torch.nn.functional.conv2d``, TF32 off).

    python bench/cuda_conv2d.py
    python bench/cuda_conv2d.py --batch 8
    python bench/cuda_conv2d.py --batch 32 --layer 256@14 --variants tuned256_b32,co64_t8_x2_n4   # ResNet-50's
    python bench/cuda_conv2d.py --batch 32 --layer 256@14 --variants wino_b64,direct_fallback --tuned bench/results/cuda_tuning

The schedule (tilecraft/topi/cuda_schedules.py: conv2d_nchw): a block per (16 output
channels, 4x8 pixels), one pixel x 4 channels per thread, the padded input patch (with halo) and
the transposed weights fetched per 16 input channels into shared memory by all threads. Prints
TFLOP/s medians, the ratio to cuDNN and lower + CUDA C + nvcc + load time.

Variants named ``wino_*`` are the Winograd kernel (tilecraft/topi/conv2d_winograd_cuda.py: F(2x2, 3x3) at
14x14 and 7x7, F(4x4, 3x3) where 8 divides the image; ``wino2_*`` / ``wino4_*`` force the tile) with their
GEMM tiles; its filter is transformed once on the host (not timed). ``--tuned DIR`` adds the tuned configs
of both templates from DIR's logs (``cuda_conv2d_<c64|c128|c256|c512>[_b<N>].jsonl`` for
``topi/conv2d_nchw.cuda``, ``cuda_conv2d_winograd_m<2|4>_<layer>_b<N>.jsonl`` for
``topi/conv2d_nchw_winograd.cuda`` with that tile) and prints one RESULT line per layer for the fastest.
"""
from __future__ import annotations

import argparse

from cuda_common import build_breakdown, device_line, fmt_build, rel_err, tc_time, torch_time

VARIANTS = {
    "default": dict(),
    "co32_t8": dict(tile_co=32, co_per_thread=8),
    "y8x8": dict(tile_y=8, tile_x=8, tile_co=16, co_per_thread=4),
    "y2x28_co8": dict(tile_y=2, tile_x=28, tile_co=16, co_per_thread=8, ci_tile=8),
    "ci8": dict(ci_tile=8),
}
# batch 32 (--layer 64@56 or 256@14): the tuned bests (bench/results/cuda_tuning/cuda_conv2d_c*_b32.jsonl)
# and larger register tiles (up to 64 accumulators a thread: cpt x xpt x npb; 784 threads of 64 spill: the
# register file holds 65536 for the block)
BATCH_VARIANTS = {
    "tuned64_b32": dict(tile_co=64, co_per_thread=8, tile_y=14, tile_x=14, ci_tile=16, x_per_thread=2, n_per_block=2),
    "tuned256_b32": dict(tile_co=32, co_per_thread=4, tile_y=14, tile_x=14, ci_tile=32, x_per_thread=2,
                         n_per_block=2),
    "co64_t8_x2_n4": dict(tile_co=64, co_per_thread=8, tile_y=14, tile_x=14, ci_tile=8, x_per_thread=2, n_per_block=4),
    "co64_t8_x2_n2_ci16": dict(tile_co=64, co_per_thread=8, tile_y=14, tile_x=14, ci_tile=16, x_per_thread=2,
                               n_per_block=2),
    "co32_t8_y7_x2_n4": dict(tile_co=32, co_per_thread=8, tile_y=7, tile_x=14, ci_tile=16, x_per_thread=2,
                             n_per_block=4),
    "co64_t16_x1_n4": dict(tile_co=64, co_per_thread=16, tile_y=14, tile_x=14, ci_tile=8, x_per_thread=1,
                           n_per_block=4),
    "co32_t8_x2_n4": dict(tile_co=32, co_per_thread=8, tile_y=14, tile_x=14, ci_tile=8, x_per_thread=2, n_per_block=4),
    "co128_t8_y7_x2_n2": dict(tile_co=128, co_per_thread=8, tile_y=7, tile_x=14, ci_tile=8, x_per_thread=2,
                              n_per_block=2),
    "co64_t8_y7_x2_n4": dict(tile_co=64, co_per_thread=8, tile_y=7, tile_x=14, ci_tile=8, x_per_thread=2,
                             n_per_block=4),
    "co32_t8_y7_x2_n2_ci16": dict(tile_co=32, co_per_thread=8, tile_y=7, tile_x=14, ci_tile=16, x_per_thread=2,
                                  n_per_block=2),
}
VARIANTS.update(BATCH_VARIANTS)
# the Winograd kernel's GEMM tiles (block_co x block_p per block, threads (ty, tx), vthreads, k_tile)
WINOGRAD_VARIANTS = {
    "wino_b64": dict(block_co=64, block_p=64, threads=(8, 8), vthreads=(2, 2), k_tile=8),
    "wino_b128x64": dict(block_co=128, block_p=64, threads=(16, 8), vthreads=(2, 2), k_tile=8),
    "wino_b64x128": dict(block_co=64, block_p=128, threads=(8, 16), vthreads=(2, 2), k_tile=8),
    "wino_b128": dict(block_co=128, block_p=128, threads=(16, 16), vthreads=(2, 2), k_tile=8),
    "wino_b64_k16": dict(block_co=64, block_p=64, threads=(8, 8), vthreads=(2, 2), k_tile=16),
    "wino_b32x64": dict(block_co=32, block_p=64, threads=(4, 16), vthreads=(2, 2), k_tile=8),
    # F(4x4, 3x3) whatever the layer's default tile (fewer GEMM flops and transform bytes; tiles past a 14x14 edge)
    "wino4_b64": dict(m=4, block_co=64, block_p=64, threads=(8, 8), vthreads=(2, 2), k_tile=8),
    "wino4_b128x64": dict(m=4, block_co=128, block_p=64, threads=(16, 8), vthreads=(2, 2), k_tile=8),
    "wino4_b64x128": dict(m=4, block_co=64, block_p=128, threads=(8, 16), vthreads=(2, 2), k_tile=8),
    "wino2_b64": dict(m=2, block_co=64, block_p=64, threads=(8, 8), vthreads=(2, 2), k_tile=8),
}
LAYERS = {"64@56": (64, 56, 64), "128@28": (128, 28, 128), "256@14": (256, 14, 256),
          "512@7": (512, 7, 512)}       # CI, H = W, CO; 3x3, stride 1, pad 1 (ResNet-50's and ResNet-18's)
LOG_KEYS = {"64@56": "c64", "128@28": "c128", "256@14": "c256", "512@7": "c512"}   # bench/tune_cuda.py's names


def tuned_builders(log_dir, layer, N):
    """``(name, make, m)`` for the tuned config of each template whose log is in ``log_dir`` (``m``: the
    Winograd tile, 0 for the direct kernel)."""
    import os

    import tilecraft.autotune as autotune
    from tilecraft.target import Target
    from tilecraft.topi.conv2d_cuda import conv2d_nchw_cuda
    from tilecraft.topi.conv2d_winograd_cuda import conv2d_nchw_winograd_cuda
    CI, H, CO = LAYERS[layer]
    key = LOG_KEYS[layer] + ("" if N == 1 else f"_b{N}")
    targs = (N, CI, H, H, CO, 3, 3, 1, 1, "float32")
    out = []
    for name, log, template, m in (("tuned_direct", f"cuda_conv2d_{key}.jsonl", conv2d_nchw_cuda, 0),
                                   ("tuned_winograd_m2", f"cuda_conv2d_winograd_m2_{key}.jsonl",
                                    conv2d_nchw_winograd_cuda, 2),
                                   ("tuned_winograd_m4", f"cuda_conv2d_winograd_m4_{key}.jsonl",
                                    conv2d_nchw_winograd_cuda, 4)):
        path = os.path.join(log_dir, log)
        if not os.path.exists(path):
            print(f"  {name}: no log {path}")
            continue

        def make(path=path, template=template, m=m):
            with autotune.apply_history_best(path), Target("cuda"):
                return template(*targs, m) if m else template(*targs)
        out.append((name, make, m))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--layer", default="64@56", help=f"one or more (comma-separated) of {', '.join(LAYERS)}")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated; '' for none (with --tuned)")
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--tuned", metavar="DIR", help="also time the tuned configs of both templates from DIR's logs")
    a = p.parse_args(argv)
    layers = a.layer.split(",")
    for layer in layers:
        if layer not in LAYERS:
            p.error(f"unknown layer {layer!r}: choose from {', '.join(LAYERS)}")
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    summary = [bench_layer(a, layer) for layer in layers]
    if len(layers) > 1 or a.tuned:
        print(f"conv2d 3x3 fp32 batch {a.batch}, TF32 off, cudnn.benchmark on; {device_line()}")
        print(f"{'layer':8s} {'cuDNN':>8s} {'best':>8s} {'ratio':>6s}  (TFLOP/s)  best of")
        for layer, ref, best in summary:
            if best is not None:
                mark = "" if a.batch == 1 else ("  >= 0.8x" if best[2] >= 0.8 else "  below 0.8x")
                print(f"{layer:8s} {ref:8.2f} {best[1]:8.2f} {best[2]:5.2f}x  {best[0]}{mark}")


def bench_layer(a, layer):
    """Time cuDNN and each variant at ``layer``; returns ``(layer, cuDNN TFLOP/s, best row)``."""
    import torch
    import torch.nn.functional as F
    from tilecraft.topi import cuda_schedules as cs
    from tilecraft.topi.conv2d_winograd_cuda import (conv2d_nchw_winograd, winograd_tile_size,
                                                     winograd_weight_transform)
    CI, H, CO = LAYERS[layer]
    N, W = a.batch, H
    flops = 2.0 * N * CO * CI * 9 * H * W
    D = torch.randn(N, CI, H, W, device="cuda")
    Wt = torch.randn(CO, CI, 3, 3, device="cuda")
    O = torch.full((N, CO, H, W), float("nan"), device="cuda")
    ref = F.conv2d(D.double(), Wt.double(), padding=1)
    t_ref = torch_time(lambda: F.conv2d(D, Wt, padding=1), repeat=a.repeat)
    print(f"conv2d NCHW fp32 {N}x{CI}x{H}x{W} * {CO}x{CI}x3x3 on {device_line()}")
    print(f"cuDNN (TF32 off): {flops / t_ref / 1e12:.2f} TFLOP/s ({t_ref*1e6:.1f} us)")
    U = {m: torch.from_numpy(winograd_weight_transform(Wt.cpu().numpy(), m)).cuda() for m in (2, 4)}
    builders = []
    for name in a.variants.split(",") if a.variants else []:
        if name in WINOGRAD_VARIANTS:
            kw = dict(WINOGRAD_VARIANTS[name])
            m = kw.pop("m", winograd_tile_size(H))
            builders.append((name, lambda kw=kw, m=m: conv2d_nchw_winograd(N, CI, H, W, CO, 1, m=m, **kw), m))
        else:
            builders.append((name, lambda kw=VARIANTS[name]: cs.conv2d_nchw(N, CI, H, W, CO, **kw), 0))
    if a.tuned:
        builders += tuned_builders(a.tuned, layer, N)
    rows = []
    for name, make, m in builders:
        try:
            build, mod = build_breakdown(make, runs=3 if name == "default" else 1)
        except Exception as e:
            print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        args = (D, U[m] if m else Wt, O)
        O.fill_(float("nan"))
        mod(*args)
        err = rel_err(O, ref)
        t = tc_time(mod, args, repeat=a.repeat)
        rows.append((name, flops / t / 1e12, t_ref / t, err, build))
        print(f"  {name:12s} {flops / t / 1e12:6.2f} TFLOP/s ({t*1e6:.1f} us)  {t_ref / t:6.1%} of cuDNN  "
              f"rel.err {err:.1e}  build {build['total']*1e3:.0f} ms")
    if not rows:
        return layer, flops / t_ref / 1e12, None
    best = max(rows, key=lambda r: r[1])
    target = "0.8x at batch 32, issue 12" if N > 1 else "50%"
    print(f"RESULT conv2d {layer} batch {N}: tilecraft best '{best[0]}' {best[1]:.2f} TFLOP/s = {best[2]:.1%} of "
          f"cuDNN {flops / t_ref / 1e12:.2f} TFLOP/s (target >= {target})")
    tuned = [r for r in rows if r[0].startswith("tuned_")]
    if tuned:
        tb = max(tuned, key=lambda r: r[1])
        print(f"RESULT tuned conv2d {layer} batch {N}: '{tb[0]}' {tb[1]:.2f} TFLOP/s = {tb[2]:.2f}x cuDNN "
              f"(TF32 off, benchmark mode) {flops / t_ref / 1e12:.2f} TFLOP/s")
    d = [r for r in rows if r[0] == "default"]
    if d:
        print(f"RESULT conv2d build (default schedule, median of 3, nvcc cache off): {fmt_build(d[0][4])}")
    return layer, flops / t_ref / 1e12, best


if __name__ == "__main__":
    main()
