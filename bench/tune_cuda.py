"""Tune fp32 SGEMM and ResNet-18's 3x3 convolutions on the GPU; compare with cuBLAS / cuDNN.

    python bench/tune_cuda.py                          # SGEMM 4096^3 and the four conv layers
    python bench/tune_cuda.py --only gemm --trials 256
    python bench/tune_cuda.py --only conv --conv-trials 192
    python bench/tune_cuda.py --only conv --batch 32 --layers c64,c256   # large batches (n_per_block)
    python bench/tune_cuda.py --only conv --batch 32 --layers c256 --winograd 2   # topi/conv2d_nchw_winograd.cuda, F(2x2)

Each task is tuned with XGBTuner (topi/matmul.cuda, topi/conv2d_nchw.cuda): candidates are built
(nvcc) in parallel worker processes, exported as CUDA archives, loaded and measured one at a time
in a separate process, each checked against the naive GPU schedule on random inputs. Afterwards
the best configuration is rebuilt through apply_history_best in this process and timed with CUDA
events beside PyTorch (cuBLAS / cuDNN, TF32 off, cudnn.benchmark on) in the same run: medians of
--repeat timings. The hand-written default schedule (the template's fallback) is timed too.
Logs go to --log-dir and resume when run again.

The conv layers are ResNet-18's 3x3 convolutions at batch 1 (``--batch`` for others), pad 1: the stride-1 ones (c64:
64->64 at 56x56, c128, c256, c512) and the stride-2 ones that open stages 2-4 (c64s2: 64->128
from 56x56, c128s2, c256s2).
"""
from __future__ import annotations

import argparse
import os
import time

from cuda_common import device_line, tc_time, torch_time

# name: (input channels, output channels, input size, stride)
CONV_LAYERS = {"c64": (64, 64, 56, 1), "c128": (128, 128, 28, 1), "c256": (256, 256, 14, 1), "c512": (512, 512, 7, 1),
               "c64s2": (64, 128, 56, 2), "c128s2": (128, 256, 28, 2), "c256s2": (256, 512, 14, 2)}


def tune(task, trials, log, seed, early_stopping, parallel):
    import tilecraft.autotune as autotune
    tuner = autotune.tuner.XGBTuner(task, seed=seed)
    done = tuner.load_history(autotune.record.load_from_file(log)) if os.path.exists(log) else 0
    remaining = max(0, trials - done)
    option = autotune.measure_option(
        builder=autotune.LocalBuilder(timeout=60, n_parallel=parallel),
        runner=autotune.LocalRunner(timeout=30, number=10, repeat=3, min_repeat_ms=20, max_timing_s=2.0))
    t0 = time.perf_counter()
    if remaining:
        tuner.tune(remaining, option, early_stopping=early_stopping,
                   callbacks=[autotune.callback.progress_bar(remaining, prefix=task.name),
                              autotune.callback.log_to_file(log)])
    wall = time.perf_counter() - t0
    recs = list(autotune.record.load_from_file(log))
    errors = {}
    for _, r in recs:
        if r.error_no != 0:
            errors[r.error_no.name] = errors.get(r.error_no.name, 0) + 1
    print(f"  {task.name}{list(task.args)}: {len(recs)} trials in the log ({len(recs) - done} new, {wall:.0f} s), "
          f"errors {errors or 'none'}")
    return recs


def best_module(log, template, targs):
    import tilecraft
    import tilecraft.autotune as autotune
    from tilecraft.target import Target
    with autotune.apply_history_best(log):
        with Target("cuda"):
            s, args = template(*targs)
    return tilecraft.build(s, args, target="cuda")


def fallback_module(template, targs):
    import warnings

    import tilecraft
    from tilecraft.target import Target
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Target("cuda"):
            s, args = template(*targs)
    return tilecraft.build(s, args, target="cuda")


def gemm(a, rows):
    import torch

    import tilecraft.autotune as autotune
    from tilecraft.topi.matmul import matmul_cuda
    n = a.n
    task = autotune.task.create("topi/matmul.cuda", args=(n, n, n, "float32"), target="cuda")
    log = os.path.join(a.log_dir, f"cuda_sgemm_{n}.jsonl")
    tune(task, a.trials, log, a.seed, a.early_stopping, a.parallel)
    x = torch.rand(n, n, device="cuda") * 2 - 1
    y = torch.rand(n, n, device="cuda") * 2 - 1
    z = torch.full((n, n), float("nan"), device="cuda")
    flop = 2.0 * n ** 3
    ref = torch_time(lambda: torch.mm(x, y), repeat=a.repeat, number=10)
    for name, mod in (("tuned", best_module(log, matmul_cuda, (n, n, n, "float32"))),
                      ("hand (default)", fallback_module(matmul_cuda, (n, n, n, "float32")))):
        z.fill_(float("nan"))
        mod(x, y, z)
        err = (z - x @ y).abs().max().item()
        assert err < 1e-2, f"{name} SGEMM differs from cuBLAS by {err}"
        t = tc_time(mod, (x, y, z), repeat=a.repeat, number=10)
        ref2 = torch_time(lambda: torch.mm(x, y), repeat=a.repeat, number=10)
        r = min(ref, ref2)
        report(rows, (f"SGEMM {n}^3 {name}", flop / t / 1e12, flop / r / 1e12, r / t, "cuBLAS", 0.85))


