"""CSR SpMV and SpMM on the CPU: tilecraft's ragged-loop operators (``tilecraft.topi.sparse``)
beside scipy.sparse and torch.sparse (CSR, when torch is installed), measured in the same run, in
turns, with SpMV's achieved bandwidth as a share of the machine's copy bandwidth.

    python3 bench/sparse_cpu.py                       # the three matrices, SpMV + SpMM 8/32/128, 2 then 1 thread
    python3 bench/sparse_cpu.py --scale 0.2 --widths 32 --threads 2
    taskset -c 0,1 python3 bench/sparse_cpu.py --full  # the issue's case alone: 100k x 100k at 1%, 2 threads

``--full`` is the issue's full-size case: the uniform matrix at scale 1 (100k x 100k, 1% dense,
about 99.5M nonzeros after duplicates), 2 threads, SpMV and SpMM widths 8 and 32 (128 is skipped
as too large: 12.7G multiply-adds per call); options given beside it win. Making the matrix takes
about 30 s and 2.4 GB at its peak (measured on the shared Zen 5 machine), the run holds about
16 bytes a nonzero (``col_idx`` and ``val``, torch's int64 copy of ``col_idx``); the bench checks
the memory available before it makes a matrix and says so if it would not fit.

Matrices (``make_matrix``): uniform random at 1% density (100k x 100k, 100M nonzeros at
``--scale 1``), power-law row lengths (mean 32, 200k x 200k), banded (2M rows, 15 per row);
``--scale`` multiplies the rows and columns (the uniform one keeps 1% density, so its nonzeros
scale with the square). tilecraft runs a few schedules (``CONFIGS``: scalar and vector
accumulators, dynamic row chunks; ``spmm_configs``: vectors of the dense axis, register
blocking) and the best is reported beside each of them; scipy is single
threaded whatever ``--threads`` says (it has no threaded SpMV), torch uses ``torch.set_num_threads``.
GB/s counts the bytes an ideal SpMV moves: row_ptr, col_idx and val read once, x read once, y
written once; "copy" is the faster of ``np.copyto`` and a parallel tilecraft copy of as many bytes
at the same thread count. The machine, its load average before and after and the versions are
printed: on a busy machine the figures say more about the load than about the code.
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

CONFIGS = {
    "scalar": dict(vector=1, row_grain=64),
    "vec8": dict(vector=8, row_grain=64),
    "vec16x2": dict(vector=16, unroll=2, row_grain=64),
}


def spmm_configs(width: int) -> dict:
    """SpMM schedules for a dense operand of ``width`` columns: built for that width (no guards)
    except ``vec (any width)``; ``rb``: register blocking (``block`` vectors of the output row
    accumulated across a row's nonzeros, ``schedule_rows``)."""
    v = min(16, width)
    out = {"vec (any width)": dict(row_grain=16, vector=v),
           "vec": dict(row_grain=16, vector=v, width=width),
           "vec_u2": dict(unroll=2, row_grain=16, vector=v, width=width)}
    for vector, block in ((8, 2), (8, 4), (16, 2), (16, 4)):
        if vector * block <= width:
            out[f"rb{block}x{vector}"] = dict(row_grain=16, vector=vector, block=block, width=width)
    return out


DEFAULTS = dict(threads=[2, 1], scale=1.0, widths=[8, 32, 128], matrices=["uniform", "powerlaw", "banded"])
FULL = dict(threads=[2], scale=1.0, widths=[8, 32], matrices=["uniform"])


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+")
    p.add_argument("--scale", type=float)
    p.add_argument("--widths", type=int, nargs="+")
    p.add_argument("--repeat", type=int, default=9, help="rounds (the median is reported)")
    p.add_argument("--matrices", nargs="+", choices=["uniform", "powerlaw", "banded"])
    p.add_argument("--full", action="store_true",
                   help="the issue's full-size case: uniform 100k x 100k at 1%%, 2 threads, SpMM widths 8 and 32")
    a = p.parse_args(argv)
    for k, v in (FULL if a.full else DEFAULTS).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    return a


def matrix_nonzeros(kind: str, scale: float) -> int:
    """About how many nonzeros :func:`matrix` makes (before duplicate columns are dropped)."""
    if kind == "uniform":
        n = int(100_000 * scale)
        return int(n * n * 0.01)
    return int(200_000 * scale) * 32 if kind == "powerlaw" else int(2_000_000 * scale) * 15


def memory_available() -> int | None:
    """Bytes of memory available (``MemAvailable`` of /proc/meminfo), None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(kind: str, scale: float) -> None:
    """Refuse a matrix whose making would not fit: about 24 bytes a nonzero at the peak
    (``make_matrix``'s int64 columns and float64 values before they are narrowed)."""
    need = 24 * matrix_nonzeros(kind, scale)
    have = memory_available()
    print(f"memory: the {kind} matrix needs about {need / 2**30:.1f} GiB at its making"
          + (f", {have / 2**30:.1f} GiB available" if have is not None else ""))
    if have is not None and need > 0.8 * have:
        raise SystemExit(f"sparse_cpu: the {kind} matrix at scale {scale} needs about {need / 2**30:.1f} GiB, "
                         f"more than 80% of the {have / 2**30:.1f} GiB available; use a smaller --scale")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def matrix(kind: str, scale: float):
    from tilecraft.topi.sparse import make_matrix
    if kind == "uniform":
        n = int(100_000 * scale)
        return make_matrix(n, n, n * 0.01, "uniform", seed=1), n
    if kind == "powerlaw":
        n = int(200_000 * scale)
        return make_matrix(n, n, 32, "powerlaw", seed=2), n
    n = int(2_000_000 * scale)
    return make_matrix(n, n, 15, "banded", seed=3), n


def median_time(fn, repeat: int) -> float:
    fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def copy_bandwidth(nbytes: int, repeat: int) -> float:
    """GB/s of the faster of np.copyto and a parallel vectorized tilecraft copy (read + write)."""
    import tilecraft as tc
    from tilecraft import te
    n = nbytes // 4
    a, b = np.ones(n, "float32"), np.empty(n, "float32")
    best = median_time(lambda: np.copyto(b, a), repeat)
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i], name="B")
    s = te.create_schedule(B.op)
    o, i = s[B].split(B.op.axis[0], factor=4096)
    s[B].parallel(o)
    io, ii = s[B].split(i, factor=16)
    s[B].vectorize(ii)
    f = tc.build(s, [A, B])
    best = min(best, median_time(lambda: f(a, b), repeat))
    return 2 * nbytes / best / 1e9


