"""Bounds-checked builds: ``PassContext(config={"tir.instrument_bound_checkers": True})``.

An access outside its buffer makes the compiled function fail with ``KernelIndexError`` (buffer,
index, extent, function) before memory outside the buffer is touched; accesses that are guarded
(``if_then_else``, masked vector lanes) and in-bounds code pass; without the option the code has
no checks. Every differential test (``check_llvm`` in ``tests/conftest.py``) also builds this way.
"""
import os
import re
import sys

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.codegen.llvm import build_llvm
from tilecraft.ir import ForKind, Var
from tilecraft.runtime import load_module
from tilecraft.runtime.status import STATUS_OUT_OF_BOUNDS, KernelIndexError
from tilecraft.transform import PassContext, PassContextError

sys.path.insert(0, os.path.dirname(__file__))
from llvm_ir_helpers import buf, func, ld, loop, st  # noqa: E402

CHECKED = {"tir.instrument_bound_checkers": True}


def _oob(index, name, extent, function, what="a load", shape=None):
    shape = shape or f"{extent},"
    return re.escape(f"index {index} out of bounds for buffer '{name}' of extent {extent} in function "
                     f"'{function}' ({what}; {name} has shape ({shape}))")


def _checked_build(s, args, name):
    with PassContext(config=CHECKED):
        return tc.build(s, args, target="llvm", name=name)


def _shift(n=None):
    n = n if n is not None else te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i + 1], name="B")
    return A, B, te.create_schedule(B.op)


def test_symbolic_shift_reads_past_the_end(rand):
    A, B, s = _shift()
    f = _checked_build(s, [A, B], "shift")
    with pytest.raises(KernelIndexError, match=_oob(8, "A", 8, "shift", shape="n,")) as err:
        f(rand(8), np.zeros(8, "float32"))
    assert err.value.status == STATUS_OUT_OF_BOUNDS and err.value.function == "shift"
    assert isinstance(err.value, IndexError)


@pytest.mark.parametrize("schedule", ["vectorized", "parallel_vectorized", "unrolled"])
def test_vector_and_parallel_accesses(rand, schedule):
    A, B, s = _shift()
    o, i = s[B].split(B.op.axis[0], factor=8)
    if "parallel" in schedule:
        s[B].parallel(o)
    if "vectorized" in schedule:
        s[B].vectorize(i)
    else:
        s[B].unroll(i)
    f = _checked_build(s, [A, B], "shift")
    for n in (16, 13, 1):
        with pytest.raises(KernelIndexError, match=_oob(n, "A", n, "shift", shape="n,")):
            f(rand(n), np.zeros(n, "float32"))


@pytest.mark.parametrize("vectorized", [False, True])
def test_gather_with_a_bad_index_names_it(rand, vectorized):
    A = te.placeholder((10,), name="A")
    idx = te.placeholder((16,), dtype="int32", name="idx")
    G = te.compute((16,), lambda i: A[idx[i]] * 2.0, name="G")
    s = te.create_schedule(G.op)
    if vectorized:
        s[G].vectorize(s[G].split(G.op.axis[0], factor=8)[1])
    f = _checked_build(s, [A, idx, G], "gather")
    a, g = rand(10), np.zeros(16, "float32")
    ix = np.arange(16, dtype="int32") % 10
    f(a, ix, g)
    np.testing.assert_array_equal(g, a[ix] * 2)
    for bad in (10, -1, 1 << 20):
        ix[11] = bad
        with pytest.raises(KernelIndexError, match=_oob(bad, "A", 10, "gather")):
            f(a, ix, g)


