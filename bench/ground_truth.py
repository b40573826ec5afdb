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
sys.path.insert(0, HERE)

from cpu_load import OwnLoad, busy_cores, cpu_busy_jiffies, load1  # noqa: E402
from ground_truth_files import append_row, check_outputs, follow_built, parse_cpus, read_rows  # noqa: E402,F401

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
    # 938 of its 3067 configs: the channel tiles the H100 tuning runs' best 40 used (ci 8/16, co 8/16/32)
    "conv2d_128_cuda_sub": dict(template="topi/conv2d_nchw.cuda", module="tilecraft.topi.conv2d_cuda",
                                args=(1, 128, 28, 28, 128, 3, 3, 1, 1, "float32"), target="cuda",
                                restrict={"ci_tile": [8, 16], "tile_co": [8, 16, 32]}),
    # 4 configs, for the tests of this script (builds and times in seconds on any machine)
    "smoke": dict(template="topi/softmax.llvm", module="tilecraft.topi.softmax", args=(16, 64, "float32"),
                  target="llvm", restrict={"tile_x": [[-1, 16]], "tile_rows": [[-1, 1], [-1, 8]],
                                           "reciprocal": [1], "reduce_lanes": [8], "reduce_accumulators": [1]}),
}
MIN_REPEAT_MS = 10.0
GPU_MIN_REPEAT_MS = 5.0         # on the GPU: calibrated once, then back-to-back launches for this long
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


def template_fingerprint(task) -> str:
    """A hash of the code three configs of ``task`` compile to (the first, middle and last of its
    space; CUDA C for a CUDA task, the lowered loop nest otherwise): it changes when the template,
    the lowering or the CUDA code generator changes what a config means, which the knobs alone
    do not show. About a second for a CUDA space.

    >>> template_fingerprint(make_task("smoke"))
    '3f9a...'
    """
    import hashlib

    import tilecraft

    space = task.config_space
    cuda = is_cuda_task(task)
    h = hashlib.sha256()
    for k in sorted({0, len(space) // 2, len(space) - 1}):
        sch, args = task.instantiate(space.get(space.valid_index(k)))
        func = tilecraft.lower(sch, args, name="default_function", target="cuda" if cuda else None)
        if cuda:
            from tilecraft.codegen.cuda import generate_cuda
            text = generate_cuda(func)
        else:
            text = str(func)
        h.update(text.encode())
    return h.hexdigest()[:16]


def is_cuda_task(task) -> bool:
    return task.target is not None and str(task.target).split()[0] == "cuda"


def cache_dir(name: str, root: str = CACHE_DIR) -> str:
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "lib"), exist_ok=True)
    return d






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
            json.dump({"arg_info": br.arg_info, "reference": ref, "knobs": space_knobs(space),
                       "fingerprint": template_fingerprint(task)}, f)
        os.replace(meta_path + ".tmp", meta_path)
    for i in indices:
        path = os.path.join(d, "lib", f"{i}{suffix}")
        br = default_build_func(MeasureInput(task.target, task, space.get(i)), path)
        if br.error_no == MeasureErrorNo.NO_ERROR:
            row = {"i": i, "ok": True, "s": round(br.time_cost, 4)}
        else:
            row = {"i": i, "error": br.error_no.name, "msg": br.error_msg[-2000:]}
        append_row(os.path.join(d, "built.jsonl"), row)


