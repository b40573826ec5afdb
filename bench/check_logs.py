"""Do shipped tuning logs keep their promise? Apply each log's best, time it, compare.

    python3 bench/check_logs.py tuning_logs/*.jsonl              # every log, in turn
    python3 bench/check_logs.py tuning_logs/bench_gemm_1024_xgb_t2.jsonl --rounds 5

For each workload of a log: the best record's figure (what the log promises; a verified one
when the log has them) and the same config built the way a user builds it
(`apply_history_best`, `tilecraft.build`) and timed now, alone, at the thread count the log's
name says (`_t1` / `_t2`; else this process's), in `--rounds` rounds alternating with the
reference where there is one (numpy for GEMM): the medians and their ratios. Each log runs in
a fresh process so its thread count takes effect. Timings on a busy machine move; the load
average is printed with each line.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


def threads_of(path: str) -> int | None:
    m = re.search(r"_t(\d+)(?:_|\.)", os.path.basename(path))
    return int(m.group(1)) if m else None


def check_one(path: str, rounds: int) -> list[dict]:
    import importlib

    import tilecraft
    import tilecraft.autotune as autotune
    from tilecraft.autotune.task import TASK_TABLE
    from tilecraft.target import Target

    out = []
    for inp, res in autotune.record.pick_best(path):
        task = inp.task
        if task.template_module:
            importlib.import_module(task.template_module)
        if task.name not in TASK_TABLE or str(inp.target).split()[0] != "llvm":
            continue
        with autotune.apply_history_best([(inp, res)]):
            with Target(str(inp.target)):
                sch, tensors = TASK_TABLE[task.name](*task.args)
        mod = tilecraft.build(sch, tensors, target="llvm")
        rng = np.random.default_rng(0)
        arrays = [rng.uniform(-1, 1, [int(getattr(d, "value", d)) for d in t.shape]).astype(t.dtype) for t in tensors]
        dev = tilecraft.cpu(0)
        nd = [tilecraft.nd.array(a, dev) for a in arrays]
        timer = mod.time_evaluator(mod.entry_name, dev, number=1, repeat=3, min_repeat_ms=50)
        ref = None
        if task.name == "topi/matmul.llvm":
            a, b = arrays[0], arrays[1]
            ref = lambda: a @ b  # noqa: E731
        ours, theirs = [], []
        for _ in range(rounds):
            ours.append(min(timer(*nd).results))
            if ref is not None:
                import time
                best = float("inf")
                for _ in range(3):
                    t0 = time.perf_counter()
                    ref()
                    best = min(best, time.perf_counter() - t0)
                theirs.append(best)
        now = statistics.median(ours)
        row = {"log": path, "task": f"{task.name}{list(task.args)}", "stage": res.stage,
               "threads": tilecraft.get_num_threads(), "logged_gflops": task.flop / res.mean_cost / 1e9,
               "now_gflops": task.flop / now / 1e9, "load": os.getloadavg()[0]}
        if theirs:
            row["numpy_gflops"] = task.flop / statistics.median(theirs) / 1e9
            row["vs_numpy"] = statistics.median(theirs) / now
        out.append(row)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("logs", nargs="+")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._child:
        for row in check_one(args.logs[0], args.rounds):
            print("ROW " + json.dumps(row))
        return 0
    for path in args.logs:
        env = dict(os.environ)
        n = threads_of(path)
        if n:
            env.update(TILECRAFT_NUM_THREADS=str(n), OPENBLAS_NUM_THREADS=str(n), OMP_NUM_THREADS=str(n))
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), path, "--rounds", str(args.rounds),
                               "--_child"], env=env, capture_output=True, text=True)
        rows = [json.loads(x[4:]) for x in proc.stdout.splitlines() if x.startswith("ROW ")]
        if proc.returncode != 0:
            print(f"{path}: failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
        for r in rows:
            extra = (f"; numpy {r['numpy_gflops']:.1f} GFLOP/s: {r['vs_numpy']:.2f}x numpy" if "vs_numpy" in r else "")
            print(f"{os.path.basename(path)}: {r['task']} at {r['threads']} thread(s): logged "
                  f"{r['logged_gflops']:.1f} GFLOP/s ({r['stage']}), now {r['now_gflops']:.1f} "
                  f"({r['now_gflops'] / r['logged_gflops']:.2f}x the log){extra}; load {r['load']:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
