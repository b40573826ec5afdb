"""The tensorized CPU templates (``topi/matmul_microkernel.py``, ``topi/conv2d_microkernel.py``)
beside numpy and PyTorch, measured in the same run with 2 threads and with 1 thread.

    python bench/cpu_microkernels.py --tune 96      # tune each workload (2 threads; resumes the logs), then measure
    python bench/cpu_microkernels.py                # measure the best configs of tuning_logs/microkernel_*.jsonl
    python bench/cpu_microkernels.py --threads 1 --only gemm,int8
    python bench/cpu_microkernels.py --tune 48 --only gemm --rounds 0   # tune only (bench/tune_micro.sh)

Workloads (``--only``):

- ``gemm``: fp32 GEMM 1024³ (``topi/matmul_tensorized.llvm``) beside ``numpy.dot`` (OpenBLAS) and
  ``torch.mm`` (MKL), and beside the machine's FMA peak, which the bench measures itself: an FMA
  loop built with tilecraft (independent vector accumulators on the target's widest FMA, one
  loop per thread);
- ``int8``: uint8 × int8 → int32 GEMM 1024³ (``topi/dense_int8.llvm`` with the weights packed
  beforehand, ``weight_layout="packed"``, as PyTorch's quantized Linear keeps its weights)
  beside PyTorch's quantized linear (``torch.ao.nn.quantized.Linear``, engines ``x86`` (fbgemm)
  and ``onednn``), and as a multiple of our fp32 GEMM's FLOP/s;
- ``int8q``: the same GEMM with its output requantized to uint8 as PyTorch's quantized Linear's is
  (``topi/dense_int8.llvm`` with ``requant_scale`` 1/4096 and ``requant_zero_point`` 128: the
  module's output scale and zero point below; its epilogue applied to each block of C in the
  parallel loop), the config of the ``int8`` log: like with like, since PyTorch's figure
  includes that epilogue but no quantize / dequantize of floats (its input is already quint8
  with zero point 0, and the weights' zero point is 0, so neither side compensates a zero point);
- ``conv``: conv2d 1×64×56×56, 64 filters 3×3, pad 1, fp32 (``topi/conv2d_nchwc_tensorized.llvm``)
  beside ``torch.nn.functional.conv2d`` (oneDNN);
- ``conv8``: the same conv2d uint8 × int8 → int32 (``topi/conv2d_nchwc_int8.llvm``) beside
  ``torch.ao.nn.quantized.Conv2d`` (x86 / onednn).

Every contestant (ours, each reference, the FMA loop) runs in a worker process of its own with
the same thread count (``bench/process_timing.py``): timed in one process, the references'
thread pools kept spinning after each call and slowed whatever ran next. The parent asks the
workers in turns (``--rounds`` rounds, about 0.2 s of calls each, after a pause) and reports the
medians; the load average is printed before and after, since a shared machine's figures are only
as good as its quiet. PyTorch's quantized ops requantize their output to uint8 (``int8``'s int32 output
does a little less work; ``int8q`` does the same); ops are counted as 2·M·N·K.
Results are checked first: fp32 against float64 numpy, int8 exactly against int64 numpy.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import process_timing  # noqa: E402  (bench/process_timing.py)
N_GEMM = 1024
CONV = (1, 64, 56, 56, 64, 3, 3, 1, 1)
WORKLOADS = {   # key: (template, args, log)
    "gemm": ("topi/matmul_tensorized.llvm", (N_GEMM, N_GEMM, N_GEMM, "float32"), "microkernel_gemm_fp32_1024"),
    # int8: the weights packed beforehand (weight_layout "packed"), as PyTorch's quantized Linear keeps them
    "int8": ("topi/dense_int8.llvm", (N_GEMM, N_GEMM, N_GEMM, "packed"), "microkernel_dense_int8_packed_1024"),
    # int8 requantized to uint8 (PyTorch's Linear's epilogue), measured with the int8 log's best config
    "int8q": ("topi/dense_int8.llvm", (N_GEMM, N_GEMM, N_GEMM, "packed", "kept", "rows", "zeroed", 1 / 4096, 128),
              "microkernel_dense_int8_packed_1024"),
    "conv": ("topi/conv2d_nchwc_tensorized.llvm", CONV + ("float32",), "microkernel_conv2d_fp32_56"),
    "conv8": ("topi/conv2d_nchwc_int8.llvm", CONV, "microkernel_conv2d_int8_56"),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", default="2,1", help="thread counts, one child process each")
    p.add_argument("--only", default="gemm,int8,int8q,conv,conv8", help="workloads: " + ",".join(WORKLOADS))
    p.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                   help="tune each workload up to TRIALS candidates first (with the largest thread count)")
    p.add_argument("--rounds", type=int, default=7, help="timing rounds (ours and the references in turns); "
                   "0: tune only, measure nothing")
    p.add_argument("--logs", default=os.path.join(ROOT, "tuning_logs"))
    p.add_argument("--knobs", action="append", default=[], metavar="KEY=JSON",
                   help="measure workload KEY with these knob values instead of its log's best, e.g. "
                        "gemm='{\"tile\": [14, 32], \"c_block\": 1}' (knobs not named: their first value)")
    p.add_argument("--knobs-from", metavar="FILE", help="--knobs for several workloads from a JSON file "
                   "{workload: knobs} (bench/cpu_gemm_anatomy.py --best writes one)")
    return p.parse_args(argv)


def parse_knobs(items: list[str]) -> dict:
    """``--knobs`` values ``KEY=JSON`` → ``{KEY: {knob: value}}`` (lists become tuples, as the
    templates' knob values are).

    >>> parse_knobs(['gemm={"tile": [14, 32], "kc": 256}'])
    {'gemm': {'tile': (14, 32), 'kc': 256}}
    """
    import json
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in WORKLOADS:
            sys.exit(f"--knobs {item!r}: expected KEY=JSON with KEY one of {', '.join(WORKLOADS)}")
        try:
            knobs = json.loads(text)
        except json.JSONDecodeError as e:
            sys.exit(f"--knobs {key}: {text!r} is not JSON ({e})")
        if not isinstance(knobs, dict):
            sys.exit(f"--knobs {key}: expected a JSON object of knob values, got {text!r}")
        out[key] = {k: tuple(v) if isinstance(v, list) else v for k, v in knobs.items()}
    return out


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


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

    if key == "int8q":
        print("int8q: measured with the int8 log's best config (tune int8)")
        return
    name, targs, log = WORKLOADS[key]
    path = os.path.join(logs, log + ".jsonl")
    task = autotune.task.create(name, args=targs, target="llvm")
    option = autotune.measure_option(builder=autotune.LocalBuilder(timeout=30),
                                     runner=autotune.LocalRunner(number=3, repeat=3, timeout=20,
                                                                 max_timing_s=1.0))
    t0 = time.perf_counter()
    if not os.path.exists(path):        # a new log starts with the named variants (within the trials)
        seeds = seed_configs(key, task)[:trials]
        if seeds:
            Listed(task, seeds).tune(len(seeds), option, callbacks=[autotune.callback.log_to_file(path)])
            print(f"{name}: {len(seeds)} named variants first ({time.perf_counter() - t0:.0f} s)")
    tuner = autotune.tuner.XGBTuner(task, seed=0)
    done = tuner.load_history(autotune.record.load_from_file(path)) if os.path.exists(path) else 0
    if trials <= done:
        print(f"{name}: {done} trials in {path} already")
        return
    tuner.tune(trials - done, option, early_stopping=max(32, trials // 2),
               callbacks=[autotune.callback.progress_bar(trials - done, prefix=name),
                          autotune.callback.log_to_file(path)])
    new = len(autotune.record.load_from_file(path)) - done       # early stopping may end it sooner
    print(f"{name}: {new} candidates in {time.perf_counter() - t0:.0f} s ({load()}), log {path}")


def seed_configs(key: str, task) -> list:
    """The configs of ``task``'s space that ``bench/cpu_gemm_anatomy.py`` names for workload
    ``key`` (its fp32 GEMM variants, int8 dense and conv2d rows; the AMX ones only where the target
    has AMX), the ones the space has: a tuning run measures them first, so that a short run
    (``--tune 48``) starts from the shapes known to fill the register file and the AMX tiles."""
    import cpu_gemm_anatomy as an              # bench/cpu_gemm_anatomy.py
    from tilecraft.topi.cpu_intrinsics import vector_isa

    amx = vector_isa(task.target).amx
    groups = {"gemm": [an.FP32_GEMMS], "int8": [an.INT8_DENSES] + ([an.AMX_DENSES] if amx else []),
              "conv8": [an.CONV8_CONFIGS] + ([an.CONV8_AMX_CONFIGS] if amx else [])}.get(key, [])
    out, seen = [], set()
    for group in groups:
        for knobs in group.values():
            try:
                cfg = an.config(task, **knobs)
            except (ValueError, IndexError):    # a value this target's space lacks, or filtered out
                continue
            if cfg.index not in seen:
                seen.add(cfg.index)
                out.append(cfg)
    return out


def _listed_tuner():
    from tilecraft.autotune.tuner.tuner import Tuner

    class Listed(Tuner):
        """Measures the given configs, in order (the named variants before a model-based run)."""

        def __init__(self, task, configs):
            super().__init__(task)
            self.todo = list(configs)

        def has_next(self):
            return bool(self.todo) and super().has_next()

        def next_batch(self, batch_size):
            batch, self.todo = self.todo[:batch_size], self.todo[batch_size:]
            return batch

    return Listed


def Listed(task, configs):
    """A tuner that measures ``configs`` in order (see :func:`seed_configs`)."""
    return _listed_tuner()(task, configs)


def tuned(key: str, logs: str, knobs: dict | None = None):
    """The module of the best config in the workload's log (the fallback config without one; the
    config with ``knobs`` where given), and a description of where its config came from."""
    import tilecraft as tc
    import tilecraft.autotune as autotune
    import tilecraft.topi.conv2d_microkernel  # noqa: F401  (registers the templates)
    import tilecraft.topi.matmul_microkernel  # noqa: F401

    name, targs, log = WORKLOADS[key]
    path = os.path.join(logs, log + ".jsonl")
    task = autotune.task.create(name, args=targs, target="llvm")
    if knobs:
        from cpu_gemm_anatomy import config          # bench/cpu_gemm_anatomy.py
        knobs = dict(knobs)
        amx_a = knobs.pop("amx_a", None)    # not a knob: the template's argument (A packed in 64-K panels)
        if amx_a and key in ("int8", "int8q"):
            task = autotune.task.create(name, args=targs[:4] + ("kept", amx_a) + targs[6:], target="llvm")
        # (through a worker's JSON arguments tuples arrive as lists)
        cfg = config(task, **{k: tuple(v) if isinstance(v, list) else v for k, v in knobs.items()})
        with tc.target.Target("llvm"):
            s, args = task.instantiate(cfg)
        where = f"--knobs: {cfg}" + (f", amx_a={amx_a!r}" if amx_a else "")
    elif os.path.exists(path) and key == "int8q":     # int8's log: the same space, another workload
        best = autotune.record.pick_best(path)
        int8_args = tuple(WORKLOADS["int8"][1])
        rec = next(r for r in best if tuple(r[0].task.args) == int8_args)
        cfg = task.config_space.get(rec[0].config.index)
        with tc.target.Target("llvm"):
            s, args = task.instantiate(cfg)
        where = f"the int8 log's best, {os.path.relpath(path, ROOT)}: {cfg}"
    elif os.path.exists(path):
        best = autotune.record.pick_best(path)
        n = len(autotune.record.load_from_file(path))
        with autotune.apply_history_best(path):
            with tc.target.Target("llvm"):
                s, args = task.func(*targs)
        where = f"best of {n} trials in {os.path.relpath(path, ROOT)}: {best[0][0].config if best else '?'}"
    else:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with tc.target.Target("llvm"):
                s, args = task.func(*targs)
        where = "fallback config (no tuning log)"
    return tc.build(s, args, target="llvm"), where, args


# ------------------------------------------------------------------------------------------------
# the contestants: each set up in its own worker process (process_timing.py), from the same seed

def inputs(key: str, seed: int = 0):
    """The workload's inputs (numpy) and the exact or float64 reference of its output."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if key in ("gemm", "int8", "int8q"):
        n = N_GEMM
        if key == "gemm":
            a, b = rng.uniform(-1, 1, (n, n)).astype("float32"), rng.uniform(-1, 1, (n, n)).astype("float32")
            return (a, b), a.astype(np.float64) @ b.astype(np.float64)
        a, w = rng.integers(0, 256, (n, n)).astype("uint8"), rng.integers(-128, 128, (n, n)).astype("int8")
        acc = a.astype(np.int64) @ w.astype(np.int64).T
        if key == "int8q":      # float32 requantization, rounding half to even (as the template's)
            scale, zp = WORKLOADS["int8q"][1][7:9]
            return (a, w), np.clip(np.rint(acc.astype(np.float32) * np.float32(scale)) + zp, 0, 255)
        return (a, w), acc
    import torch
    N, CI, H, W, CO, KH, KW, stride, pad = CONV
    if key == "conv8":
        x = rng.integers(0, 256, (N, CI, H, W)).astype("uint8")
        w = rng.integers(-128, 128, (CO, CI, KH, KW)).astype("int8")
    else:
        x = rng.uniform(-1, 1, (N, CI, H, W)).astype("float32")
        w = rng.uniform(-1, 1, (CO, CI, KH, KW)).astype("float32")
    ref = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)),
                                     torch.from_numpy(w.astype(np.float64)), padding=pad).numpy()
    return (x, w), ref


