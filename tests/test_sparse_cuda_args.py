"""The argument adaptation of the built GPU sparse functions (``topi/sparse_cuda_build.py``),
without a GPU: fake torch / CuPy objects exposing the same attributes (``layout``, ``device``,
``crow_indices()``, ``indptr``, ``__cuda_array_interface__``) and a recording module in place of
the compiled one; real torch CPU tensors for the refusals. The real thing runs in
``tests/cuda/test_cuda_sparse_torch.py`` on a GPU."""
from __future__ import annotations

import types

import numpy as np
import pytest

from tilecraft.topi.sparse_cuda_build import SparseCUDAFunction, gpu_csr_arrays


class FakeGPUArray:
    """An array "on the GPU": only ``__cuda_array_interface__`` (a fake pointer)."""

    def __init__(self, shape, typestr="<f4", ptr=0x1000, device=None):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "version": 3, "strides": None}
        if device is not None:                      # torch: device.index, CuPy: device.id
            self.device = device


class FakeTorchCSR:
    def __init__(self, rows, cols, nnz, index="<i4", device="cuda", layout="torch.sparse_csr"):
        self.layout, self.device, self.shape = layout, types.SimpleNamespace(type=device), (rows, cols)
        self._arrays = (FakeGPUArray((rows + 1,), index), FakeGPUArray((nnz,), index), FakeGPUArray((nnz,)))

    def crow_indices(self):
        return self._arrays[0]

    def col_indices(self):
        return self._arrays[1]

    def values(self):
        return self._arrays[2]


class FakeCupyCSR:
    __module__ = "cupyx.scipy.sparse._csr"          # where CuPy's csr_matrix lives: the library's name

    def __init__(self, rows, cols, nnz, fmt="csr"):
        self.format, self.shape = fmt, (rows, cols)
        self.data, self.nnz = FakeGPUArray((nnz,)), nnz
        if fmt == "csr":
            self.indptr, self.indices = FakeGPUArray((rows + 1,), "<i4"), FakeGPUArray((nnz,), "<i4")
        else:                                       # as CuPy's coo_matrix: row / col, no indptr
            self.row, self.col = FakeGPUArray((nnz,), "<i4"), FakeGPUArray((nnz,), "<i4")

    def tocsr(self):
        return FakeCupyCSR(self.shape[0], self.shape[1], self.nnz)


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


@pytest.mark.parametrize("make", [lambda: FakeTorchCSR(5, 7, 9), lambda: FakeCupyCSR(5, 7, 9)], ids=["torch", "cupy"])
def test_csr_objects_pass_their_own_arrays(make):
    A = make()
    row_ptr, col_idx, val, shape = gpu_csr_arrays(A, "csr_spmv")
    want = (A.crow_indices(), A.col_indices(), A.values()) if hasattr(A, "layout") else (A.indptr, A.indices, A.data)
    assert (row_ptr, col_idx, val) == want and all(a is b for a, b in zip((row_ptr, col_idx, val), want))
    assert shape == (5, 7)
    rec = Recorder()
    x, y = FakeGPUArray((7,)), FakeGPUArray((5,))
    assert SparseCUDAFunction(rec, "csr_spmv", "float32")(A, x, out=y) is y
    (call,) = rec.calls
    assert all(a is b for a, b in zip(call, (*want, x, y)))          # zero-copy: the objects themselves


def test_three_gpu_arrays_and_spmm_shapes():
    arrays = (FakeGPUArray((6,), "<i4"), FakeGPUArray((11,), "<i4"), FakeGPUArray((11,)))
    rec = Recorder()
    X, Y = FakeGPUArray((8, 16)), FakeGPUArray((5, 16))
    f = SparseCUDAFunction(rec, "csr_spmm", "float32", width=16)
    f(arrays, X, out=Y)
    assert rec.calls[0][:3] == arrays
    with pytest.raises(ValueError, match=r"csr_spmm: the dense operand must have the shape \(7, 16\), got \(8, 16\)"):
        f(FakeTorchCSR(5, 7, 11), X, out=Y)
    with pytest.raises(ValueError, match=r"csr_spmm: the dense operand must have the shape \('cols', 16\), "
                                         r"got \(8, 32\)"):
        f(arrays, FakeGPUArray((8, 32)), out=Y)


