"""Sparse operators on CSR matrices, written with ragged reduce axes (``docs/ragged.md``).

A CSR matrix is three arrays: ``row_ptr`` (int32, ``rows + 1``), ``col_idx`` (int32, ``nnz``) and
``val`` (``nnz``); the nonzeros of row ``i`` are ``row_ptr[i] .. row_ptr[i + 1] - 1``. Each operator
below builds its tensor expression over symbolic sizes (or the sizes given) and returns the
tensors; ``schedule_*`` gives it a CPU schedule; ``build_*`` compiles it into a
:class:`SparseFunction` that takes a ``scipy.sparse.csr_matrix`` or the three arrays::

    from tilecraft.topi import sparse
    f = sparse.build_spmv(row_grain=16, vector=8)
    y = f(A, x)                          # A: scipy.sparse.csr_matrix, or (row_ptr, col_idx, val)

Operators: ``csr_spmv`` (y = A x), ``csr_spmm`` (Y = A X, X dense), ``sddmm`` (the nonzeros of
``A * (U @ V^T)``), ``segment_sum`` / ``segment_mean`` (rows of ``data`` summed per segment),
``embedding_bag`` (rows of a table gathered and summed or averaged per bag), and
``csr_spmv_pieces`` / ``csr_spmm_pieces`` (the rows cut by ``split_rows`` into pieces of bounded
length: a piece stage, then a row stage; for GPU schedules that balance long rows). Tuning templates:
``topi/spmv.llvm`` and ``topi/spmm.llvm`` (knobs: rows per parallel chunk, vector width, unroll
of the nonzero loop), over the matrices of :func:`make_matrix`. SDDMM, segment sum / mean and
embedding bag get their schedules, built functions and templates in :mod:`.sparse_ops` (CPU) and
:mod:`.sparse_ops_cuda` (GPU).
"""
from __future__ import annotations

import functools

import numpy as np

import tilecraft.autotune as autotune
from tilecraft import te
from tilecraft.autotune.inputs import PATTERNS, make_matrix, split_rows   # noqa: F401 -- part of this module's API


# ---------------------------------------------------------------------------------------------
# matrices

def _csr_arrays(A, what: str):
    """``(row_ptr, col_idx, val)`` from a ``scipy.sparse`` matrix or three arrays."""
    if hasattr(A, "tocsr") and getattr(A, "format", "csr") != "csr":
        raise TypeError(f"{what}: expected a CSR matrix, got scipy's {A.format!r} format (use A.tocsr())")
    if hasattr(A, "indptr") and hasattr(A, "indices") and hasattr(A, "data"):
        row_ptr, col_idx, val = A.indptr, A.indices, A.data
    elif isinstance(A, (tuple, list)) and len(A) == 3:
        row_ptr, col_idx, val = A
    else:
        raise TypeError(f"{what}: expected a scipy.sparse.csr_matrix or (row_ptr, col_idx, val), "
                        f"got {type(A).__name__}")
    row_ptr = np.ascontiguousarray(row_ptr, dtype=np.int32)
    col_idx = np.ascontiguousarray(col_idx, dtype=np.int32)
    val = np.ascontiguousarray(val)
    if row_ptr.ndim != 1 or len(row_ptr) < 1 or col_idx.shape != val.shape or val.ndim != 1:
        raise ValueError(f"{what}: row_ptr must have rows + 1 entries and col_idx and val one per nonzero "
                         f"(got {row_ptr.shape}, {col_idx.shape}, {val.shape})")
    if row_ptr[0] != 0 or row_ptr[-1] != len(val) or np.any(np.diff(row_ptr) < 0):
        raise ValueError(f"{what}: row_ptr must start at 0, never decrease and end at the number of "
                         f"nonzeros ({len(val)}); got {row_ptr[0]} .. {row_ptr[-1]}")
    return row_ptr, col_idx, val


# ---------------------------------------------------------------------------------------------
# operators (tensor expressions)

