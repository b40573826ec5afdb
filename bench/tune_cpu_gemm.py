"""Tune fp32 GEMM (and conv2d NCHW) on this CPU and compare with numpy / PyTorch in the same run.

    python bench/tune_cpu_gemm.py                       # 1024^3, 256 trials, XGBTuner
    python bench/tune_cpu_gemm.py --n 512 --trials 64   # quicker
    python bench/tune_cpu_gemm.py --conv                # also conv2d 1x64x56x56, 3x3, 64 filters
    python bench/tune_cpu_gemm.py --conv --no-gemm --log-conv tuning_logs/conv_fresh.jsonl

Every figure is a ratio against a reference measured in this run (median of --repeats timings).
On a machine shared with other work, compare single-threaded (parallel loops stall when a thread
is descheduled): ``TILECRAFT_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python bench/tune_cpu_gemm.py``.
Also reports tuning throughput (candidates built and measured per minute) and where the
tuning wall time went (instantiate / lower / compile (codegen + LLVM) / export, in the build
workers; measuring in the runner). The log lands in tuning_logs/ and resumes when run again.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tilecraft  # noqa: E402
import tilecraft.autotune as autotune  # noqa: E402
from tilecraft.target import Target  # noqa: E402


def median_seconds(fn, repeats: int, inner: int = 3) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def tune(task, trials: int, log: str, tuner_name: str, seed: int, args) -> tuple:
    tuner = (autotune.tuner.XGBTuner(task, feature_type=args.feature_type, seed=seed) if tuner_name == "xgb"
             else autotune.tuner.RandomTuner(task, seed=seed))
    done = tuner.load_history(autotune.record.load_from_file(log)) if os.path.exists(log) else 0
    remaining = max(0, trials - done)
    option = autotune.measure_option(
        builder=autotune.LocalBuilder(timeout=args.build_timeout),
        runner=autotune.LocalRunner(number=args.number, repeat=args.runs, timeout=args.run_timeout,
                                    max_timing_s=1.0))
    t0 = time.perf_counter()
    if remaining:
        tuner.tune(remaining, option, callbacks=[autotune.callback.progress_bar(remaining, prefix=task.name),
                                                 autotune.callback.log_to_file(log)])
    wall = time.perf_counter() - t0
    return tuner, remaining, wall


def report_throughput(tuner, n, wall):
    if not n:
        print("  (resumed a complete log: no new candidates this run)")
        return
    st = tuner.measure_stats
    print(f"  throughput: {n} candidates in {wall:.0f} s = {60 * n / wall:.1f} candidates/min")
    build_wall, run_wall = st.get("build_wall", 0.0), st.get("run_wall", 0.0)
    other = max(0.0, wall - build_wall - run_wall)
    print(f"  wall time: building {100 * build_wall / wall:.0f}% (parallel workers), measuring "
          f"{100 * run_wall / wall:.0f}%, tuner (model, search, logging) {100 * other / wall:.0f}%")
    phases = {k[6:]: v for k, v in st.items() if k.startswith("build.")}
    total = sum(phases.values()) or 1.0
    print("  inside the build workers (CPU seconds summed over workers): "
          + ", ".join(f"{k} {v:.1f} s ({100 * v / total:.0f}%)" for k, v in phases.items()))


def profile_compile(task, n=8, seed=0):
    """Split code generation from LLVM for a sample of configs (in this process)."""
    from tilecraft.codegen import llvm as L
    from tilecraft.codegen.llvm_jit import compile_llvm

    rng = np.random.default_rng(seed)
    cg = llvm = low = 0.0
    for i in rng.choice(len(task.config_space), size=n, replace=False):
        sch, args = task.instantiate(task.config_space.get(task.config_space.valid_index(int(i))))
        t0 = time.perf_counter()
        func = tilecraft.lower(sch, args, name="default_function")
        t1 = time.perf_counter()
        src = L.codegen_llvm([func], "llvm")
        t2 = time.perf_counter()
        compile_llvm(src)
        t3 = time.perf_counter()
        low, cg, llvm = low + t1 - t0, cg + t2 - t1, llvm + t3 - t2
    tot = low + cg + llvm
    print(f"  per candidate (sample of {n}): lowering {1e3 * low / n:.0f} ms ({100 * low / tot:.0f}%), "
          f"code generation {1e3 * cg / n:.0f} ms ({100 * cg / tot:.0f}%), LLVM {1e3 * llvm / n:.0f} ms "
          f"({100 * llvm / tot:.0f}%)")


def best_module(log, template, targs):
    with autotune.apply_history_best(log):
        with Target("llvm"):
            sch, args = template(*targs)
            return tilecraft.build(sch, args, target="llvm"), args


def gemm(args):
    import tilecraft.topi.matmul as topi_matmul

    n = args.n
    a = np.random.default_rng(0).uniform(-1, 1, (n, n)).astype("float32")
    b = np.random.default_rng(1).uniform(-1, 1, (n, n)).astype("float32")
    flop = 2.0 * n ** 3
    np_s = median_seconds(lambda: np.dot(a, b), args.repeats)
    print(f"GEMM fp32 {n}x{n}x{n}, threads={tilecraft.get_num_threads()}, device={autotune.record.local_device_name()}")
    print(f"  numpy.dot: {flop / np_s / 1e9:.1f} GFLOP/s (median of {args.repeats})")
    task = autotune.task.create("topi/matmul.llvm", args=(n, n, n, "float32"), target="llvm")
    log = args.log or f"tuning_logs/bench_gemm_{n}_{args.tuner}_t{tilecraft.get_num_threads()}.jsonl"
    tuner, new, wall = tune(task, args.trials, log, args.tuner, args.seed, args)
    report_throughput(tuner, new, wall)
    if args.profile:
        profile_compile(task)
    mod, _ = best_module(log, topi_matmul.matmul, (n, n, n, "float32"))
    c = np.zeros((n, n), "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-2)
    t = mod.time_evaluator(mod.entry_name, tilecraft.cpu(0), number=3, repeat=args.repeats)(a, b, c)
    ours = statistics.median(t.results)
    np_s = median_seconds(lambda: np.dot(a, b), args.repeats)   # again, right after ours
    print(f"  tuned tilecraft ({len(autotune.record.load_from_file(log))} trials in log): "
          f"{flop / ours / 1e9:.1f} GFLOP/s; numpy {flop / np_s / 1e9:.1f} GFLOP/s; "
          f"ratio {np_s / ours:.2f}x numpy (target >= 0.95)")


CONV_TEMPLATES = {"nchwc": "topi/conv2d_nchw.llvm", "direct": "topi/conv2d_nchw_direct.llvm"}


def conv(args):
    """Tune conv2d 1x64x56x56, 3x3, 64 filters, then time the best config and PyTorch in turns
    (--rounds rounds of --repeats timings each) and report the medians."""
    import tilecraft.topi.conv2d as topi_conv

    shape = (1, 64, 56, 56, 64, 3, 3, 1, 1, "float32")
    N, CI, H, W, CO, KH, KW, stride, pad, _ = shape
    x = np.random.default_rng(0).uniform(-1, 1, (N, CI, H, W)).astype("float32")
    w = np.random.default_rng(1).uniform(-1, 1, (CO, CI, KH, KW)).astype("float32")
    flop = 2.0 * N * CO * H * W * CI * KH * KW
    name = CONV_TEMPLATES[args.conv_template]
    print(f"conv2d NCHW {shape[:-1]}, fp32, template {name}, threads={tilecraft.get_num_threads()}, "
          f"device={autotune.record.local_device_name()}")
    try:
        import torch

        tx, tw = torch.from_numpy(x), torch.from_numpy(w)

        def torch_conv():     # (inputs from numpy do not require grad: no autograd work)
            return torch.nn.functional.conv2d(tx, tw, padding=pad)
        ref_out = torch_conv().numpy()
        print(f"  PyTorch {torch.__version__}, {torch.get_num_threads()} threads")
    except ImportError:
        torch_conv, ref_out = None, None
        print("  PyTorch is not installed: no reference ratio")
    task = autotune.task.create(name, args=shape, target="llvm")
    print(f"  config space: {len(task.config_space)} configurations")
    suffix = "" if args.conv_template == "nchwc" else "_direct"
    log = args.log_conv or f"tuning_logs/bench_conv2d_nchwc{suffix}_{args.tuner}_t{tilecraft.get_num_threads()}.jsonl"
    before = len(autotune.record.load_from_file(log)) if os.path.exists(log) else 0
    # a conv2d candidate runs in ~2 ms: more timings per candidate cost little and steady the choice
    tune_args = argparse.Namespace(**{**vars(args), "number": args.conv_number, "runs": args.conv_runs})
    tuner, _, wall = tune(task, args.trials, log, args.tuner, args.seed, tune_args)
    report_throughput(tuner, len(autotune.record.load_from_file(log)) - before, wall)
    template = topi_conv.conv2d_nchw if args.conv_template == "nchwc" else topi_conv.conv2d_nchw_direct
    mod, _ = best_module(log, template, shape)
    best = autotune.record.pick_best(log)
    n_trials = len(autotune.record.load_from_file(log))
    if best:
        print(f"  best config of {n_trials} trials: {best[0][0].config}")
    out = np.full((N, CO, H, W), np.nan, "float32")
    mod(x, w, out)
    if ref_out is not None:
        np.testing.assert_allclose(out, ref_out, rtol=1e-3, atol=1e-2)
    ours_t, ref_t = [], []
    for _ in range(args.rounds):     # in turns, so both see the same machine load
        t = mod.time_evaluator(mod.entry_name, tilecraft.cpu(0), number=3, repeat=args.repeats)(x, w, out)
        ours_t.append(statistics.median(t.results))
        if torch_conv is not None:
            ref_t.append(median_seconds(torch_conv, args.repeats))
    ours = statistics.median(ours_t)
    line = f"  tuned tilecraft: {flop / ours / 1e9:.1f} GFLOP/s"
    if ref_t:
        ref_s = statistics.median(ref_t)
        line += (f"; PyTorch {flop / ref_s / 1e9:.1f} GFLOP/s; ratio {ref_s / ours:.2f}x (target >= 1.0); "
                 f"median of {args.rounds} rounds of {args.repeats} timings, per round: "
                 + " ".join(f"{r / o:.2f}" for o, r in zip(ours_t, ref_t)))
    print(line)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--trials", type=int, default=256)
    p.add_argument("--tuner", choices=("xgb", "random"), default="xgb")
    p.add_argument("--feature-type", default="itervar")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--number", type=int, default=2)
    p.add_argument("--runs", type=int, default=3, help="timed repeats per candidate")
    p.add_argument("--repeats", type=int, default=7, help="timed repeats for the final comparison")
    p.add_argument("--build-timeout", type=float, default=20)
    p.add_argument("--run-timeout", type=float, default=20)
    p.add_argument("--log")
    p.add_argument("--log-conv")
    p.add_argument("--conv", action="store_true", help="also tune conv2d")
    p.add_argument("--conv-template", choices=sorted(CONV_TEMPLATES), default="nchwc",
                   help="conv2d template: nchwc (packed NCHW[x]c, the default) or direct")
    p.add_argument("--rounds", type=int, default=5, help="conv2d: rounds of timings, ours and PyTorch's in turns")
    p.add_argument("--conv-number", type=int, default=4, help="conv2d: calls per timing while tuning")
    p.add_argument("--conv-runs", type=int, default=5, help="conv2d: timings per candidate while tuning")
    p.add_argument("--no-gemm", action="store_true")
    p.add_argument("--profile", action="store_true", help="split codegen from LLVM on a sample")
    args = p.parse_args()
    os.makedirs("tuning_logs", exist_ok=True)
    if not args.no_gemm:
        gemm(args)
    if args.conv:
        conv(args)


if __name__ == "__main__":
    main()
