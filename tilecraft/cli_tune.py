"""``tilecraft tune``: check everything a run needs before measuring anything, tune, then say
how the result compares with numpy on this machine and what to do next.

    tilecraft tune matmul 1024 1024 1024 float32
    # log: tuning_logs/matmul_1024_1024_1024_float32.jsonl (new)
    # ... progress bar; stops after --trials distinct configs, or --early-stopping trials
    #     without a better one ...
    # best: 515.67 GFLOP/s (4.164 ms), found at trial 146 of 210
    # verdict: 1.27x numpy (OpenBLAS) on this machine, 2 threads (re-measured now, in turns: ...)
    # next: tilecraft export tuning_logs/matmul_1024_1024_1024_float32.jsonl --out-dir tuned_ops

Bad input (a missing argument, a bad dtype, an unknown CPU in ``--target``, an unwritable
log, ``--target cuda`` without pycuda or a GPU) stops the command with one line before any work
(``CLIError``). Running the same command again resumes from the log, or says "already tuned"
when the log holds ``--trials`` distinct configs or ends with ``--early-stopping`` trials
without a better one.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
import time
import warnings

#: ``--early-stopping`` default: one plan of the XGBoost tuner (it retrains every 64 trials); with
#: xgb it applies from ``2 * --plan-size`` trials on, once the model has proposed a plan
DEFAULT_EARLY_STOPPING = 64
DEFAULT_LOG_DIR = "tuning_logs"


class CLIError(Exception):
    """Bad input to a ``tilecraft`` command: printed as one line, exit status 2."""


# numpy's equivalent of a ready template (inputs in the template's argument order → output):
# what the verdict line compares the tuned operator with, measured in the same run.
def _np_softmax(x):
    import numpy as np

    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _np_layer_norm(x, gamma, beta):
    import numpy as np

    mean = x.mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5) * gamma + beta


NUMPY_EQUIVALENTS = {
    "topi/matmul.llvm": ("A @ B", lambda a, b: a @ b),
    "topi/matmul_tensorized.llvm": ("A @ B", lambda a, b: a @ b),
    "topi/batch_matmul.llvm": ("A @ B", lambda a, b: a @ b),
    "topi/softmax.llvm": ("softmax(X)", _np_softmax),
    "topi/layer_norm.llvm": ("layer_norm(X, gamma, beta)", _np_layer_norm),
}


# ---------------------------------------------------------------------------------------------
# Checks made before any work.

def template_params(func) -> list[inspect.Parameter]:
    """The parameters of a template (the decorated function's, through ``functools.wraps``).

    >>> [p.name for p in template_params(TASK_TABLE["topi/matmul.llvm"])]
    ['M', 'N', 'K', 'dtype']
    """
    return list(inspect.signature(func).parameters.values())


def _type_name(p: inspect.Parameter) -> str | None:
    ann = p.annotation
    if ann is inspect.Parameter.empty:
        return None
    return ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann))


def usage_of(func) -> str:
    """A template's arguments as the CLI takes them.

    >>> usage_of(TASK_TABLE["topi/matmul.llvm"])
    'M:int N:int K:int [dtype:str=float32]'
    """
    parts = []
    for p in template_params(func):
        text = p.name + (f":{_type_name(p)}" if _type_name(p) else "")
        parts.append(text if p.default is inspect.Parameter.empty else f"[{text}={p.default}]")
    return " ".join(parts)


def _parse_value(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def bind_arguments(name: str, func, texts) -> tuple:
    """The template's arguments from the command line's words, checked against its signature:
    their number, declared types (``int``/``float``/``str`` annotations) and ``dtype``.

    >>> bind_arguments("matmul", TASK_TABLE["topi/matmul.llvm"], ["64", "64", "64"])
    (64, 64, 64)
    """
    from tilecraft.ir import dtype as dt

    params = template_params(func)
    required = [p for p in params if p.default is inspect.Parameter.empty]
    usage = f"tilecraft tune {name} {usage_of(func)}"
    if len(texts) < len(required):
        missing = ", ".join(p.name for p in required[len(texts):])
        raise CLIError(f"template {name} needs the argument(s) {missing} (usage: {usage})")
    if len(texts) > len(params):
        raise CLIError(f"template {name} takes at most {len(params)} argument(s), got {len(texts)} "
                       f"(usage: {usage})")
    values = []
    for p, text in zip(params, texts):
        kind = _type_name(p)
        conv = {"int": int, "float": float, "str": str}.get(kind or "", _parse_value)
        try:
            value = conv(text)
        except ValueError:
            raise CLIError(f"argument {p.name} of template {name} must be {kind}, got {text!r} "
                           f"(usage: {usage})") from None
        if p.name == "dtype":
            try:
                if "x" in str(value):
                    raise dt.DTypeError(f"vector dtype {value!r}")
                dt.parse(str(value))
            except dt.DTypeError:
                raise CLIError(f"argument dtype of template {name}: unsupported dtype {text!r} "
                               f"(expected one of {', '.join(dt.SCALAR_TYPES)})") from None
        values.append(value)
    return tuple(values)


def default_log_path(shown_name: str, args) -> str:
    """Where ``tilecraft tune`` logs without ``--log``.

    >>> default_log_path("matmul", (1024, 1024, 1024, "float32"))
    'tuning_logs/matmul_1024_1024_1024_float32.jsonl'
    """
    stem = "_".join([shown_name.replace("/", "_")] + [str(a) for a in args])
    return os.path.join(DEFAULT_LOG_DIR, re.sub(r"[^A-Za-z0-9_.-]+", "_", stem) + ".jsonl")


def check_log_writable(path: str) -> bool:
    """Make the log's folder and check the log can be appended to (a new log is not left
    behind); True when it exists already, with content. Raises ``CLIError`` otherwise.

    >>> check_log_writable("tuning_logs/matmul_64_64_64.jsonl")
    False
    """
    folder = os.path.dirname(path)
    try:
        if folder:
            os.makedirs(folder, exist_ok=True)
        existed = os.path.exists(path) and os.path.getsize(path) > 0
        if os.path.isdir(path):
            raise IsADirectoryError(f"{path!r} is a directory")
        with open(path, "a", encoding="utf-8"):
            pass
        if not existed and os.path.getsize(path) == 0:
            os.remove(path)                 # made again by the first record
    except OSError as err:
        raise CLIError(f"cannot write the log {path}: {err.strerror or err}") from None
    return existed


def check_cuda_locally(args) -> None:
    """``--target cuda`` builds with nvcc here and, without ``--tracker``, measures on this
    machine's GPU through pycuda: check those exist."""
    from tilecraft.codegen.cuda_compile import find_nvcc
    from tilecraft.runtime.device import cuda

    if find_nvcc() is None:
        raise CLIError("--target cuda compiles with nvcc, which was not found (PATH, CUDA_HOME, /usr/local/cuda)")
    if args.tracker:
        return
    pool = "or measure on a GPU machine of a device pool with --tracker HOST:PORT --key KEY (docs/rpc.md)"
    if importlib.util.find_spec("pycuda") is None:
        raise CLIError(f"--target cuda measures on this machine's GPU through pycuda, which is not installed: "
                       f"python3 -m pip install -e '.[cuda]', {pool}")
    if not cuda(0).exist:
        raise CLIError(f"--target cuda measures on this machine's GPU, but no NVIDIA GPU was found here; {pool}")