def child_time(name: str, pass_no: int, indices: list[int], deadline: float, root: str,
               min_repeat_ms: float = MIN_REPEAT_MS, follow: bool = False) -> None:
    """Time ``indices`` in pass ``pass_no`` until ``deadline``. ``follow``: the builders are still
    running; a config not built yet is timed when its library appears, and the child ends when
    every index is timed or failed and the driver has written `builders_done`."""
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
    now_path = os.path.join(d, "timing_now")
    for i in (follow_built(d, indices, deadline) if follow else indices):
        if time.time() > deadline:
            break
        with open(now_path, "w") as f:         # the driver blames this config if the process dies
            f.write(f"{i} {pass_no}")
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
        if cuda:        # calibrate once (CUDA events), then `repeat` timings of `number` launches each
            one = float(mod.time_evaluator(mod.entry_name, dev, number=1, repeat=1)(*nd).mean)
            number = max(1, math.ceil(min_repeat_ms / 1e3 / max(one, 1e-7)))
            costs = [float(c) for c in mod.time_evaluator(mod.entry_name, dev, number=number,
                                                          repeat=repeat)(*nd).results]
        else:
            timer = mod.time_evaluator(mod.entry_name, dev, number=1, repeat=1, min_repeat_ms=min_repeat_ms)
            costs = [float(timer(*nd).mean) for _ in range(repeat)]
        now = (cpu_busy_jiffies(), time.process_time(), time.time())
        if now[2] - window[2] >= 0.5:       # jiffies are 10 ms: judge over half a second at least
            wall = now[2] - window[2]
            others = max(0.0, busy_cores(window[0], now[0]) - (now[1] - window[1]) / wall)
            window = now
        append_row(out_path, {"i": i, "pass": pass_no, "costs": [round(c, 9) for c in costs],
                              "load": load1(), "others": round(others, 3), "t": round(time.time(), 1)})
        del mod, nd






# ---------------------------------------------------------------------------------------------
# The driver.


class Space:
    """What is known about one space's progress (from its cache files)."""

    def __init__(self, name: str, root: str, passes: int = 3, check: bool = False):
        self.name, self.root, self.passes = name, root, passes
        self.dir = cache_dir(name, root)
        self.task = make_task(name)
        self._fingerprint = None
        self.built_by = None            # the fingerprint of the code that built the cache (its meta.json)
        space = self.task.config_space
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
            with open(meta) as f:
                fp = self.built_by = json.load(f).get("fingerprint")
            if check and fp is not None and fp != self.fingerprint():
                raise SystemExit(f"{name}: the cache {self.dir} was built from other code (template fingerprint "
                                 f"{fp}, now {self.fingerprint()}); move it away to start again")
        self.refresh()

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = template_fingerprint(self.task)
        return self._fingerprint

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
        return [i for i in self.order(0) if i not in self.built and i not in self.failed]

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


# ---------------------------------------------------------------------------------------------
# On a GPU: build while timing.


def script_cmd(args: list[str], nice: int = 0) -> list[str]:
    return (["nice", "-n", str(nice)] if nice else []) + [sys.executable, os.path.abspath(__file__)] + args


class BuildPool:
    """Builder processes over a list of configs (each one a strided share of it, so libraries
    appear in the list's order), at nice 10 so that the timing process keeps its core. A builder
    that dies, or builds nothing for ``hang_s``, is blamed for the config it was on (an error row)
    and replaced by one for the rest of its share."""

    def __init__(self, sp: "Space", env: dict, jobs: int, todo: list[int], hang_s: float, nice: int = 10):
        self.sp, self.env, self.hang_s, self.nice = sp, env, hang_s, nice
        self.procs: list[list] = []          # [process, share, when it last built one, how many were left]
        for k in range(jobs):
            if todo[k::jobs]:
                self.start(todo[k::jobs])

    def start(self, share: list[int]) -> None:
        cmd = script_cmd(["_build", self.sp.name, "--root", self.sp.root,
                          "--indices", ",".join(map(str, share))], nice=self.nice)
        self.procs.append([subprocess.Popen(cmd, env=self.env), share, time.time(), len(share)])

    def poll(self) -> bool:
        """Reap finished or stuck builders; whether any still runs."""
        self.sp.refresh()
        procs, self.procs = self.procs, []
        for entry in procs:
            p, share, t_last, n_left = entry
            rest = [i for i in share if i not in self.sp.built]
            rc = p.poll()
            if rc is None:
                if len(rest) < n_left:
                    entry[2:] = [time.time(), len(rest)]
                elif time.time() - t_last > self.hang_s:
                    p.kill()
                    p.wait()
                    rc = -999
                if rc is None:
                    self.procs.append(entry)
                    continue
            if rest:        # it died or hung on rest[0]
                kind = "BUILD_TIMEOUT" if rc == -999 else "COMPILE_HOST"
                append_row(os.path.join(self.sp.dir, "built.jsonl"),
                           {"i": rest[0], "error": kind, "msg": f"the build process ended with {rc}"})
                if rest[1:]:
                    self.start(rest[1:])
        return bool(self.procs)

    def stop(self) -> None:
        for p, *_ in self.procs:
            p.kill()
            p.wait()
        self.procs = []


