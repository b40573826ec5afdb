"""CPU schedules, built functions and tuning templates of the sparse operators beside SpMV / SpMM:
SDDMM, segment sum / mean and embedding bag (their tensor expressions are in
:mod:`tilecraft.topi.sparse`; ``docs/ragged.md``).

* ``sddmm``: ``out[j] = val[j] * dot(U[row(j), :], V[col_idx[j], :])`` for each nonzero ``j`` of a
  CSR matrix (what ``torch.sparse.sampled_addmm`` computes with ``beta=0``, and
  ``A.multiply(U @ V.T)`` on the pattern of ``A``). Schedule (:func:`schedule_sddmm`): the
  nonzeros in chunks of ``grain`` on the thread pool, the depth loop split by ``vector`` and
  accumulated in that many vector lanes (contiguous loads of a row of ``U`` and of ``V``), summed
  across the lanes per nonzero::

      for j.chunk in parallel: for j in chunk: for k.outer: acc[0:vector] += U[row[j], k:k+vector] * V[col[j], k:k+vector]
                                                out[j] = val[j] * sum(acc)

* ``segment_sum`` / ``segment_mean`` and ``embedding_bag`` (``sum`` / ``mean``): a ragged
  reduction over rows of a dense operand, each output row the sum of its segment's (bag's) rows:
  :func:`~tilecraft.topi.sparse.schedule_rows`, the SpMM schedule (segments in chunks on the thread
  pool, the dense axis vectorized, register blocking).

Built functions (``build_*``) take numpy arrays (and, for SDDMM, a ``scipy.sparse.csr_matrix`` or
``(row_ptr, col_idx, val)``) and say what is wrong with a bad one; templates ``topi/sddmm.llvm``,
``topi/segment_sum.llvm``, ``topi/embedding_bag.llvm`` run on the ``csr_layout`` input recipe
(``autotune.inputs``: the lengths of the segments / bags and the pattern of the SDDMM matrix are
those of ``make_matrix``)::

    f = build_segment_sum(width=64, mean=True)
    out = f(data, offsets)                  # offsets: segments + 1 entries, 0 .. len(data)
"""
from __future__ import annotations

import weakref

import numpy as np

import tilecraft.autotune as autotune
from tilecraft import te

from .sparse import _csr_arrays, _template_matrix_sizes, embedding_bag, schedule_rows, sddmm, segment_sum


# ---------------------------------------------------------------------------------------------
# schedules

def schedule_sddmm(s, out, grain: int = 256, vector: int = 16, unroll: int = 1, dynamic: bool = True):
    """SDDMM on the CPU (see the module's loop nest): ``grain`` nonzeros per parallel chunk
    (``dynamic``: chunks handed out as threads become free), the depth loop split by ``vector``
    and vectorized as a reduction in vector lanes (1: a scalar loop), ``unroll`` > 1 unrolls that
    many vector steps. A depth that ``vector`` does not divide gets a guarded tail.

    >>> *_, out = sddmm(depth=64)
    >>> s = schedule_sddmm(te.create_schedule(out.op), out, grain=256, vector=16)
    """
    (k,) = s[out].op.reduce_axis
    jo, _ = s[out].split(s[out].op.axis[0], factor=grain)
    s[out].parallel(jo)
    if dynamic:
        s[out].pragma(jo, "parallel_dynamic", 1)
    if vector > 1:
        k, lane = s[out].split(k, factor=vector)
        s[out].vectorize(lane)
    if unroll > 1:
        _, ku = s[out].split(k, factor=unroll)
        s[out].unroll(ku)
    return s


# ---------------------------------------------------------------------------------------------
# checks of the arguments of the built functions

def check_offsets(offsets, length: int, what: str, name: str = "offsets") -> np.ndarray:
    """``offsets`` as int32 (``parts + 1`` entries from 0 to ``length``, never decreasing), or a
    ValueError naming what is wrong (torch's ``offsets`` without the last entry: the hint to append
    it)."""
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or len(offsets) < 1 or not np.issubdtype(offsets.dtype, np.integer):
        raise ValueError(f"{what}: {name} must be a 1-D integer array of (number of {_part(what)}s + 1) entries, "
                         f"got the shape {offsets.shape} of {offsets.dtype}")
    if offsets[0] != 0 or offsets[-1] != length or np.any(np.diff(offsets) < 0):
        raise ValueError(f"{what}: {name} must start at 0, never decrease and end at {length} (the number of "
                         f"{'indices' if what.startswith('embedding') else 'rows of data'}); got {offsets[0]} .. "
                         f"{offsets[-1]} (torch-style offsets without the last entry: np.append(offsets, {length}))")
    return np.ascontiguousarray(offsets, dtype=np.int32)


