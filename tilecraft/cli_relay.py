"""``tilecraft compile`` and ``tilecraft run``: a whole model in one command each (TVMC's workflow).

    tilecraft compile model.onnx --shape input=1,3,224,224 -o model.so
    tilecraft compile model.onnx --shape input=1,3,224,224 --tune --trials 200 -o model.so   # tunes into model.jsonl
    tilecraft compile model.onnx --tuning-log model.jsonl -o model.so
    tilecraft compile model.onnx --target cuda --mixed-precision --tuning-log gpu.jsonl -o model.tcuda   # float16
    tilecraft run model.so --inputs in.npz --output out.npz --benchmark

``compile`` imports an ONNX model (``relay.frontend.from_onnx``), optionally tunes its tasks
under one trial budget (``autotune.tune_tasks``, resumable), builds it inside
``apply_history_best`` of the log, and writes one library (kernels, graph, weights). ``run``
loads such a library without the compiler, feeds it the arrays of an ``.npz`` file by input
name (or random ones), writes its outputs (``output_0``, ``output_1``, ...) to an ``.npz`` and
with ``--benchmark`` times it, with ``--profile N`` lists the N slowest kernels. Bad input is one line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import os
import time

from .cli_tune import CLIError


def add_commands(sub, formatter_class=argparse.HelpFormatter) -> None:
    """Add ``compile`` and ``run`` to the ``tilecraft`` command's subparsers."""
    c = sub.add_parser("compile", help="compile an ONNX model into one library (kernels, graph, weights)",
                       formatter_class=formatter_class,
                       description="Import an ONNX model, optionally tune it, build it for this CPU and write "
                                   "one shared library that `tilecraft run` or tilecraft.runtime.load_module "
                                   "loads.")
    c.add_argument("model", help="an ONNX file")
    c.add_argument("-o", "--output", "--out", dest="output", required=True, help="the library to write (.so)")
    c.add_argument("--shape", action="append", metavar="NAME=D0,D1,...",
                   help="the shape of an input with dynamic dimensions, e.g. input=1,3,224,224 (repeatable)")
    c.add_argument("--dtype", default="float32", help="dtype of inputs the model leaves unspecified")
    c.add_argument("--target", default="llvm",
                   help="llvm (this CPU), 'llvm -mcpu=NAME', or cuda ('cuda -arch=sm_90': a CUDA archive; "
                        "-o NAME.so: a library with the model's C API)")
    c.add_argument("--opt-level", type=int, default=3, help="PassContext opt_level of the build")
    c.add_argument("--mixed-precision", action="store_true",
                   help="compute in float16 (relay.transform.ToMixedPrecision; inputs and outputs stay float32)")
    c.add_argument("--tuning-log", metavar="LOG", help="build with the best configs of this tuning log")
    c.add_argument("--tune", action="store_true",
                   help="tune the model's tasks first (into --tuning-log, default: OUTPUT with .jsonl); "
                        "running it again resumes")
    c.add_argument("--trials", type=int, default=200, help="with --tune: trials for all tasks together")
    c.add_argument("--early-stopping", type=int, default=None, metavar="N",
                   help="with --tune: a task stops after N trials without a better config")
    c.add_argument("--tuner", choices=("xgb", "ga", "random", "gridsearch"), default="xgb",
                   help="with --tune: search strategy")
    c.set_defaults(func=cmd_compile)

    r = sub.add_parser("run", help="run a compiled model on inputs from an .npz file",
                       formatter_class=formatter_class,
                       description="Load a library written by `tilecraft compile`, run it once on the inputs "
                                   "and write or print its outputs; --benchmark times it.")
    r.add_argument("library", help="a library written by `tilecraft compile` (or lib.export_library)")
    r.add_argument("--inputs", metavar="NPZ", help="the inputs by name (numpy .npz); without it: --fill")
    r.add_argument("--fill", choices=("random", "zeros", "ones"), default=None,
                   help="inputs not in --inputs: fill them so (default: an error names them)")
    r.add_argument("--output", metavar="NPZ", help="write the outputs here as output_0, output_1, ...")
    r.add_argument("--benchmark", action="store_true", help="time the model and print mean/median/min/max")
    r.add_argument("--repeat", type=int, default=10, help="with --benchmark: timings")
    r.add_argument("--number", type=int, default=5, help="with --benchmark: runs per timing")
    r.add_argument("--profile", type=int, default=0, metavar="N",
                   help="print the N slowest kernels (median time per run over --repeat runs)")
    r.set_defaults(func=cmd_run)


