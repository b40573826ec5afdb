"""GPU lowering miscompiles of issue 8 (section 1), one case per repro, checked like ``test_cuda_ops``:

* ``test_emulated``: lower for CUDA, run in the lock-step emulator on fresh random inputs with
  the outputs poisoned (NaN), compare with a float64 numpy reference, and compile the CUDA C with
  ``nvcc -arch=sm_90`` (only that part is skipped without nvcc);
* ``test_gpu``: the same on a real GPU (skipped without one);
* structure tests for what the emulator cannot see (it does not check global-memory races): a
  cross-thread reduction with a tail writes its output once, from thread 0, after the all-reduce,
  and its tail is folded in before the all-reduce;
* one test per error message of cross-thread reductions and of double buffering.

The cases: reductions whose thread-bound split does not divide the axis (global output, a
TVM-style multi-kernel row softmax, rfactor + cross-thread reduce, a ``local`` output attached with
compute_at, the library's softmax / layer norm / row sum at non-divisible sizes, a row tail split
over threadIdx.y), the double-buffered matmul whose peeled last tile lost its loop, transposes
of matrices smaller than (or not a multiple of) the tile, and a loop of shared-memory fetches that
loop partitioning split at a point depending on threadIdx.y (no barriers could go in it).
"""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.topi import cuda_schedules as cs
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.ir.expr import BinOp, Binary, BufferLoad, Call, Var
from tilecraft.ir.functor import post_order_visit
from tilecraft.ir.stmt import Allocate, AttrStmt, BufferStore, For, IfThenElse, LetStmt, SeqStmt
from tilecraft.schedule.passes.gpu_kernels import GPULoweringError
from tilecraft.schedule.passes.gpu_lower import kernels_of
from tilecraft.schedule.passes.gpu_thread_reduce import ALLREDUCE_PREFIX

from .cuda_cases import Case, check_emulated, check_on_gpu

pytestmark = pytest.mark.cuda

bx, tx, ty = (lambda: te.thread_axis("blockIdx.x"), lambda: te.thread_axis("threadIdx.x"),
              lambda: te.thread_axis("threadIdx.y"))


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


# ---- schedules ----------------------------------------------------------------------------------

def row_sum_tail(rows, cols, threads):
    """The issue's repro: ``B[i] = sum_k A[i, k]``, a block per row, k split by ``threads`` (which
    does not divide ``cols``) and bound to threadIdx.x; B in global memory."""
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), "k")
    B = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=threads)
    s[B].bind(B.op.axis[0], bx())
    s[B].bind(ki, tx())
    return s, [A, B]


def row_max_tail(rows, cols, threads):
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), "k")
    B = te.compute((rows,), lambda i: te.max(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=threads)
    s[B].bind(B.op.axis[0], bx())
    s[B].bind(ki, tx())
    return s, [A, B]


def softmax_tvm_style(rows, cols, threads):
    """Row softmax as four kernels (max, exp, sum, normalise), as TVM's tutorials write it: each
    reduction has its row on blockIdx.x and its columns split by ``threads`` on threadIdx.x."""
    X = te.placeholder((rows, cols), name="X")
    k1 = te.reduce_axis((0, cols), "k1")
    k2 = te.reduce_axis((0, cols), "k2")
    M = te.compute((rows,), lambda i: te.max(X[i, k1], axis=k1), name="M")
    E = te.compute((rows, cols), lambda i, j: te.exp(X[i, j] - M[i]), name="E")
    S = te.compute((rows,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    Y = te.compute((rows, cols), lambda i, j: E[i, j] / S[i], name="Y")
    s = te.create_schedule(Y.op)
    for R in (M, S):
        ko, ki = s[R].split(R.op.reduce_axis[0], factor=threads)
        s[R].bind(R.op.axis[0], bx())
        s[R].bind(ki, tx())
    for T in (E, Y):
        jo, ji = s[T].split(T.op.axis[1], factor=threads)
        s[T].bind(T.op.axis[0], bx())
        s[T].bind(ji, tx())
    return s, [X, Y]


def centered_local(rows, cols, threads):
    """``Y[i, j] = X[i, j] - mean_k X[i, k]`` with the row sum a ``local`` stage attached at Y's
    row (compute_at): every thread keeps the reduced value in a register."""
    X = te.placeholder((rows, cols), name="X")
    k = te.reduce_axis((0, cols), "k")
    S = te.compute((rows,), lambda i: te.sum(X[i, k], axis=k), name="S")
    Y = te.compute((rows, cols), lambda i, j: X[i, j] - S[i] * (1.0 / cols), name="Y")
    s = te.create_schedule(Y.op)
    s[S].set_scope("local")
    jo, jt = s[Y].split(Y.op.axis[1], factor=threads)
    s[Y].bind(Y.op.axis[0], bx())
    s[Y].bind(jt, tx())
    s[S].compute_at(s[Y], Y.op.axis[0])
    ko, kt = s[S].split(S.op.reduce_axis[0], factor=threads)
    s[S].bind(kt, tx())
    return s, [X, Y]


def rfactor_tail_in_cross_thread(rows, cols, part, threads):
    """rfactor over the inner ``part`` columns, then the cross-thread reduce of those ``part``
    partial sums split by ``threads`` (which does not divide ``part``); the partial sums are
    computed inside the thread loop (compute_at)."""
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), "k")
    B = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=part)
    BF = s.rfactor(B, ki)
    ro, ri = s[B].split(s[B].op.reduce_axis[0], factor=threads)
    s[B].bind(s[B].op.axis[0], bx())
    s[B].bind(ri, tx())
    s[BF].compute_at(s[B], ri)
    return s, [A, B]