def _part(what: str) -> str:
    return "bag" if what.startswith("embedding") else "segment"


def _dense(a, what: str, name: str, width, dtype) -> np.ndarray:
    """A 2-D float array of ``width`` columns (None: any), contiguous, or a ValueError."""
    a = np.ascontiguousarray(a)
    if a.ndim != 2 or (width is not None and a.shape[1] != width):
        raise ValueError(f"{what}: {name} must be 2-D with {width or 'any number of'} columns (the function "
                         f"was built for that), got the shape {a.shape}")
    if a.dtype != np.dtype(dtype):
        raise TypeError(f"{what}: {name} has dtype {a.dtype}; the function was built for {dtype}")
    return a


def _out(out, shape, dtype, what: str):
    if out is None:
        return np.empty(shape, dtype)
    if out.shape != shape or out.dtype != np.dtype(dtype) or not out.flags.c_contiguous:
        raise ValueError(f"{what}: out must be a contiguous {dtype} array of the shape {shape}, "
                         f"got {out.shape} {out.dtype}")
    return out


# ---------------------------------------------------------------------------------------------
# built functions

class SDDMMFunction:
    """A built SDDMM: ``f(A, U, V)`` with ``A`` a ``scipy.sparse.csr_matrix`` or ``(row_ptr,
    col_idx, val)`` returns the ``nnz`` values of ``A * (U @ V.T)`` on the pattern of ``A`` (in
    ``A``'s order; ``sp.csr_matrix((f(A, U, V), A.indices, A.indptr), A.shape)`` is the matrix);
    ``out=`` writes them. The kernel takes the row of each nonzero (``row_idx``, COO style): made
    from ``row_ptr`` on the host, once per scipy matrix (kept while the matrix lives; after
    changing its ``indptr`` in place call ``f.forget(A)``), on every call for three arrays."""

    what = "sddmm"

    def __init__(self, module, dtype: str, depth: int | None):
        self.module, self.dtype, self.depth = module, dtype, depth
        self._rows: dict = {}           # id(matrix) -> (weak reference, row_idx)

    def row_idx(self, A, row_ptr) -> np.ndarray:
        hit = self._rows.get(id(A))
        if hit is not None and hit[0]() is A:
            return hit[1]
        row_idx = np.repeat(np.arange(len(row_ptr) - 1, dtype=np.int32), np.diff(row_ptr))
        try:                            # scipy matrices are weakly referable, tuples are not
            ref = weakref.ref(A, lambda _, key=id(A), cache=self._rows: cache.pop(key, None))
            self._rows[id(A)] = (ref, row_idx)
        except TypeError:
            pass
        return row_idx

    def forget(self, A) -> None:
        """Drop the rows of the nonzeros kept for ``A``."""
        self._rows.pop(id(A), None)

    def __call__(self, A, U, V, out=None):
        row_ptr, col_idx, val = _csr_arrays(A, self.what)
        if val.dtype != np.dtype(self.dtype):
            raise TypeError(f"sddmm: the matrix's values have dtype {val.dtype}; the function was built for {self.dtype}")
        U = _dense(U, self.what, "U", self.depth, self.dtype)
        V = _dense(V, self.what, "V", U.shape[1], self.dtype)
        rows, shape = len(row_ptr) - 1, getattr(A, "shape", None)
        if U.shape[0] != rows or (shape is not None and V.shape[0] != shape[1]):
            raise ValueError(f"sddmm: U must have a row per row of the matrix ({rows}) and V one per column"
                             f"{f' ({shape[1]})' if shape is not None else ''}; got U {U.shape}, V {V.shape}")
        if len(col_idx) and (col_idx.min() < 0 or col_idx.max() >= V.shape[0]):
            raise ValueError(f"sddmm: a column index of the matrix is outside V's {V.shape[0]} rows "
                             f"(col_idx in {col_idx.min()} .. {col_idx.max()})")
        out = _out(out, val.shape, self.dtype, self.what)
        self.module(self.row_idx(A, row_ptr), col_idx, val, U, V, out)
        return out


