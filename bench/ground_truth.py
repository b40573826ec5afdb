"""Ground truth for search quality: every configuration of a tuning space, measured.

    python3 bench/ground_truth.py list                          # the spaces, their sizes
    python3 bench/ground_truth.py run gemm256 conv2d_64 ...     # build and time (resumable)
    python3 bench/ground_truth.py status                        # how far each space is
    python3 bench/ground_truth.py export gemm256 ...            # -> bench/ground_truth/gemm256.jsonl.gz
    python3 bench/ground_truth.py run --gpu sgemm1024_cuda conv2d_64_cuda --out DIR   # on a GPU machine

`run` builds every configuration of a space once (exported libraries under
`bench/ground_truth/.cache/<space>/`, at nice 19; building does not need a quiet machine), then
times them in `--passes` passes (3), each over the whole space in its own random order, so a
busy spell cannot bias one configuration: a config's figure is the median of its passes'
figures, measured minutes or hours apart (`export --figure min`: its fastest timing, for a
table measured on a busy machine, where contention only ever slows a config down). Timing runs in chunks of about `--chunk-s` seconds,
each in a fresh process with one thread (`TILECRAFT_NUM_THREADS=1`, BLAS and OpenMP at 1 too).
On the CPU a chunk starts only when the machine is quiet: other processes kept fewer than
`--max-others` cores busy over the last 2 s and the 1-minute load average, less this script's
own share, is below `--max-load`; otherwise it builds, or waits. Every timing row records the
load average and the cores other processes kept busy. Killing `run` loses at most one chunk;
running it again goes on.

Pass 1 also checks each config's output against the task's naive schedule on random inputs
(as the tuner does); a config that fails to build, crashes or answers wrongly is an error row.
`export` writes the table `tilecraft.autotune.replay.GroundTruth` reads (format in its
docstring); configs with fewer than `--passes` timings are refused unless `--partial`.

With `--gpu` (on a machine with an NVIDIA GPU and nvcc): CUDA spaces, builds in parallel
(`--jobs`, one per core), no load gate (the GPU is the device), CUDA-event timing.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

OUT_DIR = os.path.join(HERE, "ground_truth")
CACHE_DIR = os.path.join(OUT_DIR, ".cache")

# name -> template, arguments, target, knob restriction (a fixed subset of values; {} = all),
# and min_repeat_ms (each timed repeat lasts at least this long)
SPACES = {
    "gemm256": dict(template="topi/matmul.llvm", module="tilecraft.topi.matmul",
                    args=(256, 256, 256, "float32"), target="llvm",
                    restrict={"tile_k": [[-1, 64]], "order": [0], "unroll_k": [4]}),
    "gemm512": dict(template="topi/matmul.llvm", module="tilecraft.topi.matmul",
                    args=(512, 512, 512, "float32"), target="llvm",
                    restrict={"tile_x": [[-1, a, b] for b in (16, 32, 64, 512) for a in (1, 2, 4, 8, 16, 32)
                                         if a * b <= 512 and not (b == 512 and a > 1)],
                              "tile_k": [[-1, 128]], "order": [0], "unroll_k": [4]}),
    "conv2d_64": dict(template="topi/conv2d_nchw.llvm", module="tilecraft.topi.conv2d",
                      args=(1, 64, 56, 56, 64, 3, 3, 1, 1, "float32"), target="llvm", restrict={}),
    "conv2d_128": dict(template="topi/conv2d_nchw.llvm", module="tilecraft.topi.conv2d",
                       args=(1, 128, 28, 28, 128, 3, 3, 1, 1, "float32"), target="llvm", restrict={}),
    "softmax1024": dict(template="topi/softmax.llvm", module="tilecraft.topi.softmax",
                        args=(1024, 1024, "float32"), target="llvm", restrict={"tile_rows": [[-1, 1], [-1, 8], [-1, 64]], "reciprocal": [1]}),
    "softmax256x4096": dict(template="topi/softmax.llvm", module="tilecraft.topi.softmax",
                            args=(256, 4096, "float32"), target="llvm", restrict={"tile_rows": [[-1, 1], [-1, 8], [-1, 64]], "reciprocal": [1]}),
    "sgemm1024_cuda": dict(template="topi/matmul.cuda", module="tilecraft.topi.matmul",
                           args=(1024, 1024, 1024, "float32"), target="cuda", restrict={}),
    "sgemm512_cuda": dict(template="topi/matmul.cuda", module="tilecraft.topi.matmul",
                          args=(512, 512, 512, "float32"), target="cuda", restrict={}),
    "conv2d_64_cuda": dict(template="topi/conv2d_nchw.cuda", module="tilecraft.topi.conv2d_cuda",
                           args=(1, 64, 56, 56, 64, 3, 3, 1, 1, "float32"), target="cuda", restrict={}),
    "conv2d_128_cuda": dict(template="topi/conv2d_nchw.cuda", module="tilecraft.topi.conv2d_cuda",
                            args=(1, 128, 28, 28, 128, 3, 3, 1, 1, "float32"), target="cuda", restrict={}),
}
MIN_REPEAT_MS = 10.0
REPEAT = 3                      # timings per config per pass (1 for a config slower than SLOW_S)
SLOW_S = 0.02
INPUT_SEED = 20261124
ONE_THREAD = {"TILECRAFT_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "MKL_NUM_THREADS": "1"}


def make_task(name: str):
    """The task of space ``name``, its config space restricted as ``SPACES`` says."""
    import importlib

    import tilecraft.autotune as autotune
    from tilecraft.autotune.replay import restrict_space

    spec = SPACES[name]
    importlib.import_module(spec["module"])
    task = autotune.task.create(spec["template"], args=spec["args"], target=spec["target"])
    if spec["restrict"]:
        task.config_space = restrict_space(task.config_space, spec["restrict"])
    return task


def cache_dir(name: str, root: str = CACHE_DIR) -> str:
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "lib"), exist_ok=True)
    return d


def read_rows(path: str) -> list[dict]:
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:       # a torn last line of a killed chunk
                    pass
    return rows


def append_row(path: str, row: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row, separators=(",", ":")) + "\n")
        f.flush()


# ---------------------------------------------------------------------------------------------
# The machine's state.


def cpu_busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    total = sum(vals[:8])
    return total - idle, total


def busy_cores(t0: tuple[int, int], t1: tuple[int, int]) -> float:
    dt = t1[1] - t0[1]
    return (t1[0] - t0[0]) / dt * (os.cpu_count() or 1) if dt > 0 else 0.0


def load1() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


class OwnLoad:
    """This script's own share of the 1-minute load average, tracked as the kernel computes it
    (every 5 s: load = load * e + running * (1 - e), e = exp(-5/60)): a timing chunk counts 1."""

    def __init__(self):
        self.value, self.t = 0.0, time.time()

    def add(self, running: float, seconds: float) -> None:
        e = math.exp(-seconds / 60.0)
        self.value = self.value * e + running * (1 - e)
        self.t = time.time()

    def now(self) -> float:
        return self.value * math.exp(-(time.time() - self.t) / 60.0)


# ---------------------------------------------------------------------------------------------
# Children: build a list of configs, time a list of configs.


def child_build(name: str, indices: list[int], root: str) -> None:
    from tilecraft.autotune.local import build_reference_func, default_build_func
    from tilecraft.autotune.measure import MeasureErrorNo, MeasureInput
    from tilecraft.autotune.replay import space_knobs

    task = make_task(name)
    d = cache_dir(name, root)
    suffix = ".tcuda" if SPACES[name]["target"] == "cuda" else ".so"
    ref = os.path.join(d, "reference" + suffix)
    meta_path = os.path.join(d, "meta.json")
    space = task.config_space
    if not os.path.exists(meta_path):
        br = build_reference_func(task, ref)
        with open(meta_path + ".tmp", "w") as f:
            json.dump({"arg_info": br.arg_info, "reference": ref, "knobs": space_knobs(space)}, f)
        os.replace(meta_path + ".tmp", meta_path)
    for i in indices:
        path = os.path.join(d, "lib", f"{i}{suffix}")
        br = default_build_func(MeasureInput(task.target, task, space.get(i)), path)
        if br.error_no == MeasureErrorNo.NO_ERROR:
            row = {"i": i, "ok": True, "s": round(br.time_cost, 4)}
        else:
            row = {"i": i, "error": br.error_no.name, "msg": br.error_msg[-2000:]}
        append_row(os.path.join(d, "built.jsonl"), row)


def child_time(name: str, pass_no: int, indices: list[int], deadline: float, root: str) -> None:
    import tilecraft
    from tilecraft.autotune.local import cached_random_inputs, prepare_reference, _reference_outputs

    d = cache_dir(name, root)
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    arg_info = [tuple((tuple(s), dt, o)) for s, dt, o in meta["arg_info"]]
    cuda = SPACES[name]["target"] == "cuda"
    target = "cuda" if cuda else "llvm"
    dev = tilecraft.cuda(0) if cuda else tilecraft.cpu(0)
    suffix = ".tcuda" if cuda else ".so"
    ref = _reference_outputs(prepare_reference(meta["reference"], arg_info, INPUT_SEED, target)) \
        if pass_no == 0 else None
    arrays = cached_random_inputs(arg_info, INPUT_SEED)
    out_path = os.path.join(d, "timed.jsonl")
    window = (cpu_busy_jiffies(), time.process_time(), time.time())
    others = 0.0
    for i in indices:
        if time.time() > deadline:
            break
        mod = tilecraft.runtime.load_module(os.path.join(d, "lib", f"{i}{suffix}"))
        nd = [tilecraft.nd.array(a, dev) for a in arrays]
        t0 = time.perf_counter()
        mod(*nd)
        first = time.perf_counter() - t0
        if ref is not None:
            bad = check_outputs(nd, arg_info, ref)
            if bad:
                append_row(out_path, {"i": i, "pass": pass_no, "error": "WRONG_ANSWER", "msg": bad})
                continue
        repeat = 1 if first > SLOW_S else REPEAT
        timer = mod.time_evaluator(mod.entry_name, dev, number=1, repeat=1, min_repeat_ms=MIN_REPEAT_MS)
        costs = [float(timer(*nd).mean) for _ in range(repeat)]
        now = (cpu_busy_jiffies(), time.process_time(), time.time())
        if now[2] - window[2] >= 0.5:       # jiffies are 10 ms: judge over half a second at least
            wall = now[2] - window[2]
            others = max(0.0, busy_cores(window[0], now[0]) - (now[1] - window[1]) / wall)
            window = now
        append_row(out_path, {"i": i, "pass": pass_no, "costs": [round(c, 9) for c in costs],
                              "load": load1(), "others": round(others, 3), "t": round(time.time(), 1)})
        del mod, nd


def check_outputs(nd, arg_info, ref) -> str | None:
    for k, (_, _, is_out) in enumerate(arg_info):
        if not is_out:
            continue
        got = nd[k].numpy() if hasattr(nd[k], "numpy") else np.asarray(nd[k])
        want = ref[f"out{k}"]
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-3, atol=1e-3, equal_nan=True):
            err = np.abs(got.astype(np.float64) - want)
            return f"output {k} differs from the naive schedule's: max abs error {float(np.nanmax(err)):.3g}"
    return None


# ---------------------------------------------------------------------------------------------
# The driver.


class Space:
    """What is known about one space's progress (from its cache files)."""

    def __init__(self, name: str, root: str):
        self.name, self.root = name, root
        self.dir = cache_dir(name, root)
        space = make_task(name).config_space
        self.n = len(space)
        # the configs' indices in the template's mixed-radix space (a multi_filter leaves gaps)
        self.valid = [space.valid_index(k) for k in range(self.n)]
        meta = os.path.join(self.dir, "meta.json")
        if os.path.exists(meta):        # the cache's indices must mean the same configs
            from tilecraft.autotune.replay import space_knobs

            with open(meta) as f:
                cached = json.load(f).get("knobs")
            if cached is not None and cached != json.loads(json.dumps(space_knobs(space))):
                raise SystemExit(f"{name}: the cache {self.dir} was measured in another space (the template "
                                 "or the restriction changed); move it away to start again")
        self.refresh()

    def refresh(self):
        self.built = {r["i"]: r for r in read_rows(os.path.join(self.dir, "built.jsonl"))}
        self.timed: dict[int, dict[int, dict]] = {}
        for r in read_rows(os.path.join(self.dir, "timed.jsonl")):
            self.timed.setdefault(r["pass"], {})[r["i"]] = r
        self.failed = {i for i, r in self.built.items() if "error" in r}
        self.failed |= {i for i, r in self.timed.get(0, {}).items() if "error" in r}

    def order(self, pass_no: int) -> list[int]:
        return [self.valid[int(k)] for k in np.random.default_rng(1000 + pass_no).permutation(self.n)]

    def unbuilt(self) -> list[int]:
        return [i for i in self.order(0) if i not in self.built]

    def untimed(self, pass_no: int) -> list[int]:
        done = self.timed.get(pass_no, {})
        return [i for i in self.order(pass_no) if i not in done and i not in self.failed]