def parse_shapes(specs) -> dict:
    """``["x=1,3,8,8"]`` → ``{"x": (1, 3, 8, 8)}``."""
    shapes = {}
    for spec in specs:
        name, eq, dims = spec.partition("=")
        try:
            if not eq or not name:
                raise ValueError
            shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
            if any(d < 1 for d in shape):
                raise ValueError
        except ValueError:
            raise CLIError(f"--shape {spec!r}: expected NAME=D0,D1,... with positive integers, "
                           "e.g. input=1,3,224,224") from None
        shapes[name] = shape
    return shapes


class _Answers:
    """Counts, while the model builds, which workloads got a tuned configuration."""

    def __init__(self):
        from tilecraft.autotune.dispatch import DispatchContext

        class Spy(DispatchContext):
            def _query_inside(self, target, workload):
                return None

            def query(spy, target, workload):
                cfg = DispatchContext.query(spy, target, workload)
                if workload is not None:
                    self.tuned[workload] = not cfg.is_fallback
                return cfg
        self.tuned: dict = {}
        self.context = Spy()


def cmd_compile(args) -> int:
    from tilecraft import autotune, relay
    from tilecraft.autotune.dispatch import fallback_context
    from tilecraft.target import Target, TargetError
    from tilecraft.transform import PassContext

    if not os.path.isfile(args.model):
        raise CLIError(f"{args.model}: no such file")
    try:
        target = Target(args.target)
    except TargetError as err:
        raise CLIError(f"--target: {err}") from None
    if args.trials < 1:
        raise CLIError(f"--trials must be at least 1, got {args.trials}")
    shapes = parse_shapes(args.shape or [])
    log = args.tuning_log or (os.path.splitext(args.output)[0] + ".jsonl" if args.tune else None)
    if log and not args.tune and not os.path.isfile(log):
        raise CLIError(f"--tuning-log {log}: no such file (add --tune to write it)")
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        raise CLIError(f"-o {args.output}: the directory {out_dir} does not exist")
    try:
        import onnx
    except ImportError:
        raise CLIError("compile needs the onnx package: pip install 'tilecraft[relay]'") from None
    started = time.perf_counter()
    try:
        model = onnx.load(args.model)
    except Exception as err:
        raise CLIError(f"{args.model}: not an ONNX model ({type(err).__name__}: {str(err)[:200]})") from None
    try:
        mod, params = relay.frontend.from_onnx(model, shape=shapes or None, dtype=args.dtype)
        if args.mixed_precision:
            mod = relay.transform.ToMixedPrecision("float16")(mod)
        if args.tune:
            tasks = autotune.task.extract_from_program(mod["main"], target=str(target), params=params)
            print(f"{len(tasks)} tuning tasks; {args.trials} trials in all, log: {log}")
            with PassContext(opt_level=args.opt_level):
                autotune.tune_tasks(tasks, args.trials, log, tuner=args.tuner, early_stopping=args.early_stopping)
        answers = _Answers()
        fallback = fallback_context()
        silent, fallback.silent = fallback.silent, True     # one summary line below instead
        try:
            with PassContext(opt_level=args.opt_level):
                if log:
                    with autotune.apply_history_best(log), answers.context:
                        lib = relay.build(mod, target=str(target), params=params)
                else:
                    with answers.context:
                        lib = relay.build(mod, target=str(target), params=params)
        finally:
            fallback.silent = silent
    except relay.RelayError as err:
        raise CLIError(f"{args.model}: {err}") from None
    path = lib.export_library(args.output)
    kernels = sum(1 for n in lib.graph["nodes"] if n["op"] == "kernel")
    tuned = sum(answers.tuned.values())
    print(f"compiled {args.model} in {time.perf_counter() - started:.1f} s: {kernels} kernel calls, "
          f"{len(lib.params)} weights; tuned configs for {tuned} of {len(answers.tuned)} tunable workloads"
          + (f" (from {log})" if log else " (no --tuning-log: fallback schedules)"))
    print(lib.memory_summary())
    print(f"wrote {path}")
    return 0