@pytest.mark.parametrize("vectorized", [False, True])
def test_guarded_out_of_bounds_lanes_are_not_reported(rand, vectorized):
    """if_then_else evaluates only the chosen side: masked lanes and untaken branches pass."""
    A = te.placeholder((10,), name="A")
    idx = te.placeholder((16,), dtype="int32", name="idx")
    G = te.compute((16,), lambda i: te.if_then_else(te.all(idx[i] >= 0, idx[i] < 10), A[idx[i]], -1.0), name="G")
    n = te.var("n")
    P = te.placeholder((n,), name="P")
    Q = te.compute((n + 4,), lambda i: te.if_then_else(te.all(i >= 2, i < n + 2), P[i - 2], 0.0), name="Q")
    s = te.create_schedule([G.op, Q.op])
    if vectorized:
        s[G].vectorize(s[G].split(G.op.axis[0], factor=8)[1])
        s[Q].vectorize(s[Q].split(Q.op.axis[0], factor=4)[1])
    f = _checked_build(s, [A, idx, P, G, Q], "guarded")
    a, p = rand(10), rand(9)
    ix = np.array([3, 10, -1, 9, 100, 0, -7, 5] * 2, "int32")
    g, q = np.zeros(16, "float32"), np.zeros(13, "float32")
    f(a, ix, p, g, q)
    np.testing.assert_array_equal(g, np.where((ix >= 0) & (ix < 10), a[np.clip(ix, 0, 9)], -1))
    np.testing.assert_array_equal(q, np.pad(p, 2))


def test_out_of_bounds_store_in_a_parallel_loop():
    """A hand-built loop that writes one element past its buffer: the store is refused."""
    n = Var("n")
    A, C = buf("A", (n,)), buf("C", (n,))
    i = Var("i")
    body = loop(i, n + 1, st(C, i, ld(A, 0) * 2.0), ForKind.PARALLEL)
    with PassContext(config=CHECKED):
        f = build_llvm(func("spill", (A, C, n), body))
    c = np.zeros(6, "float32")
    with pytest.raises(KernelIndexError, match=_oob(6, "C", 6, "spill", what="a store", shape="n,")):
        f(np.ones(6, "float32"), c)


