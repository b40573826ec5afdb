"""How libgomp's wait policy changes tilecraft's parallel kernels, on a quiet and on a busy machine.

    python bench/thread_policy.py                       # all settings, idle and busy, 2 threads
    python bench/thread_policy.py --threads 4 --repeat 7 --load busy

libgomp reads its wait policy once, when it is loaded, so every setting runs in a fresh process:
libgomp's own default (idle threads spin ~300,000 iterations before sleeping: GOMP_SPINCOUNT=300000
gives exactly that), a short spin (GOMP_SPINCOUNT=10000 and 1000), and OMP_WAIT_POLICY=PASSIVE (sleep
at once). Each process times four kernels beside numpy in the same run, alternating blocks of calls:
a 512^3 GEMM (bench/cpu_gemm.py's hand schedule; numpy.dot is OpenBLAS), C = A + B over 4M and over
64K floats (parallel + vectorized; numpy one thread) and the row softmax of examples/softmax_cpu.py.
"busy" starts one CPU-bound process per core beside it (a neighbour that wants the whole machine)
and reports how much work the neighbours got done meanwhile.

Printed per setting and load: numpy time / tilecraft time for each kernel (> 1: tilecraft is
faster), the cores tilecraft's process kept busy while timing (spinning shows here), and for
"busy" the neighbours' progress relative to the run with the least spinning.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SETTINGS = {                      # name -> environment for libgomp
    "spin 300k (libgomp default)": {"GOMP_SPINCOUNT": "300000"},
    "spin 10k": {"GOMP_SPINCOUNT": "10000"},
    "spin 1k": {"GOMP_SPINCOUNT": "1000"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
}
KERNELS = ("gemm512", "add4M", "add64K", "softmax")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5, help="timed blocks per kernel (median reported)")
    p.add_argument("--block-ms", type=float, default=40, help="length of one timed block")
    p.add_argument("--load", choices=("idle", "busy", "both"), default="both")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ------------------------------------------------------------------------------------------------
# One process: one setting

def build_kernels(np, tc, te):
    sys.path.insert(0, HERE)
    from cpu_gemm import hand_schedule
    rng = np.random.default_rng()
    out = {}
    s, args = hand_schedule(512, 512, 512)
    f = tc.build(s, args, target="llvm", name="gemm")
    a, b = rng.standard_normal((512, 512), dtype=np.float32), rng.standard_normal((512, 512), dtype=np.float32)
    c = np.full((512, 512), np.nan, np.float32)
    out["gemm512"] = (f, (a, b, c), lambda: np.dot(a, b), lambda: np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3))
    for name, n in (("add4M", 1 << 22), ("add64K", 1 << 16)):
        A = te.placeholder((n,), name="A")
        B = te.placeholder((n,), name="B")
        C = te.compute((n,), lambda i: A[i] + B[i], name="C")
        s = te.create_schedule(C.op)
        xo, xi = s[C].split(C.op.axis[0], factor=n // 64)
        s[C].parallel(xo)
        _, xv = s[C].split(xi, factor=16)
        s[C].vectorize(xv)
        f = tc.build(s, [A, B, C], target="llvm", name="add")
        x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
        z, zz = np.full(n, np.nan, np.float32), np.empty(n, np.float32)
        out[name] = (f, (x, y, z), lambda x=x, y=y, zz=zz: np.add(x, y, out=zz),
                     lambda x=x, y=y, z=z: np.testing.assert_array_equal(z, x + y))
    m, n = 256, 1000
    A = te.placeholder((m, n), name="A")
    k1, k2 = te.reduce_axis((0, n), name="k1"), te.reduce_axis((0, n), name="k2")
    row_max = te.compute((m,), lambda i: te.max(A[i, k1], axis=k1), name="row_max")
    e = te.compute((m, n), lambda i, j: te.exp(A[i, j] - row_max[i]), name="e")
    row_sum = te.compute((m,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    o = te.compute((m, n), lambda i, j: e[i, j] / row_sum[i], name="out")
    s = te.create_schedule(o.op)
    i, j = o.op.axis
    for t in (row_max, e, row_sum):
        s[t].compute_at(s[o], i)
    s[o].parallel(i)
    _, ji = s[o].split(j, factor=16)
    s[o].vectorize(ji)
    f = tc.build(s, [A, o], target="llvm", name="softmax")
    x, y = rng.standard_normal((m, n), dtype=np.float32), np.full((m, n), np.nan, np.float32)

    def np_softmax(x=x):
        ex = np.exp(x - x.max(1, keepdims=True))
        return ex / ex.sum(1, keepdims=True)
    out["softmax"] = (f, (x, y), np_softmax,
                      lambda: np.testing.assert_allclose(y, np_softmax(), rtol=1e-5, atol=1e-7))
    return out


def per_call(fn, block_s):
    """Seconds per call of fn, timed over a block of about block_s (after one untimed call)."""
    fn()
    n, t0 = 1, time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    n = max(1, int(block_s / once))
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def child(setting: str, repeat: int, block_ms: float) -> None:
    import resource

    import numpy as np

    import tilecraft as tc
    from tilecraft import te
    from tilecraft.runtime.threads import wait_policy
    kernels = build_kernels(np, tc, te)
    result = {"setting": setting, "policy": wait_policy(), "kernels": {}}
    cpu0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for name in KERNELS:
        f, args, np_call, check = kernels[name]
        f(*args)
        check()
        tc_t, np_t = [], []
        for _ in range(repeat):
            tc_t.append(per_call(lambda: f(*args), block_ms / 1e3))
            np_t.append(per_call(np_call, block_ms / 1e3))
        result["kernels"][name] = {"tilecraft_s": sorted(tc_t)[repeat // 2], "numpy_s": sorted(np_t)[repeat // 2]}
    cpu1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - wall0
    result["cores_used"] = (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) / wall
    print(json.dumps(result))


# ------------------------------------------------------------------------------------------------
# The driver

def _burn(counter, stop):
    """A neighbour: counts loop iterations until told to stop."""
    local = 0
    while not stop.is_set():
        for _ in range(20000):
            local += 1
        with counter.get_lock():
            counter.value += 20000


def run_setting(name, args, env_base):
    env = dict(env_base, **SETTINGS[name])
    out = subprocess.run([sys.executable, __file__, "--child", name, "--repeat", str(args.repeat),
                          "--block-ms", str(args.block_ms), "--threads", str(args.threads)],
                         env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"setting {name!r} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        return child(args.child, args.repeat, args.block_ms)
    env_base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env_base.update(TILECRAFT_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads),
                    OMP_NUM_THREADS=str(args.threads))
    cores = len(os.sched_getaffinity(0))
    loads = ("idle", "busy") if args.load == "both" else (args.load,)
    rows = []
    for load in loads:
        stop, counter, burners = mp.Event(), mp.Value("q", 0), []
        if load == "busy":
            burners = [mp.Process(target=_burn, args=(counter, stop), daemon=True) for _ in range(cores)]
            for p in burners:
                p.start()
            time.sleep(0.5)
        for name in SETTINGS:
            c0, t0 = counter.value, time.perf_counter()
            res = run_setting(name, args, env_base)
            res["load"] = load
            res["neighbour_rate"] = (counter.value - c0) / (time.perf_counter() - t0) if burners else None
            rows.append(res)
            print(f"  {load:<5} {name:<28} done", file=sys.stderr)
        stop.set()
        for p in burners:
            p.join()

    import llvmlite.binding as llvm
    import numpy as np
    llvm.initialize_native_target()
    print(f"# libgomp wait policy: {args.threads} threads, {cores} cores, cpu={llvm.get_host_cpu_name()} "
          f"({platform.machine()}), numpy {np.__version__}, median of {args.repeat} blocks of "
          f"{args.block_ms:.0f} ms; busy = {cores} CPU-bound neighbour processes")
    print("# cells: numpy time / tilecraft time (> 1: tilecraft faster); cores = CPU time / wall "
          "of tilecraft's process while timing; neighbours = their progress vs the best setting")
    head = f"{'load':<6}{'setting':<29}" + "".join(f"{k:>10}" for k in KERNELS) + f"{'cores':>8}{'neighbours':>12}"
    print(head)
    best_rate = max((r["neighbour_rate"] for r in rows if r["neighbour_rate"]), default=None)
    for r in rows:
        cells = "".join(f"{r['kernels'][k]['numpy_s'] / r['kernels'][k]['tilecraft_s']:>10.2f}" for k in KERNELS)
        nb = f"{r['neighbour_rate'] / best_rate:>12.2f}" if r["neighbour_rate"] and best_rate else f"{'-':>12}"
        print(f"{r['load']:<6}{r['setting']:<29}{cells}{r['cores_used']:>8.2f}{nb}")
    print("# tilecraft time per call (ms):")
    for r in rows:
        print(f"{r['load']:<6}{r['setting']:<29}" +
              "".join(f"{r['kernels'][k]['tilecraft_s'] * 1e3:>10.3f}" for k in KERNELS))
    print("# numpy time per call (ms):")
    for r in rows:
        print(f"{r['load']:<6}{r['setting']:<29}" +
              "".join(f"{r['kernels'][k]['numpy_s'] * 1e3:>10.3f}" for k in KERNELS))


if __name__ == "__main__":
    main()