def conv(a, rows):
    import torch
    import torch.nn.functional as F

    import tilecraft.autotune as autotune
    from tilecraft.topi.conv2d_cuda import conv2d_nchw_cuda
    from tilecraft.topi.conv2d_winograd_cuda import TEMPLATE, conv2d_nchw_winograd_cuda, winograd_weight_transform
    name, template = ("topi/conv2d_nchw.cuda", conv2d_nchw_cuda) if not a.winograd else (TEMPLATE,
                                                                                        conv2d_nchw_winograd_cuda)
    for key in a.layers.split(","):
        ci, c, h, stride = CONV_LAYERS[key]
        oh = (h + 2 - 3) // stride + 1
        nb = a.batch
        targs = (nb, ci, h, h, c, 3, 3, stride, 1, "float32") + ((a.winograd,) if a.winograd else ())
        task = autotune.task.create(name, args=targs, target="cuda")
        stem = f"cuda_conv2d_winograd_m{a.winograd}" if a.winograd else "cuda_conv2d"
        log = os.path.join(a.log_dir, f"{stem}_{key}.jsonl" if nb == 1 else f"{stem}_{key}_b{nb}.jsonl")
        tune(task, min(a.conv_trials, len(task.config_space)), log, a.seed, a.early_stopping, a.parallel)
        x = torch.rand(nb, ci, h, h, device="cuda") * 2 - 1
        w = (torch.rand(c, ci, 3, 3, device="cuda") * 2 - 1) / 10
        out = torch.full((nb, c, oh, oh), float("nan"), device="cuda")
        flop = 2.0 * nb * c * ci * 9 * oh * oh
        number = max(3, 50 // nb)
        conv = lambda: F.conv2d(x, w, padding=1, stride=stride)   # noqa: E731
        ref = torch_time(conv, repeat=a.repeat, number=number)
        # the Winograd kernel takes the filter transformed (once, on the host, not timed)
        wk = torch.from_numpy(winograd_weight_transform(w.cpu().numpy(), a.winograd)).cuda() \
            if a.winograd else w
        for kind, mod in (("tuned", best_module(log, template, targs)),
                          ("hand (default)", fallback_module(template, targs))):
            kind = f"winograd {kind}" if a.winograd else kind
            out.fill_(float("nan"))
            mod(x, wk, out)
            err = (out - conv()).abs().max().item()
            assert err < 1e-3, f"{kind} conv {key} differs from cuDNN by {err}"
            t = tc_time(mod, (x, wk, out), repeat=a.repeat, number=number)
            ref2 = torch_time(conv, repeat=a.repeat, number=number)
            r = min(ref, ref2)
            report(rows, (f"conv {ci}->{c} {h}x{h} s{stride} 3x3 b{nb} {kind}", flop / t / 1e12, flop / r / 1e12, r / t,
                          "cuDNN", 1.0 if nb == 1 else 0.8))


def row_text(row) -> str:
    what, ours, ref, ratio, name, target = row
    mark = "ok" if ratio >= target else "below"
    return f"{what:38s} {ours:10.2f} {ref:10.2f} {ratio:6.2f}x  vs {name}, target >= {target:.2f}: {mark}"


def report(rows, row):
    rows.append(row)
    print("RESULT " + row_text(row), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("gemm", "conv"))
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--trials", type=int, default=256, help="SGEMM trials")
    p.add_argument("--conv-trials", type=int, default=256, help="trials per conv layer (at most its space)")
    p.add_argument("--layers", default=",".join(CONV_LAYERS))
    p.add_argument("--batch", type=int, default=1, help="images per conv (the template's n_per_block knob at > 1)")
    p.add_argument("--winograd", type=int, choices=(2, 4), default=0, metavar="M",
                   help="tune topi/conv2d_nchw_winograd.cuda with F(MxM, 3x3) tiles (3x3 stride 1 layers)")
    p.add_argument("--early-stopping", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--parallel", type=int, default=None, help="build workers (default: one per core)")
    p.add_argument("--log-dir", default="tuning_logs")
    a = p.parse_args(argv)
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    os.makedirs(a.log_dir, exist_ok=True)
    rows = []
    if a.only in (None, "gemm"):
        gemm(a, rows)
    if a.only in (None, "conv"):
        conv(a, rows)
    print(device_line())
    print(f"{'what':38s} {'tilecraft':>10s} {'reference':>10s} {'ratio':>7s}  (TFLOP/s, medians of {a.repeat})")
    for row in rows:
        print(row_text(row))


if __name__ == "__main__":
    main()
