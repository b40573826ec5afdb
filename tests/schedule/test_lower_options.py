"""The TVM options of ``lower`` and ``build``: ``simple_mode`` leaves out loop partitioning,
``binds`` other than None and a ``target_host`` that is not the CPU are refused, saying why."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.codegen.build import BuildError
from tilecraft.ir import For, ForKind, IfThenElse, post_order_visit
from tilecraft.schedule import ScheduleError
from tilecraft.testing import poison


def vadd_split(n=None):
    """C = A + B split by 64 (a guarded tail unless 64 divides n), outer loop parallel."""
    n = te.var("n") if n is None else n
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=64)
    s[C].parallel(xo)
    s[C].vectorize(xi)
    return s, [A, B, C]


def _nodes(func, cls):
    out = []
    post_order_visit(func.body, lambda x: out.append(x) if isinstance(x, cls) else None)
    return out


def test_simple_mode_leaves_out_loop_partitioning():
    s, args = vadd_split()
    passes = {True: [], False: []}
    for simple in (True, False):
        tc.lower(s, args, simple_mode=simple, after_pass=lambda name, f, simple=simple: passes[simple].append(name))
    assert "loop_partition" in passes[False]
    assert passes[True] == [p for p in passes[False] if p != "loop_partition"]
    simple = tc.lower(s, args, simple_mode=True)
    # one parallel loop with its guard inside, where the whole pipeline makes two (guard-free and tail)
    assert [x.kind for x in _nodes(simple, For) if x.kind is ForKind.PARALLEL] == [ForKind.PARALLEL]
    assert len(_nodes(simple, IfThenElse)) == 1
    assert len([x for x in _nodes(tc.lower(s, args), For) if x.kind is ForKind.PARALLEL]) == 2


def test_a_simple_mode_function_builds_and_computes_the_sum(rand):
    s, (A, B, C) = vadd_split()
    n = 1000        # a tail of 40
    a, b = rand((n,), "float32"), rand((n,), "float32")
    lowered = tc.lower(s, [A, B, C], name="f", simple_mode=True, target="llvm")
    with tc.transform.PassContext(config={"tir.instrument_bound_checkers": True}):
        checked = tc.build(lowered, target="llvm")
    for f in (checked, tc.build(lowered, target="llvm")):
        c = poison((n,), "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a + b, rtol=1e-6)


def test_lower_refuses_binds():
    s, args = vadd_split(128)
    with pytest.raises(ScheduleError, match=r"binds \(TVM's map from tensors to buffers\) is not supported"):
        tc.lower(s, args, binds={args[0]: object()})
    with pytest.raises(ScheduleError, match="binds"):
        tc.build(s, args, binds={args[0]: object()})


def test_build_refuses_binds_for_a_lowered_function():
    s, args = vadd_split(128)
    with pytest.raises(BuildError, match="binds applies to lowering a schedule; this function is lowered already"):
        tc.build(tc.lower(s, args), binds={})


def test_build_takes_an_llvm_target_host(rand):
    s, args = vadd_split(256)
    f = tc.build(s, args, target="llvm", target_host="llvm")
    a, b = rand((256,), "float32"), rand((256,), "float32")
    c = np.full(256, np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


@pytest.mark.parametrize("host, message", [
    ("cuda", "build: target_host must be an llvm target (the host is the CPU), got 'cuda'"),
    ("opencl", "build: target_host must be an llvm target (the host is the CPU), got 'opencl'"),
    ("vulkan", "build: target_host: unknown target kind 'vulkan'"),
])
def test_build_refuses_a_target_host_that_is_not_the_cpu(host, message):
    s, args = vadd_split(128)
    with pytest.raises(BuildError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tc.build(s, args, target="llvm", target_host=host)


def test_lower_and_build_take_tvm_argument_order():
    """TVM: lower(inp, args, name, binds, simple_mode) and build(inputs, args, target, target_host)."""
    s, args = vadd_split(128)
    assert tc.lower(s, args, "f", None, True).name == "f"
    assert tc.build(s, args, "llvm", "llvm").entry_name == "default_function"


def test_unroll_loop_config_unrolls_small_loop_nests(rand):
    # PassContext(config={"tir.UnrollLoop": {"auto_max_step": n}}) (TVM's; the tensor-core tutorial
    # builds under it): every serial loop nest of at most n iterations is unrolled, larger ones stay
    A = te.placeholder((8, 4, 8), name="A")
    B = te.compute(A.shape, lambda i, j, k: A[i, j, k] * 2, name="B")
    s = te.create_schedule(B.op)
    plain = tc.lower(s, [A, B])
    assert len(_nodes(plain, For)) == 3
    with tc.transform.PassContext(config={"tir.UnrollLoop": {"auto_max_step": 32}}):
        func = tc.lower(s, [A, B])
        f = tc.build(s, [A, B], target="llvm")
    loops = _nodes(func, For)
    assert [lp.loop_var.name for lp in loops] == ["i"]        # j, k (32 iterations) unrolled, i not
    a = rand((8, 4, 8))
    b = poison((8, 4, 8), "float32")
    f(a, b)
    np.testing.assert_array_equal(b, a * 2)
