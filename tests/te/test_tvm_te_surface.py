"""TVM's TE conveniences, ported in spirit from TVM's ``test_te_tensor.py``,
``test_te_schedule.py`` and ``test_te_tag.py``: whole-tensor arithmetic with broadcasting,
``T[i][j]``, reducers called on plain values, ``te.tag_scope``, ``te.div``, ``fuse()`` of no
axes, and compute_at targets that are split or fused afterwards (TVM legalizes the attach).
Each is checked against numpy on poisoned outputs (``check_llvm``)."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.interp import evaluate
from tilecraft.schedule import python_names
from tilecraft.te import TEError


def raises(exc, pattern):
    return pytest.raises(exc, match=pattern)


# ----------------------------------------------------------------------------------------------
# whole-tensor arithmetic

def test_tensor_arithmetic_broadcasts_like_numpy(check_llvm, rand):
    A = te.placeholder((5, 1, 3), name="A")
    B = te.placeholder((4, 3), name="B")
    C = te.placeholder((4, 1), name="C")
    D = (A + B) * C - 1.5 / (B * B + 1.0)        # (5, 4, 3)
    E = 2 - D * 0.5
    assert D.shape == (5, 4, 3) or tuple(int(x.value) for x in D.shape) == (5, 4, 3)
    s = te.create_schedule(E.op)
    a, b, c = rand((5, 1, 3)), rand((4, 3)), rand((4, 1))
    d = (a + b) * c - 1.5 / (b * b + 1.0)
    check_llvm(s, [A, B, C, E], {A: a, B: b, C: c}, expected={E: 2 - d * 0.5})


def test_tensor_arithmetic_names_and_tags():
    A = te.placeholder((4, 3), name="A")
    B = te.placeholder((3,), name="B")
    assert ((A + B).op.name, (A + B).op.tag) == ("T_add", "broadcast")
    assert ((A * 2).op.name, (A * 2).op.tag) == ("T_multiply", "elemwise")
    assert ((1 - A).op.name, (A / B).op.name) == ("T_subtract", "T_divide")
    n = te.var("n")
    assert (A + n.astype("float32")).op.tag == "elemwise"


def test_integer_tensor_division_truncates(check_llvm, rng):
    A = te.placeholder((16,), dtype="int32", name="A")
    B = te.placeholder((16,), dtype="int32", name="B")
    C = A / B + A * 3
    s = te.create_schedule(C.op)
    a = rng.integers(-50, 50, 16).astype("int32")
    b = rng.choice([-7, -3, -1, 1, 2, 5], 16).astype("int32")
    want = np.trunc(a / b).astype("int32") + a * 3
    check_llvm(s, [A, B, C], {A: a, B: b}, expected={C: want})


def test_symbolic_shapes_broadcast_when_equal_or_one(check_llvm, rand):
    n = te.var("n")
    A = te.placeholder((n, 3), name="A")
    B = te.placeholder((1, 3), name="B")
    C = A * B
    assert C.shape[0] is n
    s = te.create_schedule(C.op)
    a, b = rand((7, 3)), rand((1, 3))
    check_llvm(s, [A, B, C], {A: a, B: b}, expected={C: a * b})


def test_shapes_that_do_not_broadcast():
    A = te.placeholder((4, 3), name="A")
    B = te.placeholder((4,), name="B")
    with raises(TEError, r"'A' \+ 'B': shapes \(4, 3\) and \(4\) do not broadcast: dimension 1 is 3 in "
                         r"one and 4 in the other \(each must be equal or 1\)"):
        A + B


def test_tensor_with_something_that_is_not_a_value():
    A = te.placeholder((4,), name="A")
    with raises(TEError, r"tensor 'A' \* list: a tensor combines with a tensor, a number or a scalar "
                         r"expression"):
        A * [1, 2]


# ----------------------------------------------------------------------------------------------
# T[i][j]

def test_tensor_slice_indexing(check_llvm, rand):
    A = te.placeholder((6, 5, 4), name="A")
    B = te.compute((6, 5, 4), lambda i, j, k: A[i][j][k] * 2.0 + A[i, j][k] + A[i][j, k], name="B")
    s = te.create_schedule(B.op)
    a = rand((6, 5, 4))
    check_llvm(s, [A, B], {A: a}, expected={B: 4.0 * a})
    i = te.var("i")
    assert A[i][0].dtype == "float32" and str(A[i][0][1]) == str(A[i, 0, 1])


def test_tensor_slice_used_as_a_value():
    A = te.placeholder((8, 8), name="A")
    with raises(TEError, r"tensor 'A' has 2 dimension\(s\) but was indexed with 1 index\(es\): A\[i\]"):
        te.compute((8,), lambda i: A[i] + 1.0, name="B")
    with raises(TEError, r"tensor 'A' has 2 dimension\(s\) but was indexed with 1 index\(es\): A\[i\]"):
        te.compute((8,), lambda i: 1.0 * A[i], name="B")
    with raises(TEError, r"tensor 'A' has 2 dimension\(s\) but was indexed with 3 index\(es\): A\[0, 1, 2\]"):
        A[0][1, 2]


# ----------------------------------------------------------------------------------------------
# reducers on plain values

def test_reducer_called_on_plain_values(check_llvm, rand):
    mysum = te.comm_reducer(lambda x, y: x + y, lambda t: te.const(0, t), name="mysum")
    A = te.placeholder((16,), name="A")
    B = te.placeholder((16,), name="B")
    C = te.compute((16,), lambda i: mysum(A[i], B[i]) + te.max(A[i], B[i], 0.25) + te.min(A[i], 0.0)
                   + te.sum(A[i], B[i], A[i]), name="C")
    s = te.create_schedule(C.op)
    a, b = rand(16), rand(16)
    want = (a + b) + np.maximum(np.maximum(a, b), 0.25) + np.minimum(a, 0.0) + (2 * a + b)
    check_llvm(s, [A, B, C], {A: a, B: b}, expected={C: want})


def test_reducer_without_axis_or_values():
    A = te.placeholder((8,), name="A")
    with raises(TEError, r"te.sum: give the reduce axes \(axis=k, made by te.reduce_axis\), or two or "
                         r"more values to combine"):
        te.sum(A[0])


def test_reducer_with_axis_and_extra_arguments():
    A = te.placeholder((8,), name="A")
    k = te.reduce_axis((0, 8), name="k")
    with raises(TEError, r"te.sum: called with a reduce axis, it takes \(expr, axis, where=, init=\); "
                         r"1 more argument\(s\) given"):
        te.sum(A[k], k, None, None, 3.0)


# ----------------------------------------------------------------------------------------------
# tags, te.div

def test_tag_scope_as_block_and_decorator():
    A = te.placeholder((8,), name="A")
    with te.tag_scope("ewise"):
        B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
        C = A * 2                              # a tensor overload keeps its own tag, as topi's do
    assert B.op.tag == "ewise" and C.op.tag == "elemwise"

    @te.tag_scope(tag="conv")
    def compute_relu(x):
        return te.compute(x.shape, lambda i: te.max(x[i], 0.0), name="relu")
    assert compute_relu(A).op.tag == "conv"
    assert te.compute((8,), lambda i: A[i], name="D").op.tag == ""


def test_nested_tag_scopes():
    with te.tag_scope("outer"):
        with raises(TEError, r"te.tag_scope\('inner'\) inside te.tag_scope\('outer'\): tag scopes do not nest"):
            with te.tag_scope("inner"):
                pass


def test_tag_given_inside_a_tag_scope():
    A = te.placeholder((8,), name="A")
    with te.tag_scope("ewise"):
        with raises(TEError, r"compute 'B': tag='mine' given inside te.tag_scope\('ewise'\); an operation "
                             r"has one tag"):
            te.compute((8,), lambda i: A[i], name="B", tag="mine")


def test_div_is_c_division(check_llvm, rng):
    A = te.placeholder((12,), dtype="int32", name="A")
    F = te.placeholder((12,), name="F")
    B = te.compute((12,), lambda i: te.div(A[i], 4) + tc.tir.div(A[i], -3), name="B")
    G = te.compute((12,), lambda i: te.div(F[i], 4.0), name="G")
    s = te.create_schedule([B.op, G.op])
    a = rng.integers(-40, 40, 12).astype("int32")
    f = rng.uniform(-3, 3, 12).astype("float32")
    want = (np.trunc(a / 4) + np.trunc(a / -3)).astype("int32")
    check_llvm(s, [A, F, B, G], {A: a, F: f}, expected={B: want, G: f / 4.0})


# ----------------------------------------------------------------------------------------------
# fuse() of no axes

def test_fuse_of_no_axes_gives_an_outer_singleton_loop(check_llvm, rand):
    A = te.placeholder((16,), name="A")
    k = te.reduce_axis((0, 16), name="k")
    P = te.compute((16,), lambda i: A[i] * A[i], name="P")
    S = te.compute((), lambda: te.sum(P[k], axis=k), name="S")
    T = te.compute((), lambda: S() + 1.0, name="T")
    s = te.create_schedule(T.op)
    single = s[T].fuse()
    assert s[T].leaf_iter_vars == [single] and single.dom.extent.value == 1
    s[S].compute_at(s[T], single)           # a 0-d stage has no other loop to attach to
    s[P].compute_at(s[S], s[S].op.reduce_axis[0])
    a = rand(16)
    check_llvm(s, [A, T], {A: a}, expected={T: np.array((a * a).sum() + 1.0, "float32")})
    code = s.to_python()
    assert "T_singleton = s[T].fuse()" in code
    s2 = te.create_schedule(T.op)
    exec(code, {"s": s2, **python_names([T.op])})
    assert str(tc.lower(s2, [A, T])) == str(tc.lower(s, [A, T]))


def test_fuse_of_no_axes_goes_outermost():
    A = te.placeholder((4, 8), name="A")
    B = te.compute((4, 8), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    single = s[B].fuse([])
    assert s[B].leaf_iter_vars[0] is single and len(s[B].leaf_iter_vars) == 3


# ----------------------------------------------------------------------------------------------
# compute_at targets split or fused afterwards

def _producer_consumer():
    A = te.placeholder((24, 20), name="A")
    B = te.compute((24, 20), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((24, 20), lambda i, j: B[i, j] + A[i, j], name="C")
    return A, B, C


def test_split_of_the_compute_at_target_moves_the_attach_inward(check_llvm, rand):
    A, B, C = _producer_consumer()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    s[B].compute_at(s[C], i)
    io, ii = s[C].split(i, factor=5)           # 24 = 4 * 5 + 4: a guarded tail
    iio, iii = s[C].split(ii, nparts=2)
    assert s[B].attach_ivar is iii
    a = rand((24, 20))
    check_llvm(s, [A, C], {A: a}, expected={C: 3 * a})
    # the producer is computed once per iteration of the innermost part, one row at a time
    text = str(tc.lower(s, [A, C], simple_mode=True))
    assert "float32[1, 20]" in text or "float32[20]" in text, text


def test_fuse_of_the_compute_at_target_as_inner_loop_moves_the_attach(check_llvm, rand):
    A, B, C = _producer_consumer()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=4)
    s[B].compute_at(s[C], jo)
    f = s[C].fuse(i, jo)
    assert s[B].attach_ivar is f
    s[C].parallel(f)
    a = rand((24, 20))
    check_llvm(s, [A, C], {A: a}, expected={C: 3 * a})


def test_attach_follows_through_replay():
    A, B, C = _producer_consumer()
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[1])
    s[C].split(C.op.axis[1], factor=8)
    s2 = te.create_schedule(C.op)
    exec(s.to_python(), {"s": s2, **python_names([C.op])})
    assert s2[B].attach_ivar.var.name == "j.inner"
    assert str(tc.lower(s2, [A, C])) == str(tc.lower(s, [A, C]))
    ref = evaluate([C], {A: np.ones((24, 20), "float32")})[0]
    assert float(ref[0, 0]) == 3.0
