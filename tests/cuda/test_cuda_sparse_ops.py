"""``topi.sparse_ops_cuda``: SDDMM (a nonzero per 1-32 lanes, the depth reduced across them),
segment sum / mean and embedding bag (the SpMM schedule: a segment per ``threadIdx.y`` row, the
width over ``threadIdx.x``, a mean divided from registers). Emulated against numpy on matrices /
segments / bags that are empty, one element long, as long as the matrix is wide and of power-law
lengths, outputs poisoned, and compiled with nvcc; the templates on their ``csr_layout`` recipe;
on a GPU, the built functions on torch and CuPy arrays against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.testing import poison
from tilecraft.topi import sparse, sparse_cuda, sparse_ops_cuda

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda


def _matrix(rng, rows, cols):
    from test_ragged import ragged_matrix
    return ragged_matrix(rng, rows, cols)


def _nvcc(src):
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and emulated but not compiled")
    assert len(compile_cuda(src, "sm_90")) > 0


def sddmm_numpy(row_ptr, col_idx, val, U, V):
    rows = np.repeat(np.arange(len(row_ptr) - 1), np.diff(row_ptr))
    return val * np.einsum("jk,jk->j", U[rows].astype(np.float64), V[col_idx].astype(np.float64))


def rows_numpy(offsets, rows_of, table, mean):
    """Row ``p``: the sum (mean; 0 when empty) of ``table[rows_of[offsets[p]:offsets[p + 1]]]``."""
    out = np.zeros((len(offsets) - 1, table.shape[1]))
    for p in range(len(offsets) - 1):
        part = table[rows_of[offsets[p]:offsets[p + 1]]].astype(np.float64)
        if len(part):
            out[p] = part.mean(axis=0) if mean else part.sum(axis=0)
    return out


SDDMM = [(32, 2, 64), (16, 4, 20), (8, 8, None), (4, 16, 3), (2, 32, 64), (1, 64, 20)]


@pytest.mark.parametrize("tpn,npb,depth", SDDMM, ids=[f"{t}x{n}_depth{d}" for t, n, d in SDDMM])
def test_sddmm_emulated_and_compiled(tpn, npb, depth, rng):
    """Depths that the lanes divide, that they do not (a guarded tail) and a symbolic one."""
    rows, cols, d = 37, 41, depth or 24
    row_ptr, col_idx, val = _matrix(rng, rows, cols)
    U, V = (rng.uniform(-1, 1, (n, d)).astype("float32") for n in (rows, cols))
    row_idx = np.repeat(np.arange(rows, dtype=np.int32), np.diff(row_ptr))
    args = sparse.sddmm(depth=depth)
    s = sparse_ops_cuda.schedule_sddmm_cuda(te.create_schedule(args[-1].op), args[-1], tpn, npb)
    func = tilecraft.lower(s, list(args), target="cuda")
    for variant in (0, 1):
        out = poison((len(val),), "float32", variant)
        emulate(func, [row_idx, col_idx, val, U, V, out])
        np.testing.assert_allclose(out, sddmm_numpy(row_ptr, col_idx, val, U, V), rtol=1e-4, atol=1e-5)
    src = generate_cuda(func)
    if tpn > 1:
        assert f"tc_allreduce<float, {tpn}>" in src
    _nvcc(src)


ROWS = [(4, 8, 4, 1, 20), (2, 16, 2, 2, 20), (8, 32, 1, 4, 64), (1, 8, 4, 2, 64), (4, 16, 1, 1, None)]


@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
@pytest.mark.parametrize("rpb,tx,vec,unroll,width", ROWS, ids=[f"{r}x{t}x{v}_u{u}_w{w}" for r, t, v, u, w in ROWS])
def test_segments_and_bags_emulated_and_compiled(rpb, tx, vec, unroll, width, mean, rng):
    """Segment sum / mean and embedding bag (sum / mean) with the SpMM schedule; a column tail
    for widths that ``tx * vec`` does not divide."""
    parts, vocab, w = 29, 23, width or 12
    offsets, indices, _ = _matrix(rng, parts, vocab)
    table = rng.uniform(-1, 1, (vocab, w)).astype("float32")
    data = table[indices]                                       # the segments' rows
    knobs = dict(rows_per_block=rpb, threads_x=tx, vector=vec, unroll=unroll)
    cases = [(sparse.segment_sum(width=width, mean=mean), lambda out: [offsets, data, out],
              np.arange(len(indices))),
             (sparse.embedding_bag(dim=width, mode="mean" if mean else "sum"),
              lambda out: [offsets, indices, table, out], indices)]
    for args, arrays, rows_of in cases:
        s = sparse_cuda.schedule_spmm_cuda(te.create_schedule(args[-1].op), args[-1], **knobs)
        func = tilecraft.lower(s, list(args), target="cuda")
        out = poison((parts, w), "float32")
        emulate(func, arrays(out))
        want = rows_numpy(offsets, rows_of, data if rows_of is not indices else table, mean)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5, err_msg=args[-1].op.name)
        _nvcc(generate_cuda(func))


@pytest.mark.parametrize("piece_len", [1, 3, 50])
@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
def test_segments_and_bags_over_pieces(piece_len, mean, rng):
    """``segment_sum_pieces`` / ``embedding_bag_pieces``: the segments / bags cut into pieces
    (``split_rows``; pieces of one element, pieces ending in a tail, no cut at all), the SpMM
    piece schedule; a mean divides by the length read through the pieces."""
    parts, vocab, w = 31, 27, 20
    offsets, indices, _ = _matrix(rng, parts, vocab)
    table = rng.uniform(-1, 1, (vocab, w)).astype("float32")
    data = table[indices]
    piece_ptr, row_pieces = sparse.split_rows(offsets, piece_len)
    want = rows_numpy(offsets, indices, table, mean)
    for knobs in [(4, 8, 4, True, 2), (2, 16, 1, False, 1)]:
        for args, arrays in ((sparse.segment_sum_pieces(width=w, mean=mean), [piece_ptr, row_pieces, data]),
                             (sparse.embedding_bag_pieces(dim=w, mode="mean" if mean else "sum"),
                              [piece_ptr, row_pieces, indices, table])):
            s = sparse_cuda.schedule_spmm_pieces_cuda(te.create_schedule(args[-1].op), args[-1], *knobs)
            func = tilecraft.lower(s, list(args), target="cuda")
            out = poison((parts, w), "float32")
            emulate(func, [*arrays, out])
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5, err_msg=f"{args[-1].op.name} {knobs}")
    _nvcc(generate_cuda(func))


def test_sddmm_schedule_error():
    *_, out = sparse.sddmm(depth=8)
    with pytest.raises(ValueError, match=r"schedule_sddmm_cuda: threads_per_nonzero must be 1, 2, 4, 8, 16 or 32 "
                                         r"\(lanes of one warp\), got 64"):
        sparse_ops_cuda.schedule_sddmm_cuda(te.create_schedule(out.op), out, threads_per_nonzero=64)


def test_default_knobs():
    assert sparse_ops_cuda.default_sddmm_knobs(64) == {"threads_per_nonzero": 8, "nonzeros_per_block": 16}
    assert sparse_ops_cuda.default_sddmm_knobs(6) == {"threads_per_nonzero": 4, "nonzeros_per_block": 32}
    assert sparse_ops_cuda.default_sddmm_knobs(None)["threads_per_nonzero"] == 8


TEMPLATES = [("topi/sddmm.cuda", (50, 40, 5.0, "powerlaw", 24)),
             ("topi/segment_sum.cuda", (60, 6.0, "powerlaw", 20, False)),
             ("topi/segment_sum.cuda", (40, 3.0, "uniform", 16, True)),
             ("topi/embedding_bag.cuda", (30, 50, 4.0, "uniform", 16, "sum")),
             ("topi/embedding_bag.cuda", (30, 50, 6.0, "powerlaw", 12, "mean")),
             ("topi/segment_sum_pieces.cuda", (60, 6.0, "powerlaw", 4, 20, True)),
             ("topi/embedding_bag_pieces.cuda", (30, 50, 6.0, "powerlaw", 3, 12, "sum"))]


@pytest.mark.parametrize("name,args", TEMPLATES, ids=[f"{n.split('/')[1]}-{a[-1]}" for n, a in TEMPLATES])
def test_templates_run_on_their_recipe(name, args, rng):
    """Three valid configurations of each GPU template, emulated on the ``csr_layout`` recipe
    (what a device server makes too), against numpy on the same arrays."""
    from tilecraft import autotune
    from tilecraft.autotune.local import cached_random_inputs, tensor_arg_info
    task = autotune.task.create(name, args=args, target="cuda")
    assert autotune.inputs.input_recipe(task)[0] == "csr_layout"
    space, done = task.config_space, 0
    for index in rng.permutation(len(space)):
        cfg = space.get(int(index))
        s, tensors = task.instantiate(cfg)
        if cfg.errors:
            continue
        arrays = [a.copy() for a in cached_random_inputs(tensor_arg_info(tensors), 3, task)]
        emulate(tilecraft.lower(s, tensors, target="cuda"), arrays)
        if "pieces" in name:                            # a segment starts where its first piece does
            piece_ptr, row_pieces, *rest = arrays
            arrays = [piece_ptr[row_pieces], *rest]
        if name.startswith("topi/sddmm"):
            row_idx, col_idx, val, U, V, out = arrays
            row_ptr = np.concatenate([[0], np.cumsum(np.bincount(row_idx, minlength=args[0]))])
            want = sddmm_numpy(row_ptr, col_idx, val, U, V)
        elif name.startswith("topi/segment"):
            offsets, data, out = arrays
            want = rows_numpy(offsets, np.arange(len(data)), data, args[-1])
        else:
            offsets, indices, weight, out = arrays
            want = rows_numpy(offsets, indices, weight, args[-1] == "mean")
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} {cfg}")
        done += 1
        if done == 3:
            break
    assert done == 3


# ---------------------------------------------------------------------------------------------
# on a GPU: the built functions on torch and CuPy arrays

def _need(lib):
    why = gpu_available()
    if why:
        pytest.skip(why)
    return pytest.importorskip(lib)


@pytest.mark.parametrize("depth", [64, None])
def test_sddmm_on_gpu_torch_and_cupy(depth, rng):
    torch = _need("torch")
    rows, cols, d = 3000, 2500, depth or 40
    row_ptr, col_idx, val = _matrix(rng, rows, cols)
    U, V = (rng.uniform(-1, 1, (n, d)).astype("float32") for n in (rows, cols))
    want = sddmm_numpy(row_ptr, col_idx, val, U, V)
    f = sparse_ops_cuda.build_sddmm_cuda(depth=depth)
    A = torch.sparse_csr_tensor(*(torch.from_numpy(a).cuda() for a in (row_ptr, col_idx, val)), (rows, cols))
    tU, tV = torch.from_numpy(U).cuda(), torch.from_numpy(V).cuda()
    got = f(A, tU, tV)
    assert isinstance(got, torch.Tensor) and got.shape == (len(val),)
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-4, atol=1e-4)
    out = torch.full((len(val),), float("nan"), device="cuda")
    assert f(A, tU, tV, out=out) is out                          # the matrix's rows: cut once, kept
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match=r"sddmm: U must have a row per row of the matrix \(3000\)"):
        f(A, tV, tV)
    try:
        import cupy
        import cupyx.scipy.sparse as csp
    except ImportError:
        return
    cA = csp.csr_matrix((cupy.asarray(val), cupy.asarray(col_idx), cupy.asarray(row_ptr)), shape=(rows, cols))
    got = f(cA, cupy.asarray(U), cupy.asarray(V))
    assert isinstance(got, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
def test_segments_and_bags_on_gpu(mean, rng):
    torch = _need("torch")
    parts, vocab, width = 2000, 5000, 64
    offsets, indices, _ = _matrix(rng, parts, vocab)
    table = rng.uniform(-1, 1, (vocab, width)).astype("float32")
    data = table[indices]
    t_off, t_idx = torch.from_numpy(offsets).cuda(), torch.from_numpy(indices).cuda()
    seg = sparse_ops_cuda.build_segment_sum_cuda(width=width, mean=mean, piece_len=None)     # a segment per row
    got = seg(torch.from_numpy(data).cuda(), t_off)
    np.testing.assert_allclose(got.cpu().numpy(), rows_numpy(offsets, np.arange(len(data)), data, mean),
                               rtol=1e-4, atol=1e-4)
    bag = sparse_ops_cuda.build_embedding_bag_cuda("mean" if mean else "sum", dim=width, piece_len=None)
    t_table = torch.from_numpy(table).cuda()
    out = torch.full((parts, width), float("nan"), device="cuda")
    assert bag(t_idx, t_table, t_off, out=out) is out
    np.testing.assert_allclose(out.cpu().numpy(), rows_numpy(offsets, indices, table, mean), rtol=1e-4, atol=1e-4)
    for f, args, want in ((sparse_ops_cuda.build_segment_sum_cuda(width=width, mean=mean, piece_len=16),
                           (torch.from_numpy(data).cuda(), t_off), rows_numpy(offsets, np.arange(len(data)), data, mean)),
                          (sparse_ops_cuda.build_embedding_bag_cuda("mean" if mean else "sum", dim=width, piece_len=16),
                           (t_idx, t_table, t_off), rows_numpy(offsets, indices, table, mean))):
        np.testing.assert_allclose(f(*args).cpu().numpy(), want, rtol=1e-4, atol=1e-4)     # pieces of <= 16
        np.testing.assert_allclose(f(*args).cpu().numpy(), want, rtol=1e-4, atol=1e-4)     # cut once, kept
    with pytest.raises(TypeError, match=r"embedding_bag\((sum|mean)\): offsets has dtype int64; the GPU kernel "
                                        r"takes int32 \(torch: .int\(\)"):
        bag(t_idx, t_table, t_off.long())
