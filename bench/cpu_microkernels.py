"""The tensorized CPU templates (``topi/matmul_microkernel.py``, ``topi/conv2d_microkernel.py``)
beside numpy and PyTorch, measured in the same run with 2 threads and with 1 thread.

    python bench/cpu_microkernels.py --tune 96      # tune each workload (2 threads; resumes the logs), then measure
    python bench/cpu_microkernels.py                # measure the best configs of tuning_logs/microkernel_*.jsonl
    python bench/cpu_microkernels.py --threads 1 --only gemm,int8

Workloads (``--only``):

- ``gemm``: fp32 GEMM 1024³ (``topi/matmul_tensorized.llvm``) beside ``numpy.dot`` (OpenBLAS) and
  ``torch.mm`` (MKL), and beside the machine's FMA peak, which the bench measures itself: an FMA
  loop built with tilecraft (independent vector accumulators on the target's widest FMA, one
  loop per thread);
- ``int8``: uint8 × int8 → int32 GEMM 1024³ (``topi/dense_int8.llvm``) beside PyTorch's quantized
  linear (``torch.ao.nn.quantized.Linear``, engines ``x86`` (fbgemm) and ``onednn``), and as a
  multiple of our fp32 GEMM's FLOP/s;
- ``conv``: conv2d 1×64×56×56, 64 filters 3×3, pad 1, fp32 (``topi/conv2d_nchwc_tensorized.llvm``)
  beside ``torch.nn.functional.conv2d`` (oneDNN);
- ``conv8``: the same conv2d uint8 × int8 → int32 (``topi/conv2d_nchwc_int8.llvm``) beside
  ``torch.ao.nn.quantized.Conv2d`` (x86 / onednn).

Each thread count runs in a child process (OpenBLAS, OpenMP and tilecraft fix their pools at
start). Within it, ours and each reference are timed in turns (``--rounds`` rounds of a few
calls each) and the medians reported; the load average is printed before and after, since a
shared machine's figures are only as good as its quiet. PyTorch's quantized ops requantize
their output to uint8 (a little more work than our int32 output); ops are counted as 2·M·N·K.
Results are checked first: fp32 against float64 numpy, int8 exactly against int64 numpy.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
N_GEMM = 1024
CONV = (1, 64, 56, 56, 64, 3, 3, 1, 1)
WORKLOADS = {   # key: (template, args, log)
    "gemm": ("topi/matmul_tensorized.llvm", (N_GEMM, N_GEMM, N_GEMM, "float32"), "microkernel_gemm_fp32_1024"),
    "int8": ("topi/dense_int8.llvm", (N_GEMM, N_GEMM, N_GEMM), "microkernel_dense_int8_1024"),
    "conv": ("topi/conv2d_nchwc_tensorized.llvm", CONV + ("float32",), "microkernel_conv2d_fp32_56"),
    "conv8": ("topi/conv2d_nchwc_int8.llvm", CONV, "microkernel_conv2d_int8_56"),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", default="2,1", help="thread counts, one child process each")
    p.add_argument("--only", default="gemm,int8,conv,conv8", help="workloads: " + ",".join(WORKLOADS))
    p.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                   help="tune each workload up to TRIALS candidates first (with the largest thread count)")
    p.add_argument("--rounds", type=int, default=7, help="timing rounds (ours and the references in turns)")
    p.add_argument("--logs", default=os.path.join(ROOT, "tuning_logs"))
    p.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def median(xs):
    return statistics.median(xs)


def seconds(fn, calls: int = 3) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def in_turns(fns: dict, rounds: int) -> dict:
    """Median seconds per call of each function, timed in turns (each one warmed up first)."""
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            time.sleep(0.05)
            fn()
            times[k].append(seconds(fn))
    return {k: median(v) for k, v in times.items()}


# ------------------------------------------------------------------------------------------------
# the FMA peak

def fma_peak_module(threads: int, iters: int):
    """A tilecraft function that runs ``iters`` steps of ``nacc`` independent vector FMAs (the
    target's widest) on each of ``threads`` parallel iterations; returns ``(module, flop, width)``
    (``out``'s row length)."""
    import tilecraft as tc
    from tilecraft import tir
    from tilecraft.ir.expr import Broadcast, BufferLoad, Ramp
    from tilecraft.ir.stmt import BufferStore
    from tilecraft.topi.cpu_intrinsics import vector_isa

    isa = vector_isa("llvm")
    lanes, vt = isa.lanes, f"float32x{isa.lanes}"
    nacc = 16 if isa.registers >= 32 else 12      # > FMA latency × FMA units, within the registers
    width = nacc * lanes
    out = tir.decl_buffer((threads * width,), "float32", name="out")
    ib = tir.ir_builder.create()
    with ib.for_range(0, threads, name="t", kind="parallel") as t:
        acc = ib.allocate("float32", (nacc * lanes,), name="acc", scope="local").buffer

        def at(a):
            return (Ramp(tir.const(a * lanes), tir.const(1), lanes),)
        x, y = Broadcast(out.vload([t * width]), lanes), Broadcast(out.vload([t * width + 1]), lanes)
        for a in range(nacc):
            ib.emit(BufferStore(acc, out.vload([t * width + a * lanes], vt), at(a)))
        with ib.for_range(0, iters, name="it"):
            for a in range(nacc):
                fma = tir.call_llvm_pure_intrin(vt, f"llvm.fma.v{lanes}f32", x, y, BufferLoad(acc, at(a), vt))
                ib.emit(BufferStore(acc, fma, at(a)))
        for a in range(nacc):
            ib.emit(out.vstore([t * width + a * lanes], BufferLoad(acc, at(a), vt)))
    mod = tc.build(tir.PrimFunc("fma_peak", (out,), ib.get()), target="llvm")
    return mod, 2.0 * lanes * nacc * iters * threads, width


def fma_peak(threads: int):
    """``(call, flop)``: one call of the FMA loop (a few ms) and the FLOP it does."""
    import numpy as np

    mod, flop, width = fma_peak_module(threads, 1_000_000)
    buf = np.full(threads * width, 1e-7, "float32")
    return (lambda: mod(buf)), flop


# ------------------------------------------------------------------------------------------------
# tuning and the tuned modules

def tune(key: str, trials: int, logs: str) -> None:
    import tilecraft.autotune as autotune

    name, targs, log = WORKLOADS[key]
    path = os.path.join(logs, log + ".jsonl")
    task = autotune.task.create(name, args=targs, target="llvm")
    tuner = autotune.tuner.XGBTuner(task, seed=0)
    done = tuner.load_history(autotune.record.load_from_file(path)) if os.path.exists(path) else 0
    if trials <= done:
        print(f"{name}: {done} trials in {path} already")
        return
    option = autotune.measure_option(builder=autotune.LocalBuilder(timeout=30),
                                     runner=autotune.LocalRunner(number=3, repeat=3, timeout=20,
                                                                 max_timing_s=1.0))
    t0 = time.perf_counter()
    tuner.tune(trials - done, option, early_stopping=max(32, trials // 2),
               callbacks=[autotune.callback.progress_bar(trials - done, prefix=name),
                          autotune.callback.log_to_file(path)])
    new = len(autotune.record.load_from_file(path)) - done       # early stopping may end it sooner
    print(f"{name}: {new} candidates in {time.perf_counter() - t0:.0f} s ({load()}), log {path}")


def tuned(key: str, logs: str):
    """The module of the best config in the workload's log (the fallback config without one),
    and a description of where its config came from."""
    import tilecraft as tc
    import tilecraft.autotune as autotune
    import tilecraft.topi.conv2d_microkernel  # noqa: F401  (registers the templates)
    import tilecraft.topi.matmul_microkernel  # noqa: F401

    name, targs, log = WORKLOADS[key]
    path = os.path.join(logs, log + ".jsonl")
    task = autotune.task.create(name, args=targs, target="llvm")
    if os.path.exists(path):
        best = autotune.record.pick_best(path)
        n = len(autotune.record.load_from_file(path))
        with autotune.apply_history_best(path):
            with tc.target.Target("llvm"):
                s, args = task.func(*targs)
        where = f"best of {n} trials in tuning_logs/{log}.jsonl: {best[0][0].config if best else '?'}"
    else:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with tc.target.Target("llvm"):
                s, args = task.func(*targs)
        where = "fallback config (no tuning log)"
    return tc.build(s, args, target="llvm"), where


# ------------------------------------------------------------------------------------------------
# the workloads (in a child process with a fixed thread count)

def gemm(args, threads, rng, results):
    import numpy as np

    mod, where = tuned("gemm", args.logs)
    n = N_GEMM
    a, b = rng.uniform(-1, 1, (n, n)).astype("float32"), rng.uniform(-1, 1, (n, n)).astype("float32")
    c = np.full((n, n), np.nan, "float32")
    mod(a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
    assert err < 1e-5, f"the tensorized GEMM is wrong: relative error {err:.1e}"
    fns = {"tilecraft": lambda: mod(a, b, c), "numpy.dot (OpenBLAS)": lambda: np.dot(a, b)}
    try:
        import torch
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        fns["torch.mm (MKL)"] = lambda: torch.mm(ta, tb)
    except ImportError:
        pass
    fns["FMA peak (measured)"], peak_flop = fma_peak(threads)
    t = in_turns(fns, args.rounds)
    g = {k: (peak_flop if k.startswith("FMA") else 2.0 * n ** 3) / v / 1e9 for k, v in t.items()}
    peak = g.pop("FMA peak (measured)")
    best_ref = max(v for k, v in g.items() if k != "tilecraft")
    results["gemm"] = g["tilecraft"]
    print(f"fp32 GEMM {n}³ ({where})")
    for k, v in g.items():
        print(f"  {k:<26}{v:8.1f} GFLOP/s")
    print(f"  FMA peak (measured){'':<7}{peak:8.1f} GFLOP/s  (an FMA loop, every thread, in the same rounds)")
    print(f"  ours / best reference: {g['tilecraft'] / best_ref:.2f}x (target >= 1.0); ours / FMA peak: "
          f"{100 * g['tilecraft'] / peak:.0f}% (target >= 90%)")


def _torch_engines():
    import torch
    return [e for e in ("x86", "onednn", "fbgemm") if e in torch.backends.quantized.supported_engines][:2]


def int8(args, threads, rng, results):
    import numpy as np

    mod, where = tuned("int8", args.logs)
    n = N_GEMM
    a, w = rng.integers(0, 256, (n, n)).astype("uint8"), rng.integers(-128, 128, (n, n)).astype("int8")
    c = np.zeros((n, n), "int32")
    mod(a, w, c)
    assert (c == a.astype(np.int64) @ w.astype(np.int64).T).all(), "the int8 GEMM is not exact"
    fns = {"tilecraft": lambda: mod(a, w, c)}
    try:
        import torch
        for eng in _torch_engines():
            torch.backends.quantized.engine = eng
            lin = torch.ao.nn.quantized.Linear(n, n, dtype=torch.qint8)
            lin.set_weight_bias(torch.quantize_per_tensor(torch.from_numpy(w.astype("float32")), 1.0, 0,
                                                          torch.qint8), None)
            lin.scale, lin.zero_point = 4096.0, 128
            qx = torch.quantize_per_tensor(torch.from_numpy(a.astype("float32")), 1.0, 0, torch.quint8)

            def run(lin=lin, qx=qx, eng=eng):
                torch.backends.quantized.engine = eng
                return lin(qx)
            fns[f"torch quantized Linear ({eng})"] = run
    except ImportError:
        pass
    t = in_turns(fns, args.rounds)
    g = {k: 2.0 * n ** 3 / v / 1e9 for k, v in t.items()}
    print(f"int8 GEMM {n}³, uint8 × int8 → int32 ({where})")
    for k, v in g.items():
        print(f"  {k:<34}{v:8.1f} Gop/s")
    refs = [v for k, v in g.items() if k != "tilecraft"]
    if refs:
        print(f"  ours / best PyTorch: {g['tilecraft'] / max(refs):.2f}x (target >= 1.0)", end="")
    if "gemm" in results:
        print(f"; ours / our fp32 GEMM: {g['tilecraft'] / results['gemm']:.2f}x (target >= 2)", end="")
    print()


def conv(args, threads, rng, results, int8_=False):
    import numpy as np

    key = "conv8" if int8_ else "conv"
    mod, where = tuned(key, args.logs)
    N, CI, H, W, CO, KH, KW, stride, pad = CONV
    flop = 2.0 * N * CO * H * W * CI * KH * KW
    out = np.full((N, CO, H, W), 0, "int32" if int8_ else "float32")
    import torch
    if int8_:
        x = rng.integers(0, 256, (N, CI, H, W)).astype("uint8")
        w = rng.integers(-128, 128, (CO, CI, KH, KW)).astype("int8")
        ref = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)),
                                         torch.from_numpy(w.astype(np.float64)), padding=pad).numpy()
        mod(x, w, out)
        assert (out == ref.astype(np.int64)).all(), "the int8 conv2d is not exact"
        fns = {"tilecraft": lambda: mod(x, w, out)}
        for eng in _torch_engines():
            torch.backends.quantized.engine = eng
            qc = torch.ao.nn.quantized.Conv2d(CI, CO, KH, padding=pad)
            qc.set_weight_bias(torch.quantize_per_tensor(torch.from_numpy(w.astype("float32")), 1.0, 0,
                                                         torch.qint8), None)
            qc.scale, qc.zero_point = 4096.0, 128
            qx = torch.quantize_per_tensor(torch.from_numpy(x.astype("float32")), 1.0, 0, torch.quint8)

            def run(qc=qc, qx=qx, eng=eng):
                torch.backends.quantized.engine = eng
                return qc(qx)
            fns[f"torch quantized Conv2d ({eng})"] = run
    else:
        x = rng.uniform(-1, 1, (N, CI, H, W)).astype("float32")
        w = rng.uniform(-1, 1, (CO, CI, KH, KW)).astype("float32")
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        ref = torch.nn.functional.conv2d(tx.double(), tw.double(), padding=pad).numpy()
        mod(x, w, out)
        err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
        assert err < 1e-5, f"the tensorized conv2d is wrong: relative error {err:.1e}"
        fns = {"tilecraft": lambda: mod(x, w, out),
               "torch conv2d (oneDNN)": lambda: torch.nn.functional.conv2d(tx, tw, padding=pad)}
    t = in_turns(fns, args.rounds)
    g = {k: flop / v / 1e9 for k, v in t.items()}
    unit = "Gop/s" if int8_ else "GFLOP/s"
    print(f"conv2d {N}×{CI}×{H}×{W}, {CO} filters {KH}×{KW}, pad {pad}, {'int8' if int8_ else 'fp32'} ({where})")
    for k, v in g.items():
        print(f"  {k:<34}{v:8.1f} {unit}  ({1e3 * t[k]:.3f} ms)")
    refs = [v for k, v in g.items() if k != "tilecraft"]
    print(f"  ours / best PyTorch: {g['tilecraft'] / max(refs):.2f}x")


def child(args) -> None:
    import numpy as np
    import tilecraft as tc

    tc.set_num_threads(args.child)
    try:
        import torch
        torch.set_num_threads(args.child)
    except ImportError:
        pass
    print(f"=== {args.child} thread(s), {load()}", flush=True)
    rng = np.random.default_rng(0)
    results = {}
    only = args.only.split(",")
    for key in [k for k in WORKLOADS if k in only]:      # int8 after gemm compares with our fp32 GEMM
        {"gemm": gemm, "int8": int8, "conv": conv,
         "conv8": lambda *a: conv(*a, int8_=True)}[key](args, args.child, rng, results)
        sys.stdout.flush()
    print(f"=== done, {load()}", flush=True)


def main(argv=None):
    args = parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    for key in args.only.split(","):
        if key not in WORKLOADS:
            sys.exit(f"--only: unknown workload {key!r}; choose from {', '.join(WORKLOADS)}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT] + os.environ.get("PYTHONPATH", "").split(os.pathsep))}
    if args.child:
        child(args)
        return
    if args.tune:
        os.environ.update({"TILECRAFT_NUM_THREADS": str(max(threads)), "OMP_NUM_THREADS": str(max(threads)),
                           "OPENBLAS_NUM_THREADS": str(max(threads))})
        sys.path.insert(0, ROOT)
        import tilecraft.topi.conv2d_microkernel  # noqa: F401
        import tilecraft.topi.matmul_microkernel  # noqa: F401
        for key in args.only.split(","):
            tune(key, args.tune, args.logs)
    sys.path.insert(0, ROOT)
    from tilecraft.codegen.llvm_features import cpu_features
    from tilecraft.topi.cpu_intrinsics import vector_isa
    import llvmlite.binding as llvm
    import numpy as np
    try:
        import torch
        torch_v = torch.__version__
    except ImportError:
        torch_v = "not installed"
    print(f"# {llvm.get_host_cpu_name()} ({platform.machine()}, {os.cpu_count()} CPUs), ISA {vector_isa('llvm')}, "
          f"features {' '.join(sorted(cpu_features('llvm')))}; numpy {np.__version__}, torch {torch_v}; "
          f"medians of {args.rounds} rounds; {load()}")
    for t in threads:
        cenv = {**env, "TILECRAFT_NUM_THREADS": str(t), "OMP_NUM_THREADS": str(t), "OPENBLAS_NUM_THREADS": str(t),
                "MKL_NUM_THREADS": str(t)}
        subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(t), "--only", args.only,
                        "--rounds", str(args.rounds), "--logs", args.logs], env=cenv, check=True)


if __name__ == "__main__":
    main()
