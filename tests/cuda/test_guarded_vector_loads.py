"""Vector loads guarded by ``te.if_then_else`` in the CUDA C.

The renderer loads the aligned vectors of a vector store widely, into small arrays, before the
statement (``cuda_cstyle.hoisted_loads``). A load inside a branch of a lazy select may be out of
bounds where the branch is not taken (the IR evaluates only the branch its condition picks), so
the C must load it only under that condition. Before the fix it was loaded unconditionally: the
last row of ``if_then_else(i + 1 < n, A[i + 1, j], 0)`` vectorized by 4 read past the end of A.

* the structure of the C: the guarded load sits under ``if (cond)``, the unguarded ones do not
  (the hoisting stays where it is safe: it is there for performance);
* ``hoisted_loads`` on hand-written IR: both branches, nested selects, a load used under two
  guards or under a condition that differs between lanes;
* the emulator checks the renderer's list: a load hoisted without its guard is reported;
* the cases emulated and compiled (no GPU needed), and run on a GPU by ``pytest -m cuda``; the
  ``far`` case puts the unguarded address a gigabyte away, so that the old C faults on a GPU.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.codegen import cuda_cstyle
from tilecraft.codegen import cuda_emulate
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_emulate import EmulationError, emulate
from tilecraft.ir.expr import Binary, BinOp, Broadcast, BufferLoad, Const, Ramp, Select, Var
from tilecraft.ir.stmt import Buffer

from .cuda_cases import Case, check_emulated, check_on_gpu

pytestmark = pytest.mark.cuda


def next_row(n, m, lanes=4, threads=None):
    """``B[i, j] = (A[i + 1, j] if i + 1 < n else 0) + A[i, j]``: a block per row, j split by
    ``lanes`` and vectorized, the vectors over threadIdx.x."""
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: te.if_then_else(i + 1 < n, A[i + 1, j], 0.0) + A[i, j], name="B")
    s = te.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=lanes)
    if threads:
        jb, jo = s[B].split(jo, factor=threads)
        s[B].bind(jb, te.thread_axis("blockIdx.y"))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(jo, te.thread_axis("threadIdx.x"))
    s[B].vectorize(ji)
    return s, [A, B]


def previous_row_or_below(n, m):
    """Both branches guard a load: ``A[i - 1, j]`` where ``i > 0``, else ``A[i + 1, j]`` (n > 1)."""
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: te.if_then_else(i > 0, A[i - 1, j], A[i + 1, j]) * 2.0, name="B")
    s = te.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=4)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(jo, te.thread_axis("threadIdx.x"))
    s[B].vectorize(ji)
    return s, [A, B]


FAR = 1 << 28            # a gigabyte of float32 between the rows the guard forbids


def far(rows, m):
    """``B[i, j] = A[i * 2**28 + j]`` where ``i < 1``, else 1: unguarded, the C reads up to
    ``rows`` gigabytes past A (an illegal address on a GPU, not a silently ignored value)."""
    A = te.placeholder((m,), name="A")
    B = te.compute((rows, m), lambda i, j: te.if_then_else(i < 1, A[i * FAR + j], 1.0), name="B")
    s = te.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=4)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(jo, te.thread_axis("threadIdx.x"))
    s[B].vectorize(ji)
    return s, [A, B]


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def _next_row_ref(ins, **k):
    a = ins[0].astype("float64")
    below = np.zeros_like(a)
    below[:-1] = a[1:]
    return [below + a]


def _prev_or_below_ref(ins, **k):
    a = ins[0].astype("float64")
    out = np.empty_like(a)
    out[1:] = a[:-1]
    out[0] = a[1]
    return [out * 2]


def _far_ref(ins, rows, **k):
    out = np.ones((rows, ins[0].shape[0]))
    out[0] = ins[0]
    return [out]


CASES = [
    Case("next_row", lambda n, m, **k: next_row(n, m, **k),
         lambda rng, n, m, **k: [_f32(rng, n, m)], _next_row_ref,
         lambda n, m, **k: [((n, m), "float32")],
         emu=dict(n=6, m=64), gpu=dict(n=1000, m=1024, threads=128)),
    Case("next_row_float2", lambda n, m, **k: next_row(n, m, **k),
         lambda rng, n, m, **k: [_f32(rng, n, m)], _next_row_ref,
         lambda n, m, **k: [((n, m), "float32")],
         emu=dict(n=5, m=18, lanes=2), gpu=dict(n=999, m=2002, lanes=2)),
    Case("previous_row_or_below", lambda n, m, **k: previous_row_or_below(n, m),
         lambda rng, n, m, **k: [_f32(rng, n, m)], _prev_or_below_ref,
         lambda n, m, **k: [((n, m), "float32")],
         emu=dict(n=5, m=32), gpu=dict(n=777, m=512)),
    Case("far", lambda rows, m, **k: far(rows, m),
         lambda rng, rows, m, **k: [_f32(rng, m)], _far_ref,
         lambda rows, m, **k: [((rows, m), "float32")],
         emu=dict(rows=3, m=32), gpu=dict(rows=7, m=256)),
]
CASE_IDS = [c.name for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_emulated(case, rng):
    check_emulated(case, rng)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gpu(case, rng):
    check_on_gpu(case, rng)


# ---- the C ---------------------------------------------------------------------------------

def _wide_loads(src):
    """(guard or '', buffer) of every wide load in the C."""
    return re.findall(r"^\s*(?:if \((.*)\) \{ )?\*\(uint[24]?\*\)ld\d+ = \*\(const uint[24]?\*\)\((\w+) \+", src,
                      re.M)


def test_guarded_load_is_loaded_under_its_condition():
    src = generate_cuda(tilecraft.lower(*next_row(6, 64), target="cuda"))
    loads = _wide_loads(src)
    # A[i + 1, j] under `i + 1 < 6`; A[i, j] still wide and unconditional
    assert sorted(loads) == [("", "A"), ("((((int)blockIdx.x) + 1) < 6)", "A")], src
    assert "*(uint4*)(B + " in src                       # the store stays 16 bytes wide


def test_both_branches_are_guarded_by_their_side():
    src = generate_cuda(tilecraft.lower(*previous_row_or_below(5, 32), target="cuda"))
    guards = sorted(g for g, _ in _wide_loads(src))
    assert guards == ["!(((int)blockIdx.x) > 0)", "(((int)blockIdx.x) > 0)"], src


def test_unguarded_vector_code_is_unchanged():
    # no lazy select: every load is hoisted and wide, no guard (the library's schedules)
    from tilecraft.topi import cuda_schedules as cs
    src = generate_cuda(tilecraft.lower(*cs.softmax(4, 1024, threads=128), target="cuda"))
    loads = _wide_loads(src)
    assert loads and all(g == "" for g, _ in loads)


# ---- hoisted_loads on hand-written IR -----------------------------------------------------------

I32 = "int32"


def _ramp(base):
    return Ramp(base, Const(1, I32), 4)


def _vload(buf, base):
    return BufferLoad(buf, (_ramp(base),), "float32x4")


def test_hoisted_loads_guards():
    A = Buffer("A", (Const(64, I32),), "float32")
    t = Var("t", I32)
    inside, outside, both = _vload(A, t * 4), _vload(A, t * 4 + 8), _vload(A, t * 4 + 16)
    c1, c2 = t < 3, t > 0
    zero = Broadcast(Const(0.0, "float32"), 4)
    inner = Select(c2, inside, both, True)
    value = Select(c1, inner, both, True) + outside
    plan = {id(load): guard for load, _, guard in cuda_cstyle.hoisted_loads(value, 4)}
    outer_sel = value.a
    assert plan[id(outside)] == ()
    assert [(sel is s, taken) for (sel, taken), s in zip(plan[id(inside)], (outer_sel, inner))] == \
        [(True, True), (True, True)]
    # `both` sits under (c1, c2 false) and under (c1 false): different guards, not hoisted
    assert id(both) not in plan
    # a load also used unguarded is hoisted unguarded
    plan = {id(x): g for x, _, g in cuda_cstyle.hoisted_loads(Select(c1, outside, zero, True) + outside, 4)}
    assert plan == {id(outside): ()}
    # a non-lazy select (te.select) may evaluate both sides: hoisted unguarded
    plan = {id(x): g for x, _, g in cuda_cstyle.hoisted_loads(Select(c1, outside, zero, False), 4)}
    assert plan == {id(outside): ()}
    # a condition that differs between lanes: each lane loads under its own ?:
    lanes_c = Binary(BinOp.LT, _ramp(t * 4), Broadcast(Const(60, I32), 4), "boolx4")
    assert cuda_cstyle.hoisted_loads(Select(lanes_c, outside, zero, True), 4) == []


# ---- the emulator checks the renderer's list -------------------------------------------------

def test_emulator_reports_a_guarded_load_hoisted_without_its_guard(monkeypatch, rng):
    real = cuda_cstyle.hoisted_loads

    def unguarded(value, lanes, access=cuda_cstyle.wide_access_bytes):
        # the renderer before the fix: every wide load, whatever select it sits in
        out = []
        for load, wide, guard in real(value, lanes, access):
            out.append((load, wide, ()))
        return out
    monkeypatch.setattr(cuda_emulate, "hoisted_loads", unguarded)
    s, args = next_row(6, 64)
    func = tilecraft.lower(s, args, target="cuda")
    a, b = _f32(rng, 6, 64), np.full((6, 64), np.nan, "float32")
    with pytest.raises(EmulationError, match=r"kernel main_kernel: out-of-bounds access A\[384\] \(size 384\) by "
                                             r"thread \(0, 0, 0\) of block \(5, 0, 0\): the CUDA C loads `A\[ramp\("
                                             r".*\)\]` ahead of the store to 'B', unconditionally"):
        emulate(func, [a, b])
