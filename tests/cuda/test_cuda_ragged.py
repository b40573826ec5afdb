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
