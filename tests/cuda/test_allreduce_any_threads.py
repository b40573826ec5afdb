"""Cross-thread reductions over any number of threads (not only a power of two).

They were refused ("needs a power of two"); TVM allows them. The CUDA C keeps its power-of-two
all-reduce (``tc_allreduce``, unchanged: the benches depend on it) and adds ``tc_allreduce_any``
for the rest, only to sources that use it: a row of threadIdx.x may then start and end anywhere in
a warp (48 threads × 2 rows: the second row starts at lane 16 of warp 1), so the warp shuffles
fold each row's piece of a warp into its first lane, combining only lanes of the row that exist,
and the pieces' partials are combined through shared memory. The emulator runs the same steps
(``cuda_emulate._allreduce_any``), checked here for every block shape against numpy.

* the cases emulated against float64 numpy and compiled with nvcc, and run on a GPU by
  ``pytest -m cuda`` (rows straddling warps, more than a warp per row, 1000 threads, rfactor,
  softmax / layer norm, max / min / prod, int32, float16, float64, ``init=``);
* the emulator's steps for every non-power-of-two BDX and every row count that fits a block;
* the C: ``tc_allreduce_any<T, BDX, NT>`` where BDX is not a power of two, the power-of-two
  source unchanged.
"""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.topi import cuda_schedules as cs
from tilecraft.codegen.cuda import ALLREDUCE_ANY, PRELUDE, generate_cuda
from tilecraft.codegen.cuda_emulate import _allreduce_any

from .cuda_cases import Case, check_outputs, make_arrays, check_emulated, check_on_gpu
from .test_gpu_correctness import _layer_norm_ref, _softmax_ref

pytestmark = pytest.mark.cuda

bx, tx, ty = (lambda: te.thread_axis("blockIdx.x"), lambda: te.thread_axis("threadIdx.x"),
              lambda: te.thread_axis("threadIdx.y"))

_NP = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}
PROD = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, t), name="prod")


def row_reduce(rows, cols, threads, rows_per_block=1, red="sum", dtype="float32", nparts=False, init=None):
    """``B[i] = red_k A[i, k]``, the reduction split by ``threads`` (or into ``threads`` parts)
    over threadIdx.x; ``rows_per_block`` rows over threadIdx.y."""
    A = te.placeholder((rows, cols), dtype, name="A")
    k = te.reduce_axis((0, cols), "k")
    kw = {} if init is None else {"init": te.const(init, dtype)}
    reducer = PROD if red == "prod" else getattr(te, red)
    B = te.compute((rows,), lambda i: reducer(A[i, k], axis=k, **kw), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, nparts=threads) if nparts else s[B].split(k, factor=threads)
    if rows_per_block > 1:
        io, ii = s[B].split(B.op.axis[0], factor=rows_per_block)
        s[B].bind(io, bx())
        s[B].bind(ii, ty())
    else:
        s[B].bind(B.op.axis[0], bx())
    s[B].bind(ko if nparts else ki, tx())
    return s, [A, B]


def rfactor_rows(rows, cols, threads, rows_per_block):
    """rfactor of the inner ``threads`` columns, the partials under the thread-bound axis, rows
    over threadIdx.y (as ``cuda_schedules.row_sum_rfactor`` with any ``threads_x``)."""
    return cs.row_sum_rfactor(rows, cols, threads_x=threads, rows_per_block=rows_per_block)


def _row_case(name, make, emu, gpu, red="sum", dtype="float32", init=None, tol=1e-4, low=-1.0, high=1.0):
    def inputs(rng, rows, cols, **k):
        a = rng.uniform(low, high, (rows, cols))
        if dtype == "int32":
            return [rng.integers(-50, 51, (rows, cols)).astype("int32")]
        return [a.astype(dtype)]

    def ref(ins, **k):
        r = _NP[red](ins[0].astype("float64"), axis=1)
        if init is not None:
            r = {"sum": r + init, "max": np.maximum(r, init), "min": np.minimum(r, init), "prod": r * init}[red]
        return [r]
    return Case(name, make, inputs, ref, lambda rows, **k: [((rows,), dtype)], emu=emu, gpu=gpu,
                rtol=tol, atol=tol)


