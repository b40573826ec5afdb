"""Rows cut into pieces (``split_rows``, the ``csr_pieces`` input recipe) and the two-stage
operators over them (``csr_spmv_pieces``, ``csr_spmm_pieces``): the partition's properties on
random row lengths, its errors, and the operators on the CPU against the interpreter and scipy
(the GPU schedules: ``tests/cuda/test_cuda_sparse_pieces.py``)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from tilecraft import te
from tilecraft.autotune.inputs import RecipeError, make_inputs
from tilecraft.topi import sparse

from test_ragged import ragged_matrix


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.one_of(st.integers(0, 3), st.integers(0, 200)), max_size=30),
       piece_len=st.integers(1, 40))
def test_split_rows_partitions_each_row(lengths, piece_len):
    """Every row's nonzeros are exactly its pieces', in order; each piece is 1 to piece_len long,
    all but a row's last exactly piece_len; a row of n nonzeros has ceil(n / piece_len) pieces."""
    row_ptr = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype("int32")
    piece_ptr, row_pieces = sparse.split_rows(row_ptr, piece_len)
    assert piece_ptr.dtype == row_pieces.dtype == np.int32
    assert len(row_pieces) == len(row_ptr) and row_pieces[0] == 0 and piece_ptr[-1] == row_ptr[-1]
    piece_lengths = np.diff(piece_ptr)
    assert np.all(piece_lengths >= 1) and np.all(piece_lengths <= piece_len)
    for i, n in enumerate(lengths):
        a, b = row_pieces[i], row_pieces[i + 1]
        assert b - a == -(-n // piece_len)
        if n:
            assert piece_ptr[a] == row_ptr[i] and piece_ptr[b] == row_ptr[i + 1]
            assert np.all(piece_lengths[a:b - 1] == piece_len)


def test_split_rows_error():
    with pytest.raises(ValueError, match=r"split_rows: piece_len must be an integer >= 1, got 0"):
        sparse.split_rows(np.array([0, 3], "int32"), 0)


def _pieces_info(rows, cols, pieces, nnz):
    return [((pieces + 1,), "int32", False), ((rows + 1,), "int32", False), ((nnz,), "int32", False),
            ((nnz,), "float32", False), ((cols,), "float32", False), ((rows,), "float32", True)]


def test_csr_pieces_recipe_and_errors():
    """The recipe cuts the ``csr_matrix`` recipe's matrix; a wrong piece length or argument list
    is named."""
    row_ptr, col_idx, val, x, _ = make_inputs(("csr_matrix", (3, 5, 5.0, "banded")),
                                              [((4,), "int32", False), ((12,), "int32", False),
                                               ((12,), "float32", False), ((5,), "float32", False),
                                               ((3,), "float32", True)], seed=1)
    np.testing.assert_array_equal(row_ptr, [0, 3, 7, 12])       # banded: 3, 4, 5 nonzeros
    got = make_inputs(("csr_pieces", (3, 5, 5.0, "banded", 2)), _pieces_info(3, 5, 7, 12), seed=1)
    np.testing.assert_array_equal(got[0], [0, 2, 3, 5, 7, 9, 11, 12])
    np.testing.assert_array_equal(got[1], [0, 2, 4, 7])
    np.testing.assert_array_equal(got[2], col_idx)
    np.testing.assert_array_equal(got[4], x)                     # the same seed, the same dense operand
    with pytest.raises(RecipeError, match=r"csr_pieces: piece_len must be an integer >= 1, got 0"):
        make_inputs(("csr_pieces", (3, 5, 5.0, "banded", 0)), _pieces_info(3, 5, 7, 12), 1)
    with pytest.raises(RecipeError, match=r"csr_pieces: expected \(rows, cols, nnz_per_row, pattern, piece_len\), "
                                          r"got 4 values"):
        make_inputs(("csr_pieces", (3, 5, 5.0, "banded")), _pieces_info(3, 5, 7, 12), 1)
    with pytest.raises(RecipeError, match=r"csr_pieces: the arguments must be \(piece_ptr, row_pieces, col_idx, "
                                          r"val, dense, out\), got 5"):
        make_inputs(("csr_pieces", (3, 5, 5.0, "banded", 2)), _pieces_info(3, 5, 7, 12)[1:], 1)
    with pytest.raises(RecipeError, match=r"csr_pieces: the matrix has 7 pieces of at most 2 nonzeros and 3 rows, "
                                          r"which do not fit piece_ptr \(5,\) and row_pieces \(4,\)"):
        make_inputs(("csr_pieces", (3, 5, 5.0, "banded", 2)), _pieces_info(3, 5, 4, 12), 1)


@pytest.mark.parametrize("piece_len", [1, 4, 33])
def test_spmv_pieces_on_cpu(piece_len, rng, check_llvm):
    """The two stages as written, compiled for the CPU (rows in parallel), against the
    interpreter and scipy."""
    rows, cols = 37, 33
    row_ptr, col_idx, val = ragged_matrix(rng, rows, cols)
    piece_ptr, row_pieces = sparse.split_rows(row_ptr, piece_len)
    args = sparse.csr_spmv_pieces(rows, cols, len(val), len(piece_ptr) - 1)
    y = args[-1]
    s = te.create_schedule(y.op)
    s[y].parallel(y.op.axis[0])
    x = rng.uniform(-1, 1, cols).astype("float32")
    want = sp.csr_matrix((val, col_idx, row_ptr), shape=(rows, cols)).astype(np.float64) @ x.astype(np.float64)
    check_llvm(s, list(args), dict(zip(args[:5], (piece_ptr, row_pieces, col_idx, val, x))), {y: want},
               rtol=1e-4, atol=1e-5)


def test_spmm_pieces_on_cpu(rng, check_llvm):
    rows, cols, width = 29, 21, 6
    row_ptr, col_idx, val = ragged_matrix(rng, rows, cols)
    piece_ptr, row_pieces = sparse.split_rows(row_ptr, 5)
    args = sparse.csr_spmm_pieces(rows, cols, len(val), len(piece_ptr) - 1, width)
    Y = args[-1]
    X = rng.uniform(-1, 1, (cols, width)).astype("float32")
    want = sp.csr_matrix((val, col_idx, row_ptr), shape=(rows, cols)).astype(np.float64) @ X.astype(np.float64)
    check_llvm(te.create_schedule(Y.op), list(args), dict(zip(args[:5], (piece_ptr, row_pieces, col_idx, val, X))),
               {Y: want}, rtol=1e-4, atol=1e-5)


def test_device_servers_accept_the_pieces_recipe():
    """The recipe travels to a device server as a name and numbers, which it checks before use."""
    pytest.importorskip("rpyc")
    from tilecraft.rpc.server import check_inputs
    recipe = sparse.template_pieces_recipe((3, 5, 5.0, "banded", 2))
    assert recipe == ("csr_pieces", (3, 5, 5.0, "banded", 2))
    assert check_inputs(recipe) == recipe
