"""Random schedules, compiled and compared with the interpreter.

The ragged family (at the end) does the same for CSR programs (``docs/ragged.md``): fixed-seed
random schedules of a ragged reduce axis on fresh random matrices with empty, one-element and
long rows.

Each case draws a short random sequence of primitives (split by factor or nparts, fuse of
adjacent axes, reorder, then vectorize/unroll/parallel annotations; the innermost axis is
vectorized whether it is data-parallel or a reduction axis) for the consumer stage,
sometimes a write cache attached at one of its loops or an rfactor of one of its reduction
loops (partials maybe in parallel, maybe attached), a random placement for the producer
(root, inline, or compute_at at any loop of the consumer or of its cache), sometimes a read
cache (maybe storage-aligned) of the producer's input attached inside the producer. Each case
runs the lowered-IR interpreter after every pass of ``lower()`` (a wrong pass fails as "wrong
after <pass>"), then builds it for the CPU and checks every output. A failure prints the
schedule as Python and the seed that replays it (``TILECRAFT_TEST_SEED``).
"""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.ir.expr import Const, IterKind

CASES = 14       # per program (--fuzz-cases N for more); the first FAST_CASES are in the inner loop
FAST_CASES = 4


def stencil():
    A = te.placeholder((13, 19), name="A")
    P = te.compute((13, 20), lambda i, j: te.if_then_else(j < 19, A[i, j] * 2.0, 1.0), name="P")
    C = te.compute((13, 19), lambda i, j: P[i, j] + P[i, j + 1] * A[i, j], name="C")
    return [A], P, C, True


def matmul():
    A = te.placeholder((11, 9), name="A")
    B = te.placeholder((9, 14), name="B")
    P = te.compute((9, 14), lambda k, j: B[k, j] + 1.0, name="P")
    r = te.reduce_axis((0, 9), name="r")
    C = te.compute((11, 14), lambda i, j: te.sum(A[i, r] * P[r, j], axis=r), name="C")
    return [A, B], P, C, True


