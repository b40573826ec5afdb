"""Where a tuning candidate's build time goes.

    python3 bench/builder_split.py [--n 1024] [--configs 30] [--seed 0]

Does what the tuner's builder does (``tilecraft/autotune/local.py``: lower → ``tilecraft.build``
→ ``export_library``) for random configurations of the ``topi/matmul.llvm`` template, in this
process, and prints the median and total per phase: lower, code generation (IR text), LLVM
inside ``build``, LLVM inside ``export_library`` (everything but the link) and the link (``gcc``).
Code generation and the link are timed by wrapping ``codegen_llvm`` and ``subprocess.run``.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # the repository

import numpy as np  # noqa: E402

import tilecraft  # noqa: E402
import tilecraft.autotune as autotune  # noqa: E402
import tilecraft.topi.matmul  # noqa: E402,F401 -- registers topi/matmul.llvm
from tilecraft.codegen import export as export_mod  # noqa: E402
from tilecraft.codegen import llvm as llvm_mod  # noqa: E402
from tilecraft.codegen.llvm_target import _llvm  # noqa: E402

_timers = {"codegen": 0.0, "link": 0.0}


def _timed(key, fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _timers[key] += time.perf_counter() - t0
    return wrapper


class _TimedSubprocess:
    """``subprocess`` as export.py sees it, with ``run`` (the link) timed."""

    def __getattr__(self, name):
        return getattr(subprocess, name)

    run = staticmethod(_timed("link", subprocess.run))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--configs", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    llvm_mod.codegen_llvm = _timed("codegen", llvm_mod.codegen_llvm)
    export_mod.subprocess = _TimedSubprocess()
    task = autotune.task.create("topi/matmul.llvm", args=(args.n,) * 3 + ("float32",), target="llvm")
    rng = np.random.default_rng(args.seed)
    phases = ("lower", "codegen", "LLVM in build", "LLVM in export", "link")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cand.so")
        while len(rows) < args.configs:
            cfg = task.config_space.get(task.config_space.valid_index(int(rng.integers(len(task.config_space)))))
            try:
                sch, targs = task.instantiate(cfg)
            except Exception:
                continue
            if getattr(cfg, "errors", None):
                continue
            _timers.update(codegen=0.0, link=0.0)
            t0 = time.perf_counter()
            func = tilecraft.lower(sch, targs, name="default_function")
            t1 = time.perf_counter()
            mod = tilecraft.build(func, target="llvm", name="default_function")
            t2 = time.perf_counter()
            mod.export_library(path)
            t3 = time.perf_counter()
            rows.append((t1 - t0, _timers["codegen"], t2 - t1 - _timers["codegen"],
                         t3 - t2 - _timers["link"], _timers["link"]))
    totals = [sum(r[i] for r in rows) for i in range(len(phases))]
    everything = sum(totals)
    print(f"# topi/matmul.llvm {args.n}^3, {len(rows)} random configs (seed {args.seed}), "
          f"cpu {_llvm().get_host_cpu_name()}, load average {os.getloadavg()[0]:.1f}")
    for i, name in enumerate(phases):
        med = statistics.median(r[i] for r in rows)
        print(f"  {name:15s} median {med * 1e3:7.1f} ms   total {totals[i]:6.2f} s "
              f"({100 * totals[i] / everything:4.1f}%)")
    per = [sum(r) for r in rows]
    print(f"  {'per candidate':15s} median {statistics.median(per) * 1e3:7.1f} ms   total "
          f"{everything:6.2f} s")
    return rows


if __name__ == "__main__":
    main()
