"""``tilecraft.topi.sparse_ops``: the built CPU functions of SDDMM, segment sum / mean and embedding
bag against numpy on random inputs whose rows / segments / bags are empty, one element long,
as long as the matrix is wide and of power-law lengths (``make_matrix``'s patterns too), outputs
poisoned; knob sweeps of the tuning templates through their ``csr_layout`` recipe; each
documented error."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tilecraft
from tilecraft.testing import poison
from tilecraft.topi import sparse, sparse_ops

from test_ragged import ragged_matrix


def _patterns(rng, rows, cols):
    """(name, row_ptr, col_idx, val): a handmade ragged one and the generator's patterns."""
    out = [("ragged", *ragged_matrix(rng, rows, cols))]
    for pattern in sparse.PATTERNS:
        out.append((pattern, *sparse.make_matrix(rows, cols, 6, pattern, seed=int(rng.integers(1 << 30)))))
    return out


def sddmm_numpy(row_ptr, col_idx, val, U, V):
    rows = np.repeat(np.arange(len(row_ptr) - 1), np.diff(row_ptr))
    return val * np.einsum("jk,jk->j", U[rows].astype(np.float64), V[col_idx].astype(np.float64))


def rows_numpy(offsets, table, rows_of, mean):
    out = np.zeros((len(offsets) - 1, table.shape[1]))
    for p in range(len(offsets) - 1):
        part = table[rows_of[offsets[p]:offsets[p + 1]]].astype(np.float64)
        if len(part):
            out[p] = part.mean(axis=0) if mean else part.sum(axis=0)
    return out


SDDMM_CONFIGS = [dict(), dict(depth=32), dict(vector=1), dict(vector=8, unroll=2, grain=16, dynamic=False),
                 dict(vector=16, depth=20, grain=1)]


@pytest.mark.parametrize("cfg", SDDMM_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_sddmm_matches_numpy(cfg, rng):
    """Also ``(A @ B.T)`` sampled on ``A``'s pattern with scipy: ``A.multiply(U @ V.T)``."""
    f = sparse_ops.build_sddmm(**cfg)
    depth = cfg.get("depth", 32)
    for name, row_ptr, col_idx, val in _patterns(rng, 61, 47):
        A = sp.csr_matrix((val, col_idx, row_ptr), shape=(61, 47))
        U = rng.uniform(-1, 1, (61, depth)).astype("float32")
        V = rng.uniform(-1, 1, (47, depth)).astype("float32")
        want = sddmm_numpy(row_ptr, col_idx, val, U, V)
        for variant in (0, 1):
            out = poison((len(val),), "float32", variant)
            assert f(A, U, V, out=out) is out
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} matrix, {cfg}")
        got = f((row_ptr, col_idx, val), U, V)                      # three arrays
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        dense = A.astype(np.float64).multiply(U.astype(np.float64) @ V.T.astype(np.float64)).tocsr()
        np.testing.assert_allclose(sp.csr_matrix((got, col_idx, row_ptr), shape=A.shape).toarray(), dense.toarray(),
                                   rtol=1e-4, atol=1e-5)


def test_sddmm_rows_kept_per_matrix():
    """The rows of the nonzeros are made once per scipy matrix, again after ``forget``."""
    rng = np.random.default_rng(3)
    row_ptr, col_idx, val = ragged_matrix(rng, 20, 15)
    A = sp.csr_matrix((val, col_idx, row_ptr), shape=(20, 15))
    f = sparse_ops.build_sddmm(depth=8, vector=8)
    U, V = rng.uniform(-1, 1, (20, 8)).astype("float32"), rng.uniform(-1, 1, (15, 8)).astype("float32")
    f(A, U, V)
    kept = f._rows[id(A)][1]
    f(A, U, V)
    assert f._rows[id(A)][1] is kept
    f.forget(A)
    assert id(A) not in f._rows
    del A
    assert f._rows == {}


ROWS_CONFIGS = [dict(), dict(vector=4, unroll=2, row_grain=1), dict(vector=8, block=2, width=32),
                dict(vector=4, block=4, unroll=4, dynamic=False, row_grain=3, width=32), dict(vector=16, width=None)]