def build_sddmm(grain: int = 256, vector: int = 16, unroll: int = 1, dynamic: bool = True,
                depth: int | None = None, dtype: str = "float32", target: str = "llvm") -> SDDMMFunction:
    """SDDMM compiled for the CPU with :func:`schedule_sddmm`; ``depth``: the columns of ``U`` and
    ``V`` it is built for (None: any; a constant that ``vector`` divides needs no guard).

    >>> f = build_sddmm(depth=64)
    >>> # vals = f(A, U, V)            # A: scipy CSR (m x n), U: m x 64, V: n x 64
    """
    import tilecraft
    args = sddmm(depth=depth, dtype=dtype)
    s = schedule_sddmm(te.create_schedule(args[-1].op), args[-1], grain, vector, unroll, dynamic)
    return SDDMMFunction(tilecraft.build(s, list(args), target=target, name="sddmm"), dtype, depth)


class SegmentFunction:
    """A built segment sum / mean: ``f(data, offsets)`` returns ``out`` (``segments × width``),
    row ``s`` the sum (mean; 0 for an empty segment) of ``data[offsets[s]:offsets[s + 1]]``;
    ``out=`` writes it."""

    def __init__(self, module, what: str, dtype: str, width: int | None):
        self.module, self.what, self.dtype, self.width = module, what, dtype, width

    def __call__(self, data, offsets, out=None):
        data = _dense(data, self.what, "data", self.width, self.dtype)
        offsets = check_offsets(offsets, data.shape[0], self.what)
        out = _out(out, (len(offsets) - 1, data.shape[1]), self.dtype, self.what)
        self.module(offsets, data, out)
        return out


def build_segment_sum(row_grain: int = 16, vector: int = 16, unroll: int = 1, dynamic: bool = True,
                      block: int = 1, width: int | None = None, mean: bool = False, dtype: str = "float32",
                      target: str = "llvm") -> SegmentFunction:
    """Segment sum (``mean=True``: mean) compiled for the CPU with
    :func:`~tilecraft.topi.sparse.schedule_rows` (``row_grain`` segments per parallel chunk,
    ``vector`` lanes of the width, ``block`` vectors accumulated in registers, the segment's rows
    ``unroll``-ed); ``width``: the columns of ``data`` it is built for (None: any).

    >>> f = build_segment_sum(width=64, mean=True)
    >>> # out = f(data, offsets)       # data: length x 64, offsets: segments + 1 entries
    """
    import tilecraft
    what = "segment_mean" if mean else "segment_sum"
    args = segment_sum(width=width, dtype=dtype, mean=mean)
    s = schedule_rows(te.create_schedule(args[-1].op), args[-1], row_grain, vector, unroll, dynamic, block)
    return SegmentFunction(tilecraft.build(s, list(args), target=target, name=what), what, dtype, width)


def build_segment_mean(**kwargs) -> SegmentFunction:
    """:func:`build_segment_sum` with ``mean=True``.

    >>> f = build_segment_mean(width=64)
    """
    return build_segment_sum(mean=True, **kwargs)


class EmbeddingBagFunction:
    """A built embedding bag: ``f(indices, weight, offsets)`` (PyTorch's argument order, with
    ``offsets`` of ``bags + 1`` entries: ``include_last_offset=True``) returns ``out`` (``bags ×
    dim``), row ``b`` the sum (mean; 0 for an empty bag) of ``weight[indices[offsets[b]:offsets[b +
    1]]]``; ``out=`` writes it. Indices outside the table are refused (an O(nnz) check)."""

    def __init__(self, module, what: str, dtype: str, dim: int | None):
        self.module, self.what, self.dtype, self.dim = module, what, dtype, dim

    def __call__(self, indices, weight, offsets, out=None):
        weight = _dense(weight, self.what, "weight", self.dim, self.dtype)
        indices = np.asarray(indices)
        if indices.ndim != 1 or not np.issubdtype(indices.dtype, np.integer):
            raise ValueError(f"{self.what}: indices must be a 1-D integer array, got the shape {indices.shape} "
                             f"of {indices.dtype}")
        if len(indices) and (indices.min() < 0 or indices.max() >= weight.shape[0]):
            raise ValueError(f"{self.what}: an index is outside the table's {weight.shape[0]} rows "
                             f"(indices in {indices.min()} .. {indices.max()})")
        indices = np.ascontiguousarray(indices, dtype=np.int32)
        offsets = check_offsets(offsets, len(indices), self.what)
        out = _out(out, (len(offsets) - 1, weight.shape[1]), self.dtype, self.what)
        self.module(offsets, indices, weight, out)
        return out