def rfactor_root_then_cross_thread(rows, cols, group, threads):
    """rfactor into partial sums of ``group`` columns computed by a kernel of their own, then a
    cross-thread reduce of the ``cols / group`` partial sums of each row split by ``threads``."""
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), "k")
    B = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=group)
    BF = s.rfactor(B, ko)
    f = s[BF].fuse(*s[BF].op.axis)
    fo, fi = s[BF].split(f, factor=64)
    s[BF].bind(fo, bx())
    s[BF].bind(fi, tx())
    ro, ri = s[B].split(s[B].op.reduce_axis[0], factor=threads)
    s[B].bind(s[B].op.axis[0], bx())
    s[B].bind(ri, tx())
    return s, [A, B]


def rows_on_threadidx_y(rows, cols, threads):
    """Rows split over blocks, threadIdx.y and a serial loop with a tail; the reduction over
    threadIdx.x. The row tail must not split the serial loop at a point that differs between
    threadIdx.y (the all-reduce's barrier would be reached unequally)."""
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), "k")
    B = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    yo, si = s[B].split(ii, nparts=4)
    ko, kx = s[B].split(k, factor=threads)
    s[B].reorder(io, yo, si, ko, kx)
    s[B].bind(io, bx())
    s[B].bind(yo, ty())
    s[B].bind(kx, tx())
    return s, [A, B]


