"""Reductions: ``init=`` (the value a reduction starts from, TVM's ``Reduce.init``) and the
shapes ``rfactor`` gives its partial tensors.

``te.sum(x, axis=k, init=v)`` folds the combiner over the reduction domain starting from ``v``
instead of the identity; points where ``where=`` fails contribute nothing, so an empty domain
gives ``v``. ``init`` may read tensors at the output's indices (``init=I[i, j]``). With
``rfactor`` the partial stage starts from the identity and the final stage from ``init``.
"""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.testing import assert_sum_close


def test_rfactor_shape_of_an_unsplit_symbolic_axis_prints_plainly():
    n = te.var("n")
    A = te.placeholder((n, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    CF = s.rfactor(C, k)
    assert repr(CF) == "Tensor(C.rf, shape=(n, n), dtype=float32)"
    k1 = te.reduce_axis((1, n), name="k1")
    assert str(k1.dom.extent) == "n - 1"


# ----------------------------------------------------------------------------------------------
# init=

def test_issue_repro_sum_starts_from_init(check_llvm):
    A = te.placeholder((16,), name="A")
    k = te.reduce_axis((0, 16), name="k")
    S = te.compute((1,), lambda _: te.sum(A[k], axis=k, init=10.0), name="S")
    s = te.create_schedule(S.op)
    check_llvm(s, [A, S], {A: np.ones(16, "float32")}, {S: np.array([26.0], "float32")}, rtol=0, atol=0)


def test_zero_dimensional_output_and_split_reduction_with_tail(check_llvm, rand):
    A = te.placeholder((103,), name="A")
    k = te.reduce_axis((0, 103), name="k")
    S = te.compute((), lambda: te.sum(A[k], axis=k, init=-2.5), name="S")
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(k, factor=8)
    s[S].unroll(ki)
    a = rand(103)
    check_llvm(s, [A, S], {A: a}, {S: np.array(a.sum() - 2.5, "float32")}, rtol=1e-5)


def test_init_from_a_tensor_at_the_output_index(check_llvm, rand):
    """TVM's test_init: C = A @ B + I, the addend as the reduction's start value."""
    A = te.placeholder((19, 13), name="A")
    B = te.placeholder((13, 21), name="B")
    I = te.placeholder((19, 21), name="I")
    k = te.reduce_axis((0, 13), name="k")
    C = te.compute((19, 21), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k, init=I[i, j]), name="C")
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)   # tails in both
    s[C].reorder(io, jo, k, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    a, b, i0 = rand((19, 13)), rand((13, 21)), rand((19, 21))
    check_llvm(s, [A, B, I, C], {A: a, B: b, I: i0}, {C: a @ b + i0}, rtol=1e-5)


@pytest.mark.parametrize("reducer", ["max", "min"])
def test_max_and_min_start_from_init(check_llvm, rand, reducer):
    A = te.placeholder((9, 12), name="A")
    T = te.placeholder((9,), name="T")
    k = te.reduce_axis((0, 12), name="k")
    red = getattr(te, reducer)
    C = te.compute((9,), lambda i: red(A[i, k], axis=k, init=T[i]), name="C")
    s = te.create_schedule(C.op)
    a, t = rand((9, 12)), rand(9, low=-0.8, high=0.8)    # some rows above, some below the init
    want = np.maximum(a.max(1), t) if reducer == "max" else np.minimum(a.min(1), t)
    check_llvm(s, [A, T, C], {A: a, T: t}, {C: want}, rtol=0, atol=0)


def test_where_that_selects_nothing_leaves_init(check_llvm, rand):
    A = te.placeholder((8, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    # row i sums the columns k < i - 2: rows 0..2 have no point at all
    C = te.compute((8,), lambda i: te.sum(A[i, k], axis=k, where=k < i - 2, init=7.0), name="C")
    s = te.create_schedule(C.op)
    a = rand((8, 10))
    want = np.array([7.0 + a[i, :max(0, i - 2)].sum() for i in range(8)], "float32")
    check_llvm(s, [A, C], {A: a}, {C: want}, rtol=1e-5)


def test_comm_reducer_with_init(check_llvm, rand):
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, t), name="prod")
    A = te.placeholder((5, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    C = te.compute((5,), lambda i: prod(A[i, k], axis=k, init=3.0), name="C")
    s = te.create_schedule(C.op)
    a = rand((5, 6), low=0.5, high=1.5)
    check_llvm(s, [A, C], {A: a}, {C: 3 * a.prod(1)}, rtol=1e-5)


def test_tuple_reducer_with_init(check_llvm, rand):
    """argmax starting from (index -7, value 0.25): rows whose maximum is below 0.25 keep -7."""
    argmax = te.comm_reducer(lambda x, y: (te.select(x[1] >= y[1], x[0], y[0]), te.max(x[1], y[1])),
                             lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    A = te.placeholder((12, 7), name="A")
    k = te.reduce_axis((0, 7), name="k")
    I, V = te.compute((12,), lambda i: argmax((k, A[i, k]), axis=k, init=(-7, 0.25)), name="AM")
    s = te.create_schedule(I.op)
    a = rand((12, 7), low=-1.0, high=0.6)
    keep = a.max(1) <= 0.25                    # x >= y keeps the accumulator on ties
    check_llvm(s, [A, I, V], {A: a}, {I: np.where(keep, -7, a.argmax(1)).astype("int32"),
                                      V: np.maximum(a.max(1), 0.25)}, rtol=0, atol=0)


@pytest.mark.parametrize("parallel", [False, True])
def test_rfactor_keeps_init_in_the_final_stage(check_llvm, rand, parallel):
    """TVM's test_rfactor_init: the partial sums start from 0, the final sum from I[i, j]."""
    A = te.placeholder((10, 27), name="A")
    B = te.placeholder((27, 6), name="B")
    I = te.placeholder((10, 6), name="I")
    k = te.reduce_axis((0, 27), name="k")
    C = te.compute((10, 6), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k, init=I[i, j]), name="C")
    s = te.create_schedule(C.op)
    kf, ki = s[C].split(k, nparts=4)            # 27 = 4 * 7 - 1: a tail
    CF = s.rfactor(C, kf, 1)
    if parallel:
        s[CF].parallel(CF.op.axis[0])
    else:
        s[CF].compute_at(s[C], s[C].op.axis[0])
    assert "init" not in str(CF.op.body[0]) and "init=I[i, j]" in str(s[C].op.body[0])
    a, b, i0 = rand((10, 27)), rand((27, 6)), rand((10, 6))
    check_llvm(s, [A, B, I, C], {A: a, B: b, I: i0}, {C: a @ b + i0}, rtol=1e-5)


def test_rfactor_of_the_whole_axis_with_init(check_llvm, rand):
    A = te.placeholder((7, 9), name="A")
    k = te.reduce_axis((0, 9), name="k")
    S = te.compute((7,), lambda i: te.max(A[i, k], axis=k, init=0.0), name="S")
    s = te.create_schedule(S.op)
    s.rfactor(S, k)
    a = rand((7, 9), low=-1.0, high=0.3)
    check_llvm(s, [A, S], {A: a}, {S: np.maximum(a.max(1), 0)}, rtol=0, atol=0)


def test_cache_write_and_compute_at_with_init(check_llvm, rand):
    A = te.placeholder((30, 22), name="A")
    I = te.placeholder((30,), name="I")
    k = te.reduce_axis((0, 22), name="k")
    C = te.compute((30, 30), lambda i, j: te.sum(A[i, k] * A[j, k], axis=k, init=I[i] * 2.0), name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[CL].compute_at(s[C], jo)
    s[CL].vectorize(s[CL].op.axis[1])
    a, i0 = rand((30, 22)), rand(30)
    check_llvm(s, [A, I, C], {A: a, I: i0}, {C: a @ a.T + 2 * i0[:, None]}, rtol=1e-5)


def test_init_read_from_an_attached_producer(check_llvm, rand):
    """The start value reads a stage computed at the reduction's loop: bound inference must see
    the read in init."""
    A = te.placeholder((6, 11), name="A")
    P = te.compute((6,), lambda i: A[i, 0] * 3.0, name="P")
    k = te.reduce_axis((0, 11), name="k")
    C = te.compute((6,), lambda i: te.sum(A[i, k], axis=k, init=P[i]), name="C")
    s = te.create_schedule(C.op)
    s[P].compute_at(s[C], C.op.axis[0])
    a = rand((6, 11))
    check_llvm(s, [A, C], {A: a}, {C: a.sum(1) + 3 * a[:, 0]}, rtol=1e-5)


def test_interpreter_starts_from_init(rand):
    from tilecraft.interp import evaluate
    A = te.placeholder((4, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    C = te.compute((4,), lambda i: te.sum(A[i, k], axis=k, init=i.astype("float32")), name="C")
    a = rand((4, 5))
    # init + 5 terms in float32 against float64: near-zero rows (init 1 + terms near -1) carry the
    # rounding error of terms far larger than the result (an rtol failed at seed 3593342461)
    assert_sum_close(evaluate(C, {A: a}), a.astype("float64").sum(1) + np.arange(4),
                     np.abs(a).sum(1, dtype="float64") + np.arange(4), n_terms=6)


def test_printed_with_init():
    A = te.placeholder((16,), name="A")
    k = te.reduce_axis((0, 16), name="k")
    S = te.compute((1,), lambda _: te.sum(A[k], axis=k, init=10.0), name="S")
    assert "init=10" in str(S.op.body[0])


# ----------------------------------------------------------------------------------------------
# errors

def test_init_using_the_reduce_axis_is_refused():
    from tilecraft.te.tensor import TEError
    A = te.placeholder((16,), name="A")
    k = te.reduce_axis((0, 16), name="k")
    with pytest.raises(TEError, match=r"compute 'S': init `A\[k\]` of te.sum uses the reduce axis 'k'; "
                                      r"init is one value per output element"):
        te.compute((1,), lambda _: te.sum(A[k], axis=k, init=A[k]), name="S")


def test_init_of_another_dtype_is_refused():
    from tilecraft.ir.dtype import DTypeError
    A = te.placeholder((16,), name="A")
    N = te.placeholder((16,), dtype="int32", name="N")
    k = te.reduce_axis((0, 16), name="k")
    with pytest.raises(DTypeError, match=r"te.sum: init `N\[i\]` is int32 but the reduction is float32"):
        te.compute((16,), lambda i: te.sum(A[k], axis=k, init=N[i]), name="S")


def test_init_with_the_wrong_number_of_values_is_refused():
    from tilecraft.te.tensor import TEError
    A = te.placeholder((16,), name="A")
    k = te.reduce_axis((0, 16), name="k")
    with pytest.raises(TEError, match=r"te.sum: init has 2 value\(s\) but the reduction has 1"):
        te.compute((1,), lambda _: te.sum(A[k], axis=k, init=(1.0, 2.0)), name="S")
