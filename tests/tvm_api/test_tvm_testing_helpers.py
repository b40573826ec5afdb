"""TVM's ``tvm.testing`` helpers that TVM's unit tests call (``device_enabled``, the
``requires_*`` skips, ``uses_gpu``, ``skip_if_wheel_test``, ``check_numerical_grads``), and what
TVM's autodiff tests lean on: an unused placeholder as a lower/build argument, ``topi.full_like``."""
import numpy as np
import pytest

import tilecraft as tvm
from tilecraft import te, topi
from tilecraft.testing import tvm_helpers


def test_device_enabled():
    assert tvm.testing.device_enabled("llvm") and tvm.testing.device_enabled("llvm -mcpu=native")
    assert not tvm.testing.device_enabled("opencl") and not tvm.testing.device_enabled("vulkan")
    assert tvm.testing.device_enabled("cuda -arch=sm_90") == (tvm_helpers._cuda_device_count() > 0)


def test_decorators():
    def f():
        return 1
    assert tvm.testing.skip_if_wheel_test(f) is f and tvm.testing.uses_gpu(f) is f
    gpu = tvm.testing.device_enabled("cuda")
    for deco in (tvm.testing.requires_gpu, tvm.testing.requires_cuda, tvm.testing.requires_tensorcore):
        def g():
            return 1
        marks = deco(g).pytestmark
        assert [m.name for m in marks] == ["skipif"]
        if deco is not tvm.testing.requires_tensorcore or not gpu:
            assert marks[0].args[0] is (not gpu)


def test_check_numerical_grads(rng):
    x = rng.uniform(-1, 1, size=(3, 4))
    w = rng.uniform(-1, 1, size=(4,))
    f = lambda x, w: float(np.tanh(x @ w).sum())                       # noqa: E731
    t = np.tanh(x @ w)
    gx, gw = np.outer(1 - t ** 2, w), x.T @ (1 - t ** 2)
    tvm.testing.check_numerical_grads(f, [x, w], [gx, gw])
    tvm.testing.check_numerical_grads(f, {"x": x, "w": w}, {"x": gx, "w": gw})
    with pytest.raises(AssertionError, match=r"gradient with respect to input w: distance .* exceeds "
                                             r"atol\*sqrt\(n\) \+ rtol\*\|numerical\|"):
        tvm.testing.check_numerical_grads(f, {"x": x, "w": w}, {"x": gx, "w": -gw})
    with pytest.raises(AssertionError, match=r"input 1 has shape \(3,\), expected \(4,\)"):
        tvm.testing.check_numerical_grads(f, [x, w], [gx, gw[:3]])


def test_unused_placeholder_is_an_unused_parameter(rand):
    """TVM's autodiff tests build a gradient with every input as an argument, also one the
    gradient does not read (d(A0[i, j])/dA0 with a head of ones reads only the head)."""
    A = te.placeholder((4, 5), name="A")
    Z = te.placeholder((3,), name="Z")
    ones = topi.full_like(A, 1.0)
    grad, = te.gradient(te.compute(A.shape, lambda i, j: A[i, j], name="B"), [A], head=ones)
    s = te.create_schedule(grad.op)
    f = tvm.build(s, [grad, A, Z], "llvm")
    g = tvm.nd.array(np.full((4, 5), np.nan, "float32"))
    f(g, tvm.nd.array(rand((4, 5))), tvm.nd.array(rand((3,))))
    np.testing.assert_array_equal(g.numpy(), np.ones((4, 5), "float32"))


def test_topi_full():
    T = topi.full((2, 3), "int32", 7)
    s = te.create_schedule(T.op)
    out = tvm.nd.array(np.zeros((2, 3), "int32") - 1)
    tvm.build(s, [T], "llvm")(out)
    np.testing.assert_array_equal(out.numpy(), np.full((2, 3), 7))
    assert topi.full_like(te.placeholder((4,), "float16", name="H"), 0.5).dtype == "float16"


def test_ffi_base_tvmerror_catches_tilecraft_errors():
    """TVM's test_verify_compute catches tvm._ffi.base.TVMError around an invalid compute."""
    assert tvm._ffi.base.TVMError is tvm.error.TVMError
    n = te.size_var("n")
    A = te.placeholder((n, 8), name="A")
    k = te.reduce_axis((0, 8), "k")
    with pytest.raises(tvm._ffi.base.TVMError, match=r"compute 'B': a reduction .* must be the whole body"):
        te.compute((n,), lambda i: te.sum(A[i, k], axis=k) + 1, name="B")