# ---------------------------------------------------------------------------------------------
# The verdict: the tuned operator and numpy's equivalent, measured now, in turns.

def blas_name() -> str:
    """The BLAS numpy was built with, as a reader knows it.

    >>> blas_name()
    'OpenBLAS'
    """
    import numpy as np

    try:
        name = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:
        return "BLAS unknown"
    low = name.lower()
    for key, shown in (("openblas", "OpenBLAS"), ("mkl", "MKL"), ("accelerate", "Accelerate"), ("blis", "BLIS")):
        if key in low:
            return shown
    return name


def blas_threads() -> int:
    """How many threads numpy's BLAS uses: its environment variable, else one per usable core.

    >>> blas_threads()      # OPENBLAS_NUM_THREADS=1 → 1
    2
    """
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "")
        if value.split(",")[0].strip().isdigit():
            return int(value.split(",")[0])
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def timing_child() -> None:
    """A process that times one side of the verdict: ``tilecraft LIBRARY ARG_INFO SEED`` (the
    exported best config) or ``numpy TEMPLATE ARG_INFO SEED`` (its numpy equivalent). It answers
    each line ``N`` on stdin with the seconds per call of N calls; the first line it writes is
    the seconds of one call (and, for tilecraft, the largest error against numpy). Each side
    runs in its own process, as the tuner's runner does, so neither's thread pool (libgomp,
    OpenBLAS) competes with the other's or with the tuner's."""
    import json
    import signal

    import numpy as np

    from tilecraft.autotune.local import random_inputs

    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C is the parent's: it closes our stdin
    mode, what, info, seed = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
    arrays = random_inputs([(tuple(shape), dtype, out) for shape, dtype, out in info], seed)
    inputs = [a for a, (_, _, out) in zip(arrays, info) if not out]
    if mode == "tilecraft":
        import tilecraft

        func = tilecraft.runtime.load_module(what)
        expected = NUMPY_EQUIVALENTS[sys.argv[5]][1](*inputs)
        func(*arrays)
        output = next(a for a, (_, _, out) in zip(arrays, info) if out)
        error = float(np.max(np.abs(output - expected))) / (float(np.max(np.abs(expected))) or 1.0)

        def run(n):
            return func.time_evaluator(func.entry_name, tilecraft.cpu(0), number=n)(*arrays).mean
    else:
        reference, error = NUMPY_EQUIVALENTS[what][1], 0.0

        def run(n):
            t0 = time.perf_counter()
            for _ in range(n):
                reference(*inputs)
            return (time.perf_counter() - t0) / n
    run(1)
    print(run(1), error, flush=True)
    for line in sys.stdin:
        print(run(int(line)), flush=True)


