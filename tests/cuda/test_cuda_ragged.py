"""Ragged reduce axes on CUDA: CSR SpMV with one thread per row and with one block of threads
per row (the nonzeros of a row split over the threads, then one cross-thread reduction), run in
the lock-step emulator against scipy and compiled with nvcc (``-arch=sm_90``); on a GPU, run
there too. (The GPU schedules and their tuning are the issue's next part; these check that the
language and the lowering already carry ragged loops to CUDA.)"""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.topi import sparse

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda


def thread_per_row(y):
    s = te.create_schedule(y.op)
    bx, tx = s[y].split(y.op.axis[0], factor=32)
    s[y].bind(bx, te.thread_axis("blockIdx.x"))
    s[y].bind(tx, te.thread_axis("threadIdx.x"))
    return s


def block_per_row(y, threads=32):
    s = te.create_schedule(y.op)
    jo, ji = s[y].split(y.op.reduce_axis[0], factor=threads)
    s[y].bind(y.op.axis[0], te.thread_axis("blockIdx.x"))
    s[y].bind(ji, te.thread_axis("threadIdx.x"))
    return s


def _matrix(rng, rows, cols):
    from test_ragged import ragged_matrix
    row_ptr, col_idx, val = ragged_matrix(rng, rows, cols)
    x = rng.uniform(-1, 1, cols).astype("float32")
    want = np.array([np.dot(val[a:b].astype(np.float64), x[col_idx[a:b]]) for a, b in zip(row_ptr[:-1], row_ptr[1:])])
    return row_ptr, col_idx, val, x, want


@pytest.mark.parametrize("schedule", [thread_per_row, block_per_row], ids=["thread_per_row", "block_per_row"])
def test_spmv_emulated_and_compiled(schedule, rng):
    rows, cols = 37, 41
    row_ptr, col_idx, val, x, want = _matrix(rng, rows, cols)
    args = sparse.csr_spmv()
    func = tilecraft.lower(schedule(args[-1]), list(args), target="cuda")
    y = np.full(rows, np.nan, "float32")
    emulate(func, [row_ptr, col_idx, val, x, y, rows, len(val), cols])
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    src = generate_cuda(func)
    assert "j_min = row_ptr[" in src and "j_extent = " in src
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and emulated but not compiled")
    assert len(compile_cuda(src, "sm_90")) > 0


@pytest.mark.parametrize("schedule", [thread_per_row, block_per_row], ids=["thread_per_row", "block_per_row"])
def test_spmv_on_gpu(schedule, rng):
    why = gpu_available()
    if why:
        pytest.skip(why)
    rows, cols = 3000, 2000
    row_ptr, col_idx, val, x, want = _matrix(rng, rows, cols)
    args = sparse.csr_spmv()
    f = tilecraft.build(schedule(args[-1]), list(args), target="cuda")
    from tilecraft.runtime import cuda_ndarray
    dev = tilecraft.cuda(0)
    arrays = [cuda_ndarray.array(a, dev) for a in (row_ptr, col_idx, val, x)]
    y = cuda_ndarray.array(np.full(rows, np.nan, "float32"), dev)
    f(*arrays, y)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# topi.sparse_cuda: warp per row, row merging (several short rows per warp), thread per row;
# SpMM with the dense columns on threadIdx.x

SPMV_GPU = [(32, 4), (32, 1), (8, 8), (4, 16), (2, 3), (1, 64)]      # (threads_per_row, rows_per_block)


def _spmv_func(threads_per_row, rows_per_block):
    from tilecraft.topi import sparse_cuda
    args = sparse.csr_spmv()
    s = sparse_cuda.schedule_spmv_cuda(te.create_schedule(args[-1].op), args[-1], threads_per_row, rows_per_block)
    return s, list(args)


@pytest.mark.parametrize("tpr,rpb", SPMV_GPU, ids=[f"{t}x{r}" for t, r in SPMV_GPU])
def test_topi_spmv_cuda_emulated_and_compiled(tpr, rpb, rng):
    """Rows of every kind (empty, one element, as long as the matrix is wide) in the emulator
    (races and divergent barriers checked), against scipy; the CUDA C compiles with nvcc."""
    rows, cols = 45, 70
    row_ptr, col_idx, val, x, want = _matrix(rng, rows, cols)
    s, args = _spmv_func(tpr, rpb)
    func = tilecraft.lower(s, args, target="cuda")
    y = np.full(rows, np.nan, "float32")
    emulate(func, [row_ptr, col_idx, val, x, y, rows, len(val), cols])
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    src = generate_cuda(func)
    if tpr > 1:
        assert f"tc_allreduce<float, {tpr}>" in src          # the row's lanes: one shuffle reduction
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and emulated but not compiled")
    assert len(compile_cuda(src, "sm_90")) > 0


