"""The interpreter for lowered CPU IR (``tilecraft.interp_lowered``) and the per-pass check.

* it agrees with the LLVM build and the reference interpreter on the golden schedules, after
  every pass;
* a deliberately broken pass (monkeypatched into ``lower()``) is reported by name, with the IR
  before and after it;
* its semantics on the edges: division and modulo of negative numbers (property test),
  wraparound, casts, lazy vector selects, poisoned allocations, deep nests;
* each of its error messages.
"""
import importlib
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilecraft as tc
from tilecraft import te
from tilecraft.interp import evaluate
from tilecraft.interp_lowered import (BudgetExceeded, LoweredInterpError, PassChecker, PassMismatch,
                                      python_source, run)
from tilecraft.ir import (Allocate, Buffer, BufferLoad, BufferStore, Const, For, ForKind, Ramp,
                          Select, SeqStmt, Var)
from tilecraft.ir.expr import Broadcast, Cast, Let
from tilecraft.ir.functor import IRMutator
from tilecraft.ir.stmt import LetStmt, PrimFunc

from tilecraft.testing import poison, random_array, sum_error_bound
from test_golden_ir import GOLDEN

LOWER = importlib.import_module("tilecraft.schedule.lower")   # the module (the package exports the function)


def _inputs(rng, args, n=1000):
    """Random arrays for the placeholders among ``args`` (a symbolic extent is ``n``)."""
    from tilecraft.te.tensor import PlaceholderOp
    feed = {}
    for t in args:
        if isinstance(t.op, PlaceholderOp):
            shape = [d.value if isinstance(d, Const) else n for d in t.shape]
            feed[t] = random_array(rng, shape, t.dtype)
    return feed


def _atol(outs, feed) -> float:
    """How far two float32 evaluations of the outputs may be apart when they add in different
    orders (the passes reorder sums: rfactor, splits): twice the error bound of the longest
    reduction's sum (``sum_error_bound``), whose sum of |terms| is the graph evaluated on
    |inputs| (every golden sums products of its inputs), over 1e-5 for the rest.

    A fixed atol of 1e-5 failed on about one seed in a thousand for rfactor_parallel (1024
    terms, a result near zero)."""
    from tilecraft.te.tensor import ComputeOp, post_dfs_order
    n = max([int(np.prod([iv.dom.extent.value for iv in op.reduce_axis]))
             for op in post_dfs_order([t.op for t in outs]) if isinstance(op, ComputeOp) and op.reduce_axis]
            or [0])
    if n == 0:
        return 1e-5
    abs_sums = evaluate(outs, {t: np.abs(a) for t, a in feed.items()})
    return 1e-5 + 2 * max(float(sum_error_bound(np.abs(x).max(), n)) for x in abs_sums)


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n == "matmul_blocked" else [])
                                  for n in sorted(GOLDEN)])
def test_agrees_with_llvm_and_the_reference_after_every_pass_on_golden_schedules(name, rng):
    s, args = GOLDEN[name]()
    feed = _inputs(rng, args)
    outs = [t for t in args if t not in feed]
    ref = evaluate(outs, feed)
    arrays = [feed.get(t) for t in args]
    expected = {k: ref[outs.index(t)] for k, t in enumerate(args) if t in outs}
    atol = _atol(outs, feed)
    checker = PassChecker(arrays, expected, rtol=1e-5, atol=atol)
    func = tc.lower(s, args, name="golden", target="llvm", after_pass=checker)
    assert checker.stopped is None
    assert {"schedule_ops", "storage_flatten"} <= set(checker.checked)
    # the final function, run by the interpreter and by LLVM on the same inputs
    interp_out = [feed[t] if t in feed else poison(expected[k].shape, t.dtype) for k, t in enumerate(args)]
    run(func, interp_out)
    llvm_out = [feed[t] if t in feed else poison(expected[k].shape, t.dtype, 1) for k, t in enumerate(args)]
    tc.build(func, target="llvm")(*llvm_out)
    for k in expected:
        np.testing.assert_allclose(interp_out[k], llvm_out[k], rtol=1e-5, atol=atol)
        np.testing.assert_allclose(interp_out[k], expected[k], rtol=1e-5, atol=atol)