CASES = [
    # one row per block: the last warp partial (48 = 32 + 16), 1000 threads (32 warps, 8 lanes short)
    _row_case("sum_48_threads", lambda rows, cols, **k: row_reduce(rows, cols, **k),
              emu=dict(rows=3, cols=100, threads=48), gpu=dict(rows=1000, cols=1000, threads=48)),
    _row_case("sum_1000_threads", lambda rows, cols, **k: row_reduce(rows, cols, **k),
              emu=dict(rows=2, cols=2500, threads=1000), gpu=dict(rows=300, cols=5000, threads=1000)),
    _row_case("max_9_threads", lambda rows, cols, **k: row_reduce(rows, cols, red="max", **k),
              emu=dict(rows=4, cols=50, threads=9), gpu=dict(rows=999, cols=77, threads=9), red="max"),
    # rows straddling warps: rows of 6 over 5 rows (30 threads), of 10 over 7 rows, of 100 over
    # 3 rows (each row reaches into 4 warps), of 96 over 2 rows (rows start at warp boundaries)
    _row_case("sum_6_threads_5_rows", lambda rows, cols, **k: row_reduce(rows, cols, **k),
              emu=dict(rows=11, cols=40, threads=6, rows_per_block=5),
              gpu=dict(rows=1001, cols=40, threads=6, rows_per_block=5)),
    _row_case("min_10_threads_7_rows", lambda rows, cols, **k: row_reduce(rows, cols, red="min", **k),
              emu=dict(rows=9, cols=33, threads=10, rows_per_block=7),
              gpu=dict(rows=999, cols=333, threads=10, rows_per_block=7), red="min"),
    _row_case("sum_100_threads_3_rows", lambda rows, cols, **k: row_reduce(rows, cols, **k),
              emu=dict(rows=7, cols=250, threads=100, rows_per_block=3),
              gpu=dict(rows=3000, cols=1000, threads=100, rows_per_block=3)),
    _row_case("sum_96_threads_2_rows_float64", lambda rows, cols, **k: row_reduce(rows, cols, dtype="float64", **k),
              emu=dict(rows=3, cols=200, threads=96, rows_per_block=2),
              gpu=dict(rows=1000, cols=1000, threads=96, rows_per_block=2), dtype="float64", tol=1e-10),
    _row_case("sum_24_parts_int32_init", lambda rows, cols, **k: row_reduce(rows, cols, dtype="int32", nparts=True,
                                                                            init=7, **k),
              emu=dict(rows=3, cols=100, threads=24), gpu=dict(rows=500, cols=1000, threads=24),
              dtype="int32", init=7, tol=0),
    _row_case("prod_12_threads_3_rows", lambda rows, cols, **k: row_reduce(rows, cols, red="prod", **k),
              emu=dict(rows=5, cols=30, threads=12, rows_per_block=3),
              gpu=dict(rows=600, cols=30, threads=12, rows_per_block=3), red="prod", low=0.9, high=1.1),
    _row_case("max_40_threads_float16", lambda rows, cols, **k: row_reduce(rows, cols, red="max", dtype="float16", **k),
              emu=dict(rows=3, cols=100, threads=40, rows_per_block=3),
              gpu=dict(rows=300, cols=500, threads=40, rows_per_block=3), red="max", dtype="float16", tol=0),
    # rfactor with the fuzzer's former rejections: 6, 10 and 104 threads per row
    _row_case("rfactor_6_threads_8_rows", lambda rows, cols, **k: rfactor_rows(rows, cols, **k),
              emu=dict(rows=10, cols=100, threads=6, rows_per_block=8),
              gpu=dict(rows=1000, cols=1000, threads=6, rows_per_block=8)),
    _row_case("rfactor_10_threads_4_rows", lambda rows, cols, **k: rfactor_rows(rows, cols, **k),
              emu=dict(rows=5, cols=97, threads=10, rows_per_block=4),
              gpu=dict(rows=777, cols=1111, threads=10, rows_per_block=4)),
    _row_case("rfactor_104_threads_2_rows", lambda rows, cols, **k: rfactor_rows(rows, cols, **k),
              emu=dict(rows=3, cols=300, threads=104, rows_per_block=2),
              gpu=dict(rows=1000, cols=2000, threads=104, rows_per_block=2)),
    # the library's one-kernel softmax and layer norm with threads not a power of two
    Case("library_softmax_96_threads", lambda rows, cols, **k: cs.softmax(rows, cols, **k),
         lambda rng, rows, cols, **k: [rng.standard_normal((rows, cols)).astype("float32")],
         _softmax_ref, lambda rows, cols, **k: [((rows, cols), "float32")],
         emu=dict(rows=2, cols=1000, threads=96), gpu=dict(rows=500, cols=3000, threads=96)),
    Case("library_layer_norm_48_threads", lambda rows, cols, **k: cs.layer_norm(rows, cols, **k),
         lambda rng, rows, cols, **k: [rng.standard_normal((rows, cols)).astype("float32") + 3,
                                       rng.standard_normal(cols).astype("float32"),
                                       rng.standard_normal(cols).astype("float32")],
         _layer_norm_ref, lambda rows, cols, **k: [((rows, cols), "float32")],
         emu=dict(rows=2, cols=300, threads=48), gpu=dict(rows=256, cols=768, threads=48), rtol=1e-4, atol=1e-4),
]
CASE_IDS = [c.name for c in CASES]


