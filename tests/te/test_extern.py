"""``te.extern`` with packed Python functions (``tvm.register_func`` / ``tir.call_packed``) and
with ir_builder bodies, ported in spirit from TVM's ``test_te_build_lower``/extern tests: each
compiled result against numpy on NaN-poisoned outputs, and the TE interpreter against numpy."""
import itertools

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.interp import evaluate
from tilecraft.ir.packed import PackedFuncError
from tilecraft.runtime.status import KernelError
from tilecraft.schedule import ScheduleError
from tilecraft.te import TEError

_names = itertools.count()


def fresh(name):
    return f"test.{name}.{next(_names)}"


def raises(exc, pattern):
    return pytest.raises(exc, match=pattern)


def test_packed_function_between_compute_stages(rand):
    seen = []
    name = fresh("scale_add")

    @tc.register_func(name)
    def scale_add(x, y, k, flag):
        seen.append((x.shape, y.shape, type(k), flag))
        y.copyfrom(x.numpy() * k + flag)

    n = te.var("n")
    A = te.placeholder((n, 3), name="A")
    P = te.compute((n, 3), lambda i, j: A[i, j] + 1.0, name="P")
    E = te.extern((n, 3), [P], lambda ins, outs: tc.tir.call_packed(name, ins[0], outs[0], 2.5, True),
                  name="E")
    C = te.compute((n, 3), lambda i, j: E[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    s[C].parallel(xo)
    f = tc.build(s, [A, C], target="llvm")
    a = rand((7, 3))
    c = np.full((7, 3), np.nan, "float32")
    f(a, c)
    want = ((a + 1.0) * 2.5 + 1) * 2.0
    np.testing.assert_allclose(c, want, rtol=1e-6)
    assert seen == [((7, 3), (7, 3), float, 1)]
    np.testing.assert_allclose(evaluate(C, {A: a}), want, rtol=1e-6)


def test_extern_with_two_outputs_and_an_ir_builder_body(rand):
    def body(ins, outs):
        ib = tc.tir.ir_builder.create()
        a, s, d = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0]), ib.buffer_ptr(outs[1])
        with ib.for_range(0, 12, name="i") as i:
            s[i] = a[i] + a[i]
            d[i] = a[i] * a[i]
        return ib.get()
    A = te.placeholder((12,), name="A")
    S, D = te.extern([(12,), (12,)], [A], body, name="E")
    C = te.compute((12,), lambda i: S[i] - D[i], name="C")
    s = te.create_schedule(C.op)
    f = tc.build(s, [A, C, S], target="llvm")
    a = rand(12)
    c, s_out = np.full(12, np.nan, "float32"), np.full(12, np.nan, "float32")
    f(a, c, s_out)
    np.testing.assert_allclose(s_out, 2 * a, rtol=1e-6)
    np.testing.assert_allclose(c, 2 * a - a * a, rtol=1e-6)


def test_cblas_matmul(rand):
    from tilecraft.contrib import cblas
    A = te.placeholder((9, 5), name="A")
    B = te.placeholder((7, 5), name="B")
    C = cblas.matmul(A, B, transb=True)
    s = te.create_schedule(C.op)
    f = tc.build(s, [A, B, C], target="llvm")
    a, b = rand((9, 5)), rand((7, 5))
    c = np.full((9, 7), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-5)


def test_an_exception_in_the_packed_function_fails_the_call(rand):
    name = fresh("fails")
    tc.register_func(name, lambda x, y: 1 / 0)
    A = te.placeholder((4,), name="A")
    B = te.extern((4,), [A], lambda ins, outs: tc.tir.call_packed(name, ins[0], outs[0]), name="B")
    f = tc.build(te.create_schedule(B.op), [A, B], target="llvm")
    with raises(KernelError, rf"the packed function '{name}' raised an exception") as info:
        f(rand(4), np.zeros(4, "float32"))
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_unregistered_packed_function():
    A = te.placeholder((4,), name="A")
    B = te.extern((4,), [A], lambda ins, outs: tc.tir.call_packed("test.nobody", ins[0], outs[0]), name="B")
    f = tc.build(te.create_schedule(B.op), [A, B], target="llvm")
    with raises(KernelError, r"the packed function 'test.nobody' raised") as info:
        f(np.ones(4, "float32"), np.zeros(4, "float32"))
    assert "no packed function is registered as 'test.nobody'" in str(info.value.__cause__)


def test_register_twice():
    name = fresh("twice")
    tc.register_func(name, lambda: 0)
    with raises(PackedFuncError, rf"register_func: the packed function '{name}' is already registered; "
                                 r"pass override=True"):
        tc.register_func(name, lambda: 1)
    tc.register_func(name, lambda: 2, override=True)
    assert tc.get_global_func(name)() == 2
    assert tc.get_global_func("test.nobody", allow_missing=True) is None


def test_call_packed_argument_that_is_not_a_value():
    with raises(PackedFuncError, r"call_packed\('f'\): argument 0 must be a buffer, a number or a scalar "
                                 r"expression, got str 'x'"):
        tc.tir.call_packed("f", "x")


def test_extern_body_that_is_not_a_statement():
    A = te.placeholder((4,), name="A")
    with raises(TEError, r"extern 'B': fcompute\(ins, outs\) must return a statement \(ib.get\(\)\) or an "
                         r"expression such as tvm.tir.call_packed\(...\), got list"):
        te.extern((4,), [A], lambda ins, outs: [ins], name="B")


def test_extern_cannot_be_computed_at():
    A = te.placeholder((4,), name="A")
    B = te.extern((4,), [A], lambda ins, outs: tc.tir.call_packed("f", ins[0], outs[0]), name="B")
    C = te.compute((4,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    with raises(ScheduleError, r"compute_at of the extern stage 'B': it has no loops of its own"):
        tc.lower(s, [A, C])


def test_inlined_producer_of_an_extern():
    A = te.placeholder((4,), name="A")
    P = te.compute((4,), lambda i: A[i] * 2.0, name="P")
    B = te.extern((4,), [P], lambda ins, outs: tc.tir.call_packed("f", ins[0], outs[0]), name="B")
    s = te.create_schedule(B.op)
    s[P].compute_inline()
    with raises(ScheduleError, r"stage 'P' is inlined \(compute_inline\), but the extern stage 'B' reads "
                               r"its whole buffer"):
        tc.lower(s, [A, B])


def test_export_refuses_packed_calls(tmp_path):
    A = te.placeholder((4,), name="A")
    B = te.extern((4,), [A], lambda ins, outs: tc.tir.call_packed("f", ins[0], outs[0]), name="B")
    f = tc.build(te.create_schedule(B.op), [A, B], target="llvm")
    with raises(Exception, r"export_library: the module calls packed Python functions"):
        f.export_library(str(tmp_path / "lib.so"))
