"""A stage attached with ``compute_at`` that is also an argument of the function.

TVM's answer, which tilecraft follows: the stage is still computed at its attach point (the
region its consumers need in one iteration), but it is stored into the argument's buffer at
absolute indices, so after the call the argument holds the whole tensor. When the consumers do
not read every element, some would never be written: that is refused at lower time.
"""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.ir import Allocate, post_order_visit
from tilecraft.schedule.schedule import ScheduleError


def test_issue_repro_symbolic_shape(check_llvm, rand):
    m = te.var("m")
    A = te.placeholder((m,), name="A")
    B = te.compute((m,), lambda i: A[i] + 1, name="B")
    C = te.compute((m,), lambda i: B[i] * 2, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    for n in (8, 1, 37):
        a = rand(n)
        check_llvm(s, [A, B, C], {A: a}, {B: a + 1, C: (a + 1) * 2})


def _two_d():
    A = te.placeholder((13, 10), name="A")
    B = te.compute((13, 10), lambda i, j: A[i, j] * 3.0 - 1.0, name="B")
    C = te.compute((13, 10), lambda i, j: B[i, j] + B[i, 9 - j], name="C")
    return A, B, C


@pytest.mark.parametrize("level", range(4))
def test_every_loop_level_of_a_tiled_consumer_with_tails(check_llvm, rand, level):
    A, B, C = _two_d()
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 3)    # 13 % 4, 10 % 3: tails
    s[B].compute_at(s[C], [io, jo, ii, ji][level])
    a = rand((13, 10))
    b = a * 3 - 1
    check_llvm(s, [A, B, C], {A: a}, {B: b, C: b + b[:, ::-1]})
    # the argument's own buffer is written: nothing named B is allocated
    allocs = []
    post_order_visit(tc.lower(s, [A, B, C]).body, lambda n: allocs.append(n.buffer.name)
                     if isinstance(n, Allocate) else None)
    assert "B" not in allocs


def test_attached_argument_in_parallel_vectorized_consumer(check_llvm, rand):
    n = te.var("n")
    A = te.placeholder((n, 16), name="A")
    B = te.compute((n, 16), lambda i, j: te.exp(A[i, j]), name="B")
    C = te.compute((n, 16), lambda i, j: B[i, j] * A[i, j], name="C")
    s = te.create_schedule(C.op)
    s[C].parallel(C.op.axis[0])
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].vectorize(ji)
    s[B].compute_at(s[C], jo)
    s[B].vectorize(B.op.axis[1])
    a = rand((7, 16))
    check_llvm(s, [A, B, C], {A: a}, {B: np.exp(a), C: np.exp(a) * a}, rtol=1e-6)


def test_overlapping_regions_are_written_consistently(check_llvm, rand):
    """A stencil: the regions of consecutive iterations overlap; every element of B ends up
    with its value."""
    A = te.placeholder((20,), name="A")
    B = te.compute((20,), lambda i: A[i] * A[i], name="B")
    C = te.compute((18,), lambda i: B[i] + B[i + 1] + B[i + 2], name="C")
    s = te.create_schedule(C.op)
    o, i = s[C].split(C.op.axis[0], factor=5)
    s[B].compute_at(s[C], o)
    a = rand(20)
    b = a * a
    check_llvm(s, [A, B, C], {A: a}, {B: b, C: b[:-2] + b[1:-1] + b[2:]})


def test_attached_reduction_argument_and_cache_write(check_llvm, rand):
    """A reduction attached inside its consumer and passed as an argument (initialised and
    accumulated in the argument's buffer), and a write cache attached likewise."""
    A = te.placeholder((9, 12), name="A")
    k = te.reduce_axis((0, 12), name="k")
    S = te.compute((9,), lambda i: te.sum(A[i, k], axis=k), name="S")
    N = te.compute((9, 12), lambda i, j: A[i, j] / S[i], name="N")
    s = te.create_schedule(N.op)
    s[S].compute_at(s[N], N.op.axis[0])
    a = rand((9, 12), low=0.5, high=1.5)
    check_llvm(s, [A, S, N], {A: a}, {S: a.sum(1), N: a / a.sum(1, keepdims=True)}, rtol=1e-5)


def test_argmax_outputs_attached_and_only_one_an_argument(check_llvm, rand):
    argmax = te.comm_reducer(lambda x, y: (te.select(x[1] >= y[1], x[0], y[0]), te.max(x[1], y[1])),
                             lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    A = te.placeholder((6, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    I, V = te.compute((6,), lambda i: argmax((k, A[i, k]), axis=k), name="AM")
    O = te.compute((6,), lambda i: I[i] * 2 + V[i].astype("int32"), name="O")
    s = te.create_schedule(O.op)
    s[I].compute_at(s[O], O.op.axis[0])
    a = rand((6, 10), "int32", -3, 3).astype("float32")
    check_llvm(s, [A, I, O], {A: a}, {I: a.argmax(1), O: a.argmax(1) * 2 + a.max(1).astype("int32")},
               rtol=0, atol=0)


def test_an_argument_its_consumers_read_only_partly_is_refused():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((4,), lambda i: B[i + 2] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(ScheduleError, match=r"stage 'B' is an argument but is computed at loop 'i' of "
                                            r"stage 'C', which reads only B\[2:6\] in dimension 0 \(extent 8\)"):
        tc.lower(s, [A, B, C])
    tc.lower(s, [A, C])          # not an argument: only the needed region is computed
