"""``cache_write`` after other primitives on the stage (TVM's re-layout: the cache takes the
stage's current data-parallel loops as its axes) and of several outputs at once, ported in spirit
from TVM's ``test_te_schedule_ops.py`` (``test_schedule_cache_relayout*``) and
``test_te_schedule.py``: compiled results against numpy on poisoned outputs (``check_llvm``,
which also runs the lowered-IR interpreter after every pass); one test per error."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.schedule import ScheduleError


def test_cache_after_split_with_tail_and_reorder(check_llvm, rand):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].reorder(B.op.axis[1], io, ii)
    s[B].parallel(B.op.axis[1])               # dropped by cache_write, as in TVM
    BL = s.cache_write(B, "local")
    assert [iv.var.name for iv in BL.op.axis] == ["j.c", "i.outer.c", "i.inner.c"]
    assert s[B].leaf_iter_vars == list(B.op.axis) and not s[B].relations
    jo, ji = s[B].split(s[B].op.axis[1], factor=3)
    s[BL].compute_at(s[B], jo)
    a = rand((10, 7))
    check_llvm(s, [A, B], {A: a}, {B: a * 2.0 + 1.0})


def test_matmul_cache_after_tiling_keeps_the_reduction(check_llvm, rand):
    A = te.placeholder((12, 9), name="A")
    W = te.placeholder((9, 10), name="W")
    k = te.reduce_axis((0, 9), name="k")
    C = te.compute((12, 10), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 5)
    CL = s.cache_write(C, "global")
    assert [int(d.value) for d in CL.shape] == [3, 2, 4, 5]
    assert [iv.var.name for iv in CL.op.reduce_axis] == ["k"]
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    s[CL].compute_at(s[C], xo)
    a, w = rand((12, 9)), rand((9, 10))
    check_llvm(s, [A, W, C], {A: a, W: w}, {C: a @ w}, rtol=1e-5, atol=1e-5)


def test_cache_after_fuse_and_split(check_llvm, rand):
    A = te.placeholder((5, 6), name="A")
    B = te.compute((5, 6), lambda i, j: A[i, j] + A[4 - i, j], name="B")
    s = te.create_schedule(B.op)
    f = s[B].fuse(*B.op.axis)
    fo, fi = s[B].split(f, factor=7)
    BL = s.cache_write(B, "global")
    assert [int(d.value) for d in BL.shape] == [5, 7]          # ceil(30 / 7) x 7, the tail guarded
    text = str(tc.lower(s, [A, B], simple_mode=True))
    assert "if_then_else(" in text          # the cache's tail points (i.j.fused >= 30) are guarded
    a = rand((5, 6))
    check_llvm(s, [A, B], {A: a}, {B: a + a[::-1]})


def tuple_stage():
    A = te.placeholder((8, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    argmax = te.comm_reducer(lambda x, y: (te.select(x[1] >= y[1], x[0], y[0]), te.max(x[1], y[1])),
                             lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    idx, val = te.compute((8,), lambda i: argmax((k, A[i, k]), axis=k), name="T")
    return A, idx, val


def test_cache_write_of_both_outputs_of_a_tuple_reduction(check_llvm, rand):
    A, idx, val = tuple_stage()
    s = te.create_schedule(idx.op)
    io, ii = s[idx].split(idx.op.axis[0], factor=3)
    cl_idx, cl_val = s.cache_write([idx, val], "local")
    assert (cl_idx.name, cl_val.name) == ("T.local.v0", "T.local.v1") and cl_idx.op is cl_val.op
    io, ii = s[idx].split(idx.op.axis[0], factor=2)
    s[cl_idx].compute_at(s[idx], io)
    a = rand((8, 6))
    check_llvm(s, [A, idx, val], {A: a}, {idx: a.argmax(1).astype("int32"), val: a.max(1)})


def test_cache_write_steps_replay():
    from tilecraft.schedule.schedule import from_json
    A, idx, val = tuple_stage()
    s = te.create_schedule(idx.op)
    s[idx].split(idx.op.axis[0], factor=3)
    s.cache_write([idx, val], "local")
    text, code = s.to_json(), s.to_python()
    assert '"tensor": ["T.v0", "T.v1"]' in text and "s.cache_write([T_v0, T_v1], \"local\")" in code
    A2, idx2, val2 = tuple_stage()
    s2 = from_json(text, [idx2.op])
    assert str(tc.lower(s2, [A2, idx2, val2])) == str(tc.lower(s, [A, idx, val]))
    s3 = te.create_schedule(idx2.op)
    exec(code, {"s": s3, "T_v0": idx2, "T_v1": val2})
    assert s3.to_json() == text


def test_cache_write_errors():
    A, idx, val = tuple_stage()
    s = te.create_schedule(idx.op)
    with pytest.raises(ScheduleError, match=r"stage 'T' has 2 outputs \(T.v0, T.v1\); cache them together: "
                                            r"s.cache_write\(\[T.v0, T.v1\], 'local'\)"):
        s.cache_write(idx, "local")
    B = te.compute((8,), lambda i: A[i, 0], name="B")
    s = te.create_schedule([idx.op, B.op])
    with pytest.raises(ScheduleError, match=r"'B' is not an output of stage 'T'"):
        s.cache_write([idx, B], "local")
    ko, ki = s[idx].split(idx.op.reduce_axis[0], factor=2)
    with pytest.raises(ScheduleError, match=r"its loop 'k.outer' comes from a split or fuse of a reduction "
                                            r"axis; .* cache_write before scheduling the reduction axis"):
        s.cache_write([idx, val], "local")
    P = te.compute((8, 6), lambda i, j: A[i, j] + 1.0, name="P")
    Q = te.compute((8, 6), lambda i, j: P[i, j] * 2.0, name="Q")
    s = te.create_schedule(Q.op)
    qo, qi = s[Q].split(Q.op.axis[0], factor=4)
    s[P].compute_at(s[Q], qo)
    with pytest.raises(ScheduleError, match=r"stage 'P' is computed at its loop 'i.outer', which cache_write "
                                            r"replaces .* compute_at after cache_write"):
        s.cache_write(Q, "local")
