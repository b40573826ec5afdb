"""Ragged reduce axes (``te.reduce_axis((row_ptr[i], row_ptr[i + 1]))``): the language, lowering,
schedules and their errors, checked against scipy / numpy and the reference interpreter on
matrices with empty rows, one-element rows, very long rows and power-law row lengths."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.interp import evaluate
from tilecraft.ir.functor import collect_vars
from tilecraft.schedule.check_indices import IndexBoundsError
from tilecraft.schedule.schedule import ScheduleError
from tilecraft.te.tensor import TEError


def ragged_matrix(rng, rows: int, cols: int):
    """CSR arrays whose rows are empty, one element long, as long as the matrix is wide, and
    otherwise of power-law lengths, in a random order."""
    special = [0, 0, 1, 1, cols, 2, cols - 1]
    rest = np.minimum(np.floor(rng.pareto(1.5, rows - len(special)) * 3).astype(int), cols)
    lengths = rng.permutation(np.concatenate([special, rest]))
    cols_of = [np.sort(rng.choice(cols, n, replace=False)) for n in lengths]
    row_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype("int32")
    col_idx = np.concatenate(cols_of).astype("int32")
    val = rng.uniform(-1, 1, len(col_idx)).astype("float32")
    return row_ptr, col_idx, val


def row_count_var(rowptr):
    """The variable ``m`` of a symbolic ``rowptr`` of shape ``m + 1``."""
    (m,) = collect_vars(rowptr.shape[0])
    return m


def scipy_csr(row_ptr, col_idx, val, cols):
    import scipy.sparse as sp
    return sp.csr_matrix((val, col_idx, row_ptr), shape=(len(row_ptr) - 1, cols))


def spmv_te(rows=None, cols=None, nnz=None):
    m = te.var("m") if rows is None else rows
    n = te.var("n") if cols is None else cols
    nnz = te.var("nnz") if nnz is None else nnz
    rowptr = te.placeholder((m + 1,), dtype="int32", name="rowptr")
    colidx = te.placeholder((nnz,), dtype="int32", name="colidx")
    val = te.placeholder((nnz,), name="val")
    x = te.placeholder((n,), name="x")

    def row(i):
        j = te.reduce_axis((rowptr[i], rowptr[i + 1]), "j")
        return te.sum(val[j] * x[colidx[j]], axis=j)
    y = te.compute((m,), row, name="y")
    return rowptr, colidx, val, x, y


def test_seed_loop_lowered_golden(golden):
    """The issue's loop, written as a tensor expression (it used to fail with "argument 0
    'rowptr' is not part of the schedule"): the bounds are loaded once per row."""
    args = spmv_te()
    s = te.create_schedule(args[-1].op)
    golden("ragged_csr_spmv", str(tilecraft.lower(s, list(args), simple_mode=True)))


def test_split_rows_and_nonzeros_golden(golden):
    """A split ragged axis: its outer loop runs ceil(extent / 8) times and the tail is guarded;
    the bounds are loaded only for rows inside the matrix (the row split's tail)."""
    args = spmv_te()
    y = args[-1]
    s = te.create_schedule(y.op)
    io, ii = s[y].split(y.op.axis[0], factor=4)
    jo, ji = s[y].split(y.op.reduce_axis[0], factor=8)
    s[y].parallel(io)
    golden("ragged_split_rows_nonzeros", str(tilecraft.lower(s, list(args), simple_mode=True)))


def _sched_none(s, y):
    pass


def _sched_split_parallel(s, y):
    io, ii = s[y].split(y.op.axis[0], factor=5)
    jo, ji = s[y].split(y.op.reduce_axis[0], factor=3)
    s[y].parallel(io)


def _sched_dynamic_unroll(s, y):
    io, ii = s[y].split(y.op.axis[0], factor=2)
    s[y].parallel(io)
    s[y].pragma(io, "parallel_dynamic", 3)
    jo, ji = s[y].split(y.op.reduce_axis[0], factor=4)
    s[y].unroll(ji)


def _sched_nparts(s, y):
    jo, ji = s[y].split(y.op.reduce_axis[0], nparts=3)


def _sched_rfactor_vectorize(s, y):
    jo, ji = s[y].split(y.op.reduce_axis[0], factor=8)
    yf = s.rfactor(y, ji)
    io, ii = s[y].split(s[y].op.axis[0], factor=4)
    s[y].parallel(io)
    s[yf].compute_at(s[y], ii)
    lane, row = s[yf].op.axis
    s[yf].reorder(row, s[yf].op.reduce_axis[0], lane)
    s[yf].vectorize(lane)


def _sched_rfactor_parallel_lanes(s, y):
    # the partial sums of the nonzeros' constant inner part, one stage computed at the root
    jo, ji = s[y].split(y.op.reduce_axis[0], factor=4)
    yf = s.rfactor(y, ji, factor_axis=1)
    s[yf].parallel(s[yf].op.axis[0])