def shared_rows_under_a_thread_tail(rows, cols, extra=10):
    """``C = A + 2 B`` by tiles of 16 rows: threadIdx.y takes every 4th row, a serial loop the
    rest, and each step of it fetches 4 rows of B into shared memory, cooperatively in another
    thread order (so threads read what others wrote). The row tail of C (rows % 16) made loop
    partitioning split the serial loop at a point that depends on threadIdx.y; the barriers
    could then not be placed inside it (a shared-memory race). B has ``extra`` more rows than C,
    so that the fetch needs no guard of its own."""
    A = te.placeholder((rows, cols), name="A")
    B = te.placeholder((rows + extra, cols), name="B")
    C = te.compute((rows, cols), lambda i, j: A[i, j] + B[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    BS = s.cache_read(B, "shared", [C])
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 16, 16)
    ii, ti = s[C].split(ii, factor=4)
    s[C].reorder(io, jo, ti, ji, ii)
    s[C].bind(io, te.thread_axis("blockIdx.y"))
    s[C].bind(jo, bx())
    s[C].bind(ti, ty())
    s[C].bind(ji, tx())
    s[BS].compute_at(s[C], ii)
    f = s[BS].fuse(*s[BS].op.axis)
    f, t1 = s[BS].split(f, factor=4)
    f, t0 = s[BS].split(f, factor=16)
    s[BS].bind(t0, tx())
    s[BS].bind(t1, ty())
    return s, [A, B, C]


# ---- cases --------------------------------------------------------------------------------------

def _softmax_ref(ins, **k):
    x = ins[0].astype("float64")
    e = np.exp(x - x.max(1, keepdims=True))
    return [e / e.sum(1, keepdims=True)]


def _layer_norm_ref(ins, eps=1e-5, **k):
    x, g, b = (a.astype("float64") for a in ins)
    m = x.mean(1, keepdims=True)
    return [(x - m) / np.sqrt(x.var(1, keepdims=True) + eps) * g + b]


def _row_sum_case(name, make, emu, gpu):
    return Case(name, make,
                lambda rng, rows, cols, **k: [_f32(rng, rows, cols)],
                lambda ins, **k: [ins[0].astype("float64").sum(1)],
                lambda rows, **k: [((rows,), "float32")],
                emu=emu, gpu=gpu, rtol=1e-4, atol=1e-4)


def _softmax_case(name, make, emu, gpu):
    return Case(name, make,
                lambda rng, rows, cols, **k: [_f32(rng, rows, cols)],
                _softmax_ref,
                lambda rows, cols, **k: [((rows, cols), "float32")],
                emu=emu, gpu=gpu)


def _layer_norm_case(name, emu, gpu):
    return Case(name, lambda rows, cols, **k: cs.layer_norm(rows, cols, **k),
                lambda rng, rows, cols, **k: [_f32(rng, rows, cols) + 3, _f32(rng, cols), _f32(rng, cols)],
                _layer_norm_ref,
                lambda rows, cols, **k: [((rows, cols), "float32")],
                emu=emu, gpu=gpu, rtol=1e-4, atol=1e-4)


def _matmul_case(name, emu, gpu, **kw):
    return Case(name, lambda M, N, K, **k: cs.matmul(M, N, K, **kw),
                lambda rng, M, N, K, **k: [_f32(rng, M, K), _f32(rng, K, N)],
                lambda ins, **k: [ins[0].astype("float64") @ ins[1]],
                lambda M, N, **k: [((M, N), "float32")],
                emu=emu, gpu=gpu, rtol=1e-4, atol=1e-4)


def _transpose_case(name, emu, gpu):
    return Case(name, lambda n, m, **k: cs.transpose(n, m, **k),
                lambda rng, n, m, **k: [_f32(rng, n, m)],
                lambda ins, **k: [ins[0].T.copy()],
                lambda n, m, **k: [((m, n), "float32")],
                emu=emu, gpu=gpu, rtol=0, atol=0)


CASES = [
    # 1. thread-bound reductions with a tail
    _row_sum_case("row_sum_global_tail", lambda rows, cols, threads: row_sum_tail(rows, cols, threads),
                  emu=dict(rows=4, cols=1000, threads=128), gpu=dict(rows=4096, cols=1000, threads=128)),
    Case("row_max_global_tail", lambda rows, cols, threads: row_max_tail(rows, cols, threads),
         lambda rng, rows, cols, **k: [_f32(rng, rows, cols)],
         lambda ins, **k: [ins[0].astype("float64").max(1)],
         lambda rows, **k: [((rows,), "float32")],
         emu=dict(rows=3, cols=77, threads=32), gpu=dict(rows=1000, cols=1111, threads=256)),
    _softmax_case("softmax_tvm_style_tail", lambda rows, cols, threads: softmax_tvm_style(rows, cols, threads),
                  emu=dict(rows=3, cols=1000, threads=128), gpu=dict(rows=1024, cols=1000, threads=128)),
    Case("local_output_compute_at_tail", lambda rows, cols, threads: centered_local(rows, cols, threads),
         lambda rng, rows, cols, **k: [_f32(rng, rows, cols)],
         lambda ins, **k: [ins[0].astype("float64") - ins[0].astype("float64").mean(1, keepdims=True)],
         lambda rows, cols, **k: [((rows, cols), "float32")],
         emu=dict(rows=3, cols=1000, threads=128), gpu=dict(rows=512, cols=1000, threads=128),
         rtol=1e-4, atol=1e-4),
    _row_sum_case("rfactor_tail_in_cross_thread_stage",
                  lambda rows, cols, part, threads: rfactor_tail_in_cross_thread(rows, cols, part, threads),
                  emu=dict(rows=6, cols=96, part=24, threads=16),
                  gpu=dict(rows=1000, cols=960, part=48, threads=32)),
    _row_sum_case("rfactor_root_then_cross_thread_tail",
                  lambda rows, cols, group, threads: rfactor_root_then_cross_thread(rows, cols, group, threads),
                  emu=dict(rows=6, cols=400, group=4, threads=32),
                  gpu=dict(rows=1000, cols=4000, group=4, threads=256)),
    _row_sum_case("rows_on_threadidx_y_row_tail",
                  lambda rows, cols, threads: rows_on_threadidx_y(rows, cols, threads),
                  emu=dict(rows=30, cols=96, threads=32), gpu=dict(rows=1001, cols=512, threads=64)),
    _softmax_case("library_softmax_2x1000_256", lambda rows, cols, **k: cs.softmax(rows, cols, **k),
                  emu=dict(rows=2, cols=1000, threads=256), gpu=dict(rows=300, cols=1000, threads=256)),
    _softmax_case("library_softmax_3x333_64_vec1", lambda rows, cols, **k: cs.softmax(rows, cols, **k),
                  emu=dict(rows=3, cols=333, threads=64, vec=1), gpu=dict(rows=300, cols=3333, threads=128, vec=1)),
    _layer_norm_case("library_layer_norm_2x300_64", emu=dict(rows=2, cols=300, threads=64),
                     gpu=dict(rows=256, cols=300, threads=64)),
    _layer_norm_case("library_layer_norm_3x1000_128", emu=dict(rows=3, cols=1000, threads=128),
                     gpu=dict(rows=128, cols=1000, threads=128)),
    _row_sum_case("library_row_sum_rfactor_tail", lambda rows, cols, **k: cs.row_sum_rfactor(rows, cols, **k),
                  emu=dict(rows=7, cols=1000, threads_x=32, rows_per_block=4),
                  gpu=dict(rows=1000, cols=1000, threads_x=32, rows_per_block=8)),
    # 2. double buffering when loop partitioning peels the last tile
    # K = 31: the last of 16 tiles is partial and peeled (at K = 32 the peel was spurious, see
    # tests/schedule/test_loop_partition.py)
    _matmul_case("matmul_double_buffer_peeled_tile",
                 emu=dict(M=64, N=64, K=31), gpu=dict(M=64, N=64, K=31),
                 block=(16, 16), vthreads=(2, 2), threads=(4, 4), k_tile=2, double_buffer=True),
    _matmul_case("matmul_double_buffer_k_tail",
                 emu=dict(M=64, N=64, K=30), gpu=dict(M=256, N=256, K=1002),
                 block=(32, 32), vthreads=(1, 1), threads=(8, 8), k_tile=4, double_buffer=True),
    # a shared tile fetched in a loop that the row tail would split per threadIdx.y
    Case("shared_rows_under_a_thread_tail", lambda rows, cols, **k: shared_rows_under_a_thread_tail(rows, cols),
         lambda rng, rows, cols, **k: [_f32(rng, rows, cols), _f32(rng, rows + 10, cols)],
         lambda ins, rows, **k: [ins[0].astype("float64") + 2 * ins[1][:rows].astype("float64")],
         lambda rows, cols, **k: [((rows, cols), "float32")],
         emu=dict(rows=30, cols=64), gpu=dict(rows=1001, cols=1024)),
    # 3. transposes of matrices smaller than the tile or not a multiple of it
    _transpose_case("transpose_smaller_than_tile", emu=dict(n=24, m=12, tile=32), gpu=dict(n=24, m=12, tile=32)),
    _transpose_case("transpose_one_column", emu=dict(n=100, m=1, tile=32), gpu=dict(n=1000, m=1, tile=32)),
    _transpose_case("transpose_not_multiple_of_tile", emu=dict(n=33, m=65, tile=16, rows_per_pass=4),
                    gpu=dict(n=1000, m=999, tile=32)),
]
CASE_IDS = [c.name for c in CASES]


@pytest.fixture(scope="module")
def rng():
    seed = np.random.SeedSequence().entropy % 2**32
    print(f"random seed: {seed}")
    return np.random.default_rng(seed)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_emulated(case, rng):
    check_emulated(case, rng, trials=2)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gpu(case, rng):
    check_on_gpu(case, rng, trials=3)


# ---- structure: what the emulator cannot see (global-memory races) -----------------------------

def _walk(stmt, conds, out):
    """Every statement with the conditions that enclose it, in program order."""
    out.append((stmt, conds))
    if isinstance(stmt, SeqStmt):
        for x in stmt.seq:
            _walk(x, conds, out)
    elif isinstance(stmt, IfThenElse):
        _walk(stmt.then_case, conds + [stmt.condition], out)
        if stmt.else_case is not None:
            _walk(stmt.else_case, conds, out)
    elif isinstance(stmt, (For, LetStmt, Allocate, AttrStmt)):
        _walk(stmt.body, conds, out)
    return out


def _is_thread0(cond) -> bool:
    return (isinstance(cond, Binary) and cond.op is BinOp.EQ and isinstance(cond.a, Var)
            and cond.a.name == "threadIdx.x" and getattr(cond.b, "value", None) == 0)


def _allreduce_in(stmt) -> bool:
    return isinstance(stmt, LetStmt) and isinstance(stmt.value, Call) and stmt.value.name.startswith(ALLREDUCE_PREFIX)


@pytest.mark.parametrize("make", [lambda: row_sum_tail(4, 1000, 128), lambda: row_max_tail(3, 77, 32),
                                  lambda: rfactor_root_then_cross_thread(6, 400, 4, 32),
                                  lambda: rfactor_tail_in_cross_thread(6, 96, 24, 16)],
                         ids=["sum", "max", "rfactor_root", "rfactor_at"])
def test_global_output_written_once_by_thread0_after_allreduce(make):
    s, args = make()
    func = tilecraft.lower(s, args, target="cuda")
    out = args[-1].name
    _, kernels = kernels_of(func.body)
    _, body = kernels[-1]
    order = _walk(body, [], [])
    stores = [(k, st, c) for k, (st, c) in enumerate(order) if isinstance(st, BufferStore) and st.buffer.name == out]
    reduces = [k for k, (st, _) in enumerate(order) if _allreduce_in(st)]
    assert len(reduces) == 1 and len(stores) == 1, str(func)
    k, store, conds = stores[0]
    assert k > reduces[0], "the output is written before the all-reduce"
    assert any(_is_thread0(c) for c in conds), f"'{out}' is written by every thread, not only thread 0"
    assert isinstance(store.value, Var) and store.value.name.endswith(".red_result"), store
    # no read-modify-write of the output anywhere in the kernel: the tail is folded in the register
    loads = []
    post_order_visit(body, lambda n: loads.append(n) if isinstance(n, BufferLoad) and n.buffer.name == out else None)
    assert not loads, f"the kernel reads '{out}' (a read-modify-write after the all-reduce)"


def test_tail_guard_sits_inside_the_per_thread_fold():
    s, args = row_sum_tail(4, 1000, 128)
    func = tilecraft.lower(s, args, target="cuda")
    _, [(_, body)] = kernels_of(func.body)
    order = _walk(body, [], [])
    red = [k for k, (st, _) in enumerate(order) if _allreduce_in(st)][0]
    folds = [(k, c) for k, (st, c) in enumerate(order)
             if isinstance(st, BufferStore) and st.buffer.name == "B.red" and isinstance(st.value, Binary)]
    assert len(folds) == 2 and all(k < red for k, _ in folds), str(func)
    guards = [c for _, c in folds if c]
    assert len(guards) == 1 and "896" in str(guards[0][0]), str(func)    # k.outer = 7: 896 + tx < 1000


def test_loop_partition_keeps_the_tail_inside_the_cross_thread_scope():
    s, args = row_sum_tail(4, 1000, 128)
    func = tilecraft.lower(s, args)                               # no target: the marked scope stays
    attrs = [st for st, _ in _walk(func.body, [], []) if isinstance(st, AttrStmt)]
    assert [a.key for a in attrs] == ["cross_thread_reduction"] and attrs[0].value == "threadIdx.x"
    inside = [st for st, _ in _walk(attrs[0].body, [], []) if isinstance(st, BufferStore) and st.buffer.name == "B"]
    everywhere = [st for st, _ in _walk(func.body, [], []) if isinstance(st, BufferStore) and st.buffer.name == "B"]
    assert len(inside) == 3 and len(everywhere) == 3              # init, partitioned head, peeled tail


def test_loop_with_shared_fetches_is_not_split_per_thread():
    # the row tail of C depends on threadIdx.y; the loop holds a shared-memory fetch whose
    # barriers every thread must reach equally often: the loop stays whole, its guard inside,
    # with a barrier before the fetch and one before the reads
    s, args = shared_rows_under_a_thread_tail(30, 64)
    loops = []
    post_order_visit(tilecraft.lower(s, args).body, lambda n: loops.append(n) if isinstance(n, For) else None)
    assert [lp.extent.value for lp in loops if lp.loop_var.name.startswith("i.inner.outer")] == [4]
    _, [(_, body)] = kernels_of(tilecraft.lower(s, args, target="cuda").body)
    assert isinstance(body, For) and str(body.body).count("cuda.syncthreads()") == 2, str(body)


def test_cross_thread_reduction_with_no_element_writes_the_identity():
    # the simplifier removes the reduction loops (no element passes the `where`): B = 0, no all-reduce
    A = te.placeholder((4, 256), name="A")
    k = te.reduce_axis((0, 256), "k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k, where=k < 0), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=64)
    s[B].bind(B.op.axis[0], bx())
    s[B].bind(ki, tx())
    func = tilecraft.lower(s, [A, B], target="cuda")
    b = np.full(4, np.nan, "float32")
    emulate(func, [np.ones((4, 256), "float32"), b])
    np.testing.assert_array_equal(b, 0)


# ---- errors -------------------------------------------------------------------------------------

def _row_reduce(n=4, m=256):
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    return A, B, te.create_schedule(B.op)


def test_cross_thread_reduction_needs_a_known_combiner():
    A = te.placeholder((4, 256), name="A")
    k = te.reduce_axis((0, 256), "k")
    # log-sum-exp: the combine is not ``x op y`` with op one of + * min max
    lse = te.comm_reducer(lambda x, y: te.log(te.exp(x) + te.exp(y)), lambda t: te.min_value(t), name="lse")
    B = te.compute((4,), lambda i: lse(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=64)
    s[B].bind(B.op.axis[0], bx())
    s[B].bind(ki, tx())
    with pytest.raises(GPULoweringError, match=r"reduction of stage 'B' .*threadIdx.x, but its combiner is "
                                               r"not one of sum/prod/min/max"):
        tilecraft.lower(s, [A, B], target="cuda")


def test_cross_thread_reduction_with_two_outputs_is_refused():
    A = te.placeholder((4, 256), name="A")
    k = te.reduce_axis((0, 256), "k")
    argmax = te.comm_reducer(lambda x, y: (te.select(x[1] >= y[1], x[0], y[0]), te.max(x[1], y[1])),
                             lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    R0, R1 = te.compute((4,), lambda i: argmax((k, A[i, k]), axis=k), name="R")
    s = te.create_schedule(R0.op)
    ko, ki = s[R0].split(k, factor=64)
    s[R0].bind(R0.op.axis[0], bx())
    s[R0].bind(ki, tx())
    with pytest.raises(GPULoweringError, match=r"reduction of stage 'R' .*threadIdx.x, but it has several outputs "
                                               r"\(R.v0, R.v1\); cross-thread reductions support one output"):
        tilecraft.lower(s, [A, R0, R1], target="cuda")


def test_cross_thread_reduction_over_threadidx_y_is_refused():
    A, B, s = _row_reduce()
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=64)
    s[B].bind(B.op.axis[0], bx())
    s[B].bind(ki, ty())
    with pytest.raises(GPULoweringError, match=r"reduction of stage 'B' is bound to threadIdx.y: cross-thread "
                                               r"reductions are supported over threadIdx.x only"):
        tilecraft.lower(s, [A, B], target="cuda")


def test_reduction_axis_bound_to_blockidx_is_refused():
    A, B, s = _row_reduce()
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=64)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.y"))
    s[B].bind(ko, bx())
    s[B].bind(ki, tx())
    with pytest.raises(GPULoweringError, match=r"reduction of stage 'B' has a reduction axis bound to "
                                               r"blockIdx.x: blocks cannot combine.*rfactor"):
        tilecraft.lower(s, [A, B], target="cuda")


def test_cross_thread_reduction_with_a_data_loop_inside_is_refused():
    A = te.placeholder((64, 256), name="A")
    k = te.reduce_axis((0, 256), "k")
    B = te.compute((64,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    ko, ki = s[B].split(k, factor=64)
    s[B].reorder(io, ko, ki, ii)
    s[B].bind(io, bx())
    s[B].bind(ki, tx())
    with pytest.raises(GPULoweringError, match=r"reduction of stage 'B' is bound to threadIdx.x but some of its "
                                               r"data loops sit inside its reduction loops; reorder"):
        tilecraft.lower(s, [A, B], target="cuda")


def test_double_buffer_outside_any_loop_is_refused():
    # the shared tile is attached at the block loop: no loop of tiles to pipeline
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] * 2, name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    i, j = B.op.axis
    s[B].bind(i, bx())
    s[B].bind(j, tx())
    s[AS].compute_at(s[B], i)
    s[AS].bind(s[AS].op.axis[1], tx())
    s[AS].double_buffer()
    with pytest.raises(GPULoweringError, match=r"double_buffer on 'A.shared': the stage is not attached inside a "
                                               r"loop of the kernel"):
        tilecraft.lower(s, [A, B], target="cuda")
