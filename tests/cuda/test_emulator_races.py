"""The emulator's global-memory race check: seeded races are reported with the buffer, the index
and both threads; valid kernels (the library's schedules, barriers, multi-kernel programs,
vthread, double buffering, cooperative fetches, a cross-thread reduction written by thread 0)
run without a word.

The racy kernels are written as IR by hand (``_kernel``), since a correct lowering never makes
them; each has a race-free twin that the check must accept. At the end: memory no thread wrote
(global workspace, shared, local) reads as poison, not zeros.
"""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.topi import cuda_schedules as cs
from tilecraft.codegen.cuda_emulate import EmulationError, emulate
from tilecraft.ir.expr import BufferLoad, Call, Const, Ramp, Var
from tilecraft.ir.stmt import Buffer, BufferStore, Evaluate, IfThenElse, PrimFunc, seq
from tilecraft.schedule.passes.gpu_barriers import SYNC
from tilecraft.schedule.passes.gpu_kernels import KernelInfo, kernel_stmt
from tilecraft.testing import assert_sum_close

from . import cuda_cases

pytestmark = pytest.mark.cuda

I32 = "int32"


def _c(v):
    return Const(v, I32)


def _kernel(buffers, grid: int, block: int, body_of, grid_y: int = 1):
    """A function of one kernel with ``grid`` (× ``grid_y``) blocks of ``block`` threads whose body
    is ``body_of(bx, tx, by)``."""
    bx, by, tx = Var("blockIdx.x", I32), Var("blockIdx.y", I32), Var("threadIdx.x", I32)
    index_vars = {"blockIdx.x": bx, "threadIdx.x": tx}
    extents = {"blockIdx.x": _c(grid), "threadIdx.x": block}
    if grid_y > 1:
        index_vars["blockIdx.y"], extents["blockIdx.y"] = by, _c(grid_y)
    info = KernelInfo("k", index_vars, extents, {})
    info.params = list(buffers)
    return PrimFunc("f", tuple(buffers), kernel_stmt(info, body_of(bx, tx, by)))


def _buf(name, *shape, dtype="float32"):
    return Buffer(name, tuple(_c(d) for d in shape), dtype)


def _load(b, i):
    return BufferLoad(b, (i,), b.dtype)


def _store(b, i, v):
    return BufferStore(b, v, (i,))


BARRIER = Evaluate(Call(SYNC, (), I32))


@pytest.fixture
def arrays(rng):
    def make(*shapes):
        return [rng.standard_normal(s).astype("float32") for s in shapes]
    return make


# --- seeded races ----------------------------------------------------------------------------

def test_cross_block_write_write(arrays):
    A, C = _buf("A", 64), _buf("C", 32)

    def body(bx, tx, by):     # both blocks write C[threadIdx.x], in two statements
        return seq(IfThenElse(bx == 0, _store(C, tx, _load(A, tx))),
                   IfThenElse(bx == 1, _store(C, tx, _load(A, 32 + tx))))
    f = _kernel([A, C], 2, 32, body)
    a, c = arrays(64, 32)
    with pytest.raises(EmulationError, match=r"kernel k: race on global 'C' at flat index 0 \(C\[0\]\): "
                                             r"thread \(0, 0, 0\) of block \(1, 0, 0\) writes it and thread "
                                             r"\(0, 0, 0\) of block \(0, 0, 0\) writes it, in another block"):
        emulate(f, [a, c])


def test_cross_block_write_then_read(arrays):
    A, C, D = _buf("A", 64), _buf("C", 64), _buf("D", 64)

    def body(bx, tx, by):
        mine = bx * 32 + tx
        theirs = ((bx + 1) % 2) * 32 + tx             # the other block's element
        return seq(_store(C, mine, _load(A, mine)), BARRIER, _store(D, mine, _load(C, theirs)))
    f = _kernel([A, C, D], 2, 32, body)
    a, c, d = arrays(64, 64, 64)
    # a barrier orders the threads of one block, never two blocks
    with pytest.raises(EmulationError, match=r"race on global 'C' at flat index 32 \(C\[32\]\): thread "
                                             r"\(0, 0, 0\) of block \(0, 0, 0\) reads it and thread \(0, 0, 0\) "
                                             r"of block \(1, 0, 0\) writes it, in another block"):
        emulate(f, [a, c, d])