def _sizes(rows, cols, nnz):
    return (te.var("rows") if rows is None else rows, te.var("cols") if cols is None else cols,
            te.var("nnz") if nnz is None else nnz)


def csr_spmv(rows=None, cols=None, nnz=None, dtype: str = "float32"):
    """``y = A @ x`` for a CSR matrix ``A`` (``rows × cols``, ``nnz`` nonzeros; None: symbolic).
    Returns ``(row_ptr, col_idx, val, x, y)``; ``y[i]`` sums its row's nonzeros over the ragged axis
    ``j`` in ``row_ptr[i] .. row_ptr[i + 1]``.

    >>> row_ptr, col_idx, val, x, y = csr_spmv()
    """
    rows, cols, nnz = _sizes(rows, cols, nnz)
    row_ptr = te.placeholder((rows + 1,), dtype="int32", name="row_ptr")
    col_idx = te.placeholder((nnz,), dtype="int32", name="col_idx")
    val = te.placeholder((nnz,), dtype=dtype, name="val")
    x = te.placeholder((cols,), dtype=dtype, name="x")

    def row(i):
        j = te.reduce_axis((row_ptr[i], row_ptr[i + 1]), "j")
        return te.sum(val[j] * x[col_idx[j]], axis=j)
    y = te.compute((rows,), row, name="y")
    return row_ptr, col_idx, val, x, y


def csr_spmm(rows=None, cols=None, nnz=None, width=None, dtype: str = "float32"):
    """``Y = A @ X`` for a CSR matrix ``A`` and a dense ``X`` (``cols × width``). Returns
    ``(row_ptr, col_idx, val, X, Y)``.

    >>> row_ptr, col_idx, val, X, Y = csr_spmm(width=64)
    """
    rows, cols, nnz = _sizes(rows, cols, nnz)
    width = te.var("width") if width is None else width
    row_ptr = te.placeholder((rows + 1,), dtype="int32", name="row_ptr")
    col_idx = te.placeholder((nnz,), dtype="int32", name="col_idx")
    val = te.placeholder((nnz,), dtype=dtype, name="val")
    X = te.placeholder((cols, width), dtype=dtype, name="X")

    def row(i, c):
        j = te.reduce_axis((row_ptr[i], row_ptr[i + 1]), "j")
        return te.sum(val[j] * X[col_idx[j], c], axis=j)
    Y = te.compute((rows, width), row, name="Y")
    return row_ptr, col_idx, val, X, Y


def csr_spmv_pieces(rows=None, cols=None, nnz=None, pieces=None, dtype: str = "float32"):
    """``y = A @ x`` over the rows of ``A`` cut into pieces of bounded length (``split_rows``), in
    two ragged stages: ``part[p]`` sums piece ``p``'s nonzeros, ``y[i]`` sums row ``i``'s pieces::

        part[p] = sum(val[j] * x[col_idx[j]] for j in piece_ptr[p] .. piece_ptr[p + 1])
        y[i]    = sum(part[q] for q in row_pieces[i] .. row_pieces[i + 1])

    No piece is longer than ``piece_len``, so a schedule that gives each piece the same threads
    is balanced however long a row is (on the GPU: two kernels, ``part`` in global memory).
    Returns ``(piece_ptr, row_pieces, col_idx, val, x, y)``; ``part`` is ``y.op.input_tensors[-1]``.

    >>> piece_ptr, row_pieces, col_idx, val, x, y = csr_spmv_pieces()
    >>> # f(*split_rows(row_ptr, 256), col_idx, val, x, y)
    """
    rows, cols, nnz = _sizes(rows, cols, nnz)
    # symbolic: the length of piece_ptr, so that a caller's arrays give it (a dimension of its own)
    bounds = te.var("piece_bounds") if pieces is None else pieces + 1
    piece_ptr = te.placeholder((bounds,), dtype="int32", name="piece_ptr")
    row_pieces = te.placeholder((rows + 1,), dtype="int32", name="row_pieces")
    col_idx = te.placeholder((nnz,), dtype="int32", name="col_idx")
    val = te.placeholder((nnz,), dtype=dtype, name="val")
    x = te.placeholder((cols,), dtype=dtype, name="x")

    def piece(p):
        j = te.reduce_axis((piece_ptr[p], piece_ptr[p + 1]), "j")
        return te.sum(val[j] * x[col_idx[j]], axis=j)
    part = te.compute((bounds - 1,), piece, name="part")

    def row(i):
        q = te.reduce_axis((row_pieces[i], row_pieces[i + 1]), "q")
        return te.sum(part[q], axis=q)
    y = te.compute((rows,), row, name="y")
    return piece_ptr, row_pieces, col_idx, val, x, y


