"""Row reductions on the CPU: tilecraft's softmax, layer norm and global pooling templates (their
reductions in SIMD registers) beside PyTorch (when installed) and numpy, measured in the same run
(each in its own process),
with the achieved bandwidth as a share of the machine's copy bandwidth for the same bytes.

    python3 bench/cpu_reductions.py                   # every workload, 2 threads then 1 thread
    python3 bench/cpu_reductions.py --threads 2 --workloads softmax --repeat 31
    python3 bench/cpu_reductions.py --scalar          # also the same configs with scalar reductions

Each workload uses the best configuration in ``tuning_logs/`` for its template and shape when
there is one (``tilecraft tune softmax 4096 1024 float32`` writes it), else the template's
fallback configuration, and says which. Every contestant (tilecraft, torch, numpy, the copies)
runs in a worker process of its own with the same thread count (``bench/process_timing.py``: in
one process the references' idle thread pools slowed the next contestant); they are timed in
turns, ``--repeat`` rounds of about ``--seconds`` of calls each; the median of the rounds is
reported.
GB/s counts the bytes an ideal kernel moves: the input read once and the output written once
(gamma and beta too, for layer norm). "copy GB/s" is the machine's copy bandwidth for the
workload's input (read + write of as many bytes), the faster of ``np.copyto`` and a parallel
vectorized tilecraft copy at the same thread count; "% of copy" is the kernel's GB/s as a share
of it (near 100%: the kernel runs at the speed of moving its data).
The machine, its load average before and after, the wait policy and the versions are printed:
on a busy machine (load above the core count) the figures say more about the load than the code.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys

WORKLOADS = {
    # name: (template, template arguments)
    "softmax 4096x1024": ("topi/softmax.llvm", (4096, 1024, "float32")),
    "layer_norm 4096x1024": ("topi/layer_norm.llvm", (4096, 1024, "float32")),
    "layer_norm 512x4096": ("topi/layer_norm.llvm", (512, 4096, "float32")),
    "global_avg_pool 32x256x28x28": ("topi/global_pool.llvm", (32, 256, 28, 28, "avg", "float32")),
}
LOGS = {
    "topi/softmax.llvm": "softmax_{0}_{1}_{2}.jsonl",
    "topi/layer_norm.llvm": "layer_norm_{0}_{1}_{2}.jsonl",
    "topi/global_pool.llvm": "global_pool_{0}_{1}_{2}_{3}_{4}_{5}.jsonl",
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    p.add_argument("--repeat", type=int, default=15, help="rounds (the median is reported)")
    p.add_argument("--seconds", type=float, default=0.1, help="seconds of calls per round and contestant")
    p.add_argument("--workloads", nargs="+", default=None,
                   help="name prefixes: softmax, layer_norm, global_avg_pool")
    p.add_argument("--log-dir", default=os.path.join(os.path.dirname(__file__), "..", "tuning_logs"))
    p.add_argument("--scalar", action="store_true",
                   help="also time each workload's configuration with scalar reductions (reduce_lanes=1)")
    return p.parse_args(argv)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def scalar_twin(template: str, args: tuple, cfg):
    """The same configuration with scalar row reductions (``reduce_lanes`` 1), built."""
    import tilecraft as tc
    from tilecraft import autotune

    task = autotune.task.create(template, args=args, target="llvm")
    space = task.config_space
    knobs = [k for k in space.space_map if k != "reduce_lanes"]
    for i in range(len(space)):
        c = space.get(space.valid_index(i))
        if c["reduce_lanes"].val == 1 and all(str(c[k]) == str(cfg[k]) for k in knobs):
            s, tensors = task.instantiate(c)
            return tc.build(s, tensors, target="llvm")
    raise LookupError(f"no scalar twin of {cfg}")


def build(template: str, args: tuple, log_dir: str):
    """The template's best logged configuration (or its fallback), built; where it came from; and
    the configuration."""
    import warnings

    import tilecraft as tc
    import tilecraft.topi  # noqa: F401 - registers the templates
    from tilecraft import autotune

    task = autotune.task.create(template, args=args, target="llvm")
    log = os.path.join(log_dir, LOGS[template].format(*args))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if os.path.exists(log):
            with autotune.apply_history_best(log) as best:
                with tc.target.Target("llvm"):
                    s, tensors = task.func(*args)
            cfg = best.query(tc.target.Target("llvm"), task.workload)
            origin = f"tuned ({os.path.basename(log)}): {cfg}"
        else:
            with tc.target.Target("llvm"):
                s, tensors = task.func(*args)
            cfg = autotune.dispatch.fallback_context().query(tc.target.Target("llvm"), task.workload)
            origin = f"fallback configuration (no tuning log): {cfg}"
    return tc.build(s, tensors, target="llvm"), tensors, origin, cfg


def references(name: str, arrays, torch):
    """numpy and torch versions of the workload, and a float64 reference of the output."""
    import numpy as np
    if name.startswith("softmax"):
        (x,) = arrays

        def np_fn():
            e = np.exp(x - x.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)
        x64 = x.astype("float64")
        e = np.exp(x64 - x64.max(axis=1, keepdims=True))
        want = e / e.sum(axis=1, keepdims=True)
        th = (lambda t=torch.from_numpy(x): torch.softmax(t, 1)) if torch else None
    elif name.startswith("layer_norm"):
        x, g, b = arrays

        def np_fn():
            m = x.mean(axis=1, keepdims=True)
            return (x - m) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5) * g + b
        x64 = x.astype("float64")
        want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * g + b
        if torch:
            tx, tg, tb = (torch.from_numpy(a) for a in (x, g, b))
            th = lambda: torch.nn.functional.layer_norm(tx, (x.shape[1],), tg, tb, 1e-5)  # noqa: E731
        else:
            th = None
    else:
        (x,) = arrays

        def np_fn():
            return x.mean(axis=(2, 3))
        want = x.astype("float64").mean(axis=(2, 3))
        th = (lambda t=torch.from_numpy(x): torch.nn.functional.adaptive_avg_pool2d(t, 1)) if torch else None
    return np_fn, th, want


def copy_kernel(n: int):
    """A parallel, vectorized tilecraft copy of n floats."""
    import tilecraft as tc
    from tilecraft import te
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i], name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=4096)
    xio, xii = s[B].split(xi, factor=16)
    s[B].parallel(xo)
    s[B].vectorize(xii)
    return tc.build(s, [A, B], target="llvm")


def input_shapes(name: str) -> list[tuple]:
    """The shapes of the workload's inputs (the template's placeholders but its output)."""
    template, targs = WORKLOADS[name]
    if template == "topi/layer_norm.llvm":
        return [targs[:2], targs[1:2], targs[1:2]]
    return [targs[:2] if template == "topi/softmax.llvm" else targs[:4]]


def workload_inputs(name: str):
    """Fresh uniform(-1, 1) inputs of the workload (seed 0: every worker has the same)."""
    import numpy as np
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, shape).astype("float32") for shape in input_shapes(name)]


def setup_tilecraft(name: str, log_dir: str, scalar: bool = False):
    """The workload's module (best logged config or fallback; ``scalar``: its scalar-reduction
    twin), checked against float64 numpy; info: where the config came from and the error."""
    import json

    import numpy as np
    template, targs = WORKLOADS[name]
    f, tensors, origin, cfg = build(template, targs, log_dir)
    if scalar:
        f = scalar_twin(template, targs, cfg)
    ins = workload_inputs(name)
    out = np.full([int(d.value) for d in tensors[-1].shape], np.nan, "float32")
    _, _, want = references(name, ins, None)
    f(*ins, out)
    err = float(np.max(np.abs(out - want)) / np.max(np.abs(want)))
    return (lambda: f(*ins, out)), json.dumps({"origin": origin, "err": err, "n_in": sum(a.size for a in ins),
                                               "n_out": out.size})


def setup_reference(name: str, which: str):
    """numpy's or torch's version of the workload on the same inputs."""
    torch = None
    if which == "torch":
        import torch
    np_fn, th_fn, _ = references(name, workload_inputs(name), torch)
    return th_fn if which == "torch" else np_fn


def setup_copy(n: int, which: str):
    """The machine's copy of ``n`` floats: ``np.copyto`` or a parallel vectorized tilecraft copy."""
    import numpy as np
    src, dst = np.ones(n, "float32"), np.empty(n, "float32")
    if which == "numpy":
        return lambda: np.copyto(dst, src)
    ck = copy_kernel(n)
    return lambda: ck(src, dst)