def test_cross_block_read_then_write(arrays):
    A, C, D = _buf("A", 64), _buf("C", 64), _buf("D", 64)

    def body(bx, tx, by):
        mine = bx * 32 + tx
        theirs = ((bx + 1) % 2) * 32 + tx
        return seq(_store(D, mine, _load(C, theirs)), _store(C, mine, _load(A, mine)))
    f = _kernel([A, C, D], 2, 32, body)
    a, c, d = arrays(64, 64, 64)
    with pytest.raises(EmulationError, match=r"race on global 'C' at flat index 0 \(C\[0\]\): thread "
                                             r"\(0, 0, 0\) of block \(0, 0, 0\) writes it and thread \(0, 0, 0\) "
                                             r"of block \(1, 0, 0\) reads it, in another block"):
        emulate(f, [a, c, d])


def _neighbour_kernel(barrier: bool):
    """C[t] = A[t]; (barrier;) D[t] = C[t + 1 mod 32], one block."""
    A, C, D = _buf("A", 32), _buf("C", 32), _buf("D", 32)

    def body(bx, tx, by):
        return seq(_store(C, tx, _load(A, tx) * 2.0), BARRIER if barrier else None,
                   _store(D, tx, _load(C, (tx + 1) % 32)))
    return _kernel([A, C, D], 1, 32, body)


def test_same_block_read_without_barrier(arrays):
    a, c, d = arrays(32, 32, 32)
    with pytest.raises(EmulationError, match=r"race on global 'C' at flat index 1 \(C\[1\]\): thread "
                                             r"\(0, 0, 0\) of block \(0, 0, 0\) reads it and thread \(1, 0, 0\) "
                                             r"of block \(0, 0, 0\) writes it, with no __syncthreads\(\) between"):
        emulate(_neighbour_kernel(barrier=False), [a, c, d])


def test_same_block_with_barrier_is_fine(arrays):
    a, c, d = arrays(32, 32, 32)
    emulate(_neighbour_kernel(barrier=True), [a, c, d])
    np.testing.assert_array_equal(d, np.roll(a * 2, -1))


def test_same_block_write_after_read_without_barrier(arrays):
    A, C, D = _buf("A", 32), _buf("C", 32), _buf("D", 32)

    def body(bx, tx, by):     # thread t reads C[t+1] and then thread t+1 overwrites it
        return seq(_store(D, tx, _load(C, (tx + 1) % 32)), _store(C, tx, _load(A, tx)))
    a, c, d = arrays(32, 32, 32)
    with pytest.raises(EmulationError, match=r"race on global 'C' at flat index 0 \(C\[0\]\): thread "
                                             r"\(0, 0, 0\) of block \(0, 0, 0\) writes it and thread \(31, 0, 0\) "
                                             r"of block \(0, 0, 0\) reads it, with no __syncthreads"):
        emulate(_kernel([A, C, D], 1, 32, body), [a, c, d])


def test_same_block_write_write_without_barrier(arrays):
    A, C = _buf("A", 32), _buf("C", 32)

    def body(bx, tx, by, barrier=False):
        return seq(_store(C, tx, _load(A, tx)), _store(C, (tx + 1) % 32, _load(A, tx)))
    a, c = arrays(32, 32)
    with pytest.raises(EmulationError, match=r"race on global 'C' at flat index 1 .*thread \(0, 0, 0\) of "
                                             r"block \(0, 0, 0\) writes it and thread \(1, 0, 0\) of block "
                                             r"\(0, 0, 0\) writes it, with no __syncthreads"):
        emulate(_kernel([A, C], 1, 32, body), [a, c])
    ordered = _kernel([A, C], 1, 32, lambda bx, tx, by: seq(_store(C, tx, _load(A, tx)), BARRIER,
                                                            _store(C, (tx + 1) % 32, _load(A, tx))))
    emulate(ordered, [a, c])
    np.testing.assert_array_equal(c, np.roll(a, 1))


