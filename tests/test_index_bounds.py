"""Out-of-bounds indices: the static check in ``lower`` (``schedule/check_indices.py``) and the
reference interpreter's error.

The static check refuses a read that is provably outside a constant extent at some point of
the stage's domain where the read is evaluated, and nothing else: guarded reads (padding) pass,
and index forms it cannot compute exactly are left to the bounds-checked build.
"""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilecraft as tc
from tilecraft import te
from tilecraft.interp import InterpError, evaluate
from tilecraft.schedule.check_indices import IndexBoundsError, check_indices


def _lower(*outs, args=None):
    s = te.create_schedule([o.op for o in outs])
    return tc.lower(s, args)


def test_issue_repro_refused_naming_tensor_index_and_range():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i + 100], name="B")
    with pytest.raises(IndexBoundsError, match=r"compute 'B' reads A\[i \+ 100\] out of bounds: index 0 "
                                               r"\(`i \+ 100`\) takes the values 100..107 \(i in 0..7\), "
                                               r"but dimension 0 of 'A' has extent 8"):
        _lower(B, args=[A, B])


@pytest.mark.parametrize("body, values", [
    (lambda A, i, j: A[i, j + 1], r"takes the values 1..8"),
    (lambda A, i, j: A[i, j - 1], r"takes the values -1..6"),
    (lambda A, i, j: A[i, 7 - j * 2], r"takes the values -7..7"),
    (lambda A, i, j: A[i, te.max(j, 3) + 1], r"takes the values 4..8"),
    (lambda A, i, j: A[i, (j + 9) // 2], r"takes the values 4..8"),
])
def test_off_by_one_in_a_constant_dimension_of_a_symbolic_tensor(body, values):
    n = te.var("n")
    A = te.placeholder((n, 8), name="A")
    B = te.compute((n, 8), lambda i, j: body(A, i, j), name="B")
    with pytest.raises(IndexBoundsError, match=values + r" \(j in 0..7\), but dimension 1 of 'A' has extent 8"):
        _lower(B, args=[A, B])


def test_reduction_axis_out_of_bounds_and_its_where_guard():
    A = te.placeholder((9,), name="A")
    k = te.reduce_axis((0, 3), name="k")
    B = te.compute((8,), lambda i: te.sum(A[i + k], axis=k), name="B")
    with pytest.raises(IndexBoundsError, match=r"takes the values 0..9 \(i in 0..7, k in 0..2\)"):
        _lower(B, args=[A, B])
    k2 = te.reduce_axis((0, 10), name="k2")
    C = te.compute((1,), lambda _: te.sum(A[k2], axis=k2, where=k2 < 9), name="C")
    _lower(C, args=[A, C])


def test_a_producer_that_is_inlined_is_checked_as_defined():
    A = te.placeholder((13,), name="A")
    P = te.compute((20,), lambda i: A[i] * 2.0, name="P")
    C = te.compute((13,), lambda i: P[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[P].compute_inline()
    with pytest.raises(IndexBoundsError, match=r"compute 'P' reads A\[i\] out of bounds"):
        tc.lower(s, [A, C])
    with pytest.raises(InterpError, match=r"out-of-bounds read A\[13\]"):
        evaluate(C, {A: np.ones(13, "float32")})     # the interpreter agrees


def test_select_evaluates_both_sides_so_it_is_no_guard():
    A = te.placeholder((8,), name="A")
    B = te.compute((10,), lambda i: te.select(i < 8, A[i], 0.0), name="B")
    with pytest.raises(IndexBoundsError, match=r"takes the values 0..9"):
        _lower(B, args=[A, B])


def test_wrong_guard_is_refused():
    A = te.placeholder((8,), name="A")
    B = te.compute((10,), lambda i: te.if_then_else(i < 9, A[i], 0.0), name="B")
    with pytest.raises(IndexBoundsError, match=r"takes the values 0..8 \(i in 0..8\)"):
        _lower(B, args=[A, B])


def test_guarded_and_padded_reads_pass_and_compute(check_llvm, rand):
    A = te.placeholder((6, 8), name="A")
    P = te.compute((8, 12), lambda h, w: te.if_then_else(te.all(h >= 1, h < 7, w >= 2, w < 10),
                                                         A[h - 1, w - 2], 0.0), name="P")
    Q = te.compute((10,), lambda i: te.if_then_else(i >= 8, -1.0, A[0, i]), name="Q")
    R = te.compute((10,), lambda i: te.if_then_else(te.all(i > 0, te.all(i <= 6, True)), A[i - 1, 0], 3.0), name="R")
    a = rand((6, 8))
    s = te.create_schedule([P.op, Q.op, R.op])
    check_llvm(s, [A, P, Q, R], {A: a}, {P: np.pad(a, ((1, 1), (2, 2))),
                                         Q: np.r_[a[0], -1.0, -1.0].astype("float32"),
                                         R: np.r_[3.0, a[:6, 0], 3.0, 3.0, 3.0].astype("float32")})


def test_in_bounds_forms_it_cannot_compute_exactly_pass(check_llvm, rand):
    """Interval arithmetic would over-approximate these (i - i//4*4 in -3..7 for i in 0..7); the
    check must not refuse what is in bounds."""
    A = te.placeholder((8,), name="A")
    idx = te.placeholder((5,), dtype="int32", name="idx")
    B = te.compute((8,), lambda i: A[i - i // 4 * 4] + A[(i * 3) % 8] + A[te.min(i, 7 - i) * 2], name="B")
    G = te.compute((5,), lambda i: A[idx[i]], name="G")
    a, ix = rand(8), np.array([7, 0, 3, 3, 5], "int32")
    want = a[np.arange(8) % 4] + a[(np.arange(8) * 3) % 8] + a[np.minimum(np.arange(8), 7 - np.arange(8)) * 2]
    check_llvm(te.create_schedule([B.op, G.op]), [A, idx, B, G], {A: a, idx: ix}, {B: want, G: a[ix]})


def test_library_operators_pass():
    from tilecraft.topi import conv2d
    from tilecraft.topi import cuda_schedules as cs
    for s, args in (cs.softmax(4, 100), cs.layer_norm(3, 70), cs.max_pool2d(1, 2, 9, 9),
                    cs.conv2d_nchw(1, 4, 9, 9, 8, 3, 3, 1)):
        check_indices(s)


# ----------------------------------------------------------------------------------------------
# property: refused only when some evaluated point is out of bounds; exactly then for exact forms

I, J, K = (te.var(n) for n in "ijk")


def _leaf(draw, used: set, allow_repeat: bool):
    choices = [v for v in (I, J, K) if allow_repeat or v not in used]
    if choices and draw(st.booleans()):
        v = draw(st.sampled_from(choices))
        used.add(v)
        return v
    return te.const(draw(st.integers(-6, 6)), "int32")


def _expr(draw, depth: int, used: set, allow_repeat: bool):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return _leaf(draw, used, allow_repeat)
    op = draw(st.sampled_from(["+", "-", "*c", "//c", "min", "max", "%c" if allow_repeat else "+"]))
    a = _expr(draw, depth - 1, used, allow_repeat)
    if op in ("*c", "//c", "%c"):
        c = draw(st.sampled_from([1, 2, 3, -2] if op == "*c" else [1, 2, 3, 4]))
        return {"*c": a * c, "//c": a // c, "%c": a % c}[op]
    b = _expr(draw, depth - 1, used, allow_repeat)
    return {"+": a + b, "-": a - b, "min": te.min(a, b), "max": te.max(a, b)}[op]


@st.composite
def index_cases(draw):
    allow_repeat = draw(st.booleans())
    e = _expr(draw, 3, set(), allow_repeat)
    exts = [draw(st.integers(1, 5)) for _ in range(3)]
    n = draw(st.integers(1, 12))
    return e, exts, n, allow_repeat


@settings(max_examples=300, deadline=None)
@given(index_cases())
def test_refused_exactly_when_some_point_is_out_of_bounds(case):
    e, exts, n, allow_repeat = case
    A = te.placeholder((n,), name="A")
    from tilecraft.ir.functor import substitute
    B = te.compute(tuple(exts), lambda i, j, k: A[substitute(e, {I: i, J: j, K: k})], name="B")
    values = [int(_py(e, dict(zip((I, J, K), p)))) for p in itertools.product(*(range(x) for x in exts))]
    oob = any(v < 0 or v >= n for v in values)
    try:
        check_indices(te.create_schedule(B.op))
        refused = False
    except IndexBoundsError:
        refused = True
    assert not refused or oob, f"refused although {e} stays in [0, {n}) ({exts})"
    if not allow_repeat:
        assert refused == oob, f"{e} over {exts} on extent {n}: refused={refused}, out of bounds={oob}"


def _py(e, env):
    """Evaluate an int expression of the ops above (floor division and modulo)."""
    from tilecraft.ir.expr import Binary, BinOp, Const, Var
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e]
    a, b = _py(e.a, env), _py(e.b, env)
    ops = {BinOp.ADD: lambda: a + b, BinOp.SUB: lambda: a - b, BinOp.MUL: lambda: a * b,
           BinOp.FLOORDIV: lambda: a // b, BinOp.FLOORMOD: lambda: a % b,
           BinOp.MIN: lambda: min(a, b), BinOp.MAX: lambda: max(a, b)}
    return ops[e.op]()