def test_topi_spmv_cuda_error():
    from tilecraft.topi import sparse_cuda
    *_, y = sparse.csr_spmv()
    with pytest.raises(ValueError, match=r"schedule_spmv_cuda: threads_per_row must be 1, 2, 4, 8, 16 or 32 "
                                         r"\(lanes of one warp\), got 64"):
        sparse_cuda.schedule_spmv_cuda(te.create_schedule(y.op), y, threads_per_row=64)


SPMM_VARIANTS = [(4, 32, 1, False, 1, None), (2, 8, 1, False, 1, None), (2, 8, 4, True, 1, None),
                 (3, 4, 2, False, 2, None), (4, 8, 4, True, 1, 20), (4, 4, 4, False, 3, 20), (2, 8, 2, True, 4, 24),
                 (3, 2, 1, True, 2, 20), (2, 8, 4, True, 4, 32)]


@pytest.mark.parametrize("rpb,tx,vec,local,unroll,width", SPMM_VARIANTS,
                         ids=[f"{r}x{t}x{v}{'_local' if lo else ''}_u{u}_w{w or 'any'}"
                              for r, t, v, lo, u, w in SPMM_VARIANTS])
def test_topi_spmm_cuda_emulated_and_compiled(rpb, tx, vec, local, unroll, width, rng):
    """Rows per block x threads x columns a thread (vector loads where the constant width is a
    multiple), partial sums in registers or in Y, nonzeros a step (rows of every length: the
    unrolled loop's last block guarded); width 20 or symbolic: a column tail for every block row;
    width 24 and vector 2: 8-byte accesses."""
    from tilecraft.topi import sparse_cuda
    rows, cols, w = 23, 31, width or 20
    row_ptr, col_idx, val, _, _ = _matrix(rng, rows, cols)
    X = rng.uniform(-1, 1, (cols, w)).astype("float32")
    A = sparse_scipy(row_ptr, col_idx, val, cols)
    args = sparse.csr_spmm(width=width)
    s = sparse_cuda.schedule_spmm_cuda(te.create_schedule(args[-1].op), args[-1], rpb, tx, vec, local, unroll)
    func = tilecraft.lower(s, list(args), target="cuda")
    Y = np.full((rows, w), np.nan, "float32")
    emulate(func, [row_ptr, col_idx, val, X, Y, rows, len(val), cols] + ([w] if width is None else []))
    if width is not None and vec > 1 and w % vec == 0:
        assert {2: "uint2", 4: "uint4"}[vec] in generate_cuda(func), "no vector access of X"
    if local:                     # a thread's partial sums: its own `vector` columns, nothing more
        assert f"float Y_local[{vec}];" in generate_cuda(func)
    np.testing.assert_allclose(Y, A.astype(np.float64) @ X.astype(np.float64), rtol=1e-4, atol=1e-5)
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and emulated but not compiled")
    assert len(compile_cuda(generate_cuda(func), "sm_90")) > 0


@pytest.mark.parametrize("width", [128, 32, 20, 6, None])
def test_spmm_default_knobs(width, rng):
    """The knobs the templates use without a tuning log (the H100 mid run's best at widths 32 and
    128: 4 columns a thread, local, unroll 2; 2 columns for the pieces), emulated against scipy."""
    from tilecraft.topi import sparse_cuda
    knobs, pieces = sparse_cuda.default_spmm_knobs(width), sparse_cuda.default_spmm_pieces_knobs(width)
    want = {128: (4, 32, 4), 32: (8, 8, 4), 20: (12, 5, 4), 6: (10, 6, 1), None: (4, 32, 1)}[width]
    assert (knobs["rows_per_block"], knobs["threads_x"], knobs["vector"]) == want
    assert knobs["local"] and knobs["unroll"] == 2
    assert (pieces["threads_x"], pieces["vector"]) == {128: (32, 2), 32: (16, 2), 20: (10, 2), 6: (3, 2),
                                                       None: (32, 1)}[width]
    if width == 128:
        return                          # the shape as the others, only larger
    rows, cols, w = 23, 31, width or 14
    row_ptr, col_idx, val, _, _ = _matrix(rng, rows, cols)
    X = rng.uniform(-1, 1, (cols, w)).astype("float32")
    args = sparse.csr_spmm(width=width)
    s = sparse_cuda.schedule_spmm_cuda(te.create_schedule(args[-1].op), args[-1], **knobs)
    Y = np.full((rows, w), np.nan, "float32")
    emulate(tilecraft.lower(s, list(args), target="cuda"),
            [row_ptr, col_idx, val, X, Y, rows, len(val), cols] + ([w] if width is None else []))
    want_y = sparse_scipy(row_ptr, col_idx, val, cols).astype(np.float64) @ X.astype(np.float64)
    np.testing.assert_allclose(Y, want_y, rtol=1e-4, atol=1e-5)