def main(argv=None):
    args = parse_args(argv)
    import json

    import llvmlite.binding as llvm
    import numpy as np

    import tilecraft  # noqa: F401 - its wait policy goes to every worker
    from tilecraft.runtime.threads import wait_policy
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import process_timing
    torch_v = _torch_version()
    names = [n for n in WORKLOADS if not args.workloads or any(n.startswith(w) for w in args.workloads)]
    load0 = os.getloadavg()
    print(f"# python3 bench/cpu_reductions.py  ({cpu_name()}, {os.cpu_count()} cores, "
          f"cpu={llvm.get_host_cpu_name()}, avx512f={'+avx512f' in llvm.get_host_cpu_features().flatten()})")
    print(f"# numpy {np.__version__}, torch {torch_v}, every contestant in its own process "
          f"(bench/process_timing.py) with wait policy {wait_policy()}, median of {args.repeat} rounds of "
          f"about {args.seconds} s, load average {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f} at the start")
    me, C = os.path.abspath(__file__), process_timing.Contestant
    log_dir = os.path.abspath(args.log_dir)
    for threads in args.threads:
        print(f"\n## {threads} thread{'s' if threads > 1 else ''} (numpy: 1)")
        print(f"{'workload':<30}{'tilecraft ms':>13}{'torch ms':>10}{'numpy ms':>10}{'copy GB/s':>10}"
              f"{'GB/s':>7}{'% of copy':>10}{'vs torch':>9}{'vs numpy':>9}{'max err':>10}")
        for name in names:
            n_in = sum(int(np.prod(shape)) for shape in input_shapes(name))
            cs = {"tilecraft": C(me, "setup_tilecraft", {"name": name, "log_dir": log_dir}),
                  "numpy": C(me, "setup_reference", {"name": name, "which": "numpy"}),
                  "np.copyto": C(me, "setup_copy", {"n": n_in, "which": "numpy"}),
                  "tc copy": C(me, "setup_copy", {"n": n_in, "which": "tilecraft"})}
            if torch_v != "not installed":
                cs["torch"] = C(me, "setup_reference", {"name": name, "which": "torch"})
            if args.scalar:
                cs["scalar"] = C(me, "setup_tilecraft", {"name": name, "log_dir": log_dir, "scalar": True})
            timings = process_timing.time_apart(cs, threads=threads, rounds=args.repeat, seconds=args.seconds)
            t = {k: v.median for k, v in timings.items()}
            info = json.loads(timings["tilecraft"].info)
            if threads == args.threads[0]:
                print(f"# {name}: {info['origin']}")
            nbytes = 4 * (info["n_in"] + info["n_out"])
            copy = min(t["np.copyto"], t["tc copy"])
            copy_gbs = 8 * n_in / copy / 1e9
            torch_ms = f"{t['torch'] * 1e3:10.3f}" if "torch" in t else f"{'-':>10}"
            vs_torch = f"{t['torch'] / t['tilecraft']:9.2f}" if "torch" in t else f"{'-':>9}"
            gbs = nbytes / t["tilecraft"] / 1e9
            print(f"{name:<30}{t['tilecraft'] * 1e3:13.3f}{torch_ms}{t['numpy'] * 1e3:10.3f}"
                  f"{copy_gbs:10.1f}{gbs:7.1f}{100 * gbs / copy_gbs:9.1f}%"
                  f"{vs_torch}{t['numpy'] / t['tilecraft']:9.2f}{info['err']:10.1e}"
                  + (f"   scalar reductions {t['scalar'] * 1e3:.3f} ms ({t['scalar'] / t['tilecraft']:.1f}x slower)"
                     if "scalar" in t else ""), flush=True)
    load1 = os.getloadavg()
    print(f"\n# load average {load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f} at the end; ratios above 1: "
          f"tilecraft is faster; max err: relative to the largest |output|, against float64 numpy")


def _torch_version() -> str:
    import importlib.metadata
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


if __name__ == "__main__":
    main()