@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
@pytest.mark.parametrize("cfg", ROWS_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_segments_and_bags_match_numpy(cfg, mean, rng):
    """Widths 32 and 13 (a tail) where the function takes any width."""
    cfg = dict(cfg)
    width = cfg.pop("width", None)
    seg = sparse_ops.build_segment_sum(mean=mean, width=width, **cfg)
    bag = sparse_ops.build_embedding_bag("mean" if mean else "sum", dim=width, **cfg)
    for w in ([width] if width else [32, 13]):
        for name, offsets, indices, _ in _patterns(rng, 53, 40):
            table = rng.uniform(-1, 1, (40, w)).astype("float32")
            data = table[indices]
            out = poison((53, w), "float32")
            assert seg(data, offsets, out=out) is out
            np.testing.assert_allclose(out, rows_numpy(offsets, data, np.arange(len(data)), mean), rtol=1e-4,
                                       atol=1e-5, err_msg=f"segments of the {name} matrix")
            out = poison((53, w), "float32", 1)
            bag(indices.astype(np.int64), table, offsets.astype(np.int64), out=out)
            np.testing.assert_allclose(out, rows_numpy(offsets, table, indices, mean), rtol=1e-4, atol=1e-5,
                                       err_msg=f"bags of the {name} matrix")


def test_no_segments_and_very_long_ones(rng):
    """No segment at all; one segment of every row; one bag holding every index twice."""
    f = sparse_ops.build_segment_mean(width=16)
    data = rng.uniform(-1, 1, (4000, 16)).astype("float32")
    assert f(data[:0], np.zeros(1, "int32")).shape == (0, 16)
    np.testing.assert_allclose(f(data, [0, 4000]), data.astype(np.float64).mean(axis=0, keepdims=True), rtol=1e-4,
                               atol=1e-6)
    bag = sparse_ops.build_embedding_bag("sum", vector=8, block=2)
    table = rng.uniform(-1, 1, (50, 24)).astype("float32")
    idx = np.concatenate([np.arange(50), np.arange(50)[::-1]])
    np.testing.assert_allclose(bag(idx, table, [0, 0, 100, 100])[1], 2 * table.astype(np.float64).sum(axis=0),
                               rtol=1e-4, atol=1e-5)


TEMPLATES = [("topi/sddmm.llvm", (80, 60, 5.0, "powerlaw", 24)),
             ("topi/segment_sum.llvm", (70, 6.0, "powerlaw", 20, False)),
             ("topi/segment_sum.llvm", (50, 3.0, "uniform", 32, True)),
             ("topi/embedding_bag.llvm", (40, 90, 4.0, "uniform", 16, "sum")),
             ("topi/embedding_bag.llvm", (40, 90, 6.0, "powerlaw", 12, "mean"))]


@pytest.mark.parametrize("name,args", TEMPLATES, ids=[f"{n.split('/')[1]}-{a[-1]}" for n, a in TEMPLATES])
def test_templates_run_on_their_recipe(name, args, rng):
    """Four valid configurations of each template run on the ``csr_layout`` recipe (what the
    runner and a device server make) and agree with numpy on it."""
    from tilecraft import autotune
    from tilecraft.autotune.local import cached_random_inputs, tensor_arg_info
    task = autotune.task.create(name, args=args, target="llvm")
    assert autotune.inputs.input_recipe(task)[0] == "csr_layout"
    space, done = task.config_space, 0
    for index in rng.permutation(len(space)):
        cfg = space.get(int(index))
        s, tensors = task.instantiate(cfg)
        if cfg.errors:
            continue
        arrays = [a.copy() for a in cached_random_inputs(tensor_arg_info(tensors), 5, task)]
        tilecraft.build(s, tensors, target="llvm")(*arrays)
        if "sddmm" in name:
            row_idx, col_idx, val, U, V, out = arrays
            row_ptr = np.concatenate([[0], np.cumsum(np.bincount(row_idx, minlength=args[0]))])
            want = sddmm_numpy(row_ptr, col_idx, val, U, V)
        elif "segment" in name:
            offsets, data, out = arrays
            want = rows_numpy(offsets, data, np.arange(len(data)), args[-1])
        else:
            offsets, indices, weight, out = arrays
            want = rows_numpy(offsets, weight, indices, args[-1] == "mean")
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} {cfg}")
        done += 1
        if done == 4:
            break
    assert done == 4


