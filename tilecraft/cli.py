"""The ``tilecraft`` command.

    tilecraft tune matmul 1024 1024 1024 float32          # logs to tuning_logs/matmul_1024_1024_1024_float32.jsonl
    tilecraft tune my_conv --module my_templates.py 1 64 56 56 --tuner random
    tilecraft templates                                   # every template, its arguments and defaults
    tilecraft log summary tuning_logs/matmul_1024_1024_1024_float32.jsonl
    tilecraft log plot tuning_logs/matmul_1024_1024_1024_float32.jsonl --out curve.png
    tilecraft export tuning_logs/matmul_1024_1024_1024_float32.jsonl --out-dir tuned_ops
    tilecraft compile model.onnx --shape input=1,3,224,224 -o model.so   # a whole model (cli_relay.py)
    tilecraft run model.so --inputs in.npz --output out.npz --benchmark

``tune`` takes a template from ``tilecraft.topi`` (``matmul``, ``batch_matmul``, ``conv2d``,
``softmax``, or a full registered name like ``topi/matmul.llvm``) or from a user's module
(``--module path.py`` or ``--module package.module``), the template's arguments, and tunes it on
the local machine (``tilecraft/cli_tune.py``). Bad input is one line on stderr and exit status 2,
before any work; a device pool (``--tracker``) that cannot be used (it stays unreachable or
refuses the secret) stops tuning with one line and status 1; warnings are one line each; Ctrl-C
is one line and status 130.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
import warnings

from .cli_tune import DEFAULT_EARLY_STOPPING, CLIError, cmd_tune, usage_of

TOPI_MODULES = ("tilecraft.topi.matmul", "tilecraft.topi.batch_matmul", "tilecraft.topi.conv2d",
                "tilecraft.topi.conv2d_cuda", "tilecraft.topi.softmax", "tilecraft.topi.layer_norm",
                "tilecraft.topi.pooling", "tilecraft.topi.sparse", "tilecraft.topi.matmul_microkernel",
                "tilecraft.topi.conv2d_microkernel", "tilecraft.topi.tensorcore_template",
                "tilecraft.topi.tensorcore_nn", "tilecraft.topi.conv2d_nhwc_tensorcore")
TOPI_TEMPLATES = {
    "matmul": ("tilecraft.topi.matmul", "topi/matmul.{kind}"),
    "batch_matmul": ("tilecraft.topi.batch_matmul", "topi/batch_matmul.{kind}"),
    "conv2d": ("tilecraft.topi.conv2d", "topi/conv2d_nchw.{kind}"),
    "conv2d_nchw": ("tilecraft.topi.conv2d", "topi/conv2d_nchw.{kind}"),
    "softmax": ("tilecraft.topi.softmax", "topi/softmax.{kind}"),
    "matmul_tensorized": ("tilecraft.topi.matmul_microkernel", "topi/matmul_tensorized.{kind}"),
    "dense_int8": ("tilecraft.topi.matmul_microkernel", "topi/dense_int8.{kind}"),
    "conv2d_tensorized": ("tilecraft.topi.conv2d_microkernel", "topi/conv2d_nchwc_tensorized.{kind}"),
    "conv2d_int8": ("tilecraft.topi.conv2d_microkernel", "topi/conv2d_nchwc_int8.{kind}"),
    "layer_norm": ("tilecraft.topi.layer_norm", "topi/layer_norm.{kind}"),
    "global_pool": ("tilecraft.topi.pooling", "topi/global_pool.{kind}"),
    "spmv": ("tilecraft.topi.sparse", "topi/spmv.{kind}"),
    "spmm": ("tilecraft.topi.sparse", "topi/spmm.{kind}"),
    "sddmm": ("tilecraft.topi.sparse_ops", "topi/sddmm.{kind}"),
    "segment_sum": ("tilecraft.topi.sparse_ops", "topi/segment_sum.{kind}"),
    "embedding_bag": ("tilecraft.topi.sparse_ops", "topi/embedding_bag.{kind}"),
    "segment_sum_pieces": ("tilecraft.topi.sparse_ops_cuda", "topi/segment_sum_pieces.{kind}"),     # cuda only
    "embedding_bag_pieces": ("tilecraft.topi.sparse_ops_cuda", "topi/embedding_bag_pieces.{kind}"),
    "matmul_tensorcore": ("tilecraft.topi.tensorcore_template", "topi/matmul_tensorcore.{kind}"),
    "matmul_wgmma": ("tilecraft.topi.tensorcore_template", "topi/matmul_wgmma.{kind}"),              # cuda, sm_90
    "spmv_pieces": ("tilecraft.topi.sparse_cuda", "topi/spmv_pieces.{kind}"),     # cuda only
    "spmm_pieces": ("tilecraft.topi.sparse_cuda", "topi/spmm_pieces.{kind}"),
    "batch_matmul_tensorcore": ("tilecraft.topi.tensorcore_nn", "topi/batch_matmul_tensorcore.{kind}"),
    "dense_tensorcore": ("tilecraft.topi.tensorcore_nn", "topi/dense_tensorcore.{kind}"),
    "conv2d_nhwc_tensorcore": ("tilecraft.topi.conv2d_nhwc_tensorcore", "topi/conv2d_nhwc_tensorcore.{kind}"),
}


def _import_user_module(spec: str):
    if spec.endswith(".py") or os.path.sep in spec:
        path = os.path.abspath(spec)
        name = os.path.splitext(os.path.basename(path))[0]
        # importable by name, so the build workers (fresh processes) can import it too
        sys.path.insert(0, os.path.dirname(path))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(path),
                                                                 os.environ.get("PYTHONPATH")]))
        return importlib.import_module(name)
    return importlib.import_module(spec)


def resolve_template(name: str, module: str | None, target_kind: str) -> str:
    """Import what defines template ``name`` and return its registered name."""
    from tilecraft.autotune.task import TASK_TABLE

    if module:
        try:
            _import_user_module(module)
        except Exception as err:
            raise CLIError(f"--module {module}: cannot import it ({type(err).__name__}: {err})") from None
    elif name in TOPI_TEMPLATES:
        mod, pattern = TOPI_TEMPLATES[name]
        importlib.import_module(mod)
        name = pattern.format(kind=target_kind)
    elif name.startswith("topi/"):
        base = name.split("/", 1)[1].split(".")[0]
        base = "conv2d" if base.startswith("conv2d") else base
        if base in TOPI_TEMPLATES:
            importlib.import_module(TOPI_TEMPLATES[base][0])
    if name not in TASK_TABLE:
        known = ", ".join(sorted(TASK_TABLE)) or "none"
        raise CLIError(f"no template {name!r} (registered: {known}; topi shortcuts: "
                       f"{', '.join(TOPI_TEMPLATES)}; `tilecraft templates` lists them with their arguments)")
    return name


def tracker_address(args) -> tuple[str, int, bytes]:
    """``(host, port, secret)`` of ``--tracker HOST:PORT --key KEY [--key-file F]``, checked
    before any work (``CLIError`` otherwise).

    >>> tracker_address(build_parser().parse_args(["tune", "matmul", "--tracker", "127.0.0.1:9190", "--key", "k"]))
    ('127.0.0.1', 9190, b'...')
    """
    from tilecraft.rpc.protocol import load_secret
    host, sep, port = args.tracker.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise CLIError(f"--tracker expects HOST:PORT (e.g. 127.0.0.1:9190), got {args.tracker!r}")
    if not args.key:
        raise CLIError("--tracker needs --key, the device key the servers registered with "
                       "(e.g. llvm:znver3; `tilecraft rpc status --tracker HOST:PORT` lists them)")
    try:
        secret = load_secret(args.key_file, host=host)
    except (OSError, ValueError) as e:
        raise CLIError(f"--tracker: {e}") from None
    return host, int(port), secret


def pool_options(args):
    """The ``PoolOptions`` of ``tilecraft tune --tracker``'s flags, checked before any work
    (``CLIError`` naming the flag otherwise).

    >>> pool_options(build_parser().parse_args(["tune", "matmul", "--tracker-retry-s", "30"])).tracker_retry_s
    30.0
    """
    from tilecraft.autotune.measure import OptionError
    from tilecraft.rpc import PoolOptions
    try:
        return PoolOptions(tracker_retry_s=args.tracker_retry_s)
    except OptionError as err:
        raise CLIError(f"--tracker-retry-s must be {err.allowed}, got {err.got!r}") from None


def rpc_runner(args, timing):
    """An RPCRunner for ``--tracker HOST:PORT --key KEY`` (measure on the device pool), timing
    as ``timing`` (``cli_tune.timing_options(args)``) says.

    >>> rpc_runner(args, timing_options(args)).timing.number      # --number 3
    3
    """
    from tilecraft.rpc import RPCRunner
    host, port, secret = tracker_address(args)
    return RPCRunner(args.key, host, port, secret=secret, timing=timing, pool=pool_options(args))


def _existing_log(path: str) -> str:
    if not os.path.exists(path):
        raise CLIError(f"no such log: {path}")
    if os.path.isdir(path):
        raise CLIError(f"{path} is a folder, not a log")
    return path


def cmd_log_summary(args) -> int:
    from tilecraft.autotune import record

    summary = record.summarize(_existing_log(args.log))
    if not summary:
        print(f"{args.log}: no valid records")
        return 1
    for (target, workload), s in summary.items():
        print(f"{workload[0]}{list(workload[1:])} on {target}")
        dup = f" ({s['records']} records)" if s["records"] != s["configs"] else ""
        errors = sum(s["errors"].values())
        print(f"  trials: {s['configs']} configs{dup}, {s['records'] - errors} ok, {errors} errors")
        for kind, n in sorted(s["errors"].items(), key=lambda kv: -kv[1]):
            print(f"  {kind} x{n}:")
            messages = sorted(s["messages"][kind].items(), key=lambda kv: -kv[1])
            for msg, count in messages[:3]:
                print(f"    x{count}  {msg}")
            if len(messages) > 3:
                print(f"    ... and {len(messages) - 3} other message(s)")
        if s["best"] is not None:
            gflops = (s["flop"] or 1.0) / s["best_cost"] / 1e9
            print(f"  best: {gflops:.2f} GFLOP/s ({s['best_cost'] * 1e3:.3f} ms per run), found at trial "
                  f"{s['best_record']} of {s['configs']}")
            print(f"  best config: {s['best']}")
    return 0


def best_curves(path) -> dict:
    """``{label: [best GFLOP/s after trial 1, 2, ...]}``, one curve per tuning run (and
    workload, when the log has several); a label names the tuner, and the run's start time
    when several runs used the same tuner. Invalid records are skipped (one warning).

    >>> best_curves("tuning_logs/matmul_1024_1024_1024_float32.jsonl")
    {'XGBTuner': [24.3, 36.1, 36.1, ...]}
    """
    from tilecraft.autotune import record

    rows = record.read_valid(path, with_run=True)
    several = len({inp.task.workload for inp, _, _ in rows}) > 1
    runs: dict = {}
    for inp, res, run in rows:
        runs.setdefault(run.get("id", ""), (run.get("tuner", "unknown tuner"), res.timestamp))
    tuners = [t for t, _ in runs.values()]
    labels = {}
    for run_id, (tuner, started) in runs.items():
        labels[run_id] = tuner
        if tuners.count(tuner) > 1:
            nth = sum(1 for t, _ in list(runs.values())[: len(labels)] if t == tuner)
            labels[run_id] += f" #{nth} ({time.strftime('%b %d %H:%M', time.localtime(started))})"
    curves: dict = {}
    for inp, res, run in rows:
        if res.stage == "verify":       # re-measurements after the run are not trials
            continue
        label = labels[run.get("id", "")]
        if several:
            label = f"{inp.task.name}{list(inp.task.args)} {label}"
        gflops = (inp.task.flop or 1.0) / res.mean_cost / 1e9 if res.ok else 0.0
        curve = curves.setdefault(label, [])
        curve.append(max(gflops, curve[-1] if curve else 0.0))
    return curves


def plot_figure(path: str):
    """The tuning-curve figure of a log: best GFLOP/s so far against trials, one curve per run
    labelled with its tuner; the title names the task (and the device), the y axis starts at 0.
    Needs matplotlib (the ``plot`` extra).

    >>> plot_figure("tuning_logs/matmul_1024_1024_1024_float32.jsonl").savefig("curve.png")
    """
    from tilecraft.autotune import record

    try:
        import matplotlib
    except ImportError:
        raise CLIError("plots need matplotlib, which is not installed: python3 -m pip install 'tilecraft[plot]' "
                       "(from the repository: python3 -m pip install -e '.[plot]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = best_curves(path)
    if not curves:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # said once already, by best_curves
        tasks = sorted({f"{inp.task.name}{list(inp.task.args)} on {inp.target}"
                        for inp, _ in record.read_valid(path, check_templates=False)})
    devices = sorted(_devices(path))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, curve in curves.items():
        ax.plot(range(1, len(curve) + 1), curve, label=label)
    ax.set_xlabel("trials (configs measured)")
    ax.set_ylabel("best throughput so far (GFLOP/s)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0, top=max(max(c) for c in curves.values()) * 1.08 or 1.0)
    title = tasks[0] if len(tasks) == 1 else f"{len(tasks)} tasks"
    ax.set_title(title + (f"\n{', '.join(devices)}" if devices else ""), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title="tuner")
    fig.tight_layout()
    return fig


def cmd_log_plot(args) -> int:
    fig = plot_figure(_existing_log(args.log))
    if fig is None:
        print(f"{args.log}: no valid records")
        return 1
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out} ({len(fig.axes[0].get_lines())} curve(s))")
    return 0


def _devices(path) -> set:
    """The device names of a log's records (quietly: the records were checked already)."""
    import json

    names = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                dev = json.loads(line).get("device")
            except (ValueError, AttributeError):
                continue
            if isinstance(dev, str):
                names.add(dev)
    return names