def csr_spmm_pieces(rows=None, cols=None, nnz=None, pieces=None, width=None, dtype: str = "float32"):
    """``Y = A @ X`` (``X`` dense, ``cols × width``) over the rows of ``A`` cut into pieces, as
    :func:`csr_spmv_pieces`: ``part[p, c]`` sums piece ``p``, ``Y[i, c]`` sums row ``i``'s pieces.
    Returns ``(piece_ptr, row_pieces, col_idx, val, X, Y)``.

    >>> piece_ptr, row_pieces, col_idx, val, X, Y = csr_spmm_pieces(width=64)
    """
    rows, cols, nnz = _sizes(rows, cols, nnz)
    # symbolic: the length of piece_ptr, so that a caller's arrays give it (a dimension of its own)
    bounds = te.var("piece_bounds") if pieces is None else pieces + 1
    width = te.var("width") if width is None else width
    piece_ptr = te.placeholder((bounds,), dtype="int32", name="piece_ptr")
    row_pieces = te.placeholder((rows + 1,), dtype="int32", name="row_pieces")
    col_idx = te.placeholder((nnz,), dtype="int32", name="col_idx")
    val = te.placeholder((nnz,), dtype=dtype, name="val")
    X = te.placeholder((cols, width), dtype=dtype, name="X")

    def piece(p, c):
        j = te.reduce_axis((piece_ptr[p], piece_ptr[p + 1]), "j")
        return te.sum(val[j] * X[col_idx[j], c], axis=j)
    part = te.compute((bounds - 1, width), piece, name="part")

    def row(i, c):
        q = te.reduce_axis((row_pieces[i], row_pieces[i + 1]), "q")
        return te.sum(part[q, c], axis=q)
    Y = te.compute((rows, width), row, name="Y")
    return piece_ptr, row_pieces, col_idx, val, X, Y


def sddmm(rows=None, cols=None, nnz=None, depth=None, dtype: str = "float32"):
    """Sampled dense-dense product: ``out[j] = val[j] * dot(U[row_idx[j], :], V[col_idx[j], :])``
    for each nonzero ``j`` (``row_idx``: the row of each nonzero, COO style; ``U`` is ``rows ×
    depth``, ``V`` is ``cols × depth``). Returns ``(row_idx, col_idx, val, U, V, out)``.

    >>> row_idx, col_idx, val, U, V, out = sddmm(depth=32)
    """
    rows, cols, nnz = _sizes(rows, cols, nnz)
    depth = te.var("depth") if depth is None else depth
    row_idx = te.placeholder((nnz,), dtype="int32", name="row_idx")
    col_idx = te.placeholder((nnz,), dtype="int32", name="col_idx")
    val = te.placeholder((nnz,), dtype=dtype, name="val")
    U = te.placeholder((rows, depth), dtype=dtype, name="U")
    V = te.placeholder((cols, depth), dtype=dtype, name="V")
    k = te.reduce_axis((0, depth), "k")
    out = te.compute((nnz,), lambda j: te.sum(val[j] * U[row_idx[j], k] * V[col_idx[j], k], axis=k), name="out")
    return row_idx, col_idx, val, U, V, out