def reduce_producer():
    A = te.placeholder((10, 12, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    P = te.compute((10, 12), lambda i, j: te.max(A[i, j, k], axis=k), name="P")
    C = te.compute((10, 11), lambda i, j: P[i, j + 1] - P[i, j] * 0.5, name="C")
    return [A], P, C, False


def symbolic():
    n = te.var("n")
    A = te.placeholder((n, 7), name="A")
    P = te.compute((n, 7), lambda i, j: te.exp(A[i, j]), name="P")
    C = te.compute((n, 7), lambda i, j: P[i, j] + P[i, 6 - j], name="C")
    return [A], P, C, True


def conv():
    A = te.placeholder((9, 11), name="A")
    W = te.placeholder((3, 4), name="W")
    P = te.compute((11, 14), lambda h, w: te.if_then_else(te.all(h >= 1, h < 10, w >= 1, w < 12),
                                                          A[h - 1, w - 1], 0.0), name="P")
    r = te.reduce_axis((0, 3), name="r")
    q = te.reduce_axis((0, 4), name="q")
    C = te.compute((9, 11), lambda i, j: te.sum(P[i + r, j + q] * W[r, q], axis=[r, q]), name="C")
    return [A, W], P, C, True


def rows():
    """A row reduction with init= and a tail for most splits: vectorized reduction axes."""
    A = te.placeholder((6, 29), name="A")
    P = te.compute((6, 29), lambda i, k: A[i, k] * A[i, k] + 0.5, name="P")
    k = te.reduce_axis((0, 29), name="k")
    C = te.compute((6,), lambda i: te.sum(P[i, k] - A[i, k], axis=k, init=0.25), name="C")
    return [A], P, C, True


def _const(iv):
    e = iv.dom.extent if iv.dom is not None else None
    return e.value if isinstance(e, Const) else None


def random_schedule(rng, make):
    inputs, P, C, inlinable = make()
    s = te.create_schedule(C.op)
    cache = s.cache_write(C, "local") if rng.random() < 0.25 else None
    st = s[C]
    for _ in range(rng.integers(1, 5)):
        leaves = st.leaf_iter_vars
        what = rng.choice(["split", "split", "nparts", "fuse", "reorder"])
        if what in ("split", "nparts"):
            ax = leaves[rng.integers(len(leaves))]
            amount = int(rng.integers(1, 7))
            st.split(ax, **({"factor": amount} if what == "split" else {"nparts": amount}))
        elif what == "fuse":
            pairs = [(a, b) for a, b in zip(leaves, leaves[1:]) if a.kind == b.kind]
            if pairs:
                a, b = pairs[rng.integers(len(pairs))]
                st.fuse(a, b)
        else:
            st.reorder(*[leaves[k] for k in rng.permutation(len(leaves))])
    reader = None     # the stage that reads P when rfactor moved the reduction out of C
    from tilecraft.schedule.schedule import Fuse
    red = [ax for ax in st.leaf_iter_vars if ax.kind is IterKind.REDUCE and _const(ax)]
    if cache is None and red and not any(isinstance(r, Fuse) for r in st.relations) and rng.random() < 0.25:
        CF = s.rfactor(C, red[rng.integers(len(red))])
        reader = s[CF]
        if rng.random() < 0.5:
            reader.parallel(CF.op.axis[0])
        if rng.random() < 0.5:
            reader.compute_at(st, st.leaf_iter_vars[0])
    leaves = st.leaf_iter_vars
    inner = leaves[-1]
    if _const(inner) and rng.random() < 0.6:
        st.vectorize(inner)                 # a reduction axis too: vector accumulators
    for ax in leaves[:-1]:
        if _const(ax) and _const(ax) <= 8 and rng.random() < 0.25:
            st.unroll(ax)
    data = [ax for ax in leaves[:-1] if ax.kind is IterKind.DATA_PAR]
    if data and rng.random() < 0.5:
        st.parallel(data[rng.integers(len(data))])
    if cache is not None:
        s[cache].compute_at(st, leaves[rng.integers(len(leaves))])
        st = s[cache]                       # the producer may go inside the cache stage
        leaves = st.leaf_iter_vars
    if reader is not None:
        st, leaves = reader, reader.leaf_iter_vars
        last = leaves[-1]
        if last.kind is IterKind.REDUCE and _const(last) and rng.random() < 0.5:
            reader.vectorize(last)          # the partial sums' own reduction
    where = rng.integers(0, 3)
    if where == 1 and inlinable:
        s[P].compute_inline()
        return s, inputs, C
    if where == 2:
        s[P].compute_at(st, leaves[rng.integers(len(leaves))])
    if rng.random() < 0.3:
        # a cache of P's input, at the root or at one of P's loops, rows maybe padded
        src = P.op.input_tensors[0]
        AA = s.cache_read(src, "local", [P])
        if rng.random() < 0.5:
            s[AA].storage_align(AA.op.axis[0], 8, int(rng.integers(0, 8)))
        if rng.random() < 0.7:
            pl = s[P].leaf_iter_vars
            s[AA].compute_at(s[P], pl[rng.integers(len(pl))])
    return s, inputs, C


def pytest_generate_tests(metafunc):
    if metafunc.function.__name__ == "test_random_schedule":
        n = metafunc.config.getoption("--fuzz-cases") or CASES
        metafunc.parametrize("case", [pytest.param(k, marks=[pytest.mark.slow] if k >= FAST_CASES else [])
                                      for k in range(n)])
    if metafunc.function.__name__ == "test_random_ragged_schedule":
        n = metafunc.config.getoption("--fuzz-cases") or RAGGED_CASES
        metafunc.parametrize("case", [pytest.param(k, marks=[pytest.mark.slow] if k >= 1 else []) for k in range(n)])


@pytest.mark.parametrize("make", [stencil, matmul, reduce_producer, symbolic, conv, rows], ids=lambda f: f.__name__)
def test_random_schedule(make, case, rng, check_llvm):
    s, inputs, C = random_schedule(rng, make)
    feed = {t: rng.uniform(-1, 1, size=[getattr(d, "value", 13) for d in t.shape]).astype("float32")
            for t in inputs}
    try:
        check_llvm(s, inputs + [C], feed, rtol=1e-5, atol=1e-5, passes=True)   # every pass, every case
    except AssertionError as e:
        raise AssertionError(f"schedule:\n{s.to_python()}\n{tc.lower(s, inputs + [C], simple_mode=True)}\n{e}") from None


# ---------------------------------------------------------------------------------------------
# The ragged family: CSR programs whose reduce axis runs from row_ptr[i] to row_ptr[i + 1]
# (docs/ragged.md), random schedules of their ragged axes, fresh random matrices.

RAGGED_SEED = 1616       # the schedules of the CI slice are fixed; the matrices are fresh each run
RAGGED_CASES = 2         # schedules per program and kind of matrix (--fuzz-cases N for more)


def csr_matrix(rng, kind: str):
    """``(row_ptr, col_idx, val, cols)``: ``ragged`` (empty, one-element, full-width and power-law
    rows, shuffled), ``empty`` (no nonzero at all), ``one`` (a single nonzero), ``long`` (one row
    far longer than any vector width, the others empty or short)."""
    from test_ragged import ragged_matrix

    cols = int(rng.integers(2, 40))
    if kind == "ragged":
        rows = int(rng.integers(7, 30))
        row_ptr, col_idx, val = ragged_matrix(rng, rows, cols)
        return row_ptr, col_idx, val, cols
    rows = int(rng.integers(1, 12))
    lengths = np.zeros(rows, np.int64)
    if kind == "one":
        lengths[rng.integers(rows)] = 1
    elif kind == "long":
        cols = int(rng.integers(60, 120))
        lengths = rng.integers(0, 3, rows)
        lengths[rng.integers(rows)] = cols - int(rng.integers(0, 5))
    col_idx = np.concatenate([np.sort(rng.choice(cols, n, replace=False)) for n in lengths]
                             + [np.zeros(0, np.int64)]).astype("int32")
    row_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype("int32")
    return row_ptr, col_idx, rng.uniform(-1, 1, len(col_idx)).astype("float32"), cols


def ragged_program(kind: str, rows, cols, nnz, width: int):
    """``(row_ptr, col_idx, val, dense, out, has_dense_axis)``: ``spmv`` (y = A x), ``spmm``
    (Y = A X, ``width`` columns), ``segment`` (rows of X summed per row of A, ``init=0.5``)."""
    row_ptr = te.placeholder((rows + 1,), dtype="int32", name="row_ptr")
    col_idx = te.placeholder((nnz,), dtype="int32", name="col_idx")
    val = te.placeholder((nnz,), name="val")
    if kind == "spmv":
        x = te.placeholder((cols,), name="x")

        def row(i):
            j = te.reduce_axis((row_ptr[i], row_ptr[i + 1]), "j")
            return te.sum(val[j] * x[col_idx[j]], axis=j)
        return row_ptr, col_idx, val, x, te.compute((rows,), row, name="y"), False
    if kind == "spmm":
        X = te.placeholder((cols, width), name="X")

        def rowc(i, c):
            j = te.reduce_axis((row_ptr[i], row_ptr[i + 1]), "j")
            return te.sum(val[j] * X[col_idx[j], c], axis=j)
        return row_ptr, col_idx, val, X, te.compute((rows, width), rowc, name="Y"), True
    D = te.placeholder((nnz, width), name="D")

    def seg(i, c):
        j = te.reduce_axis((row_ptr[i], row_ptr[i + 1]), "j")
        return te.sum(D[j, c] * val[j], axis=j, init=0.5)
    return row_ptr, col_idx, val, D, te.compute((rows, width), seg, name="S"), True


def ragged_schedule(srng, s, out, dense_axis: bool):
    """Random primitives on ``out``'s stage: a split of the rows (parallel, maybe dynamic), a
    split of the ragged axis by factor or nparts (its inner part maybe vectorized, unrolled or
    rfactor-ed), the dense axis split and placed outside, between or inside the ragged loops."""
    st = s[out]
    axes = list(st.op.axis)
    (j,) = st.op.reduce_axis
    rows_loops = [axes[0]]
    if srng.random() < 0.6:
        io, ii = st.split(axes[0], factor=int(srng.integers(1, 6)))
        rows_loops = [io, ii]
        if srng.random() < 0.7:
            st.parallel(io)
            if srng.random() < 0.5:
                st.pragma(io, "parallel_dynamic", int(srng.integers(1, 4)))
    dense = []
    if dense_axis:
        dense = [axes[1]]
        if srng.random() < 0.6:
            dense = list(st.split(axes[1], factor=int(srng.integers(1, 9))))
    jl = [j]
    split_by = srng.choice(["none", "factor", "factor", "nparts"])
    if split_by == "factor":
        jl = list(st.split(j, factor=int(srng.integers(1, 9))))
    elif split_by == "nparts":
        jl = list(st.split(j, nparts=int(srng.integers(1, 4))))
    cut = int(srng.integers(0, len(jl) + 1))        # the dense loops go after jl[:cut]
    order = rows_loops + jl[:cut] + dense + jl[cut:]
    st.reorder(*order)
    inner = order[-1]
    constant = [ax for ax in order if _const(ax)]
    if split_by == "factor" and not dense_axis and srng.random() < 0.3:
        # partial sums over the constant inner part of the ragged axis
        yf = s.rfactor(out, jl[1], factor_axis=int(srng.integers(0, 2)))
        if srng.random() < 0.5:
            s[yf].compute_at(st, st.leaf_iter_vars[len(rows_loops) - 1])
        elif srng.random() < 0.5:
            s[yf].parallel(s[yf].op.axis[0])
        return s
    if inner in constant and srng.random() < 0.7:
        st.vectorize(inner)                 # vector accumulators for a ragged inner part
    for ax in order[:-1]:
        if ax in constant and _const(ax) <= 8 and srng.random() < 0.3:
            st.unroll(ax)
    return s


@pytest.mark.parametrize("program", ["spmv", "spmm", "segment"])
@pytest.mark.parametrize("matrix", ["ragged", "empty", "one", "long"])
def test_random_ragged_schedule(program, matrix, case, rng, check_llvm):
    """A fixed-seed random schedule of a CSR program on a fresh random matrix of each kind,
    against numpy (and the interpreter, after every pass), outputs poisoned."""
    srng = np.random.default_rng([RAGGED_SEED, case, ["spmv", "spmm", "segment"].index(program)])
    row_ptr, col_idx, val, cols = csr_matrix(rng, matrix)
    rows, nnz, width = len(row_ptr) - 1, len(val), int(srng.integers(1, 20))
    symbolic = srng.random() < 0.5
    sizes = (te.var("m"), te.var("n"), te.var("nnz")) if symbolic else (rows, cols, nnz)
    rp_t, ci_t, val_t, dense_t, out, has_dense = ragged_program(program, *sizes, width)
    s = ragged_schedule(srng, te.create_schedule(out.op), out, has_dense)
    if program == "segment":
        dense = rng.uniform(-1, 1, (nnz, width)).astype("float32")
    else:
        dense = rng.uniform(-1, 1, (cols, width) if has_dense else (cols,)).astype("float32")
    want = np.zeros((rows, width) if has_dense else (rows,), np.float64)
    for i in range(rows):
        for k in range(row_ptr[i], row_ptr[i + 1]):
            want[i] += (dense[k] * val[k] if program == "segment" else val[k] * dense[col_idx[k]])
    if program == "segment":
        want += 0.5
    feed = {rp_t: row_ptr, ci_t: col_idx, val_t: val, dense_t: dense}
    if program == "segment":            # no column indices: the nonzeros are rows of D
        del feed[ci_t]
    args = [*feed, out]
    scalars = {sizes[0]: rows} if symbolic else None
    try:
        check_llvm(s, args, feed, expected={out: want},
                   scalars=scalars, rtol=1e-4, atol=1e-5, passes=True)
    except AssertionError as e:
        raise AssertionError(f"schedule:\n{s.to_python()}\n{tc.lower(s, args, simple_mode=True)}\n{e}") from None