def test_template_refuses_tiles_wider_than_the_width():
    from tilecraft import autotune
    task = autotune.task.create("topi/segment_sum.llvm", args=(30, 3.0, "uniform", 8, False), target="llvm")
    errors = [cfg.errors for cfg in (task.config_space.get(i) for i in range(len(task.config_space)))
              if task.instantiate(cfg) and cfg.errors]
    assert errors and all("lanes is wider than the 8 columns" in e[0] for e in errors)


def test_errors():
    f = sparse_ops.build_segment_sum(width=4)
    data = np.ones((5, 4), "float32")
    with pytest.raises(ValueError, match=r"segment_sum: offsets must start at 0, never decrease and end at 5 \(the "
                                         r"number of rows of data\); got 0 .. 3 \(torch-style offsets without the "
                                         r"last entry: np.append\(offsets, 5\)\)"):
        f(data, [0, 2, 3])
    with pytest.raises(ValueError, match=r"segment_sum: offsets must start at 0, never decrease"):
        f(data, [0, 3, 2, 5])
    with pytest.raises(ValueError, match=r"segment_sum: offsets must be a 1-D integer array of \(number of segments "
                                         r"\+ 1\) entries, got the shape \(2, 2\) of int64"):
        f(data, np.zeros((2, 2), np.int64))
    with pytest.raises(ValueError, match=r"segment_sum: data must be 2-D with 4 columns \(the function was built for "
                                         r"that\), got the shape \(5, 3\)"):
        f(np.ones((5, 3), "float32"), [0, 5])
    with pytest.raises(TypeError, match=r"segment_sum: data has dtype float64; the function was built for float32"):
        f(np.ones((5, 4)), [0, 5])
    with pytest.raises(ValueError, match=r"segment_sum: out must be a contiguous float32 array of the shape \(1, 4\), "
                                         r"got \(2, 4\) float32"):
        f(data, [0, 5], out=np.empty((2, 4), "float32"))
    bag = sparse_ops.build_embedding_bag("mean")
    table = np.ones((10, 3), "float32")
    with pytest.raises(ValueError, match=r"embedding_bag\(mean\): an index is outside the table's 10 rows "
                                         r"\(indices in -1 .. 4\)"):
        bag(np.array([4, -1]), table, [0, 2])
    with pytest.raises(ValueError, match=r"embedding_bag\(mean\): offsets must start at 0, never decrease and end "
                                         r"at 2 \(the number of indices\)"):
        bag(np.array([4, 1]), table, [0])
    with pytest.raises(ValueError, match=r"embedding_bag\(mean\): indices must be a 1-D integer array"):
        bag(np.array([4.0, 1.0]), table, [0, 2])
    with pytest.raises(ValueError, match="embedding_bag: mode must be 'sum' or 'mean', got 'max'"):
        sparse_ops.build_embedding_bag("max")
    sd = sparse_ops.build_sddmm(depth=8)
    A = sp.csr_matrix(np.eye(3, dtype="float32"))
    U8 = np.ones((3, 8), "float32")
    with pytest.raises(TypeError, match=r"sddmm: expected a CSR matrix, got scipy's 'coo' format \(use A.tocsr\(\)\)"):
        sd(A.tocoo(), U8, U8)
    with pytest.raises(ValueError, match=r"sddmm: U must be 2-D with 8 columns \(the function was built for that\), "
                                         r"got the shape \(3, 4\)"):
        sd(A, np.ones((3, 4), "float32"), U8)
    with pytest.raises(ValueError, match=r"sddmm: U must have a row per row of the matrix \(3\) and V one per column "
                                         r"\(3\); got U \(3, 8\), V \(2, 8\)"):
        sd(A, U8, U8[:2])
    with pytest.raises(ValueError, match=r"sddmm: a column index of the matrix is outside V's 2 rows "
                                         r"\(col_idx in 0 .. 2\)"):
        sd((A.indptr, A.indices, A.data), U8, U8[:2])
    with pytest.raises(TypeError, match=r"sddmm: the matrix's values have dtype float64; the function was built for "
                                        r"float32"):
        sd(A.astype(np.float64), U8, U8)


