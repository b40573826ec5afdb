"""Random GPU schedules, lowered for CUDA, run in the emulator (and with ``--gpu`` on the GPU) and
compared with float64 numpy.

    python3 tests/cuda/gpu_fuzz.py --cases 500 --seed 1 --jobs 2          # emulated
    python3 tests/cuda/gpu_fuzz.py --cases 300 --seed 7 --gpu --jobs 16   # nvcc + the real GPU too
    python3 tests/cuda/gpu_fuzz.py --replay row_reduce:3141592653         # one case, in full

Each case draws a family (``gpu_fuzz_families.FAMILIES``: elementwise, row reductions, rfactor,
softmax / layer norm, shared-memory matmul, the library's hand schedules) and, from its own seed,
a program: a TE declaration and a random GPU schedule written as Python, plus its numpy
reference. Inputs are random (never all zeros), outputs are poisoned (NaN, INT_MIN) first. A case

* **passes** when every output matches the reference (and no element is left poisoned);
* is **rejected** when tilecraft refuses the schedule with its own error that names the problem
  (``ScheduleError``, ``TEError``, ``DTypeError``, a ``GPULoweringError`` other than an internal
  one, the device's limits at load time); a refusal of a library schedule is a failure;
* **fails** on anything else: an internal error (a Python exception from inside the compiler, a
  ``GPULoweringError`` about unbound variables), an ``EmulationError`` (race, out-of-bounds,
  divergent barrier), an nvcc error, a GPU error, wrong or unwritten outputs, a timeout.

A failure prints a reproducer: the family, the case seed (``--replay family:seed``) and the
program as Python. With ``--jobs J`` cases run in J worker processes, each case with a time limit
(``--timeout``); a worker that dies or hangs is replaced and the run goes on. With ``--gpu`` a
worker whose CUDA context saw a fault is replaced after reporting it.
"""
from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass

import numpy as np

try:                                   # as part of the tests package, or run as a script
    from .gpu_fuzz_families import FAMILIES, Program
except ImportError:
    from gpu_fuzz_families import FAMILIES, Program

PRELUDE = ("import numpy as np\nimport tilecraft as tc\nfrom tilecraft import te\n"
           "from tilecraft.topi import cuda_schedules as cs\n")
# GPULoweringErrors that are the compiler's fault, not the schedule's
INTERNAL_LOWERING_MESSAGES = ("which are not parameters", "was not lowered for target")


@dataclass
class Result:
    family: str
    seed: int
    status: str                 # "passed", "rejected", "failed"
    stage: str = ""             # where it stopped: schedule, lower, codegen, emulate, nvcc, gpu, check
    message: str = ""
    source: str = ""            # the program (TE + schedule) as Python
    seconds: float = 0.0
    fatal: bool = False         # the worker's CUDA context is unusable afterwards

    def reproducer(self) -> str:
        lines = [f"# gpu_fuzz {self.status} at {self.stage}: {self.family}, case seed {self.seed}",
                 f"# replay: python3 tests/cuda/gpu_fuzz.py --replay {self.family}:{self.seed}"]
        lines += ["# " + m for m in self.message.splitlines()[:30]]
        lines += [PRELUDE + self.source.rstrip("\n"),
                  "print(tc.lower(s, args, target='cuda'))"]
        return "\n".join(lines)


def case_seeds(seed: int, n: int, families=None) -> list:
    """The ``(family, case seed)`` of cases ``0..n-1`` of a run: round-robin over the families
    (so every family gets its share of a small run), each case with its own seed."""
    names = list(families or FAMILIES)
    seeds = np.random.SeedSequence(seed).generate_state(n, np.uint32)
    return [(names[k % len(names)], int(seeds[k])) for k in range(n)]


def make_program(family: str, seed: int) -> Program:
    """The program of one case (deterministic in ``family`` and ``seed``)."""
    return FAMILIES[family](np.random.default_rng(seed))


# ------------------------------------------------------------------------------------------------
# one case

class _Stop(Exception):
    """The case ends here with this status."""

    def __init__(self, status, stage, message, fatal=False):
        super().__init__(message)
        self.status, self.stage, self.message, self.fatal = status, stage, message, fatal


def _user_errors():
    from tilecraft.ir.dtype import DTypeError
    from tilecraft.schedule.passes.gpu_kernels import GPULoweringError
    from tilecraft.schedule.schedule import ScheduleError
    from tilecraft.te.tensor import TEError
    return (ScheduleError, TEError, DTypeError, GPULoweringError)