def import_table(sp: "Space", path: str) -> int:
    """Take an exported (possibly partial) table's timings as passes already done: its first pass
    as pass 1 of this run, and so on; its error rows as pass-1 errors. Refused when the table was
    measured in another space or from other code (the template fingerprint). Returns the rows
    taken; a table already taken is not taken twice."""
    from tilecraft.autotune.replay import space_knobs

    with gzip.open(path, "rt", encoding="utf-8") as f:
        header = json.loads(f.readline())
        rows = [json.loads(line) for line in f if line.strip()]
    where = f"--resume {path}"
    if header.get("space") != sp.name:
        raise SystemExit(f"{where}: the table is of space {header.get('space')!r}, not {sp.name!r}")
    if header.get("knobs") != json.loads(json.dumps(space_knobs(sp.task.config_space))):
        raise SystemExit(f"{where}: the table's knobs differ from the template's now (another space)")
    fp = header.get("fingerprint")
    if fp is not None and fp != sp.fingerprint():
        raise SystemExit(f"{where}: the table was measured from other code (template fingerprint {fp}, now "
                         f"{sp.fingerprint()}): its configs compile to other kernels; start without it")
    if fp is None:
        print(f"{where}: the table records no template fingerprint (made before they were); its knobs "
              "match, so its timings are taken as this code's", flush=True)
    marker = os.path.join(sp.dir, "resumed.jsonl")
    if any(r.get("table") == os.path.abspath(path) for r in read_rows(marker)):
        return 0
    taken = 0
    when = header.get("measured") or [time.strftime("%Y-%m-%d %H:%M")]
    t = time.mktime(time.strptime(when[0], "%Y-%m-%d %H:%M"))
    out = os.path.join(sp.dir, "timed.jsonl")
    for r in rows:
        i = r["i"]
        if "error" in r:
            if i not in sp.timed.get(0, {}):
                append_row(out, {"i": i, "pass": 0, "error": r["error"], "msg": r.get("msg", ""), "from": path})
                taken += 1
            continue
        for k, fig in enumerate(r["passes"]):
            if k < sp.passes and i not in sp.timed.get(k, {}):
                append_row(out, {"i": i, "pass": k, "costs": [fig], "load": r["load"][k],
                                 "others": r["others"][k], "t": t, "from": os.path.basename(path)})
        taken += 1
    append_row(marker, {"table": os.path.abspath(path), "rows": taken, "device": header.get("device")})
    sp.refresh()
    return taken


def build_reference(sp: "Space", env: dict) -> None:
    """The naive schedule's library and the cache's meta.json, before any builder starts."""
    if not os.path.exists(os.path.join(sp.dir, "meta.json")):
        run_child(["_build", sp.name, "--root", sp.root, "--indices", ""], env, timeout=600, nice=False)
        if not os.path.exists(os.path.join(sp.dir, "meta.json")):
            raise SystemExit(f"{sp.name}: the naive schedule that candidates are checked against failed to "
                             "build (its error is above)")


def build_only(args, spaces: list["Space"], env: dict, jobs: int, t_end: float) -> int:
    """`run --gpu --build-only`: build every config of ``spaces`` into the cache at nice 19 and time
    none, until done, ``t_end`` or SIGTERM (a later `run` on the same cache times them without
    building: the device script builds the next space while the GPU times this one). With
    ``--reverse`` in the reverse of pass 1's order: nvcc needs no GPU, so a development machine
    builds the configs the device would reach last, and ships its nvcc cache (cubins keyed by
    source) in the tarball `bench/ground_truth_h100.sh` unpacks."""
    import signal

    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # -> the finally below stops the builders
    try:
        for sp in spaces:
            build_reference(sp, env)
            todo = sp.unbuilt()
            pool = BuildPool(sp, env, jobs, todo[::-1] if args.reverse else todo, args.hang_s, nice=19)
            try:
                while pool.poll() and time.time() < t_end:
                    time.sleep(0.5)
            finally:
                pool.stop()
                print(f"{time.strftime('%H:%M:%S')} built {sp.name}: {len(sp.built)}/{sp.n} (build only)", flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)     # called in-process (the tests): leave no handler behind
    return 0