def chosen_config(tuner):
    """The config a user of the run's log gets: the fastest re-measured one (``tune(verify_top=)``)
    where any was re-measured without error, as ``apply_history_best`` and ``export`` choose,
    else the fastest tuning measurement.

    >>> chosen_config(tuner).index
    """
    verified = [(inp, res) for inp, res in getattr(tuner, "verified", ()) if res.ok]
    if verified:
        return min(verified, key=lambda p: p[1].mean_cost)[0].config
    return tuner.best_config


def timing_child_env(package_root: str, environ=os.environ) -> dict:
    """The environment of the verdict's timing processes. They import this very tilecraft
    (``package_root`` first on ``PYTHONPATH``; they start in an empty temporary folder), and
    OpenBLAS's idle threads sleep at once (``OPENBLAS_THREAD_TIMEOUT=4``, its shortest spin)
    unless the user chose otherwise: by default they spin for a while after each call, and on a
    2-core machine the spinning threads of one side's process halved the other side's speed
    (the tuned GEMM timed 8.4 ms beside an idle numpy process, 4.9 ms alone). Neither side's
    speed while it runs changes.

    >>> timing_child_env("/src", {"PYTHONPATH": "/x"})["PYTHONPATH"] == os.pathsep.join(["/src", "/x"])
    True
    """
    env = dict(environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, environ.get("PYTHONPATH")])))
    env.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    return env