def segment_sum(segments=None, length=None, width=None, dtype: str = "float32", mean: bool = False):
    """``out[s, :]`` = the sum (``mean=True``: the mean; 0 for an empty segment) of the rows
    ``seg_ptr[s] .. seg_ptr[s + 1] - 1`` of ``data`` (``length × width``). Returns
    ``(seg_ptr, data, out)``.

    >>> seg_ptr, data, out = segment_sum(width=16, mean=True)
    """
    segments = te.var("segments") if segments is None else segments
    length = te.var("length") if length is None else length
    width = te.var("width") if width is None else width
    seg_ptr = te.placeholder((segments + 1,), dtype="int32", name="seg_ptr")
    data = te.placeholder((length, width), dtype=dtype, name="data")

    def seg(s, c):
        j = te.reduce_axis((seg_ptr[s], seg_ptr[s + 1]), "j")
        return te.sum(data[j, c], axis=j)
    total = te.compute((segments, width), seg, name="segment_sum")
    if not mean:
        return seg_ptr, data, total
    out = te.compute((segments, width), lambda s, c: total[s, c] / te.max(seg_ptr[s + 1] - seg_ptr[s], 1).astype(dtype),
                     name="segment_mean")
    return seg_ptr, data, out


def segment_mean(segments=None, length=None, width=None, dtype: str = "float32"):
    """:func:`segment_sum` with ``mean=True``."""
    return segment_sum(segments, length, width, dtype, mean=True)


def embedding_bag(vocab=None, dim=None, bags=None, nnz=None, mode: str = "sum", dtype: str = "float32"):
    """PyTorch's ``EmbeddingBag`` with ``offsets``: ``out[b, :]`` = the sum (``mode="mean"``: the
    mean, 0 for an empty bag) of ``weight[indices[j], :]`` for ``j`` in ``offsets[b] ..
    offsets[b + 1] - 1``. Returns ``(offsets, indices, weight, out)``.

    >>> offsets, indices, weight, out = embedding_bag(dim=64, mode="mean")
    """
    if mode not in ("sum", "mean"):
        raise ValueError(f"embedding_bag: mode must be 'sum' or 'mean', got {mode!r}")
    vocab = te.var("vocab") if vocab is None else vocab
    dim = te.var("dim") if dim is None else dim
    bags = te.var("bags") if bags is None else bags
    nnz = te.var("nnz") if nnz is None else nnz
    offsets = te.placeholder((bags + 1,), dtype="int32", name="offsets")
    indices = te.placeholder((nnz,), dtype="int32", name="indices")
    weight = te.placeholder((vocab, dim), dtype=dtype, name="weight")

    def bag(b, c):
        j = te.reduce_axis((offsets[b], offsets[b + 1]), "j")
        return te.sum(weight[indices[j], c], axis=j)
    total = te.compute((bags, dim), bag, name="bag_sum")
    if mode == "sum":
        return offsets, indices, weight, total
    out = te.compute((bags, dim), lambda b, c: total[b, c] / te.max(offsets[b + 1] - offsets[b], 1).astype(dtype),
                     name="bag_mean")
    return offsets, indices, weight, out


def _rows_over_pieces(rows, bounds, width, dtype, mean, name, load):
    """The two ragged stages of a row-wise sum over rows cut into pieces (as
    :func:`csr_spmm_pieces`): ``part[p, c]`` sums ``load(j, c)`` over piece ``p``, ``name[i, c]``
    sums row ``i``'s pieces; ``mean``: then divided by the row's length (0 for an empty row).
    Returns ``(piece_ptr, row_pieces, out)``."""
    piece_ptr = te.placeholder((bounds,), dtype="int32", name="piece_ptr")
    row_pieces = te.placeholder((rows + 1,), dtype="int32", name="row_pieces")

    def piece(p, c):
        j = te.reduce_axis((piece_ptr[p], piece_ptr[p + 1]), "j")
        return te.sum(load(j, c), axis=j)
    part = te.compute((bounds - 1, width), piece, name="part")

    def row(i, c):
        q = te.reduce_axis((row_pieces[i], row_pieces[i + 1]), "q")
        return te.sum(part[q, c], axis=q)
    total = te.compute((rows, width), row, name=name)
    if not mean:
        return piece_ptr, row_pieces, total
    def div(i, c):
        n = piece_ptr[row_pieces[i + 1]] - piece_ptr[row_pieces[i]]
        return total[i, c] / te.max(n, 1).astype(dtype)
    return piece_ptr, row_pieces, te.compute((rows, width), div, name=name.replace("sum", "mean"))


