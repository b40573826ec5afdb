"""The ``double_buffer_scope`` mark that ``double_buffer()`` leaves in the lowered IR changes
nothing on the CPU: the loop nest is the one without it, line for line, and the code computes
the same values."""
import re

import pytest

import tilecraft as tc
from tilecraft import te


def _schedule(double_buffer: bool, unroll_limit: int | None):
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((64,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    io, rest = s[C].split(C.op.axis[0], factor=16)
    im, ii = s[C].split(rest, factor=4)
    s[B].compute_at(s[C], im)
    if unroll_limit is not None:
        s[C].pragma(io, "auto_unroll_max_step", unroll_limit)
    if double_buffer:
        s[B].double_buffer()
    return s, [A, C]


@pytest.mark.parametrize("unroll_limit", [None, 16, 32])
def test_the_mark_changes_nothing_on_the_cpu(unroll_limit, check_llvm, rand):
    marked = str(tc.lower(*_schedule(True, unroll_limit), simple_mode=True))
    plain = str(tc.lower(*_schedule(False, unroll_limit), simple_mode=True))
    assert "# attr double_buffer_scope(B) = 1" in marked
    # was: with the mark, auto_unroll counted what is under it as one iteration and unrolled
    # the 4 x (4 + 4) loop nest of i.inner.outer under a limit of 16
    assert re.sub(r"\n *# attr double_buffer_scope\(B\) = 1", "", marked) == plain
    s, (A, C) = _schedule(True, unroll_limit)
    a = rand((64,))
    check_llvm(s, [A, C], {A: a}, {C: a * 2 + 1})