def _load_inputs(args, ex) -> dict:
    import numpy as np
    feed = {}
    if args.inputs:
        if not os.path.isfile(args.inputs):
            raise CLIError(f"--inputs {args.inputs}: no such file")
        try:
            with np.load(args.inputs, allow_pickle=False) as data:
                feed = {k: data[k] for k in data.files}
        except Exception as err:
            raise CLIError(f"--inputs {args.inputs}: not a numpy .npz file ({type(err).__name__}: {err})") from None
    names = list(ex.input_index)
    unknown = sorted(set(feed) - set(names))
    if unknown:
        raise CLIError(f"--inputs {args.inputs}: the model has no input {', '.join(map(repr, unknown))}; "
                       f"its inputs: {', '.join(names)}")
    missing = [n for n in names if n not in feed]
    if missing and not args.fill:
        raise CLIError(f"no value for input {', '.join(map(repr, missing))} (give it in --inputs, or --fill "
                       "random|zeros|ones)")
    rng = np.random.default_rng(0)
    for name in missing:
        node = ex.nodes[ex.input_index[name]]
        shape, dtype = tuple(node["shape"]), np.dtype(node["dtype"])
        if args.fill == "random":
            value = (rng.uniform(-1, 1, shape) if dtype.kind == "f" else rng.integers(0, 2, shape)).astype(dtype)
        else:
            value = (np.zeros if args.fill == "zeros" else np.ones)(shape, dtype)
        feed[name] = value
    return feed


def cmd_run(args) -> int:
    import numpy as np

    from tilecraft.runtime import load_module
    from tilecraft.runtime.graph_executor import GraphExecutorError, GraphExecutorFactory

    if not os.path.isfile(args.library):
        raise CLIError(f"{args.library}: no such file")
    try:
        lib = load_module(args.library)
    except (ValueError, OSError) as err:
        raise CLIError(str(err)) from None
    if not isinstance(lib, GraphExecutorFactory):
        raise CLIError(f"{args.library}: a library of single operators, not a model (write one with "
                       "`tilecraft compile` or lib.export_library)")
    try:
        ex = lib[lib.mod_name]()
    except Exception as err:     # noqa: BLE001 -- a CUDA model where no GPU, driver or pycuda is
        if not lib.graph or getattr(lib.module, "type_key", "") != "cuda":
            raise
        raise CLIError(f"{args.library}: a CUDA model, which cannot run here: {err}") from None
    feed = _load_inputs(args, ex)
    try:
        ex.set_input(**feed)
    except GraphExecutorError as err:
        raise CLIError(f"--inputs {args.inputs}: {err}") from None
    ex.run()
    outputs = {f"output_{k}": ex.get_output(k).numpy() for k in range(ex.get_num_outputs())}
    if args.output:
        np.savez(args.output, **outputs)
        print(f"wrote {', '.join(outputs)} to {args.output}")
    else:
        for name, value in outputs.items():
            flat = value.reshape(-1)
            print(f"{name}: {value.dtype}{list(value.shape)} {np.array2string(flat[:8], precision=5)}"
                  + (" ..." if flat.size > 8 else ""))
    if args.benchmark:
        res = ex.benchmark(repeat=args.repeat, number=args.number)
        print(f"per run: mean {res.mean * 1e3:.3f} ms, median {res.median * 1e3:.3f} ms, "
              f"min {res.min * 1e3:.3f} ms, max {res.max * 1e3:.3f} ms ({args.repeat} x {args.number} runs)")
    if args.profile > 0:
        rows = ex.profile(args.repeat)
        total = sum(ms for _, _, ms in rows)
        print(f"kernels (median of {args.repeat} runs, {total:.3f} ms in all), the slowest first:")
        for name, calls, ms in rows[:args.profile]:
            print(f"  {ms:9.3f} ms {100 * ms / total:5.1f}%  {calls}x  {name}")
    return 0
