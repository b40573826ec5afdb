"""The ``ragged`` family of the GPU schedule fuzzer (``gpu_fuzz.py``): CSR SpMV / SpMM with random
row lengths through the sparse GPU schedules' knobs.

The fuzzer's inputs are random arrays in ranges, and a CSR matrix is not: so the program makes
its own ``row_ptr`` on the GPU, a prefix sum (a triangular ragged axis, its own kernel) of the
row lengths ``cnt`` (random in ``[0, short]``: empty and one-element rows) with every
``period``-th row ``long`` nonzeros long (up to 160: longer than a block's threads). ``col_idx``
is random in ``[0, cols)``, ``col_idx`` and ``val`` sized for the longest possible matrix.
Schedules: ``sparse_cuda.schedule_spmv_cuda`` (threads per row x rows per block),
``schedule_spmm_cuda`` (rows per block x threads x vector x local x unroll; constant or symbolic
width; also on the mean of the rows, ``spmm_mean``: the sum in registers divided as it is written,
what segment_mean and embedding_bag(mean) get), and hand schedules (a block per row over any number of threads, not only powers of two;
a thread per row). Sizes are symbolic a third of the time.
"""
from __future__ import annotations

try:                                   # as part of the tests package, or run as a script
    from .gpu_fuzz_families import Program, _code, _i, _pick
except ImportError:
    from gpu_fuzz_families import Program, _code, _i, _pick

_REFERENCE = """def reference(cnt, col_idx, val, dense{scalars}):
    counts = np.where(np.arange(len(cnt)) % {period} == 0, {long}, cnt).astype(int)
    rp = np.concatenate([[0], np.cumsum(counts)])
    c = col_idx.astype(int)
    out = np.array([val[a:b] @ dense[c[a:b]] for a, b in zip(rp[:-1], rp[1:])]).reshape((len(cnt),) + dense.shape[1:])
    return [out / np.maximum(counts, 1)[:, None]] if {mean} else [out]
"""


def gen_ragged(rng) -> Program:
    rows, cols = _i(rng, 1, 40), _i(rng, 1, 50)
    short, period, long = _pick(rng, [1, 2, 3]), _i(rng, 2, 9), _pick(rng, [0, 1, 7, 33, 64, 160])
    nnz = rows * max(short, long) + 1
    symbolic = rng.random() < 0.33
    what = _pick(rng, ["spmv", "spmv", "spmm", "spmm", "spmm_mean", "block_per_row", "thread_per_row"])
    mean = what == "spmm_mean"
    what = "spmm" if mean else what
    width = _i(rng, 1, 70) if what == "spmm" else None
    sym_width = what == "spmm" and rng.random() < 0.4
    R, Z, C = ("rows", "nnz", "cols") if symbolic else (rows, nnz, cols)
    lines = [f"{n} = te.var({n!r})" for n in ("rows", "nnz", "cols") if symbolic]
    lines += ["width = te.var('width')"] if sym_width else []
    lines += [f"cnt = te.placeholder(({R},), dtype='int32', name='cnt')",
              "def prefix(i):",
              "    k = te.reduce_axis((0, i), 'k')",
              f"    return te.sum(te.if_then_else(k % {period} == 0, {long}, cnt[k]), axis=k)",
              f"row_ptr = te.compute(({R} + 1,), prefix, name='row_ptr')",
              f"col_idx = te.placeholder(({Z},), dtype='int32', name='col_idx')",
              f"val = te.placeholder(({Z},), name='val')"]
    if what == "spmm":
        W = "width" if sym_width else width
        lines += [f"dense = te.placeholder(({C}, {W}), name='dense')",
                  "def row(i, c):",
                  "    j = te.reduce_axis((row_ptr[i], row_ptr[i + 1]), 'j')",
                  "    return te.sum(val[j] * dense[col_idx[j], c], axis=j)",
                  f"{'total' if mean else 'out'} = te.compute(({R}, {W}), row, name='{'total' if mean else 'out'}')"]
        if mean:
            lines += [f"out = te.compute(({R}, {W}), lambda i, c: total[i, c] / "
                      "te.max(row_ptr[i + 1] - row_ptr[i], 1).astype('float32'), name='out')"]
    else:
        lines += [f"dense = te.placeholder(({C},), name='dense')",
                  "def row(i):",
                  "    j = te.reduce_axis((row_ptr[i], row_ptr[i + 1]), 'j')",
                  "    return te.sum(val[j] * dense[col_idx[j]], axis=j)",
                  f"out = te.compute(({R},), row, name='out')"]
    lines += ["s = te.create_schedule(out.op)",
              "from tilecraft.topi import sparse_cuda as sc"]
    if what == "spmv":
        tpr = _pick(rng, [1, 2, 4, 8, 16, 32])
        rpb = _pick(rng, [r for r in (1, 2, 4, 8, 16, 32, 64) if 1 <= tpr * r <= 1024])
        lines.append(f"sc.schedule_spmv_cuda(s, out, threads_per_row={tpr}, rows_per_block={rpb})")
    elif what == "spmm":
        vec = _pick(rng, [1, 2, 4])
        lines.append(f"sc.schedule_spmm_cuda(s, out, rows_per_block={_pick(rng, [1, 2, 3, 4, 8])}, "
                     f"threads_x={_pick(rng, [2, 4, 8, 16, 32])}, vector={vec}, local={bool(rng.random() < 0.6)}, "
                     f"unroll={_pick(rng, [1, 1, 2, 3, 4])})")
    elif what == "block_per_row":
        threads = _pick(rng, [8, 32, 48, 64, 100, 128])
        lines += [f"jo, ji = s[out].split(out.op.reduce_axis[0], factor={threads})",
                  "s[out].bind(out.op.axis[0], te.thread_axis('blockIdx.x'))",
                  "s[out].bind(ji, te.thread_axis('threadIdx.x'))"]
    else:
        lines += [f"bx, tx = s[out].split(out.op.axis[0], factor={_pick(rng, [1, 7, 32, 64])})",
                  "s[out].bind(bx, te.thread_axis('blockIdx.x'))",
                  "s[out].bind(tx, te.thread_axis('threadIdx.x'))"]
    lines += [f"pb, pt = s[row_ptr].split(row_ptr.op.axis[0], factor={_pick(rng, [32, 64])})",
              "s[row_ptr].bind(pb, te.thread_axis('blockIdx.x'))",
              "s[row_ptr].bind(pt, te.thread_axis('threadIdx.x'))",
              "args = [cnt, col_idx, val, dense, out]"]
    sizes = {"rows": rows, "nnz": nnz, "cols": cols} if symbolic else {}
    if sym_width:
        sizes["width"] = width
    ranges = {"cnt": (0, short), "col_idx": (0, cols - 1), "val": (-1.0, 1.0), "dense": (-1.0, 1.0)}
    ref = _REFERENCE.format(scalars="", period=period, long=long, mean=mean)
    return Program(_code(lines), ref, 1e-4, 1e-4, ranges, sizes, must_build=what in ("spmv", "spmm"))