def setup_tilecraft(key: str, logs: str, knobs: dict | None = None):
    """Our tuned module of the workload (or the one with ``knobs``), checked (fp32 against
    float64, int8 exactly)."""
    import numpy as np

    mod, where, args = tuned(key, logs, knobs)
    ins, ref = inputs(key)
    if key in ("int8", "int8q"):           # the weights packed once, outside the timed call
        from tilecraft.topi.matmul_microkernel import dense_int8_pack_weight
        ins = (ins[0], dense_int8_pack_weight(ins[1], args[1].shape[2].value))
    out = (np.full(ref.shape, -7, "int32") if key in ("int8", "conv8") else np.full(ref.shape, 7, "uint8")
           if key == "int8q" else np.full(ref.shape, np.nan, "float32"))
    mod(*ins, out)
    if key in ("int8", "int8q", "conv8"):
        assert (out == ref.astype(np.int64)).all(), f"the {key} module is not exact"
    else:
        err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
        assert err < 1e-5, f"the {key} module is wrong: relative error {err:.1e}"
    return (lambda: mod(*ins, out)), where


def setup_numpy_gemm():
    import numpy as np
    (a, b), _ = inputs("gemm")
    return lambda: np.dot(a, b)


def setup_torch(key: str):
    """torch.mm (MKL) or conv2d (oneDNN), fp32."""
    import torch
    (a, b), _ = inputs(key)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    if key == "gemm":
        return lambda: torch.mm(ta, tb)
    return lambda: torch.nn.functional.conv2d(ta, tb, padding=CONV[8])