def _arrays(case, rng, size):
    """Fresh inputs; outputs poisoned with NaN (INT_MIN for integers)."""
    if case.out_shapes(**size)[0][1] != "int32":
        return make_arrays(case, rng, size)
    return case.inputs(rng, **size), [np.full(shape, np.iinfo(dtype).min, dtype)
                                      for shape, dtype in case.out_shapes(**size)]


def _check(case, ins, outs, size, where):
    if outs[0].dtype.kind == "i":
        want = case.reference(ins, **size)[0]
        np.testing.assert_array_equal(outs[0], want, err_msg=f"{case.name} ({where})")
        return
    check_outputs(case, ins, outs, size, where)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_emulated(case, rng):
    check_emulated(case, rng, trials=2, arrays=_arrays, check=_check, needle="tc_allreduce_any<")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gpu(case, rng):
    check_on_gpu(case, rng, trials=3, arrays=_arrays, check=_check, needle="tc_allreduce_any<")


# ---- the emulator's steps of tc_allreduce_any ------------------------------------------------

def test_allreduce_any_steps_for_every_block_shape(rng):
    # every BDX that is not a power of two, every number of rows that fits 1024 threads, two
    # blocks; int64 values, so the result must be exact whatever the order of the fold
    for bdx in range(3, 1025):
        if bdx & (bdx - 1) == 0:
            continue
        for rows in sorted({1, 2, 3, 1024 // bdx} - {0}):
            nt = bdx * rows
            v = rng.integers(-1000, 1000, 2 * nt)
            for op in (np.add, np.maximum):
                want = np.repeat(op.reduce(v.reshape(-1, bdx), axis=1), bdx)
                got = _allreduce_any(v, op, bdx, nt)
                assert (got == want).all(), (bdx, rows, op.__name__)


# ---- the C ---------------------------------------------------------------------------------

def test_power_of_two_source_is_unchanged():
    # the power-of-two all-reduce and the prelude stay as they were; tc_allreduce_any is added
    # only to sources that use it
    src = generate_cuda(tilecraft.lower(*row_reduce(4, 1000, 128), target="cuda"))
    assert "tc_allreduce<float, 128>(" in src and "tc_allreduce_any" not in src
    assert src.startswith("// generated by tilecraft\n" + PRELUDE + "\n")
    src = generate_cuda(tilecraft.lower(*row_reduce(4, 1000, 48, rows_per_block=2), target="cuda"))
    assert "tc_allreduce_any<float, 48, 96>(" in src
    assert src.startswith("// generated by tilecraft\n" + PRELUDE + ALLREDUCE_ANY + "\n")