def run_child(args: list[str], env: dict, timeout: float, nice: bool) -> int:
    cmd = ([] if not nice else ["nice", "-n", "19"]) + [sys.executable, os.path.abspath(__file__)] + args
    try:
        return subprocess.run(cmd, env=env, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return -999


def build_chunk(sp: Space, todo: list[int], env: dict, jobs: int, nice: bool) -> None:
    if jobs <= 1:
        groups = [todo]
    else:
        groups = [todo[k::jobs] for k in range(jobs)]
    procs = []
    for g in groups:
        if g:
            cmd = ([] if not nice else ["nice", "-n", "19"]) + [sys.executable, os.path.abspath(__file__),
                                                                "_build", sp.name, "--root", sp.root,
                                                                "--indices", ",".join(map(str, g))]
            procs.append((subprocess.Popen(cmd, env=env), g))
    for p, g in procs:
        try:
            rc = p.wait(timeout=120 + 30 * len(g))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = -999
        if rc != 0:
            sp.refresh()
            missing = [i for i in g if i not in sp.built]
            if missing:     # the one it was building when it died or hung
                kind = "BUILD_TIMEOUT" if rc == -999 else "COMPILE_HOST"
                append_row(os.path.join(sp.dir, "built.jsonl"),
                           {"i": missing[0], "error": kind, "msg": f"the build process ended with {rc}"})
    sp.refresh()


def time_chunk(sp: Space, pass_no: int, todo: list[int], env: dict, chunk_s: float) -> float:
    t0 = time.time()
    rc = run_child(["_time", sp.name, "--root", sp.root, "--pass", str(pass_no), "--deadline",
                    str(time.time() + chunk_s), "--indices", ",".join(map(str, todo))],
                   env, timeout=chunk_s + 600, nice=False)
    sp.refresh()
    if rc != 0:
        done = sp.timed.get(pass_no, {})
        missing = [i for i in todo if i not in done]
        if missing:         # it crashed (or hung) on this one
            append_row(os.path.join(sp.dir, "timed.jsonl"),
                       {"i": missing[0], "pass": pass_no, "error": "RUNTIME_DEVICE",
                        "msg": f"the timing process ended with {rc}"})
        sp.refresh()
    return time.time() - t0


def quiet(args, own: OwnLoad) -> tuple[bool, float, float]:
    t0 = cpu_busy_jiffies()
    time.sleep(2.0)
    others = busy_cores(t0, cpu_busy_jiffies())
    load = load1() - own.now()
    return others < args.max_others and load < args.max_load, others, load


def cmd_run(args) -> int:
    env = dict(os.environ, **ONE_THREAD)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    spaces = [Space(n, args.root) for n in args.spaces]
    own = OwnLoad()
    jobs = args.jobs or (os.cpu_count() if args.gpu else 1)
    last_msg = 0.0
    while True:
        # small spaces pass after pass first (complete tables early), then the large ones by pass
        pending = sorted(((sp.n > 1000, p, k), p, sp) for p in range(args.passes)
                         for k, sp in enumerate(spaces) if sp.untimed(p))
        pending = [(p, sp) for _, p, sp in pending]
        if not pending:
            break
        pass_no, sp = pending[0]
        ready = [i for i in sp.untimed(pass_no) if i in sp.built]
        unbuilt = [s for s in spaces if s.unbuilt()]
        ok, others, load = (True, 0.0, 0.0) if args.gpu else quiet(args, own)
        if ok and (ready or not unbuilt):
            if not ready:
                build_chunk(sp, sp.unbuilt()[: args.build_chunk], env, jobs, nice=not args.gpu)
                continue
            secs = time_chunk(sp, pass_no, ready[: args.max_chunk], env, args.chunk_s)
            own.add(1.0, secs)
            done = sum(len(s.timed.get(p, {})) for p in range(args.passes) for s in spaces)
            total = sum(s.n - len(s.failed) for s in spaces) * args.passes
            print(f"{time.strftime('%H:%M:%S')} timed {sp.name} pass {pass_no + 1}: {done}/{total} timings "
                  f"(others {others:.2f} cores, load {load:.2f} besides this script)", flush=True)
        elif unbuilt:
            s = unbuilt[0]
            t0 = time.time()
            build_chunk(s, s.unbuilt()[: args.build_chunk], env, jobs, nice=not args.gpu)
            own.add(0.0, time.time() - t0)        # at nice 19 it yields; count it as not ours
            print(f"{time.strftime('%H:%M:%S')} built {s.name}: {len(s.built)}/{s.n}"
                  + ("" if ok else f" (busy: others {others:.2f} cores, load {load:.2f})"), flush=True)
        else:
            if time.time() - last_msg > 600:
                print(f"{time.strftime('%H:%M:%S')} waiting for a quiet machine (others {others:.2f} cores, "
                      f"load {load:.2f} besides this script)", flush=True)
                last_msg = time.time()
            time.sleep(args.wait_s)
            own.add(0.0, args.wait_s)
    print("all passes done")
    return 0


def cmd_status(args) -> int:
    for name in args.spaces or [n for n in SPACES if os.path.isdir(os.path.join(args.root, n))]:
        sp = Space(name, args.root)
        passes = ", ".join(f"pass {p + 1}: {len(v)}" for p, v in sorted(sp.timed.items()))
        print(f"{name}: {sp.n} configs, built {len(sp.built)}, failed {len(sp.failed)}; timed {passes or 'none'}")
    return 0


def cmd_list(args) -> int:
    for name, spec in SPACES.items():
        try:
            n = len(make_task(name).config_space)
        except Exception as err:      # e.g. a CUDA space without the toolkit
            n = f"? ({type(err).__name__})"
        restrict = f", restricted to {spec['restrict']}" if spec["restrict"] else ""
        print(f"{name:16s} {spec['template']}{list(spec['args'])} on {spec['target']}: {n} configs{restrict}")
    return 0


def device_name(target: str) -> str:
    from tilecraft.autotune.record import local_device_name

    if target != "cuda":
        return local_device_name(target)
    try:
        import pycuda.autoinit  # noqa: F401
        import pycuda.driver as drv
        return drv.Device(0).name()
    except Exception:
        return "cuda"


def cmd_export(args) -> int:
    from tilecraft.autotune.replay import TABLE_VERSION, space_knobs

    status = 0
    for name in args.spaces:
        sp = Space(name, args.root)
        task = make_task(name)
        spec = SPACES[name]
        rows, short = [], 0
        times = []
        for i in sp.valid:
            b = sp.built.get(i)
            first = sp.timed.get(0, {}).get(i)
            if b is not None and "error" in b:
                rows.append({"i": i, "error": b["error"], "msg": b["msg"]})
                continue
            if first is not None and "error" in first:
                rows.append({"i": i, "error": first["error"], "msg": first["msg"]})
                continue
            got = [sp.timed[p][i] for p in sorted(sp.timed) if i in sp.timed[p]]
            if len(got) < args.passes:
                short += 1
                if not got:
                    continue
            pick = min if args.figure == "min" else statistics.median
            med = [pick(r["costs"]) for r in got]
            cost = pick(med)
            times += [r["t"] for r in got]
            rows.append({"i": i, "cost": cost, "passes": med,
                         "spread": round((max(med) - min(med)) / cost, 4),
                         "load": [r["load"] for r in got], "others": [r["others"] for r in got]})
        if short and not args.partial:
            print(f"{name}: {short} configs have fewer than {args.passes} timings; finish `run` first "
                  "(or --partial)", file=sys.stderr)
            status = 1
            continue
        ok = [r for r in rows if "cost" in r]
        if not ok:
            print(f"{name}: no configuration timed yet; `run` it first", file=sys.stderr)
            status = 1
            continue
        header = {
            "ground_truth": TABLE_VERSION, "space": name, "target": spec["target"],
            "device": device_name(spec["target"]),
            "threads": 1 if spec["target"] == "llvm" else None,
            "task": {"name": task.name, "args": list(task.args), "flop": task.flop, "module": spec["module"]},
            "knobs": space_knobs(task.config_space), "restricted": spec["restrict"],
            "valid": sp.valid if task.config_space._constraints else None,
            "timing": {"passes": args.passes, "repeat": REPEAT, "min_repeat_ms": MIN_REPEAT_MS,
                       "slow_s": SLOW_S,
                       "figure": ("the fastest timing of all passes (contention only slows: on a busy machine "
                                  "the minimum is the least biased)" if args.figure == "min"
                                  else "median over passes of each pass's median")},
            "measured": [time.strftime("%Y-%m-%d %H:%M", time.localtime(min(times))),
                         time.strftime("%Y-%m-%d %H:%M", time.localtime(max(times)))] if times else None,
            "configs": sp.n, "errors": len(rows) - len(ok), "partial": bool(short),
            "command": "python3 bench/ground_truth.py run " + name,
        }
        out = os.path.join(args.out, f"{name}.jsonl.gz")
        os.makedirs(args.out, exist_ok=True)
        with gzip.open(out + ".tmp", "wt", encoding="utf-8") as f:
            f.write(json.dumps(header, separators=(",", ":")) + "\n")
            for r in rows:
                f.write(json.dumps(r, separators=(",", ":")) + "\n")
        os.replace(out + ".tmp", out)
        spreads = sorted(r["spread"] for r in ok)
        print(f"wrote {out}: {len(rows)} rows ({len(ok)} timed, {len(rows) - len(ok)} errors); best "
              f"{task.flop / min(r['cost'] for r in ok) / 1e9:.1f} GFLOP/s; spread between passes: median "
              f"{100 * spreads[len(spreads) // 2]:.1f}%, 90th percentile {100 * spreads[int(0.9 * len(spreads))]:.1f}%")
    return status


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["list", "run", "status", "export", "_build", "_time"])
    p.add_argument("spaces", nargs="*")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--max-load", type=float, default=1.2,
                   help="start a timing chunk only below this 1-minute load average (this script's share excluded)")
    p.add_argument("--max-others", type=float, default=0.5,
                   help="... and when other processes kept fewer cores busy over the last 2 s")
    p.add_argument("--chunk-s", type=float, default=20.0, help="seconds of timing per chunk")
    p.add_argument("--max-chunk", type=int, default=400)
    p.add_argument("--build-chunk", type=int, default=64)
    p.add_argument("--wait-s", type=float, default=30.0)
    p.add_argument("--jobs", type=int, default=0, help="parallel builds (default 1 on the CPU, one per core with --gpu)")
    p.add_argument("--gpu", action="store_true", help="CUDA spaces on this machine's GPU: no load gate")
    p.add_argument("--root", default=CACHE_DIR, help="the cache folder (libraries, timings)")
    p.add_argument("--out", default=OUT_DIR, help="where export writes the tables")
    p.add_argument("--partial", action="store_true", help="export configs with fewer timings too")
    p.add_argument("--figure", choices=("median", "min"), default="median",
                   help="a config's figure: the median of its passes' medians, or its fastest timing "
                        "(for tables measured on a busy machine)")
    p.add_argument("--indices", default="")
    p.add_argument("--pass", dest="pass_no", type=int, default=0)
    p.add_argument("--deadline", type=float, default=0.0)
    args = p.parse_intermixed_args(argv)     # options before or after the spaces
    unknown = [s for s in args.spaces if s not in SPACES]
    if unknown:
        p.error(f"unknown space {unknown[0]!r}; the spaces: {', '.join(SPACES)}")
    if args.command == "_build":
        child_build(args.spaces[0], [int(x) for x in args.indices.split(",") if x], args.root)
        return 0
    if args.command == "_time":
        child_time(args.spaces[0], args.pass_no, [int(x) for x in args.indices.split(",") if x],
                   args.deadline, args.root)
        return 0
    if args.command in ("run", "export") and not args.spaces:
        p.error(f"name the spaces to {args.command}: {', '.join(SPACES)}")
    return {"list": cmd_list, "run": cmd_run, "status": cmd_status, "export": cmd_export}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