def test_csr_layout_recipe_errors():
    from tilecraft.autotune.inputs import RecipeError, make_inputs
    info = [((4,), "int32", False), ((3, 2), "float32", False), ((3, 2), "float32", True)]
    offsets, data, out = make_inputs(("csr_layout", (3, 5, 1.0, "banded", "segments")), info, seed=1)
    np.testing.assert_array_equal(offsets, [0, 1, 2, 3])
    with pytest.raises(RecipeError, match=r"csr_layout: unknown layout 'coo'; expected one of sddmm, segments, bags"):
        make_inputs(("csr_layout", (3, 5, 1.0, "banded", "coo")), info, 1)
    with pytest.raises(RecipeError, match=r"csr_layout: the bags layout takes 4 arguments, got 3"):
        make_inputs(("csr_layout", (3, 5, 1.0, "banded", "bags")), info, 1)
    with pytest.raises(RecipeError, match=r"csr_layout: the 3 x 5 matrix with 8 nonzeros does not fit argument 1 of "
                                          r"the segments layout: expected the shape \(8, 2\), got \(3, 2\)"):
        make_inputs(("csr_layout", (3, 5, 3.0, "banded", "segments")), info, 1)
    with pytest.raises(RecipeError, match=r"csr_layout: expected \(rows, cols, nnz_per_row, pattern, layout\[, "
                                          r"piece_len\]\), got 4"):
        make_inputs(("csr_layout", (3, 5, 3.0, "banded")), info, 1)
    pieces_info = [((4,), "int32", False), ((4,), "int32", False), ((3, 2), "float32", False),
                   ((3, 2), "float32", True)]
    piece_ptr, row_pieces, data, out = make_inputs(("csr_layout", (3, 5, 1.0, "banded", "segments", 2)),
                                                   pieces_info, 1)
    np.testing.assert_array_equal(piece_ptr[row_pieces], [0, 1, 2, 3])
    with pytest.raises(RecipeError, match=r"csr_layout: piece_len must be an integer >= 1 of the segments or bags "
                                          r"layout, got 0 for segments"):
        make_inputs(("csr_layout", (3, 5, 1.0, "banded", "segments", 0)), pieces_info, 1)
    with pytest.raises(RecipeError, match=r"csr_layout: 8 pieces of at most 1 and 3 rows do not fit piece_ptr "
                                          r"\(4,\) and row_pieces \(4,\)"):
        make_inputs(("csr_layout", (3, 5, 3.0, "banded", "segments", 1)),
                    [((4,), "int32", False), ((4,), "int32", False), ((8, 2), "float32", False),
                     ((3, 2), "float32", True)], 1)


def test_sum_stage_of_a_mean():
    """The sum a mean stage divides: its input with a reduce axis and as many dimensions, also
    when ``row_ptr`` is itself a computed prefix sum (a 1-D input with a reduce axis: the GPU
    fuzzer's ``spmm_mean`` programs); an elementwise stage of no sum is refused."""
    from tilecraft import te
    cnt = te.placeholder((5,), dtype="int32", name="cnt")

    def prefix(i):
        k = te.reduce_axis((0, i), "k")
        return te.sum(cnt[k], axis=k)
    row_ptr = te.compute((6,), prefix, name="row_ptr")
    data = te.placeholder((20, 4), name="data")

    def row(i, c):
        j = te.reduce_axis((row_ptr[i], row_ptr[i + 1]), "j")
        return te.sum(data[j, c], axis=j)
    total = te.compute((5, 4), row, name="total")
    mean = te.compute((5, 4), lambda i, c: total[i, c] / te.max(row_ptr[i + 1] - row_ptr[i], 1).astype("float32"),
                      name="mean")
    assert sparse.sum_stage(mean) is total and sparse.sum_stage(total) is total
    *_, seg_mean = sparse.segment_sum(mean=True)
    assert sparse.sum_stage(seg_mean).op.name == "segment_sum"
    twice = te.compute((20, 4), lambda i, c: data[i, c] * 2, name="twice")
    with pytest.raises(ValueError, match=r"stage 'twice' is neither a ragged sum nor the mean of one"):
        sparse.sum_stage(twice)
