"""Calling compiled functions: argument checks (one test per message), arrays, devices, timing."""
import re

import numpy as np
import pytest

import tilecraft.runtime as rt
from tilecraft.codegen.llvm import build_llvm
from tilecraft.ir import Binary, BinOp, ForKind, Var, const
from tilecraft.testing import assert_allclose, assert_array_equal

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "codegen"))
from llvm_ir_helpers import buf, func, ld, loop, poisoned, rand, st  # noqa: E402

pytestmark = pytest.mark.usefixtures("seeded_ir_helpers")   # rand() replays with the seed


@pytest.fixture(scope="module")
def vadd():
    """C[i] = A[i] + B[i] over a symbolic n."""
    n = Var("n")
    A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
    i = Var("i")
    return build_llvm(func("vadd", (A, B, C, n), loop(i, n, st(C, i, ld(A, i) + ld(B, i)))))


@pytest.fixture(scope="module")
def matmul_static():
    A, B, C = buf("A", (8, 4)), buf("B", (4, 6)), buf("C", (8, 6))
    i, j, k = Var("i"), Var("j"), Var("k")
    from tilecraft.ir import seq
    body = loop(i, 8, loop(j, 6, seq(st(C, i * 6 + j, const(0.0)),
                                     loop(k, 4, st(C, i * 6 + j, ld(C, i * 6 + j) + ld(A, i * 4 + k) * ld(B, k * 6 + j))))))
    return build_llvm(func("mm", (A, B, C), body))


def test_numpy_and_ndarray_arguments(vadd):
    dev = rt.cpu(0)
    a, b = rand(1000), rand(1000)
    c = rt.nd.empty((1000,), "float32", dev)
    vadd(rt.nd.array(a, dev), b, c)
    assert_allclose(c, a + b)
    assert c.shape == (1000,) and c.dtype == "float32" and c.device == dev
    f = vadd["vadd"]
    c2 = poisoned(1000)
    f(a, b, c2)
    assert_allclose(c2, a + b)


def test_error_argument_count(vadd):
    with pytest.raises(TypeError, match=re.escape("vadd expects 3 arguments (A, B, C), got 2")):
        vadd(rand(4), rand(4))


def test_error_dtype(vadd):
    with pytest.raises(TypeError, match=re.escape("argument 1 'B': expected dtype float32, got float64")):
        vadd(rand(4), rand(4, "float64"), poisoned(4))


def test_error_static_shape(matmul_static):
    with pytest.raises(ValueError, match=re.escape("argument 2 'C': expected shape (8, 6), got (8, 5)")):
        matmul_static(rand((8, 4)), rand((4, 6)), poisoned((8, 5)))


def test_error_symbolic_shape_names_its_source(vadd):
    msg = "argument 2 'C': expected shape (1000,) (that is (n,) with n = 1000 from argument 0 'A'), got (999,)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        vadd(rand(1000), rand(1000), poisoned(999))


def test_error_rank(vadd):
    with pytest.raises(ValueError, match=re.escape("argument 0 'A': expected a 1-d array of shape (n,), got shape (4, 4)")):
        vadd(rand((4, 4)), rand(4), poisoned(4))


def test_error_not_contiguous(vadd):
    a = rand(20)[::2]
    with pytest.raises(ValueError, match=re.escape("argument 0 'A': expected a C-contiguous array, got strides (8,)")):
        vadd(a, rand(10), poisoned(10))


def test_error_not_an_array(vadd):
    with pytest.raises(TypeError, match="argument 1 'B': expected a numpy array or tilecraft NDArray, got list"):
        vadd(rand(3), [1.0, 2.0, 3.0], poisoned(3))


def test_error_array_on_another_device(vadd):
    gpu_array = rt.NDArray(rand(3), rt.cuda(0))
    with pytest.raises(ValueError, match=re.escape("argument 0 'A': expected an array on cpu(0), got one on cuda(0)")):
        vadd(gpu_array, rand(3), poisoned(3))


def test_error_output_overlaps_input(vadd):
    a = rand(100)
    with pytest.raises(ValueError, match="arguments 2 'C' and 0 'A' overlap in memory, but 'C' is written"):
        vadd(a, rand(100), a)
    big = rand(200)
    with pytest.raises(ValueError, match="overlap in memory"):
        vadd(big[:100], rand(100), big[50:150])
    vadd(big[:100], big[:100], big[100:])      # reading one array twice is fine
    assert_allclose(big[100:], 2 * big[:100])


def test_error_read_only_output(vadd):
    c = poisoned(4)
    c.flags.writeable = False
    with pytest.raises(ValueError, match="argument 2 'C': the function writes this array, but it is read-only"):
        vadd(rand(4), rand(4), c)
    a = rand(4)
    a.flags.writeable = False                    # read-only inputs are fine
    c2 = poisoned(4)
    b = rand(4)
    vadd(a, b, c2)
    assert_allclose(c2, a + b)


def test_shape_expression_dimensions_and_underived_scalars():
    """B has shape (n - 2,) and k is not a dimension: the caller passes k."""
    n, k = Var("n"), Var("k", "float32")
    A, B = buf("A", (n,)), buf("B", (Binary(BinOp.SUB, n, const(2), "int32"),))
    i = Var("i")
    mod = build_llvm(func("win", (A, B, n, k), loop(i, n - 2, st(B, i, ld(A, i) + ld(A, i + 2) * k))))
    a, b = rand(50), poisoned(48)
    mod(a, b, 0.5)
    assert_allclose(b, a[:-2] + a[2:] * 0.5, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=re.escape("argument 1 'B': expected shape (48,) (that is ((n - 2),) with n = 50 from argument 0 'A'), got (49,)")):
        mod(a, poisoned(49), 0.5)
    with pytest.raises(TypeError, match=re.escape("win expects 3 arguments (A, B, k), got 2")):
        mod(a, b)
    with pytest.raises(TypeError, match="argument 2 'k': expected a float32 scalar, got str"):
        mod(a, b, "x")