def test_blocks_storing_one_element_in_one_statement(arrays):
    A, C = _buf("A", 64), _buf("C", 32)
    f = _kernel([A, C], 2, 32, lambda bx, tx, by: _store(C, tx, _load(A, bx * 32 + tx)))
    a, c = arrays(64, 32)
    with pytest.raises(EmulationError, match=r"several threads store different values to global 'C' at flat "
                                             r"index 0 \(C\[0\]\) in one statement: thread \(0, 0, 0\) of block \(\d, 0, 0\) and "
                                             r"thread \(0, 0, 0\) of block \(\d, 0, 0\)"):
        emulate(f, [a, c])


def test_several_threads_store_one_element(arrays):
    A, C = _buf("A", 32), _buf("C", 4, 8)
    f = _kernel([A, C], 1, 32, lambda bx, tx, by: _store(C, _c(13), _load(A, tx)))
    a, c = arrays(32, (4, 8))
    with pytest.raises(EmulationError, match=r"several threads store different values to global 'C' at flat "
                                             r"index 13 \(C\[1, 5\]\) in one statement: thread \(\d+, 0, 0\) of block "
                                             r"\(0, 0, 0\) and thread \(\d+, 0, 0\)"):
        emulate(f, [a, c])


def test_every_thread_storing_the_same_value_is_harmless(arrays):
    # a stage computed redundantly by every thread of a block (not bound to threadIdx) stores
    # one value from all of them; reading it back in the block is reading one's own store
    A, C, D = _buf("A", 4), _buf("C", 2), _buf("D", 64)
    f = _kernel([A, C, D], 2, 32, lambda bx, tx, by: seq(_store(C, bx, _load(A, bx) * 2.0),
                                                         _store(D, bx * 32 + tx, _load(C, bx) + 1.0)))
    a, c, d = arrays(4, 2, 64)
    emulate(f, [a, c, d])
    np.testing.assert_array_equal(c, a[:2] * 2)
    np.testing.assert_array_equal(d, np.repeat(a[:2] * 2 + 1, 32))


def test_redundant_accumulation_is_a_race(arrays):
    # ... but every thread accumulating into it is not: a warp a step ahead reads a sum that a
    # slower warp then overwrites with an older one
    A, C = _buf("A", 8), _buf("C", 1)
    body = lambda bx, tx, by: seq(_store(C, _c(0), _load(A, _c(0))), _store(C, _c(0), _load(C, _c(0)) + _load(A, _c(1))))
    a, c = arrays(8, 1)
    with pytest.raises(EmulationError, match=r"race on global 'C' at flat index 0 .* writes it and thread .* writes "
                                             r"it, with no __syncthreads"):
        emulate(_kernel([A, C], 1, 32, body), [a, c])


def test_every_thread_accumulating_into_one_element(arrays):
    # the shape of bug 1 of issue 8: C[0] = C[0] + A[t] run by all threads at once
    A, C = _buf("A", 32), _buf("C", 1)
    f = _kernel([A, C], 1, 32, lambda bx, tx, by: _store(C, _c(0), _load(C, _c(0)) + _load(A, tx)))
    a, c = arrays(32, 1)
    with pytest.raises(EmulationError, match=r"race on global 'C' at flat index 0 \(C\[0\]\): thread "
                                             r"\(\d+, 0, 0\) of block \(0, 0, 0\) writes it and thread "
                                             r"\(\d+, 0, 0\) of block \(0, 0, 0\) reads it"):
        emulate(f, [a, c])


def test_overlapping_vector_stores(arrays):
    A, C = _buf("A", 64), _buf("C", 64)
    # thread t stores C[2t .. 2t+3]: neighbours overlap by two elements
    f = _kernel([A, C], 1, 16, lambda bx, tx, by: BufferStore(
        C, BufferLoad(A, (Ramp(tx * 4, _c(1), 4),), "float32x4"), (Ramp(tx * 2, _c(1), 4),)))
    a, c = arrays(64, 64)
    with pytest.raises(EmulationError, match=r"several threads store different values to global 'C'"):
        emulate(f, [a, c])
    ok = _kernel([A, C], 1, 16, lambda bx, tx, by: BufferStore(
        C, BufferLoad(A, (Ramp(tx * 4, _c(1), 4),), "float32x4"), (Ramp(tx * 4, _c(1), 4),)))
    emulate(ok, [a, c])
    np.testing.assert_array_equal(c, a)


