"""LocalBuilder and LocalRunner: build candidates in worker processes, run each in an isolated one.

The builder instantiates a configuration, compiles it with ``tilecraft.build`` and writes a
shared library (``export_library``); it also builds the task's *naive* schedule once (the
reference). The runner loads a library in a separate process (``tilecraft.runtime.load_module``),
runs it on random inputs, compares its outputs with the reference's on the same inputs, then
times it. A candidate that raises, segfaults, hangs or is killed for memory becomes a
``MeasureResult`` with the matching ``MeasureErrorNo``; tuning goes on with a fresh worker.

Both take the function that does the work in the worker (``build_func``, ``run_func``) so tests
can inject candidates that crash or hang; the defaults use the compiler.
"""
from __future__ import annotations

import os
import shutil
import time
import traceback
import warnings
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from .inputs import input_recipe, make_inputs
from .worker_pool import WorkerPool, signal_name
from .measure import (BuildResult, MeasureErrorNo, MeasureInput, MeasureResult, TimingFront, TimingOptions,
                      resolve_timing)
from .space import InstantiationError


# ---------------------------------------------------------------------------------------------
# Work done inside the worker processes.


def tensor_arg_info(args) -> tuple:
    """``[(shape, dtype, is_output), ...]`` of a template's argument tensors. A tensor is an
    output when its op computes something (it is not a placeholder)."""
    info = []
    for t in args:
        shape = tuple(int(getattr(d, "value", d)) for d in t.shape)
        op = getattr(t, "op", None)
        is_output = op is not None and type(op).__name__ != "PlaceholderOp" and hasattr(op, "body")
        info.append((shape, str(t.dtype), bool(is_output)))
    return tuple(info)


def _compile(sch, args, target, path: str) -> tuple:
    """Lower, compile and export; returns ``(("lower", s), ("compile", s), ("export", s))``."""
    import tilecraft

    t0 = time.perf_counter()
    func = tilecraft.lower(sch, args, name="default_function",
                           target="cuda" if _is_cuda(target) else None)
    t1 = time.perf_counter()
    mod = tilecraft.build(func, target=target, name="default_function")
    t2 = time.perf_counter()
    mod.export_library(path)
    t3 = time.perf_counter()
    return (("lower", t1 - t0), ("compile", t2 - t1), ("export", t3 - t2))


def _is_cuda(target) -> bool:
    return str(target).split()[0] == "cuda"


def library_suffix(task) -> str:
    """``.tcuda`` (a CUDA module's archive) for CUDA tasks, ``.so`` otherwise."""
    return ".tcuda" if task is not None and task.target is not None and _is_cuda(task.target) else ".so"


def default_build_func(inp: MeasureInput, path: str) -> BuildResult:
    """Instantiate ``inp.config``, compile it, export the library to ``path``."""
    t0 = time.perf_counter()
    try:
        sch, args = inp.task.instantiate(inp.config)
    except InstantiationError as err:
        return BuildResult(None, (), MeasureErrorNo.INSTANTIATION_ERROR, str(err), time.perf_counter() - t0)
    except Exception:
        return BuildResult(None, (), MeasureErrorNo.INSTANTIATION_ERROR, traceback.format_exc(limit=10),
                           time.perf_counter() - t0)
    if getattr(inp.config, "errors", None):
        return BuildResult(None, (), MeasureErrorNo.INSTANTIATION_ERROR, "; ".join(inp.config.errors),
                           time.perf_counter() - t0)
    target = str(inp.task.target) if inp.task.target is not None else "llvm"
    t_inst = time.perf_counter() - t0
    try:
        phases = _compile(sch, args, target, path)
    except Exception:
        kind = MeasureErrorNo.COMPILE_DEVICE if _is_cuda(target) else MeasureErrorNo.COMPILE_HOST
        return BuildResult(None, (), kind, traceback.format_exc(limit=10), time.perf_counter() - t0)
    return BuildResult(path, tensor_arg_info(args), MeasureErrorNo.NO_ERROR, "", time.perf_counter() - t0,
                       phases=(("instantiate", t_inst),) + phases)


