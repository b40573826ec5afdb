"""``tilecraft.topi.sparse``: CSR SpMV / SpMM, SDDMM, segment sum / mean and embedding bag
against scipy and exact numpy loops, on matrices with empty rows, one-element rows, very long
rows and power-law row lengths; outputs poisoned first; the tuning templates' inputs."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tilecraft
from tilecraft import te
from tilecraft.testing import poison
from tilecraft.topi import sparse

from test_ragged import ragged_matrix


def _matrices(rng):
    """(name, row_ptr, col_idx, val, cols): a handmade ragged one and the generator's patterns."""
    out = [("ragged", *ragged_matrix(rng, 45, 33), 33)]
    for pattern in sparse.PATTERNS:
        seed = int(rng.integers(1 << 30))
        out.append((pattern, *sparse.make_matrix(120, 90, 6, pattern, seed=seed), 90))
    return out


SPMV_CONFIGS = [dict(), dict(vector=1), dict(vector=16, unroll=2), dict(vector=4, unroll=4, dynamic=False, row_grain=1)]


@pytest.mark.parametrize("cfg", SPMV_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_spmv_matches_scipy(cfg, rng):
    f = sparse.build_spmv(**cfg)
    for name, row_ptr, col_idx, val, cols in _matrices(rng):
        A = sp.csr_matrix((val, col_idx, row_ptr), shape=(len(row_ptr) - 1, cols))
        x = rng.uniform(-1, 1, cols).astype("float32")
        want = A.astype(np.float64) @ x.astype(np.float64)
        for variant in (0, 1):
            y = poison((A.shape[0],), "float32", variant)
            f(A, x, out=y)
            np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} matrix, {cfg}")
        np.testing.assert_allclose(f((row_ptr, col_idx, val), x), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("width", [1, 7, 64])
def test_spmm_matches_scipy(width, rng):
    f = sparse.build_spmm(vector=min(16, width), unroll=2)
    g = sparse.build_spmm(vector=4, row_grain=1, dynamic=False)
    # register blocking, on a constant width (tiles that divide it, and a tail tile that does not)
    blocked = [sparse.build_spmm(vector=4, block=2, unroll=2, width=width),
               sparse.build_spmm(vector=8, block=4, width=width, dynamic=False, row_grain=3),
               sparse.build_spmm(vector=4, block=2)]          # any width: peeled tiles, then the guarded tail
    for name, row_ptr, col_idx, val, cols in _matrices(rng):
        A = sp.csr_matrix((val, col_idx, row_ptr), shape=(len(row_ptr) - 1, cols))
        X = rng.uniform(-1, 1, (cols, width)).astype("float32")
        want = A.astype(np.float64) @ X.astype(np.float64)
        for h in (f, g, *blocked):
            Y = poison((A.shape[0], width), "float32", 0)
            h(A, X, out=Y)
            np.testing.assert_allclose(Y, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} matrix")


def test_sddmm_matches_numpy(rng, check_llvm):
    rows, cols, depth = 17, 13, 9
    row_ptr, col_idx, val = ragged_matrix(rng, rows, cols)
    row_of = np.repeat(np.arange(rows), np.diff(row_ptr)).astype("int32")
    U = rng.uniform(-1, 1, (rows, depth)).astype("float32")
    V = rng.uniform(-1, 1, (cols, depth)).astype("float32")
    r_t, c_t, v_t, U_t, V_t, out = sparse.sddmm(rows, cols, len(val), depth)
    s = te.create_schedule(out.op)
    jo, ji = s[out].split(out.op.axis[0], factor=16)
    s[out].parallel(jo)
    want = val * np.einsum("jk,jk->j", U[row_of], V[col_idx])
    check_llvm(s, [r_t, c_t, v_t, U_t, V_t, out], {r_t: row_of, c_t: col_idx, v_t: val, U_t: U, V_t: V},
               expected={out: want}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mean", [False, True])
def test_segment_sum_and_mean(mean, rng, check_llvm):
    segments, width = 21, 12
    seg_ptr, _, _ = ragged_matrix(rng, segments, 15)
    length = int(seg_ptr[-1])
    data = rng.uniform(-1, 1, (length, width)).astype("float32")
    p_t, d_t, out = sparse.segment_sum(segments, length, width, mean=mean)
    s = sparse.schedule_rows(te.create_schedule(out.op), out, row_grain=4, vector=4, unroll=2)
    want = np.zeros((segments, width), np.float64)
    for k in range(segments):
        rows = data[seg_ptr[k]:seg_ptr[k + 1]].astype(np.float64)
        if len(rows):
            want[k] = rows.mean(axis=0) if mean else rows.sum(axis=0)
    check_llvm(s, [p_t, d_t, out], {p_t: seg_ptr, d_t: data}, expected={out: want}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag(mode, rng, check_llvm):
    vocab, dim, bags = 40, 16, 19
    offsets, _, _ = ragged_matrix(rng, bags, 12)
    nnz = int(offsets[-1])
    indices = rng.integers(0, vocab, nnz).astype("int32")
    weight = rng.uniform(-1, 1, (vocab, dim)).astype("float32")
    o_t, i_t, w_t, out = sparse.embedding_bag(vocab, dim, bags, nnz, mode)
    s = sparse.schedule_rows(te.create_schedule(out.op), out, row_grain=2, vector=8)
    want = np.zeros((bags, dim), np.float64)
    for b in range(bags):
        rows = weight[indices[offsets[b]:offsets[b + 1]]].astype(np.float64)
        if len(rows):
            want[b] = rows.mean(axis=0) if mode == "mean" else rows.sum(axis=0)
    check_llvm(s, [o_t, i_t, w_t, out], {o_t: offsets, i_t: indices, w_t: weight}, expected={out: want},
               rtol=1e-4, atol=1e-5)


def test_templates_run_on_their_matrix(rng):
    """Every template's candidates run on their ``input_recipe``: a valid CSR matrix fixed by the
    workload; a few configurations of each template agree with scipy on it."""
    from tilecraft import autotune
    from tilecraft.autotune.local import cached_random_inputs, tensor_arg_info

    for name, args in (("topi/spmv.llvm", (300, 200, 5.0, "powerlaw")), ("topi/spmm.llvm", (100, 80, 4.0, "uniform", 24))):
        task = autotune.task.create(name, args=args, target="llvm")
        space = task.config_space
        for index in rng.choice(len(space), 3, replace=False):
            s, tensors = task.instantiate(space.get(space.valid_index(int(index))))
            f = tilecraft.build(s, tensors, target="llvm")
            arrays = cached_random_inputs(tensor_arg_info(tensors), 7, task)     # what the runner does
            row_ptr, col_idx, val, dense, out = arrays
            f(*arrays)
            A = sp.csr_matrix((val, col_idx, row_ptr), shape=(args[0], args[1]))
            np.testing.assert_allclose(out, A.astype(np.float64) @ dense.astype(np.float64), rtol=1e-4, atol=1e-5)


def test_spmm_register_blocking_loop_nest():
    """``block=2``: the nonzero loop runs inside a tile of the dense axis and holds two vector
    updates of the tile (its accumulators: unrolled lanes), not a loop over the whole row."""
    row_ptr, col_idx, val, X, Y = sparse.csr_spmm(width=64)
    s = sparse.schedule_rows(te.create_schedule(Y.op), Y, vector=16, block=2)
    text = str(tilecraft.lower(s, [row_ptr, col_idx, val, X, Y], simple_mode=True))
    loops = [line.strip().split(" in ")[0] for line in text.splitlines() if line.strip().startswith("for ")]
    assert loops[-2:] == ["for c.outer.outer", "for j"], text
    body = text.split("for j in")[1]
    assert body.count("Y[ramp(") == 2 * 2 and "if " not in body, text     # 64 = 2 x 2 x 16: no guards


def test_spmm_register_blocking_any_width_vectorizes():
    """``block=2`` on a symbolic width: loop partitioning splits the tile loop where the last
    full tile ends and drops, in the full tiles, every copy of the width guard (the reduction's
    init and the update inside the nonzero loop are different nodes of the same guard), so the
    update is a vector ``ramp`` there; only the tail tiles keep ``c.inner < width`` guards.
    (Before, only the init's copy was dropped: the update stayed a guarded scalar loop, 4-15x
    slower.)"""
    row_ptr, col_idx, val, X, Y = sparse.csr_spmm()
    s = sparse.schedule_rows(te.create_schedule(Y.op), Y, vector=8, block=2)
    text = str(tilecraft.lower(s, [row_ptr, col_idx, val, X, Y]))
    head = text.split("for c.outer.outer_1 in")[0]              # the full tiles
    nonzeros = head.split("for j in")[1]
    assert nonzeros.count("Y[ramp(") == 2 * 2 and "c.inner" not in nonzeros, text


def test_spmm_width_error():
    f = sparse.build_spmm(width=8)
    A = sp.csr_matrix(np.eye(3, dtype="float32"))
    with pytest.raises(ValueError, match=r"csr_spmm: this function was built for a dense operand of 8 columns, "
                                         r"got the shape \(3, 4\)"):
        f(A, np.ones((3, 4), "float32"))


def test_errors_for_bad_matrices():
    f = sparse.build_spmv()
    x = np.ones(3, "float32")
    with pytest.raises(TypeError, match=r"csr_spmv: expected a CSR matrix, got scipy's 'coo' format \(use A.tocsr\(\)\)"):
        f(sp.coo_matrix(np.eye(3, dtype="float32")), x)
    with pytest.raises(TypeError, match=r"csr_spmv: expected a scipy.sparse.csr_matrix or \(row_ptr, col_idx, val\), got ndarray"):
        f(np.eye(3, dtype="float32"), x)
    with pytest.raises(ValueError, match=r"csr_spmv: row_ptr must start at 0, never decrease and end at the number "
                                         r"of nonzeros \(2\); got 0 .. 3"):
        f((np.array([0, 1, 3]), np.array([0, 1]), np.ones(2, "float32")), x)
    with pytest.raises(ValueError, match="make_matrix: unknown pattern 'diagonal'"):
        sparse.make_matrix(4, 4, 1, "diagonal")


def test_input_recipe_errors():
    """``autotune.inputs.make_inputs`` says which recipe does not fit and why."""
    from tilecraft.autotune.inputs import RecipeError, make_inputs

    info = [((4,), "int32", False), ((3,), "int32", False), ((3,), "float32", False),
            ((5,), "float32", False), ((3,), "float32", True)]
    row_ptr, col_idx, val, x, y = make_inputs(("csr_matrix", (3, 5, 1.0, "banded")), info, seed=1)
    np.testing.assert_array_equal(row_ptr, [0, 1, 2, 3])
    np.testing.assert_array_equal(col_idx, [0, 1, 2])
    with pytest.raises(RecipeError, match=r"unknown input recipe 'coo'; known: csr_layout, csr_matrix"):
        make_inputs(("coo", ()), info, 1)
    with pytest.raises(RecipeError, match=r"csr_matrix: a 4 x 5 matrix does not fit row_ptr \(4,\) int32"):
        make_inputs(("csr_matrix", (4, 5, 1.0, "banded")), info, 1)
    with pytest.raises(RecipeError, match=r"csr_matrix: the matrix has 8 nonzeros, but col_idx has the shape \(3,\)"):
        make_inputs(("csr_matrix", (3, 5, 3.0, "banded")), info, 1)
    with pytest.raises(RecipeError, match=r"csr_matrix: nnz_per_row must be a number in \[0, cols\], got 9.0"):
        make_inputs(("csr_matrix", (3, 5, 9.0, "banded")), info, 1)
    with pytest.raises(RecipeError, match=r"csr_matrix: unknown pattern 'diagonal'"):
        make_inputs(("csr_matrix", (3, 5, 1.0, "diagonal")), info, 1)