def compare_with_numpy(task, config, rounds: int = 5, seconds_each: float = 0.05) -> dict:
    """Export ``config`` of ``task``, then time it and numpy's equivalent on the same random
    inputs, each in its own process, in turns (``rounds`` × about ``seconds_each`` each).
    Returns medians in seconds per call, ``{"tilecraft": s, "numpy": s, "max_error": e}``, where
    ``max_error`` is the largest difference from numpy relative to numpy's largest output.

    >>> compare_with_numpy(task, tuner.best_config)["numpy"]
    """
    import json
    import subprocess
    import tempfile

    import numpy as np

    import tilecraft
    from tilecraft.autotune.local import tensor_arg_info

    sch, tensors = task.instantiate(config)
    mod = tilecraft.build(sch, tensors, target=str(task.target))
    info = json.dumps([[list(shape), dtype, out] for shape, dtype, out in tensor_arg_info(tensors)])
    seed = str(int(time.time()) & 0xFFFF)
    child = [sys.executable, "-c", "from tilecraft.cli_tune import timing_child; timing_child()"]
    with tempfile.TemporaryDirectory(prefix="tilecraft-verdict-") as tmp:
        lib = mod.export_library(os.path.join(tmp, "best.so"))
        sides = {"tilecraft": child + ["tilecraft", lib, info, seed, task.name],
                 "numpy": child + ["numpy", task.name, info, seed]}
        env = timing_child_env(os.path.dirname(os.path.dirname(tilecraft.__file__)))
        procs = {k: subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=tmp) for k, cmd in sides.items()}
        try:
            number, times, error = {}, {k: [] for k in procs}, 0.0
            for k, p in procs.items():
                first = p.stdout.readline().split()
                if not first:
                    raise RuntimeError(f"the {k} timing process failed (exit status {p.wait()})")
                number[k] = max(1, int(seconds_each / max(float(first[0]), 1e-7)))
                error = max(error, float(first[1]))
            for _ in range(rounds):
                for k, p in procs.items():
                    p.stdin.write(f"{number[k]}\n")
                    p.stdin.flush()
                    times[k].append(float(p.stdout.readline()))
        finally:
            for p in procs.values():
                p.stdin.close()
                p.wait()
    return {"tilecraft": float(np.median(times["tilecraft"])), "numpy": float(np.median(times["numpy"])),
            "max_error": error}


def print_verdict(task, config) -> None:
    """The verdict line: the tuned config against numpy, both measured now.

    >>> print_verdict(task, tuner.best_config)   # verdict: 1.42× numpy (OpenBLAS) on this machine, 2 threads: ...
    """
    from tilecraft.runtime.threads import get_num_threads

    equivalent = NUMPY_EQUIVALENTS.get(task.name)
    if equivalent is None or task.target is None or task.target.kind != "llvm":
        print(f"verdict: no numpy equivalent of {task.name} to compare with")
        return
    expr = equivalent[0]
    m = compare_with_numpy(task, config)
    flop = task.flop or 1.0
    ours, theirs = flop / m["tilecraft"] / 1e9, flop / m["numpy"] / 1e9
    ours_threads, np_threads = get_num_threads(), blas_threads()
    threads = (f"{ours_threads} threads" if ours_threads == np_threads
               else f"{ours_threads} threads (numpy: {np_threads})")
    print(f"verdict: {m['numpy'] / m['tilecraft']:.2f}× numpy ({blas_name()}) on this machine, {threads}: "
          f"{ours:.1f} vs {theirs:.1f} GFLOP/s for {expr}, both measured now, in turns (median of 5)")
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load > 0.5 * cores:
        print(f"note: the machine is busy (load {load:.1f} on {cores} cores): parallel code stalls whenever one "
              "of its threads waits for a core, so these timings say more about the load than the code")
    if m["max_error"] > 1e-3:
        print(f"warning: the tuned operator differs from numpy by {m['max_error']:.2g} (relative to the largest "
              "output); please report this")


# ---------------------------------------------------------------------------------------------
# The command.

def min_trials_before_stopping(args) -> int:
    """Early stopping waits until the xgb tuner's cost model has proposed one plan of its own
    (its first ``plan_size`` trials are random): ``2 * --plan-size`` trials in all.

    >>> min_trials_before_stopping(argparse.Namespace(tuner="xgb", plan_size=64))
    128
    """
    return 2 * args.plan_size if args.tuner == "xgb" else 0


