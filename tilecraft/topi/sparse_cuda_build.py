"""Built GPU sparse operators that take the GPU libraries' CSR matrices and dense arrays.

``build_spmv_cuda`` / ``build_spmm_cuda`` compile :mod:`tilecraft.topi.sparse_cuda`'s schedules
into a :class:`SparseCUDAFunction`, the GPU twin of :class:`tilecraft.topi.sparse.SparseFunction`:
``f(A, x)`` with ``A`` one of

* a ``torch.sparse_csr_tensor`` on a CUDA device (int32 indices),
* a CuPy ``cupyx.scipy.sparse.csr_matrix``,
* ``(row_ptr, col_idx, val)``, three GPU arrays (anything with ``__cuda_array_interface__``:
  torch / CuPy / ``tilecraft.runtime.cuda_ndarray``),

and ``x`` a dense GPU array (torch, CuPy or tilecraft). Nothing is copied: the kernels read the
matrix's own ``crow_indices`` / ``col_indices`` / ``values`` (``indptr`` / ``indices`` / ``data``)
and the dense operand through ``__cuda_array_interface__``, in the device's primary context (the
one torch and CuPy use), on the default stream. The output is a new array of the dense operand's
library (``torch.empty`` on its device, ``cupy.empty``, or ``cuda_ndarray.empty``), or ``out=``.

The kernels index with int32: a torch CSR tensor built with the default int64 indices is refused
with the conversion to write (``torch.sparse_csr_tensor(crow.int(), col.int(), val, size)``):
converting silently would copy both index arrays on every call. ``row_ptr``'s values are not
checked (that would read it back to the host on every call); its shape is.

``build_spmv_pieces_cuda`` / ``build_spmm_pieces_cuda`` (matrices with very long rows) take the
same arguments and cut the rows into pieces themselves (``split_rows``, on the host): one copy of
``row_ptr`` to the host and of the two piece arrays back, once per matrix object (a torch tensor
or a CuPy matrix; kept while the object lives; ``f.forget(A)`` after changing its ``row_ptr`` in
place), or on every call for three arrays.

>>> # A = torch.sparse_csr_tensor(crow.int(), col.int(), val, (m, n), device="cuda")
>>> # y = build_spmv_cuda(threads_per_row=4, rows_per_block=32)(A, x)      # x: torch, on the GPU
"""
from __future__ import annotations

import weakref

import numpy as np

from tilecraft import te

from .sparse import csr_spmm, csr_spmm_pieces, csr_spmv, csr_spmv_pieces, split_rows
from .sparse_cuda import schedule_spmm_cuda, schedule_spmm_pieces_cuda, schedule_spmv_cuda, schedule_spmv_pieces_cuda


def _gpu_array(a):
    """``(shape, dtype)`` of an array on the GPU (``__cuda_array_interface__``), or None."""
    try:
        iface = a.__cuda_array_interface__
    except AttributeError:                          # not a GPU array (a torch CPU tensor raises this too)
        return None
    except RuntimeError as e:                       # torch: a tensor that requires grad
        raise ValueError(f"a {type(a).__name__} on the GPU that cannot be shared as it is: {e}") from None
    return tuple(iface["shape"]), np.dtype(iface["typestr"])


def _check_gpu0(a, what: str, name: str) -> None:
    """Refuse an array on a GPU other than 0 (the runtime launches on GPU 0): torch's
    ``device.index``, CuPy's ``device.id``; an array that says nothing passes."""
    dev = getattr(a, "device", None)
    for attr in ("index", "id"):
        index = getattr(dev, attr, None)
        if isinstance(index, int) and index != 0:
            raise ValueError(f"{what}: {name} is on GPU {index}; the built functions run on GPU 0 "
                             f"(tilecraft.cuda(0)): move it there (torch: .to('cuda:0'), CuPy: cupy.asarray "
                             f"under cupy.cuda.Device(0))")


def _library(a) -> str:
    return type(a).__module__.split(".")[0]


