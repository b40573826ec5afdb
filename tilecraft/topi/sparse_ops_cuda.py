"""GPU schedules, tuning templates and built functions of SDDMM, segment sum / mean and embedding
bag (:mod:`tilecraft.topi.sparse`; the CPU side is :mod:`tilecraft.topi.sparse_ops`).

* SDDMM: a nonzero per ``threads_per_nonzero`` lanes of a warp, its depth strided over them
  (coalesced loads of a row of ``U`` and of ``V``) and summed by one cross-thread reduction (warp
  shuffles); ``nonzeros_per_block`` nonzeros of a block on ``threadIdx.y``. The SpMV schedule
  (:func:`~tilecraft.topi.sparse_cuda.schedule_spmv_cuda`) with the depth as the reduced axis::

      for j.block in blockIdx.x: for j in threadIdx.y:
        for k.outer: for k.inner in threadIdx.x: partial += val[j] * U[row[j], k] * V[col[j], k]
        out[j] = allreduce(partial) over threadIdx.x

* segment sum / mean and embedding bag (sum / mean): a segment (bag) per ``threadIdx.y`` row of
  a block, its dense width over ``threadIdx.x`` (``vector`` columns a thread), each thread walking
  the segment's rows with its sums in registers: the SpMM schedule
  (:func:`~tilecraft.topi.sparse_cuda.schedule_spmm_cuda`); a mean divides as it writes.

Templates ``topi/sddmm.cuda``, ``topi/segment_sum.cuda``, ``topi/embedding_bag.cuda`` (recipe
``csr_layout``, as the CPU templates). Built functions take torch / CuPy arrays on GPU 0 (SDDMM: a
``torch.sparse_csr_tensor``, a ``cupyx.scipy.sparse.csr_matrix`` or three arrays), int32 indices,
and return an array of the dense operand's library::

    f = build_embedding_bag_cuda("mean", dim=64)
    out = f(indices, weight, offsets)       # torch tensors on the GPU, offsets: bags + 1 entries (int32)
"""
from __future__ import annotations

import numpy as np

import tilecraft.autotune as autotune
from tilecraft import te

from .sparse import (_template_matrix_shape, _template_matrix_sizes, embedding_bag, embedding_bag_pieces, sddmm, segment_sum,
                     segment_sum_pieces)
from .sparse_cuda import (_check_columns, default_spmm_knobs, schedule_spmm_cuda, schedule_spmm_pieces_cuda,
                          schedule_spmv_cuda)
from .sparse_cuda_build import (SparsePiecesCUDAFunction, _check_gpu0, _empty_like, _gpu_array, _to_device,
                                _to_host, gpu_csr_arrays)
from .sparse_ops import bag_pieces_recipe, bag_recipe, sddmm_recipe, segment_pieces_recipe, segment_recipe


def schedule_sddmm_cuda(s, out, threads_per_nonzero: int = 32, nonzeros_per_block: int = 8):
    """SDDMM on the GPU (see the module): ``threads_per_nonzero`` lanes of a warp per nonzero
    (1 to 32, a power of two; 1: a thread per nonzero), ``nonzeros_per_block`` a block.

    >>> *_, out = sddmm(depth=64)
    >>> s = schedule_sddmm_cuda(te.create_schedule(out.op), out, threads_per_nonzero=16, nonzeros_per_block=16)
    """
    if threads_per_nonzero not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"schedule_sddmm_cuda: threads_per_nonzero must be 1, 2, 4, 8, 16 or 32 (lanes of one "
                         f"warp), got {threads_per_nonzero}")
    return schedule_spmv_cuda(s, out, threads_per_nonzero, nonzeros_per_block)