def build_reference_func(task, path: str) -> BuildResult:
    """The naive schedule of ``task``, exported to ``path``: what candidates' outputs are compared
    with. On the CPU that is ``te.create_schedule`` of the outputs (no transformation); for CUDA,
    every stage is its own kernel with its output axes spread over threads
    (``tilecraft.schedule.naive_gpu.naive``)."""
    from tilecraft import te

    t0 = time.perf_counter()
    sch, args = task.instantiate(task_default_config(task))
    info = tensor_arg_info(args)
    outputs = [t for t, (_, _, out) in zip(args, info) if out]
    target = str(task.target) if task.target is not None else "llvm"
    if _is_cuda(target):
        from tilecraft.schedule.naive_gpu import naive as naive_gpu
        naive = naive_gpu(outputs)
    else:
        naive = te.create_schedule([t.op for t in outputs])
    _compile(naive, args, target, path)
    return BuildResult(path, info, MeasureErrorNo.NO_ERROR, "", time.perf_counter() - t0)


def task_default_config(task):
    from .space import FallbackConfigEntity

    return FallbackConfigEntity()


def random_inputs(arg_info, seed: int) -> list[np.ndarray]:
    """Deterministic random arrays for ``arg_info`` (outputs too, so a candidate that forgets to
    write is caught). Values in [-1, 1) for floats, small integers otherwise; never all zeros."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype, _ in arg_info:
        dt = np.dtype(dtype)
        if dt.kind == "f":
            arrays.append(rng.uniform(-1.0, 1.0, size=shape).astype(dt))
        elif dt.kind in "iu":
            arrays.append(rng.integers(1, 8, size=shape).astype(dt))
        elif dt.kind == "b":
            arrays.append(rng.integers(0, 2, size=shape).astype(dt))
        else:
            arrays.append(np.zeros(shape, dt))
    return arrays


_inputs_cache: dict = {}


def cached_random_inputs(arg_info, seed: int, task=None) -> list[np.ndarray]:
    """``random_inputs`` drawn once per worker and task (drawing 3 × 16M numbers for a 4096²
    GEMM takes longer than measuring it), or the arrays of the task's input recipe
    (``autotune.inputs``: a sparse template's CSR matrix). The arrays are only ever copied to
    the device, never handed to a candidate, so each candidate starts from the same untouched
    values."""
    recipe = input_recipe(task)
    key = (tuple(arg_info), seed, recipe)
    hit = _inputs_cache.get(key)
    if hit is None:
        _inputs_cache.clear()
        hit = _inputs_cache[key] = (make_inputs(recipe, list(arg_info), seed) if recipe
                                    else random_inputs(arg_info, seed))
    return hit


def _device_of(target: str):
    import tilecraft

    return tilecraft.cuda(0) if _is_cuda(target) else tilecraft.cpu(0)


def _call_library(path: str, arrays: list[np.ndarray], target: str):
    import tilecraft

    mod = tilecraft.runtime.load_module(path)
    dev = _device_of(target)
    nd = [tilecraft.nd.array(a, dev) for a in arrays]
    mod(*nd)
    return mod, dev, nd


def _to_numpy(x) -> np.ndarray:
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


_reference_cache: dict = {}


def reference_outputs_path(reference: str, seed: int, recipe: tuple = ()) -> str:
    """Where the reference's outputs on the inputs of ``seed`` (and ``recipe``) are saved."""
    if not recipe:
        return f"{reference}.seed{seed}.npz"
    import hashlib

    return f"{reference}.seed{seed}.{hashlib.sha256(repr(recipe).encode()).hexdigest()[:16]}.npz"


def prepare_reference(reference: str, arg_info, seed: int, target: str, task=None) -> str:
    """Run the reference library once on the seeded inputs (``task``'s, see
    :func:`cached_random_inputs`) and save its outputs next to it."""
    out_path = reference_outputs_path(reference, seed, input_recipe(task))
    if not os.path.exists(out_path):
        arrays = cached_random_inputs(arg_info, seed, task)
        _, _, nd = _call_library(reference, arrays, target)
        outs = {f"out{i}": _to_numpy(nd[i]) for i, (_, _, o) in enumerate(arg_info) if o}
        np.savez(out_path + ".tmp.npz", **outs)
        os.replace(out_path + ".tmp.npz", out_path)
    return out_path


def _reference_outputs(path: str) -> dict:
    if path not in _reference_cache:
        with np.load(path) as z:
            _reference_cache[path] = {k: z[k] for k in z.files}
    return _reference_cache[path]


def limit_memory(max_bytes: int | None):
    """Worker initializer: cap the address space so a candidate that runs away with memory
    fails there (MemoryError or a crash) instead of pushing the machine into swap."""
    if max_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))