def _make_tuner(args, task):
    import tilecraft.autotune as autotune

    if args.tuner == "xgb":
        return autotune.tuner.XGBTuner(task, plan_size=args.plan_size, feature_type=args.feature_type,
                                       seed=args.seed)
    if args.tuner == "random":
        return autotune.tuner.RandomTuner(task, seed=args.seed)
    return autotune.tuner.GridSearchTuner(task)


#: the command-line flag of each timing option ``tilecraft tune`` sets
TIMING_FLAGS = {"number": "--number", "repeat": "--repeat", "min_repeat_ms": "--min-repeat-ms",
                "timeout": "--run-timeout", "check_correctness": "--no-check",
                "enable_cpu_cache_flush": "--flush-cache", "max_timing_s": "--max-timing-s"}


def timing_options(args):
    """The ``TimingOptions`` of ``tilecraft tune``'s flags, checked before any work: a value out
    of range is a ``CLIError`` naming the flag (``--number must be an integer from 1 to ...``).

    >>> timing_options(build_parser().parse_args(["tune", "matmul", "--number", "5"])).number
    5
    """
    from tilecraft.autotune.measure import OptionError, TimingOptions

    try:
        return TimingOptions(number=args.number, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms,
                             timeout=args.run_timeout, check_correctness=not args.no_check,
                             enable_cpu_cache_flush=args.flush_cache, max_timing_s=args.max_timing_s)
    except OptionError as err:
        raise CLIError(f"{TIMING_FLAGS.get(err.option, err.option)} must be {err.allowed}, got {err.got!r}") from None


def _measure_option(args, timing):
    import tilecraft.autotune as autotune

    if args.tracker:
        from tilecraft.cli import rpc_runner
        runner = rpc_runner(args, timing)
    else:
        runner = autotune.LocalRunner(timing, max_memory_mb=args.max_memory_mb)
    return autotune.measure_option(
        builder=autotune.LocalBuilder(timeout=args.build_timeout, n_parallel=args.n_parallel), runner=runner)


def _count(callback_list):
    """A callback that counts the trials of this run (for the interruption message)."""
    def count(tuner, inputs, results):
        count.n += len(results)
    count.n = 0
    callback_list.append(count)
    return count


