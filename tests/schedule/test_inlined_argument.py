"""An inlined stage passed as a ``lower``/``build`` argument, as TVM treats it: the argument is a
parameter buffer that nothing writes (its consumers compute its values in place), and the rest
of the function is unchanged."""
import numpy as np

import tilecraft as tc
from tilecraft import te
from tilecraft.testing import poison


def graph(n):
    A = te.placeholder((n, 3), name="A")
    B = te.compute((n, 3), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((n, 3), lambda i, j: B[i, j] * 2.0, name="C")
    return A, B, C


def test_inlined_argument_is_a_parameter_left_unwritten(rand):
    n = te.var("n")
    A, B, C = graph(n)
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    func = tc.lower(s, [A, B, C])
    assert [p.name for p in func.params] == ["A", "B", "C", "n"]
    assert "B[" not in str(func.body)                     # never read nor written
    f = tc.build(s, [A, B, C], target="llvm")
    a = rand((7, 3))
    for variant in (0, 1):
        b, c = poison((7, 3), "float32", variant), poison((7, 3), "float32", variant)
        b_before = b.copy()
        f(a, b, c)
        np.testing.assert_array_equal(b, b_before)
        np.testing.assert_allclose(c, (a + 1.0) * 2.0, rtol=1e-6)


def test_same_loop_nest_as_without_the_argument():
    A, B, C = graph(16)
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    with_b = tc.lower(s, [A, B, C], simple_mode=True)
    without = tc.lower(s, [A, C], simple_mode=True)
    assert str(with_b.body) == str(without.body)