def segment_sum_pieces(segments=None, length=None, pieces=None, width=None, dtype: str = "float32",
                       mean: bool = False):
    """:func:`segment_sum` (``mean``: the mean) over segments cut into pieces of bounded length
    (``split_rows(offsets, piece_len)``): a piece stage ``part`` and a segment stage, as
    :func:`csr_spmm_pieces` (for GPU schedules that balance very long segments). Returns
    ``(piece_ptr, row_pieces, data, out)``.

    >>> piece_ptr, row_pieces, data, out = segment_sum_pieces(width=64, mean=True)
    """
    segments = te.var("segments") if segments is None else segments
    length = te.var("length") if length is None else length
    bounds = te.var("piece_bounds") if pieces is None else pieces + 1
    width = te.var("width") if width is None else width
    data = te.placeholder((length, width), dtype=dtype, name="data")
    piece_ptr, row_pieces, out = _rows_over_pieces(segments, bounds, width, dtype, mean, "segment_sum",
                                                   lambda j, c: data[j, c])
    return piece_ptr, row_pieces, data, out


def embedding_bag_pieces(vocab=None, dim=None, bags=None, nnz=None, pieces=None, mode: str = "sum",
                         dtype: str = "float32"):
    """:func:`embedding_bag` over bags cut into pieces of bounded length (``split_rows(offsets,
    piece_len)``), as :func:`segment_sum_pieces`. Returns ``(piece_ptr, row_pieces, indices,
    weight, out)``.

    >>> piece_ptr, row_pieces, indices, weight, out = embedding_bag_pieces(dim=64, mode="mean")
    """
    if mode not in ("sum", "mean"):
        raise ValueError(f"embedding_bag_pieces: mode must be 'sum' or 'mean', got {mode!r}")
    vocab = te.var("vocab") if vocab is None else vocab
    dim = te.var("dim") if dim is None else dim
    bags = te.var("bags") if bags is None else bags
    nnz = te.var("nnz") if nnz is None else nnz
    bounds = te.var("piece_bounds") if pieces is None else pieces + 1
    indices = te.placeholder((nnz,), dtype="int32", name="indices")
    weight = te.placeholder((vocab, dim), dtype=dtype, name="weight")
    piece_ptr, row_pieces, out = _rows_over_pieces(bags, bounds, dim, dtype, mode == "mean", "bag_sum",
                                                   lambda j, c: weight[indices[j], c])
    return piece_ptr, row_pieces, indices, weight, out


def sum_stage(out):
    """The ragged sum ``out`` is, or whose mean it is (a mean stage has no reduce axis; the sum
    is its one input with a reduce axis and as many dimensions: a ``row_ptr`` computed by a
    prefix sum is an input with a reduce axis too)."""
    if out.op.reduce_axis:
        return out
    sums = [t for t in out.op.input_tensors
            if getattr(t.op, "reduce_axis", None) and len(t.shape) == len(out.shape)]
    if len(sums) != 1:
        raise ValueError(f"stage {out.op.name!r} is neither a ragged sum nor the mean of one")
    return sums[0]


# ---------------------------------------------------------------------------------------------
# CPU schedules

