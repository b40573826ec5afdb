"""``Stage.set_store_predicate`` (TVM <= 0.14), ported in spirit from TVM's reduction tutorial and
``test_te_schedule_ops.py``: stores happen only where the predicate holds (elements elsewhere keep
the poison they had), on the CPU and in the CUDA emulator; the cross-thread reduction pattern of
TVM's reduction tutorial; the record's JSON and Python forms; one test per error."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.schedule import ScheduleError
from tilecraft.testing import poison


def even_rows():
    A = te.placeholder((7, 4), name="A")
    B = te.compute((7, 4), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    return s, A, B


@pytest.mark.parametrize("split", [False, True])
def test_cpu_stores_only_where_the_predicate_holds(rand, split):
    s, A, B = even_rows()
    if split:
        io, ii = s[B].split(B.op.axis[0], factor=3)      # the predicate names the root axis still
    s[B].set_store_predicate((B.op.axis[0] % 2 == 0) & (B.op.axis[1] < 3))
    f = tc.build(s, [A, B], target="llvm")
    a = rand((7, 4))
    rows, cols = np.meshgrid(np.arange(7), np.arange(4), indexing="ij")
    keep = (rows % 2 == 0) & (cols < 3)
    for variant in (0, 1):
        b = poison((7, 4), "float32", variant)
        before = b.copy()
        f(a, b)
        np.testing.assert_allclose(b[keep], (a * 2.0 + 1.0)[keep], rtol=1e-6)
        np.testing.assert_array_equal(b[~keep], before[~keep])


def test_gpu_predicate_on_a_thread_index(rand):
    from tilecraft.codegen.cuda_emulate import emulate
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] - 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=16)
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, tx)
    s[B].set_store_predicate(tx.var < 4)
    f = tc.lower(s, [A, B], target="cuda")
    a = rand((64,))
    b = np.full(64, np.nan, "float32")
    emulate(f, [a, b])
    keep = np.arange(64) % 16 < 4
    np.testing.assert_allclose(b[keep], a[keep] - 1.0, rtol=1e-6)
    assert np.isnan(b[~keep]).all()


def cross_thread_sum():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    xo, xi = s[B].split(s[B].op.axis[0], factor=32)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.y"))
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(s[B].op.reduce_axis[0], tx)
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    return s, A, B, tx


def test_reduction_tutorial_pattern_is_implied(rand):
    # TVM's reduction tutorial: the all-reduce stores once; the predicate on its thread is implied
    from tilecraft.codegen.cuda_emulate import emulate
    s, A, B, tx = cross_thread_sum()
    plain = str(tc.lower(s, [A, B], target="cuda"))
    s[B].set_store_predicate(tx.var == 0)
    f = tc.lower(s, [A, B], target="cuda")
    assert str(f) == plain
    a = rand((5, 40))
    b = np.full(5, np.nan, "float32")
    emulate(f, [a, b])
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5, atol=1e-5)


def test_record_forms_replay():
    from tilecraft.schedule.schedule import from_json
    s, A, B = even_rows()
    io, ii = s[B].split(B.op.axis[1], factor=2)
    s[B].set_store_predicate(~(ii == 1) | (B.op.axis[0] > te.const(4, "int32")))
    text, code = s.to_json(), s.to_python()
    assert '"predicate": ["OR", ["NOT", ["EQ", ["axis", "j.inner"]' in text
    s_json = from_json(text, [B.op])
    assert s_json.to_json() == text and str(tc.lower(s_json, [A, B])) == str(tc.lower(s, [A, B]))
    s_py = te.create_schedule(B.op)
    exec(code, {"s": s_py, "B": B})
    assert s_py.to_json() == text


def test_store_predicate_errors():
    s, A, B = even_rows()
    with pytest.raises(ScheduleError, match=r"the predicate `i \+ 1` is int32, not a condition"):
        s[B].set_store_predicate(B.op.axis[0] + 1)
    with pytest.raises(ScheduleError, match=r"`A\[i, 0\]` \(TensorLoad\) cannot be part of a store predicate"):
        s[B].set_store_predicate(A[B.op.axis[0], 0] > 0.0)
    s[B].set_store_predicate(te.var("w") == 0)
    with pytest.raises(ScheduleError, match=r"the predicate uses 'w', which is neither an axis of the stage nor "
                                            r"a thread index bound around it"):
        tc.lower(s, [A, B])
    s, A, B, tx = cross_thread_sum()
    s[B].set_store_predicate(te.var("threadIdx.y") == 0)
    with pytest.raises(ScheduleError, match=r"its reduction runs across GPU threads \(threadIdx.x\), which store "
                                            r"each result once"):
        tc.lower(s, [A, B], target="cuda")


def test_store_predicate_on_a_tensorized_stage_is_refused():
    from tensorize_intrins import tensorized_gemv
    s, args, _ = tensorized_gemv()
    C = args[2]
    s[C].set_store_predicate(C.op.axis[0] < 3)
    with pytest.raises(ScheduleError, match=r"set_store_predicate on stage 'C': the stage is tensorized, and the "
                                            r"intrinsic's stores cannot be guarded"):
        tc.lower(s, args)