def run_pipelined(args, sp: "Space", env: dict, jobs: int, t_end: float) -> bool:
    """Build ``sp``'s configs in ``jobs`` processes while one process times them on the GPU as they
    appear (pass 1, with the output check); the later passes once everything is built (a quiet
    host), except a pass whose earlier passes are all done (taken from a table by ``--resume``):
    it follows the builders as pass 1 does. A config already timed in every pass (a resumed
    table's, or a run cut off mid-pass) is not built again. Ends when every pass is done, at ``t_end``, or when
    the timing process keeps failing (then it returns False); running it again goes on."""
    done_flag = os.path.join(sp.dir, "builders_done")
    for stale in (done_flag, os.path.join(sp.dir, "timing_now")):
        if os.path.exists(stale):
            os.remove(stale)
    build_reference(sp, env)
    t0 = time.time()
    first = set(sp.untimed(0))
    needed = {i for k in range(args.passes) for i in sp.untimed(k)}     # a config timed in every pass needs no build
    todo = [i for i in sp.order(0) if i in needed and i not in sp.built]
    todo = [i for i in todo if i in first] + [i for i in todo if i not in first]   # pass 1's first
    pool = BuildPool(sp, env, jobs, todo, args.hang_s) if todo else None
    if pool is None:
        open(done_flag, "w").close()
    timer, stamp, fruitless, failed = None, 0.0, 0, False
    while True:
        if pool is not None and not pool.poll():
            open(done_flag, "w").close()
            print(f"{time.strftime('%H:%M:%S')} built {sp.name}: {len(sp.built)}/{sp.n} in {time.time() - t0:.0f} s "
                  f"({len(todo)} this run, {jobs} processes)", flush=True)
            pool = None
        if timer is not None:
            proc, p, timed_at_start = timer
            rc = proc.poll()
            if rc is None:
                if time.time() > t_end + 30:        # past its deadline: stopped, not blamed
                    break
                if time.time() - stamp > 5:
                    stamp = time.time()
                    if timing_stuck(sp, args.hang_s):
                        proc.kill()
                        proc.wait()
                        rc = -999
                if rc is None:
                    time.sleep(0.5)
                    continue
            sp.refresh()
            timer = None
            if rc != 0:
                fruitless = fruitless + 1 if sum(len(v) for v in sp.timed.values()) == timed_at_start else 0
                blame_timing_crash(sp, rc)
                if fruitless >= 3:
                    print(f"{sp.name}: the timing process ended with {rc} three times without timing a "
                          "config (its error is above); stopping", flush=True)
                    failed = True
                    break
            done = sum(len(sp.timed.get(k, {})) for k in range(args.passes))
            print(f"{time.strftime('%H:%M:%S')} timed {sp.name} pass {p + 1}: {done}/{(sp.n - len(sp.failed)) * args.passes} "
                  f"timings ({time.time() - t0:.0f} s)", flush=True)
            continue
        sp.refresh()
        left = [k for k in range(args.passes) if sp.untimed(k)]
        if not left or time.time() > t_end:
            break
        p = left[0]
        follow = pool is not None and all(not sp.untimed(k) for k in range(p))
        if p > 0 and pool is not None and not follow:       # the later passes wait for a quiet host
            time.sleep(0.5)
            continue
        todo_p = sp.untimed(p) if follow or p == 0 else [i for i in sp.untimed(p) if i in sp.built]
        cmd = script_cmd(["_time", sp.name, "--root", sp.root, "--pass", str(p), "--deadline", str(t_end),
                          "--min-repeat-ms", str(args.min_repeat_ms), "--indices", ",".join(map(str, todo_p))]
                         + (["--follow"] if follow else []))
        timer = (subprocess.Popen(cmd, env=env), p, sum(len(v) for v in sp.timed.values()))
        stamp = time.time()
    if pool is not None:
        pool.stop()
    if timer is not None:
        timer[0].kill()
        timer[0].wait()
    sp.refresh()
    return not failed