def setup_torch_quantized(key: str, engine: str):
    """PyTorch's quantized Linear (int8) or Conv2d (conv8) on ``engine``; its output is requantized
    to uint8."""
    import warnings

    import torch
    warnings.simplefilter("ignore")             # quantized tensors' deprecation warning
    torch.backends.quantized.engine = engine
    (x, w), _ = inputs(key)
    if key in ("int8", "int8q"):
        m = torch.ao.nn.quantized.Linear(N_GEMM, N_GEMM, dtype=torch.qint8)
    else:
        m = torch.ao.nn.quantized.Conv2d(CONV[1], CONV[4], CONV[5], padding=CONV[8])
    m.set_weight_bias(torch.quantize_per_tensor(torch.from_numpy(w.astype("float32")), 1.0, 0, torch.qint8), None)
    m.scale, m.zero_point = 4096.0, 128         # int8q's requant_scale 1/4096 and zero point
    qx = torch.quantize_per_tensor(torch.from_numpy(x.astype("float32")), 1.0, 0, torch.quint8)
    return lambda: m(qx)


def setup_fma_peak(threads: int):
    """The FMA loop; its info is the FLOP of one call."""
    fn, flop = fma_peak(threads)
    return fn, str(flop)


def torch_engines() -> list[str]:
    try:
        import torch
    except ImportError:
        return []
    return [e for e in ("x86", "onednn", "fbgemm") if e in torch.backends.quantized.supported_engines][:2]


