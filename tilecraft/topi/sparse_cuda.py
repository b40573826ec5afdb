"""GPU schedules and tuning templates for the CSR operators of :mod:`tilecraft.topi.sparse`.

SpMV (``y = A x``) gives each row ``threads_per_row`` threads of a warp (the CSR "vector"
kernel): the row's nonzeros are strided over those threads, each folds its share, and one
cross-thread reduction (warp shuffles over the ``threads_per_row`` lanes) sums them. With 32
threads a row has a warp of its own; with fewer, one warp holds ``32 / threads_per_row`` rows
(row merging: short rows do not leave most of a warp idle); with 1, a thread per row (the
"scalar" kernel). ``rows_per_block`` rows of a block sit on ``threadIdx.y``::

    for row.block in blockIdx.x:                              # rows_per_block rows a block
      for row in threadIdx.y:                                 # a row per threadIdx.y
        j.min, j.extent = row_ptr[row], row_ptr[row + 1] - row_ptr[row]
        for j.outer in range(ceil(j.extent / threads_per_row)):
          for j.inner in threadIdx.x:                         # the row's threads, strided
            partial += val[j] * x[col_idx[j]]                 # guarded in the last step
        y[row] = allreduce(partial) over threadIdx.x          # warp shuffles

SpMM (``Y = A X``) gives each output row ``rows_per_block`` rows of a block on ``threadIdx.y``
and the dense columns to ``threadIdx.x`` (coalesced loads of a row of ``X``), ``vector``
consecutive columns a thread (one 8- or 16-byte load of ``X`` per nonzero); each thread walks its
row's nonzeros, its partial sums in registers (``local``) or in ``Y``.

Both give a row to one warp (or less), so a row of 40,000 nonzeros (power-law matrices) keeps
one warp busy long after the others are done. The *piece* schedules balance that: the host cuts
the rows into pieces of at most ``piece_len`` nonzeros once per matrix (``split_rows``: two
int32 arrays, the input recipe ``csr_pieces`` of the templates), the first kernel runs the
schedule above over pieces instead of rows (each piece the same threads, so a long row is spread
over ``ceil(n / piece_len)`` warps or threads), the second sums each row's pieces
(``csr_spmv_pieces``)::

    kernel 1: for piece in blocks x threadIdx.y:  part[piece] = sum over the piece (threads_per_piece lanes)
    kernel 2: for row in blocks x threadIdx.x:    y[row] = sum(part[q] for q in the row's pieces)

>>> from tilecraft import te
>>> from tilecraft.topi import sparse, sparse_cuda
>>> *_, y = sparse.csr_spmv()
>>> s = sparse_cuda.schedule_spmv_cuda(te.create_schedule(y.op), y, threads_per_row=4, rows_per_block=16)
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft import te

from .sparse import (_template_matrix_shape, _template_matrix_sizes, csr_spmm, csr_spmm_pieces, csr_spmv,
                     csr_spmv_pieces, sum_stage, template_input_recipe, template_pieces_recipe)


def schedule_spmv_cuda(s, y, threads_per_row: int = 32, rows_per_block: int = 4):
    """CSR SpMV on the GPU: ``threads_per_row`` threads of a warp per row (a power of two up to
    32; 1: a thread per row), ``rows_per_block`` rows per block (see the module's loop nest)."""
    if threads_per_row not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"schedule_spmv_cuda: threads_per_row must be 1, 2, 4, 8, 16 or 32 (lanes of one warp), "
                         f"got {threads_per_row}")
    (j,) = s[y].op.reduce_axis
    block, row = s[y].split(s[y].op.axis[0], factor=rows_per_block)
    s[y].bind(block, te.thread_axis("blockIdx.x"))
    if threads_per_row == 1:
        s[y].bind(row, te.thread_axis("threadIdx.x"))
        return s
    s[y].bind(row, te.thread_axis("threadIdx.y"))
    _, lane = s[y].split(j, factor=threads_per_row)
    s[y].bind(lane, te.thread_axis("threadIdx.x"))
    return s