@pytest.mark.parametrize("slack", [0, 1])
def test_masked_vector_load_checks_only_selected_lanes(rand, slack):
    """C[8i : 8i+8] = lanes < n + slack ? A[lanes] : 0 (a masked contiguous load): with slack 0
    the lanes past n are masked off and pass; with slack 1 lane n is selected and reported."""
    from tilecraft.ir import Broadcast, Ramp, Select, const
    from llvm_ir_helpers import poisoned
    n = Var("n")
    A, C = buf("A", (n,)), buf("C", ((n + 7) // 8 * 8,))
    i = Var("i")
    idx = Ramp(i * 8, const(1), 8)
    value = Select(idx < Broadcast(n + slack, 8), ld(A, idx), Broadcast(const(0.0), 8), True)
    with PassContext(config=CHECKED):
        mod = build_llvm(func("pad", (A, C, n), loop(i, (n + 7) // 8, st(C, idx, value))))
    assert "masked.load" in mod.get_source("ll-raw")
    a, c = rand(13), poisoned(16)
    if slack:
        with pytest.raises(KernelIndexError, match=_oob(13, "A", 13, "pad", shape="n,")):
            mod(a, c)
    else:
        mod(a, c)
        np.testing.assert_array_equal(c, np.concatenate([a, np.zeros(3, "float32")]))


def test_untaken_lazy_branches_are_not_checked(rand):
    """A scalar load under a vector lazy select runs only when some lane selects it, and the
    untaken side of a scalar lazy select (a billion elements away) never runs."""
    from tilecraft.ir import Binary, BinOp, Broadcast, Ramp, Select, cast, const
    from llvm_ir_helpers import poisoned
    n = Var("n")
    A, C, B = buf("A", (n,)), buf("C", (64,)), buf("B", (n,))
    i = Var("i")
    lanes = Ramp(i * 8, const(1), 8)
    far = i + Binary(BinOp.MUL, cast("int32", i >= n), const(1000000000), "int32")
    value = Select(lanes < Broadcast(n, 8), Broadcast(ld(A, far), 8), Broadcast(const(-1.0), 8), True)
    shift = Select(i + 1 < n, ld(A, i + 1), Select(i < 0, ld(A, i + 1000000000), const(-1.0), True), True)
    with PassContext(config=CHECKED):
        mod = build_llvm(func("sl", (A, C, B, n), tc.ir.seq(loop(i, 8, st(C, lanes, value)),
                                                             loop(i, n, st(B, i, shift)))))
    a, c, b = rand(20), poisoned(64), poisoned(20)
    mod(a, c, b)
    np.testing.assert_array_equal(c, np.array([a[k // 8] if k < 20 else -1.0 for k in range(64)], "float32"))
    np.testing.assert_array_equal(b, np.append(a[1:], -1.0).astype("float32"))


def test_local_buffer_access_is_checked():
    """An allocated buffer is checked against its size (a compute_at stage's region)."""
    from tilecraft.ir import Allocate, seq, const
    n = Var("n")
    A, C = buf("A", (n,)), buf("C", (n,))
    T = buf("T", (4,), scope="local")
    i, j = Var("i"), Var("j")
    body = loop(i, n, Allocate(T, seq(loop(j, 4, st(T, j, ld(A, i))), st(C, i, ld(T, i)))))
    with PassContext(config=CHECKED):
        f = build_llvm(func("tmp", (A, C, n), body))
    f(np.ones(4, "float32"), np.zeros(4, "float32"))
    with pytest.raises(KernelIndexError, match=_oob(4, "T", 4, "tmp")):
        f(np.ones(5, "float32"), np.zeros(5, "float32"))


def test_exported_library_reports_the_error(tmp_path, rand):
    A, B, s = _shift()
    path = _checked_build(s, [A, B], "shift").export_library(str(tmp_path / "shift.so"))
    g = load_module(path)
    with pytest.raises(KernelIndexError, match=_oob(5, "A", 5, "shift", shape="n,")):
        g["shift"](rand(5), np.zeros(5, "float32"))


def test_without_the_option_there_are_no_checks():
    A, B, s = _shift()
    plain = tc.build(s, [A, B], target="llvm", name="shift")
    checked = _checked_build(s, [A, B], "shift")
    assert "out of bounds" not in plain.get_source() and "out of bounds" in checked.get_source()


# ----------------------------------------------------------------------------------------------
# PassContext

def test_pass_context_nests_and_defaults():
    assert PassContext.current().get("tir.instrument_bound_checkers") is False
    with PassContext(opt_level=3, config=CHECKED) as outer:
        assert PassContext.current() is outer and outer.opt_level == 3
        with PassContext() as inner:
            assert PassContext.current() is inner and not inner.get("tir.instrument_bound_checkers")
        assert PassContext.current() is outer
    assert PassContext.current().get("tir.instrument_bound_checkers") is False
    assert tc.transform.PassContext is PassContext


def test_pass_context_errors():
    with pytest.raises(PassContextError, match=r"unknown config option 'tir.instrument_bound_checker'; "
                                               r"known options: cuda.allow_tf32, te.keep_schedule_record, "
                                               r"tir.UnrollLoop, tir.instrument_bound_checkers"):
        PassContext(config={"tir.instrument_bound_checker": True})
    with pytest.raises(PassContextError, match=r"config option 'tir.instrument_bound_checkers' takes a "
                                               r"bool, got 1"):
        PassContext(config={"tir.instrument_bound_checkers": 1})
    with pytest.raises(PassContextError, match=r"opt_level must be an integer from 0 to 4, got 7"):
        PassContext(opt_level=7)
    with pytest.raises(PassContextError, match=r"unknown config option 'x'"):
        PassContext().get("x")
    with pytest.raises(PassContextError, match=r"tir.UnrollLoop takes auto_max_step \(int\), explicit_unroll "
                                               r"\(bool\), max_depth \(int\), unroll_local_access \(bool\); "
                                               r"got 'auto_max_steps': 16"):
        PassContext(config={"tir.UnrollLoop": {"auto_max_steps": 16}})
