"""Scalar parameters of CUDA functions: a float scalar beside a symbolic length (found by the GPU
fuzzer: lowering compared the two variables with ``==`` and failed with an internal DTypeError)."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import emulate

pytestmark = pytest.mark.cuda


def _scaled(dtype="float32"):
    n = te.var("n")
    alpha = te.var("alpha", dtype)
    A = te.placeholder((n,), dtype, name="A")
    C = te.compute((n,), lambda i: A[i] * alpha + te.const(1.0, dtype), name="C")
    s = te.create_schedule(C.op)
    b, t = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(b, te.thread_axis("blockIdx.x"))
    s[C].bind(t, te.thread_axis("threadIdx.x"))
    return s, [A, alpha, C]


def test_float_scalar_beside_a_symbolic_length(rng):
    s, args = _scaled()
    func = tilecraft.lower(s, args, target="cuda")
    src = generate_cuda(func)
    assert "float alpha, int n)" in src
    a = rng.standard_normal(300).astype("float32")
    c = np.full(300, np.nan, "float32")
    emulate(func, [a, c, np.float32(-1.75)])            # arrays, then the scalars the shapes do not give
    np.testing.assert_allclose(c, a * np.float32(-1.75) + 1, rtol=1e-6)
    if find_nvcc() is not None:
        assert len(compile_cuda(src, "sm_90")) > 0


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_float_scalar_on_the_gpu(rng, dtype):
    from .test_cuda_ops import gpu_available
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: lowering, emulation, nvcc and the arguments were checked by the other tests")
    from tilecraft.runtime import cuda_ndarray
    s, args = _scaled(dtype)
    mod = tilecraft.build(s, args, target="cuda")
    a = rng.standard_normal(1000).astype(dtype)
    dev = tilecraft.cuda(0)
    d_a, d_c = cuda_ndarray.array(a, dev), cuda_ndarray.array(np.full(1000, np.nan, dtype), dev)
    mod(d_a, d_c, -1.5)
    np.testing.assert_allclose(d_c.numpy().astype("float64"), a.astype("float64") * -1.5 + 1,
                               rtol=1e-6 if dtype == "float32" else 2e-3, atol=1e-6 if dtype == "float32" else 2e-3)


class _FakeFunction:
    """A loaded kernel as pycuda would hand it over, recording the prepare string."""
    def prepare(self, types):
        self.types = types


class _FakeGPUArray:
    def __init__(self, shape, dtype):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": np.dtype(dtype).str, "data": (4096, False),
                                         "strides": None, "version": 3}


def test_float16_scalar_is_passed_as_its_bits():
    # found by the GPU fuzzer: building a function with a float16 scalar failed with
    # KeyError: 'float16' (no type character), and pycuda's packer has no half format
    from tilecraft.runtime.cuda_runtime import CUDAFunction, _Kernel, plan_of
    n = te.var("n")
    alpha = te.var("alpha", "float16")
    A = te.placeholder((n,), "float16", name="A")
    C = te.compute((n,), lambda i: A[i] * alpha, name="C")
    s = te.create_schedule(C.op)
    b, t = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(b, te.thread_axis("blockIdx.x"))
    s[C].bind(t, te.thread_axis("threadIdx.x"))
    func = tilecraft.lower(s, [A, C, alpha], target="cuda")
    plan = plan_of(func)
    assert plan.kernels[0].types == "PPei"                    # the manifest keeps numpy's 'e'
    f = CUDAFunction(None, plan, [_Kernel(k, _FakeFunction()) for k in plan.kernels])
    assert f.kernels[0].fn.types == "PPHi"
    (fn, grid, block, kargs), = f.prepare((_FakeGPUArray((100,), "float16"), _FakeGPUArray((100,), "float16"), -1.5))
    assert grid == (2, 1, 1) and block == (64, 1, 1)
    assert kargs[2] == int(np.float16(-1.5).view(np.uint16)) == 0xBE00 and int(kargs[3]) == 100
    a = np.linspace(-2, 2, 100).astype("float16")
    c = np.full(100, np.nan, "float16")
    emulate(func, [a, c, np.float16(-1.5)])
    np.testing.assert_array_equal(c, a * np.float16(-1.5))