def gpu_csr_arrays(A, what: str):
    """``(row_ptr, col_idx, val, shape)`` of a CSR matrix on the GPU, the arrays themselves (no
    copy); ``shape`` is None for three arrays. Raises TypeError / ValueError naming what is wrong.

    >>> # row_ptr, col_idx, val, (m, n) = gpu_csr_arrays(torch_csr_tensor, "csr_spmv")
    """
    shape = None
    if callable(getattr(A, "crow_indices", None)) or hasattr(A, "layout"):          # a torch tensor
        layout = str(A.layout).replace("torch.", "")
        if layout != "sparse_csr":
            hint = "A.to_sparse_csr()" if layout in ("sparse_coo", "sparse_csc", "strided") else "a CSR tensor"
            raise TypeError(f"{what}: expected a CSR matrix, got a torch tensor of layout {layout} (use {hint})")
        if A.device.type != "cuda":
            raise ValueError(f"{what}: the CSR tensor is on the {A.device.type} device; move it to the GPU "
                             f"(A.cuda()) or use the CPU function (tilecraft.topi.sparse.build_spmv / build_spmm)")
        if len(A.shape) != 2:
            raise ValueError(f"{what}: expected a 2-D CSR matrix, got a tensor of shape {tuple(A.shape)} "
                             f"(batched CSR is not supported)")
        arrays, names = (A.crow_indices(), A.col_indices(), A.values()), ("crow_indices", "col_indices", "values")
        shape = tuple(int(d) for d in A.shape)
    elif getattr(A, "format", None) not in (None, "csr") and hasattr(A, "data") and hasattr(A, "tocsr"):
        # a CuPy or scipy sparse matrix in another format (COO has row/col, no indptr)
        lib = "CuPy" if _library(A).startswith("cupy") else "scipy"
        raise TypeError(f"{what}: expected a CSR matrix, got {lib}'s {A.format!r} format (use A.tocsr())")
    elif hasattr(A, "indptr") and hasattr(A, "indices") and hasattr(A, "data"):   # CuPy or scipy
        lib = "CuPy" if _library(A).startswith("cupy") else "scipy"
        if _gpu_array(A.indptr) is None:
            raise ValueError(f"{what}: the {lib} matrix is in host memory; use the CPU function "
                             f"(tilecraft.topi.sparse.build_spmv / build_spmm) or move it to the GPU "
                             f"(cupyx.scipy.sparse.csr_matrix(A))")
        arrays, names = (A.indptr, A.indices, A.data), ("indptr", "indices", "data")
        shape = tuple(int(d) for d in A.shape)
    elif isinstance(A, (tuple, list)) and len(A) == 3:
        arrays, names = tuple(A), ("row_ptr", "col_idx", "val")
    else:
        raise TypeError(f"{what}: expected a torch.sparse_csr_tensor on the GPU, a cupyx.scipy.sparse.csr_matrix "
                        f"or (row_ptr, col_idx, val) GPU arrays, got {type(A).__name__}")
    info = []
    for a, name in zip(arrays, names):
        got = _gpu_array(a)
        if got is None:
            raise ValueError(f"{what}: {name} is not on the GPU (a {type(a).__name__}); the GPU function takes "
                             f"arrays with __cuda_array_interface__ (torch / CuPy tensors on the GPU)")
        _check_gpu0(a, what, name)
        info.append(got)
    (rp_shape, rp_dtype), (ci_shape, ci_dtype), (v_shape, _) = info
    for name, dtype in ((names[0], rp_dtype), (names[1], ci_dtype)):
        if dtype != np.int32:
            raise TypeError(f"{what}: {name} has dtype {dtype.name}; the GPU kernels take int32 indices "
                            f"(torch: torch.sparse_csr_tensor(A.crow_indices().int(), A.col_indices().int(), "
                            f"A.values(), A.shape); CuPy: A.indptr.astype('int32'))")
    if len(rp_shape) != 1 or len(ci_shape) != 1 or ci_shape != v_shape or \
            (shape is not None and rp_shape[0] != shape[0] + 1):
        raise ValueError(f"{what}: {names[0]} must have rows + 1 entries and {names[1]} and {names[2]} one per "
                         f"nonzero (got shapes {rp_shape}, {ci_shape}, {v_shape}"
                         f"{f' for a {shape[0]} x {shape[1]} matrix' if shape else ''})")
    return (*arrays, shape)


def _empty_like(dense, shape: tuple, dtype: str):
    """A new GPU array of ``dense``'s library (torch on its device, CuPy, or tilecraft's)."""
    lib = _library(dense)
    if lib == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, dtype), device=dense.device)
    if lib == "cupy":
        import cupy
        return cupy.empty(shape, dtype)
    import tilecraft
    from tilecraft.runtime import cuda_ndarray
    return cuda_ndarray.empty(shape, dtype, tilecraft.cuda(0))