def test_block_index_names_all_dimensions(arrays):
    A, C = _buf("A", 64), _buf("C", 32)
    f = _kernel([A, C], 2, 32, lambda bx, tx, by: _store(C, tx, _load(A, by * 32 + tx)), grid_y=2)
    a, c = arrays(64, 32)
    # four blocks (2 x 2) store C[0]: the last of them is block (1, 1, 0)
    with pytest.raises(EmulationError, match=r"several threads store different values to global 'C' at flat "
                                             r"index 0 .*: thread "
                                             r"\(0, 0, 0\) of block \(0, 0, 0\) and thread \(0, 0, 0\) of block "
                                             r"\(1, 1, 0\)"):
        emulate(f, [a, c])


def test_race_check_can_be_switched_off(arrays):
    a, c, d = arrays(32, 32, 32)
    emulate(_neighbour_kernel(barrier=False), [a, c, d], check_races=False)   # lock step: no error


# --- valid code stays silent ----------------------------------------------------------------

@pytest.mark.parametrize("case", cuda_cases.CASES, ids=cuda_cases.CASE_IDS)
def test_library_schedules_are_race_free(case, rng):
    s, args = case.make(**case.emu)
    ins, outs = cuda_cases.make_arrays(case, rng, case.emu)
    emulate(tilecraft.lower(s, args, target="cuda"), ins + outs)
    cuda_cases.check_outputs(case, ins, outs, case.emu, "emulator")


def test_multi_kernel_program_reads_across_blocks(rng):
    # the naive softmax: max, sum and output are three kernels; the third reads Mx and Sm that
    # other blocks of earlier kernels wrote (kernels are ordered)
    X = te.placeholder((5, 300), name="X")
    k1, k2 = te.reduce_axis((0, 300), "k1"), te.reduce_axis((0, 300), "k2")
    Mx = te.compute((5,), lambda i: te.max(X[i, k1], axis=k1), name="Mx")
    Sm = te.compute((5,), lambda i: te.sum(te.exp(X[i, k2] - Mx[i]), axis=k2), name="Sm")
    Y = te.compute((5, 300), lambda i, j: te.exp(X[i, j] - Mx[i]) / Sm[i], name="Y")
    s = cs.naive(Y, threads=64)
    x = rng.standard_normal((5, 300)).astype("float32")
    y = np.full((5, 300), np.nan, "float32")
    emulate(tilecraft.lower(s, [X, Y], target="cuda"), [x, y])
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_cross_thread_reduction_written_by_thread_zero(rng):
    A = te.placeholder((6, 256), name="A")
    k = te.reduce_axis((0, 256), "k")
    B = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=64)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    a = rng.standard_normal((6, 256)).astype("float32")
    b = np.full(6, np.nan, "float32")
    emulate(tilecraft.lower(s, [A, B], target="cuda"), [a, b])
    # 256 terms in the threads' order: within their rounding error, against float64 (a fixed
    # tolerance came within 0.2 of failing in 31 seeds, as its sibling below failed on main)
    assert_sum_close(b, a.astype(np.float64).sum(1), np.abs(a).sum(1, dtype=np.float64), 256)


def test_stage_computed_by_every_thread(rng):
    # TVM-style: C bound to blocks only, the reduction it reads over threadIdx.x: every thread
    # of a block stores the same C[i]
    A = te.placeholder((4, 256), name="A")
    k = te.reduce_axis((0, 256), "k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    C = te.compute((4,), lambda i: B[i] * 2, name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].compute_at(s[C], C.op.axis[0])
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=64)
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    a = rng.standard_normal((4, 256)).astype("float32")
    c = np.full(4, np.nan, "float32")
    emulate(tilecraft.lower(s, [A, C], target="cuda"), [a, c])
    # float32 sums of 256 terms: the error is relative to the sum of |terms|, not to the result
    np.testing.assert_allclose(c, 2 * a.astype(np.float64).sum(1), rtol=0, atol=1e-6 * 2 * np.abs(a).sum(1).max())


