"""Lowering passes: bound inference regions, loop partitioning, vectorization fallbacks, print_ir."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilecraft as tc
from tilecraft import te
from tilecraft.ir import Allocate, For, ForKind, Ramp, BufferStore, post_order_visit, Const


def _allocs(func):
    out = {}

    def f(n):
        if isinstance(n, Allocate):
            out[n.buffer.name] = n.buffer.shape
    post_order_visit(func.body, f)
    return out


def _loops(func):
    out = []
    post_order_visit(func.body, lambda n: out.append(n) if isinstance(n, For) else None)
    return out


def test_compute_at_allocates_exactly_the_consumed_region(rand):
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="B")
    # C reads a 3-wide window of B along j
    C = te.compute((64, 62), lambda i, j: B[i, j] + B[i, j + 1] + B[i, j + 2], name="C")
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[B].compute_at(s[C], jo)
    f = tc.lower(s, [A, C])
    # one row (i is fixed at jo's level), 8 + 2 columns
    assert [x.value for x in _allocs(f)["B"]] == [10]
    mod = tc.build(s, [A, C])
    a = rand((64, 64), low=0.0, high=1.0)
    c = np.full((64, 62), np.nan, "float32")
    mod(a, c)
    b = a * 2
    np.testing.assert_allclose(c, b[:, :-2] + b[:, 1:-1] + b[:, 2:], rtol=1e-6)


def test_compute_at_inner_axis_gives_a_single_element():
    A = te.placeholder((32,), name="A")
    B = te.compute((32,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((32,), lambda i: B[i] * 3.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    assert [x.value for x in _allocs(tc.lower(s, [A, C]))["B"]] == [1]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 300), factor=st.integers(1, 40))
def test_split_tail_partition_is_correct_for_every_length(n, factor):
    nv = te.var("n")
    A = te.placeholder((nv,), name="A")
    B = te.compute((nv,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=factor)
    s[B].vectorize(xi)
    f = _build_cached(s, A, B, factor)
    a = np.random.rand(n).astype("float32")
    b = np.full(n, np.nan, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, a * np.float32(2) + np.float32(1))


_cache = {}


def _build_cached(s, A, B, factor):
    if factor not in _cache:
        _cache[factor] = tc.build(s, [A, B])
    return _cache[factor]


def test_partitioned_main_loop_is_vectorized():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(xi)
    f = tc.lower(s, [A, B])
    stores = []
    post_order_visit(f.body, lambda x: stores.append(x) if isinstance(x, BufferStore) else None)
    assert any(isinstance(st.indices[0], Ramp) for st in stores), str(f)


def test_vectorize_falls_back_when_lanes_would_collide(rand):
    # every lane would store to B[0]: the loop must stay a (hinted) scalar loop
    A = te.placeholder((8,), name="A")
    k = te.reduce_axis((0, 8), name="k")
    B = te.compute((1, 8), lambda i, j: A[j] + 1.0, name="B")
    C = te.compute((1,), lambda i: te.sum(B[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].vectorize(B.op.axis[1])
    mod = tc.build(s, [A, C])
    a = rand(8, low=0.0, high=1.0)
    c = np.full(1, np.nan, "float32")
    mod(a, c)
    np.testing.assert_allclose(c, [(a + 1).sum()], rtol=1e-6)


def test_unrolled_short_loops_are_copied():
    A = te.placeholder((16, 4), name="A")
    B = te.compute((16, 4), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].unroll(B.op.axis[1])
    f = tc.lower(s, [A, B])
    assert [l.loop_var.name for l in _loops(f)] == ["i"]


def test_auto_unroll_pragma_marks_small_nests():
    A = te.placeholder((64, 100, 4), name="A")
    B = te.compute((64, 100, 4), lambda i, j, k: A[i, j, k] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].pragma(B.op.axis[0], "auto_unroll_max_step", 8)
    f = tc.lower(s, [A, B])
    names = [l.loop_var.name for l in _loops(f)]
    assert "k" not in names and "j" in names   # k's 4 iterations unrolled; j's subtree has 400


def test_print_ir_prints_every_pass(capsys):
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    tc.lower(s, [A, B], print_ir=True)
    out = capsys.readouterr().out
    for name in ["schedule_ops", "simplify", "loop_partition", "storage_flatten", "vectorize", "unroll"]:
        assert f"after {name}" in out


def test_lower_does_not_change_the_schedule():
    A = te.placeholder((40,), name="A")
    B = te.compute((40,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=16)
    first = str(tc.lower(s, [A, B]))
    assert str(tc.lower(s, [A, B])) == first


def test_vectorized_lazy_select_with_a_uniform_condition_stays_lazy(check_llvm, rand):
    """Found by the bounds-checked schedule fuzzer: vectorizing i under a guard on j turned
    if_then_else(j + 1 < 19, A[.., j + 1], 1) into an eager select of a broadcast condition,
    so the vector load read A[12, 19] (one past the end) at j = 18. The guard must stay lazy."""
    from tilecraft.ir import Select
    A = te.placeholder((13, 19), name="A")
    P = te.compute((13, 20), lambda i, j: te.if_then_else(j < 19, A[i, j] * 2.0, 1.0), name="P")
    C = te.compute((13, 19), lambda i, j: P[i, j] + P[i, j + 1] * A[i, j], name="C")
    X = te.placeholder((13, 6), dtype="int32", name="X")
    D = te.compute((13, 6), lambda i, j: te.if_then_else(j > 0, X[i, j] // j, 0), name="D")
    s = te.create_schedule([C.op, D.op])
    for T in (C, D):
        io, ii = s[T].split(T.op.axis[0], factor=3)
        s[T].reorder(T.op.axis[1], ii, io)
        s[T].vectorize(io)
    s[P].compute_inline()
    selects = []
    post_order_visit(tc.lower(s, [A, X, C, D]).body,
                     lambda n: selects.append(n) if isinstance(n, Select) and n.dtype.endswith("x5") else None)
    assert selects and all(x.lazy and x.condition.dtype == "bool" for x in selects)
    a, x = rand((13, 19)), rand((13, 6), "int32", -50, 50)
    p = np.concatenate([a * 2, np.ones((13, 1), "float32")], axis=1)
    j = np.arange(6)
    check_llvm(s, [A, X, C, D], {A: a, X: x},
               {C: p[:, :-1] + p[:, 1:] * a, D: np.where(j > 0, x // np.maximum(j, 1), 0).astype("int32")})


def test_vectorized_guard_with_a_uniform_condition_stays_lazy(rand, check_llvm):
    """``if_then_else(j < 7, A[i, j + 1], 0)`` vectorized over i: the guard is the same in every
    lane and must still keep the load at j = 7 (one past A's end for the last row) from running.
    The vectorizer once turned it into an eager select (found by the lowered-IR interpreter)."""
    from tilecraft.interp_lowered import run as run_lowered
    from tilecraft.ir import Select
    A = te.placeholder((4, 8), name="A")
    C = te.compute((4, 8), lambda i, j: te.if_then_else(j < 7, A[i, j + 1], 0.0), name="C")
    s = te.create_schedule(C.op)
    s[C].reorder(C.op.axis[1], C.op.axis[0])
    s[C].vectorize(C.op.axis[0])
    f = tc.lower(s, [A, C], target="llvm")
    assert not [x for x in _loops(f) if x.kind is ForKind.VECTORIZED]       # it was vectorized
    selects = []
    post_order_visit(f.body, lambda n: selects.append(n) if isinstance(n, Select) else None)
    assert selects and all(x.lazy for x in selects)
    a = rand((4, 8))
    expected = np.concatenate([a[:, 1:], np.zeros((4, 1), "float32")], axis=1)
    c = np.full((4, 8), np.nan, "float32")
    run_lowered(f, [a, c])                  # an eager select reads A[32]: out of bounds
    np.testing.assert_array_equal(c, expected)
    check_llvm(s, [A, C], {A: a}, expected={C: expected})


@pytest.mark.parametrize("n", [1000, 1030])
def test_a_split_tail_of_one_outer_iteration_runs_without_a_parallel_loop(n, rand, check_llvm):
    """n = 1000 split by 64 with the outer loop parallel: loop partitioning peels the last outer
    iteration off into a loop of extent 1. That loop used to stay ``parallel``: a second
    ``GOMP_parallel`` call (a thread team woken for one iteration) per kernel call."""
    from tilecraft.codegen.llvm import codegen_llvm
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] * 2.0 + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=64)
    s[C].parallel(xo)
    s[C].vectorize(xi)
    f = tc.lower(s, [A, B, C], name="f", target="llvm")
    parallel = [x for x in _loops(f) if x.kind is ForKind.PARALLEL]
    assert len(parallel) == 1 and parallel[0].extent.value == n // 64, f
    assert codegen_llvm([f]).text.count("call void @GOMP_parallel(") == 1
    a, b = rand((n,)), rand((n,))
    check_llvm(s, [A, B, C], {A: a, B: b}, expected={C: a * 2 + b})