class SparseCUDAFunction:
    """A built GPU sparse operator: ``f(A, x)`` returns a new output array, ``f(A, x, out=y)``
    writes ``y`` (see the module for what ``A``, ``x`` and ``y`` may be). ``f.module`` is the
    compiled module (its arguments: the three arrays, the dense input, the output).

    >>> # Y = build_spmm_cuda(width=128)(A, X)
    """

    def __init__(self, module, what: str, dtype: str, width: int | None = None):
        self.module, self.what, self.dtype, self.width = module, what, dtype, width

    def _matrix_args(self, A, row_ptr, col_idx, val) -> tuple:
        """The module's arguments that describe the matrix."""
        return row_ptr, col_idx, val

    def __call__(self, A, dense, out=None):
        row_ptr, col_idx, val, shape = gpu_csr_arrays(A, self.what)
        got = _gpu_array(dense)
        if got is None:
            raise ValueError(f"{self.what}: the dense operand is not on the GPU (a {type(dense).__name__}); pass a "
                             f"torch / CuPy array on the GPU")
        _check_gpu0(dense, self.what, "the dense operand")
        if out is not None:
            _check_gpu0(out, self.what, "the output")
        dshape = got[0]
        want_dims = 1 if self.what == "csr_spmv" else 2
        if len(dshape) != want_dims or (shape is not None and dshape[0] != shape[1]) or \
                (self.width is not None and dshape[1] != self.width):
            cols = shape[1] if shape is not None else "cols"
            want = (cols,) if want_dims == 1 else (cols, self.width or "width")
            raise ValueError(f"{self.what}: the dense operand must have the shape {want}, got {dshape}")
        rows = (shape[0] if shape is not None else _gpu_array(row_ptr)[0][0] - 1)
        out_shape = (rows,) if want_dims == 1 else (rows, dshape[1])
        if out is None:
            out = _empty_like(dense, out_shape, self.dtype)
        self.module(*self._matrix_args(A, row_ptr, col_idx, val), dense, out)
        return out


def _to_host(a) -> np.ndarray:
    """A GPU array's contents on the host (one copy)."""
    from tilecraft.runtime.cuda_runtime import driver
    shape, dtype = _gpu_array(a)
    host = np.empty(shape, dtype)
    driver().memcpy_dtoh(host, a.__cuda_array_interface__["data"][0])
    return host


def _to_device(a: np.ndarray):
    import tilecraft
    from tilecraft.runtime import cuda_ndarray
    return cuda_ndarray.array(a, tilecraft.cuda(0))


class SparsePiecesCUDAFunction(SparseCUDAFunction):
    """A built GPU operator over pieces (``csr_spmv_pieces`` / ``csr_spmm_pieces``) that takes a
    CSR matrix as :class:`SparseCUDAFunction` does and cuts its rows into pieces of at most
    ``piece_len`` nonzeros itself, once per matrix object (see the module). ``to_host`` /
    ``to_device`` copy an array (injected in tests)."""

    def __init__(self, module, what: str, dtype: str, piece_len: int, width: int | None = None,
                 to_host=_to_host, to_device=_to_device):
        super().__init__(module, what, dtype, width)
        self.piece_len, self.to_host, self.to_device = piece_len, to_host, to_device
        self._pieces: dict = {}             # id(matrix) -> (weak reference to it, the pieces on the GPU)

    def _matrix_args(self, A, row_ptr, col_idx, val) -> tuple:
        return (*self.derived(A, row_ptr), col_idx, val)

    def derived(self, A, row_ptr) -> tuple:
        """``derive(row_ptr)`` on the GPU, made once per object ``A`` (the matrix, or the offsets
        array of a segment / bag function) while it lives."""
        hit = self._pieces.get(id(A))
        if hit is not None and hit[0]() is A:
            return hit[1]
        pieces = tuple(self.to_device(a) for a in self.derive(self.to_host(row_ptr)))
        try:                                # keyed by identity: CuPy / scipy matrices are not hashable
            ref = weakref.ref(A, lambda _, key=id(A), cache=self._pieces: cache.pop(key, None))
        except TypeError:                   # a tuple of arrays: not weakly referable, cut on every call
            ref = None
        if ref is not None:
            self._pieces[id(A)] = (ref, pieces)
        return pieces

    def derive(self, row_ptr: np.ndarray) -> tuple:
        """The host arrays the kernel takes before ``col_idx`` and ``val``, made from ``row_ptr``
        once per matrix: the pieces (overridden by the SDDMM function: the row of each nonzero)."""
        return split_rows(row_ptr, self.piece_len)

    def forget(self, A) -> None:
        """Drop the pieces cut for ``A`` (after its ``row_ptr`` changed in place)."""
        self._pieces.pop(id(A), None)