def _sched_vector_accumulators(s, y):
    # the nonzeros of a row in 8 vector lanes (simd-reduce's accumulators), the tail guarded
    io, ii = s[y].split(y.op.axis[0], factor=3)
    s[y].parallel(io)
    jo, ji = s[y].split(y.op.reduce_axis[0], factor=8)
    s[y].vectorize(ji)


def _sched_vectorize_whole_ragged_axis(s, y):
    # no constant extent: a scalar loop with a vectorization hint
    s[y].vectorize(y.op.reduce_axis[0])


def _sched_cache_write(s, y):
    # the row's sum in a local cache computed at the (split) row loop: the cache stage's ragged
    # axis reads row_ptr at the cache's own axes (it read the stage's `i`, unbound, before)
    yl = s.cache_write(y, "local")
    io, ii = s[y].split(y.op.axis[0], factor=4)
    s[y].parallel(io)
    s[yl].compute_at(s[y], ii)


def _sched_cache_write_after_split(s, y):
    # cache_write after a split with a tail (41 rows by 4): the cache's axes are the split loops, and
    # its ragged bounds are read only for rows that exist (no row_ptr[42])
    s[y].split(y.op.axis[0], factor=4)
    yl = s.cache_write(y, "local")
    io, ii = s[y].split(y.op.axis[0], factor=4)
    s[y].parallel(io)
    s[yl].compute_at(s[y], io)


SCHEDULES = [_sched_none, _sched_split_parallel, _sched_dynamic_unroll, _sched_nparts,
             _sched_rfactor_vectorize, _sched_rfactor_parallel_lanes, _sched_vector_accumulators,
             _sched_vectorize_whole_ragged_axis, _sched_cache_write, _sched_cache_write_after_split]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=[f.__name__[7:] for f in SCHEDULES])
def test_spmv_schedules_match_scipy(schedule, rng, check_llvm):
    rows, cols = 41, 37
    row_ptr, col_idx, val = ragged_matrix(rng, rows, cols)
    x = rng.uniform(-1, 1, cols).astype("float32")
    args = spmv_te()
    rowptr_t, colidx_t, val_t, x_t, y = args
    s = te.create_schedule(y.op)
    schedule(s, y)
    want = scipy_csr(row_ptr, col_idx, val, cols) @ x
    check_llvm(s, list(args), {rowptr_t: row_ptr, colidx_t: col_idx, val_t: val, x_t: x},
               expected={y: want}, scalars={row_count_var(rowptr_t): rows}, rtol=1e-4, atol=1e-5)


def test_constant_sizes_and_computed_row_pointers(rng, check_llvm):
    """The bounds read a tensor computed by another stage (a triangular sum: itself a ragged axis
    whose extent is the output's index): that stage is computed first, as an input of the
    consumer's bounds."""
    rows, cols = 23, 19
    row_ptr, col_idx, val = ragged_matrix(rng, rows, cols)
    counts = np.diff(row_ptr).astype("int32")
    cnt = te.placeholder((rows,), dtype="int32", name="cnt")

    def prefix(i):
        k = te.reduce_axis((0, i), "k")
        return te.sum(cnt[k], axis=k)
    rowptr = te.compute((rows + 1,), prefix, name="rowptr")
    colidx = te.placeholder((len(val),), dtype="int32", name="colidx")
    v = te.placeholder((len(val),), name="val")
    x = te.placeholder((cols,), name="x")

    def row(i):
        j = te.reduce_axis((rowptr[i], rowptr[i + 1]), "j")
        return te.sum(v[j] * x[colidx[j]], axis=j)
    y = te.compute((rows,), row, name="y")
    s = te.create_schedule(y.op)
    xv = rng.uniform(-1, 1, cols).astype("float32")
    want = scipy_csr(row_ptr, col_idx, val, cols) @ xv
    check_llvm(s, [cnt, colidx, v, x, y], {cnt: counts, colidx: col_idx, v: val, x: xv},
               expected={y: want}, rtol=1e-4, atol=1e-5)


