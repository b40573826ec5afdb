"""SDDMM, segment sum / mean and embedding bag on the CPU: tilecraft's schedules
(``topi/sparse_ops.py``) beside torch (``torch.sparse.sampled_addmm`` on a CSR tensor,
``torch.segment_reduce``, ``torch.nn.functional.embedding_bag``) and numpy / scipy formulations,
measured in the same run, in turns, medians.

    python3 bench/sparse_ops_cpu.py                      # the issue's sizes, 2 threads
    python3 bench/sparse_ops_cpu.py --scale 0.1 --ops segment bag
    taskset -c 0,1 python3 bench/sparse_ops_cpu.py --threads 2       # quiet: two cores of its own

Workloads (:func:`workloads`; ``--scale`` multiplies the rows, segments and bags):

* SDDMM: a uniform 100k x 100k CSR matrix at 0.1% density (about 10M nonzeros), depth 64:
  ``out[j] = val[j] * dot(U[row(j)], V[col(j)])``; torch's ``sampled_addmm(A, U, V.T, beta=0)``
  computes the sampled product without the multiply by ``val`` (it does less); numpy: the same
  product over chunks of 1M nonzeros (``einsum`` of the gathered rows).
* segment sum / mean: 1M rows x 64 in 10k segments of power-law lengths (``make_matrix``'s
  Pareto law, mean 100; many empty segments); numpy: ``np.add.reduceat`` over the non-empty
  segments (reduceat gives an empty segment the next row, so they are skipped and left 0).
* embedding bag (sum / mean): a table of 1M x 64, 16k bags of power-law lengths (mean 32),
  indices in random order.

tilecraft runs a few schedules of each (``CPU_CONFIGS``) and the best is compared with the best
reference: ``best tilecraft / best reference`` > 1 is faster. The machine and its load average
before and after are printed: on a busy machine the figures say more about the load than the code.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sparse_cpu import cpu_name, median_time  # noqa: E402

DEPTH = WIDTH = 64

# name -> build_* keyword arguments: around the best of the templates' brief tuning (32 trials each, xgb,
# 2 threads, busy machine: tuning_logs/{sddmm,segment_sum,embedding_bag}_*.jsonl; docs/ragged.md)
CPU_CONFIGS = {
    "sddmm": {"vec16x4 g64": dict(vector=16, unroll=4, grain=64),
              "vec16x4 g64 static": dict(vector=16, unroll=4, grain=64, dynamic=False),
              "vec16x2 g256": dict(vector=16, unroll=2, grain=256), "vec16 g256": dict(vector=16, grain=256)},
    "segment": {"vec16 g4": dict(vector=16, row_grain=4), "vec16 g4 static": dict(vector=16, row_grain=4, dynamic=False),
                "vec32 g4": dict(vector=32, row_grain=4), "rb2x16": dict(vector=16, block=2),
                "rb4x16 u2": dict(vector=16, block=4, unroll=2)},
    "bag": {"rb4x16 g16": dict(vector=16, block=4), "rb4x16 g64": dict(vector=16, block=4, row_grain=64),
            "rb4x16 g16 static": dict(vector=16, block=4, dynamic=False), "rb2x16": dict(vector=16, block=2),
            "vec16 g4": dict(vector=16, row_grain=4)},
}


def workloads(scale: float, ops) -> dict:
    """The operands of each op in ``ops`` (``sddmm``, ``segment``, ``bag``), numpy, seeded."""
    from tilecraft.topi.sparse import make_matrix
    rng = np.random.default_rng(5)
    out = {}
    if "sddmm" in ops:
        n = int(100_000 * scale)
        row_ptr, col_idx, val = make_matrix(n, n, n * 0.001, "uniform", seed=11)
        out["sddmm"] = dict(row_ptr=row_ptr, col_idx=col_idx, val=val, shape=(n, n),
                            U=rng.uniform(-1, 1, (n, DEPTH)).astype("float32"),
                            V=rng.uniform(-1, 1, (n, DEPTH)).astype("float32"))
    if "segment" in ops:
        segments = int(10_000 * scale)
        offsets, _, _ = make_matrix(segments, 100_000, 100, "powerlaw", seed=12)
        out["segment"] = dict(offsets=offsets, data=rng.uniform(-1, 1, (int(offsets[-1]), WIDTH)).astype("float32"))
    if "bag" in ops:
        bags, vocab = int(16_384 * scale), int(1_000_000 * max(scale, 0.01))
        offsets, col_idx, _ = make_matrix(bags, vocab, 32, "powerlaw", seed=13)
        out["bag"] = dict(offsets=offsets, indices=rng.permutation(col_idx).astype("int32"),
                          weight=rng.uniform(-1, 1, (vocab, WIDTH)).astype("float32"))
    return out


def describe(op: str, w: dict) -> str:
    if op == "sddmm":
        lengths = np.diff(w["row_ptr"])
        return (f"SDDMM: {w['shape'][0]} x {w['shape'][1]}, {len(w['val'])} nonzeros ({lengths.mean():.1f} per row), "
                f"depth {DEPTH}")
    lengths = np.diff(w["offsets"])
    what = "segments" if op == "segment" else "bags"
    extra = f"of {len(w['data'])} rows x {WIDTH}" if op == "segment" else \
        f"of {len(w['indices'])} indices into {w['weight'].shape[0]} x {WIDTH}"
    return (f"{'segment sum/mean' if op == 'segment' else 'embedding bag'}: {len(lengths)} {what} {extra} "
            f"(mean {lengths.mean():.1f}, longest {int(lengths.max())}, {int((lengths == 0).sum())} empty)")


def references(op: str, w: dict, mean: bool, torch) -> dict:
    """name -> a function computing the op (for ``out`` comparison: its result as numpy)."""
    refs = {}
    if op == "sddmm":
        row_idx = np.repeat(np.arange(w["shape"][0], dtype=np.int32), np.diff(w["row_ptr"]))
        U, V, ci, val = w["U"], w["V"], w["col_idx"], w["val"]

        def numpy_sddmm():
            out = np.empty(len(val), "float32")
            for a in range(0, len(val), 1 << 20):
                b = min(len(val), a + (1 << 20))
                out[a:b] = val[a:b] * np.einsum("jk,jk->j", U[row_idx[a:b]], V[ci[a:b]])
            return out
        refs["numpy (chunked einsum)"] = numpy_sddmm
        if torch is not None:
            tA = torch.sparse_csr_tensor(torch.from_numpy(w["row_ptr"].astype(np.int64)),
                                         torch.from_numpy(ci.astype(np.int64)), torch.from_numpy(val), size=w["shape"])
            tU, tVt = torch.from_numpy(U), torch.from_numpy(V).t()
            refs["torch sampled_addmm (no val multiply)"] = (
                lambda: torch.sparse.sampled_addmm(tA, tU, tVt, beta=0.0).values())
        return refs
    if op == "segment":
        offsets, data = w["offsets"], w["data"]
        lengths = np.diff(offsets)
        nonempty = np.flatnonzero(lengths)

        def reduceat():
            out = np.zeros((len(lengths), data.shape[1]), "float32")
            out[nonempty] = np.add.reduceat(data, offsets[:-1][nonempty], axis=0)
            if mean:
                out[nonempty] /= lengths[nonempty, None]
            return out
        refs["numpy add.reduceat"] = reduceat
        if torch is not None:
            td, to = torch.from_numpy(data), torch.from_numpy(offsets.astype(np.int64))
            refs["torch segment_reduce"] = lambda: torch.segment_reduce(td, "mean" if mean else "sum", offsets=to,
                                                                        axis=0, unsafe=True,
                                                                        initial=0.0)
        return refs
    if torch is not None:
        import torch.nn.functional as F
        ti, tw = torch.from_numpy(w["indices"]), torch.from_numpy(w["weight"])
        to = torch.from_numpy(w["offsets"])
        refs["torch embedding_bag"] = lambda: F.embedding_bag(ti, tw, to, mode="mean" if mean else "sum",
                                                              include_last_offset=True)
    else:
        idx, off, W = w["indices"], w["offsets"], w["weight"]
        refs["numpy add.reduceat"] = lambda: np.add.reduceat(W[idx], off[:-1], axis=0)
    return refs


def build(op: str, mean: bool, cfg: dict):
    from tilecraft.topi import sparse_ops
    if op == "sddmm":
        return sparse_ops.build_sddmm(depth=DEPTH, **cfg)
    if op == "segment":
        return sparse_ops.build_segment_sum(width=WIDTH, mean=mean, **cfg)
    return sparse_ops.build_embedding_bag("mean" if mean else "sum", dim=WIDTH, **cfg)


def run(op: str, w: dict, mean: bool, repeat: int, torch):
    """Time every config and reference; print a line each and the RESULT line."""
    import scipy.sparse as sp
    refs = references(op, w, mean, torch)
    times, want = {}, None
    for name, fn in refs.items():
        got = np.asarray(fn())
        want = got if want is None else want
        times[name] = median_time(fn, repeat)
    for name, cfg in CPU_CONFIGS[op].items():
        f = build(op, mean, cfg)
        if op == "sddmm":
            A = sp.csr_matrix((w["val"], w["col_idx"], w["row_ptr"]), shape=w["shape"])
            args = (A, w["U"], w["V"])
            row_idx = f.row_idx(A, w["row_ptr"])
            out = np.full(len(w["val"]), np.nan, "float32")
            raw = (row_idx, w["col_idx"], w["val"], w["U"], w["V"], out)
            f(*args, out=out)
        elif op == "segment":
            out = np.full((len(w["offsets"]) - 1, WIDTH), np.nan, "float32")
            raw = (w["offsets"], w["data"], out)
            f(w["data"], w["offsets"], out=out)
        else:
            out = np.full((len(w["offsets"]) - 1, WIDTH), np.nan, "float32")
            raw = (w["offsets"], w["indices"], w["weight"], out)
            f(w["indices"], w["weight"], w["offsets"], out=out)
        err = float(np.abs(out - want).max() / max(1e-30, np.abs(want).max()))     # SDDMM: numpy's, with val
        assert err < 1e-4, f"{op} {name}: relative error {err}"
        times[f"tilecraft {name}"] = median_time(lambda: f.module(*raw), repeat)
    best_tc = min((v, k) for k, v in times.items() if k.startswith("tilecraft"))
    best_ref = min((v, k) for k, v in times.items() if not k.startswith("tilecraft"))
    label = {"sddmm": "SDDMM", "segment": "segment " + ("mean" if mean else "sum"),
             "bag": "embedding bag " + ("mean" if mean else "sum")}[op]
    print(f"{label}: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in times.items()))
    print(f"RESULT {label}: best tilecraft ({best_tc[1][10:]}) {best_tc[0] * 1e3:.2f} ms, best reference "
          f"({best_ref[1]}) {best_ref[0] * 1e3:.2f} ms: {best_ref[0] / best_tc[0]:.2f}x")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=7, help="rounds (the median is reported)")
    p.add_argument("--ops", nargs="+", default=["sddmm", "segment", "bag"], choices=["sddmm", "segment", "bag"])
    a = p.parse_args(argv)
    import warnings
    warnings.filterwarnings("ignore", category=UserWarning)      # torch: sparse CSR is in beta
    import tilecraft as tc
    try:
        import torch
    except ImportError:
        torch = None
    tc.set_num_threads(a.threads)
    if torch is not None:
        torch.set_num_threads(a.threads)
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores; load average before: {os.getloadavg()}")
    print(f"numpy {np.__version__}, torch {torch.__version__ if torch else 'absent'}; {a.threads} threads; "
          f"scale {a.scale}; median of {a.repeat}")
    t = time.perf_counter()
    ws = workloads(a.scale, a.ops)
    print(f"(operands made in {time.perf_counter() - t:.1f} s)")
    for op in a.ops:
        print(f"\n== {describe(op, ws[op])}")
        for mean in ((False,) if op == "sddmm" else (False, True)):
            run(op, ws[op], mean, a.repeat, torch)
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
