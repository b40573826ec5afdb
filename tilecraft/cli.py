"""The ``tilecraft`` command.

    tilecraft tune matmul 1024 1024 1024 float32 --trials 256 --log tuning_logs/matmul.jsonl
    tilecraft tune my_conv --module my_templates.py 1 64 56 56 --tuner random
    tilecraft log summary tuning_logs/matmul.jsonl
    tilecraft log plot tuning_logs/matmul.jsonl --out curve.png
    tilecraft export tuning_logs/matmul.jsonl --out-dir tuned_ops

``tune`` takes a template from ``tilecraft.topi`` (``matmul``, ``batch_matmul``, ``conv2d``,
``softmax``, or a full registered name like ``topi/matmul.llvm``) or from a user's module
(``--module path.py`` or ``--module package.module``), the template's arguments, and tunes it on
the local machine. Running it again with the same ``--log`` resumes: configs already in the log
are not measured again and count towards ``--trials``.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys

TOPI_TEMPLATES = {
    "matmul": ("tilecraft.topi.matmul", "topi/matmul.{kind}"),
    "batch_matmul": ("tilecraft.topi.batch_matmul", "topi/batch_matmul.{kind}"),
    "conv2d": ("tilecraft.topi.conv2d", "topi/conv2d_nchw.{kind}"),
    "conv2d_nchw": ("tilecraft.topi.conv2d", "topi/conv2d_nchw.{kind}"),
    "softmax": ("tilecraft.topi.softmax", "topi/softmax.{kind}"),
}


def _parse_value(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


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
        _import_user_module(module)
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
        raise SystemExit(f"tilecraft tune: no template {name!r} (registered: {known}; "
                         f"topi shortcuts: {', '.join(TOPI_TEMPLATES)})")
    return name


def cmd_tune(args) -> int:
    import tilecraft.autotune as autotune
    from tilecraft.target import Target

    target = Target(args.target)
    name = resolve_template(args.template, args.module, target.kind)
    template_args = tuple(_parse_value(a) for a in args.args)
    task = autotune.task.create(name, args=template_args, target=str(target))
    print(f"task {name}{list(template_args)} on {target}: {len(task.config_space)} configs, "
          f"{task.flop / 1e9:.3f} GFLOP per run")
    if args.verbose:
        print(task.config_space)

    if args.tuner == "xgb":
        tuner = autotune.tuner.XGBTuner(task, plan_size=args.plan_size, feature_type=args.feature_type,
                                        seed=args.seed)
    elif args.tuner == "random":
        tuner = autotune.tuner.RandomTuner(task, seed=args.seed)
    elif args.tuner == "grid":
        tuner = autotune.tuner.GridSearchTuner(task)
    else:
        raise SystemExit(f"unknown tuner {args.tuner!r}")

    done = 0
    if args.log and os.path.exists(args.log):
        done = tuner.load_history(autotune.record.load_from_file(args.log))
        if done:
            print(f"resuming from {args.log}: {done} configs already measured "
                  f"(best so far {tuner.best_flops / 1e9:.2f} GFLOP/s)")
    for extra in args.transfer or ():
        tuner.load_history(autotune.record.load_from_file(extra))
    remaining = max(0, args.trials - done)
    callbacks = []
    if args.log:
        callbacks.append(autotune.callback.log_to_file(args.log))
    if not args.quiet:
        callbacks.append(autotune.callback.progress_bar(remaining, prefix=name))
    if args.tracker:
        runner = _rpc_runner(args)
    else:
        runner = autotune.LocalRunner(number=args.number, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms,
                                      timeout=args.run_timeout, check_correctness=not args.no_check,
                                      enable_cpu_cache_flush=args.flush_cache, max_memory_mb=args.max_memory_mb,
                                      max_timing_s=args.max_timing_s or None)
    option = autotune.measure_option(
        builder=autotune.LocalBuilder(timeout=args.build_timeout, n_parallel=args.n_parallel), runner=runner)
    if remaining:
        tuner.tune(remaining, option, early_stopping=args.early_stopping, callbacks=callbacks)
    if tuner.best_config is None:
        print("no configuration ran successfully; see the errors in the log "
              f"(tilecraft log summary {args.log})" if args.log else "no configuration ran successfully")
        return 1
    inp, res = tuner.best_measure_pair
    print(f"best: {tuner.best_flops / 1e9:.2f} GFLOP/s ({res.mean_cost * 1e3:.3f} ms) "
          f"after {len(tuner.visited)} configs, {tuner.error_count} errors this run")
    print(f"best config: {tuner.best_config}")
    if args.log:
        print(f"log: {args.log}  (use it with autotune.apply_history_best)")
    return 0


def _rpc_runner(args):
    """An RPCRunner for ``--tracker HOST:PORT --key KEY`` (measure on the device pool)."""
    from tilecraft.rpc import RPCRunner
    from tilecraft.rpc.protocol import load_secret
    host, sep, port = args.tracker.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise SystemExit(f"--tracker expects HOST:PORT (e.g. 127.0.0.1:9190), got {args.tracker!r}")
    if not args.key:
        raise SystemExit("--tracker needs --key, the device key the servers registered with "
                         "(e.g. llvm:znver3; `tilecraft rpc status --tracker HOST:PORT` lists them)")
    try:
        secret = load_secret(args.key_file, host=host)
    except (OSError, ValueError) as e:
        raise SystemExit(f"tilecraft tune --tracker: {e}") from None
    return RPCRunner(args.key, host, int(port), secret=secret, number=args.number, repeat=args.repeat,
                     min_repeat_ms=args.min_repeat_ms, timeout=args.run_timeout,
                     check_correctness=not args.no_check, enable_cpu_cache_flush=args.flush_cache,
                     max_timing_s=args.max_timing_s or None)


def cmd_log_summary(args) -> int:
    from tilecraft.autotune import record

    summary = record.summarize(args.log)
    if not summary:
        print(f"{args.log}: no records")
        return 1
    for (target, workload), s in summary.items():
        print(f"{workload[0]}{list(workload[1:])} on {target}")
        print(f"  trials: {s['trials']}, errors: "
              + (", ".join(f"{k} {v}" for k, v in sorted(s["errors"].items())) or "none"))
        if s["best"] is not None:
            gflops = (s["flop"] or 1.0) / s["best_cost"] / 1e9
            print(f"  best: {gflops:.2f} GFLOP/s ({s['best_cost'] * 1e3:.3f} ms)")
            print(f"  best config: {s['best']}")
    return 0


def best_curves(path) -> dict:
    """``{label: [best GFLOP/s after trial 1, 2, ...]}``, one curve per tuning run (and
    workload, when the log has several)."""
    from tilecraft.autotune import record

    rows = list(record.iter_file(path, with_run=True))
    several = len({inp.task.workload for inp, _, _ in rows}) > 1
    curves: dict = {}
    for inp, res, run in rows:
        label = f"{run.get('tuner', 'unknown')} {run.get('id', '')[:6]}".strip()
        if several:
            label = f"{inp.task.name}{list(inp.task.args)} {label}"
        gflops = (inp.task.flop or 1.0) / res.mean_cost / 1e9 if res.ok else 0.0
        curve = curves.setdefault(label, [])
        curve.append(max(gflops, curve[-1] if curve else 0.0))
    return curves


def cmd_log_plot(args) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = best_curves(args.log)
    if not curves:
        print(f"{args.log}: no records")
        return 1
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, curve in curves.items():
        ax.plot(range(1, len(curve) + 1), curve, label=label)
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOP/s so far")
    ax.set_title(os.path.basename(args.log))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out} ({len(curves)} curve(s))")
    return 0


def cmd_export(args) -> int:
    """Build the best logged configuration of every workload and export one library each."""
    import json
    import re

    import tilecraft
    from tilecraft.autotune import apply_history_best, record
    from tilecraft.autotune.local import library_suffix
    from tilecraft.autotune.task import TASK_TABLE
    from tilecraft.target import Target

    best = record.pick_best(args.log)
    if not best:
        print(f"{args.log}: no successful record to export")
        return 1
    os.makedirs(args.out_dir, exist_ok=True)
    if args.module:
        _import_user_module(args.module)
    manifest = []
    with apply_history_best(best):
        for inp, res in best:
            task = inp.task
            if task.name not in TASK_TABLE and task.template_module:
                importlib.import_module(task.template_module)
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
            print(f"{path}: {task.name}{list(task.args)} {gflops:.2f} GFLOP/s")
    with open(os.path.join(args.out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tilecraft", description="tilecraft: tune and inspect tensor programs")
    sub = p.add_subparsers(dest="command", required=True)
    from .rpc import cli as rpc_cli      # tilecraft rpc {tracker,server,status,keygen}
    rpc_cli.add_commands(sub)

    t = sub.add_parser("tune", help="tune a template on this machine")
    t.add_argument("template", help="topi name (matmul, batch_matmul, conv2d, softmax) or registered template name")
    t.add_argument("args", nargs="*", help="template arguments (shapes, dtype), e.g. 1024 1024 1024 float32")
    t.add_argument("--module", help="a .py file or module that defines the template")
    t.add_argument("--target", default="llvm")
    t.add_argument("--trials", type=int, default=256, help="total configs to measure (a resumed log counts)")
    t.add_argument("--log", help="JSON-lines log to append to (and resume from)")
    t.add_argument("--tuner", choices=("xgb", "random", "grid"), default="xgb")
    t.add_argument("--feature-type", choices=("itervar", "knob", "curve"), default="itervar")
    t.add_argument("--plan-size", type=int, default=64)
    t.add_argument("--early-stopping", type=int, default=None)
    t.add_argument("--transfer", action="append", help="an earlier log to learn from (repeatable)")
    t.add_argument("--number", type=int, default=3)
    t.add_argument("--repeat", type=int, default=3)
    t.add_argument("--min-repeat-ms", type=float, default=0)
    t.add_argument("--build-timeout", type=float, default=10)
    t.add_argument("--run-timeout", type=float, default=10)
    t.add_argument("--n-parallel", type=int, default=None, help="build processes (default: one per core)")
    t.add_argument("--no-check", action="store_true", help="do not check outputs against the reference")
    t.add_argument("--flush-cache", action="store_true", help="flush CPU caches before each timed repeat")
    t.add_argument("--max-memory-mb", type=int, default=None, help="cap each run process's memory")
    t.add_argument("--max-timing-s", type=float, default=2.0,
                   help="time candidates slower than this (number x repeat runs) with fewer runs; 0: off")
    t.add_argument("--seed", type=int, default=None)
    t.add_argument("--tracker", metavar="HOST:PORT",
                   help="measure on the device pool of this tracker (see docs/rpc.md) instead of locally")
    t.add_argument("--key", help="with --tracker: the device key to measure on (e.g. llvm:znver3)")
    t.add_argument("--key-file", help="with --tracker: the pool's shared secret (default: $TILECRAFT_RPC_KEY, "
                                      "or on loopback ~/.tilecraft/rpc.key)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--verbose", action="store_true", help="print the config space")
    t.set_defaults(func=cmd_tune)

    ex = sub.add_parser("export", help="build the best logged config of each workload into libraries")
    ex.add_argument("log")
    ex.add_argument("--out-dir", default="tuned_ops")
    ex.add_argument("--module", help="a .py file or module that defines the templates")
    ex.set_defaults(func=cmd_export)

    lg = sub.add_parser("log", help="inspect tuning logs")
    lsub = lg.add_subparsers(dest="log_command", required=True)
    s = lsub.add_parser("summary", help="trials, errors and best config per workload")
    s.add_argument("log")
    s.set_defaults(func=cmd_log_summary)
    pl = lsub.add_parser("plot", help="best GFLOP/s against trials, one curve per tuning run")
    pl.add_argument("log")
    pl.add_argument("--out", default="curve.png")
    pl.set_defaults(func=cmd_log_plot)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
