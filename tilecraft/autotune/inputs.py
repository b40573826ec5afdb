"""The inputs a candidate is measured on: seeded random arrays, or a named *recipe*.

Most templates run on random arrays (``local.random_inputs``). Some need inputs whose values
matter: a sparse template's integer arrays must form a real CSR matrix, or the measurement times
a different loop nest from the one the template is tuned for. Such a template says how to make
its inputs with a recipe: a name from :data:`RECIPES` and plain parameters (numbers, strings),
from its arguments::

    spmv.input_recipe = lambda args: ("csr_matrix", (rows, cols, nnz_per_row, pattern))

A recipe is data, not code: the local runner and a device server (``rpc/server.py``, which
receives names and numbers only, never code or pickles) make the same arrays from the same
recipe and seed. A new kind of input is a function added to :data:`RECIPES` here.
"""
from __future__ import annotations

import math

import numpy as np

PATTERNS = ("uniform", "powerlaw", "banded")


def make_matrix(rows: int, cols: int, nnz_per_row: float, pattern: str = "uniform", seed: int = 0,
                dtype: str = "float32"):
    """A random CSR matrix ``(row_ptr, col_idx, val)`` with about ``nnz_per_row`` nonzeros per row:

    * ``uniform``: each row has a Poisson number of nonzeros at uniform random columns;
    * ``powerlaw``: row lengths follow a Pareto law of shape 1.5 scaled to the mean (many empty
      and one-element rows, a few rows with thousands of nonzeros);
    * ``banded``: row ``i`` holds the columns ``i - w .. i + w`` (clipped), ``2w + 1 ≈ nnz_per_row``.

    Columns are sorted within a row; values are uniform in [-1, 1), never all zero.

    >>> row_ptr, col_idx, val = make_matrix(1000, 1000, 10, "powerlaw")
    """
    if pattern not in PATTERNS:
        raise ValueError(f"make_matrix: unknown pattern {pattern!r}; expected one of {', '.join(PATTERNS)}")
    rng = np.random.default_rng(seed)
    if pattern == "banded":
        w = max(0, int(round((nnz_per_row - 1) / 2)))
        cols_of = [np.arange(max(0, i - w), min(cols, i + w + 1)) for i in range(rows)]
    else:
        if pattern == "uniform":
            lengths = rng.poisson(nnz_per_row, rows)
        else:
            # Pareto (Lomax, shape 1.5: mean 2, unbounded variance): many empty and one-element
            # rows, a few very long ones
            lengths = np.floor(rng.pareto(1.5, rows) * (nnz_per_row / 2.0)).astype(np.int64)
        lengths = np.minimum(lengths, cols)
        cols_of = [np.sort(rng.choice(cols, n, replace=False)) if n * 4 > cols
                   else np.unique(rng.integers(0, cols, n)) for n in lengths]
    row_ptr = np.zeros(rows + 1, np.int64)
    np.cumsum([len(c) for c in cols_of], out=row_ptr[1:])
    col_idx = np.concatenate(cols_of).astype(np.int32) if rows else np.zeros(0, np.int32)
    val = rng.uniform(-1.0, 1.0, len(col_idx)).astype(dtype)
    return row_ptr.astype(np.int32), col_idx, val


class RecipeError(ValueError):
    """A recipe that names no known recipe, or whose parameters do not fit the arguments."""