def build_embedding_bag(mode: str = "sum", row_grain: int = 16, vector: int = 16, unroll: int = 1,
                        dynamic: bool = True, block: int = 1, dim: int | None = None, dtype: str = "float32",
                        target: str = "llvm") -> EmbeddingBagFunction:
    """Embedding bag (``mode``: ``"sum"`` or ``"mean"``) compiled for the CPU with
    :func:`~tilecraft.topi.sparse.schedule_rows` (bags as rows); ``dim``: the columns of the table
    it is built for (None: any).

    >>> f = build_embedding_bag("mean", dim=64)
    >>> # out = f(indices, weight, offsets)
    """
    import tilecraft
    args = embedding_bag(dim=dim, mode=mode, dtype=dtype)
    s = schedule_rows(te.create_schedule(args[-1].op), args[-1], row_grain, vector, unroll, dynamic, block)
    what = f"embedding_bag({mode})"
    return EmbeddingBagFunction(tilecraft.build(s, list(args), target=target, name="embedding_bag"), what, dtype, dim)


# ---------------------------------------------------------------------------------------------
# tuning templates

def sddmm_recipe(args: tuple) -> tuple:
    """``topi/sddmm.*`` (``rows, cols, nnz_per_row, pattern, depth``): the ``csr_layout`` recipe
    with the ``sddmm`` layout (the rows of the nonzeros of ``make_matrix``'s matrix)."""
    rows, cols, nnz_per_row, pattern = args[:4]
    return ("csr_layout", (int(rows), int(cols), float(nnz_per_row), str(pattern), "sddmm"))


def segment_recipe(args: tuple) -> tuple:
    """``topi/segment_sum.*`` (``segments, nnz_per_segment, pattern, width, mean``): segment
    lengths the row lengths of ``make_matrix(segments, segments, ...)``."""
    segments, per, pattern = args[:3]
    return ("csr_layout", (int(segments), int(segments), float(per), str(pattern), "segments"))


def bag_recipe(args: tuple) -> tuple:
    """``topi/embedding_bag.*`` (``bags, vocab, nnz_per_bag, pattern, dim, mode``): bags the rows
    of ``make_matrix(bags, vocab, ...)``, indices its columns."""
    bags, vocab, per, pattern = args[:4]
    return ("csr_layout", (int(bags), int(vocab), float(per), str(pattern), "bags"))


def segment_pieces_recipe(args: tuple) -> tuple:
    """``topi/segment_sum_pieces.*`` (``segments, nnz_per_segment, pattern, piece_len, ...``):
    :func:`segment_recipe` with the segments cut into pieces of at most ``piece_len`` rows."""
    return ("csr_layout", (*segment_recipe(args)[1], int(args[3])))


def bag_pieces_recipe(args: tuple) -> tuple:
    """``topi/embedding_bag_pieces.*`` (``bags, vocab, nnz_per_bag, pattern, piece_len, ...``)."""
    return ("csr_layout", (*bag_recipe(args)[1], int(args[4])))


def _vectors(width: int) -> list:
    return [v for v in (4, 8, 16, 32) if v <= max(width, 4)]