def _classify(exc, stage: str, must_build: bool):
    """The _Stop for an exception raised while scheduling or lowering."""
    from tilecraft.schedule.passes.gpu_kernels import GPULoweringError
    text = f"{type(exc).__name__}: {exc}"
    user = isinstance(exc, _user_errors())
    if isinstance(exc, GPULoweringError) and any(m in str(exc) for m in INTERNAL_LOWERING_MESSAGES):
        user = False
    if not user:
        return _Stop("failed", stage, "internal error: " + text + "\n" + _where(exc))
    if must_build:
        return _Stop("failed", stage, "a library schedule was refused at these sizes: " + text)
    return _Stop("rejected", stage, text)


def _where(exc) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in tb if "tilecraft" in f.filename and "gpu_fuzz" not in f.filename]
    f = (inside or tb)[-1] if (inside or tb) else None
    return f"raised at {os.path.relpath(f.filename)}:{f.lineno} ({f.name})" if f else ""


def build_program(prog: Program):
    """Run the program's source: ``(schedule, args, lowered function)``."""
    import tilecraft
    ns: dict = {}
    try:
        exec(compile(PRELUDE + prog.source, "<gpu_fuzz case>", "exec"), ns)
    except Exception as e:
        raise _classify(e, "schedule", prog.must_build) from None
    s, args = ns["s"], ns["args"]
    try:
        func = tilecraft.lower(s, args, target="cuda")
    except Exception as e:
        raise _classify(e, "lower", prog.must_build) from None
    return s, args, func


def _is_input(t) -> bool:
    from tilecraft.te.tensor import PlaceholderOp
    return isinstance(t.op, PlaceholderOp)


def _shape(t, sizes: dict) -> tuple:
    from tilecraft.ir.expr import Const
    return tuple(int(d.value) if isinstance(d, Const) else int(sizes[d.name]) for d in t.shape)