def cmd_tune(args) -> int:
    import tilecraft.autotune as autotune
    from tilecraft.cli import resolve_template
    from tilecraft.target import Target, TargetError

    try:
        target = Target(args.target)
    except TargetError as err:
        raise CLIError(str(err)) from None
    name = resolve_template(args.template, args.module, target.kind)
    func = autotune.task.TASK_TABLE[name]
    template_args = bind_arguments(args.template, func, args.args)
    if args.trials < 1:
        raise CLIError(f"--trials must be at least 1, got {args.trials}")
    timing = timing_options(args)
    if target.kind == "llvm":
        from tilecraft.codegen.llvm_target import check_target
        try:
            check_target(target)
        except TargetError as err:
            raise CLIError(str(err)) from None
    else:
        check_cuda_locally(args)
    pool_errors = ()                    # what stops tuning on a device pool that cannot be used
    if args.tracker:
        from tilecraft.cli import pool_options, tracker_address
        from tilecraft.rpc import PoolUnavailableError
        tracker_address(args)
        pool_options(args)
        pool_errors = (PoolUnavailableError,)
    log = args.log or default_log_path(args.template if not args.module else name, template_args)
    existed = check_log_writable(log)
    for extra in args.transfer or ():
        if not os.path.isfile(extra):
            raise CLIError(f"--transfer {extra}: no such log")
    try:
        task = autotune.task.create(name, args=template_args, target=str(target))
    except Exception as err:           # the template rejects these arguments (or has a bug): one line
        raise CLIError(f"cannot create the task {name}{list(template_args)} on {target}: "
                       f"{type(err).__name__}: {err}") from None
    print(f"task {name}{list(template_args)} on {target}: {len(task.config_space)} configs, "
          f"{task.flop / 1e9:.3f} GFLOP per run")
    print(f"log: {log}" + ("" if existed else " (new)"))
    if args.verbose:
        print(task.config_space)

    early = args.early_stopping if args.early_stopping else None
    history = autotune.record.load_from_file(log) if existed else []
    # a model-free tuner reads the log first: an "already tuned" answer trains no model
    seen = autotune.tuner.GridSearchTuner(task)
    done = seen.load_history(history)
    if done >= args.trials or (done >= min_trials_before_stopping(args) and early
                               and seen.trials_since_best >= early):
        why = (f"--trials {args.trials} reached" if done >= args.trials else
               f"no better config in the last {seen.trials_since_best}, --early-stopping {early}")
        print(f"already tuned: {done} trials in {log}, best {seen.best_flops / 1e9:.2f} GFLOP/s ({why}); "
              "to measure more, raise --trials" + ("" if done >= args.trials else " or --early-stopping"))
        return _finish(args, task, seen, log, done)
    tuner = _make_tuner(args, task)
    if done:
        with warnings.catch_warnings():       # the same records: their warnings were shown above
            warnings.simplefilter("ignore")
            tuner.load_history(history)
        print(f"resuming: {done} trials in {log} already (best {tuner.best_flops / 1e9:.2f} GFLOP/s)")
    for extra in args.transfer or ():
        tuner.load_history(autotune.record.load_from_file(extra))

    remaining = args.trials - done
    callbacks = [autotune.callback.log_to_file(log)]
    counter = _count(callbacks)
    if not args.quiet:
        callbacks.append(autotune.callback.progress_bar(remaining, prefix=name))
    started = time.perf_counter()
    try:
        option = _measure_option(args, timing)
        if not done:      # the untuned template's own configuration first (where it is a point of the
            # space): a tuning run then never ends slower than no tuning at all, as tune_tasks does
            from tilecraft.autotune.model_tuning import measure_fallback
            remaining -= measure_fallback(tuner, task, option, callbacks)
        tuner.tune(remaining, option, early_stopping=early, callbacks=callbacks,
                   min_trials=min_trials_before_stopping(args), verify_top=getattr(args, "verify", 0),
                   verify_rounds=getattr(args, "verify_rounds", 1))
    except KeyboardInterrupt:
        print(f"tilecraft tune: interrupted; the {counter.n} trial(s) measured in this run are in {log}: "
              "run the same command to go on from there", file=sys.stderr)
        return 130
    except pool_errors as err:
        print(f"tilecraft tune: error: {err} ({counter.n} trial(s) measured in this run, in {log})",
              file=sys.stderr)
        return 1
    wall = time.perf_counter() - started
    stop = (f"; stopped early: no better config in the last {tuner.trials_since_best} (--early-stopping {early})"
            if tuner.stopped_early else "")
    print(f"measured {counter.n} configs in {wall:.0f} s, {tuner.error_count} errors{stop}")
    return _finish(args, task, tuner, log, done + counter.n)


def _finish(args, task, tuner, log: str, total: int) -> int:
    if tuner.best_config is None:
        print(f"no configuration ran successfully; the errors: tilecraft log summary {log}")
        return 1
    inp, res = tuner.best_measure_pair
    print(f"best: {tuner.best_flops / 1e9:.2f} GFLOP/s ({res.mean_cost * 1e3:.3f} ms per run) after {total} "
          "trials, as measured while tuning")
    print(f"best config: {tuner.best_config}")
    chosen = chosen_config(tuner)
    verified = [(i, r) for i, r in getattr(tuner, "verified", ()) if r.ok]
    if verified:
        vr = min(r.mean_cost for _, r in verified)
        rounds = max(len(r.costs) for _, r in verified)
        print(f"re-measured alone, the {len(tuner.verified)} fastest ({rounds} round(s)): best "
              f"{task.flop / vr / 1e9:.2f} GFLOP/s (config {chosen.index}); export and apply_history_best use "
              "that one")
    if not args.no_verdict:
        print_verdict(task, chosen)
    print(f"next: tilecraft export {log} --out-dir tuned_ops   "
          "(a shared library + C header of the best config; or use the log with autotune.apply_history_best)")
    return 0
