"""Reductions over a vectorized reduction axis (``schedule/vector_reduce.py``): vector
accumulators, one horizontal ``VectorReduce`` per output point, the start value (``init=``)
combined once.

Every case is differential: fresh random inputs, shapes with tails, outputs poisoned, the IR
interpreted after every pass, bounds-checked and plain builds (``check_llvm``), and a float64
numpy reference. Float sums are compared within ``sum_tolerance``: ``n * eps * sum(|terms|)``
bounds the difference between two sums of the same ``n`` terms in any two orders (each is within
about ``(n - 1) * eps / 2 * sum(|terms|)`` of the exact sum), so the check cannot fail because the
vector code reassociates, and still catches a missing or doubled term (``|term| >> n * eps``
times the sum of magnitudes, at the sizes used here); the largest bound of the rows is the
tolerance of all (``check_llvm`` takes one ``atol``). Integer sums, min and max are exact.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilecraft as tc
from tilecraft import te
from tilecraft.interp_lowered import run as run_lowered
from tilecraft.ir import BinOp, Broadcast, DTypeError, VectorReduce, Var, const
from tilecraft.testing import sum_tolerance


def _row_reduce(reducer, dtype, rows, cols, lanes, unroll=1, init=None, where=None, parallel=False):
    A = te.placeholder((rows, cols), dtype, name="A")
    k = te.reduce_axis((0, cols), name="k")
    kw = {} if init is None else {"init": init}
    if where is not None:
        kw["where"] = where(A, k)
    C = te.compute((rows,), lambda i: reducer(A[i, k], axis=k, **kw), name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=lanes)
    if unroll > 1:
        ko, ku = s[C].split(ko, factor=unroll)
        s[C].unroll(ku)
    s[C].vectorize(ki)
    if parallel:
        s[C].parallel(C.op.axis[0])
    return A, C, s


prod = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, t), name="prod")
REDUCERS = {"sum": (te.sum, np.sum), "max": (te.max, np.max), "min": (te.min, np.min),
            "prod": (prod, np.prod)}


def _inputs(rand, reducer, dtype, shape):
    if dtype.startswith("int"):
        lo, hi = (-3, 3) if reducer == "prod" else (-1000, 1000)
        return rand(shape, dtype, lo, hi)
    if reducer == "prod":
        return rand(shape, dtype, 0.5, 1.5)         # products of ~40 terms stay in range
    return rand(shape, dtype, -1.0, 1.0)


@pytest.mark.parametrize("reducer", sorted(REDUCERS))
@pytest.mark.parametrize("dtype,cols,lanes,unroll", [
    ("float32", 45, 8, 1),          # a tail of 5
    ("float32", 64, 16, 2),         # two accumulators, no tail
    ("float64", 37, 4, 3),          # three accumulators, the last block partly a tail
    ("int32", 43, 8, 2),
    ("int8", 29, 16, 1),            # wraps around; fewer columns than two vectors
])
def test_vectorized_reduction_matches_numpy(check_llvm, rand, reducer, dtype, cols, lanes, unroll):
    te_r, np_r = REDUCERS[reducer]
    A, C, s = _row_reduce(te_r, dtype, 5, cols, lanes, unroll)
    a = _inputs(rand, reducer, dtype, (5, cols))
    if dtype.startswith("int"):
        want = np_r(a.astype("int64"), axis=1).astype(dtype)     # wrap-around, as the IR says
        check_llvm(s, [A, C], {A: a}, {C: want}, rtol=0, atol=0)
    elif reducer == "prod":
        want = np.prod(a.astype("float64"), axis=1)
        tol = cols * np.finfo(dtype).eps * np.abs(want).max()      # relative, per factor
        check_llvm(s, [A, C], {A: a}, {C: want.astype(dtype)}, rtol=0, atol=tol)
    elif reducer == "sum":
        tol = sum_tolerance(a, axis=1).max()
        check_llvm(s, [A, C], {A: a}, {C: a.astype("float64").sum(1).astype(dtype)}, rtol=0, atol=tol)
    else:
        check_llvm(s, [A, C], {A: a}, {C: np_r(a, axis=1)}, rtol=0, atol=0)


def test_init_is_combined_once_not_per_lane(check_llvm, rand):
    """With 16 lanes and 2 accumulators, an init combined per slot would add 32 times."""
    A, C, s = _row_reduce(te.sum, "float32", 4, 70, 16, unroll=2, init=100.0)
    a = rand((4, 70))
    check_llvm(s, [A, C], {A: a}, {C: (a.astype("float64").sum(1) + 100.0).astype("float32")},
               rtol=0, atol=sum_tolerance(a, axis=1, extra=100.0).max())
    lowered = str(tc.lower(s, [A, C], simple_mode=True))
    assert "C[i] = 100.0 + vector_reduce_add(" in lowered


def test_init_from_a_tensor_and_max(check_llvm, rand):
    A = te.placeholder((6, 50), name="A")
    I = te.placeholder((6,), name="I")
    k = te.reduce_axis((0, 50), name="k")
    C = te.compute((6,), lambda i: te.max(A[i, k], axis=k, init=I[i]), name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=8)
    s[C].vectorize(ki)
    a, i0 = rand((6, 50)), rand(6)
    i0[:3] += 2.0                                   # the init wins in these rows
    check_llvm(s, [A, I, C], {A: a, I: i0}, {C: np.maximum(a.max(1), i0)}, rtol=0, atol=0)


def test_where_that_may_be_evaluated_everywhere_becomes_a_vector_select(check_llvm, rand):
    A, C, s = _row_reduce(te.sum, "float32", 5, 53, 8, unroll=2, where=lambda A, k: A[0, k] > 0.0)
    lowered = str(tc.lower(s, [A, C]))      # with loop partitioning: the tail is peeled off
    assert "C.vacc[ramp(0, 1, 8)] = select(" in lowered       # vectorized: one select per vector
    a = rand((5, 53))
    masked = np.where(a[0] > 0, a, 0.0)
    check_llvm(s, [A, C], {A: a}, {C: masked.astype("float64").sum(1).astype("float32")},
               rtol=0, atol=sum_tolerance(masked, axis=1).max())


def test_where_that_guards_a_read_stays_a_guard(check_llvm, rand):
    """``where=k < 40`` keeps reads of a 40-column tensor in bounds over a 48-point domain: the
    source must not be read where it fails, so the update stays under an ``if`` (a scalar loop
    over the lanes); the bounds-checked build would raise on a read past the end."""
    A = te.placeholder((3, 40), name="A")
    k = te.reduce_axis((0, 48), name="k")
    C = te.compute((3,), lambda i: te.sum(A[i, k], axis=k, where=k < 40), name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=8)
    s[C].vectorize(ki)
    lowered = str(tc.lower(s, [A, C], simple_mode=True))
    assert "select(" not in lowered and "vector_reduce_add(" in lowered
    a = rand((3, 40))
    check_llvm(s, [A, C], {A: a}, {C: a.astype("float64").sum(1).astype("float32")},
               rtol=0, atol=sum_tolerance(a, axis=1).max())


def test_symbolic_extent_with_a_tail_in_parallel_rows(check_llvm, rand):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=8)
    ko, ku = s[C].split(ko, factor=4)
    s[C].unroll(ku)
    s[C].vectorize(ki)
    s[C].parallel(C.op.axis[0])
    a = rand((7, 203))
    check_llvm(s, [A, C], {A: a}, {C: a.astype("float64").sum(1).astype("float32")},
               rtol=0, atol=sum_tolerance(a, axis=1).max())


def test_data_axis_inside_the_reduction_has_its_own_accumulators(check_llvm, rand):
    A = te.placeholder((6, 37), name="A")
    k = te.reduce_axis((0, 37), name="k")
    C = te.compute((6,), lambda i: te.sum(A[i, k], axis=k, init=-1.0), name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(ko, C.op.axis[0], ki)
    s[C].vectorize(ki)
    lowered = str(tc.lower(s, [A, C], simple_mode=True))
    assert 'C.vacc = allocate(float32[24], "local")' in lowered
    a = rand((6, 37))
    check_llvm(s, [A, C], {A: a}, {C: (a.astype("float64").sum(1) - 1.0).astype("float32")},
               rtol=0, atol=sum_tolerance(a, axis=1, extra=1.0).max())


def test_tuple_reducer_argmax_folds_the_slots_one_by_one(check_llvm, rng):
    argmax = te.comm_reducer(lambda x, y: (te.select(x[1] >= y[1], x[0], y[0]), te.max(x[1], y[1])),
                             lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    A = te.placeholder((7, 61), name="A")
    k = te.reduce_axis((0, 61), name="k")
    I, V = te.compute((7,), lambda i: argmax((k.var, A[i, k]), axis=k), name="T")
    s = te.create_schedule(I.op)
    ko, ki = s[I.op].split(k, factor=8)
    ko, ku = s[I.op].split(ko, factor=2)
    s[I.op].unroll(ku)
    s[I.op].vectorize(ki)
    a = rng.permutation(7 * 61).reshape(7, 61).astype("float32")     # no ties
    check_llvm(s, [A, I, V], {A: a}, {I: a.argmax(1).astype("int32"), V: a.max(1)}, rtol=0, atol=0)


def test_a_combiner_that_is_no_single_operator_folds_the_slots(check_llvm, rand):
    smax = te.comm_reducer(lambda x, y: te.select(x > y, x, y), lambda t: te.min_value(t), name="smax")
    A, C, s = _row_reduce(smax, "float32", 4, 30, 8, init=0.25)
    lowered = str(tc.lower(s, [A, C], simple_mode=True))
    assert "for vacc.r in range(0, 8):" in lowered and "vector_reduce" not in lowered
    a = rand((4, 30))
    a[1] -= 2.0
    check_llvm(s, [A, C], {A: a}, {C: np.maximum(a.max(1), 0.25)}, rtol=0, atol=0)


def test_rfactor_partials_with_a_vectorized_reduction(check_llvm, rand):
    A = te.placeholder((1000,), name="A")
    k = te.reduce_axis((0, 1000), name="k")
    S = te.compute((1,), lambda _: te.sum(A[k], axis=k), name="S")
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(k, nparts=4)
    SF = s.rfactor(S, ko)
    s[SF].parallel(SF.op.axis[0])
    r = s[SF].op.reduce_axis[0]
    ro, ri = s[SF].split(r, factor=16)
    s[SF].vectorize(ri)
    a = rand(1000)
    check_llvm(s, [A, S], {A: a}, {S: np.array([a.astype("float64").sum()], "float32")},
               rtol=0, atol=sum_tolerance(a[None, :], axis=1).max())


def test_the_lowered_ir_interpreter_and_llvm_agree_bit_for_bit(rand):
    """Both fold the lanes in halves, and LLVM does not reassociate float adds: same bits."""
    A, C, s = _row_reduce(te.sum, "float32", 8, 100, 16, unroll=2)
    a = rand((8, 100), low=-1e3, high=1e3)
    got, interp = np.full(8, np.nan, "float32"), np.full(8, np.nan, "float32")
    tc.build(s, [A, C], target="llvm")(a, got)
    run_lowered(tc.lower(s, [A, C], target="llvm"), [a, interp])
    np.testing.assert_array_equal(got, interp)


def test_accumulators_stay_in_vector_registers():
    """After LLVM's optimisation the row loop carries its accumulators as vector phis: no
    accumulator buffer is left in memory."""
    A, C, s = _row_reduce(te.max, "float32", 64, 1024, 8, unroll=4)
    ll = tc.build(s, [A, C], target="llvm", name="rowmax").get_source("ll")
    assert "alloca" not in ll
    assert ll.count("phi <8 x float>") >= 4


def test_vector_reduce_node_refuses_what_it_cannot_fold():
    v = Broadcast(const(1.0), 8)
    with pytest.raises(DTypeError, match=r"VectorReduce folds with one of .*, not '-'"):
        VectorReduce(BinOp.SUB, v)
    with pytest.raises(DTypeError, match=r"VectorReduce needs a vector, got the float32 `x`"):
        VectorReduce(BinOp.ADD, Var("x", "float32"))
    assert str(VectorReduce(BinOp.MAX, v)) == "vector_reduce_max(broadcast(1.0, 8))"


def test_fused_reduction_axes_read_contiguously(check_llvm, rand):
    """Global pooling fuses the two reduction axes; storage flattening recombines
    ``f // 9 * 9 + f % 9`` into ``f`` before vectorization, so the vector loads are contiguous
    (they were gathers of ``ramp // 9`` and ``ramp % 9``)."""
    X = te.placeholder((2, 16, 7, 9), name="X")
    rh, rw = te.reduce_axis((0, 7), name="rh"), te.reduce_axis((0, 9), name="rw")
    R = te.compute((2, 16), lambda n, c: te.sum(X[n, c, rh, rw], axis=[rh, rw]), name="R")
    s = te.create_schedule(R.op)
    f = s[R].fuse(rh, rw)
    fo, fi = s[R].split(f, factor=16)
    s[R].vectorize(fi)
    text = str(tc.lower(s, [X, R]))        # with loop partitioning: the tail is peeled off
    assert "//" not in text and "%" not in text
    assert "X[ramp(n * 1008 + c * 63 + rh.rw.fused.outer * 16, 1, 16)]" in text
    x = rand((2, 16, 7, 9))
    check_llvm(s, [X, R], {X: x}, {R: x.astype("float64").sum((2, 3)).astype("float32")},
               rtol=0, atol=sum_tolerance(x.reshape(32, 63), axis=1).max())


def test_llvm_refuses_to_fold_lanes_with_an_operator_the_dtype_lacks():
    from tilecraft.codegen.llvm import CodegenError, build_llvm
    from tilecraft.ir import Buffer, BufferStore, PrimFunc, Ramp
    B = Buffer("B", (8,), "bool")
    C = Buffer("C", (1,), "bool")
    value = VectorReduce(BinOp.ADD, tc.ir.BufferLoad(B, (Ramp(const(0), const(1), 8),), "boolx8"))
    with pytest.raises(CodegenError, match=r"operator '\+' is not defined on boolx4: cannot fold the lanes"):
        build_llvm([PrimFunc("f", (B, C), BufferStore(C, value, (const(0),)))])


def test_global_pool_refuses_an_unknown_pool():
    from tilecraft.topi.pooling import global_pool_compute
    with pytest.raises(ValueError, match=r"global pooling: pool must be 'avg' or 'max', got 'min'"):
        global_pool_compute(1, 2, 3, 3, "min")


@settings(max_examples=200, deadline=None)
@given(x=st.integers(-5000, 5000), c=st.integers(1, 40), s=st.integers(1, 12), y=st.integers(-50, 50),
       trunc=st.booleans(), order=st.booleans())
def test_storage_flatten_recombines_quotient_and_remainder_exactly(x, c, s, y, trunc, order):
    """``(v // c, c * s)`` and ``(v % c, s)`` become ``(v, s)`` (floor and truncating division),
    and the flattened offset keeps its value at every point, negative values included."""
    from tilecraft.ir import Binary, Const as C, substitute
    from tilecraft.ir.simplify import simplify
    from tilecraft.schedule.passes.storage_flatten import _recombine_divmod
    v, w = Var("v"), Var("w")
    div, mod = (BinOp.TRUNCDIV, BinOp.TRUNCMOD) if trunc else (BinOp.FLOORDIV, BinOp.FLOORMOD)
    pairs = [(w, C(c * s * 7, "int32")), (Binary(div, v, C(c, "int32"), "int32"), C(c * s, "int32")),
             (Binary(mod, v, C(c, "int32"), "int32"), C(s, "int32"))]
    if order:
        pairs = [pairs[0], pairs[2], pairs[1]]
    merged = _recombine_divmod(pairs)
    assert len(merged) == 2 and any(i is v for i, _ in merged)

    def offset(ps):
        e = None
        for i, st_ in ps:
            e = i * st_ if e is None else e + i * st_
        return simplify(substitute(e, {v: C(x, "int32"), w: C(y, "int32")})).value
    assert offset(merged) == offset(pairs)