@autotune.template("topi/sddmm.llvm")
def sddmm_llvm(rows: int, cols: int, nnz_per_row: float, pattern: str = "uniform", depth: int = 64,
               dtype: str = "float32"):
    """SDDMM on the CPU over the pattern of ``make_matrix(rows, cols, nnz_per_row, pattern)``:
    nonzeros per parallel chunk, vector width of the depth loop (1: scalar), its unroll."""
    cfg = autotune.get_config()
    cfg.define_knob("grain", [16, 64, 256, 1024])
    cfg.define_knob("vector", [1] + _vectors(depth))
    cfg.define_knob("unroll", [1, 2, 4])
    cfg.define_knob("dynamic", [1, 0])
    nnz = _template_matrix_sizes(rows, cols, nnz_per_row, pattern)
    cfg.add_flop(2.0 * nnz * depth + nnz)
    tensors = sddmm(rows, cols, nnz, depth, dtype)
    s = te.create_schedule(tensors[-1].op)
    if cfg.is_fallback:
        return schedule_sddmm(s, tensors[-1], vector=min(16, depth)), list(tensors)
    if cfg["vector"].val * cfg["unroll"].val > max(depth, 4):
        cfg.raise_error(f"{cfg['unroll'].val} steps of {cfg['vector'].val} lanes are more than the depth {depth}")
    schedule_sddmm(s, tensors[-1], cfg["grain"].val, cfg["vector"].val, cfg["unroll"].val, bool(cfg["dynamic"].val))
    return s, list(tensors)


def _rows_knobs(cfg, width: int, grains) -> None:
    cfg.define_knob("row_grain", grains)
    cfg.define_knob("vector", _vectors(width))
    cfg.define_knob("unroll", [1, 2, 4])
    cfg.define_knob("dynamic", [1, 0])
    cfg.define_knob("block", [1, 2, 4])


def _schedule_rows_cfg(cfg, s, out, width: int):
    if cfg.is_fallback:
        return schedule_rows(s, out, vector=min(16, width))
    if cfg["vector"].val * cfg["block"].val > max(width, 4):
        cfg.raise_error(f"a tile of {cfg['block'].val} x {cfg['vector'].val} lanes is wider than the {width} columns")
    return schedule_rows(s, out, cfg["row_grain"].val, cfg["vector"].val, cfg["unroll"].val, bool(cfg["dynamic"].val),
                         cfg["block"].val)


@autotune.template("topi/segment_sum.llvm")
def segment_sum_llvm(segments: int, nnz_per_segment: float, pattern: str = "powerlaw", width: int = 64,
                     mean: bool = False, dtype: str = "float32"):
    """Segment sum (``mean``: mean) on the CPU over segments of the lengths of the rows of
    ``make_matrix(segments, segments, nnz_per_segment, pattern)``: segments per parallel chunk,
    vector width, register blocking, unroll of the segment's rows."""
    cfg = autotune.get_config()
    _rows_knobs(cfg, width, [1, 4, 16, 64])
    length = _template_matrix_sizes(segments, segments, nnz_per_segment, pattern)
    cfg.add_flop(1.0 * length * width)
    tensors = segment_sum(segments, length, width, dtype, mean=bool(mean))
    s = te.create_schedule(tensors[-1].op)
    return _schedule_rows_cfg(cfg, s, tensors[-1], width), list(tensors)


@autotune.template("topi/embedding_bag.llvm")
def embedding_bag_llvm(bags: int, vocab: int, nnz_per_bag: float, pattern: str = "powerlaw", dim: int = 64,
                       mode: str = "sum", dtype: str = "float32"):
    """Embedding bag (``mode`` sum / mean) on the CPU over the bags and indices of the rows of
    ``make_matrix(bags, vocab, nnz_per_bag, pattern)``: bags per parallel chunk, vector width,
    register blocking, unroll of the bag's indices."""
    cfg = autotune.get_config()
    _rows_knobs(cfg, dim, [1, 4, 16, 64])
    nnz = _template_matrix_sizes(bags, vocab, nnz_per_bag, pattern)
    cfg.add_flop(1.0 * nnz * dim)
    tensors = embedding_bag(vocab, dim, bags, nnz, mode, dtype)
    s = te.create_schedule(tensors[-1].op)
    return _schedule_rows_cfg(cfg, s, tensors[-1], dim), list(tensors)


sddmm_llvm.input_recipe = sddmm_recipe
segment_sum_llvm.input_recipe = segment_recipe
embedding_bag_llvm.input_recipe = bag_recipe
