"""``topi.sparse_cuda``'s piece schedules: the rows of a CSR matrix cut on the host into pieces
of at most ``piece_len`` nonzeros (``split_rows``), a first kernel summing each piece with the
row schedules (a warp, a few lanes or a thread per piece), a second summing each row's pieces.
Emulated against scipy on matrices with empty rows, one-element rows and rows as long as the
matrix is wide (pieces that end in a tail, pieces of one element), outputs poisoned, and compiled
with nvcc; on a GPU, run there on a power-law matrix with rows of thousands of nonzeros."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.testing import poison
from tilecraft.topi import sparse, sparse_cuda

from .test_cuda_ops import gpu_available
from .test_cuda_ragged import sparse_scipy

pytestmark = pytest.mark.cuda

# (threads_per_piece, pieces_per_block, piece_len): a warp per piece, merged pieces, a thread per
# piece; pieces shorter than, equal to and longer than the lanes; piece_len 1: every nonzero alone
SPMV_PIECES = [(32, 2, 40), (8, 8, 8), (4, 16, 13), (2, 3, 1), (1, 64, 5), (16, 2, 100)]


def _matrix(rng, rows, cols):
    from test_ragged import ragged_matrix
    return ragged_matrix(rng, rows, cols)


def _nvcc(src):
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and emulated but not compiled")
    assert len(compile_cuda(src, "sm_90")) > 0


@pytest.mark.parametrize("tpp,ppb,piece_len", SPMV_PIECES, ids=[f"{t}x{p}_len{n}" for t, p, n in SPMV_PIECES])
def test_spmv_pieces_emulated_and_compiled(tpp, ppb, piece_len, rng):
    rows, cols = 45, 70
    row_ptr, col_idx, val = _matrix(rng, rows, cols)
    x = rng.uniform(-1, 1, cols).astype("float32")
    want = sparse_scipy(row_ptr, col_idx, val, cols).astype(np.float64) @ x.astype(np.float64)
    piece_ptr, row_pieces = sparse.split_rows(row_ptr, piece_len)
    args = sparse.csr_spmv_pieces()
    s = sparse_cuda.schedule_spmv_pieces_cuda(te.create_schedule(args[-1].op), args[-1], tpp, ppb, row_threads=32)
    func = tilecraft.lower(s, list(args), target="cuda")
    for variant in (0, 1):
        y = poison((rows,), "float32", variant)
        emulate(func, [piece_ptr, row_pieces, col_idx, val, x, y])        # every size from the arrays
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    src = generate_cuda(func)
    assert src.count("__global__") == 2                   # the pieces, then the rows
    if tpp > 1:
        assert f"tc_allreduce<float, {tpp}>" in src
    _nvcc(src)


@pytest.mark.parametrize("rows", [0, 6], ids=["no_rows", "all_empty"])
def test_spmv_pieces_without_pieces(rows):
    """No piece at all (every row empty, or no row): the piece kernel has no block to run, the
    rows are 0."""
    row_ptr = np.zeros(rows + 1, "int32")
    piece_ptr, row_pieces = sparse.split_rows(row_ptr, 8)
    assert len(piece_ptr) == 1
    args = sparse.csr_spmv_pieces()
    s = sparse_cuda.schedule_spmv_pieces_cuda(te.create_schedule(args[-1].op), args[-1], 4, 8, row_threads=32)
    y = poison((rows,), "float32")
    emulate(tilecraft.lower(s, list(args), target="cuda"),
            [piece_ptr, row_pieces, np.zeros(0, "int32"), np.zeros(0, "float32"), np.ones(5, "float32"), y])
    np.testing.assert_array_equal(y, np.zeros(rows, "float32"))


@pytest.mark.parametrize("ppb,tx,piece_len,vec,local,unroll", [(4, 32, 6, 1, False, 1), (2, 8, 1, 1, False, 1),
                                                                (8, 16, 70, 1, False, 1), (4, 4, 3, 4, True, 2),
                                                                (2, 8, 5, 2, False, 4)])
def test_spmm_pieces_emulated_and_compiled(ppb, tx, piece_len, vec, local, unroll, rng):
    rows, cols, width = 23, 31, 20                         # a column tail for every threads_x x vector
    row_ptr, col_idx, val = _matrix(rng, rows, cols)
    X = rng.uniform(-1, 1, (cols, width)).astype("float32")
    want = sparse_scipy(row_ptr, col_idx, val, cols).astype(np.float64) @ X.astype(np.float64)
    piece_ptr, row_pieces = sparse.split_rows(row_ptr, piece_len)
    args = sparse.csr_spmm_pieces()
    s = sparse_cuda.schedule_spmm_pieces_cuda(te.create_schedule(args[-1].op), args[-1], ppb, tx, vec, local, unroll)
    func = tilecraft.lower(s, list(args), target="cuda")
    Y = poison((rows, width), "float32")
    emulate(func, [piece_ptr, row_pieces, col_idx, val, X, Y])
    np.testing.assert_allclose(Y, want, rtol=1e-4, atol=1e-5)
    _nvcc(generate_cuda(func))


def test_pieces_schedule_error():
    *_, y = sparse.csr_spmv()
    with pytest.raises(ValueError, match=r"stage 'y' does not sum a piece stage 'part' \(build it with "
                                         r"csr_spmv_pieces or csr_spmm_pieces\)"):
        sparse_cuda.schedule_spmv_pieces_cuda(te.create_schedule(y.op), y)


def test_piece_templates_run_on_their_recipe(rng):
    """Configurations of ``topi/spmv_pieces.cuda`` and ``topi/spmm_pieces.cuda`` emulated on the
    ``csr_pieces`` recipe (what a device server makes too), against scipy on the matrix the
    pieces came from."""
    from tilecraft import autotune
    from tilecraft.autotune.local import cached_random_inputs, tensor_arg_info

    for name, args in (("topi/spmv_pieces.cuda", (70, 50, 6.0, "powerlaw", 7)),
                       ("topi/spmm_pieces.cuda", (40, 30, 3.0, "uniform", 2, 24))):
        task = autotune.task.create(name, args=args, target="cuda")
        assert autotune.inputs.input_recipe(task)[0] == "csr_pieces"
        space = task.config_space
        done = 0
        for index in rng.permutation(len(space)):
            cfg = space.get(int(index))
            s, tensors = task.instantiate(cfg)
            if cfg.errors:
                continue
            arrays = [a.copy() for a in cached_random_inputs(tensor_arg_info(tensors), 3, task)]
            piece_ptr, row_pieces, col_idx, val, dense, out = arrays
            row_ptr = piece_ptr[row_pieces]             # a row starts where its first piece does
            emulate(tilecraft.lower(s, tensors, target="cuda"), arrays)
            want = sparse_scipy(row_ptr, col_idx, val, args[1]).astype(np.float64) @ dense.astype(np.float64)
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} {cfg}")
            done += 1
            if done == 2:
                break
        assert done == 2


@pytest.mark.parametrize("tpp,ppb,piece_len", [(32, 4, 512), (4, 32, 64), (1, 128, 16)],
                         ids=["warp", "merged4", "thread"])
def test_spmv_pieces_on_gpu(tpp, ppb, piece_len, rng):
    why = gpu_available()
    if why:
        pytest.skip(why)
    from tilecraft.runtime import cuda_ndarray
    rows, cols = 20000, 30000
    row_ptr, col_idx, val = sparse.make_matrix(rows, cols, 20, "powerlaw", seed=int(rng.integers(1 << 30)))
    x = rng.uniform(-1, 1, cols).astype("float32")
    want = sparse_scipy(row_ptr, col_idx, val, cols).astype(np.float64) @ x.astype(np.float64)
    args = sparse.csr_spmv_pieces()
    s = sparse_cuda.schedule_spmv_pieces_cuda(te.create_schedule(args[-1].op), args[-1], tpp, ppb)
    f = tilecraft.build(s, list(args), target="cuda")
    dev = tilecraft.cuda(0)
    arrays = [cuda_ndarray.array(a, dev) for a in (*sparse.split_rows(row_ptr, piece_len), col_idx, val, x)]
    y = cuda_ndarray.array(poison((rows,), "float32"), dev)
    f(*arrays, y)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ppb,tx,piece_len", [(4, 32, 32), (2, 64, 128)])
def test_spmm_pieces_on_gpu(ppb, tx, piece_len, rng):
    why = gpu_available()
    if why:
        pytest.skip(why)
    from tilecraft.runtime import cuda_ndarray
    rows, cols, width = 8000, 9000, 64
    row_ptr, col_idx, val = sparse.make_matrix(rows, cols, 16, "powerlaw", seed=int(rng.integers(1 << 30)))
    X = rng.uniform(-1, 1, (cols, width)).astype("float32")
    want = sparse_scipy(row_ptr, col_idx, val, cols).astype(np.float64) @ X.astype(np.float64)
    args = sparse.csr_spmm_pieces(width=width)
    s = sparse_cuda.schedule_spmm_pieces_cuda(te.create_schedule(args[-1].op), args[-1], ppb, tx)
    f = tilecraft.build(s, list(args), target="cuda")
    dev = tilecraft.cuda(0)
    arrays = [cuda_ndarray.array(a, dev) for a in (*sparse.split_rows(row_ptr, piece_len), col_idx, val, X)]
    Y = cuda_ndarray.array(poison((rows, width), "float32"), dev)
    f(*arrays, Y)
    np.testing.assert_allclose(Y.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("make", [sparse.csr_spmv_pieces, sparse.csr_spmm_pieces], ids=["spmv", "spmm"])
def test_pieces_callers_pass_arrays_only(make):
    """Every size of the piece functions comes from the arrays (``piece_ptr``'s length is a
    dimension of its own), so ``f(piece_ptr, row_pieces, col_idx, val, dense, out)`` is the whole
    call, on the GPU as on the CPU."""
    from tilecraft.runtime.signature import signature_of
    args = make()
    s = te.create_schedule(args[-1].op)
    if make is sparse.csr_spmv_pieces:
        sparse_cuda.schedule_spmv_pieces_cuda(s, args[-1])
    else:
        sparse_cuda.schedule_spmm_pieces_cuda(s, args[-1])
    sig = signature_of(tilecraft.lower(s, list(args), target="cuda"))
    assert [p.name for p in sig.user_params()] == ["piece_ptr", "row_pieces", "col_idx", "val", args[4].name,
                                                   args[5].name]