# ------------------------------------------------------------------------------------------------
# a broken pass is named

class _ShortenInnermostLoops(IRMutator):
    """A wrong 'optimisation': every innermost loop runs one iteration less."""

    def visit_For(self, s):
        body = self.visit_stmt(s.body)
        if body is s.body and not any(isinstance(n, For) for n in _walk(s.body)):
            return For(s.loop_var, s.min, s.extent - 1, s.kind, s.body, s.thread_tag, s.annotations)
        return For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)


class _LengthenInnermostLoops(IRMutator):
    def visit_For(self, s):
        body = self.visit_stmt(s.body)
        if body is s.body and not any(isinstance(n, For) for n in _walk(s.body)):
            return For(s.loop_var, s.min, s.extent + 1, s.kind, s.body, s.thread_tag, s.annotations)
        return For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)


def _walk(s):
    from tilecraft.ir import post_order_visit
    out = []
    post_order_visit(s, out.append)
    return out


def _tail_schedule():
    A = te.placeholder((10, 7), name="A")
    B = te.compute((10, 7), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[1], factor=3)
    return s, A, B


def _check(s, args, feed):
    outs = [t for t in args if t not in feed]
    ref = evaluate(outs, feed)
    checker = PassChecker([feed.get(t) for t in args],
                          {k: ref[outs.index(t)] for k, t in enumerate(args) if t in outs})
    tc.lower(s, args, target="llvm", after_pass=checker)
    return checker


def test_a_pass_that_computes_something_else_is_named_with_the_ir_around_it(monkeypatch, rand):
    real = LOWER.partition_loops
    monkeypatch.setattr(LOWER, "partition_loops", lambda body: _ShortenInnermostLoops().visit_stmt(real(body)))
    s, A, B = _tail_schedule()
    with pytest.raises(PassMismatch) as err:
        _check(s, [A, B], {A: rand((10, 7))})
    msg = str(err.value)
    assert msg.startswith("wrong after loop_partition: 'B' differs from the reference")
    assert "Mismatched elements" in msg
    assert "--- IR before loop_partition (after simplify) ---" in msg
    assert "--- IR after loop_partition ---" in msg
    before, after = msg.split("--- IR after loop_partition ---")
    assert "for j.inner in range(0, 3):" in before and "for j.inner in range(0, j.inner.split - 1):" in after