def test_serial_reduction_in_global_memory(rng):
    # each thread accumulates its own output element in global memory: reads and writes of one
    # thread are ordered
    A = te.placeholder((100, 7), name="A")
    k = te.reduce_axis((0, 7), "k")
    B = te.compute((100,), lambda i: te.sum(A[i, k], axis=k), name="B")
    a = rng.standard_normal((100, 7)).astype("float32")
    b = np.full(100, np.nan, "float32")
    emulate(tilecraft.lower(cs.naive(B, threads=32), [A, B], target="cuda"), [a, b])
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5, atol=1e-5)


# --- vector alignment ---------------------------------------------------------------------

def _shifted_copy():
    """C[4t .. 4t+3] = A[4t+2 .. 4t+5]: the load is not 16-byte aligned."""
    A, C = _buf("A", 72), _buf("C", 64)
    return _kernel([A, C], 1, 16, lambda bx, tx, by: BufferStore(
        C, BufferLoad(A, (Ramp(tx * 4 + 2, _c(1), 4),), "float32x4"), (Ramp(tx * 4, _c(1), 4),)))


def test_unaligned_vector_load_is_read_lane_by_lane(arrays):
    a, c = arrays(72, 64)
    emulate(_shifted_copy(), [a, c])
    np.testing.assert_array_equal(c, a[2:66])


def test_wrong_alignment_proof_is_reported(arrays, monkeypatch):
    # a renderer that wrongly believes `4t + 2` a multiple of 4 would load 16 bytes from a
    # misaligned address (a fault on the GPU); the emulator checks the belief
    import tilecraft.codegen.cuda_cstyle as cstyle
    monkeypatch.setattr(cstyle, "known_multiple", lambda e: 4)
    a, c = arrays(72, 64)
    with pytest.raises(EmulationError, match=r"misaligned vector access: the CUDA C loads global 'A' 16 bytes at "
                                             r"a time, believing the index `threadIdx.x \* 4 \+ 2` a multiple of 4, "
                                             r"but thread \(0, 0, 0\) of block \(0, 0, 0\) reaches element 2"):
        emulate(_shifted_copy(), [a, c])


# --- memory nobody wrote ------------------------------------------------------------------
# A GPU leaves workspace, shared and local memory as it was: the emulator fills them with poison
# (NaN, bytes of 0x5A, True) so that reading what no kernel wrote shows in the outputs.

def test_unwritten_workspace_shows(monkeypatch, rng):
    # a seeded bug: the first kernel of a TVM-style softmax (the row max, a global workspace
    # buffer) never runs. With the workspace read as zeros the result was still right
    # (softmax(x - 0) = softmax(x)); poisoned, every output is NaN.
    import tilecraft.codegen.cuda_emulate as ce
    from .test_gpu_correctness import softmax_tvm_style
    s, args = softmax_tvm_style(3, 100, 32)
    func = tilecraft.lower(s, args, target="cuda")
    real = ce.kernels_of
    workspace, kernels = real(func.body)
    assert [w.name for w in workspace] == ["M", "E", "S"] and len(kernels) == 4
    monkeypatch.setattr(ce, "kernels_of", lambda body: (lambda w, ks: (w, ks[1:]))(*real(body)))
    x = rng.standard_normal((3, 100)).astype("float32")
    y = np.zeros((3, 100), "float32")
    emulate(func, [x, y])
    assert np.isnan(y).all(), y


@pytest.mark.parametrize("scope", ["shared", "local"])
@pytest.mark.parametrize("dtype, poison", [("float32", None), ("int32", 0x5A5A5A5A), ("int8", 0x5A)])
def test_unwritten_shared_and_local_memory_show(scope, dtype, poison):
    # C[t] = T[t] where T (shared or local) is never written: the poison comes out
    from tilecraft.ir.stmt import Allocate
    C = _buf("C", 32, dtype=dtype)
    T = Buffer("T", (_c(32),), dtype, scope=scope)
    body_of = lambda bx, tx, by: _store(C, tx, _load(T, tx))        # noqa: E731
    if scope == "local":
        f = _kernel([C], 1, 32, lambda bx, tx, by: Allocate(T, body_of(bx, tx, by)))
    else:
        f = _kernel([C], 1, 32, body_of)
        f.body.node.shared.append(T)              # the kernel's __shared__ arrays
    c = np.zeros(32, dtype)
    emulate(f, [c])
    if poison is None:
        assert np.isnan(c).all()
    else:
        assert (c == poison).all(), c