def poison_value(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.nan
    return np.iinfo(dtype).min if dtype.kind == "i" else np.iinfo(dtype).max


@dataclass
class CaseData:
    """The arrays of one run: one per tensor argument (inputs random, outputs poisoned) in
    argument order, and the values of the scalar arguments."""
    tensors: list
    arrays: list
    scalars: list

    def inputs(self) -> list:
        return [a for t, a in zip(self.tensors, self.arrays) if _is_input(t)]

    def outputs(self, arrays) -> list:
        return [(t.name, a) for t, a in zip(self.tensors, arrays) if not _is_input(t)]

    def fresh(self) -> list:
        """Copies of the arrays (outputs still poisoned) for one run."""
        return [a.copy() for a in self.arrays]


def make_arrays(prog: Program, args, rng) -> CaseData:
    """Random inputs (``prog.ranges``, never all zeros), poisoned outputs, scalar values
    (``prog.scalars``)."""
    from tilecraft.ir.expr import Var
    tensors, arrays, scalars = [], [], []
    for t in args:
        if isinstance(t, Var):
            scalars.append(np.dtype(t.dtype).type(prog.scalars[t.name]))
            continue
        shape, dtype = _shape(t, prog.sizes), np.dtype(t.dtype)
        if _is_input(t):
            lo, hi = prog.ranges.get(t.name, (-1.0, 1.0) if dtype.kind == "f" else (-50, 50))
            if dtype.kind == "f":
                a = rng.uniform(lo, hi, shape)
                a[np.abs(a) < 1e-3] = 0.5                # never (nearly) zero
            else:
                a = rng.integers(int(lo), int(hi) + 1, shape)
            a = a.astype(dtype)
        else:
            a = np.full(shape, poison_value(dtype), dtype)
        tensors.append(t)
        arrays.append(a)
    return CaseData(tensors, arrays, scalars)


def compare(prog: Program, data: CaseData, arrays, where: str):
    """Check every output in ``arrays`` (after a run) against the float64 reference; raise
    _Stop("failed") otherwise."""
    ns: dict = {"np": np}
    exec(prog.reference, ns)
    want = ns["reference"](*[a.astype(np.float64) for a in data.inputs()], *[float(v) for v in data.scalars])
    for (name, got), ref in zip(data.outputs(arrays), want):
        ref = np.broadcast_to(np.asarray(ref, np.float64), got.shape)
        g = got.astype(np.float64)
        pv = poison_value(got.dtype)
        unwritten = np.isnan(g) & ~np.isnan(ref) if got.dtype.kind == "f" else (g == pv) & (ref != pv)
        if unwritten.any():
            at = np.argwhere(unwritten)[0]
            raise _Stop("failed", where, f"{where}: '{name}' has {int(unwritten.sum())} of {got.size} elements "
                                         f"never written (still poisoned), the first at {tuple(int(x) for x in at)}")
        bad = ~np.isclose(g, ref, rtol=prog.rtol, atol=prog.atol, equal_nan=True)
        if bad.any():
            at = tuple(int(x) for x in np.argwhere(bad)[0])
            err = np.abs(g - ref)[bad]
            raise _Stop("failed", where, f"{where}: '{name}' differs from numpy at {int(bad.sum())} of {got.size} "
                                         f"elements (max abs error {err.max():.3g}); first at {at}: got {g[at]!r}, "
                                         f"expected {ref[at]!r} (rtol {prog.rtol}, atol {prog.atol})")


def check_program(prog: Program, family: str = "?", seed: int = 0, device=None, data_seed: int | None = None) -> Result:
    """Build, emulate (and with ``device``, compile and run) one program; never raises."""
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.cuda_emulate import EmulationError, emulate
    t0 = time.perf_counter()
    res = Result(family, seed, "passed", source=prog.source)
    try:
        s, args, func = build_program(prog)
        try:
            generate_cuda(func)
        except Exception as e:
            raise _Stop("failed", "codegen", f"internal error: {type(e).__name__}: {e}\n{_where(e)}") from None
        rng = np.random.default_rng(seed if data_seed is None else data_seed)
        data = make_arrays(prog, args, rng)
        arrays = data.fresh()
        try:
            emulate(func, arrays + data.scalars)
        except EmulationError as e:
            raise _Stop("failed", "emulate", f"EmulationError: {e}") from None
        except Exception as e:
            raise _Stop("failed", "emulate", f"internal error: {type(e).__name__}: {e}\n{_where(e)}") from None
        compare(prog, data, arrays, "emulator")
        if device is not None:
            compare(prog, data, device.run(s, args, data.fresh(), data.scalars), device.name)
    except _Stop as stop:
        res.status, res.stage, res.message, res.fatal = stop.status, stop.stage, stop.message, stop.fatal
    except Exception as e:                      # the fuzzer's own machinery: report, never stop the run
        res.status, res.stage = "failed", "harness"
        res.message = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"
    res.seconds = time.perf_counter() - t0
    return res


def run_case(family: str, seed: int, device=None) -> Result:
    """Make and check the case ``family:seed``."""
    try:
        prog = make_program(family, seed)
    except Exception as e:
        return Result(family, seed, "failed", "harness", f"the generator failed: {type(e).__name__}: {e}")
    return check_program(prog, family, seed, device)


# ------------------------------------------------------------------------------------------------
# devices: how a built case runs on a GPU

class CUDADevice:
    """The real GPU: ``tilecraft.build`` (nvcc) and a launch through pycuda, as the CUDA tests do."""
    name = "gpu"

    def __init__(self, index: int = 0):
        self.index = index

    def build(self, s, args):
        import tilecraft
        from tilecraft.codegen.cuda_compile import CUDACompileError
        try:
            return tilecraft.build(s, args, target="cuda")
        except CUDACompileError as e:
            raise _Stop("failed", "nvcc", f"CUDACompileError: {e}") from None
        except Exception as e:
            raise _Stop("failed", "build", f"internal error: {type(e).__name__}: {e}\n{_where(e)}") from None

    def execute(self, mod, arrays, scalars):
        import tilecraft
        from tilecraft.runtime import cuda_ndarray, cuda_runtime
        dev = tilecraft.cuda(self.index)
        d = [cuda_ndarray.array(a, dev) for a in arrays]
        mod(*d, *scalars)
        cuda_runtime.synchronize(self.index)
        return [x.numpy() for x in d]

    def run(self, s, args, arrays, scalars):
        """``arrays`` (one per tensor argument) after running the built function on the device."""
        mod = self.build(s, args)
        try:
            return self.execute(mod, arrays, scalars)
        except RuntimeError as e:
            if "pycuda" not in type(e).__module__ and _is_limit_error(e):
                raise _Stop("rejected", "gpu", f"{type(e).__name__}: {e}") from None
            raise _Stop("failed", "gpu", f"{type(e).__module__}.{type(e).__name__}: {e}",
                        fatal="pycuda" in type(e).__module__) from None
        except Exception as e:
            raise _Stop("failed", "gpu", f"{type(e).__module__}.{type(e).__name__}: {e}",
                        fatal="pycuda" in type(e).__module__) from None


def _is_limit_error(e) -> bool:
    """tilecraft's own load-time message about the device's registers / shared memory / threads."""
    m = str(e)
    return any(w in m for w in ("registers per thread", "bytes of shared memory per block", "threads per block"))


class EmulatedDevice(CUDADevice):
    """The ``--gpu`` path with the launch replaced by the emulator: builds with nvcc into a
    CUDAModule exactly as on the GPU and runs the module's lowered function. For testing the GPU
    path on machines without one."""
    name = "emulated-gpu"

    def execute(self, mod, arrays, scalars):
        from tilecraft.codegen.cuda_emulate import emulate
        arrays = [a.copy() for a in arrays]
        emulate(mod.funcs[mod.entry_name], arrays + list(scalars))
        return arrays


DEVICES = {"gpu": CUDADevice, "emulated-gpu": EmulatedDevice}


# ------------------------------------------------------------------------------------------------
# many cases: worker processes with a time limit per case

def _worker(conn, device_name, check):
    device = DEVICES[device_name]() if device_name else None
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        res = check(*task, device=device)
        conn.send(asdict(res))
        if res.fatal:
            return


def run_many(tasks, jobs: int = 1, timeout: float = 120.0, device: str | None = None, on_result=None,
             check=run_case, max_seconds: float | None = None) -> list:
    """Run ``check(family, seed, device=...)`` for every task; ``jobs`` <= 1 runs in this process
    (no time limit), otherwise in ``jobs`` worker processes with ``timeout`` seconds per case.
    ``on_result(result)`` is called as results arrive. After ``max_seconds`` no new case starts.
    Returns the results of the cases that ran, in task order."""
    tasks = list(tasks)
    results: dict = {}
    stop_at = time.monotonic() + max_seconds if max_seconds else float("inf")
    if jobs <= 1:
        dev = DEVICES[device]() if device else None
        for k, task in enumerate(tasks):
            if time.monotonic() >= stop_at:
                break
            results[k] = check(*task, device=dev)
            if on_result:
                on_result(results[k])
        return [results[k] for k in sorted(results)]
    from multiprocessing.connection import wait
    ctx = multiprocessing.get_context("spawn")
    pending = collections.deque(enumerate(tasks))
    busy: dict = {}                     # conn -> [process, task index, deadline]
    idle: list = []

    def start():
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(child, device, check), daemon=True)
        p.start()
        child.close()
        return parent, p

    def finish(k, res):
        results[k] = res
        if on_result:
            on_result(res)

    try:
        while pending or busy:
            if time.monotonic() >= stop_at:
                pending.clear()
            while pending and len(busy) < jobs:
                conn, p = idle.pop() if idle else start()
                k, task = pending.popleft()
                conn.send(task)
                busy[conn] = [p, k, time.monotonic() + timeout]
            now = time.monotonic()
            if not busy:
                break
            ready = wait(list(busy), timeout=max(0.0, min(d for _, _, d in busy.values()) - now))
            for conn in ready:
                p, k, _ = busy.pop(conn)
                fam, seed = tasks[k][:2]
                try:
                    res = Result(**conn.recv())
                except (EOFError, OSError):
                    p.join(5)
                    res = Result(fam, seed, "failed", "worker", f"the worker process died (exit code {p.exitcode})")
                    finish(k, res)
                    continue
                finish(k, res)
                if res.fatal or not p.is_alive():
                    p.join(5)
                else:
                    idle.append((conn, p))
            now = time.monotonic()
            for conn in [c for c, (_, _, d) in busy.items() if d <= now]:
                p, k, _ = busy.pop(conn)
                fam, seed = tasks[k][:2]
                p.kill()
                p.join(5)
                finish(k, Result(fam, seed, "failed", "timeout", f"the case took more than {timeout:g} s"))
    finally:
        for conn, p in idle:
            try:
                conn.send(None)
            except OSError:
                pass
            p.join(5)
        for conn, (p, _, _) in busy.items():
            p.kill()
    return [results[k] for k in sorted(results)]


