"""Search quality in spaces too large to enumerate: tuners at fixed budgets on the real machine.

    python3 bench/tuner_budget.py conv2d_64 --cores 14,15               # ~6 min on 2 quiet cores
    python3 bench/tuner_budget.py conv2d_64 gemm1024 --seeds 5 --budgets 64,128,256 --random-budget 512
    python3 bench/tuner_budget.py sgemm1024_cuda conv2d_64_cuda --gpu   # on a GPU machine

Random, GA (population 32) and XGB (the default XGBTuner: itervar features, rank loss, 16
random, refit every 8) each run `--seeds` times from an empty log, each seed drawing its own
warm-up, up to the largest of `--budgets` (Random up to `--random-budget`, default the same).
The figure per budget is the best throughput among the first N trials of a run, as the tuner
measured it; the report gives the median and range over seeds per tuner and budget, and
whether XGB's median at 128 reaches Random's at its largest budget (issue 13's target is
Random at 512). Logs go to `--log-dir/<space>_<tuner>_s<seed>.jsonl` and resume when run again
(a killed run loses at most one batch). Results: `bench/results/budget_<space>.json` and `.png`
(best so far against trials: median and range over seeds per tuner).

CPU runs use one thread (`TILECRAFT_NUM_THREADS=1`), one measuring process and one build
process per core of the run. `--cores` runs one tuning run per group of CPUs at a time, each
run (its builders and runner too) pinned to its group, and a run starts only while its CPUs are
idle (other processes below `--max-busy` of each over a second: pin other work away, e.g.
`taskset -c 0-13`): `14,15` (a run per CPU), `0-1,2-3` (a run per group), `each` (a run per CPU
of this process's) or `pairs` (this process's CPUs two by two, hyperthread siblings together
where the host has them); runs in parallel share the host's caches and memory bandwidth, which
the report says. Without `--cores` runs go one at a time and wait for the 1-minute load
average to drop below `--max-load`. `--longest-first` starts Random's long runs first (the set
ends sooner on many cores). `--time-limit S` starts no run after S seconds and reports the
seeds finished. The defaults (3 seeds, budgets 32/64/128, Random to 128: 3 tuners x 3 seeds x
128 trials) fit one CPU space in about 5-7 minutes on 2 cores of a fast host (0.8 s a trial on
one core of the 16-core Emerald Rapids host for the conv2d, most of it building; each trial
timed as 3 calls of at least 5 ms after a warm-up). Issue 13's protocol (5 seeds, 64 / 128 /
256, Random to 512: 5 x (512 + 2 x 256) trials a space) on that host, one call per space:

    python3 bench/tuner_budget.py conv2d_64 --seeds 5 --budgets 64,128,256 --random-budget 512 --cores pairs --longest-first --time-limit 330
    python3 bench/tuner_budget.py gemm1024 --seeds 5 --budgets 64,128,256 --random-budget 512 --cores each --longest-first --time-limit 330

(the conv2d's trials are mostly building, which a pair does two at a time; the GEMM's mostly
timing 1024^3 on one thread, so one CPU a run and all 15 runs at once).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from cpu_load import busy_fraction  # noqa: E402

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
TUNERS = ("random", "ga", "xgb")
# seconds a trial takes on one core of the 16-core Emerald Rapids host (for --longest-first's order)
SECONDS_PER_TRIAL = {"gemm1024": 1.0, "conv2d_64": 0.8}
ONE_THREAD = {"TILECRAFT_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "MKL_NUM_THREADS": "1", "TILECRAFT_FEATURE_WORKERS": "1"}


def make_task(name: str):
    import importlib

    import tilecraft.autotune as autotune

    spec = SPACES[name]
    importlib.import_module(spec["module"])
    return autotune.task.create(spec["template"], args=spec["args"], target=spec["target"])


def make_tuner(tuner_name: str, task, seed: int):
    """The tuners compared, each at its best settings (bench/tuner_compare.py's replays)."""
    from tilecraft.autotune.tuner import GATuner, RandomTuner, XGBTuner

    if tuner_name == "xgb":
        return XGBTuner(task, seed=seed)
    if tuner_name == "ga":
        return GATuner(task, pop_size=32, seed=seed)
    return RandomTuner(task, seed=seed)


def tune_one(name: str, tuner_name: str, seed: int, trials: int, log: str, gpu: bool, builders: int = 1) -> None:
    """Tune ``trials`` configs of space ``name`` (resuming from ``log``), logging to ``log``;
    ``builders``: build processes (a run pinned to a pair of cores builds two at a time)."""
    import tilecraft.autotune as autotune

    task = make_task(name)
    tuner = make_tuner(tuner_name, task, seed)
    done = tuner.load_history(autotune.record.load_from_file(log)) if os.path.exists(log) else 0
    if done >= trials:
        return
    if gpu:
        option = autotune.measure_option(
            builder=autotune.LocalBuilder(timeout=60),
            runner=autotune.LocalRunner(timeout=30, number=10, repeat=3, min_repeat_ms=20))
    else:
        option = autotune.measure_option(builder=autotune.LocalBuilder(n_parallel=builders),
                                         runner=autotune.LocalRunner(number=1, repeat=3, min_repeat_ms=5))
    tuner.tune(trials - done, option, callbacks=[autotune.callback.log_to_file(log)])


def trace_of(name: str, log: str) -> list[float]:
    """GFLOP/s of each distinct config of ``log`` in the order measured (failures 0)."""
    import tilecraft.autotune as autotune

    flop = make_task(name).flop
    seen, trace = set(), []
    if not os.path.exists(log):
        return trace
    for inp, res in autotune.record.load_from_file(log):
        key = json.dumps(inp.config.to_json_dict()["knobs"])
        if key in seen or res.stage != "tune":
            continue
        seen.add(key)
        trace.append(flop / res.mean_cost / 1e9 if res.ok else 0.0)
    return trace


# ---------------------------------------------------------------------------------------------
# Which cores are free (busy_fraction: cpu_load.py).


def wait_quiet(max_load: float) -> float:
    load = os.getloadavg()[0]
    while load > max_load:
        print(f"{time.strftime('%H:%M:%S')} waiting: load {load:.2f} > {max_load}", flush=True)
        time.sleep(60)
        load = os.getloadavg()[0]
    return load


# ---------------------------------------------------------------------------------------------
# The driver.


def core_groups(spec: str, cpus: set[int] | None = None, siblings=None) -> list[tuple[int, ...]]:
    """``--cores``: the groups of CPUs one tuning run each is pinned to. ``"14,15"``: one run per
    CPU; ``"0-1,2-3"``: one run per group; ``"each"``: one run per CPU of this process's;
    ``"pairs"``: this process's CPUs two by two, a core's
    hyperthread siblings together where the host has them (so another run's kernel never shares
    a core with the one being timed), else neighbours. ``siblings(cpu)``: its thread siblings'
    list as Linux writes it (default: read from /sys).

    >>> core_groups("0-1,4,6-7")
    [(0, 1), (4,), (6, 7)]
    """
    mine = set(os.sched_getaffinity(0)) if cpus is None else set(cpus)
    if spec == "each":
        return [(c,) for c in sorted(mine)]
    if spec == "pairs":
        groups, seen = [], set()
        for c in sorted(mine):
            if c in seen:
                continue
            try:
                text = siblings(c) if siblings else read_text(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")
            except OSError:
                text = str(c)
            sib = tuple(sorted(({c} | set(parse_cpus(text.strip()))) & mine))
            seen |= set(sib)
            groups.append(sib)
        if all(len(g) == 1 for g in groups):        # no SMT: neighbours
            flat = [g[0] for g in groups]
            groups = [tuple(flat[k:k + 2]) for k in range(0, len(flat) - 1, 2)]
        return groups
    groups = [tuple(sorted(parse_cpus(part))) for part in spec.split(",")]
    for g in groups:
        bad = [c for c in g if c not in mine]
        if bad:
            raise SystemExit(f"--cores: core {bad[0]} is not one this process may run on ({sorted(mine)})")
    return groups


def read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def parse_cpus(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def run_jobs(jobs: list[tuple], args) -> dict[tuple, dict]:
    """Run ``jobs`` ((space, tuner, seed, trials, log)) in child processes: one per group of
    ``args.cores`` at a time, pinned to it; else one at a time. Returns job -> how it ran."""
    t_end = time.time() + (args.time_limit or 1e9)
    cores = core_groups(args.cores) if args.cores else [None]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not args.gpu:
        env.update(ONE_THREAD)
    running: dict = {}        # core -> (process, job, start, gate figure)
    todo, ran = list(jobs), {}
    while todo or running:
        for core, (proc, job, t0, gate) in list(running.items()):
            if proc.poll() is not None:
                ran[job] = {"rc": proc.returncode, "seconds": round(time.time() - t0, 1),
                            "cores": list(core) if core is not None else None,
                            "gate": gate}
                print(f"{time.strftime('%H:%M:%S')} {job[0]} {job[1]} seed {job[2]}: {job[3]} trials in "
                      f"{time.time() - t0:.0f} s" + (f" on cores {core}" if core is not None else "")
                      + ("" if proc.returncode == 0 else f" (ended with {proc.returncode})"), flush=True)
                del running[core]
        free = [c for c in cores if c not in running]
        if todo and free and time.time() < t_end:
            if free == [None]:
                gate = None if args.gpu else wait_quiet(args.max_load)
                core = None
            else:
                busy = busy_fraction([c for g in free for c in g])
                quiet = [g for g in free if max(busy[c] for c in g) < args.max_busy]
                if not quiet:
                    continue                  # busy_fraction slept a second
                core, gate = quiet[0], round(max(busy[c] for c in quiet[0]), 3)
            job = todo.pop(0)
            name, tuner_name, seed, trials, log = job
            cmd = [sys.executable, os.path.abspath(__file__), "_one", name, "--tuner", tuner_name,
                   "--seed", str(seed), "--trials", str(trials), "--log", log,
                   "--builders", str(len(core) if core is not None else 1)] + (["--gpu"] if args.gpu else [])
            preexec = (lambda g=core: os.sched_setaffinity(0, set(g))) if core is not None else None
            running[core] = (subprocess.Popen(cmd, env=env, preexec_fn=preexec), job, time.time(), gate)
        elif todo and time.time() >= t_end and not running:
            print(f"time limit: {len(todo)} runs not started", flush=True)
            break
        else:
            time.sleep(0.5)
    return ran


def summarise(name: str, args, budgets: list[int], plan: dict, ran: dict) -> dict:
    result = {"space": name, "spec": {k: list(v) if isinstance(v, tuple) else v for k, v in SPACES[name].items()},
              "seeds": args.seeds, "cores": args.cores, "command": "python3 bench/tuner_budget.py "
              + " ".join(sys.argv[1:]), "tuners": {}}
    if args.cores and len(core_groups(args.cores)) > 1:
        groups = core_groups(args.cores)
        result["host"] = (f"not fully quiet: up to {len(groups)} tuning runs at once, each pinned to its own "
                          f"{'CPUs ' if len(groups[0]) > 1 else 'CPU '}{groups} of one host (caches and memory "
                          "bandwidth shared)")
        print(f"{name}: {result['host']}", flush=True)
    for tuner_name, trials in plan.items():
        runs = [(seed, trace_of(name, log_path(args, name, tuner_name, seed))) for seed in range(args.seeds)]
        curves = [c for _, c in runs if len(c) >= trials]
        at = {}
        for b in sorted(set(budgets + [trials])):
            if b > trials or not curves:
                continue
            bests = [max(c[:b]) for c in curves]
            at[b] = {"median": statistics.median(bests), "min": min(bests), "max": max(bests)}
            print(f"{name} {tuner_name:6s} best within {b:4d} trials: median {at[b]['median']:.1f} GFLOP/s "
                  f"[{at[b]['min']:.1f}-{at[b]['max']:.1f}] over {len(curves)} seeds", flush=True)
        result["tuners"][tuner_name] = {
            "trials": trials, "at": at, "seeds_done": len(curves),
            "curves": [c[:trials] for c in curves],
            "runs": [ran.get((name, tuner_name, seed, trials, log_path(args, name, tuner_name, seed)))
                     for seed in range(args.seeds)]}
    x = result["tuners"].get("xgb", {}).get("at", {}).get(128)
    rb = plan.get("random")
    r = result["tuners"].get("random", {}).get("at", {}).get(rb)
    if x and r:
        result["xgb128_vs_random_at_max"] = x["median"] / r["median"]
        print(f"{name}: XGB's median at 128 / Random's at {rb}: {x['median'] / r['median']:.3f} "
              "(issue 13's target: >= 1 against Random at 512)", flush=True)
    return result


def plot(result: dict, path: str) -> None:
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for tuner_name, res in result["tuners"].items():
        if not res["curves"]:
            continue
        best = np.maximum.accumulate(np.asarray(res["curves"], dtype=float), axis=1)
        x = np.arange(1, best.shape[1] + 1)
        line, = ax.plot(x, np.median(best, axis=0), label=f"{tuner_name} ({len(best)} seeds)", lw=1.4)
        ax.fill_between(x, best.min(axis=0), best.max(axis=0), color=line.get_color(), alpha=0.15, lw=0)
    ax.set_xlabel("trials (configs measured)")
    ax.set_ylabel("best so far (GFLOP/s, as the tuner measured)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{result['space']}: median and range over seeds", fontsize=9)
    if ax.lines:
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plan_jobs(args, plan: dict) -> list[tuple]:
    """The tuning runs (space, tuner, seed, trials, log) in the order they start: seed by seed, so
    that a time limit leaves every tuner with about as many seeds; with ``--longest-first``, the
    longest runs first (seed by seed among runs of one length), so the set ends sooner on many
    cores."""
    jobs = [(name, t, seed, plan[t], log_path(args, name, t, seed))
            for seed in range(args.seeds) for name in args.spaces for t in plan]
    if args.longest_first:
        jobs.sort(key=lambda j: (-j[3] * SECONDS_PER_TRIAL.get(j[0], 1.0), j[2]))
    return jobs


def log_path(args, name: str, tuner_name: str, seed: int) -> str:
    return os.path.join(args.log_dir, f"{name}_{tuner_name}_s{seed}.jsonl")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spaces", nargs="+", choices=list(SPACES) + ["_one"])
    p.add_argument("--tuners", default=",".join(TUNERS))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--budgets", default="32,64,128")
    p.add_argument("--random-budget", type=int, default=0, help="Random's trials (default: the largest budget)")
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--cores", default="",
                   help="CPU: one tuning run per listed core or group at a time, pinned to it: '14,15', "
                        "'0-1,2-3', 'each' (every CPU this process may use) or 'pairs' (those two by two)")
    p.add_argument("--max-busy", type=float, default=0.3,
                   help="--cores: start a run on a core only when other work kept it below this busy")
    p.add_argument("--max-load", type=float, default=1.2,
                   help="without --cores: start a run only below this 1-minute load average")
    p.add_argument("--time-limit", type=float, default=0.0, help="start no run after this many seconds")
    p.add_argument("--log-dir", default=os.path.join(HERE, "results", "budget_logs"))
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--tuner", default="xgb")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trials", type=int, default=0)
    p.add_argument("--log", default="")
    p.add_argument("--builders", type=int, default=1)
    p.add_argument("--longest-first", action="store_true",
                   help="start the longest runs first (Random's, then the larger space's): the whole set "
                        "ends sooner on many cores; without it, seed by seed")
    p.add_argument("--replot", action="store_true",
                   help="only redraw the plots from the JSON of an earlier run (in --out)")
    args = p.parse_intermixed_args(argv)
    if args.replot:
        for name in args.spaces:
            with open(os.path.join(args.out, f"budget_{name}.json")) as f:
                plot(json.load(f), os.path.join(args.out, f"budget_{name}.png"))
        return 0
    if args.spaces[0] == "_one":
        tune_one(args.spaces[1], args.tuner, args.seed, args.trials, args.log, args.gpu, args.builders)
        return 0
    budgets = sorted(int(b) for b in args.budgets.split(","))
    tuners = args.tuners.split(",")
    unknown = [t for t in tuners if t not in TUNERS]
    if unknown:
        p.error(f"unknown tuner {unknown[0]!r}; the tuners: {', '.join(TUNERS)}")
    for name in args.spaces:
        if (SPACES[name]["target"] == "cuda") != args.gpu:
            p.error(f"{name}: {'needs' if not args.gpu else 'is not a'} --gpu space")
    if args.gpu and args.cores:
        p.error("--cores is for CPU spaces (GPU runs share the one GPU: they go one at a time)")
    os.makedirs(args.log_dir, exist_ok=True)
    plan = {t: (args.random_budget or budgets[-1]) if t == "random" else budgets[-1] for t in tuners}
    jobs = plan_jobs(args, plan)
    ran = run_jobs(jobs, args)
    os.makedirs(args.out, exist_ok=True)
    for name in args.spaces:
        result = summarise(name, args, budgets, plan, ran)
        with open(os.path.join(args.out, f"budget_{name}.json"), "w") as f:
            json.dump(result, f, indent=1)
        try:
            plot(result, os.path.join(args.out, f"budget_{name}.png"))
        except ImportError:         # a device without matplotlib: draw it later from the JSON
            print(f"{name}: no plot (matplotlib is missing); draw it with --replot --out {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