def schedule_spmv(s, y, row_grain: int = 16, vector: int = 8, unroll: int = 1, dynamic: bool = True):
    """Rows in chunks of ``row_grain`` on the thread pool (``dynamic``: chunks handed out as threads
    become free, which balances rows of uneven length); the nonzeros of a row split by
    ``vector`` and accumulated in that many vector lanes (gathers from ``x``; the last partial
    block is a guarded scalar loop), summed across lanes at the end of the row; ``unroll`` > 1
    unrolls that many vector steps. ``vector=1``: a scalar loop per row."""
    (j,) = s[y].op.reduce_axis
    io, ii = s[y].split(s[y].op.axis[0], factor=row_grain)
    s[y].parallel(io)
    if dynamic:
        s[y].pragma(io, "parallel_dynamic", 1)
    if vector > 1:
        j, lane = s[y].split(j, factor=vector)
        s[y].vectorize(lane)
    if unroll > 1:
        _, ju = s[y].split(j, factor=unroll)
        s[y].unroll(ju)
    return s


def schedule_rows(s, out, row_grain: int = 16, vector: int = 8, unroll: int = 1, dynamic: bool = True,
                  block: int = 1):
    """A schedule for the row-wise operators with a dense inner axis (``csr_spmm``,
    ``segment_sum``, ``embedding_bag``; their last stage is ``out``): rows in chunks of
    ``row_grain`` on the thread pool; the dense axis split by ``vector`` and vectorized
    (contiguous loads of a row of ``X``); the nonzeros ``unroll``-ed.

    ``block=1``: for each row, the nonzeros outside the whole dense axis (each nonzero is folded
    into the output row, which stays in the L1 cache)::

        for i: for j in row i: for c.outer: for c.inner (vector): Y[i, c] += val[j] * X[col[j], c]

    ``block=b > 1``: register blocking; tiles of ``b`` vectors of the output row are accumulated
    across the row's nonzeros (the ``b`` vector accumulators stay in registers; each nonzero's
    ``val`` and ``col_idx`` are loaded once per tile)::

        for i: for c.tile: for j in row i: for c.lane (unrolled b): for c.inner (vector): ...

    The dense axis is best of a constant size that ``vector * block`` divides (no guards)."""
    red = sum_stage(out)                    # out itself, or the sum of which out is the mean
    i, c = s[out].op.axis
    io, ii = s[out].split(i, factor=row_grain)
    s[out].parallel(io)
    if dynamic:
        s[out].pragma(io, "parallel_dynamic", 1)
    co, ci = s[out].split(c, factor=vector)
    if vector > 1:
        s[out].vectorize(ci)
    if red is not out:
        s[red].compute_at(s[out], ii)
        ri, rc = s[red].op.axis
    else:
        ri, rc = i, c
    (j,) = s[red].op.reduce_axis
    if red is not out:
        rco, rci = s[red].split(rc, factor=vector)
    else:
        rco, rci = co, ci
    tile, inner = [], [rco, rci]
    if block > 1:
        rcb, rcu = s[red].split(rco, factor=block)
        tile, inner = [rcb], [rcu, rci]
    if unroll > 1:
        jo, ju = s[red].split(j, factor=unroll)
        s[red].reorder(*tile, jo, ju, *inner)
        s[red].unroll(ju)
    else:
        s[red].reorder(*tile, j, *inner)
    if block > 1:
        s[red].unroll(inner[0])
    if vector > 1:
        s[red].vectorize(rci)
    return s


# ---------------------------------------------------------------------------------------------
# built functions that take scipy matrices