def selftest_check(kind: str, arg: int, device=None) -> Result:
    """Stand-in cases for testing ``run_many`` itself: ``ok`` passes, ``sleep`` sleeps ``arg``
    seconds, ``crash`` kills its process, ``fatal`` reports a GPU fault."""
    if kind == "sleep":
        time.sleep(arg)
    elif kind == "crash":
        os._exit(3)
    elif kind == "fatal":
        return Result(kind, arg, "failed", "gpu", "pycuda._driver.LaunchError: an illegal memory access", fatal=True)
    return Result(kind, arg, "passed")


# ------------------------------------------------------------------------------------------------
# reporting

def summary(results, seconds: float, what: str, not_run: int = 0) -> str:
    """The reproducers of the failures, then a table of passed / rejected / failed by family and
    one summary line (last, so that the tail of a long log has them)."""
    lines = []
    for r in results:
        if r.status == "failed":
            lines += ["=" * 100, r.reproducer(), ""]
    by = collections.OrderedDict((f, collections.Counter()) for f in sorted({r.family for r in results}))
    for r in results:
        by[r.family][r.status] += 1
    lines += [f"{'family':20s} {'passed':>7s} {'rejected':>9s} {'failed':>7s}"]
    for f, c in by.items():
        lines.append(f"{f:20s} {c['passed']:7d} {c['rejected']:9d} {c['failed']:7d}")
    total = collections.Counter(r.status for r in results)
    lines.append(f"{'all':20s} {total['passed']:7d} {total['rejected']:9d} {total['failed']:7d}")
    skipped = f"; {not_run} not run (--max-seconds)" if not_run else ""
    lines += ["", f"gpu_fuzz: {len(results)} cases ({what}): {total['passed']} passed, {total['rejected']} rejected, "
                  f"{total['failed']} failed in {seconds:.1f} s{skipped}"]
    return "\n".join(lines)