def _csr_matrix(params: tuple, arg_info, seed: int, check_nnz: bool = True) -> list[np.ndarray]:
    """``(rows, cols, nnz_per_row, pattern)``: the arguments ``(row_ptr, col_idx, val, dense,
    out)`` of a CSR product; the matrix is ``make_matrix(..., seed=0)`` (the workload fixes its
    structure), the dense operand and the output are random from ``seed``."""
    if len(params) != 4:
        raise RecipeError(f"csr_matrix: expected (rows, cols, nnz_per_row, pattern), got {len(params)} values")
    rows, cols, nnz_per_row, pattern = params
    if type(rows) is not int or type(cols) is not int or rows < 0 or cols < 1:
        raise RecipeError(f"csr_matrix: rows and cols must be integers >= 0 and >= 1, got {rows!r}, {cols!r}")
    if type(nnz_per_row) not in (int, float) or not math.isfinite(nnz_per_row) or not 0 <= nnz_per_row <= cols:
        raise RecipeError(f"csr_matrix: nnz_per_row must be a number in [0, cols], got {nnz_per_row!r}")
    if pattern not in PATTERNS:
        raise RecipeError(f"csr_matrix: unknown pattern {pattern!r}; expected one of {', '.join(PATTERNS)}")
    if len(arg_info) != 5:
        raise RecipeError(f"csr_matrix: the arguments must be (row_ptr, col_idx, val, dense, out), "
                          f"got {len(arg_info)}")
    (ptr_shape, ptr_dtype, _), _, (_, val_dtype, _), (dense_shape, dense_dtype, _), (out_shape, out_dtype, _) = arg_info
    if tuple(ptr_shape) != (rows + 1,) or ptr_dtype != "int32" or not dense_shape or dense_shape[0] != cols:
        raise RecipeError(f"csr_matrix: a {rows} x {cols} matrix does not fit row_ptr {tuple(ptr_shape)} "
                          f"{ptr_dtype} and the dense operand {tuple(dense_shape)}")
    row_ptr, col_idx, val = make_matrix(rows, cols, nnz_per_row, pattern, seed=0, dtype=val_dtype)
    if check_nnz and (len(col_idx),) != tuple(arg_info[1][0]):
        raise RecipeError(f"csr_matrix: the matrix has {len(col_idx)} nonzeros, but col_idx has the shape "
                          f"{tuple(arg_info[1][0])}")
    rng = np.random.default_rng(seed)
    dense = rng.uniform(-1.0, 1.0, dense_shape).astype(dense_dtype)
    return [row_ptr, col_idx, val, dense, rng.uniform(-1.0, 1.0, out_shape).astype(out_dtype)]


def split_rows(row_ptr, piece_len: int):
    """The rows of a CSR matrix cut into *pieces* of at most ``piece_len`` nonzeros, for GPU
    kernels that balance long rows (``topi.sparse.csr_spmv_pieces``): ``(piece_ptr,
    row_pieces)``, int32. Piece ``p`` holds the nonzeros ``piece_ptr[p] .. piece_ptr[p + 1] - 1``
    (all of one row: a row of ``n`` nonzeros gives ``ceil(n / piece_len)`` pieces, all but the
    last ``piece_len`` long; an empty row gives none); row ``i`` owns the pieces ``row_pieces[i]
    .. row_pieces[i + 1] - 1``. Computed once per matrix on the host, in O(rows + pieces).

    >>> split_rows(np.array([0, 5, 5, 6], np.int32), 2)     # rows of 5, 0 and 1 nonzeros
    (array([0, 2, 4, 5, 6], dtype=int32), array([0, 3, 3, 4], dtype=int32))
    """
    if type(piece_len) is not int or piece_len < 1:
        raise ValueError(f"split_rows: piece_len must be an integer >= 1, got {piece_len!r}")
    row_ptr = np.asarray(row_ptr, np.int64)
    lengths = np.diff(row_ptr)
    counts = (lengths + piece_len - 1) // piece_len
    row_pieces = np.zeros(len(row_ptr), np.int64)
    np.cumsum(counts, out=row_pieces[1:])
    owner = np.repeat(np.arange(len(counts)), counts)
    within = np.arange(int(row_pieces[-1])) - row_pieces[:-1][owner]
    piece_ptr = np.append(row_ptr[:-1][owner] + within * piece_len, row_ptr[-1])
    return piece_ptr.astype(np.int32), row_pieces.astype(np.int32)


def _csr_pieces(params: tuple, arg_info, seed: int) -> list[np.ndarray]:
    """``(rows, cols, nnz_per_row, pattern, piece_len)``: the arguments ``(piece_ptr,
    row_pieces, col_idx, val, dense, out)`` of a CSR product over rows cut into pieces
    (:func:`split_rows` of the ``csr_matrix`` recipe's matrix)."""
    if len(params) != 5:
        raise RecipeError(f"csr_pieces: expected (rows, cols, nnz_per_row, pattern, piece_len), "
                          f"got {len(params)} values")
    piece_len = params[4]
    if type(piece_len) is not int or piece_len < 1:
        raise RecipeError(f"csr_pieces: piece_len must be an integer >= 1, got {piece_len!r}")
    if len(arg_info) != 6:
        raise RecipeError(f"csr_pieces: the arguments must be (piece_ptr, row_pieces, col_idx, val, dense, out), "
                          f"got {len(arg_info)}")
    rows = params[0]
    ptr_info = ((rows + 1,) if type(rows) is int else (), "int32", False)
    row_ptr, col_idx, val, dense, out = _csr_matrix(params[:4], [ptr_info, *arg_info[2:]], seed)
    piece_ptr, row_pieces = split_rows(row_ptr, piece_len)
    if tuple(arg_info[0][0]) != piece_ptr.shape or tuple(arg_info[1][0]) != row_pieces.shape:
        raise RecipeError(f"csr_pieces: the matrix has {len(piece_ptr) - 1} pieces of at most {piece_len} "
                          f"nonzeros and {rows} rows, which do not fit piece_ptr {tuple(arg_info[0][0])} "
                          f"and row_pieces {tuple(arg_info[1][0])}")
    return [piece_ptr, row_pieces, col_idx, val, dense, out]


