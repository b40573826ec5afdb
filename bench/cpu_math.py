"""Elementwise float32 math on the CPU: tilecraft's vectorized, parallel schedule beside numpy and
(when installed) PyTorch, measured in the same run.

    python bench/cpu_math.py                        # 4M floats, 2 threads, exp log tanh sigmoid
    python bench/cpu_math.py --n 1048576 --threads 1 --funcs log

For each function, prints the median time of several runs, GB/s (read + write) and the ratio to
numpy and to PyTorch (above 1: tilecraft is faster); with --threads 1 every contestant is
single-threaded. Also checks tilecraft's result against numpy in float64 (maximum relative
error over the inputs).
"""
from __future__ import annotations

import argparse
import os
import platform
import time

FUNCS = ("exp", "log", "tanh", "sigmoid")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1 << 22, help="number of floats")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=15, help="timed runs (the median is reported)")
    p.add_argument("--funcs", nargs="+", default=list(FUNCS), choices=FUNCS)
    return p.parse_args(argv)


def schedule(name: str, n: int, lanes: int = 8):
    from tilecraft import te
    A = te.placeholder((n,), "float32", name="A")
    fn = {"exp": te.exp, "log": te.log, "tanh": te.tanh, "sigmoid": te.sigmoid}[name]
    C = te.compute((n,), lambda i: fn(A[i]), name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=lanes * 64)
    xio, xii = s[C].split(xi, factor=lanes)
    s[C].vectorize(xii)
    s[C].parallel(xo)
    return s, [A, C]


def inputs(name: str, n: int, rng):
    import numpy as np
    if name == "log":
        return (rng.random(n, dtype=np.float32) * 100 + 1e-3).astype("float32")
    return rng.uniform(-10, 10, n).astype("float32")


def reference(name: str, a):
    import numpy as np
    x = a.astype("float64")
    return {"exp": np.exp, "log": np.log, "tanh": np.tanh,
            "sigmoid": lambda v: 1 / (1 + np.exp(-v))}[name](x)


def median_time(fn, repeat: int) -> float:
    fn()                                    # warm up
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import llvmlite.binding as llvm
    import numpy as np

    import tilecraft as tc
    tc.set_num_threads(args.threads)
    torch = None
    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        pass
    llvm.initialize_native_target()
    rng = np.random.default_rng(0)
    n = args.n
    print(f"# float32 elementwise math, n={n}, threads={args.threads}, cpu={llvm.get_host_cpu_name()} "
          f"({platform.machine()}), numpy {np.__version__}"
          + (f", torch {torch.__version__}" if torch else "") + f", median of {args.repeat}")
    print(f"{'function':<10}{'tilecraft ms':>13}{'numpy ms':>10}{'torch ms':>10}{'GB/s':>8}"
          f"{'vs numpy':>10}{'vs torch':>10}{'max rel err':>13}")
    for name in args.funcs:
        a = inputs(name, n, rng)
        c = np.full(n, np.nan, "float32")
        f = tc.build(*schedule(name, n), target="llvm")
        t_tc = median_time(lambda: f(a, c), args.repeat)
        ref = reference(name, a)
        err = float(np.max(np.abs(c - ref) / np.maximum(np.abs(ref), 1e-30)))
        out = np.empty_like(a)
        np_fn = {"exp": lambda: np.exp(a, out=out), "log": lambda: np.log(a, out=out),
                 "tanh": lambda: np.tanh(a, out=out),
                 "sigmoid": lambda: np.divide(1, np.add(1, np.exp(np.negative(a, out=out), out=out), out=out),
                                              out=out)}[name]
        t_np = median_time(np_fn, args.repeat)
        t_th = None
        if torch is not None:
            ta, to = torch.from_numpy(a), torch.from_numpy(out)
            th_fn = {"exp": torch.exp, "log": torch.log, "tanh": torch.tanh, "sigmoid": torch.sigmoid}[name]
            t_th = median_time(lambda: th_fn(ta, out=to), args.repeat)
        gbs = 2 * 4 * n / t_tc / 1e9
        th_ms = f"{t_th * 1e3:>10.3f}" if t_th else f"{'-':>10}"
        vs_th = f"{t_th / t_tc:>10.2f}" if t_th else f"{'-':>10}"
        print(f"{name:<10}{t_tc * 1e3:>13.3f}{t_np * 1e3:>10.3f}{th_ms}{gbs:>8.1f}{t_np / t_tc:>10.2f}{vs_th}"
              f"{err:>13.2e}")


if __name__ == "__main__":
    main()