def test_a_pass_that_writes_out_of_bounds_is_named_with_the_statement_and_loop_variables(monkeypatch, rand):
    real = LOWER.storage_flatten
    monkeypatch.setattr(LOWER, "storage_flatten", lambda body, aligns: _LengthenInnermostLoops().visit_stmt(real(body, aligns)))
    A = te.placeholder((6, 5), name="A")
    B = te.compute((6, 5), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(PassMismatch) as err:
        _check(s, [A, B], {A: rand((6, 5))})
    msg = str(err.value)
    assert msg.startswith("wrong after storage_flatten: out-of-bounds store B[30] (size 30) in function 'main'")
    assert "\n  in `B[i * 5 + j] = A[i * 5 + j] + 1.0`\n  with i=5, j=5\n" in msg
    assert "--- IR before storage_flatten (after loop_partition) ---" in msg


def test_the_passes_before_the_broken_one_are_checked_and_pass(monkeypatch, rand):
    real = LOWER.unroll_loops
    monkeypatch.setattr(LOWER, "unroll_loops", lambda body: _ShortenInnermostLoops().visit_stmt(real(body)))
    s, A, B = _tail_schedule()
    a = rand((10, 7))
    checker = PassChecker([a, None], {1: evaluate(B, {A: a})})
    with pytest.raises(PassMismatch, match="^wrong after unroll:"):
        tc.lower(s, [A, B], target="llvm", after_pass=checker)
    assert checker.checked == ["schedule_ops", "loop_partition", "storage_flatten"]


def test_a_pass_that_makes_the_loop_nest_explode_is_reported(monkeypatch, rand):
    class Blowup(IRMutator):
        def visit_For(self, s):
            return For(s.loop_var, s.min, s.extent * 1000, s.kind, s.body, s.thread_tag, s.annotations)
    real = LOWER.vectorize_loops
    monkeypatch.setattr(LOWER, "vectorize_loops", lambda body: Blowup().visit_stmt(real(body)))
    A = te.placeholder((40,), name="A")
    B = te.compute((40,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    a = rand((40,))
    checker = PassChecker([a, None], {1: a + 1}, budget=1000)
    with pytest.raises(PassMismatch, match=r"^wrong after vectorize: the loop nest runs more than 10000 "
                                           r"iterations \(the budget\) \(the first pass ran 40\)"):
        tc.lower(s, [A, B], target="llvm", after_pass=checker)


def test_a_first_run_over_the_budget_stops_the_checking(rand):
    s, A, B = _tail_schedule()
    a = rand((10, 7))
    checker = PassChecker([a, None], {1: a * 2 + 1}, budget=50)
    tc.lower(s, [A, B], target="llvm", after_pass=checker)
    assert checker.checked == [] and "more than 50 loop iterations" in checker.stopped


def test_passes_that_change_nothing_are_not_run_again(monkeypatch, rand):
    import tilecraft.interp_lowered as il
    seen, runs = [], []
    real_run = il.run
    monkeypatch.setattr(il, "run", lambda func, *a: runs.append(func.body) or real_run(func, *a))
    s, A, B = _tail_schedule()
    a = rand((10, 7))
    checker = PassChecker([a, None], {1: a * 2 + 1})
    tc.lower(s, [A, B], target="llvm", after_pass=lambda name, f: seen.append(f.body) or checker(name, f))
    distinct = [b for k, b in enumerate(seen) if k == 0 or b is not seen[k - 1]]
    # schedule_ops, simplify, loop_partition, storage_flatten, vectorize, unroll, simplify, legalize, cse, dce
    assert len(seen) == 10 and len(runs) == len(distinct) < len(seen)
    assert all(x is y for x, y in zip(runs, distinct))


# ------------------------------------------------------------------------------------------------
# semantics

def _run_te(out, inputs, feed, schedule=None, **lower_kw):
    s = te.create_schedule(out.op)
    if schedule:
        schedule(s)
    f = tc.lower(s, inputs + [out], target="llvm", **lower_kw)
    got = poison(tuple(int(d.value) for d in out.shape), out.dtype)
    run(f, [feed[t] for t in inputs] + [got])
    return got, evaluate(out, feed)


_INT32 = st.integers(-2**31, 2**31 - 1)


@settings(max_examples=30, deadline=None)
@given(a=st.lists(_INT32, min_size=8, max_size=8),
       b=st.lists(_INT32.filter(lambda v: v != 0), min_size=8, max_size=8),
       vectorized=st.booleans())
def test_division_and_modulo_round_as_stated(a, b, vectorized):
    """floor forms round down, trunc forms towards zero, on every sign combination (the
    quotient of INT_MIN by -1 overflows: undefined, not drawn)."""
    a, b = np.array(a, "int32"), np.array(b, "int32")
    b[(a == -2**31) & (b == -1)] = 1
    A = te.placeholder((8,), "int32", name="A")
    B = te.placeholder((8,), "int32", name="B")
    def trunc_q(x, y):
        return (np.abs(x) // np.abs(y)) * np.sign(x) * np.sign(y)
    ops = {"floordiv": (lambda x, y: x // y, lambda x, y: x // y),
           "floormod": (lambda x, y: x % y, lambda x, y: x % y),
           "truncdiv": (te.truncdiv, trunc_q),
           "truncmod": (te.truncmod, lambda x, y: x - trunc_q(x, y) * y)}
    for name, (build, want) in ops.items():
        C = te.compute((8,), lambda i: build(A[i], B[i]), name=name)
        vec = (lambda s: s[C].vectorize(C.op.axis[0])) if vectorized else None
        got, ref = _run_te(C, [A, B], {A: a, B: b}, vec)
        np.testing.assert_array_equal(got, want(a.astype("int64"), b.astype("int64")).astype("int32"), err_msg=name)
        np.testing.assert_array_equal(got, ref, err_msg=name)


def test_integer_arithmetic_wraps_and_narrowing_casts_wrap(rng):
    A = te.placeholder((16,), "int32", name="A")
    C = te.compute((16,), lambda i: (A[i] * 65537 + 2**31 - 1).astype("int8").astype("int32"), name="C")
    a = rng.integers(-2**31, 2**31, 16).astype("int32")
    got, ref = _run_te(C, [A], {A: a})
    want = ((a.astype("int64") * 65537 + 2**31 - 1) % 2**32).astype("uint32").astype("int32").astype("int8")
    np.testing.assert_array_equal(got, want.astype("int32"))
    np.testing.assert_array_equal(got, ref)


def test_casts_round_as_the_backend(rng):
    X = te.placeholder((8,), "float64", name="X")
    H = te.compute((8,), lambda i: X[i].astype("float16"), name="H")
    x = np.array([1 + 2**-11 + 2**-40, -65519.9, 1e-8, 0.1, 3.0, -2.5, 1e5, np.nan])   # a double rounding would go wrong on the first
    got, ref = _run_te(H, [X], {X: x})
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, x.astype("float16"))          # 1e5 overflows to inf
    F = te.placeholder((6,), name="F")
    I = te.compute((6,), lambda i: F[i].astype("int32"), name="I")
    f = np.array([2.7, -2.7, -0.5, np.nan, 1e3, -1e3], "float32")
    got, ref = _run_te(I, [F], {F: f})
    np.testing.assert_array_equal(got, [2, -2, 0, 0, 1000, -1000])
    np.testing.assert_array_equal(got, ref)


def test_math_calls_and_float_min_max_follow_the_reference(rng):
    X = te.placeholder((16,), name="X")
    C = te.compute((16,), lambda i: te.max(te.exp(X[i]), te.sigmoid(X[i])) + te.min(te.erf(X[i]), te.tanh(X[i])),
                   name="C")
    x = rng.uniform(-3, 3, 16).astype("float32")
    for vec in (None, lambda s: s[C].vectorize(C.op.axis[0])):
        got, ref = _run_te(C, [X], {X: x}, vec)
        np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_a_guarded_load_in_a_vectorized_loop_reads_only_selected_lanes():
    """A lazy select with a per-lane condition: lanes whose index is out of bounds are never
    read; an eager select over the same lanes reads them (an error)."""
    A = Buffer("A", (Const(6, "int32"),), "float32")
    C = Buffer("C", (Const(8, "int32"),), "float32")
    lanes = Ramp(Const(0, "int32"), Const(1, "int32"), 8)
    cond = lanes < Broadcast(Const(6, "int32"), 8)
    load = BufferLoad(A, (lanes,), "float32x8")
    fill = Broadcast(Const(-1.0, "float32"), 8)
    a = np.arange(6, dtype="float32")
    lazy = PrimFunc("f", (A, C), BufferStore(C, Select(cond, load, fill, True), (lanes,)))
    c = poison(8, "float32")
    run(lazy, [a, c])
    np.testing.assert_array_equal(c, [0, 1, 2, 3, 4, 5, -1, -1])
    eager = PrimFunc("f", (A, C), BufferStore(C, Select(cond, load, fill, False), (lanes,)))
    with pytest.raises(LoweredInterpError, match=r"out-of-bounds load A\[6\] \(size 6\)"):
        run(eager, [a, poison(8, "float32")])


def test_a_vector_access_with_a_scalar_index_covers_the_lanes_from_there():
    A = Buffer("A", (Const(8, "int32"),), "float32")
    C = Buffer("C", (Const(8, "int32"),), "float32")
    i = Var("i")
    body = For(i, Const(0, "int32"), Const(2, "int32"), ForKind.SERIAL,
               BufferStore(C, BufferLoad(A, (i * 4,), "float32x4"), (i * 4,)))
    a, c = np.arange(8, dtype="float32"), poison(8, "float32")
    run(PrimFunc("f", (A, C), body), [a, c])
    np.testing.assert_array_equal(c, a)


def test_allocations_are_poisoned_and_lets_shadow():
    C = Buffer("C", (Const(2, "int32"),), "float32")
    T = Buffer("T", (Const(2, "int32"),), "float32")
    x = Var("x")
    zero, one = Const(0, "int32"), Const(1, "int32")
    body = Allocate(T, SeqStmt((
        BufferStore(T, Const(1.0, "float32"), (zero,)),
        BufferStore(C, BufferLoad(T, (one,), "float32"), (zero,)),                 # never written
        LetStmt(x, Const(3, "int32"), BufferStore(
            C, Cast("float32", Let(x, x + 4, x * 10) + x), (one,))),              # (3 + 4) * 10 + 3
    )))
    c = np.zeros(2, "float32")
    run(PrimFunc("f", (C,), body), [c])
    assert np.isnan(c[0]) and c[1] == 73


def test_a_nest_deeper_than_python_allows_in_one_function():
    """Python refuses more than 20 nested loops in one function: the interpreter splits the
    nest into functions."""
    C = Buffer("C", (Const(8, "int32"),), "int32")
    loops = [Var(f"i{k}") for k in range(30)]
    index = loops[0] * 4 + loops[1] * 2 + loops[2]
    for v in loops[3:]:
        index = index + v                                   # all zero
    body = BufferStore(C, index, (index,))
    for k, v in reversed(list(enumerate(loops))):
        body = For(v, Const(0, "int32"), Const(2 if k < 3 else 1, "int32"), ForKind.SERIAL, body)
    f = PrimFunc("f", (C,), body)
    c = poison(8, "int32")
    assert run(f, [c]) == 2 + 4 + 8 * 28
    np.testing.assert_array_equal(c, np.arange(8))
    assert "def _part" in python_source(f)


def test_symbolic_shapes_and_scalar_arguments(rand):
    n, alpha = te.var("n"), te.var("alpha", "float32")
    A = te.placeholder((n, 3), name="A")
    B = te.compute((n, 3), lambda i, j: A[i, j] * alpha, name="B")
    s = te.create_schedule(B.op)
    f = tc.lower(s, [A, B, alpha])
    a, b = rand((5, 3)), poison((5, 3), "float32")
    assert run(f, [a, b], {alpha: 1.5}) == 5 + 5 * 3          # loop iterations
    np.testing.assert_array_equal(b, a * np.float32(1.5))


# ------------------------------------------------------------------------------------------------
# errors

def _vadd():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    return tc.lower(te.create_schedule(B.op), [A, B])


def test_error_wrong_number_of_arrays():
    with pytest.raises(LoweredInterpError, match=r"function 'main' takes 2 arrays \(A, B\), got 1"):
        run(_vadd(), [np.zeros(4, "float32")])


def test_error_wrong_dtype_size_and_layout():
    f = _vadd()
    with pytest.raises(LoweredInterpError, match="'A' is float32, got an array of float64"):
        run(f, [np.zeros(4), np.zeros(4, "float32")])
    with pytest.raises(LoweredInterpError, match="'B' has 4 elements by its shape, got an array of 5"):
        run(f, [np.zeros(4, "float32"), np.zeros(5, "float32")])
    with pytest.raises(LoweredInterpError, match="'A': the array must be C-contiguous"):
        run(f, [np.zeros(8, "float32")[::2], np.zeros(4, "float32")])


def test_error_missing_scalar():
    n = te.var("n")
    A = te.placeholder((n + 1,), name="A")
    B = te.compute((n + 1,), lambda i: A[i] + 1.0, name="B")
    f = tc.lower(te.create_schedule(B.op), [A, B])
    with pytest.raises(LoweredInterpError, match=r"no value for the scalar parameter 'n' of 'main' \(pass it in scalars=\)"):
        run(f, [np.zeros(4, "float32"), np.zeros(4, "float32")])
    b = np.zeros(4, "float32")
    run(f, [np.zeros(4, "float32"), b], {"n": 3})
    assert (b == 1).all()


def test_error_out_of_bounds_in_an_nd_access_names_the_dimension():
    A = Buffer("A", (Const(2, "int32"), Const(3, "int32")), "float32")
    i = Var("i")
    body = For(i, Const(0, "int32"), Const(4, "int32"), ForKind.SERIAL,
               BufferStore(A, Const(1.0, "float32"), (Const(0, "int32"), i)))
    with pytest.raises(LoweredInterpError, match=r"out-of-bounds store A\[0, 3\] \(shape \[2, 3\]\) in function 'f'\n"
                                                 r"  in `A\[0, i\] = 1.0`\n  with i=3"):
        run(PrimFunc("f", (A,), body), [np.zeros((2, 3), "float32")])


def test_error_integer_division_by_zero():
    A = te.placeholder((4,), "int32", name="A")
    B = te.compute((4,), lambda i: A[i] // A[3 - i], name="B")
    f = tc.lower(te.create_schedule(B.op), [A, B])
    with pytest.raises(LoweredInterpError, match=r"integer division by zero in function 'main'\n  in `B\[i\] = "):
        run(f, [np.array([1, 2, 0, 4], "int32"), np.zeros(4, "int32")])


def test_error_budget():
    with pytest.raises(BudgetExceeded, match=r"the loop nest runs more than 3 iterations \(the budget\)"):
        run(_vadd(), [np.zeros(4, "float32"), np.zeros(4, "float32")], budget=3)


def test_error_gpu_loops_and_unknown_intrinsics_are_refused():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(LoweredInterpError, match=r"the loop 'i' is bound to threadIdx.x: this interpreter runs CPU IR"):
        run(tc.lower(s, [A, B]), [np.zeros(64, "float32")] * 2)
    from tilecraft.ir.expr import Call
    C = Buffer("C", (Const(1, "int32"),), "float32")
    f = PrimFunc("f", (C,), BufferStore(C, Call("frobnicate", (), "float32"), (Const(0, "int32"),)))
    with pytest.raises(LoweredInterpError, match="the interpreter does not know the intrinsic 'frobnicate'"):
        run(f, [np.zeros(1, "float32")])


def test_error_malformed_ir_is_named():
    """IR no pass should make: each is refused with what is wrong, before anything runs."""
    from tilecraft.ir.stmt import IfThenElse
    C = Buffer("C", (Const(4, "int32"),), "float32")
    T = Buffer("T", (Const(4, "int32"),), "float32")
    M = Buffer("M", (Const(2, "int32"), Const(2, "int32")), "float32")
    zero, one = Const(0, "int32"), Const(1.0, "float32")
    lanes = Ramp(zero, Const(1, "int32"), 4)
    cases = {
        "an if with the vector condition": IfThenElse(lanes < Broadcast(Const(2, "int32"), 4),
                                                      BufferStore(C, one, (zero,))),
        "buffer 'T' is neither a parameter nor allocated where it is used": BufferStore(C, BufferLoad(T, (zero,), "float32"), (zero,)),
        "'M' has 2 dimensions but is accessed with 3 indices": BufferStore(M, one, (zero, zero, zero)),
        "a vector index into the 2-d buffer 'M'": BufferStore(M, Broadcast(one, 4), (zero, lanes)),
        "the variable 'x' is used outside the loop or let that binds it": BufferStore(C, one, (Var("x"),)),
    }
    for msg, body in cases.items():
        with pytest.raises(LoweredInterpError, match=re.escape(msg)):
            run(PrimFunc("f", (C, M), body), [np.zeros(4, "float32"), np.zeros((2, 2), "float32")])