def test_triangular_axis_with_where_and_init(rng, check_llvm):
    """Bounds that are expressions of the output's axis alone (``0 .. i + 1``), with ``where=``
    and ``init=``: a running maximum of the positive values, starting from B[i]."""
    n = 29
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")

    def run(i):
        k = te.reduce_axis((0, i + 1), "k")
        return te.max(A[k], axis=k, where=A[k] > 0, init=B[i])
    C = te.compute((n,), run, name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    a = rng.uniform(-1, 1, n).astype("float32")
    b = rng.uniform(-1, 1, n).astype("float32")
    want = np.array([max([b[i]] + [v for v in a[:i + 1] if v > 0]) for i in range(n)], "float32")
    check_llvm(s, [A, B, C], {A: a, B: b}, expected={C: want})


def test_interpreter_ragged_matches_numpy_loop(rng):
    rows, cols = 30, 12
    row_ptr, col_idx, val = ragged_matrix(rng, rows, cols)
    x = rng.uniform(-1, 1, cols).astype("float32")
    rowptr_t, colidx_t, val_t, x_t, y = spmv_te(rows, cols, len(val))
    got = evaluate(y, {rowptr_t: row_ptr, colidx_t: col_idx, val_t: val, x_t: x}, budget=64)
    want = np.array([sum(val[j] * x[col_idx[j]] for j in range(row_ptr[i], row_ptr[i + 1]))
                     for i in range(rows)], "float32")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_lowered_bounds_are_loaded_once_per_row():
    args = spmv_te()
    s = te.create_schedule(args[-1].op)
    text = str(tilecraft.lower(s, list(args), target="llvm"))
    # the loop's body reads the row's start through its symbol, not through rowptr again
    loop = text[text.index("for j"):]
    assert "rowptr" not in loop and "j.min" in loop


# ---- errors ------------------------------------------------------------------------------------

def test_error_reorder_ragged_axis_outside_its_row():
    args = spmv_te()
    y = args[-1]
    s = te.create_schedule(y.op)
    s[y].reorder(y.op.reduce_axis[0], y.op.axis[0])
    with pytest.raises(ScheduleError, match=r"stage 'y': the bounds of the ragged axis 'j' \(min `rowptr\[i\]`, "
                                            r"extent `rowptr\[i \+ 1\] - rowptr\[i\]`\) depend on loop 'i', which runs "
                                            r"inside loop 'j' of that axis; reorder"):
        tilecraft.lower(s, list(args))


def test_error_rfactor_of_ragged_outer_part():
    args = spmv_te()
    y = args[-1]
    s = te.create_schedule(y.op)
    jo, ji = s[y].split(y.op.reduce_axis[0], factor=8)
    with pytest.raises(ScheduleError, match=r"rfactor of 'y': axis 'j.outer' comes from the ragged axis\(es\) 'j' "
                                            r"and has no fixed extent .*factor its constant inner part"):
        s.rfactor(y, jo)


def test_error_bounds_read_an_inlined_stage():
    n = 8
    P = te.placeholder((n + 1,), dtype="int32", name="P")
    Q = te.compute((n + 1,), lambda i: P[i] + 0, name="Q")
    A = te.placeholder((64,), name="A")

    def row(i):
        j = te.reduce_axis((Q[i], Q[i + 1]), "j")
        return te.sum(A[j], axis=j)
    y = te.compute((n,), row, name="y")
    s = te.create_schedule(y.op)
    s[Q].compute_inline()
    with pytest.raises(ScheduleError, match=r"stage 'y': the bounds of a ragged reduce axis read 'Q', which is "
                                            r"inlined \(compute_inline\)"):
        tilecraft.lower(s, [P, A, y])


def test_error_bounds_read_out_of_bounds():
    n = 8
    P = te.placeholder((n + 1,), dtype="int32", name="P")
    A = te.placeholder((64,), name="A")

    def row(i):
        j = te.reduce_axis((P[i], P[i + 2]), "j")
        return te.sum(A[j], axis=j)
    y = te.compute((n,), row, name="y")
    with pytest.raises(IndexBoundsError, match=r"compute 'y' reads P\[i \+ 2\] out of bounds"):
        tilecraft.lower(te.create_schedule(y.op), [P, A, y])


def test_error_bounds_use_another_reduce_axis():
    A = te.placeholder((8, 8), name="A")
    j = te.reduce_axis((0, 8), "j")
    k = te.reduce_axis((0, j), "k")
    with pytest.raises(TEError, match=r"compute 'C': the bounds of the reduce axis 'k' use the reduce axis 'j'"):
        te.compute((1,), lambda _: te.sum(A[j, k], axis=[j, k]), name="C")


def test_where_is_evaluated_inside_the_split_tail_guard(rng, check_llvm):
    """``where=`` reading the tensor at the reduction's point, on a split with a tail: the
    condition must only be evaluated where the tail's guard holds (it was `guard and where`,
    both sides evaluated, so the bound-checked build read A[29] of a 29-element A)."""
    n = 29
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n), "k")
    C = te.compute((1,), lambda _: te.max(A[k], axis=k, where=A[k] > 0), name="C")
    s = te.create_schedule(C.op)
    s[C].split(k, factor=4)
    a = rng.uniform(-1, 1, n).astype("float32")
    a[3] = 0.5
    check_llvm(s, [A, C], {A: a}, expected={C: np.array([a[a > 0].max()], "float32")})