def timing_stuck(sp: "Space", hang_s: float) -> bool:
    """The timing process has been on one config for ``hang_s`` (a hung kernel)."""
    path = os.path.join(sp.dir, "timing_now")
    if not os.path.exists(path) or time.time() - os.path.getmtime(path) < hang_s:
        return False
    sp.refresh()
    i, p = (int(x) for x in open(path).read().split())
    return i not in sp.timed.get(p, {})


def blame_timing_crash(sp: "Space", rc: int) -> None:
    """The timing process ended with ``rc``: an error row for the config it was on, if untimed."""
    path = os.path.join(sp.dir, "timing_now")
    if not os.path.exists(path):
        return
    i, p = (int(x) for x in open(path).read().split())
    if i not in sp.timed.get(p, {}):
        append_row(os.path.join(sp.dir, "timed.jsonl"),
                   {"i": i, "pass": p, "error": "RUNTIME_DEVICE", "msg": f"the timing process ended with {rc}"})
        sp.refresh()




def cmd_run(args) -> int:
    if args.cpus:       # this process and every builder and timer it starts
        cpus = parse_cpus(args.cpus)
        if not cpus <= os.sched_getaffinity(0):
            raise SystemExit(f"--cpus {args.cpus}: CPUs {sorted(cpus - os.sched_getaffinity(0))} are not ones "
                             f"this process may run on ({sorted(os.sched_getaffinity(0))})")
        os.sched_setaffinity(0, cpus)
    env = dict(os.environ, **ONE_THREAD)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    spaces = [Space(n, args.root, passes=args.passes, check=True) for n in args.spaces]
    if args.resume:
        for path in args.resume:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                name = json.loads(f.readline()).get("space")
            sp = next((s for s in spaces if s.name == name), None)
            if sp is None:
                raise SystemExit(f"--resume {path}: a table of space {name!r}, which this run does not measure")
            print(f"--resume {path}: {import_table(sp, path)} configs' timings taken", flush=True)
    if args.gpu:
        t_end = time.time() + (args.time_limit or 1e9)
        jobs = args.jobs or max(1, len(os.sched_getaffinity(0)) - 2)
        if args.build_only:
            return build_only(args, spaces, env, jobs, t_end)
        ok = all([run_pipelined(args, sp, env, jobs, t_end) for sp in spaces])
        finished = all(not sp.untimed(p) for sp in spaces for p in range(args.passes))
        print("all passes done" if finished else "stopped: the timing failed" if not ok
              else f"stopped at the time limit ({args.time_limit:.0f} s)", flush=True)
        if args.export:
            args.partial = True
            return cmd_export(args)
        return 0
    own = OwnLoad()
    jobs = args.jobs or 1
    last_msg = 0.0
    t_end = time.time() + (args.time_limit or 1e9)
    while True:
        if time.time() > t_end:
            print(f"stopped at the time limit ({args.time_limit:.0f} s)", flush=True)
            if args.export:
                args.partial = True
                return cmd_export(args)
            return 0
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
    return cmd_export(args) if args.export else 0


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
        sp = Space(name, args.root, passes=args.passes, check=True)
        task = sp.task
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
            crashed = [r for r in got if "error" in r]
            if crashed:         # a later pass crashed on it (pass 1's errors are handled above)
                rows.append({"i": i, "error": crashed[0]["error"], "msg": crashed[0]["msg"]})
                continue
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
            "fingerprint": sp.built_by,        # None: a cache made before fingerprints
            "timing": {"passes": args.passes, "repeat": REPEAT, "min_repeat_ms": args.min_repeat_ms,
                       "slow_s": SLOW_S,
                       **({"gpu": "CUDA events; one launch to calibrate, then `repeat` timings of enough "
                                  "back-to-back launches; pass 1 timed while the other configs were built "
                                  "(builders at nice 10), the later passes after"} if spec["target"] == "cuda" else {}),
                       "resumed_from": [r["table"].split(os.sep)[-1] for r in read_rows(os.path.join(sp.dir, "resumed.jsonl"))],
                       "figure": ("the fastest timing of all passes (contention only slows: on a busy machine "
                                  "the minimum is the least biased)" if args.figure == "min"
                                  else "median over passes of each pass's median")},
            "measured": [time.strftime("%Y-%m-%d %H:%M", time.localtime(min(times))),
                         time.strftime("%Y-%m-%d %H:%M", time.localtime(max(times)))] if times else None,
            "configs": sp.n, "errors": len(rows) - len(ok), "partial": bool(short),
            "timed_per_pass": [sum(len(r["passes"]) > k for r in ok) for k in range(args.passes)],
            "command": "python3 bench/ground_truth.py run " + name + (" --gpu" if spec["target"] == "cuda" else ""),
        }
        out = os.path.join(args.out, f"{name}.jsonl.gz")
        os.makedirs(args.out, exist_ok=True)
        with gzip.open(out + ".tmp", "wt", encoding="utf-8") as f:
            f.write(json.dumps(header, separators=(",", ":")) + "\n")
            for r in rows:
                f.write(json.dumps(r, separators=(",", ":")) + "\n")
        os.replace(out + ".tmp", out)
        spreads = sorted(r["spread"] for r in ok if len(r["passes"]) > 1) or [math.nan]   # of configs timed twice
        print(f"wrote {out}: {len(rows)} rows ({len(ok)} timed, {len(rows) - len(ok)} errors; timed per pass "
              f"{header['timed_per_pass']}); best {task.flop / min(r['cost'] for r in ok) / 1e9:.1f} GFLOP/s; "
              f"spread between passes: median {100 * spreads[len(spreads) // 2]:.1f}%, 90th percentile "
              f"{100 * spreads[int(0.9 * len(spreads))]:.1f}%")
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
    p.add_argument("--time-limit", type=float, default=0.0,
                   help="stop building and timing after about this many seconds (0: none); run again to go on")
    p.add_argument("--export", action="store_true",
                   help="export the spaces when `run` ends (--gpu: as a partial table if the time limit came first)")
    p.add_argument("--resume", action="append", default=[], metavar="TABLE",
                   help="take an exported (partial) table's timings as passes already done (same space and code)")
    p.add_argument("--hang-s", type=float, default=120.0,
                   help="--gpu: a builder or timing process this long on one config is killed and the config blamed")
    p.add_argument("--min-repeat-ms", type=float, default=0.0,
                   help=f"each timing lasts at least this long ({MIN_REPEAT_MS:g} ms on the CPU, "
                        f"{GPU_MIN_REPEAT_MS:g} ms with --gpu)")
    p.add_argument("--cpus", default="", help="run (builders and timing too) on these CPUs only, e.g. 0-13")
    p.add_argument("--build-only", action="store_true",
                   help="--gpu: build the spaces into the cache at nice 19, time nothing (a later run times them)")
    p.add_argument("--reverse", action="store_true",
                   help="--build-only: in the reverse of pass 1's order (a machine without the GPU builds "
                        "the configs the device would build last; its nvcc cache goes in the cubin tarball)")
    p.add_argument("--follow", action="store_true")
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
    cuda = args.gpu or (args.spaces and all(SPACES[s]["target"] == "cuda" for s in args.spaces))
    args.min_repeat_ms = args.min_repeat_ms or (GPU_MIN_REPEAT_MS if cuda else MIN_REPEAT_MS)
    if args.command == "_time":
        child_time(args.spaces[0], args.pass_no, [int(x) for x in args.indices.split(",") if x],
                   args.deadline, args.root, args.min_repeat_ms, args.follow)
        return 0
    if args.command in ("run", "export") and not args.spaces:
        p.error(f"name the spaces to {args.command}: {', '.join(SPACES)}")
    return {"list": cmd_list, "run": cmd_run, "status": cmd_status, "export": cmd_export}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