def schedule_spmm_cuda(s, Y, rows_per_block: int = 4, threads_x: int = 32, vector: int = 1,
                       local: bool = False, unroll: int = 1):
    """CSR SpMM on the GPU: ``rows_per_block`` output rows per block on ``threadIdx.y``,
    ``threads_x`` threads on ``threadIdx.x``, each folding its row's nonzeros into ``vector``
    consecutive output columns (1, 2 or 4: one 8- or 16-byte load of ``X`` per nonzero and one
    store of ``Y`` where the width is a multiple of ``vector``; a column tail is guarded);
    ``threads_x * vector`` columns a block, more column blocks on ``blockIdx.y``. ``local``:
    the thread's partial sums in registers (``cache_write(Y, "local")``), ``Y`` written once;
    otherwise they accumulate in ``Y`` itself (nvcc may keep them in registers; ``__restrict__``).
    ``unroll``: the nonzero loop split by that factor and its inner part unrolled (several loads of
    ``X`` in flight per thread; the last block guarded).
    The same schedule serves every row-wise ragged sum with a dense inner axis (``segment_sum``,
    ``embedding_bag``: ``Y``'s rows are segments or bags); where ``Y`` is a mean of such a sum
    (no reduce axis: ``segment_mean``, ``embedding_bag(mode="mean")``) the sum is the thread's
    registers (``local`` whatever it says), divided when ``Y`` is written.

    >>> *_, Y = csr_spmm(width=128)
    >>> s = schedule_spmm_cuda(te.create_schedule(Y.op), Y, rows_per_block=4, threads_x=32, vector=4, local=True)
    """
    if vector not in (1, 2, 4):
        raise ValueError(f"schedule_spmm_cuda: vector must be 1, 2 or 4 (columns a thread loads as one "
                         f"4-, 8- or 16-byte access), got {vector}")
    if not isinstance(unroll, int) or unroll < 1:
        raise ValueError(f"schedule_spmm_cuda: unroll must be an integer >= 1 (nonzeros a step), got {unroll!r}")
    if not Y.op.reduce_axis:                # a mean (segment_mean, embedding_bag mean): the sum before it
        acc, local = sum_stage(Y), True
        s[acc].set_scope("local")           # the sum in registers, divided as Y is written
    else:
        acc = s.cache_write(Y, "local") if local else Y
    i, c = s[Y].op.axis
    block, row = s[Y].split(i, factor=rows_per_block)
    lanes = None
    if vector > 1:
        c, lanes = s[Y].split(c, factor=vector)
    cblock, col = s[Y].split(c, factor=threads_x)
    s[Y].reorder(block, cblock, row, col, *([lanes] if lanes is not None else []))
    s[Y].bind(block, te.thread_axis("blockIdx.x"))
    s[Y].bind(cblock, te.thread_axis("blockIdx.y"))
    s[Y].bind(row, te.thread_axis("threadIdx.y"))
    s[Y].bind(col, te.thread_axis("threadIdx.x"))
    if local:
        s[acc].compute_at(s[Y], col)
        ai, ac = s[acc].op.axis
        (j,) = s[acc].op.reduce_axis
        outer, cols = [ai], [ac]                    # the nonzero loop outside the thread's columns
    else:
        (j,) = s[Y].op.reduce_axis
        outer, cols = [col], ([lanes] if lanes is not None else [])
    if unroll > 1:
        jo, ji = s[acc].split(j, factor=unroll)     # the last block's steps guarded
        s[acc].reorder(*outer, jo, ji, *cols)
        s[acc].unroll(ji)
    elif cols:
        s[acc].reorder(*outer, j, *cols)
    if vector > 1:
        s[acc].vectorize(cols[0])
        if local:
            s[Y].vectorize(lanes)
    return s


def _part_of(out):
    """The piece stage ``part`` that the row stage ``out`` of ``csr_spmv_pieces`` /
    ``csr_spmm_pieces`` / ``segment_sum_pieces`` / ``embedding_bag_pieces`` sums (or whose sum
    ``out`` is the mean of)."""
    parts = [t for t in sum_stage(out).op.input_tensors if t.op.name == "part"]
    if len(parts) != 1:
        raise ValueError(f"stage {out.op.name!r} does not sum a piece stage 'part' (build it with "
                         f"csr_spmv_pieces or csr_spmm_pieces)")
    return parts[0]


def schedule_spmv_pieces_cuda(s, y, threads_per_piece: int = 32, pieces_per_block: int = 4,
                              row_threads: int = 256):
    """SpMV over pieces (``csr_spmv_pieces``) on the GPU: the pieces as the rows of
    :func:`schedule_spmv_cuda` (``threads_per_piece`` lanes of a warp each, ``pieces_per_block``
    a block), then a thread per row (``row_threads`` a block) summing the row's pieces.

    >>> *_, y = csr_spmv_pieces()
    >>> s = schedule_spmv_pieces_cuda(te.create_schedule(y.op), y, threads_per_piece=8, pieces_per_block=16)
    """
    schedule_spmv_cuda(s, _part_of(y), threads_per_piece, pieces_per_block)
    block, row = s[y].split(s[y].op.axis[0], factor=row_threads)
    s[y].bind(block, te.thread_axis("blockIdx.x"))
    s[y].bind(row, te.thread_axis("threadIdx.x"))
    return s


