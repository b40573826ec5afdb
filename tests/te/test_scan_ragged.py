"""A ``te.scan`` whose body reduces over a ragged axis (``x[t] = A @ x[t - 1] + ...`` with A in
CSR): both features of the merge of tvm-te2 with main at once. The ragged axis's bounds are
loaded inside the scan's loop, the interpreter evaluates each row's range at every step, and the
GPU's kernels run once per step with a thread per row; checked against scipy on matrices with
empty, one-element and full rows, on poisoned outputs."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.interp import evaluate


def csr_square(rng, n: int):
    """CSR arrays of an ``n x n`` matrix whose rows are empty, one element long, full, and of
    random lengths, in a random order."""
    lengths = rng.permutation(np.concatenate([[0, 0, 1, n, n - 1], rng.integers(0, n, n - 5)]))
    cols = [np.sort(rng.choice(n, k, replace=False)) for k in lengths]
    row_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype("int32")
    col_idx = np.concatenate(cols).astype("int32")
    val = rng.uniform(-0.3, 0.3, len(col_idx)).astype("float32")
    return row_ptr, col_idx, val


def sparse_recurrence():
    """``res[0] = X[0]``; ``res[t] = A @ res[t - 1] + 0.5 * res[t - 1] + X[t]``."""
    m, n, nnz = te.var("m"), te.var("n"), te.var("nnz")
    X = te.placeholder((m, n), name="X")
    rowptr = te.placeholder((n + 1,), dtype="int32", name="rowptr")
    colidx = te.placeholder((nnz,), dtype="int32", name="colidx")
    val = te.placeholder((nnz,), name="val")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")

    def row(t, i):
        j = te.reduce_axis((rowptr[i], rowptr[i + 1]), "j")
        return te.sum(val[j] * state[t - 1, colidx[j]], axis=j)
    spmv = te.compute((m, n), row, name="spmv")
    update = te.compute((m, n), lambda t, i: spmv[t, i] + 0.5 * state[t - 1, i] + X[t, i], name="update")
    res = te.scan(init, update, state, inputs=[X, rowptr, colidx, val])
    return (X, rowptr, colidx, val, res), spmv, update


def reference(x, row_ptr, col_idx, val):
    import scipy.sparse as sp
    n = x.shape[1]
    a = sp.csr_matrix((val.astype("float64"), col_idx, row_ptr), shape=(n, n))
    r = x.astype("float64").copy()
    for t in range(1, len(r)):
        r[t] = a @ r[t - 1] + 0.5 * r[t - 1] + x[t]
    return r


def _default(s, spmv, update):
    pass


def _split_ragged_and_attach(s, spmv, update):
    # the nonzeros split with a tail, the rows in parallel chunks, spmv computed per row of update
    t, i = update.op.axis
    io, ii = s[update].split(i, factor=4)
    s[update].parallel(io)
    s[spmv].compute_at(s[update], ii)
    (j,) = spmv.op.reduce_axis
    s[spmv].split(j, factor=3)


def _rows_split_with_tail(s, spmv, update):
    t, i = spmv.op.axis
    io, ii = s[spmv].split(i, factor=5)
    s[spmv].unroll(ii)


@pytest.mark.parametrize("schedule", [_default, _split_ragged_and_attach, _rows_split_with_tail],
                         ids=["default", "split_ragged_and_attach", "rows_split_with_tail"])
def test_scan_over_a_ragged_reduction_matches_scipy(schedule, rng, check_llvm):
    n, steps = 23, 5
    row_ptr, col_idx, val = csr_square(rng, n)
    x = rng.uniform(-1, 1, (steps, n)).astype("float32")
    args, spmv, update = sparse_recurrence()
    X, rowptr, colidx, val_t, res = args
    s = te.create_schedule(res.op)
    schedule(s, spmv, update)
    check_llvm(s, list(args), {X: x, rowptr: row_ptr, colidx: col_idx, val_t: val},
               expected={res: reference(x, row_ptr, col_idx, val)}, rtol=1e-4, atol=1e-5)


def test_interpreter_reads_each_rows_range_at_every_step(rng):
    n, steps = 11, 4
    row_ptr, col_idx, val = csr_square(rng, n)
    x = rng.uniform(-1, 1, (steps, n)).astype("float32")
    (X, rowptr, colidx, val_t, res), _, _ = sparse_recurrence()
    got = evaluate(res, {X: x, rowptr: row_ptr, colidx: col_idx, val_t: val})
    np.testing.assert_allclose(got, reference(x, row_ptr, col_idx, val), rtol=1e-4, atol=1e-5)


def test_gpu_thread_per_row_runs_once_per_step_in_the_emulator(rng):
    from tilecraft.codegen.cuda_emulate import emulate
    from tilecraft.schedule.passes.gpu_lower import launch_program
    n, steps = 45, 4
    row_ptr, col_idx, val = csr_square(rng, n)
    x = rng.uniform(-1, 1, (steps, n)).astype("float32")
    args, spmv, update = sparse_recurrence()
    X, rowptr, colidx, val_t, res = args
    s = te.create_schedule(res.op)
    for stage in (res.op.init[0], spmv, update):
        xo, xi = s[stage].split(stage.op.axis[1], factor=32)
        s[stage].bind(xo, te.thread_axis("blockIdx.x"))
        s[stage].bind(xi, te.thread_axis("threadIdx.x"))
    f = tc.lower(s, list(args), target="cuda")
    _, program = launch_program(f.body)
    assert [k for k, _, _ in program] == ["kernel", "loop"] and len(program[1][2]) == 2
    y = np.full((steps, n), np.nan, "float32")
    emulate(f, [x, row_ptr, col_idx, val, y])
    np.testing.assert_allclose(y, reference(x, row_ptr, col_idx, val), rtol=1e-4, atol=1e-5)


def history_scan():
    """``res[t] = 0.5 * sum(res[0:t]) / t + X[t]``: a reduce axis whose extent is the step itself
    (ragged in the scan's time axis)."""
    m, n = te.var("m"), te.var("n")
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")

    def mean_of_past(t, i):
        j = te.reduce_axis((0, t), "j")
        return te.sum(state[j, i], axis=j)
    past = te.compute((m, n), mean_of_past, name="past")
    update = te.compute((m, n), lambda t, i: 0.5 * past[t, i] / t.astype("float32") + X[t, i], name="update")
    return X, past, te.scan(init, update, state, inputs=[X])


def history_reference(x):
    r = x.astype("float64").copy()
    for t in range(1, len(r)):
        r[t] = 0.5 * r[:t].sum(0) / t + x[t]
    return r


def test_interpreter_evaluates_a_step_dependent_ragged_range_at_that_step(rng):
    # the interpreter evaluated a ragged axis's bounds with the step axis from 0 (every step
    # summed nothing) before the merge passed the step to them
    X, _, res = history_scan()
    x = rng.uniform(-1, 1, (6, 7)).astype("float32")
    np.testing.assert_allclose(evaluate(res, {X: x}), history_reference(x), rtol=1e-5, atol=1e-6)


def test_step_dependent_ragged_range_compiled(rng, check_llvm):
    X, past, res = history_scan()
    s = te.create_schedule(res.op)
    (j,) = past.op.reduce_axis
    s[past].split(j, factor=4)
    x = rng.uniform(-1, 1, (9, 13)).astype("float32")
    check_llvm(s, [X, res], {X: x}, expected={res: history_reference(x)}, rtol=1e-5, atol=1e-6)