class SparseFunction:
    """A built sparse operator: ``f(A, x)`` with ``A`` a ``scipy.sparse.csr_matrix`` or
    ``(row_ptr, col_idx, val)``, returning a new array, or ``f(A, x, out=y)`` writing ``y``.
    ``f.module`` is the compiled module (its arguments: the three arrays, the dense input, the
    output), ``f.source_schedule`` the schedule it was built from."""

    def __init__(self, module, out_shape, what: str):
        self.module, self._out_shape, self.what = module, out_shape, what

    def __call__(self, A, dense, out=None):
        row_ptr, col_idx, val = _csr_arrays(A, self.what)
        dense = np.ascontiguousarray(dense, dtype=val.dtype)
        shape = self._out_shape(len(row_ptr) - 1, dense)
        if out is None:
            out = np.empty(shape, val.dtype)
        self.module(row_ptr, col_idx, val, dense, out)
        return out


def build_spmv(row_grain: int = 16, vector: int = 8, unroll: int = 1, dynamic: bool = True,
               dtype: str = "float32", target: str = "llvm") -> SparseFunction:
    """``y = A @ x`` compiled for the CPU with :func:`schedule_spmv` (any size, any matrix).

    >>> y = build_spmv()(scipy.sparse.random(100, 50, 0.1, format="csr", dtype="float32"), x)
    """
    import tilecraft
    row_ptr, col_idx, val, x, y = csr_spmv(dtype=dtype)
    s = schedule_spmv(te.create_schedule(y.op), y, row_grain, vector, unroll, dynamic)
    mod = tilecraft.build(s, [row_ptr, col_idx, val, x, y], target=target, name="csr_spmv")
    return SparseFunction(mod, lambda rows, x: (rows,), "csr_spmv")


def build_spmm(row_grain: int = 16, vector: int = 8, unroll: int = 1, dynamic: bool = True,
               dtype: str = "float32", target: str = "llvm", width: int | None = None,
               block: int = 1) -> SparseFunction:
    """``Y = A @ X`` (``X`` dense) compiled for the CPU with :func:`schedule_rows` (``block``:
    register blocking). ``width``: the number of columns of ``X`` the function is built for
    (``None``: any; a constant width needs no guards in the vector loop and runs several times
    faster).

    >>> Y = build_spmm(width=64, vector=16, block=2)(A, X)
    """
    import tilecraft
    row_ptr, col_idx, val, X, Y = csr_spmm(width=width, dtype=dtype)
    s = schedule_rows(te.create_schedule(Y.op), Y, row_grain, vector, unroll, dynamic, block)
    mod = tilecraft.build(s, [row_ptr, col_idx, val, X, Y], target=target, name="csr_spmm")

    def out_shape(rows, X):
        if X.ndim != 2 or (width is not None and X.shape[1] != width):
            raise ValueError(f"csr_spmm: this function was built for a dense operand of {width or 'any number of'} "
                             f"columns, got the shape {X.shape}")
        return (rows, X.shape[1])
    return SparseFunction(mod, out_shape, "csr_spmm")


# ---------------------------------------------------------------------------------------------
# tuning templates

def template_input_recipe(args: tuple) -> tuple:
    """The inputs a candidate of a sparse template runs on, as a recipe (``autotune.inputs``,
    which a device server can follow too): the matrix of :func:`make_matrix` for the template's
    arguments (the workload fixes its structure), a random dense operand and random outputs
    (a candidate that skips a row is caught) from the measurement's seed."""
    rows, cols, nnz_per_row = args[:3]
    pattern = args[3] if len(args) > 3 else "uniform"
    return ("csr_matrix", (int(rows), int(cols), float(nnz_per_row), str(pattern)))


def _template_matrix_sizes(rows, cols, nnz_per_row, pattern):
    return _template_matrix_shape(rows, cols, nnz_per_row, pattern, 0)[0]


@functools.lru_cache(maxsize=16)
def _template_matrix_shape(rows, cols, nnz_per_row, pattern, piece_len: int):
    """``(nnz, pieces)`` of the template matrix (``pieces``: of at most ``piece_len`` nonzeros;
    0 when ``piece_len`` is 0); cached, since a tuner instantiates a template for every candidate."""
    row_ptr, _, _ = make_matrix(rows, cols, nnz_per_row, pattern)
    pieces = len(split_rows(row_ptr, piece_len)[0]) - 1 if piece_len else 0
    return int(row_ptr[-1]), pieces