def schedule_spmm_pieces_cuda(s, Y, pieces_per_block: int = 4, threads_x: int = 32, vector: int = 1,
                              local: bool = False, unroll: int = 1):
    """SpMM over pieces (``csr_spmm_pieces``) on the GPU: the pieces as the rows of
    :func:`schedule_spmm_cuda` (``pieces_per_block`` on ``threadIdx.y``, ``threads_x`` threads
    on ``threadIdx.x`` of ``vector`` columns each, each thread walking its piece, ``unroll``
    nonzeros a step), then the rows
    the same way, each thread summing its row's pieces of its columns.

    >>> *_, Y = csr_spmm_pieces(width=64)
    >>> s = schedule_spmm_pieces_cuda(te.create_schedule(Y.op), Y, pieces_per_block=4, threads_x=32)
    """
    schedule_spmm_cuda(s, _part_of(Y), pieces_per_block, threads_x, vector, local, unroll)
    schedule_spmm_cuda(s, Y, max(1, 256 // threads_x), threads_x, vector, local)
    return s


@autotune.template("topi/spmv.cuda")
def spmv_cuda(rows: int, cols: int, nnz_per_row: float, pattern: str = "uniform", dtype: str = "float32"):
    """CSR SpMV on the GPU over ``make_matrix(rows, cols, nnz_per_row, pattern)``: threads per
    row (1 to 32: row merging below 32) and rows per block (32 to 1024 threads a block)."""
    cfg = autotune.get_config()
    cfg.define_knob("threads_per_row", [1, 2, 4, 8, 16, 32])
    cfg.define_knob("rows_per_block", [1, 2, 4, 8, 16, 32, 64, 128])
    nnz = _template_matrix_sizes(rows, cols, nnz_per_row, pattern)
    cfg.add_flop(2.0 * nnz)
    row_ptr, col_idx, val, x, y = csr_spmv(rows, cols, nnz, dtype)
    s = te.create_schedule(y.op)
    if cfg.is_fallback:
        return schedule_spmv_cuda(s, y), [row_ptr, col_idx, val, x, y]
    tpr, rpb = cfg["threads_per_row"].val, cfg["rows_per_block"].val
    if not 32 <= tpr * rpb <= 1024:
        cfg.raise_error(f"{tpr} threads per row x {rpb} rows per block is not 32 to 1024 threads a block")
    return schedule_spmv_cuda(s, y, tpr, rpb), [row_ptr, col_idx, val, x, y]


@autotune.template("topi/spmm.cuda")
def spmm_cuda(rows: int, cols: int, nnz_per_row: float, pattern: str = "uniform", width: int = 64,
              dtype: str = "float32"):
    """CSR SpMM (sparse × dense ``cols × width``) on the GPU over ``make_matrix(rows, cols,
    nnz_per_row, pattern)``: rows per block, threads per row of the block, columns a thread
    loads as one vector, partial sums in registers or in ``Y``, nonzeros a step (unroll)."""
    cfg = autotune.get_config()
    cfg.define_knob("rows_per_block", [1, 2, 4, 8, 16])
    cfg.define_knob("threads_x", [t for t in (8, 16, 32, 64, 128) if t <= max(width, 8)])
    cfg.define_knob("vector", [1, 2, 4])
    cfg.define_knob("local", [0, 1])
    cfg.define_knob("unroll", [1, 2, 4])
    nnz = _template_matrix_sizes(rows, cols, nnz_per_row, pattern)
    cfg.add_flop(2.0 * nnz * width)
    row_ptr, col_idx, val, X, Y = csr_spmm(rows, cols, nnz, width, dtype)
    s = te.create_schedule(Y.op)
    if cfg.is_fallback:
        return schedule_spmm_cuda(s, Y, **default_spmm_knobs(width)), [row_ptr, col_idx, val, X, Y]
    _check_columns(cfg, width)
    return (schedule_spmm_cuda(s, Y, cfg["rows_per_block"].val, cfg["threads_x"].val, cfg["vector"].val,
                               bool(cfg["local"].val), cfg["unroll"].val), [row_ptr, col_idx, val, X, Y])


def default_spmm_knobs(width) -> dict:
    """The SpMM knobs used without a tuning log: 4 columns a thread in registers, 2 nonzeros a step,
    ``threads_x`` covering the width (up to 32), 64 to 128 threads a block; the best or near it on
    every matrix of ``bench/sparse_cuda.py`` at widths 32 and 128 on the H100
    (``bench/results/h100_2026-11-24_s21_mid/``). A width that is not a multiple of 4 (or symbolic)
    gets one column a thread.

    >>> default_spmm_knobs(128)
    {'rows_per_block': 4, 'threads_x': 32, 'vector': 4, 'local': True, 'unroll': 2}
    """
    vector = 4 if isinstance(width, int) and width % 4 == 0 else 1
    tx = max(1, min(32, width // vector)) if isinstance(width, int) else 32
    return {"rows_per_block": max(4, 64 // tx), "threads_x": tx, "vector": vector, "local": True, "unroll": 2}


def default_spmm_pieces_knobs(width) -> dict:
    """The piece SpMM knobs used without a tuning log: 2 columns a thread in registers (the best on
    the power-law and uniform matrices at width 128 in ``bench/results/h100_2026-11-24_s21_mid/``),
    ``threads_x`` covering the width up to 32, 4 pieces a block.

    >>> default_spmm_pieces_knobs(128)
    {'pieces_per_block': 4, 'threads_x': 32, 'vector': 2, 'local': True, 'unroll': 1}
    """
    vector = 2 if isinstance(width, int) and width % 2 == 0 else 1
    tx = max(1, min(32, width // vector)) if isinstance(width, int) else 32
    return {"pieces_per_block": 4, "threads_x": tx, "vector": vector, "local": True, "unroll": 1}


def _check_columns(cfg, width: int) -> None:
    """Refuse a block row wider than the dense operand (its extra threads would only idle)."""
    tx, vec = cfg["threads_x"].val, cfg["vector"].val
    if tx * vec > max(width, 8):
        cfg.raise_error(f"{tx} threads x {vec} columns a thread is wider than the dense operand ({width} columns)")


spmv_cuda.input_recipe = spmm_cuda.input_recipe = template_input_recipe


@autotune.template("topi/spmv_pieces.cuda")
def spmv_pieces_cuda(rows: int, cols: int, nnz_per_row: float, pattern: str = "powerlaw", piece_len: int = 256,
                     dtype: str = "float32"):
    """CSR SpMV on the GPU over ``make_matrix(rows, cols, nnz_per_row, pattern)`` cut into pieces
    of at most ``piece_len`` nonzeros (a workload argument: the pieces are the template's input,
    recipe ``csr_pieces``): threads per piece (1 to 32) and pieces per block (32 to 1024 threads
    a block)."""
    cfg = autotune.get_config()
    cfg.define_knob("threads_per_piece", [1, 2, 4, 8, 16, 32])
    cfg.define_knob("pieces_per_block", [1, 2, 4, 8, 16, 32, 64, 128])
    nnz, pieces = _template_matrix_shape(rows, cols, nnz_per_row, pattern, piece_len)
    cfg.add_flop(2.0 * nnz)
    tensors = csr_spmv_pieces(rows, cols, nnz, pieces, dtype)
    s = te.create_schedule(tensors[-1].op)
    if cfg.is_fallback:
        return schedule_spmv_pieces_cuda(s, tensors[-1]), list(tensors)
    tpp, ppb = cfg["threads_per_piece"].val, cfg["pieces_per_block"].val
    if not 32 <= tpp * ppb <= 1024:
        cfg.raise_error(f"{tpp} threads per piece x {ppb} pieces per block is not 32 to 1024 threads a block")
    return schedule_spmv_pieces_cuda(s, tensors[-1], tpp, ppb), list(tensors)


@autotune.template("topi/spmm_pieces.cuda")
def spmm_pieces_cuda(rows: int, cols: int, nnz_per_row: float, pattern: str = "powerlaw", piece_len: int = 64,
                     width: int = 64, dtype: str = "float32"):
    """CSR SpMM (sparse × dense ``cols × width``) on the GPU over ``make_matrix(rows, cols,
    nnz_per_row, pattern)`` cut into pieces of at most ``piece_len`` nonzeros (recipe
    ``csr_pieces``): pieces per block, threads per piece, columns a thread loads as one vector,
    partial sums in registers or in memory, nonzeros a step (unroll)."""
    cfg = autotune.get_config()
    cfg.define_knob("pieces_per_block", [1, 2, 4, 8, 16])
    cfg.define_knob("threads_x", [t for t in (8, 16, 32, 64, 128) if t <= max(width, 8)])
    cfg.define_knob("vector", [1, 2, 4])
    cfg.define_knob("local", [0, 1])
    cfg.define_knob("unroll", [1, 2, 4])
    nnz, pieces = _template_matrix_shape(rows, cols, nnz_per_row, pattern, piece_len)
    cfg.add_flop(2.0 * nnz * width)
    tensors = csr_spmm_pieces(rows, cols, nnz, pieces, width, dtype)
    s = te.create_schedule(tensors[-1].op)
    if cfg.is_fallback:
        return schedule_spmm_pieces_cuda(s, tensors[-1], **default_spmm_pieces_knobs(width)), list(tensors)
    _check_columns(cfg, width)
    return (schedule_spmm_pieces_cuda(s, tensors[-1], cfg["pieces_per_block"].val, cfg["threads_x"].val,
                                      cfg["vector"].val, bool(cfg["local"].val), cfg["unroll"].val), list(tensors))


spmv_pieces_cuda.input_recipe = spmm_pieces_cuda.input_recipe = template_pieces_recipe