def test_output_allocated_with_tilecraft_for_tilecraft_arrays(monkeypatch):
    """Without ``out=``, the output comes from the dense operand's library (tilecraft's here)."""
    from tilecraft.runtime import cuda_ndarray
    made = []
    monkeypatch.setattr(cuda_ndarray, "empty", lambda shape, dtype, dev: made.append((shape, dtype)) or "Y")
    rec = Recorder()
    assert SparseCUDAFunction(rec, "csr_spmm", "float32")(FakeTorchCSR(5, 7, 9), FakeGPUArray((7, 24))) == "Y"
    assert made == [((5, 24), "float32")]


ERRORS = [
    (lambda: FakeTorchCSR(5, 7, 9, layout="torch.sparse_coo"), TypeError,
     r"csr_spmv: expected a CSR matrix, got a torch tensor of layout sparse_coo \(use A.to_sparse_csr\(\)\)"),
    (lambda: FakeTorchCSR(5, 7, 9, layout="torch.sparse_csc"), TypeError,
     r"csr_spmv: expected a CSR matrix, got a torch tensor of layout sparse_csc \(use A.to_sparse_csr\(\)\)"),
    (lambda: FakeTorchCSR(5, 7, 9, index="<i8"), TypeError,
     r"csr_spmv: crow_indices has dtype int64; the GPU kernels take int32 indices \(torch: "
     r"torch.sparse_csr_tensor\(A.crow_indices\(\).int\(\), A.col_indices\(\).int\(\), A.values\(\), A.shape\)"),
    (lambda: FakeTorchCSR(5, 7, 9, device="cpu"), ValueError,
     r"csr_spmv: the CSR tensor is on the cpu device; move it to the GPU \(A.cuda\(\)\) or use the CPU function"),
    (lambda: FakeCupyCSR(5, 7, 9, fmt="coo"), TypeError,
     r"csr_spmv: expected a CSR matrix, got CuPy's 'coo' format \(use A.tocsr\(\)\)"),
    (lambda: (FakeGPUArray((6,), "<i4"), np.zeros(9, "int32"), FakeGPUArray((9,))), ValueError,
     r"csr_spmv: col_idx is not on the GPU \(a ndarray\); the GPU function takes arrays with "
     r"__cuda_array_interface__"),
    (lambda: (FakeGPUArray((6,), "<i4"), FakeGPUArray((9,), "<i4"), FakeGPUArray((8,))), ValueError,
     r"csr_spmv: row_ptr must have rows \+ 1 entries and col_idx and val one per nonzero \(got shapes \(6,\), "
     r"\(9,\), \(8,\)\)"),
    (lambda: (FakeGPUArray((6,), "<i4"), FakeGPUArray((9,), "<i4", device=types.SimpleNamespace(index=1)),
              FakeGPUArray((9,))), ValueError,
     r"csr_spmv: col_idx is on GPU 1; the built functions run on GPU 0 \(tilecraft.cuda\(0\)\): move it there"),
    (lambda: "A", TypeError,
     r"csr_spmv: expected a torch.sparse_csr_tensor on the GPU, a cupyx.scipy.sparse.csr_matrix or "
     r"\(row_ptr, col_idx, val\) GPU arrays, got str"),
]


@pytest.mark.parametrize("make,error,message", ERRORS, ids=["coo", "csc", "int64", "cpu", "cupy_coo", "host_array",
                                                           "lengths", "gpu1", "other"])
def test_wrong_matrices_are_refused(make, error, message):
    with pytest.raises(error, match=message):
        SparseCUDAFunction(Recorder(), "csr_spmv", "float32")(make(), FakeGPUArray((7,)), out=FakeGPUArray((5,)))


def test_dense_operands_on_another_gpu_are_refused():
    f = SparseCUDAFunction(Recorder(), "csr_spmv", "float32")
    torch0, cupy0 = types.SimpleNamespace(index=0), types.SimpleNamespace(id=0)
    f(FakeTorchCSR(5, 7, 9), FakeGPUArray((7,), device=torch0), out=FakeGPUArray((5,), device=cupy0))
    with pytest.raises(ValueError, match=r"csr_spmv: the dense operand is on GPU 2; the built functions run on GPU 0"):
        f(FakeTorchCSR(5, 7, 9), FakeGPUArray((7,), device=types.SimpleNamespace(id=2)))
    with pytest.raises(ValueError, match=r"csr_spmv: the output is on GPU 1; "):
        f(FakeTorchCSR(5, 7, 9), FakeGPUArray((7,)), out=FakeGPUArray((5,), device=types.SimpleNamespace(index=1)))