def test_topi_spmm_cuda_vector_error():
    from tilecraft.topi import sparse_cuda
    *_, Y = sparse.csr_spmm()
    with pytest.raises(ValueError, match=r"schedule_spmm_cuda: vector must be 1, 2 or 4 \(columns a thread loads "
                                         r"as one 4-, 8- or 16-byte access\), got 3"):
        sparse_cuda.schedule_spmm_cuda(te.create_schedule(Y.op), Y, vector=3)
    with pytest.raises(ValueError, match=r"schedule_spmm_cuda: unroll must be an integer >= 1 \(nonzeros a step\), "
                                         r"got 0"):
        sparse_cuda.schedule_spmm_cuda(te.create_schedule(Y.op), Y, unroll=0)


def sparse_scipy(row_ptr, col_idx, val, cols):
    import scipy.sparse as sp
    return sp.csr_matrix((val, col_idx, row_ptr), shape=(len(row_ptr) - 1, cols))


def test_cuda_templates_run_on_their_matrix(rng):
    """A few configurations of ``topi/spmv.cuda`` and ``topi/spmm.cuda``, emulated on the
    templates' input recipe (the CSR matrix the device pool makes too), against scipy."""
    from tilecraft import autotune
    from tilecraft.autotune.local import cached_random_inputs, tensor_arg_info
    from tilecraft.topi import sparse_cuda  # noqa: F401 -- registers the templates

    for name, args in (("topi/spmv.cuda", (70, 50, 6.0, "powerlaw")), ("topi/spmm.cuda", (40, 30, 3.0, "uniform", 24))):
        task = autotune.task.create(name, args=args, target="cuda")
        space = task.config_space
        done = 0
        for index in rng.permutation(len(space)):
            cfg = space.get(space.valid_index(int(index)))
            s, tensors = task.instantiate(cfg)
            if cfg.errors:
                continue
            arrays = [a.copy() for a in cached_random_inputs(tensor_arg_info(tensors), 3, task)]
            row_ptr, col_idx, val, dense, out = arrays
            emulate(tilecraft.lower(s, tensors, target="cuda"), arrays)
            want = sparse_scipy(row_ptr, col_idx, val, args[1]).astype(np.float64) @ dense.astype(np.float64)
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} {cfg}")
            done += 1
            if done == 2:
                break
        assert done == 2


@pytest.mark.parametrize("tpr,rpb", [(32, 4), (4, 32), (1, 128)], ids=["warp", "merged4", "thread"])
def test_topi_spmv_cuda_on_gpu(tpr, rpb, rng):
    why = gpu_available()
    if why:
        pytest.skip(why)
    from tilecraft.runtime import cuda_ndarray
    from tilecraft.topi.sparse import make_matrix
    row_ptr, col_idx, val = make_matrix(5000, 4000, 20, "powerlaw", seed=int(rng.integers(1 << 30)))
    x = rng.uniform(-1, 1, 4000).astype("float32")
    want = sparse_scipy(row_ptr, col_idx, val, 4000).astype(np.float64) @ x.astype(np.float64)
    s, args = _spmv_func(tpr, rpb)
    f = tilecraft.build(s, args, target="cuda")
    dev = tilecraft.cuda(0)
    arrays = [cuda_ndarray.array(a, dev) for a in (row_ptr, col_idx, val, x)]
    y = cuda_ndarray.array(np.full(5000, np.nan, "float32"), dev)
    f(*arrays, y)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