def cmd_export(args) -> int:
    """Build the best valid logged configuration of every workload and export one library each."""
    import json
    import re

    import tilecraft
    from tilecraft.autotune import apply_history_best, record
    from tilecraft.autotune.local import library_suffix
    from tilecraft.autotune.task import TASK_TABLE
    from tilecraft.target import Target

    if args.module:
        try:
            _import_user_module(args.module)
        except Exception as err:
            raise CLIError(f"--module {args.module}: cannot import it ({type(err).__name__}: {err})") from None
    best = record.pick_best(_existing_log(args.log))
    if not best:
        print(f"{args.log}: no successful, valid record to export")
        return 1
    os.makedirs(args.out_dir, exist_ok=True)
    manifest = []
    with apply_history_best(best):
        for inp, res in best:
            task = inp.task
            if task.name not in TASK_TABLE and task.template_module:
                try:
                    importlib.import_module(task.template_module)
                except ImportError:
                    pass
            if task.name not in TASK_TABLE:
                print(f"skipping {task.name}: its template is not importable (give --module)")
                continue
            # no dots before the suffix (the dynamic linker reads them as versions); lib*.so links with -l
            fname = re.sub(r"[^A-Za-z0-9_-]+", "_", f"{task.name}_{'_'.join(map(str, task.args))}")
            with Target(str(inp.target)):
                sch, tensors = TASK_TABLE[task.name](*task.args)
                mod = tilecraft.build(sch, tensors, target=str(inp.target), name=re.sub(r"\W", "_", fname))
            suffix = library_suffix(task)
            path = os.path.join(args.out_dir, ("lib" if suffix == ".so" else "") + fname + suffix)
            mod.export_library(path)
            gflops = (task.flop or 1.0) / res.mean_cost / 1e9
            manifest.append({"task": task.name, "args": list(task.args), "target": str(inp.target),
                             "library": os.path.basename(path), "entry": mod.entry_name,
                             "config": inp.config.to_json_dict(), "gflops": gflops})
            print(f"{path}: {task.name}{list(task.args)} {gflops:.2f} GFLOP/s (as measured while tuning)")
    with open(os.path.join(args.out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return 0


def template_listing() -> str:
    """Every registered template (the topi ones and any imported), with its arguments, their
    types and defaults: what ``tilecraft templates`` and ``tilecraft tune --help`` print.

    >>> print(template_listing())       #   topi/matmul.llvm   (tilecraft tune matmul)
    ...                                 #       args: M:int N:int K:int [dtype:str=float32]
    """
    from tilecraft.autotune.task import TASK_TABLE

    for mod in TOPI_MODULES:
        importlib.import_module(mod)
    shortcut = {}
    for short, (_, pattern) in TOPI_TEMPLATES.items():
        for kind in ("llvm", "cuda"):
            shortcut.setdefault(pattern.format(kind=kind), short)
    lines = []
    for name in sorted(TASK_TABLE):
        func = TASK_TABLE[name]
        short = shortcut.get(name)
        doc = (func.__doc__ or "").strip().splitlines()
        head = f"  {name}" + (f"   (tilecraft tune {short}" + (" --target cuda" if name.endswith(".cuda") else "")
                               + ")" if short else "")
        lines.append(head)
        lines.append(f"      args: {usage_of(func)}")
        if doc:
            lines.append(f"      {doc[0]}")
    return "\n".join(lines)


def cmd_templates(args) -> int:
    print("templates (tilecraft tune NAME ARGS...; [x=default] may be left out):")
    print(template_listing())
    return 0


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help text with each option's default, where it has one."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("%(default)" not in text and action.default not in (None, False, argparse.SUPPRESS)
                and action.option_strings):
            text += " (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tilecraft", description="tilecraft: tune and inspect tensor programs",
                                formatter_class=_HelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    from .rpc import cli as rpc_cli      # tilecraft rpc {tracker,server,status,keygen}
    rpc_cli.add_commands(sub)
    from . import cli_relay              # tilecraft compile, tilecraft run (a whole model)
    cli_relay.add_commands(sub, _HelpFormatter)

    class _TuneHelp(_HelpFormatter):
        def format_help(self):
            return super().format_help() + "\ntemplates:\n" + template_listing() + "\n"

    t = sub.add_parser("tune", help="tune a template on this machine", formatter_class=_TuneHelp,
                       description="Tune a template on this machine: measure configs, log every measurement, "
                                   "then compare the best with numpy and say what to do next. Running the same "
                                   "command again resumes from the log.")
    t.add_argument("template", help="topi name (matmul, batch_matmul, conv2d, softmax, layer_norm, global_pool) or registered template name")
    t.add_argument("args", nargs="*", help="template arguments (shapes, dtype), e.g. 1024 1024 1024 float32")
    t.add_argument("--module", help="a .py file or module that defines the template")
    t.add_argument("--target", default="llvm", help="llvm (this CPU), 'llvm -mcpu=NAME -mattr=+f,-g', or cuda")
    t.add_argument("--trials", type=int, default=256,
                   help="distinct configs to measure in all (those already in the log count)")
    t.add_argument("--log", help="JSON-lines log to append to and resume from "
                                 "(default: tuning_logs/TEMPLATE_ARGS.jsonl)")
    t.add_argument("--early-stopping", type=int, default=DEFAULT_EARLY_STOPPING, metavar="N",
                   help="stop after N trials in a row without a better config (logged ones count; with xgb, "
                        "not before 2 x --plan-size trials, when the model has proposed a plan); 0: never")
    t.add_argument("--tuner", choices=("xgb", "random", "grid"), default="xgb",
                   help="search strategy: XGBoost cost model + simulated annealing, random, or grid")
    t.add_argument("--feature-type", choices=("itervar", "knob", "curve"), default="itervar",
                   help="what the xgb cost model learns from")
    t.add_argument("--plan-size", type=int, default=64,
                   help="xgb: configs in each plan of the model (refitted after every measured batch)")
    t.add_argument("--verify", type=int, default=3, metavar="K",
                   help="after the search, measure the K fastest configs again, each alone; export and "
                        "apply_history_best choose by those figures (0: skip)")
    t.add_argument("--verify-rounds", type=int, default=3, metavar="R",
                   help="--verify: time the K configs in R interleaved rounds (each built once; a round "
                        "times each once, in a fresh order), each logged with one figure per round")
    t.add_argument("--transfer", action="append", metavar="LOG", help="an earlier log to learn from (repeatable)")
    t.add_argument("--number", type=int, default=3, help="calls per timing")
    t.add_argument("--repeat", type=int, default=3, help="timings per candidate")
    t.add_argument("--min-repeat-ms", type=float, default=0, help="make each timing last at least this long")
    t.add_argument("--build-timeout", type=float, default=10, help="seconds a candidate may take to build")
    t.add_argument("--run-timeout", type=float, default=10, help="seconds a candidate may take to run")
    t.add_argument("--n-parallel", type=int, default=None, help="build processes (default: one per core)")
    t.add_argument("--no-check", action="store_true", help="do not check outputs against the reference")
    t.add_argument("--flush-cache", action="store_true", help="flush CPU caches before each timed repeat")
    t.add_argument("--max-memory-mb", type=int, default=None, help="cap each run process's memory (default: no cap)")
    t.add_argument("--max-timing-s", type=float, default=2.0,
                   help="time candidates slower than this (number x repeat runs) with fewer runs; 0: off")
    t.add_argument("--seed", type=int, default=None, help="random seed of the tuner (default: a fresh one)")
    t.add_argument("--no-verdict", action="store_true",
                   help="do not time the best config beside numpy at the end")
    t.add_argument("--tracker", metavar="HOST:PORT",
                   help="measure on the device pool of this tracker (see docs/rpc.md) instead of locally")
    t.add_argument("--key", help="with --tracker: the device key to measure on (e.g. llvm:znver3)")
    t.add_argument("--key-file", help="with --tracker: the pool's shared secret (default: $TILECRAFT_RPC_KEY, "
                                      "or on loopback ~/.tilecraft/rpc.key)")
    t.add_argument("--tracker-retry-s", type=float, default=120.0, metavar="SECONDS",
                   help="with --tracker: how long to keep trying a tracker that cannot be reached before "
                        "stopping (the log keeps what was measured; the same command resumes)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--verbose", action="store_true", help="print the config space")
    t.set_defaults(func=cmd_tune)

    tp = sub.add_parser("templates", help="list every template with its arguments, types and defaults",
                        formatter_class=_HelpFormatter)
    tp.set_defaults(func=cmd_templates)

    ex = sub.add_parser("export", help="build the best logged config of each workload into libraries",
                        formatter_class=_HelpFormatter)
    ex.add_argument("log", help="a tuning log")
    ex.add_argument("--out-dir", default="tuned_ops", help="where the libraries, headers and manifest.json go")
    ex.add_argument("--module", help="a .py file or module that defines the templates (if not tilecraft.topi)")
    ex.set_defaults(func=cmd_export)

    lg = sub.add_parser("log", help="inspect tuning logs", formatter_class=_HelpFormatter)
    lsub = lg.add_subparsers(dest="log_command", required=True)
    s = lsub.add_parser("summary", help="trials, errors with their messages, and the best config per workload",
                        formatter_class=_HelpFormatter)
    s.add_argument("log", help="a tuning log")
    s.set_defaults(func=cmd_log_summary)
    pl = lsub.add_parser("plot", help="best GFLOP/s against trials, one curve per tuning run (needs tilecraft[plot])",
                         formatter_class=_HelpFormatter)
    pl.add_argument("log", help="a tuning log")
    pl.add_argument("--out", default="curve.png", help="the picture to write")
    pl.set_defaults(func=cmd_log_plot)
    return p


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    print(f"tilecraft: warning: {message}", file=file if file is not None else sys.stderr)


def main(argv=None) -> int:
    """Run the ``tilecraft`` command: ``main(["tune", "matmul", "64", "64", "64"])``. Returns
    the exit status (2 for bad input, 130 when interrupted)."""
    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _one_line_warning
        try:
            return args.func(args)
        except CLIError as err:
            command = " ".join(filter(None, ["tilecraft", args.command, getattr(args, "log_command", None)]))
            print(f"{command}: error: {err}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("tilecraft: interrupted", file=sys.stderr)
            return 130


if __name__ == "__main__":
    sys.exit(main())