def template_pieces_recipe(args: tuple) -> tuple:
    """The input recipe of the piece templates (``topi/spmv_pieces.cuda``, ``topi/spmm_pieces.cuda``,
    arguments ``(rows, cols, nnz_per_row, pattern, piece_len, ...)``): the ``csr_pieces`` recipe,
    the template matrix cut by :func:`split_rows` into pieces of at most ``piece_len`` nonzeros."""
    rows, cols, nnz_per_row, pattern, piece_len = args[:5]
    return ("csr_pieces", (int(rows), int(cols), float(nnz_per_row), str(pattern), int(piece_len)))


@autotune.template("topi/spmv.llvm")
def spmv(rows: int, cols: int, nnz_per_row: float, pattern: str = "uniform", dtype: str = "float32"):
    """CSR SpMV on the CPU over the matrix ``make_matrix(rows, cols, nnz_per_row, pattern)``:
    rows per parallel chunk, vector width of the nonzero loop (1: scalar), its unroll."""
    cfg = autotune.get_config()
    cfg.define_knob("row_grain", [1, 4, 16, 64, 256])
    cfg.define_knob("vector", [1, 4, 8, 16])
    cfg.define_knob("unroll", [1, 2, 4])
    cfg.define_knob("dynamic", [1, 0])
    nnz = _template_matrix_sizes(rows, cols, nnz_per_row, pattern)
    cfg.add_flop(2.0 * nnz)
    row_ptr, col_idx, val, x, y = csr_spmv(rows, cols, nnz, dtype)
    s = te.create_schedule(y.op)
    if cfg.is_fallback:
        return schedule_spmv(s, y), [row_ptr, col_idx, val, x, y]
    schedule_spmv(s, y, cfg["row_grain"].val, cfg["vector"].val, cfg["unroll"].val, bool(cfg["dynamic"].val))
    return s, [row_ptr, col_idx, val, x, y]


@autotune.template("topi/spmm.llvm")
def spmm(rows: int, cols: int, nnz_per_row: float, pattern: str = "uniform", width: int = 64,
         dtype: str = "float32"):
    """CSR SpMM (sparse × dense ``cols × width``) on the CPU over ``make_matrix(rows, cols,
    nnz_per_row, pattern)``: rows per parallel chunk, vector width of the dense axis, unroll of the
    nonzero loop, register blocking (``block`` vectors of the output row accumulated across the
    nonzeros; a tile wider than ``width`` is refused)."""
    cfg = autotune.get_config()
    cfg.define_knob("row_grain", [1, 4, 16, 64])
    cfg.define_knob("vector", [v for v in (4, 8, 16, 32, 64) if v <= max(width, 4)])
    cfg.define_knob("unroll", [1, 2, 4])
    cfg.define_knob("dynamic", [1, 0])
    cfg.define_knob("block", [1, 2, 4])
    nnz = _template_matrix_sizes(rows, cols, nnz_per_row, pattern)
    cfg.add_flop(2.0 * nnz * width)
    row_ptr, col_idx, val, X, Y = csr_spmm(rows, cols, nnz, width, dtype)
    s = te.create_schedule(Y.op)
    if cfg.is_fallback:
        return schedule_rows(s, Y, vector=min(16, width)), [row_ptr, col_idx, val, X, Y]
    if cfg["vector"].val * cfg["block"].val > width:
        cfg.raise_error(f"a tile of {cfg['block'].val} x {cfg['vector'].val} lanes is wider than the {width} columns")
    schedule_rows(s, Y, cfg["row_grain"].val, cfg["vector"].val, cfg["unroll"].val, bool(cfg["dynamic"].val),
                  cfg["block"].val)
    return s, [row_ptr, col_idx, val, X, Y]


spmv.input_recipe = spmm.input_recipe = template_input_recipe