def has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def contestants(key: str, threads: int, logs: str, knobs: dict | None = None) -> dict:
    C = process_timing.Contestant
    me = os.path.abspath(__file__)
    out = {"tilecraft": C(me, "setup_tilecraft", {"key": key, "logs": logs, "knobs": knobs})}
    if key == "gemm":
        out["numpy.dot (OpenBLAS)"] = C(me, "setup_numpy_gemm")
        if has_torch():
            out["torch.mm (MKL)"] = C(me, "setup_torch", {"key": key})
        out["FMA peak (measured)"] = C(me, "setup_fma_peak", {"threads": threads})
    elif key == "conv":
        out["torch conv2d (oneDNN)"] = C(me, "setup_torch", {"key": key})
    else:
        what = "Linear" if key in ("int8", "int8q") else "Conv2d"
        for eng in torch_engines():
            out[f"torch quantized {what} ({eng})"] = C(me, "setup_torch_quantized", {"key": key, "engine": eng})
    return out


def report(key: str, t: dict, results: dict) -> None:
    """Print one workload's figures (``t``: ``{name: Timing}`` from ``time_apart``)."""
    where = t["tilecraft"].info
    if key in ("gemm", "int8", "int8q"):
        n = N_GEMM
        g = {k: 2.0 * n ** 3 / v.median / 1e9 for k, v in t.items()}
    if key == "gemm":
        peak_t = t.pop("FMA peak (measured)")
        peak = float(peak_t.info) / peak_t.median / 1e9
        g.pop("FMA peak (measured)")
        best_ref = max(v for k, v in g.items() if k != "tilecraft")
        results["gemm"] = g["tilecraft"]
        print(f"fp32 GEMM {n}³ ({where})")
        for k, v in g.items():
            print(f"  {k:<26}{v:8.1f} GFLOP/s")
        print(f"  FMA peak (measured){'':<7}{peak:8.1f} GFLOP/s  (an FMA loop, every thread, in the same rounds)")
        print(f"  ours / best reference: {g['tilecraft'] / best_ref:.2f}x (target >= 1.0); ours / FMA peak: "
              f"{100 * g['tilecraft'] / peak:.0f}% (target >= 90%)")
    elif key in ("int8", "int8q"):
        print(f"int8 GEMM {n}³, uint8 × int8 → " + ("int32" if key == "int8" else
              "int32 → uint8 requantized, as PyTorch's output") + f" ({where})")
        for k, v in g.items():
            print(f"  {k:<34}{v:8.1f} Gop/s")
        refs = [v for k, v in g.items() if k != "tilecraft"]
        if refs:
            print(f"  ours / best PyTorch: {g['tilecraft'] / max(refs):.2f}x (target >= 1.0)", end="")
        if "gemm" in results:
            print(f"; ours / our fp32 GEMM: {g['tilecraft'] / results['gemm']:.2f}x (target >= 2)", end="")
        print()
    else:
        N, CI, H, W, CO, KH, KW, stride, pad = CONV
        flop = 2.0 * N * CO * H * W * CI * KH * KW
        g = {k: flop / v.median / 1e9 for k, v in t.items()}
        unit = "Gop/s" if key == "conv8" else "GFLOP/s"
        print(f"conv2d {N}×{CI}×{H}×{W}, {CO} filters {KH}×{KW}, pad {pad}, "
              f"{'int8' if key == 'conv8' else 'fp32'} ({where})")
        for k, v in g.items():
            print(f"  {k:<34}{v:8.1f} {unit}  ({1e3 * t[k].median:.3f} ms)")
        refs = [v for k, v in g.items() if k != "tilecraft"]
        if refs:
            print(f"  ours / best PyTorch: {g['tilecraft'] / max(refs):.2f}x")


