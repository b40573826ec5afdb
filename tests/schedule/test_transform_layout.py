"""``Stage.transform_layout`` (TVM <= 0.14, TE), ported in spirit from TVM's
``test_te_transform_layout.py``: outputs, intermediates and inputs stored in a permuted or split
layout, checked against numpy on poisoned outputs and with the lowered-IR interpreter after every
pass (``check_passes``, references in the new layouts); the record's forms; one test per error."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.schedule import ScheduleError
from tilecraft.testing import poison



def check_passes(s, args, inputs, reference):
    """The lowered-IR interpreter after every pass against ``reference`` (in the new layouts)."""
    from tilecraft.interp_lowered import PassChecker
    expected = {k: reference[t] for k, t in enumerate(args) if t not in inputs}
    checker = PassChecker([inputs.get(t) for t in args], expected, rtol=1e-5, atol=1e-5)
    tc.lower(s, args, target="llvm", after_pass=checker)
    assert checker.checked, "no pass was checked"


def graph():
    A = te.placeholder((4, 6), name="A")
    B = te.compute((4, 6), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((4, 6), lambda i, j: B[i, j] + B[3 - i, j], name="C")
    return A, B, C


def test_output_intermediate_and_input_layouts(rand):
    A, B, C = graph()
    s = te.create_schedule(C.op)
    loops = s[B].transform_layout(lambda i, j: [j // 3, i, j % 3])
    assert [int(iv.dom.extent.value) for iv in loops] == [2, 4, 3] and s[B].leaf_iter_vars == loops
    s[A].transform_layout(lambda i, j: [j, i])
    s[C].transform_layout(lambda i, j: [j, i])
    a = rand((4, 6))
    b_ref = (a * 2.0).reshape(4, 2, 3).transpose(1, 0, 2)
    c_ref = (a * 2.0 + (a * 2.0)[::-1]).T
    inputs = {A: np.ascontiguousarray(a.T)}
    check_passes(s, [A, B, C], inputs, {B: b_ref, C: c_ref})
    f = tc.build(s, [A, B, C], target="llvm")
    for variant in (0, 1):
        b, c = poison((2, 4, 3), "float32", variant), poison((6, 4), "float32", variant)
        f(inputs[A], b, c)
        np.testing.assert_allclose(b, b_ref, rtol=1e-6)
        np.testing.assert_allclose(c, c_ref, rtol=1e-6)


def test_reduction_in_a_transposed_layout_then_scheduled(rand):
    A = te.placeholder((8, 5), name="A")
    W = te.placeholder((5, 12), name="W")
    k = te.reduce_axis((0, 5), name="k")
    C = te.compute((8, 12), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    jo, i = s[C].transform_layout(lambda i, j: [j, i])
    s[C].parallel(jo)
    io, ii = s[C].split(i, factor=4)
    s[C].vectorize(ii)
    a, w = rand((8, 5)), rand((5, 12))
    check_passes(s, [A, W, C], {A: a, W: w}, {C: (a @ w).T})
    f = tc.build(s, [A, W, C], target="llvm")
    c = poison((12, 8), "float32")
    f(a, w, c)
    np.testing.assert_allclose(c, (a @ w).T, rtol=1e-5, atol=1e-5)


def test_transform_layout_steps_replay():
    from tilecraft.schedule.schedule import from_json
    A, B, C = graph()
    s = te.create_schedule(C.op)
    loops = s[B].transform_layout(lambda i, j: [j % 2, i, j // 2])
    s[B].reorder(loops[1], loops[0])
    text, code = s.to_json(), s.to_python()
    assert "s[B].transform_layout(lambda i, j: [j % 2, i, j // 2])" in code
    A2, B2, C2 = graph()
    s2 = from_json(text, [C2.op])
    assert str(tc.lower(s2, [A2, C2])) == str(tc.lower(s, [A, C]))
    s3 = te.create_schedule(C2.op)
    exec(code, {"s": s3, "B": B2})
    assert s3.to_json() == text


def test_transform_layout_errors():
    A, B, C = graph()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=r"the new index 0 `i \+ j` is not an axis, `axis // c` or `axis % c`"):
        s[B].transform_layout(lambda i, j: [i + j, j])
    with pytest.raises(ScheduleError, match=r"the axis 'j' \(extent 6\) is not mapped one to one"):
        s[B].transform_layout(lambda i, j: [i, j // 4, j % 4])
    with pytest.raises(ScheduleError, match=r"the axis 'i' appears twice as `i`"):
        s[B].transform_layout(lambda i, j: [i, i, j])
    with pytest.raises(ScheduleError, match=r"the mapping takes 1 argument\(s\) but the tensor has 2"):
        s[B].transform_layout(lambda i: [i])
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match=r"it must come before other schedule primitives on the stage"):
        s[C].transform_layout(lambda i, j: [j, i])
    n = te.var("n")
    X = te.placeholder((n, 3), name="X")
    Y = te.compute((n, 3), lambda i, j: X[i, j], name="Y")
    with pytest.raises(ScheduleError, match=r"dimension 0 of 'Y' has the symbolic extent `n`"):
        te.create_schedule(Y.op)[Y].transform_layout(lambda i, j: [j, i])


def test_transform_layout_of_a_tensor_read_whole_by_an_extern_stage():
    A = te.placeholder((4, 6), name="A")
    B = te.compute((4, 6), lambda i, j: A[i, j] * 2.0, name="B")
    E = te.extern((4, 6), [B], lambda ins, outs: tc.tir.call_packed("test.none", ins[0], outs[0]), name="E")
    s = te.create_schedule(E.op)
    with pytest.raises(ScheduleError, match=r"stage 'E' \(ExternOp\) reads 'B' as a whole buffer and cannot be "
                                            r"re-indexed"):
        s[B].transform_layout(lambda i, j: [j, i])
