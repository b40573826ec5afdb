"""Shared pieces of the CUDA benches: timing with CUDA events, build-time breakdown, a table.

Every figure is a median of CUDA-event timings taken in the same process as the reference it is
compared with (PyTorch / cuBLAS / cuDNN).
"""
from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def torch_time(fn, repeat=9, number=20) -> float:
    """Median seconds per call of ``fn()`` (CUDA events around ``number`` calls, one warm-up)."""
    import torch
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(number):
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3 / number)
    return statistics.median(out)


def tc_time(mod, args, repeat=9, number=20) -> float:
    import tilecraft
    r = mod.time_evaluator(mod.entry_name, tilecraft.cuda(0), number=number, repeat=repeat)(*args)
    return r.median


def build_breakdown(make, runs=3, cache=False) -> dict:
    """Median seconds of lower, CUDA C generation, nvcc (no cache; ``cache=True``: nvcc's disk cache,
    read and written) and load, over ``runs`` builds."""
    import tilecraft
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.cuda_compile import compile_cuda
    from tilecraft.runtime.cuda_runtime import CUDAModule
    t = {"lower": [], "codegen": [], "nvcc": [], "load": []}
    mod = None
    for _ in range(runs):
        s, args = make()
        t0 = time.perf_counter()
        f = tilecraft.lower(s, args, target="cuda")
        t1 = time.perf_counter()
        src = generate_cuda(f)
        t2 = time.perf_counter()
        cubin = compile_cuda(src, "sm_90", use_cache=cache)
        t3 = time.perf_counter()
        mod = CUDAModule([f], src, cubin, "sm_90", "cuda")
        mod.load()
        t4 = time.perf_counter()
        for k, v in zip(t, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            t[k].append(v)
    med = {k: statistics.median(v) for k, v in t.items()}
    med["total"] = sum(med.values())
    return med, mod


def fmt_build(b: dict) -> str:
    return (f"lower {b['lower']*1e3:.0f} ms + CUDA C {b['codegen']*1e3:.0f} ms + nvcc {b['nvcc']*1e3:.0f} ms"
            f" + load {b['load']*1e3:.0f} ms = {b['total']*1e3:.0f} ms")


def device_line() -> str:
    import torch
    p = torch.cuda.get_device_properties(0)
    return f"{p.name}, {p.multi_processor_count} SMs, torch {torch.__version__}"


def rel_err(got, want) -> float:
    import torch
    g, w = got.double(), want.double()
    return float(torch.linalg.vector_norm(g - w) / torch.linalg.vector_norm(w))
