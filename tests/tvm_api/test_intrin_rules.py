"""Custom intrinsic lowering (TVM's ``tvm.ir.register_intrin_lowering`` / ``register_op_attr``,
``tir.call_pure_extern`` of CUDA math functions): rules run at legalization, levels replace or
are refused as in TVM, a declared operator without a rule is refused per target, and the results
are checked by running them (LLVM build, CUDA emulator) against numpy. Each test starts from an
empty registry (the registry is per process)."""
import numpy as np
import pytest

import tilecraft as tvm
from tilecraft import te
from tilecraft.ir import intrin_rules, register_intrin_lowering, register_op_attr
from tilecraft.schedule.passes.legalize import LegalizeError


@pytest.fixture(autouse=True)
def empty_registry(monkeypatch):
    monkeypatch.setattr(intrin_rules, "LOWERING", {})
    monkeypatch.setattr(intrin_rules, "OP_ATTRS", {})


def _vec(fn, n=37):
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: fn(A[i]), name="B")
    return A, B, te.create_schedule(B.op)


def _run_llvm(s, A, B, a):
    f = tvm.build(s, [A, B], "llvm")
    b = np.full(a.shape, np.nan, "float32")
    f(a, b)
    return b


def test_default_rule_replaces_exp_on_the_cpu(rng):
    seen = []

    def exp_as_exp2(call):            # exp(x) = exp2(x * log2(e)): another computation, same value
        seen.append(call.op.name)
        return te.exp2(call.args[0] * np.float32(np.log2(np.e)))
    register_intrin_lowering("tir.exp", f=exp_as_exp2, level=99)
    A, B, s = _vec(te.exp)
    assert "exp2" in tvm.lower(s, [A, B], target="llvm").script()
    a = rng.uniform(-3, 3, 37).astype("float32")
    np.testing.assert_allclose(_run_llvm(s, A, B, a), np.exp(a), rtol=1e-5)
    assert seen and set(seen) == {"tir.exp"}


def test_a_rule_returning_the_call_declines(rng):
    register_intrin_lowering("tir.exp", target="llvm", f=lambda call: call, level=99)
    A, B, s = _vec(te.exp)
    a = rng.uniform(-3, 3, 37).astype("float32")
    np.testing.assert_allclose(_run_llvm(s, A, B, a), np.exp(a), rtol=1e-6)


def test_rule_for_another_target_is_not_used_on_this_one():
    register_intrin_lowering("tir.exp", target="cuda", f=lambda call: te.log(call.args[0]), level=99)
    A, B, s = _vec(te.exp)
    text = tvm.lower(s, [A, B], target="llvm").script()
    assert "exp(" in text and "log(" not in text


def test_new_operator_on_llvm_and_emulated_cuda(rng):
    def mylog(x):
        return tvm.tir.call_intrin(x.dtype, "tir.mylog", x)
    register_op_attr("tir.mylog", "TCallEffectKind", tvm.tir.CallEffectKind.Pure)
    A, B, s = _vec(mylog)
    with pytest.raises(LegalizeError, match=r"the operator 'tir.mylog' has no lowering rule for target "
                                            r"'llvm' .*register_intrin_lowering\('tir.mylog', target='llvm'"):
        tvm.lower(s, [A, B], target="llvm")
    register_intrin_lowering("tir.mylog", target="llvm", f=lambda op: te.log(op.args[0]))
    a = rng.uniform(0.1, 5, 37).astype("float32")
    np.testing.assert_allclose(_run_llvm(s, A, B, a), np.log(a), rtol=1e-6)
    # on CUDA: CUDA's logf by name, run by the emulator's table of CUDA math functions
    register_intrin_lowering("tir.mylog", target="cuda",
                             f=lambda op: tvm.tir.call_pure_extern("float32", "logf", op.args[0]))
    bx, tx = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.cuda_emulate import emulate
    f = tvm.lower(s, [A, B], target="cuda")
    assert "= logf(A[" in generate_cuda(f)
    b = np.full(37, np.nan, "float32")
    emulate(f, [a, b])
    np.testing.assert_allclose(b, np.log(a), rtol=1e-6)


def test_levels_replace_ignore_or_refuse():
    register_intrin_lowering("tir.exp", target="llvm", f=lambda op: op, level=20)
    first = intrin_rules.lowering_rule("exp", "llvm")
    register_intrin_lowering("tir.exp", target="llvm", f=lambda op: op, level=10)     # lower: ignored
    assert intrin_rules.lowering_rule("exp", "llvm") is first
    with pytest.raises(ValueError, match="operator 'tir.exp' already has a lowering rule for target "
                                         "'llvm' at level 20; give a higher level"):
        register_intrin_lowering("tir.exp", target="llvm", f=lambda op: op, level=20)

    @register_intrin_lowering("tir.exp", target="llvm", level=30)          # decorator form
    def later(op):
        return op
    assert intrin_rules.lowering_rule("exp", "llvm") is later
    register_op_attr("tir.exp", "TCallEffectKind", 1)
    with pytest.raises(ValueError, match="attribute 'TCallEffectKind' of operator 'tir.exp' is already "
                                         "registered at level 10"):
        register_op_attr("tir.exp", "TCallEffectKind", 1)


def test_rule_must_return_an_expression():
    register_intrin_lowering("tir.exp", target="llvm", f=lambda op: "expf", level=99)
    A, B, s = _vec(te.exp)
    with pytest.raises(LegalizeError, match="the lowering rule registered for 'tir.exp' on target 'llvm' "
                                            "returned str 'expf'"):
        tvm.lower(s, [A, B], target="llvm")


def test_call_intrin_of_an_undeclared_operator_says_how_to_declare_it():
    with pytest.raises(ValueError, match=r"unknown intrinsic 'tir.mylog' \(declare a new one with "
                                         r"tvm.ir.register_op_attr"):
        tvm.tir.call_intrin("float32", "tir.mylog", te.var("x", "float32"))


def test_emulator_refuses_an_unknown_device_function():
    A, B, s = _vec(lambda x: tvm.tir.call_pure_extern("float32", "my_device_fn", x), n=16)
    s[B].bind(s[B].op.axis[0], te.thread_axis("threadIdx.x"))
    from tilecraft.codegen.cuda_emulate import EmulationError, emulate
    f = tvm.lower(s, [A, B], target="cuda")
    with pytest.raises(EmulationError, match=r"knows CUDA's math functions only; it cannot run "
                                             r"call_pure_extern\('my_device_fn'\)"):
        emulate(f, [np.ones(16, "float32"), np.full(16, np.nan, "float32")])
    from tilecraft.codegen.cuda import generate_cuda
    with pytest.raises(NotImplementedError, match=r"call_pure_extern\('my_device_fn'\) in a kernel: .* only "
                                                  r"CUDA's math functions such as __expf or logf"):
        generate_cuda(f)


def test_cuda_fast_math_and_library_names_map_onto_the_table():
    from tilecraft.ir.intrinsics import intrinsic_of_cuda_function
    assert [intrinsic_of_cuda_function(n) for n in ("__expf", "expf", "exp", "powf", "nope")] == \
        ["exp", "exp", "exp", "pow", None]