def rejection_reasons(results, top: int = 15) -> str:
    c = collections.Counter(f"{r.family}: {r.message.splitlines()[0][:150]}" for r in results if r.status == "rejected")
    return "\n".join(f"{n:5d}  {m}" for m, n in c.most_common(top))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=200, help="number of cases (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    ap.add_argument("--gpu", action="store_true", help="also build with nvcc and run on the GPU (pycuda)")
    ap.add_argument("--device", choices=sorted(DEVICES),
                    help="gpu (= --gpu), or emulated-gpu: the --gpu path with the launch emulated (no GPU needed)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1: in this process)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case with --jobs > 1 (default 120)")
    ap.add_argument("--families", help=f"comma-separated subset of {', '.join(FAMILIES)}")
    ap.add_argument("--replay", metavar="FAMILY:SEED", help="run one case and print its program and IR")
    ap.add_argument("--reasons", action="store_true", help="also print the most common rejection reasons")
    ap.add_argument("--max-seconds", type=float, help="start no case after this many seconds (then summarise)")
    ap.add_argument("--out", help="also write the report to this file")
    a = ap.parse_args(argv)
    device = a.device or ("gpu" if a.gpu else None)
    if a.replay:
        fam, seed = a.replay.rsplit(":", 1)
        res = run_many([(fam, int(seed))], 1, device=device)[0]
        print(PRELUDE + res.source)
        if res.status != "rejected" and res.stage not in ("schedule", "lower", "harness"):
            import tilecraft
            print(tilecraft.lower(*build_program(make_program(fam, int(seed)))[:2], target="cuda"))
        print(f"\n{res.status}" + (f" at {res.stage}: {res.message}" if res.message else "") + f" ({res.seconds:.2f} s)")
        return 1 if res.status == "failed" else 0
    families = a.families.split(",") if a.families else None
    for f in families or ():
        if f not in FAMILIES:
            ap.error(f"unknown family {f!r}; there are {', '.join(FAMILIES)}")
    tasks = case_seeds(a.seed, a.cases, families)
    t0 = time.perf_counter()
    done = [0]

    def progress(r):
        done[0] += 1
        if r.status == "failed":
            print(f"[{done[0]}/{len(tasks)}] FAILED {r.family}:{r.seed} at {r.stage}: {r.message.splitlines()[0][:200]}",
                  flush=True)
        elif done[0] % 50 == 0:
            print(f"[{done[0]}/{len(tasks)}] {time.perf_counter() - t0:.0f} s", flush=True)

    results = run_many(tasks, a.jobs, a.timeout, device, progress, max_seconds=a.max_seconds)
    what = f"seed {a.seed}, emulator" + (f" + {device}" if device else "") + f", {max(a.jobs, 1)} jobs"
    report = summary(results, time.perf_counter() - t0, what, len(tasks) - len(results))
    if a.reasons:
        report = "most common rejections:\n" + rejection_reasons(results) + "\n\n" + report
    print(report)
    if a.out:
        with open(a.out, "w") as f:
            f.write(report + "\n")
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
