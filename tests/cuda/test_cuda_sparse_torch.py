"""The built GPU sparse functions (``topi/sparse_cuda_build.py``) on real torch and CuPy CSR
matrices and dense arrays, on a GPU, against scipy: no copy of the inputs (the output is a new
tensor of the dense operand's library, or ``out=``), the refusals with real objects. Without a
GPU (or torch / CuPy) these skip; ``tests/test_sparse_cuda_args.py`` checks the adaptation with
fakes everywhere."""
from __future__ import annotations

import numpy as np
import pytest

from tilecraft.topi import sparse

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda


def _need(lib):
    why = gpu_available()
    if why:
        pytest.skip(why)
    return pytest.importorskip(lib)


def _matrix(rng, rows=3000, cols=2500):
    from test_ragged import ragged_matrix
    return ragged_matrix(rng, rows, cols), cols


@pytest.fixture(scope="module")
def funcs():
    why = gpu_available()
    if why:
        pytest.skip(why)
    from tilecraft.topi import sparse_cuda_build as b
    return {"spmv": b.build_spmv_cuda(4, 32), "spmm": b.build_spmm_cuda(4, 32, 4, True, width=64),
            "spmm_any": b.build_spmm_cuda(4, 16, 1, True)}


def test_torch_csr(funcs, rng):
    torch = _need("torch")
    (row_ptr, col_idx, val), cols = _matrix(rng)
    rows = len(row_ptr) - 1
    A = torch.sparse_csr_tensor(*(torch.from_numpy(a).cuda() for a in (row_ptr, col_idx, val)), (rows, cols))
    import scipy.sparse as sp
    ref = sp.csr_matrix((val.astype(np.float64), col_idx, row_ptr), shape=(rows, cols))
    x = torch.rand(cols, device="cuda") * 2 - 1
    y = funcs["spmv"](A, x)
    assert isinstance(y, torch.Tensor) and y.device.type == "cuda" and y.shape == (rows,)
    np.testing.assert_allclose(y.cpu().numpy(), ref @ x.cpu().numpy().astype(np.float64), rtol=1e-4, atol=1e-4)
    for name, width in (("spmm", 64), ("spmm_any", 37)):
        X = torch.rand(cols, width, device="cuda") * 2 - 1
        Y = torch.full((rows, width), float("nan"), device="cuda")
        assert funcs[name](A, X, out=Y) is Y
        np.testing.assert_allclose(Y.cpu().numpy(), ref @ X.cpu().numpy().astype(np.float64), rtol=1e-4, atol=1e-4)
    with pytest.raises(TypeError, match=r"csr_spmv: crow_indices has dtype int64; the GPU kernels take int32"):
        funcs["spmv"](torch.sparse_csr_tensor(A.crow_indices().long(), A.col_indices().long(), A.values(),
                                              A.shape), x)
    with pytest.raises(TypeError, match=r"layout sparse_coo"):
        funcs["spmv"](A.to_sparse_coo(), x)
    with pytest.raises(ValueError, match=r"csr_spmv: the CSR tensor is on the cpu device"):
        funcs["spmv"](A.cpu(), x)


def test_cupy_csr(funcs, rng):
    cupy = _need("cupy")
    import cupyx.scipy.sparse as csp
    import scipy.sparse as sp
    (row_ptr, col_idx, val), cols = _matrix(rng)
    rows = len(row_ptr) - 1
    A = csp.csr_matrix((cupy.asarray(val), cupy.asarray(col_idx), cupy.asarray(row_ptr)), shape=(rows, cols))
    ref = sp.csr_matrix((val.astype(np.float64), col_idx, row_ptr), shape=(rows, cols))
    x = cupy.asarray(rng.uniform(-1, 1, cols).astype("float32"))
    y = funcs["spmv"](A, x)
    assert isinstance(y, cupy.ndarray) and y.shape == (rows,)
    np.testing.assert_allclose(cupy.asnumpy(y), ref @ cupy.asnumpy(x).astype(np.float64), rtol=1e-4, atol=1e-4)
    X = cupy.asarray(rng.uniform(-1, 1, (cols, 64)).astype("float32"))
    Y = funcs["spmm"](A, X)
    np.testing.assert_allclose(cupy.asnumpy(Y), ref @ cupy.asnumpy(X).astype(np.float64), rtol=1e-4, atol=1e-4)
    Y = funcs["spmm"]((A.indptr, A.indices, A.data), X)           # three CuPy arrays
    np.testing.assert_allclose(cupy.asnumpy(Y), ref @ cupy.asnumpy(X).astype(np.float64), rtol=1e-4, atol=1e-4)
    with pytest.raises(TypeError, match=r"expected a CSR matrix, got CuPy's 'coo' format \(use A.tocsr\(\)\)"):
        funcs["spmv"](A.tocoo(), x)


def test_torch_power_law_through_pieces(rng):
    """The piece functions on a power-law matrix (a row as long as the matrix is wide), torch in
    and out, against scipy; the pieces cut once and reused."""
    torch = _need("torch")
    import scipy.sparse as sp

    from tilecraft.topi import sparse_cuda_build as b
    rows = cols = 6000
    row_ptr, col_idx, val = sparse.make_matrix(rows, cols, 12, "powerlaw", seed=int(rng.integers(1 << 30)))
    A = torch.sparse_csr_tensor(*(torch.from_numpy(a).cuda() for a in (row_ptr, col_idx, val)), (rows, cols))
    ref = sp.csr_matrix((val.astype(np.float64), col_idx, row_ptr), shape=(rows, cols))
    x = torch.rand(cols, device="cuda") * 2 - 1
    f = b.build_spmv_pieces_cuda(piece_len=64, threads_per_piece=8, pieces_per_block=16)
    for _ in range(2):
        y = f(A, x)
        np.testing.assert_allclose(y.cpu().numpy(), ref @ x.cpu().numpy().astype(np.float64), rtol=1e-4, atol=1e-4)
    X = torch.rand(cols, 32, device="cuda") * 2 - 1
    Y = b.build_spmm_pieces_cuda(piece_len=128, pieces_per_block=4, threads_x=8, vector=4, width=32)(A, X)
    np.testing.assert_allclose(Y.cpu().numpy(), ref @ X.cpu().numpy().astype(np.float64), rtol=1e-4, atol=1e-4)