def test_host_matrices_are_refused():
    """Real host objects: a scipy CSR matrix, a torch CSR tensor on the CPU, a dense CPU operand."""
    import scipy.sparse as sp
    A = sp.random(5, 7, 0.3, format="csr", dtype="float32")
    with pytest.raises(ValueError, match=r"csr_spmv: the scipy matrix is in host memory; use the CPU function "
                                         r"\(tilecraft.topi.sparse.build_spmv / build_spmm\)"):
        gpu_csr_arrays(A, "csr_spmv")
    torch = pytest.importorskip("torch")
    T = torch.sparse_csr_tensor(torch.tensor([0, 1, 1], dtype=torch.int32), torch.tensor([2], dtype=torch.int32),
                                torch.tensor([1.5]), (2, 3))
    with pytest.raises(ValueError, match=r"csr_spmv: the CSR tensor is on the cpu device"):
        gpu_csr_arrays(T, "csr_spmv")
    with pytest.raises(TypeError, match=r"layout sparse_coo"):
        gpu_csr_arrays(T.to_sparse_coo(), "csr_spmv")
    with pytest.raises(ValueError, match=r"csr_spmv: the dense operand is not on the GPU \(a Tensor\)"):
        SparseCUDAFunction(Recorder(), "csr_spmv", "float32")(FakeTorchCSR(2, 3, 1), torch.ones(3))


def test_piece_functions_cut_once_per_matrix():
    """The piece functions cut ``row_ptr`` (copied to the host) into pieces once per matrix
    object, pass the pieces with the matrix's own col_idx / val, cut again after ``forget`` and
    on every call for three arrays."""
    from tilecraft.topi.sparse import split_rows
    from tilecraft.topi.sparse_cuda_build import SparsePiecesCUDAFunction
    row_ptr = np.array([0, 0, 1, 9, 9, 12], np.int32)               # empty, one-element, long rows
    copies = []

    def to_host(a):
        copies.append(a)
        return row_ptr

    rec = Recorder()
    f = SparsePiecesCUDAFunction(rec, "csr_spmv", "float32", piece_len=3, to_host=to_host, to_device=lambda a: a)
    A = FakeTorchCSR(5, 7, 12)
    x, y = FakeGPUArray((7,)), FakeGPUArray((5,))
    f(A, x, out=y)
    f(A, x, out=y)
    assert copies == [A.crow_indices()]
    want_ptr, want_rows = split_rows(row_ptr, 3)
    for call in rec.calls:
        np.testing.assert_array_equal(call[0], want_ptr)
        np.testing.assert_array_equal(call[1], want_rows)
        assert call[2] is A.col_indices() and call[3] is A.values() and call[4] is x and call[5] is y
    f.forget(A)
    f(A, x, out=y)
    assert len(copies) == 2
    arrays = (FakeGPUArray((6,), "<i4"), FakeGPUArray((12,), "<i4"), FakeGPUArray((12,)))
    f(arrays, x, out=y)
    f(arrays, x, out=y)
    assert len(copies) == 4

    class Unhashable(FakeCupyCSR):                                  # as CuPy's and scipy's matrices
        __hash__ = None

    B = Unhashable(5, 7, 12)
    f(B, x, out=y)
    f(B, x, out=y)
    assert len(copies) == 5
    del A, B                                                        # the cache holds no matrix alive
    import gc
    gc.collect()
    assert f._pieces == {}


def test_a_0d_host_array_stays_0d_on_the_gpu(monkeypatch):
    """``cuda_ndarray.array`` of a 0-d array (a full reduction's output) keeps its shape ``()``
    (``np.ascontiguousarray`` made it ``(1,)``, which a kernel's 0-d argument refused on the H100:
    "argument 2 'sum': expected 0 dimensions (), got shape (1,)"); ``copyfrom`` takes one too.
    The driver is a fake: no GPU needed."""
    from tilecraft.runtime import cuda_ndarray, cuda_runtime

    class FakeDriver:
        copies = []

        def mem_alloc(self, n):
            return 4096

        def memcpy_htod(self, ptr, src):
            self.copies.append((ptr, src.shape))
    monkeypatch.setattr(cuda_runtime, "driver", lambda: FakeDriver())
    monkeypatch.setattr(cuda_runtime, "context", lambda index: None)
    a = cuda_ndarray.array(np.full((), 3.0, "float32"))
    assert a.shape == () and a.ndim == 0 and a.nbytes == 4
    a.copyfrom(np.full((), 1.0, "float32"))
    assert FakeDriver.copies == [(4096, ()), (4096, ())]
    assert cuda_ndarray.array(np.ones((2, 3), "float32")[:, ::2]).shape == (2, 2)