def build_spmv_cuda(threads_per_row: int = 4, rows_per_block: int = 32, dtype: str = "float32",
                    target: str = "cuda") -> SparseCUDAFunction:
    """``y = A @ x`` on the GPU with :func:`~tilecraft.topi.sparse_cuda.schedule_spmv_cuda` (any
    size); takes torch / CuPy CSR matrices (see the module).

    >>> f = build_spmv_cuda(threads_per_row=4, rows_per_block=32)
    >>> # y = f(torch_csr_on_gpu, x_on_gpu)
    """
    import tilecraft
    args = csr_spmv(dtype=dtype)
    s = schedule_spmv_cuda(te.create_schedule(args[-1].op), args[-1], threads_per_row, rows_per_block)
    return SparseCUDAFunction(tilecraft.build(s, list(args), target=target, name="csr_spmv"), "csr_spmv", dtype)


def build_spmm_cuda(rows_per_block: int = 4, threads_x: int = 32, vector: int = 4, local: bool = True,
                    unroll: int = 2, width: int | None = None, dtype: str = "float32",
                    target: str = "cuda") -> SparseCUDAFunction:
    """``Y = A @ X`` on the GPU with :func:`~tilecraft.topi.sparse_cuda.schedule_spmm_cuda`;
    ``width``: the number of columns of ``X`` it is built for (None: any; a constant multiple of
    ``vector`` gets vector loads). Takes torch / CuPy CSR matrices (see the module).

    >>> f = build_spmm_cuda(width=128)
    >>> # Y = f(torch_csr_on_gpu, X_on_gpu)
    """
    import tilecraft
    args = csr_spmm(width=width, dtype=dtype)
    s = schedule_spmm_cuda(te.create_schedule(args[-1].op), args[-1], rows_per_block, threads_x, vector, local,
                           unroll)
    mod = tilecraft.build(s, list(args), target=target, name="csr_spmm")
    return SparseCUDAFunction(mod, "csr_spmm", dtype, width)


def build_spmv_pieces_cuda(piece_len: int = 256, threads_per_piece: int = 32, pieces_per_block: int = 8,
                           dtype: str = "float32", target: str = "cuda") -> SparsePiecesCUDAFunction:
    """``y = A @ x`` on the GPU over rows cut into pieces of at most ``piece_len`` nonzeros
    (:func:`~tilecraft.topi.sparse_cuda.schedule_spmv_pieces_cuda`: for matrices with very long
    rows); takes what :func:`build_spmv_cuda` takes and cuts the rows itself (see the module).

    >>> f = build_spmv_pieces_cuda(piece_len=1024, threads_per_piece=32, pieces_per_block=8)
    >>> # y = f(torch_csr_on_gpu, x_on_gpu)
    """
    import tilecraft
    args = csr_spmv_pieces(dtype=dtype)
    s = schedule_spmv_pieces_cuda(te.create_schedule(args[-1].op), args[-1], threads_per_piece, pieces_per_block)
    mod = tilecraft.build(s, list(args), target=target, name="csr_spmv_pieces")
    return SparsePiecesCUDAFunction(mod, "csr_spmv", dtype, piece_len)


def build_spmm_pieces_cuda(piece_len: int = 128, pieces_per_block: int = 4, threads_x: int = 32, vector: int = 2,
                           local: bool = True, unroll: int = 1, width: int | None = None, dtype: str = "float32",
                           target: str = "cuda") -> SparsePiecesCUDAFunction:
    """``Y = A @ X`` on the GPU over rows cut into pieces of at most ``piece_len`` nonzeros
    (:func:`~tilecraft.topi.sparse_cuda.schedule_spmm_pieces_cuda`); takes what
    :func:`build_spmm_cuda` takes and cuts the rows itself (see the module).

    >>> f = build_spmm_pieces_cuda(piece_len=128, width=64)
    >>> # Y = f(torch_csr_on_gpu, X_on_gpu)
    """
    import tilecraft
    args = csr_spmm_pieces(width=width, dtype=dtype)
    s = schedule_spmm_pieces_cuda(te.create_schedule(args[-1].op), args[-1], pieces_per_block, threads_x, vector,
                                  local, unroll)
    mod = tilecraft.build(s, list(args), target=target, name="csr_spmm_pieces")
    return SparsePiecesCUDAFunction(mod, "csr_spmm", dtype, piece_len, width)
