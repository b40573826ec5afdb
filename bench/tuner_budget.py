"""Search quality in spaces too large to enumerate: tuners at fixed budgets on the real machine.

    python3 bench/tuner_budget.py gemm1024                      # CPU, 1 thread: quiet machine only
    python3 bench/tuner_budget.py sgemm1024_cuda conv2d_64_cuda --gpu   # on a GPU machine

Each tuner runs `--seeds` times (5) from an empty log, each seed drawing its own warm-up; XGB
up to the largest of `--budgets` (64,128,256), Random up to `--random-budget` (512). The
figure per budget is the best throughput among the first N trials of a run, as the tuner
measured it; the report gives the median and range over seeds, and whether XGB's median at 128
reaches Random's at 512 (issue 13's target). Logs go to `--log-dir/<space>_<tuner>_s<seed>.jsonl`
and resume when run again (a killed run loses at most one batch). Results:
`bench/results/budget_<space>.json`.

On the CPU the timing runs with one thread (`TILECRAFT_NUM_THREADS=1`); like
`bench/ground_truth.py`, it waits for a quiet machine before each run (`--max-load`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

SPACES = {
    "gemm1024": dict(template="topi/matmul.llvm", module="tilecraft.topi.matmul",
                     args=(1024, 1024, 1024, "float32"), target="llvm"),
    "conv2d_64": dict(template="topi/conv2d_nchw.llvm", module="tilecraft.topi.conv2d",
                      args=(1, 64, 56, 56, 64, 3, 3, 1, 1, "float32"), target="llvm"),
    "sgemm1024_cuda": dict(template="topi/matmul.cuda", module="tilecraft.topi.matmul",
                           args=(1024, 1024, 1024, "float32"), target="cuda"),
    "conv2d_64_cuda": dict(template="topi/conv2d_nchw.cuda", module="tilecraft.topi.conv2d_cuda",
                           args=(1, 64, 56, 56, 64, 3, 3, 1, 1, "float32"), target="cuda"),
}


def wait_quiet(max_load: float) -> float:
    load = os.getloadavg()[0]
    while load > max_load:
        print(f"{time.strftime('%H:%M:%S')} waiting: load {load:.2f} > {max_load}", flush=True)
        time.sleep(60)
        load = os.getloadavg()[0]
    return load


def run_one(name: str, tuner_name: str, seed: int, trials: int, log: str, gpu: bool) -> list[float]:
    """Tune (resuming from ``log``); the GFLOP/s of each trial in log order."""
    import importlib

    import tilecraft.autotune as autotune

    spec = SPACES[name]
    importlib.import_module(spec["module"])
    task = autotune.task.create(spec["template"], args=spec["args"], target=spec["target"])
    tuner = (autotune.tuner.XGBTuner(task, seed=seed) if tuner_name == "xgb"
             else autotune.tuner.RandomTuner(task, seed=seed))
    done = tuner.load_history(autotune.record.load_from_file(log)) if os.path.exists(log) else 0
    if done < trials:
        if gpu:
            option = autotune.measure_option(
                builder=autotune.LocalBuilder(timeout=60),
                runner=autotune.LocalRunner(timeout=30, number=10, repeat=3, min_repeat_ms=20))
        else:
            option = autotune.measure_option(builder=autotune.LocalBuilder(),
                                             runner=autotune.LocalRunner(number=3, repeat=3, min_repeat_ms=20))
        tuner.tune(trials - done, option, callbacks=[autotune.callback.log_to_file(log)])
    seen, trace = set(), []
    for inp, res in autotune.record.load_from_file(log):
        key = json.dumps(inp.config.to_json_dict()["knobs"])
        if key in seen or res.stage != "tune":
            continue
        seen.add(key)
        trace.append(task.flop / res.mean_cost / 1e9 if res.ok else 0.0)
    return trace


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spaces", nargs="+", choices=list(SPACES))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--budgets", default="64,128,256")
    p.add_argument("--random-budget", type=int, default=512)
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--max-load", type=float, default=1.2, help="CPU: start a run only below this load average")
    p.add_argument("--log-dir", default=os.path.join(HERE, "results", "budget_logs"))
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    args = p.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",")]
    if not args.gpu:
        os.environ.setdefault("TILECRAFT_NUM_THREADS", "1")
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.makedirs(args.log_dir, exist_ok=True)
    for name in args.spaces:
        if (SPACES[name]["target"] == "cuda") != args.gpu:
            p.error(f"{name}: {'needs' if not args.gpu else 'is not a'} --gpu space")
        result = {"space": name, "spec": {k: list(v) if isinstance(v, tuple) else v for k, v in SPACES[name].items()},
                  "seeds": args.seeds, "tuners": {}}
        for tuner_name, trials in (("xgb", max(budgets)), ("random", args.random_budget)):
            curves, loads = [], []
            for seed in range(args.seeds):
                loads.append(None if args.gpu else wait_quiet(args.max_load))
                log = os.path.join(args.log_dir, f"{name}_{tuner_name}_s{seed}.jsonl")
                curves.append(run_one(name, tuner_name, seed, trials, log, args.gpu))
            at = {}
            for b in sorted(set(budgets + [trials])):
                if b > trials:
                    continue
                bests = [max(c[:b]) for c in curves]
                at[b] = {"median": statistics.median(bests), "min": min(bests), "max": max(bests)}
                print(f"{name} {tuner_name:6s} best within {b:4d} trials: median {at[b]['median']:.1f} GFLOP/s "
                      f"[{at[b]['min']:.1f}-{at[b]['max']:.1f}] over {len(curves)} seeds", flush=True)
            result["tuners"][tuner_name] = {"trials": trials, "at": at, "load_at_start": loads}
        x, r = result["tuners"]["xgb"]["at"].get(128), result["tuners"]["random"]["at"].get(args.random_budget)
        if x and r:
            result["xgb128_vs_random_at_max"] = x["median"] / r["median"]
            print(f"{name}: XGB's median at 128 / Random's at {args.random_budget}: "
                  f"{x['median'] / r['median']:.3f} (target >= 1)")
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"budget_{name}.json"), "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