def main(argv=None) -> None:
    args = parse_args(argv)
    import scipy
    import scipy.sparse as sp

    import tilecraft as tc
    from tilecraft.topi import sparse
    try:
        import torch
    except ImportError:
        torch = None
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores; load average before: {os.getloadavg()}")
    print(f"numpy {np.__version__}, scipy {scipy.__version__}, torch {torch.__version__ if torch else 'absent'}; "
          f"scale {args.scale}; median of {args.repeat}")
    spmv = {k: sparse.build_spmv(**c) for k, c in CONFIGS.items()}
    spmm = {w: {k: sparse.build_spmm(**c) for k, c in spmm_configs(w).items()} for w in args.widths}
    for kind in args.matrices:
        check_memory(kind, args.scale)
        t0 = time.perf_counter()
        (row_ptr, col_idx, val), n = matrix(kind, args.scale)
        A = sp.csr_matrix((val, col_idx, row_ptr), shape=(n, n))
        nnz = len(val)
        print(f"\n== {kind}: {n} x {n}, {nnz} nonzeros ({nnz / n:.1f} per row, longest "
              f"{int(np.diff(row_ptr).max())}, {int((np.diff(row_ptr) == 0).sum())} empty rows); made in "
              f"{time.perf_counter() - t0:.1f} s")
        tA = torch.sparse_csr_tensor(torch.from_numpy(row_ptr.astype(np.int64)), torch.from_numpy(col_idx.astype(np.int64)),
                                     torch.from_numpy(val), size=(n, n)) if torch else None
        x = np.random.default_rng(0).uniform(-1, 1, n).astype("float32")
        y = np.empty(n, "float32")
        want = A @ x
        ideal = 4 * (len(row_ptr) + 2 * nnz + 2 * n)
        copy = {}
        for threads in args.threads:
            tc.set_num_threads(threads)
            if torch:
                torch.set_num_threads(threads)
            copy[threads] = copy_bandwidth(ideal, args.repeat)
            times = {}
            for name, f in spmv.items():
                f(A, x, out=y)
                err = float(np.abs(y - want).max() / max(1e-30, np.abs(want).max()))
                arrays = (row_ptr, col_idx, val, x, y)
                times[f"tilecraft {name}"] = median_time(lambda: f.module(*arrays), args.repeat)
                assert err < 1e-4, f"{name}: relative error {err}"
            times["scipy (1 thread)"] = median_time(lambda: A @ x, args.repeat)
            if torch:
                tx = torch.from_numpy(x)
                times["torch"] = median_time(lambda: torch.mv(tA, tx), args.repeat)
            best_tc = min(v for k, v in times.items() if k.startswith("tilecraft"))
            best_ref = min(v for k, v in times.items() if not k.startswith("tilecraft"))
            print(f"SpMV, {threads} thread(s): copy {copy[threads]:.1f} GB/s")
            for k, v in times.items():
                gbs = ideal / v / 1e9
                print(f"  {k:22s} {v * 1e3:9.3f} ms  {2 * nnz / v / 1e9:6.2f} GFLOP/s  {gbs:6.1f} GB/s "
                      f"({100 * gbs / copy[threads]:.0f}% of copy)")
            print(f"  best tilecraft / best reference: {best_ref / best_tc:.2f}x")
            for width in args.widths:
                X = np.random.default_rng(1).uniform(-1, 1, (n, width)).astype("float32")
                Y = np.empty((n, width), "float32")
                if nnz * width > 4e9:
                    print(f"  SpMM width {width}: skipped (too large)")
                    continue
                times = {}
                for name, f in spmm[width].items():
                    f(A, X, out=Y)
                    arrays = (row_ptr, col_idx, val, X, Y)
                    times[f"tilecraft {name}"] = median_time(lambda: f.module(*arrays), max(3, args.repeat // 3))
                times["scipy (1 thread)"] = median_time(lambda: A @ X, max(3, args.repeat // 3))
                if torch:
                    tX = torch.from_numpy(X)
                    times["torch"] = median_time(lambda: torch.mm(tA, tX), max(3, args.repeat // 3))
                best_tc = min(v for k, v in times.items() if k.startswith("tilecraft"))
                best_ref = min(v for k, v in times.items() if not k.startswith("tilecraft"))
                row = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in times.items())
                print(f"SpMM width {width}, {threads} thread(s): {row}; best tilecraft / best reference: "
                      f"{best_ref / best_tc:.2f}x")
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
