"""Loop partitioning with guards that only matter where other conditions hold.

In ``if x < c and a*v + x < E`` the guard ``a*v + x < E`` is tested only where ``x < c``, so the
split point of ``v`` comes from ``x <= c - 1``, not from the last iteration of the ``x`` loop.
Before this was known, the double-buffered library matmul (``cuda_schedules.matmul(64, 64, 32,
block=(16, 16), vthreads=(2, 2), threads=(4, 4), k_tile=2, double_buffer=True)``) had its fetch
guard ``ty < 2 and k.outer*2 + ty < 32`` split with ``ty`` up to 3: the last of its 16 tiles was
peeled off for nothing (a second copy of the loop body and of the shared tiles).

* a property test: random loops with a guard and a bound on the inner variable (in the same
  condition or an enclosing ``if``, either way round) run the same before and after
  ``partition_loops`` (the lowered-IR interpreter);
* the split point uses the bound (no partition when the guard always holds where tested);
* the matmul: one loop of 16 tiles, one copy of each shared tile; its CUDA C emulated and compiled.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilecraft
from tilecraft.interp_lowered import run
from tilecraft.ir import Allocate, Buffer, BufferStore, Const, For, ForKind, Var, post_order_visit
from tilecraft.ir.expr import BinOp, Binary, Cast
from tilecraft.ir.stmt import IfThenElse, PrimFunc
from tilecraft.schedule.passes.loop_partition import partition_loops

I32 = "int32"


def _c(v):
    return Const(v, I32)


def _nest(n, X, a, E, c, fact_op, flip, nested, inner=ForKind.UNROLLED):
    """``for v < n: for x < X: if FACT and a*v + x < E: B[v*X + x] = v*1000 + x + 1`` where FACT
    bounds x by c (``fact_op``; ``flip`` writes it ``c op' x``), in the same condition or in an
    ``if`` around (``nested``). The x loop is ``inner``: unrolled (not partitioned itself, like
    a loop bound to threadIdx on the GPU) or serial (partitioned first, on FACT)."""
    v, x = Var("v", I32), Var("x", I32)
    B = Buffer("B", (_c(n * X),), "float32")
    fact = Binary(fact_op, x, _c(c), "bool")
    if flip:
        swap = {BinOp.LT: BinOp.GT, BinOp.LE: BinOp.GE, BinOp.GT: BinOp.LT, BinOp.GE: BinOp.LE}
        fact = Binary(swap[fact_op], _c(c), x, "bool")
    guard = v * a + x < _c(E)
    store = BufferStore(B, Cast("float32", v * 1000 + x + 1), (v * X + x,))
    if nested:
        body = IfThenElse(fact, IfThenElse(guard, store))
    else:
        body = IfThenElse(Binary(BinOp.AND, fact, guard, "bool"), store)
    loop = For(v, _c(0), _c(n), ForKind.SERIAL, For(x, _c(0), _c(X), inner, body))
    return PrimFunc("f", (B,), loop), B


def _run(func, size):
    b = np.full(size, np.nan, "float32")
    run(func, [b])
    return b


@settings(max_examples=120, deadline=None)
@given(n=st.integers(1, 12), X=st.integers(1, 9), a=st.integers(1, 4), E=st.integers(-3, 40),
       c=st.integers(-2, 10), fact_op=st.sampled_from([BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE]),
       flip=st.booleans(), nested=st.booleans(), inner=st.sampled_from([ForKind.UNROLLED, ForKind.SERIAL]))
def test_partition_with_a_bound_on_the_inner_variable_keeps_the_meaning(n, X, a, E, c, fact_op, flip, nested, inner):
    func, B = _nest(n, X, a, E, c, fact_op, flip, nested, inner)
    want = _run(func, n * X)
    got = _run(func.with_body(partition_loops(func.body)), n * X)
    np.testing.assert_array_equal(got, want)


def _loops(stmt):
    out = []
    post_order_visit(stmt, lambda s: out.append(s) if isinstance(s, For) else None)
    return out


def test_guard_that_holds_wherever_it_is_tested_is_dropped_without_a_split():
    # x < 2 and v*2 + x < 32 with v < 16: always true where tested (2*15 + 1 = 31)
    for nested in (False, True):
        func, _ = _nest(16, 4, 2, 32, 2, BinOp.LT, False, nested)
        out = partition_loops(func.body)
        assert sorted(lp.loop_var.name for lp in _loops(out)) == ["v", "x"], out
        assert "< 32" not in str(out)                # the guard is gone


def test_split_point_uses_the_bound():
    # x <= 1 and v*2 + x < 31: holds for v <= 14 (x <= 1), not only for v <= 13 (x <= 3)
    func, _ = _nest(16, 4, 2, 31, 1, BinOp.LE, False, False)
    out = partition_loops(func.body)
    heads = [lp for lp in _loops(out) if lp.loop_var.name == "v"]
    assert [lp.extent.value for lp in heads] == [15, 1], out


# ---- the library matmul -------------------------------------------------------------------------

def _matmul():
    from tilecraft.topi import cuda_schedules as cs
    return cs.matmul(64, 64, 32, block=(16, 16), vthreads=(2, 2), threads=(4, 4), k_tile=2, double_buffer=True)


def test_double_buffered_matmul_has_no_peeled_tile():
    s, args = _matmul()
    func = tilecraft.lower(s, args)
    tiles = [lp for lp in _loops(func.body) if lp.loop_var.name == "k.outer"]
    assert [lp.extent.value for lp in tiles] == [16], func
    shared = []
    post_order_visit(func.body, lambda n: shared.append(n.buffer.name)
                     if isinstance(n, Allocate) and n.buffer.scope == "shared" else None)
    assert sorted(shared) == ["AT", "B.shared"], func


def test_a_partial_last_tile_is_still_peeled():
    # K = 31: the last tile holds one row of B, the guard fails there: 15 tiles + the peeled one
    from tilecraft.topi import cuda_schedules as cs
    s, args = cs.matmul(64, 64, 31, block=(16, 16), vthreads=(2, 2), threads=(4, 4), k_tile=2, double_buffer=True)
    func = tilecraft.lower(s, args)
    tiles = [lp for lp in _loops(func.body) if lp.loop_var.name == "k.outer"]
    assert [lp.extent.value for lp in tiles] == [15], func


@pytest.mark.cuda
def test_double_buffered_matmul_runs(rng):
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
    from tilecraft.codegen.cuda_emulate import emulate
    s, args = _matmul()
    func = tilecraft.lower(s, args, target="cuda")
    a = rng.standard_normal((64, 32)).astype("float32")
    b = rng.standard_normal((32, 64)).astype("float32")
    c = np.full((64, 64), np.nan, "float32")
    emulate(func, [a, b, c])
    np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-4, atol=1e-4)
    src = generate_cuda(func)
    assert src.count("__shared__ __align__") == 2  # one double-buffered copy of each tile
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and emulated but not compiled")
    compile_cuda(src, "sm_90")