def measure(args, threads: int) -> None:
    print(f"=== {threads} thread(s), each contestant in its own process, {load()}", flush=True)
    results = {}
    only = args.only.split(",")
    for key in [k for k in WORKLOADS if k in only]:      # int8 after gemm compares with our fp32 GEMM
        knobs = args.knobs.get(key) or (args.knobs.get("int8") if key == "int8q" else None)   # int8q: int8's
        t = process_timing.time_apart(contestants(key, threads, args.logs, knobs),
                                      threads=threads, rounds=args.rounds)
        report(key, t, results)
        sys.stdout.flush()
    print(f"=== done, {load()}", flush=True)


def main(argv=None):
    args = parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    args.knobs = parse_knobs(args.knobs)
    if args.knobs_from:
        import json
        with open(args.knobs_from) as f:
            args.knobs = {**parse_knobs([f"{k}={json.dumps(v)}" for k, v in json.load(f).items()]), **args.knobs}
    for key in args.only.split(","):
        if key not in WORKLOADS:
            sys.exit(f"--only: unknown workload {key!r}; choose from {', '.join(WORKLOADS)}")
    if args.tune:
        os.environ.update({"TILECRAFT_NUM_THREADS": str(max(threads)), "OMP_NUM_THREADS": str(max(threads)),
                           "OPENBLAS_NUM_THREADS": str(max(threads))})
        sys.path.insert(0, ROOT)
        import tilecraft.topi.conv2d_microkernel  # noqa: F401
        import tilecraft.topi.matmul_microkernel  # noqa: F401
        for key in args.only.split(","):
            tune(key, args.tune, args.logs)
    if args.rounds == 0:            # tuning only (bench/tune_micro.sh); bench/verify_micro.sh measures
        return
    sys.path.insert(0, ROOT)
    from tilecraft.codegen.llvm_features import cpu_features
    from tilecraft.runtime.threads import wait_policy
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
          f"medians of {args.rounds} rounds; every process's OpenMP wait policy {wait_policy()}; {load()}")
    for t in threads:
        measure(args, t)


if __name__ == "__main__":
    main()