def _flush_cpu_cache(_buf=[]):
    # Write a buffer larger than the last-level cache so the next run starts cold.
    if not _buf:
        _buf.append(np.empty(64 << 20 >> 3, dtype=np.float64))
    _buf[0].fill(1.0)


def describe_difference(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    """``None`` when ``got`` matches ``want`` (``np.isclose``, NaN matching NaN), else how they
    differ, with plain indices: the worst element (a NaN where a number is expected counts as
    worst) and how many differ.

    >>> describe_difference(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.5, 3.0]), 1e-5, 1e-5)
    'max abs error 0.5 at index (1,) (got 2.0, expected 2.5), 1 of 3 elements differ'
    """
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    rank = np.where(bad, np.nan_to_num(err, nan=np.inf, posinf=np.inf), -1.0)
    at = tuple(int(k) for k in np.unravel_index(int(np.argmax(rank)), got.shape))
    return (f"max abs error {float(err[at]):.3g} at index {at} (got {got[at]!s}, expected {want[at]!s}), "
            f"{int(bad.sum())} of {bad.size} elements differ")


def default_run_func(inp: MeasureInput, br: BuildResult, timing: TimingOptions, ref_outputs: str | None):
    """Load ``br.filename``, check it against the reference outputs saved at ``ref_outputs``
    (``None``: no check), time it as ``timing`` says (its ``seed`` set: see
    ``TimingOptions.seeded``).

    Returns ``(costs, error_no, error_msg)``.
    """
    target = str(inp.task.target) if inp.task.target is not None else "llvm"
    arrays = cached_random_inputs(br.arg_info, timing.seed, inp.task)
    t0 = time.perf_counter()
    mod, dev, nd = _call_library(br.filename, arrays, target)
    first_call = time.perf_counter() - t0
    if ref_outputs:
        ref = _reference_outputs(ref_outputs)
        rtol, atol = timing.rtol, timing.atol
        for i, (_, _, is_out) in enumerate(br.arg_info):
            if not is_out:
                continue
            where = describe_difference(_to_numpy(nd[i]), ref[f"out{i}"], rtol, atol)
            if where is not None:
                return (), int(MeasureErrorNo.WRONG_ANSWER), f"output {i} differs from the reference: {where}"
    number, repeat = timing.number, timing.repeat
    budget = timing.max_timing_s
    if budget and first_call * number * repeat > budget:
        # a slow candidate: fewer runs (it cannot be the best anyway), keeping one timing at least
        number = 1
        repeat = max(1, min(repeat, int(budget / max(first_call, 1e-9))))
    timer = mod.time_evaluator(mod.entry_name, dev, number=number, repeat=1, min_repeat_ms=timing.min_repeat_ms)
    costs = []
    for _ in range(repeat):
        if timing.enable_cpu_cache_flush:
            _flush_cpu_cache()
        costs.append(float(timer(*nd).mean))
    return tuple(costs), int(MeasureErrorNo.NO_ERROR), ""


# ---------------------------------------------------------------------------------------------
# The objects a tuner is given.


class LocalBuilder:
    """Build candidates in ``n_parallel`` worker processes (default: one per core); a build
    that takes more than ``timeout`` seconds is killed and recorded as ``BUILD_TIMEOUT``.

    ``build_func(measure_input, path) -> BuildResult`` runs in the workers (must be importable);
    ``build_reference=False`` skips the naive reference build (no correctness checks then).
    """

    def __init__(self, timeout: float = 10, n_parallel: int | None = None,
                 build_func: Callable | str = "default", build_reference: bool = True,
                 tmp_dir: str | None = None):
        self.timeout = timeout
        self.n_parallel = n_parallel or os.cpu_count() or 1
        self.build_func = default_build_func if build_func == "default" else build_func
        self.build_reference = build_reference
        self._tmp_root = tmp_dir
        self._pool: WorkerPool | None = None
        self.task = None
        self.tmp_dir: str | None = None
        self.reference: str | None = None
        self.reference_arg_info: tuple = ()
        self._counter = 0

    def set_task(self, task):
        from ..runtime.tempdirs import owned_temp_dir
        self.task = task
        if self.tmp_dir:                 # the previous task's candidates and reference
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
        # named after this process: a killed run's folder is removed at the next start
        self.tmp_dir = owned_temp_dir("tilecraft-tune-", self._tmp_root)
        self.reference = None
        self.reference_arg_info: tuple = ()
        self._reference_tried = False

    def _pool_(self) -> WorkerPool:
        if self._pool is None:
            self._pool = WorkerPool(self.n_parallel)
        return self._pool

    def _ensure_reference(self):
        if self._reference_tried or not self.build_reference:
            return
        self._reference_tried = True
        path = os.path.join(self.tmp_dir, "reference" + library_suffix(self.task))
        out = self._pool_().map(build_reference_func, [(self.task, path)], timeout=max(120.0, self.timeout))[0]
        if out.status == "ok":
            self.reference = path
            self.reference_arg_info = tuple(out.value.arg_info)
        else:
            detail = out.value if out.status == "error" else f"{out.status} ({out.value})"
            warnings.warn(f"building the reference (naive) schedule failed; outputs will not be "
                          f"checked:\n{detail}", RuntimeWarning, stacklevel=3)

    def build(self, measure_inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        self._ensure_reference()
        jobs = []
        for inp in measure_inputs:
            self._counter += 1
            jobs.append((inp, os.path.join(self.tmp_dir, f"cand{self._counter}{library_suffix(self.task)}")))
        outcomes = self._pool_().map(self.build_func, jobs, self.timeout)
        results = []
        for out in outcomes:
            if out.status == "ok":
                br = out.value
                if br.error_no == MeasureErrorNo.NO_ERROR:
                    br = replace(br, reference=self.reference,
                                 reference_arg_info=(self.reference_arg_info
                                                     if self.reference_arg_info != tuple(br.arg_info) else ()))
                results.append(br)
            elif out.status == "timeout":
                results.append(BuildResult(None, (), MeasureErrorNo.BUILD_TIMEOUT,
                                           f"build took more than {self.timeout} s and was killed", out.seconds))
            elif out.status == "died":
                results.append(BuildResult(None, (), MeasureErrorNo.COMPILE_HOST,
                                           f"the build process died ({signal_name(out.value)})", out.seconds))
            else:
                results.append(BuildResult(None, (), MeasureErrorNo.COMPILE_HOST, str(out.value), out.seconds))
        return results

    def cleanup(self, build_results: Sequence[BuildResult]):
        for br in build_results:
            if br.filename and br.filename != self.reference:
                try:
                    os.remove(br.filename)
                except OSError:
                    pass

    def close(self):
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self.tmp_dir:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)


class LocalRunner(TimingFront):
    """Run each candidate in a separate worker process on this machine, as ``timing`` says
    (a :class:`~tilecraft.autotune.measure.TimingOptions`).

    The timing options may also be given by name, TVM's way (``LocalRunner(number=5,
    repeat=3, timeout=10, min_repeat_ms=0, enable_cpu_cache_flush=False)``; with ``timing``,
    they replace its fields), and read back as attributes (``runner.number``). Besides:
    ``cooldown_interval`` seconds of rest between candidates; ``max_memory_mb`` caps the run
    process's address space; ``run_func(inp, build_result, timing, ref_outputs)`` is what runs
    in the worker (tests inject fakes).

    >>> runner = LocalRunner(number=5, repeat=3)
    >>> runner.timing.number, runner.number
    (5, 5)
    """

    def __init__(self, timing: TimingOptions | None = None, *, cooldown_interval: float = 0.0,
                 run_func: Callable | str = "default", max_memory_mb: int | None = None, **options):
        self.timing = resolve_timing("LocalRunner", timing, options)
        self.cooldown_interval = cooldown_interval
        self.run_func = default_run_func if run_func == "default" else run_func
        self.n_parallel = 1
        self.max_memory_mb = max_memory_mb
        self.task = None
        self._task_seed: int | None = None     # drawn by set_task when timing.seed is None
        self._pool: WorkerPool | None = None
        self._prepared: dict = {}
        self._warned_no_reference = False

    def set_task(self, task):
        self.task = task
        self._task_seed = self.timing.seeded().seed
        self._prepared = {}

    def _task_timing(self) -> TimingOptions:
        """``timing`` with the task's seed (``timing`` may have been replaced since ``set_task``)."""
        return self.timing if self.timing.seed is not None else self.timing.replace(seed=self._task_seed)

    def _pool_(self) -> WorkerPool:
        if self._pool is None:
            limit = self.max_memory_mb * (1 << 20) if self.max_memory_mb else None
            self._pool = WorkerPool(1, initializer=limit_memory, initargs=(limit,))
        return self._pool

    def _reference_for(self, inp: MeasureInput, br: BuildResult, timing: TimingOptions):
        """The saved reference outputs for ``br``'s reference, computed once (long timeout)."""
        if not timing.check_correctness:
            return None
        if br.reference is None:
            if not self._warned_no_reference:
                self._warned_no_reference = True
                warnings.warn("no reference library: candidates' outputs are not checked", RuntimeWarning)
            return None
        key = (br.reference, timing.seed)
        if key not in self._prepared:
            target = str(inp.task.target) if inp.task.target is not None else "llvm"
            ref_info = br.reference_arg_info or br.arg_info
            out = self._pool_().map(prepare_reference, [(br.reference, ref_info, timing.seed, target, inp.task)],
                                    timeout=timing.reference_limit_s)[0]
            if out.status != "ok":
                warnings.warn(f"running the reference failed; outputs will not be checked: "
                              f"{out.status} {out.value}", RuntimeWarning)
            self._prepared[key] = out.value if out.status == "ok" else None
        return self._prepared[key]

    def run(self, measure_inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult]) -> list[MeasureResult]:
        results = []
        timing = self._task_timing()
        for k, (inp, br) in enumerate(zip(measure_inputs, build_results)):
            ref_outputs = self._reference_for(inp, br, timing)
            t0 = time.perf_counter()
            out = self._pool_().map(self.run_func, [(inp, br, timing, ref_outputs)], timing.timeout)[0]
            wall = time.perf_counter() - t0
            if out.status == "ok":
                costs, err, msg = out.value
                results.append(MeasureResult(tuple(costs), MeasureErrorNo(err), msg, wall, time.time()))
            elif out.status == "timeout":
                results.append(MeasureResult((), MeasureErrorNo.RUN_TIMEOUT,
                                             f"run took more than {timing.timeout:g} s and was killed", wall,
                                             time.time()))
            elif out.status == "died":
                results.append(MeasureResult((), MeasureErrorNo.RUNTIME_DEVICE,
                                             f"the run process died ({signal_name(out.value)})", wall, time.time()))
            else:
                results.append(MeasureResult((), MeasureErrorNo.RUNTIME_DEVICE, str(out.value), wall, time.time()))
            if self.cooldown_interval and k + 1 < len(measure_inputs):
                time.sleep(self.cooldown_interval)
        return results

    def close(self):
        if self._pool is not None:
            self._pool.close()
            self._pool = None

