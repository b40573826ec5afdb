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

Issue 13's large spaces (item 5): `conv2d_direct_64` (the direct conv2d template, 4200 configs),
`gemm1024` (49248), and on the GPU `sgemm2048_cuda` (2030) and `tc_gemm4096_cuda` (the mma.sync
tensor-core GEMM, 2844). `bench/tuner_budget_cpu.sh` and `bench/tuner_budget_gpu.sh` are one
device call each. `--measure-cache` shares one measurement per config among a space's runs
(other processes included; on the GPU, timing holds a lock, so `--parallel N` runs build at once
and time one at a time), `--random-pool N` has Random's seeds walk one uniform pool of N configs
(measured once), `--deadline S` stops the runs still going (a cut-off run counts at the budgets
it reached), `--no-run` only reports from the logs. `--remeasure K --rounds R`: after the runs,
each run's K fastest configs within each budget are built once and timed again in R interleaved
rounds (`tilecraft.autotune.tuner.tuner.remeasure`), and the report gives every tuner's
re-measured choice beside its tuning figure (what `tune(verify_top=)` and `apply_history_best`
would pick; the best of many noisy tuning figures favours the tuner that draws more):

    python3 bench/tuner_budget.py sgemm2048_cuda tc_gemm4096_cuda --gpu --seeds 5 --budgets 64,128,256 \
        --random-budget 512 --measure-cache --random-pool 640 --parallel 10 --builders 4 --deadline 330 \
        --remeasure 3 --rounds 3
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
    # issue 13 item 5's large spaces: the direct conv2d template on a ResNet layer (4200 configs;
    # the NCHW[x]c template's spaces have at most 260, enumerated in bench/ground_truth/), the
    # CUDA SGEMM at 2048^3 (2030 configs, none timed yet) and the mma.sync tensor-core GEMM (2844)
    "conv2d_direct_64": dict(template="topi/conv2d_nchw_direct.llvm", module="tilecraft.topi.conv2d",
                             args=(1, 64, 56, 56, 64, 3, 3, 1, 1, "float32"), target="llvm"),
    "sgemm2048_cuda": dict(template="topi/matmul.cuda", module="tilecraft.topi.matmul",
                           args=(2048, 2048, 2048, "float32"), target="cuda"),
    "tc_gemm4096_cuda": dict(template="topi/matmul_tensorcore.cuda", module="tilecraft.topi.tensorcore_template",
                             args=(4096, 4096, 4096, "float16", "float32", "row_major"), target="cuda"),
}
TUNERS = ("random", "ga", "xgb")
# seconds a trial takes on one core of the 16-core Emerald Rapids host (for --longest-first's order)
SECONDS_PER_TRIAL = {"gemm1024": 1.0, "conv2d_64": 0.8, "conv2d_direct_64": 0.8}
POOL_SEED = 20261125           # the shared pool Random's seeds draw from (``--random-pool``)
ONE_THREAD = {"TILECRAFT_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "MKL_NUM_THREADS": "1", "TILECRAFT_FEATURE_WORKERS": "1"}


def make_task(name: str):
    import importlib

    import tilecraft.autotune as autotune

    spec = SPACES[name]
    importlib.import_module(spec["module"])
    return autotune.task.create(spec["template"], args=spec["args"], target=spec["target"])


def make_tuner(tuner_name: str, task, seed: int, random_pool: int = 0):
    """The tuners compared, each at its best settings (bench/tuner_compare.py's replays);
    ``random_pool``: Random draws from a shared pool of that many configs (:func:`pool_random`)."""
    from tilecraft.autotune.tuner import GATuner, RandomTuner, XGBTuner

    if tuner_name == "xgb":
        return XGBTuner(task, seed=seed)
    if tuner_name == "ga":
        return GATuner(task, pop_size=32, seed=seed)
    tuner = RandomTuner(task, seed=seed)
    return pool_random(tuner, random_pool) if random_pool else tuner


def pool_random(tuner, pool_size: int):
    """Make ``tuner`` (a ``RandomTuner``) walk, in its own random order, a pool of ``pool_size``
    configs drawn uniformly once for all seeds (``POOL_SEED``). Each seed's draws are still a
    uniform sample of the space without replacement (a uniform subset of a uniform subset), but
    the seeds overlap, so a shared measurement cache (:class:`CachedMeasure`) measures the pool
    once instead of ``seeds x trials`` configs; seeds are then not independent (at a budget close
    to the pool's size every seed holds most of the pool), which the report says.

    >>> t = pool_random(RandomTuner(task, seed=3), 640)
    """
    import numpy as np

    n = min(pool_size, tuner.visited_max)
    pool = np.random.default_rng(POOL_SEED).permutation(tuner.visited_max)[:n]
    tuner._order = [tuner._range_index(int(k)) for k in tuner.rng.permutation(pool)]
    tuner._pos = 0
    tuner.visited_max = n
    return tuner


class CachedMeasure:
    """A builder and runner in one (``measure_option(builder=m, runner=m)``) that shares what is
    measured among the tuning runs of one space (other processes included): a config measured
    by any run is looked up in ``cache`` (a tuning log, appended under a lock) instead of built
    and timed again; the others go to ``builder`` / ``runner``. With ``gpu_lock`` (a file path)
    the runner times while holding that lock, so runs in parallel processes build in parallel
    but time one at a time on the one GPU. A cached figure is the first run's measurement of the
    config: the runs compare as if replayed against a table measured as they went (the noise a
    config met is the same for every tuner that draws it).

    >>> m = CachedMeasure(LocalBuilder(n_parallel=4), LocalRunner(), "cache.jsonl", "gpu.lock")
    >>> tuner.tune(256, autotune.measure_option(builder=m, runner=m))
    """

    def __init__(self, builder, runner, cache: str, gpu_lock: str | None = None):
        self.builder, self.runner, self.cache, self.gpu_lock = builder, runner, cache, gpu_lock
        self.n_parallel = getattr(builder, "n_parallel", 1)
        self.known: dict = {}          # config index -> MeasureResult
        self._offset = 0
        self.hits = self.misses = 0

    def set_task(self, task):
        self.task = task
        self.builder.set_task(task)
        self.runner.set_task(task)

    def _refresh(self) -> None:
        import tilecraft.autotune as autotune

        if not os.path.exists(self.cache):
            return
        with open(self.cache) as f:
            f.seek(self._offset)
            text = f.read()
        end = text.rfind("\n") + 1           # a line being appended waits for the next refresh
        self._offset += len(text[:end].encode())
        for line in text[:end].splitlines():
            if line.strip():
                inp, res = autotune.record.decode(line)
                self.known.setdefault(inp.config.index, res)

    def build(self, inputs):
        from tilecraft.autotune.measure import BuildResult, MeasureErrorNo

        self._refresh()
        todo = [k for k, inp in enumerate(inputs) if inp.config.index not in self.known]
        built = dict(zip(todo, self.builder.build([inputs[k] for k in todo]) if todo else []))
        self.hits += len(inputs) - len(todo)
        self.misses += len(todo)
        failed = [k for k in todo if built[k].error_no != MeasureErrorNo.NO_ERROR]
        if failed:        # build errors are results too: no other run builds the config again
            from tilecraft.autotune.measure import MeasureResult
            self._append([(inputs[k], MeasureResult((), built[k].error_no, built[k].error_msg, built[k].time_cost,
                                                    time.time(), built[k].time_cost)) for k in failed])
        return [built.get(k) or BuildResult("cached", (), MeasureErrorNo.NO_ERROR, "", 0.0)
                for k in range(len(inputs))]

    def run(self, inputs, build_results):
        import fcntl

        todo = [k for k, br in enumerate(build_results) if br.filename != "cached"]
        out = [None] * len(inputs)
        if todo:
            lock = open(self.gpu_lock, "a") if self.gpu_lock else None
            try:
                if lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                fresh = self.runner.run([inputs[k] for k in todo], [build_results[k] for k in todo])
            finally:
                if lock:
                    lock.close()
            for k, res in zip(todo, fresh):
                out[k] = res
            self._append([(inputs[k], out[k]) for k in todo])
        for k, inp in enumerate(inputs):
            if out[k] is None:
                out[k] = self.known[inp.config.index]
        return out

    def _append(self, pairs) -> None:
        import fcntl

        import tilecraft.autotune as autotune

        text = "".join(autotune.record.encode(inp, res) + "\n" for inp, res in pairs)
        with open(self.cache, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(text)

    def cleanup(self, build_results):
        mine = [br for br in build_results if br.filename != "cached"]
        cleanup = getattr(self.builder, "cleanup", None)
        if cleanup is not None and mine:
            cleanup(mine)

    def close(self):
        for obj in (self.builder, self.runner):
            close = getattr(obj, "close", None)
            if close is not None:
                close()


def tune_one(name: str, tuner_name: str, seed: int, trials: int, log: str, gpu: bool, builders: int = 1,
             cache: str = "", random_pool: int = 0) -> None:
    """Tune ``trials`` configs of space ``name`` (resuming from ``log``), logging to ``log``;
    ``builders``: build processes (a run pinned to a pair of cores builds two at a time);
    ``cache``: a measurement cache shared by the runs of the space (:class:`CachedMeasure`; on
    the GPU timing then holds ``cache + ".gpu.lock"``); ``random_pool``: see :func:`pool_random`."""
    import tilecraft.autotune as autotune

    task = make_task(name)
    tuner = make_tuner(tuner_name, task, seed, random_pool)
    done = tuner.load_history(autotune.record.load_from_file(log)) if os.path.exists(log) else 0
    if done >= trials:
        return
    if gpu:     # as bench/ground_truth.py times the GPU tables: repeats of at least 5 ms
        builder = autotune.LocalBuilder(timeout=120, n_parallel=builders)
        runner = autotune.LocalRunner(timeout=30, number=1, repeat=3, min_repeat_ms=5)
    else:
        builder = autotune.LocalBuilder(n_parallel=builders)
        runner = autotune.LocalRunner(number=1, repeat=3, min_repeat_ms=5)
    if cache:
        m = CachedMeasure(builder, runner, cache, cache + ".gpu.lock" if gpu else None)
        builder = runner = m
    tuner.tune(trials - done, autotune.measure_option(builder=builder, runner=runner),
               callbacks=[autotune.callback.log_to_file(log)])
    if cache:
        print(f"{name} {tuner_name} seed {seed}: {m.hits} configs from the shared cache, {m.misses} measured",
              flush=True)


def trace_of(name: str, log: str) -> list[float]:
    """GFLOP/s of each distinct config of ``log`` in the order measured (failures 0)."""
    return [g for _, g in trials_of(name, log)]


def trials_of(name: str, log: str) -> list[tuple[int, float]]:
    """(config index, GFLOP/s) of each distinct config of ``log`` in the order measured (failures
    0); re-measurements (``stage: verify``) are not trials."""
    import tilecraft.autotune as autotune

    flop = make_task(name).flop
    seen, trials = set(), []
    if not os.path.exists(log):
        return trials
    for inp, res in autotune.record.load_from_file(log):
        key = json.dumps(inp.config.to_json_dict()["knobs"])
        if key in seen or res.stage != "tune":
            continue
        seen.add(key)
        trials.append((inp.config.index, flop / res.mean_cost / 1e9 if res.ok else 0.0))
    return trials


# ---------------------------------------------------------------------------------------------
# The re-measurement (``--remeasure K``): every tuner's choice judged alike, as a user runs it.


def top_configs(trials: list[tuple[int, float]], budget: int, k: int) -> list[int]:
    """The ``k`` fastest distinct configs (by the tuning figure) among the first ``budget`` trials:
    what a run stopped at ``budget`` re-measures (``tune(verify_top=k)``) and chooses among.

    >>> top_configs([(4, 1.0), (9, 3.0), (2, 0.0), (7, 2.0)], 3, 2)
    [9, 4]
    """
    ranked = sorted((t for t in trials[:budget] if t[1] > 0), key=lambda t: -t[1])
    return [index for index, _ in ranked[:k]]


def remeasure_set(name: str, args, plan: dict, budgets: list[int]) -> list[int]:
    """Every config some run of space ``name`` would re-measure at some budget (its top
    ``args.remeasure`` within the first N trials, N each budget it reached), sorted."""
    chosen: set[int] = set()
    for tuner_name, trials in plan.items():
        for seed in range(args.seeds):
            run = trials_of(name, log_path(args, name, tuner_name, seed))
            for bud in sorted(set(budgets + [trials])):
                if bud <= min(trials, len(run)):
                    chosen.update(top_configs(run, bud, args.remeasure))
    return sorted(chosen)


def remeasured_path(args, name: str) -> str:
    return os.path.join(args.log_dir, f"{name}_remeasured.jsonl")


def remeasure_space(name: str, args, plan: dict, budgets: list[int]) -> int:
    """Re-measure ``remeasure_set`` in ``args.rounds`` interleaved rounds (``autotune.tuner.tuner.
    remeasure``: each config built once, then timed alone once a round, in a fresh random order
    each round) and append the results, ``stage: verify`` with one cost per round, to
    ``<log-dir>/<space>_remeasured.jsonl``; configs already there are skipped (a resumed call).
    Runs in this process (``_remeasure``: the driver starts it pinned to one group of cores, at one
    thread on the CPU). Returns how many configs it measured."""
    import numpy as np

    import tilecraft.autotune as autotune
    from tilecraft.autotune.tuner.tuner import remeasure

    task = make_task(name)
    path = remeasured_path(args, name)
    done = {inp.config.index for inp, _ in autotune.record.load_from_file(path)} if os.path.exists(path) else set()
    todo = [i for i in remeasure_set(name, args, plan, budgets) if i not in done]
    if not todo:
        return 0
    if args.gpu:
        builder = autotune.LocalBuilder(timeout=120, n_parallel=args.builders)
        runner = autotune.LocalRunner(timeout=30, number=1, repeat=3, min_repeat_ms=5)
    else:
        builder = autotune.LocalBuilder(n_parallel=args.builders)
        runner = autotune.LocalRunner(number=1, repeat=3, min_repeat_ms=5)
    builder.set_task(task)
    runner.set_task(task)
    inputs = [autotune.measure.MeasureInput(task.target, task, task.config_space.get(i)) for i in todo]
    try:
        for start in range(0, len(inputs), 64):      # in parts: a cut-off call keeps what it re-measured
            part = inputs[start:start + 64]
            results = remeasure(builder, runner, part, args.rounds, np.random.default_rng(POOL_SEED + start))
            text = "".join(autotune.record.encode(inp, res) + "\n" for inp, res in zip(part, results))
            with open(path, "a") as f:
                f.write(text)
    finally:
        for obj in (builder, runner):
            close = getattr(obj, "close", None)
            if close is not None:
                close()
    return len(todo)


def remeasured_figures(name: str, args) -> dict[int, float]:
    """config index -> re-measured GFLOP/s (the mean over rounds; failures 0)."""
    import tilecraft.autotune as autotune

    path = remeasured_path(args, name)
    if not os.path.exists(path):
        return {}
    flop = make_task(name).flop
    return {inp.config.index: (flop / res.mean_cost / 1e9 if res.ok else 0.0)
            for inp, res in autotune.record.load_from_file(path)}


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
    ``args.cores`` at a time, pinned to it; on the GPU ``args.parallel`` at a time (building in
    parallel, timing one at a time: ``--measure-cache``); else one at a time. ``--time-limit``:
    start no run after that; ``--deadline``: stop the runs still going then (their logs keep
    what they measured). Returns job -> how it ran."""
    t_end = time.time() + (args.time_limit or 1e9)
    t_kill = time.time() + (args.deadline or 1e9)
    if args.cores:
        slots = core_groups(args.cores)
    else:
        slots = [("run", k) for k in range(max(1, args.parallel))]
    pinned = bool(args.cores)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not args.gpu:
        env.update(ONE_THREAD)
    else:
        env.setdefault("TILECRAFT_FEATURE_WORKERS", "1")   # many runs at once: a small feature pool each
    running: dict = {}        # slot -> (process, job, start, gate figure)
    todo, ran = list(jobs), {}
    while todo or running:
        for slot, (proc, job, t0, gate) in list(running.items()):
            if proc.poll() is None and time.time() > t_kill:
                stop(proc)
            if proc.poll() is not None:
                ran[job] = {"rc": proc.returncode, "seconds": round(time.time() - t0, 1),
                            "cores": list(slot) if pinned else None, "gate": gate,
                            "cut_off": time.time() > t_kill}
                print(f"{time.strftime('%H:%M:%S')} {job[0]} {job[1]} seed {job[2]}: {len(trace_of(job[0], job[4]))} "
                      f"of {job[3]} trials in {time.time() - t0:.0f} s" + (f" on cores {slot}" if pinned else "")
                      + ("" if proc.returncode == 0 else f" (ended with {proc.returncode}"
                         + (": cut off at the deadline)" if time.time() > t_kill else ")")), flush=True)
                del running[slot]
        free = [c for c in slots if c not in running]
        if todo and free and time.time() < min(t_end, t_kill):
            if not pinned:
                gate = None if (args.gpu or args.parallel > 1) else wait_quiet(args.max_load)
                slot = free[0]
            else:
                busy = busy_fraction([c for g in free for c in g])
                quiet = [g for g in free if max(busy[c] for c in g) < args.max_busy]
                if not quiet:
                    continue                  # busy_fraction slept a second
                slot, gate = quiet[0], round(max(busy[c] for c in quiet[0]), 3)
            job = todo.pop(0)
            name, tuner_name, seed, trials, log = job
            builders = len(slot) if pinned else args.builders
            cmd = [sys.executable, os.path.abspath(__file__), "_one", name, "--tuner", tuner_name,
                   "--seed", str(seed), "--trials", str(trials), "--log", log, "--builders", str(builders),
                   "--random-pool", str(args.random_pool)] + (["--gpu"] if args.gpu else [])
            if args.measure_cache:
                cmd += ["--cache", cache_path(args, name)]
            preexec = (lambda g=slot: os.sched_setaffinity(0, set(g))) if pinned else None
            running[slot] = (subprocess.Popen(cmd, env=env, preexec_fn=preexec, start_new_session=True), job,
                             time.time(), gate)
        elif todo and time.time() >= min(t_end, t_kill) and not running:
            print(f"time limit: {len(todo)} runs not started", flush=True)
            break
        else:
            time.sleep(0.5)
    return ran


def run_remeasure(name: str, args) -> None:
    """``--remeasure``: re-measure space ``name``'s chosen configs (``remeasure_space``) in a child
    process, on the CPU at one thread pinned to the first group of ``--cores`` (building on each
    of its CPUs; without ``--cores``, and on the GPU, building on every CPU of this process's),
    stopped after ``--remeasure-s`` seconds if given. It runs after every tuning run has ended
    (``--no-run`` too: configs already re-measured are skipped)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    group = core_groups(args.cores)[0] if args.cores else None
    if not args.gpu:
        env.update(ONE_THREAD)
    cmd = [sys.executable, os.path.abspath(__file__), "_remeasure", name, "--tuners", args.tuners,
           "--seeds", str(args.seeds), "--budgets", args.budgets, "--random-budget", str(args.random_budget),
           "--remeasure", str(args.remeasure), "--rounds", str(args.rounds), "--log-dir", args.log_dir,
           "--builders", str(len(group) if group else len(os.sched_getaffinity(0)))] + (["--gpu"] if args.gpu else [])
    preexec = (lambda g=group: os.sched_setaffinity(0, set(g))) if group else None
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, preexec_fn=preexec, start_new_session=True)
    while proc.poll() is None:
        if args.remeasure_s and time.time() - t0 > args.remeasure_s:
            print(f"{name}: re-measurement stopped after {args.remeasure_s:.0f} s (the report uses what it "
                  "re-measured)", flush=True)
            stop(proc)
            break
        time.sleep(0.5)
    print(f"{time.strftime('%H:%M:%S')} {name}: re-measurement took {time.time() - t0:.0f} s"
          + (f" on cores {group}" if group else ""), flush=True)


def stop(proc) -> None:
    """End a tuning run and its builder and runner processes (its own session: a process group)."""
    import signal

    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError, AttributeError, TypeError):
            getattr(proc, "terminate" if sig == signal.SIGTERM else "kill")()
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def cache_path(args, name: str) -> str:
    return os.path.join(args.log_dir, f"{name}_measured.jsonl")


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """Lower quartile, median, upper quartile (linear interpolation, as numpy's default).

    >>> quartiles([1.0, 2.0, 3.0, 4.0, 5.0])
    (2.0, 3.0, 4.0)
    """
    v = sorted(values)

    def pct(q):
        x = q * (len(v) - 1)
        lo = int(x)
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (x - lo)

    return pct(0.25), pct(0.5), pct(0.75)


def summarise(name: str, args, budgets: list[int], plan: dict, ran: dict) -> dict:
    """Per tuner and budget: the best GFLOP/s among each seed's first N trials; median,
    quartiles and range over the seeds whose run reached N trials (a run cut off at the deadline
    counts at the budgets it reached)."""
    result = {"space": name, "spec": {k: list(v) if isinstance(v, tuple) else v for k, v in SPACES[name].items()},
              "seeds": args.seeds, "cores": args.cores, "command": "python3 bench/tuner_budget.py "
              + " ".join(sys.argv[1:]), "date": time.strftime("%Y-%m-%d %H:%M"), "tuners": {}}
    notes = []
    if args.cores and len(core_groups(args.cores)) > 1:
        groups = core_groups(args.cores)
        notes.append(f"host not fully quiet: up to {len(groups)} tuning runs at once, each pinned to its own "
                     f"{'CPUs ' if len(groups[0]) > 1 else 'CPU '}{groups} of one host (caches and memory "
                     "bandwidth shared)")
    if args.gpu and args.parallel > 1:
        notes.append(f"GPU: {args.parallel} tuning runs at once, building in parallel on the CPUs they were given, "
                     "timing one at a time on the one GPU")
    if args.measure_cache:
        notes.append("one measurement per config shared by all runs of the space (the first run to draw a config "
                     "measured it; the others read that figure)")
    if args.random_pool and "random" in plan:
        notes.append(f"Random's seeds draw from one uniform pool of {args.random_pool} configs (each seed's draws "
                     "uniform over the space; the seeds overlap, so they are not independent)")
    result["host"] = "; ".join(notes)
    for note in notes:
        print(f"{name}: {note}", flush=True)
    k = getattr(args, "remeasure", 0)
    figures = remeasured_figures(name, args) if k else {}
    if figures:
        notes.append(f"re-measured: each run's {k} fastest configs within each budget (by the tuning figure), "
                     f"built once and timed again in {getattr(args, 'rounds', '?')} interleaved rounds after all "
                     "runs; a run's figure is the best re-measured of its top (what tune(verify_top=) and "
                     "apply_history_best choose)")
        result["host"] = "; ".join(notes)
        print(f"{name}: {notes[-1]}", flush=True)
    for tuner_name, trials in plan.items():
        all_trials = [trials_of(name, log_path(args, name, tuner_name, seed))[:trials] for seed in range(args.seeds)]
        runs = [(seed, [g for _, g in t]) for seed, t in enumerate(all_trials)]
        curves = [c[:trials] for _, c in runs if c]
        at, at_re = {}, {}
        for bud in sorted(set(budgets + [trials])) if figures else ():
            picks = [top_configs(t, bud, k) for t in all_trials if len(t) >= bud and bud <= trials]
            bests = [max(figures[i] for i in p) for p in picks if p and all(i in figures for i in p)]
            if bests:
                q1, med, q3 = quartiles(bests)
                at_re[bud] = {"median": med, "q1": q1, "q3": q3, "min": min(bests), "max": max(bests),
                              "seeds": len(bests)}
                print(f"{name} {tuner_name:6s} re-measured best of its top {k} within {bud:4d} trials: median "
                      f"{med:.1f} GFLOP/s [quartiles {q1:.1f}-{q3:.1f}] over {len(bests)} seeds", flush=True)
        for bud in sorted(set(budgets + [trials])):
            reached = [c for c in curves if len(c) >= bud]
            if bud > trials or not reached:
                continue
            bests = [max(c[:bud]) for c in reached]
            q1, med, q3 = quartiles(bests)
            at[bud] = {"median": med, "q1": q1, "q3": q3, "min": min(bests), "max": max(bests),
                       "seeds": len(bests)}
            print(f"{name} {tuner_name:6s} best within {bud:4d} trials: median {med:.1f} GFLOP/s "
                  f"[quartiles {q1:.1f}-{q3:.1f}, range {min(bests):.1f}-{max(bests):.1f}] over {len(bests)} seeds",
                  flush=True)
        result["tuners"][tuner_name] = {
            "trials": trials, "at": at, "at_remeasured": at_re, "seeds_done": sum(len(c) >= trials for c in curves),
            "curves": curves,
            "runs": [ran.get((name, tuner_name, seed, trials, log_path(args, name, tuner_name, seed)))
                     for seed in range(args.seeds)]}
    x = result["tuners"].get("xgb", {}).get("at", {}).get(128)
    rb = max(result["tuners"].get("random", {}).get("at", {}) or [0])
    r = result["tuners"].get("random", {}).get("at", {}).get(rb)
    if x and r and r["median"] > 0:
        result["xgb128_vs_random_at_max"] = {"random_budget": rb, "ratio": x["median"] / r["median"],
                                             "holds": x["median"] >= r["median"]}
        print(f"{name}: XGB's median at 128 / Random's at {rb}: {x['median'] / r['median']:.3f} "
              f"({'holds' if x['median'] >= r['median'] else 'does not hold'}; issue 13's target: >= 1 against "
              "Random at 512)", flush=True)
    x = result["tuners"].get("xgb", {}).get("at_remeasured", {}).get(128)
    rb = max(result["tuners"].get("random", {}).get("at_remeasured", {}) or [0])
    r = result["tuners"].get("random", {}).get("at_remeasured", {}).get(rb)
    if x and r and r["median"] > 0:
        result["xgb128_vs_random_at_max_remeasured"] = {"random_budget": rb, "ratio": x["median"] / r["median"],
                                                        "holds": x["median"] >= r["median"]}
        print(f"{name}: re-measured, XGB's median at 128 / Random's at {rb}: {x['median'] / r['median']:.3f} "
              f"({'holds' if x['median'] >= r['median'] else 'does not hold'})", flush=True)
    print(table(result), flush=True)
    return result


def table(result: dict) -> str:
    """The result as a markdown table: per tuner, median [quartiles] (seeds) at each budget."""
    buds = sorted({b for res in result["tuners"].values() for b in res["at"]}, key=int)
    if not buds:
        return f"| {result['space']} | no run reached a budget |"
    lines = [f"| {result['space']} | " + " | ".join(f"best within {b}" for b in buds) + " |",
             "|---|" + "---|" * len(buds)]
    for key, label in (("at", ""), ("at_remeasured", " re-measured")):
        for tuner_name, res in result["tuners"].items():
            if not res.get(key):
                continue
            cells = []
            for b in buds:
                v = res[key].get(b) or res[key].get(str(b))
                cells.append(f"{v['median']:.1f} [{v['q1']:.1f}-{v['q3']:.1f}] ({v['seeds']})" if v else "-")
            lines.append(f"| {tuner_name}{label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(result: dict, path: str) -> None:
    """Best so far against trials per tuner: the median over seeds, the quartile band shaded
    (over the seeds that reached each trial)."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for rank, (tuner_name, res) in enumerate(result["tuners"].items()):
        curves = [np.maximum.accumulate(np.asarray(c, dtype=float)) for c in res["curves"] if c]
        if not curves:
            continue
        n = max(len(c) for c in curves)
        x, med, lo, hi = [], [], [], []
        for t in range(n):
            vals = [c[t] for c in curves if len(c) > t]
            if len(vals) < max(1, (len(curves) + 1) // 2):
                break                  # fewer than half the seeds got this far
            q1, m, q3 = quartiles(vals)
            x.append(t + 1)
            med.append(m)
            lo.append(q1)
            hi.append(q3)
        line, = ax.plot(x, med, label=f"{tuner_name} ({len(curves)} seeds)", lw=1.4)
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.18, lw=0)
        re = {int(b): v for b, v in (res.get("at_remeasured") or {}).items()}
        if re:
            bs = sorted(re)
            ax.errorbar([b + 4 * rank for b in bs], [re[b]["median"] for b in bs],     # side by side
                        yerr=[[re[b]["median"] - re[b]["q1"] for b in bs], [re[b]["q3"] - re[b]["median"] for b in bs]],
                        fmt="o", ms=4, capsize=3, color=line.get_color(), label=f"{tuner_name}: re-measured choice")
    longest = max((len(c) for res in result["tuners"].values() for c in res["curves"]), default=0)
    for b in (64, 128, 256, 512):
        if b <= longest:
            ax.axvline(b, color="0.85", lw=0.8, zorder=0)
    ax.set_xlabel("trials (configs measured)")
    ax.set_ylabel("best so far (GFLOP/s, as measured)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{result['space']}: median best so far, quartile band over seeds"
                 + (" (dots: the re-measured choice)" if any(r.get("at_remeasured") for r in result["tuners"].values())
                    else "") + "\n"
                 f"{result.get('date', '')} {result.get('device', '')}", fontsize=9)
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
    if args.order == "space":      # stable: each space's runs in the order above, space by space
        jobs.sort(key=lambda j: args.spaces.index(j[0]))
    return jobs


def device_name(gpu: bool) -> str:
    """The CPU's (and with ``gpu`` the GPU's) name, for the report."""
    cpu = "?"
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in read_text("/proc/cpuinfo").splitlines()
                    if ln.startswith("model name")), "?")
    except OSError:
        pass
    if gpu:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=20).stdout.strip().splitlines()
            return f"{out[0] if out else '?'}; {cpu} ({os.cpu_count()} CPUs)"
        except (OSError, subprocess.SubprocessError):
            return f"GPU ?; {cpu}"
    return f"{cpu} ({os.cpu_count()} CPUs)"


def log_path(args, name: str, tuner_name: str, seed: int) -> str:
    return os.path.join(args.log_dir, f"{name}_{tuner_name}_s{seed}.jsonl")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spaces", nargs="+", choices=list(SPACES) + ["_one", "_remeasure"])
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
    p.add_argument("--deadline", type=float, default=0.0,
                   help="stop the runs still going after this many seconds (their logs keep what they measured)")
    p.add_argument("--parallel", type=int, default=1,
                   help="GPU: tuning runs at once (they build in parallel and time one at a time)")
    p.add_argument("--measure-cache", action="store_true",
                   help="one measurement per config shared by the runs of a space (--log-dir/<space>_measured.jsonl)")
    p.add_argument("--random-pool", type=int, default=0,
                   help="Random's seeds draw from one uniform pool of this many configs (with --measure-cache: "
                        "measured once)")
    p.add_argument("--cache", default="", help="(_one) the measurement cache")
    p.add_argument("--no-run", action="store_true",
                   help="run nothing: the report, JSON and plot from the logs in --log-dir (after runs in parts)")
    p.add_argument("--order", default="", help="runs' order: 'space' starts a space's runs before the next space's")
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
    p.add_argument("--remeasure", type=int, default=0, metavar="K",
                   help="after the runs, re-measure each run's K fastest configs within each budget in --rounds "
                        "interleaved rounds; the report gives each tuner's re-measured choice beside the tuning figure")
    p.add_argument("--rounds", type=int, default=3, help="--remeasure: timing rounds (each config once a round)")
    p.add_argument("--remeasure-s", type=float, default=0.0,
                   help="--remeasure: stop it after this many seconds (what it re-measured by then is kept, "
                        "in parts of 64 configs)")
    p.add_argument("--replot", action="store_true",
                   help="only redraw the plots from the JSON of an earlier run (in --out)")
    args = p.parse_intermixed_args(argv)
    if args.replot:
        for name in args.spaces:
            with open(os.path.join(args.out, f"budget_{name}.json")) as f:
                plot(json.load(f), os.path.join(args.out, f"budget_{name}.png"))
        return 0
    if args.spaces[0] == "_one":
        tune_one(args.spaces[1], args.tuner, args.seed, args.trials, args.log, args.gpu, args.builders,
                 args.cache, args.random_pool)
        return 0
    budgets = sorted(int(b) for b in args.budgets.split(","))
    tuners = args.tuners.split(",")
    if args.spaces[0] == "_remeasure":
        plan = {t: (args.random_budget or budgets[-1]) if t == "random" else budgets[-1] for t in tuners}
        n = remeasure_space(args.spaces[1], args, plan, budgets)
        print(f"{args.spaces[1]}: re-measured {n} configs in {args.rounds} rounds", flush=True)
        return 0
    unknown = [t for t in tuners if t not in TUNERS]
    if unknown:
        p.error(f"unknown tuner {unknown[0]!r}; the tuners: {', '.join(TUNERS)}")
    for name in args.spaces:
        if (SPACES[name]["target"] == "cuda") != args.gpu:
            p.error(f"{name}: {'needs' if not args.gpu else 'is not a'} --gpu space")
    if args.gpu and args.cores:
        p.error("--cores is for CPU spaces (GPU runs share the one GPU: --parallel, with --measure-cache)")
    if args.gpu and args.parallel > 1 and not args.measure_cache:
        p.error("--parallel on the GPU needs --measure-cache (it is what times one run at a time)")
    os.makedirs(args.log_dir, exist_ok=True)
    plan = {t: (args.random_budget or budgets[-1]) if t == "random" else budgets[-1] for t in tuners}
    jobs = plan_jobs(args, plan)
    ran = {} if args.no_run else run_jobs(jobs, args)
    if args.remeasure:               # with --no-run too: it resumes, re-measuring what is missing
        for name in args.spaces:
            run_remeasure(name, args)
    os.makedirs(args.out, exist_ok=True)
    for name in args.spaces:
        result = summarise(name, args, budgets, plan, ran)
        result["device"] = device_name(args.gpu)
        with open(os.path.join(args.out, f"budget_{name}.json"), "w") as f:
            json.dump(result, f, indent=1)
        try:
            plot(result, os.path.join(args.out, f"budget_{name}.png"))
        except ImportError:         # a device without matplotlib: draw it later from the JSON
            print(f"{name}: no plot (matplotlib is missing); draw it with --replot --out {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
