"""TVM's small program-level names: ``tvm.error`` classes as the bases of tilecraft's errors,
``runtime.convert``, ``runtime.enabled``, ``tir.IntImm`` / ``FloatImm``."""
import importlib.util

import numpy as np
import pytest

import tilecraft as tvm
from tilecraft import te


def test_tvm_error_catches_a_schedule_error():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(tvm.error.TVMError) as info:
        s[B].split(B.op.axis[0], factor=0)
    assert isinstance(info.value, tvm.ScheduleError) and isinstance(info.value, ValueError)


def test_tvm_error_catches_definition_dtype_target_and_kernel_errors(tmp_path):
    A = te.placeholder((4, 4), name="A")
    with pytest.raises(tvm.error.TVMError):
        te.compute((4,), lambda i: A[i], name="B")          # TEError: too few indices
    with pytest.raises(tvm.error.TVMError):
        te.exp(te.var("i"))                                 # DTypeError: an int argument
    with pytest.raises(tvm.error.TVMError):
        tvm.target.Target("vulkan")                         # TargetError
    assert issubclass(tvm.error.OpNotImplemented, NotImplementedError)
    assert issubclass(tvm.error.TVMError, RuntimeError)


@pytest.mark.parametrize("cls", ["TEError", "ScheduleError", "BuildError", "DTypeError"])
def test_every_public_error_is_a_tvm_error(cls):
    assert issubclass(getattr(tvm, cls), tvm.error.TVMError)


def test_convert_gives_constant_extents(rng):
    n = tvm.runtime.convert(1024)
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: A[i] * 3, name="B")
    f = tvm.build(te.create_schedule(B.op), [A, B], "llvm")
    a = rng.standard_normal(1024).astype("float32")
    b = np.full(1024, np.nan, "float32")
    f(a, b)
    np.testing.assert_allclose(b, a * 3, rtol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        f(a[:1000], b[:1000])                              # the function takes only length 1024
    one, half = tvm.runtime.convert([1, 2.5])
    assert (one.dtype, one.value, half.dtype, half.value) == ("int32", 1, "float32", 2.5)
    assert tvm.runtime.convert("s").value == "s"


def test_enabled():
    assert tvm.runtime.enabled("llvm") and tvm.runtime.enabled("llvm -mcpu=native")
    assert not tvm.runtime.enabled("opencl") and not tvm.runtime.enabled("vulkan")
    assert tvm.runtime.enabled("cuda") == (importlib.util.find_spec("pycuda") is not None)


def test_int_and_float_imm():
    x = tvm.tir.IntImm("int64", 7)
    assert isinstance(x, tvm.tir.Const) and x.dtype == "int64" and x.value == 7
    y = tvm.tir.FloatImm("float16", 0.5)
    assert y.dtype == "float16" and y.value == 0.5


def test_intimm_isinstance_substitute_analyzer_seqstmt():
    """What TVM's hybrid-test helper uses: ``isinstance(v, tir.IntImm)`` after
    ``tir.stmt_functor.substitute`` and ``arith.Analyzer().simplify``; ``SeqStmt`` indexing;
    ``runtime.convert`` of a list of tensors."""
    n, m = tvm.te.var("n"), tvm.te.var("m")
    v = tvm.arith.Analyzer().simplify(tvm.tir.stmt_functor.substitute(n * 2 + m, {n: 99, m: 1}))
    assert isinstance(v, tvm.tir.IntImm) and not isinstance(v, tvm.tir.FloatImm) and v.value == 199
    assert isinstance(tvm.tir.FloatImm("float32", 1.5), tvm.tir.FloatImm)
    assert not isinstance(tvm.tir.FloatImm("float32", 1.5), tvm.tir.IntImm)
    assert not isinstance(n, tvm.tir.IntImm) and not isinstance(3, tvm.tir.IntImm)
    assert isinstance(tvm.tir.const(True, "bool"), tvm.tir.IntImm)
    body = tvm.tir.stmt_seq(tvm.tir.Evaluate(1), tvm.tir.Evaluate(2))
    assert len(body) == 2 and body[1].value.value == 2 and bool(tvm.tir.SeqStmt(()))
    ts = [tvm.te.placeholder((4,), name=f"t{k}") for k in range(3)]
    assert list(tvm.runtime.convert(ts)) == ts


def test_te_schedule_buffer_is_what_extern_passes():
    """TVM's ``tvm.te.schedule.Buffer``: the class of the buffers ``te.extern``'s function gets."""
    seen = []

    def f(ins, outs):
        seen.extend(isinstance(b, tvm.te.schedule.Buffer) for b in (*ins, *outs))
        return tvm.tir.call_packed("myadd", ins[0], outs[0])
    A = te.placeholder((8,), name="A")
    te.extern((8,), [A], f)
    assert seen == [True, True]