def _csr_layout(params: tuple, arg_info, seed: int) -> list[np.ndarray]:
    """``(rows, cols, nnz_per_row, pattern, layout[, piece_len])``: the arguments of a ragged
    operator over the matrix ``make_matrix(rows, cols, nnz_per_row, pattern, seed=0)``, the dense
    operands and the output random from ``seed``. ``layout``:

    * ``sddmm``: ``(row_idx [nnz], col_idx [nnz], val [nnz], U [rows, d], V [cols, d], out [nnz])``
      (``row_idx``: the row of each nonzero);
    * ``segments``: ``(seg_ptr [rows + 1], data [nnz, w], out [rows, w])`` (a segment per row);
    * ``bags``: ``(offsets [rows + 1], indices [nnz], weight [cols, d], out [rows, d])``.

    With ``piece_len`` (segments and bags), ``seg_ptr`` / ``offsets`` are replaced by the two
    arrays of :func:`split_rows` (``piece_ptr``, ``row_pieces``), as in ``csr_pieces``.
    """
    if len(params) not in (5, 6):
        raise RecipeError(f"csr_layout: expected (rows, cols, nnz_per_row, pattern, layout[, piece_len]), "
                          f"got {len(params)} values")
    layout = params[4]
    piece_len = params[5] if len(params) == 6 else None
    counts = {"sddmm": 6, "segments": 3, "bags": 4}
    if layout not in counts:
        raise RecipeError(f"csr_layout: unknown layout {layout!r}; expected one of {', '.join(counts)}")
    if piece_len is not None:
        if layout == "sddmm" or type(piece_len) is not int or piece_len < 1:
            raise RecipeError(f"csr_layout: piece_len must be an integer >= 1 of the segments or bags layout, got "
                              f"{piece_len!r} for {layout}")
        row_ptr, *rest = _csr_layout(params[:5], [((params[0] + 1,), "int32", False), *arg_info[2:]], seed)
        piece_ptr, row_pieces = split_rows(row_ptr, piece_len)
        if tuple(arg_info[0][0]) != piece_ptr.shape or tuple(arg_info[1][0]) != row_pieces.shape:
            raise RecipeError(f"csr_layout: {len(piece_ptr) - 1} pieces of at most {piece_len} and {params[0]} rows "
                              f"do not fit piece_ptr {tuple(arg_info[0][0])} and row_pieces {tuple(arg_info[1][0])}")
        return [piece_ptr, row_pieces, *rest]
    if len(arg_info) != counts[layout]:
        raise RecipeError(f"csr_layout: the {layout} layout takes {counts[layout]} arguments, got {len(arg_info)}")
    rows, cols = params[0], params[1]
    # the csr_matrix recipe checks the parameters and makes the matrix
    ptr = (((rows + 1,) if type(rows) is int else ()), "int32", False)
    val_dtype = arg_info[2][1] if layout == "sddmm" else arg_info[-1][1]
    dense = ((cols, 1), val_dtype, False)
    row_ptr, col_idx, val, _, _ = _csr_matrix(params[:4], [ptr, ((-1,), "int32", False), ((-1,), val_dtype, False),
                                                          dense, ((1,), val_dtype, True)], seed, check_nnz=False)
    nnz = len(col_idx)
    rng = np.random.default_rng(seed)

    def fits(index, shape):
        got = tuple(arg_info[index][0])
        if got != tuple(shape):
            raise RecipeError(f"csr_layout: the {rows} x {cols} matrix with {nnz} nonzeros does not fit argument "
                              f"{index} of the {layout} layout: expected the shape {tuple(shape)}, got {got}")

    def rand(index):
        shape, dtype, _ = arg_info[index]
        return rng.uniform(-1.0, 1.0, shape).astype(dtype)

    if layout == "sddmm":
        fits(0, (nnz,))
        fits(3, (rows, arg_info[3][0][-1]))
        fits(4, (cols, arg_info[3][0][-1]))
        fits(5, (nnz,))
        row_idx = np.repeat(np.arange(rows, dtype=np.int32), np.diff(row_ptr))
        return [row_idx, col_idx, val.astype(arg_info[2][1]), rand(3), rand(4), rand(5)]
    if layout == "segments":
        fits(0, (rows + 1,))
        fits(1, (nnz, arg_info[1][0][-1]))
        fits(2, (rows, arg_info[1][0][-1]))
        return [row_ptr, rand(1), rand(2)]
    fits(0, (rows + 1,))
    fits(1, (nnz,))
    fits(2, (cols, arg_info[2][0][-1]))
    fits(3, (rows, arg_info[2][0][-1]))
    return [row_ptr, col_idx, rand(2), rand(3)]


