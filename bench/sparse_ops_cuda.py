"""SDDMM, segment sum / mean and embedding bag on the GPU: tilecraft's schedules
(``topi/sparse_ops_cuda.py``: a nonzero per 1-32 lanes with a cross-thread reduction over the
depth; a segment / bag per ``threadIdx.y`` row with the width over ``threadIdx.x``) beside torch on
CUDA (``torch.sparse.sampled_addmm``: cuSPARSE's SDDMM; ``torch.segment_reduce``;
``torch.nn.functional.embedding_bag``), in the same process, CUDA-event medians.

    python3 bench/sparse_ops_cuda.py                    # the issue's sizes (bench/sparse_ops_cpu.py's workloads)
    python3 bench/sparse_ops_cuda.py --scale 10 --ops segment bag

The workloads are :func:`sparse_ops_cpu.workloads` (``--scale`` multiplies the rows, segments and
bags). torch's ``sampled_addmm(A, U, V.T, beta=0)`` does not multiply by ``A``'s values (ours
does). Each op ends with a ``RESULT`` line: the best tilecraft variant against the best torch op.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cuda_common import device_line, torch_time  # noqa: E402
from sparse_cuda import prebuild, timed  # noqa: E402
from sparse_ops_cpu import DEPTH, WIDTH, describe, workloads  # noqa: E402

SDDMM_CONFIGS = [(32, 8), (16, 16), (16, 8), (8, 32), (8, 16), (4, 64), (2, 128), (1, 256)]   # (threads/nonzero, nonzeros/block)
# (rows per block, threads_x, vector, unroll): the SpMM schedule's knobs, the sum in registers
ROWS_CONFIGS = [(4, 16, 4, 1), (4, 16, 4, 2), (8, 16, 4, 2), (4, 32, 2, 2), (8, 32, 2, 1), (2, 32, 2, 4),
                (8, 8, 4, 2), (16, 16, 4, 1), (4, 64, 1, 2)]
# segments / bags cut into pieces (split_rows, on the host, once): (piece_len, pieces per block, threads_x, vector,
# unroll); a long power-law segment spread over many warps instead of walked by one
PIECES_CONFIGS = [(64, 4, 16, 4, 2), (128, 4, 16, 4, 2), (256, 4, 16, 4, 2), (512, 4, 16, 4, 2), (128, 8, 16, 4, 1),
                  (256, 2, 32, 2, 2)]


def kernels(ops) -> list:
    out = []
    if "sddmm" in ops:
        out += [("sddmm", *c, DEPTH) for c in SDDMM_CONFIGS]
    for op in ("segment", "bag"):
        if op in ops:
            out += [("rows", op, mean, *c, WIDTH) for mean in (0, 1) for c in ROWS_CONFIGS]
            out += [("rows_pieces", op, mean, *c[1:], WIDTH) for mean in (0, 1) for c in PIECES_CONFIGS]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--ops", nargs="+", default=["sddmm", "segment", "bag"], choices=["sddmm", "segment", "bag"])
    p.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1))
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    import numpy as np
    import torch
    import torch.nn.functional as F

    import time

    import tilecraft
    from sparse_cuda import MAKERS
    from tilecraft.topi.sparse import split_rows

    if a.jobs > 1:
        major, minor = torch.cuda.get_device_capability(0)
        t = prebuild(kernels(a.ops), f"sm_{major}{minor}", a.jobs)
        print(f"(nvcc: {len(kernels(a.ops))} kernels compiled in {t:.1f} s, {a.jobs} processes)")
    print(f"SDDMM / segment / embedding bag fp32 on {device_line()}; scale {a.scale}; median of {a.repeat}")
    ws = workloads(a.scale, a.ops)

    def gpu(x):
        return torch.from_numpy(np.ascontiguousarray(x)).cuda()

    def report(label, runs, refs, out, want):
        times = {}
        for name, fn in refs.items():
            times[name] = torch_time(fn, repeat=a.repeat, number=5)
        t_ref = min(times.values())
        best = None
        for name, kind_cfg, args in runs:
            s, targs = MAKERS[kind_cfg[0]](*kind_cfg[1:])
            f = tilecraft.build(s, targs, target="cuda")
            out.fill_(float("nan"))
            t, once = timed(f, args, t_ref, a.repeat, 5)
            err = float((out - want).abs().max() / want.abs().max().clamp_min(1e-30))
            print(f"  {label}: tilecraft {name}: {t * 1e3:8.3f} ms {t_ref / t:5.2f}x torch, max rel.err {err:.1e}"
                  f"{' (timed once)' if once else ''}")
            if best is None or t < best[1]:
                best = (name, t)
        print(f"  {label}: " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in times.items()))
        print(f"RESULT {label}: best tilecraft ({best[0]}) {best[1] * 1e3:.3f} ms, {t_ref / best[1]:.2f}x the best "
              f"torch ({min(times, key=times.get)} {t_ref * 1e3:.3f} ms)")

    for op in a.ops:
        w = ws[op]
        print(f"\n== {describe(op, w)}")
        if op == "sddmm":
            n, m = w["shape"]
            rp, ci, v = gpu(w["row_ptr"]), gpu(w["col_idx"]), gpu(w["val"])
            row_idx = gpu(np.repeat(np.arange(n, dtype=np.int32), np.diff(w["row_ptr"])))
            U, V = gpu(w["U"]), gpu(w["V"])
            tA = torch.sparse_csr_tensor(rp.long(), ci.long(), v, size=(n, m))
            tA32 = torch.sparse_csr_tensor(rp, ci, v, size=(n, m))
            Vt = V.t()
            out = torch.empty_like(v)
            try:
                torch.sparse.sampled_addmm(tA, U, Vt, beta=0.0)
            except RuntimeError as e:              # a transposed operand refused: give it V^T contiguous
                print(f"  (sampled_addmm on V.t(): {str(e).splitlines()[0]}; V.t().contiguous() instead)")
                Vt = V.t().contiguous()
            want = torch.sparse.sampled_addmm(tA, U, Vt, beta=0.0).values() * v
            refs = {"sampled_addmm int64": lambda: torch.sparse.sampled_addmm(tA, U, Vt, beta=0.0)}
            try:
                torch.sparse.sampled_addmm(tA32, U, Vt, beta=0.0)
                refs["sampled_addmm int32"] = lambda: torch.sparse.sampled_addmm(tA32, U, Vt, beta=0.0)
            except RuntimeError as e:
                print(f"  (sampled_addmm on int32 indices: {str(e).splitlines()[0]})")
            runs = [(f"{tpn:2d} threads/nonzero x {npb:3d} nonzeros/block", ("sddmm", tpn, npb, DEPTH),
                     (row_idx, ci, v, U, V, out)) for tpn, npb in SDDMM_CONFIGS]
            report("SDDMM", runs, refs, out, want)
            del rp, ci, v, row_idx, U, V, tA, tA32, out, want
            continue
        offsets = gpu(w["offsets"])
        pieces = {}

        def cut(piece_len, offsets_host=w["offsets"], pieces=pieces):
            """split_rows on the host, once per piece length (its time printed apart)."""
            if piece_len not in pieces:
                t = time.perf_counter()
                piece_ptr, row_pieces = split_rows(offsets_host, piece_len)
                pieces[piece_len] = (gpu(piece_ptr), gpu(row_pieces))
                print(f"  (cut into {len(piece_ptr) - 1} pieces of <= {piece_len} on the host in "
                      f"{(time.perf_counter() - t) * 1e3:.1f} ms)")
            return pieces[piece_len]
        off64 = offsets.long()
        parts = len(w["offsets"]) - 1
        for mean in (0, 1):
            mode = "mean" if mean else "sum"
            out = torch.empty(parts, WIDTH, device="cuda")
            if op == "segment":
                data = gpu(w["data"])
                label = f"segment {mode}"
                refs = {"segment_reduce": lambda: torch.segment_reduce(data, mode, offsets=off64, axis=0, unsafe=True,
                                                                     initial=0.0)}
                args = (offsets, data, out)
            else:
                data, idx = gpu(w["weight"]), gpu(w["indices"])
                idx64 = idx.long()
                label = f"embedding bag {mode}"
                refs = {"embedding_bag int32": lambda: F.embedding_bag(idx, data, offsets, mode=mode,
                                                                       include_last_offset=True),
                        "embedding_bag int64": lambda: F.embedding_bag(idx64, data, off64, mode=mode,
                                                                       include_last_offset=True)}
                args = (offsets, idx, data, out)
            want = list(refs.values())[0]()
            runs = [(f"{rpb:2d} rows/block x {tx:2d} threads x {vec} columns unroll {u}",
                     ("rows", op, mean, rpb, tx, vec, u, WIDTH), args) for rpb, tx, vec, u in ROWS_CONFIGS]
            runs += [(f"pieces <= {n}: {ppb} pieces/block x {tx:2d} threads x {vec} columns unroll {u}",
                      ("rows_pieces", op, mean, ppb, tx, vec, u, WIDTH), (*cut(n), *args[1:]))
                     for n, ppb, tx, vec, u in PIECES_CONFIGS]
            report(label, runs, refs, out, want)
            del out, want


if __name__ == "__main__":
    main()