def test_error_nonzero_return_code():
    f = rt.Function(rt.FuncSignature("bad", ()), _const_int_function(7))     # 3 is STATUS_PACKED_FUNC
    with pytest.raises(RuntimeError, match="bad returned the error code 7 \\(an unknown failure\\) without a message"):
        f()


_KEEP = []


def _const_int_function(value):
    import ctypes
    cb = ctypes.CFUNCTYPE(ctypes.c_int32)(lambda: value)
    _KEEP.append(cb)
    return ctypes.cast(cb, ctypes.c_void_p).value


def test_nd_array_api():
    dev = rt.device("llvm", 0)
    assert dev == rt.cpu(0) and dev.device_type == 1 and str(dev) == "cpu(0)"
    assert rt.cuda(1).device_type == 2 and repr(rt.device("cuda", 1)) == "cuda(1)"
    x = rand((3, 5))
    a = rt.nd.array(x, dev)
    assert a._array.ctypes.data % 64 == 0
    y = a.numpy()
    y[0, 0] = 42
    assert_array_equal(a, x)                     # numpy() is a copy
    e = rt.nd.empty((2, 3), "int8", dev)
    assert e.shape == (2, 3) and e.dtype == "int8"
    e.copyfrom(np.ones((2, 3), "int8"))
    assert_array_equal(e.numpy(), np.ones((2, 3), "int8"))
    with pytest.raises(ValueError, match=re.escape("copyfrom: shape (3,) does not match the array's (2, 3)")):
        e.copyfrom(np.ones(3, "int8"))
    with pytest.raises(TypeError, match="copyfrom: dtype float32 does not match the array's int8"):
        e.copyfrom(np.ones((2, 3), "float32"))
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        rt.device("tpu", 0)
    try:
        import pycuda  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="needs pycuda"):
            rt.nd.array(x, rt.cuda(0))


def test_time_evaluator(vadd):
    a, b, c = rand(4096), rand(4096), poisoned(4096)
    ev = vadd.time_evaluator(vadd.entry_name, rt.cpu(0), number=5, repeat=3)
    res = ev(a, b, c)
    assert len(res.results) == 3 and all(r > 0 for r in res.results)
    assert res.min <= res.median <= res.max and abs(res.mean - np.mean(res.results)) < 1e-12
    assert_allclose(c, a + b)                    # the warm-up ran the function
    res2 = vadd.time_evaluator("vadd", rt.cpu(0), number=1, repeat=2, min_repeat_ms=20)(a, b, c)
    assert all(r * 1e3 < 20 for r in res2.results)  # many calls fit in 20 ms: number grew
    with pytest.raises(ValueError, match="number must be a positive int"):
        vadd.time_evaluator("vadd", rt.cpu(0), number=0)
    with pytest.raises(ValueError, match="expected shape"):
        ev(a, b, poisoned(3))


def test_thread_count_api():
    old = rt.get_num_threads()
    try:
        rt.set_num_threads(3)
        assert rt.get_num_threads() == 3
        with pytest.raises(ValueError, match="set_num_threads expects a positive int, got 0"):
            rt.set_num_threads(0)
    finally:
        rt.set_num_threads(old)


def test_thread_count_from_environment():
    import subprocess
    code = "import tilecraft.runtime as rt; print(rt.get_num_threads())"
    env = dict(os.environ, TILECRAFT_NUM_THREADS="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "3"
    env["TILECRAFT_NUM_THREADS"] = "lots"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "TILECRAFT_NUM_THREADS must be a positive integer, got 'lots'" in out.stderr


def test_module_thread_global_follows_set_num_threads():
    n = Var("n")
    A = buf("A", (n,))
    i = Var("i")
    mod = build_llvm(func("p", (A, n), loop(i, n, st(A, i, ld(A, i) + 1.0), ForKind.PARALLEL)))
    import ctypes
    addr = mod.artifact.engine.get_global_value_address("tilecraft_num_threads")
    old = rt.get_num_threads()
    try:
        rt.set_num_threads(7)
        assert ctypes.c_int32.from_address(addr).value == 7
    finally:
        rt.set_num_threads(old)
    assert ctypes.c_int32.from_address(addr).value == old


def test_assert_allclose_reports():
    with pytest.raises(AssertionError, match="shape mismatch"):
        assert_allclose(np.ones(3), np.ones(4))
    with pytest.raises(AssertionError):
        assert_allclose(rt.nd.array(np.ones(3)), np.ones(3) + 1e-3)
    assert_allclose(rt.nd.array(np.ones(3, "float32")), np.ones(3, "float32"))


def test_get_source_formats(vadd):
    assert "i32 @vadd(" in vadd.get_source("ll")
    assert "define i32 @vadd" in vadd.get_source("ll-raw")
    assert "vadd:" in vadd.get_source("asm")
    assert '"name": "vadd"' in vadd.get_source("manifest")
    with pytest.raises(ValueError, match="unknown source format 'ptx'"):
        vadd.get_source("ptx")