def _packed_panels(params: tuple, arg_info, seed: int) -> list[np.ndarray]:
    """``()``: the arguments ``(data [M, K], panels [N / nr, K, nr], out [M, N])`` of a dense
    layer whose weight the template takes packed in panels of a width its config chooses; the
    weight ``[N, K]`` is random from ``seed`` and packed into the panels of the arguments, so
    that candidates of different widths (and the reference) multiply by the same matrix."""
    if params != ():
        raise RecipeError(f"packed_panels: takes no parameters, got {params!r}")
    if len(arg_info) != 3 or len(arg_info[1][0]) != 3 or len(arg_info[0][0]) != 2:
        raise RecipeError("packed_panels: the arguments must be (data [M, K], panels [N / nr, K, nr], out)")
    (d_shape, d_dtype, _), ((nb, K, nr), w_dtype, _), (o_shape, o_dtype, _) = arg_info
    rng = np.random.default_rng(seed)
    data = rng.uniform(-1.0, 1.0, d_shape).astype(d_dtype)
    weight = rng.uniform(-1.0, 1.0, (nb * nr, K)).astype(w_dtype)
    panels = np.ascontiguousarray(weight.reshape(nb, nr, K).transpose(0, 2, 1))
    return [data, panels, rng.uniform(-1.0, 1.0, o_shape).astype(o_dtype)]


#: recipe name → ``make(params, arg_info, seed) -> arrays`` (each checks its parameters)
RECIPES = {"csr_matrix": _csr_matrix, "csr_pieces": _csr_pieces, "csr_layout": _csr_layout,
           "packed_panels": _packed_panels}


def make_inputs(recipe: tuple, arg_info, seed: int) -> list[np.ndarray]:
    """The arrays of ``recipe`` (``(name, params)``) for ``arg_info`` and ``seed``; a
    :class:`RecipeError` says what does not fit.

    >>> info = [((4,), "int32", False), ((3,), "int32", False), ((3,), "float32", False),
    ...         ((5,), "float32", False), ((3,), "float32", True)]
    >>> row_ptr = make_inputs(("csr_matrix", (3, 5, 1.0, "banded")), info, seed=1)[0]
    """
    if type(recipe) is not tuple or len(recipe) != 2 or type(recipe[1]) is not tuple:
        raise RecipeError(f"an input recipe is (name, params), got {recipe!r}")
    name, params = recipe
    make = RECIPES.get(name)
    if make is None:
        raise RecipeError(f"unknown input recipe {name!r}; known: {', '.join(sorted(RECIPES))}")
    return make(params, arg_info, seed)


def input_recipe(task) -> tuple:
    """The recipe of ``task``'s inputs: ``()`` for random arrays, else ``(name, params)`` from
    its template's ``input_recipe(args)``. A device server's stand-in task carries the recipe
    it received as ``task.input_recipe``."""
    if task is None:
        return ()
    given = getattr(task, "input_recipe", None)
    if given is not None:
        return given
    if not hasattr(task, "args"):
        return ()
    try:
        func = task.func
    except KeyError:
        return ()
    make = getattr(func, "input_recipe", None)
    return tuple(make(tuple(task.args))) if make is not None else ()