def default_sddmm_knobs(depth) -> dict:
    """SDDMM knobs without a tuning log: 8 lanes a nonzero (fewer for a depth under 8), 128
    threads a block: the best of ``bench/sparse_ops_cuda.py``'s variants at depth 64 on the H100
    and of a 16-trial tuning run (session 22's mid run; 32 lanes were 1.7x slower).

    >>> default_sddmm_knobs(64)
    {'threads_per_nonzero': 8, 'nonzeros_per_block': 16}
    """
    tpn = 8
    if isinstance(depth, int):
        while tpn > 1 and tpn > depth:
            tpn //= 2
    return {"threads_per_nonzero": tpn, "nonzeros_per_block": 128 // tpn}


# ---------------------------------------------------------------------------------------------
# tuning templates

@autotune.template("topi/sddmm.cuda")
def sddmm_cuda(rows: int, cols: int, nnz_per_row: float, pattern: str = "uniform", depth: int = 64,
               dtype: str = "float32"):
    """SDDMM on the GPU over the pattern of ``make_matrix(rows, cols, nnz_per_row, pattern)``:
    threads per nonzero (lanes over the depth) and nonzeros per block (32 to 1024 threads)."""
    cfg = autotune.get_config()
    cfg.define_knob("threads_per_nonzero", [1, 2, 4, 8, 16, 32])
    cfg.define_knob("nonzeros_per_block", [1, 2, 4, 8, 16, 32, 64, 128, 256])
    nnz = _template_matrix_sizes(rows, cols, nnz_per_row, pattern)
    cfg.add_flop(2.0 * nnz * depth + nnz)
    tensors = sddmm(rows, cols, nnz, depth, dtype)
    s = te.create_schedule(tensors[-1].op)
    if cfg.is_fallback:
        return schedule_sddmm_cuda(s, tensors[-1], **default_sddmm_knobs(depth)), list(tensors)
    tpn, npb = cfg["threads_per_nonzero"].val, cfg["nonzeros_per_block"].val
    if not 32 <= tpn * npb <= 1024:
        cfg.raise_error(f"{tpn} threads per nonzero x {npb} nonzeros per block is not 32 to 1024 threads a block")
    return schedule_sddmm_cuda(s, tensors[-1], tpn, npb), list(tensors)


def _rows_template(cfg, s, out, width: int):
    """The knobs of the row-wise templates (those of ``topi/spmm.cuda``) and the schedule."""
    cfg.define_knob("rows_per_block", [1, 2, 4, 8, 16])
    cfg.define_knob("threads_x", [t for t in (8, 16, 32, 64, 128) if t <= max(width, 8)])
    cfg.define_knob("vector", [1, 2, 4])
    cfg.define_knob("unroll", [1, 2, 4])
    if cfg.is_fallback:
        return schedule_spmm_cuda(s, out, **default_spmm_knobs(width))
    _check_columns(cfg, width)
    return schedule_spmm_cuda(s, out, cfg["rows_per_block"].val, cfg["threads_x"].val, cfg["vector"].val, True,
                              cfg["unroll"].val)


@autotune.template("topi/segment_sum.cuda")
def segment_sum_cuda(segments: int, nnz_per_segment: float, pattern: str = "powerlaw", width: int = 64,
                     mean: bool = False, dtype: str = "float32"):
    """Segment sum (``mean``: mean) on the GPU over segments of the row lengths of
    ``make_matrix(segments, segments, nnz_per_segment, pattern)``: segments per block, threads
    over the width, columns a thread, rows a step (unroll)."""
    cfg = autotune.get_config()
    length = _template_matrix_sizes(segments, segments, nnz_per_segment, pattern)
    cfg.add_flop(1.0 * length * width)
    tensors = segment_sum(segments, length, width, dtype, mean=bool(mean))
    s = te.create_schedule(tensors[-1].op)
    return _rows_template(cfg, s, tensors[-1], width), list(tensors)


@autotune.template("topi/embedding_bag.cuda")
def embedding_bag_cuda(bags: int, vocab: int, nnz_per_bag: float, pattern: str = "powerlaw", dim: int = 64,
                       mode: str = "sum", dtype: str = "float32"):
    """Embedding bag (``mode`` sum / mean) on the GPU over the bags and indices of the rows of
    ``make_matrix(bags, vocab, nnz_per_bag, pattern)``: bags per block, threads over the width,
    columns a thread, indices a step (unroll)."""
    cfg = autotune.get_config()
    nnz = _template_matrix_sizes(bags, vocab, nnz_per_bag, pattern)
    cfg.add_flop(1.0 * nnz * dim)
    tensors = embedding_bag(vocab, dim, bags, nnz, mode, dtype)
    s = te.create_schedule(tensors[-1].op)
    return _rows_template(cfg, s, tensors[-1], dim), list(tensors)


def _pieces_template(cfg, s, out, width: int):
    """The knobs of the piece templates (pieces a block instead of rows) and the piece schedule."""
    cfg.define_knob("pieces_per_block", [1, 2, 4, 8, 16])
    cfg.define_knob("threads_x", [t for t in (8, 16, 32, 64, 128) if t <= max(width, 8)])
    cfg.define_knob("vector", [1, 2, 4])
    cfg.define_knob("unroll", [1, 2, 4])
    if cfg.is_fallback:
        knobs = default_spmm_knobs(width)
        return schedule_spmm_pieces_cuda(s, out, 4, knobs["threads_x"], knobs["vector"], True, knobs["unroll"])
    _check_columns(cfg, width)
    return schedule_spmm_pieces_cuda(s, out, cfg["pieces_per_block"].val, cfg["threads_x"].val, cfg["vector"].val,
                                     True, cfg["unroll"].val)


@autotune.template("topi/segment_sum_pieces.cuda")
def segment_sum_pieces_cuda(segments: int, nnz_per_segment: float, pattern: str = "powerlaw", piece_len: int = 128,
                            width: int = 64, mean: bool = False, dtype: str = "float32"):
    """:func:`segment_sum_cuda` over segments cut into pieces of at most ``piece_len`` rows (a
    workload argument: the pieces are the input, recipe ``csr_layout`` with ``piece_len``): pieces
    per block, threads over the width, columns a thread, rows a step."""
    cfg = autotune.get_config()
    length, pieces = _template_matrix_shape(segments, segments, nnz_per_segment, pattern, piece_len)
    cfg.add_flop(1.0 * length * width)
    tensors = segment_sum_pieces(segments, length, pieces, width, dtype, mean=bool(mean))
    s = te.create_schedule(tensors[-1].op)
    return _pieces_template(cfg, s, tensors[-1], width), list(tensors)


@autotune.template("topi/embedding_bag_pieces.cuda")
def embedding_bag_pieces_cuda(bags: int, vocab: int, nnz_per_bag: float, pattern: str = "powerlaw",
                              piece_len: int = 128, dim: int = 64, mode: str = "sum", dtype: str = "float32"):
    """:func:`embedding_bag_cuda` over bags cut into pieces of at most ``piece_len`` indices."""
    cfg = autotune.get_config()
    nnz, pieces = _template_matrix_shape(bags, vocab, nnz_per_bag, pattern, piece_len)
    cfg.add_flop(1.0 * nnz * dim)
    tensors = embedding_bag_pieces(vocab, dim, bags, nnz, pieces, mode, dtype)
    s = te.create_schedule(tensors[-1].op)
    return _pieces_template(cfg, s, tensors[-1], dim), list(tensors)


sddmm_cuda.input_recipe = sddmm_recipe
segment_sum_cuda.input_recipe = segment_recipe
embedding_bag_cuda.input_recipe = bag_recipe
segment_sum_pieces_cuda.input_recipe = segment_pieces_recipe
embedding_bag_pieces_cuda.input_recipe = bag_pieces_recipe


# ---------------------------------------------------------------------------------------------
# built functions

def _gpu_operand(a, what: str, name: str, ndim: int, dtype: str, cols=None) -> tuple:
    """The shape of a GPU array of ``ndim`` dimensions and ``dtype`` (``cols``: its last
    dimension, None: any), or an error naming it."""
    got = _gpu_array(a)
    if got is None:
        raise ValueError(f"{what}: {name} is not on the GPU (a {type(a).__name__}); pass a torch / CuPy array "
                         f"on the GPU")
    _check_gpu0(a, what, name)
    shape, dt = got
    if len(shape) != ndim or (cols is not None and shape[-1] != cols):
        want = "1-D" if ndim == 1 else f"2-D with {cols or 'any number of'} columns"
        raise ValueError(f"{what}: {name} must be {want}, got the shape {shape}")
    if dt != np.dtype(dtype):
        hint = " (torch: .int(); CuPy: .astype('int32'))" if dtype == "int32" else ""
        raise TypeError(f"{what}: {name} has dtype {dt.name}; the GPU kernel takes {dtype}{hint}")
    return shape


def _gpu_out(out, like, shape: tuple, dtype: str, what: str):
    if out is None:
        return _empty_like(like, shape, dtype)
    if _gpu_operand(out, what, "out", len(shape), dtype) != shape:
        raise ValueError(f"{what}: out must have the shape {shape}, got {_gpu_array(out)[0]}")
    return out


class SDDMMCUDAFunction(SparsePiecesCUDAFunction):
    """A built GPU SDDMM: ``f(A, U, V)`` returns the ``nnz`` values of ``A * (U @ V.T)`` on the
    pattern of ``A`` (a new array of ``U``'s library), ``out=`` writes them. The row of each
    nonzero is made on the host from ``row_ptr`` once per matrix object (as the piece functions
    cut rows: ``f.forget(A)`` after changing it in place), on every call for three arrays."""

    def __init__(self, module, dtype: str, depth, to_host=_to_host, to_device=_to_device):
        super().__init__(module, "sddmm", dtype, 1, depth, to_host, to_device)

    def derive(self, row_ptr: np.ndarray) -> tuple:
        return (np.repeat(np.arange(len(row_ptr) - 1, dtype=np.int32), np.diff(row_ptr)),)

    def __call__(self, A, U, V, out=None):
        row_ptr, col_idx, val, shape = gpu_csr_arrays(A, self.what)
        u = _gpu_operand(U, self.what, "U", 2, self.dtype, self.width)
        v = _gpu_operand(V, self.what, "V", 2, self.dtype, u[1])
        rows = shape[0] if shape is not None else _gpu_array(row_ptr)[0][0] - 1
        if u[0] != rows or (shape is not None and v[0] != shape[1]):
            raise ValueError(f"sddmm: U must have a row per row of the matrix ({rows}) and V one per column"
                             f"{f' ({shape[1]})' if shape is not None else ''}; got U {u}, V {v}")
        out = _gpu_out(out, U, _gpu_array(val)[0], self.dtype, self.what)
        self.module(*self._matrix_args(A, row_ptr, col_idx, val), U, V, out)
        return out


class RowsCUDAFunction(SparsePiecesCUDAFunction):
    """A built GPU segment sum / mean (``f(data, offsets)``) or embedding bag (``f(indices,
    weight, offsets)``): the offsets (``parts + 1`` int32 entries) and indices on the GPU; their
    values are not checked (that would read them back on every call), their shapes and dtypes are.
    With ``piece_len``, the kernels take the segments cut into pieces: cut on the host once per
    offsets object (``f.forget(offsets)`` after changing it in place)."""

    def __init__(self, module, what: str, dtype: str, width, piece_len: int | None = None,
                 to_host=_to_host, to_device=_to_device):
        super().__init__(module, what, dtype, piece_len or 0, width, to_host, to_device)

    def __call__(self, *args, out=None):
        if self.what.startswith("embedding"):
            indices, dense, offsets = args
            _gpu_operand(indices, self.what, "indices", 1, "int32")
            name = "weight"
        else:
            (dense, offsets), indices, name = args, None, "data"
        shape = _gpu_operand(dense, self.what, name, 2, self.dtype, self.width)
        parts = _gpu_operand(offsets, self.what, "offsets", 1, "int32")[0] - 1
        if parts < 0:
            raise ValueError(f"{self.what}: offsets must have (number of parts + 1) entries, got none")
        out = _gpu_out(out, dense, (parts, shape[1]), self.dtype, self.what)
        ptrs = self.derived(offsets, offsets) if self.piece_len else (offsets,)
        self.module(*ptrs, *((dense,) if indices is None else (indices, dense)), out)
        return out


def build_sddmm_cuda(threads_per_nonzero: int | None = None, nonzeros_per_block: int | None = None,
                     depth: int | None = None, dtype: str = "float32", target: str = "cuda") -> SDDMMCUDAFunction:
    """SDDMM on the GPU with :func:`schedule_sddmm_cuda` (None: :func:`default_sddmm_knobs`);
    ``depth``: the columns of ``U`` and ``V`` it is built for (None: any).

    >>> f = build_sddmm_cuda(depth=64)
    >>> # vals = f(torch_csr_on_gpu, U, V)
    """
    import tilecraft
    knobs = default_sddmm_knobs(depth)
    tpn = threads_per_nonzero or knobs["threads_per_nonzero"]
    npb = nonzeros_per_block or max(1, 128 // tpn)
    args = sddmm(depth=depth, dtype=dtype)
    s = schedule_sddmm_cuda(te.create_schedule(args[-1].op), args[-1], tpn, npb)
    return SDDMMCUDAFunction(tilecraft.build(s, list(args), target=target, name="sddmm"), dtype, depth)


def _rows_knobs(width, rows_per_block, threads_x, vector, unroll) -> dict:
    knobs = default_spmm_knobs(width)
    given = {"rows_per_block": rows_per_block, "threads_x": threads_x, "vector": vector, "unroll": unroll}
    knobs.update({k: v for k, v in given.items() if v is not None})
    return knobs


def _schedule_rows(args, piece_len, knobs):
    """The SpMM schedule (``piece_len``: its piece form) on the row-wise stage ``args[-1]``."""
    s = te.create_schedule(args[-1].op)
    if piece_len:
        return schedule_spmm_pieces_cuda(s, args[-1], knobs["rows_per_block"], knobs["threads_x"], knobs["vector"],
                                         True, knobs["unroll"])
    return schedule_spmm_cuda(s, args[-1], **knobs)


def build_segment_sum_cuda(rows_per_block: int | None = None, threads_x: int | None = None,
                           vector: int | None = None, unroll: int | None = None, width: int | None = None,
                           mean: bool = False, piece_len: int | None = 128, dtype: str = "float32",
                           target: str = "cuda") -> RowsCUDAFunction:
    """Segment sum (``mean``: mean) on the GPU with the SpMM schedule (knobs left None: those of
    :func:`~tilecraft.topi.sparse_cuda.default_spmm_knobs`); ``width``: the columns of ``data``.
    ``piece_len``: the segments cut into pieces of at most that many rows
    (:func:`~tilecraft.topi.sparse.segment_sum_pieces`; ``rows_per_block``: pieces a block; None:
    a segment per ``threadIdx.y`` row, no cut). Pieces of 128 rows by default: 17x faster than a
    segment per row on the power-law segments of ``bench/sparse_ops_cuda.py`` (H100, session 22),
    whose longest segment otherwise keeps one row of threads busy long after the others.

    >>> f = build_segment_sum_cuda(width=64, mean=True)
    >>> # out = f(data, offsets)        # torch on the GPU; offsets int32, segments + 1 entries
    """
    import tilecraft
    if piece_len:
        args = segment_sum_pieces(width=width, dtype=dtype, mean=mean)
    else:
        args = segment_sum(width=width, dtype=dtype, mean=mean)
    s = _schedule_rows(args, piece_len, _rows_knobs(width, rows_per_block, threads_x, vector, unroll))
    what = "segment_mean" if mean else "segment_sum"
    return RowsCUDAFunction(tilecraft.build(s, list(args), target=target, name=what), what, dtype, width, piece_len)


def build_embedding_bag_cuda(mode: str = "sum", rows_per_block: int | None = None, threads_x: int | None = None,
                             vector: int | None = None, unroll: int | None = None, dim: int | None = None,
                             piece_len: int | None = 128, dtype: str = "float32",
                             target: str = "cuda") -> RowsCUDAFunction:
    """Embedding bag (``mode`` sum / mean) on the GPU with the SpMM schedule (bags as rows; knobs
    left None: :func:`~tilecraft.topi.sparse_cuda.default_spmm_knobs`); ``dim``: the table's columns;
    ``piece_len``: bags cut into pieces (:func:`~tilecraft.topi.sparse.embedding_bag_pieces`; None:
    a bag per ``threadIdx.y`` row; 128 by default, see :func:`build_segment_sum_cuda`).

    >>> f = build_embedding_bag_cuda("sum", dim=64)
    >>> # out = f(indices, weight, offsets)     # indices and offsets int32 on the GPU
    """
    import tilecraft
    if piece_len:
        args = embedding_bag_pieces(dim=dim, mode=mode, dtype=dtype)
    else:
        args = embedding_bag(dim=dim, mode=mode, dtype=dtype)
    s = _schedule_rows(args, piece_len, _rows_knobs(dim, rows_per_block, threads_x, vector, unroll))
    return RowsCUDAFunction(tilecraft.build(s, list(args), target=target, name="embedding_bag"),
                            f"embedding_bag({mode})", dtype, dim, piece_len)
