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


def _scaled():
    n = te.var("n")
    alpha = te.var("alpha", "float32")
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i] * alpha + 1.0, name="C")
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


def test_float_scalar_on_the_gpu(rng):
    from .test_cuda_ops import gpu_available
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: lowering, emulation and nvcc were checked by the test above")
    from tilecraft.runtime import cuda_ndarray
    s, args = _scaled()
    mod = tilecraft.build(s, args, target="cuda")
    a = rng.standard_normal(1000).astype("float32")
    dev = tilecraft.cuda(0)
    d_a, d_c = cuda_ndarray.array(a, dev), cuda_ndarray.array(np.full(1000, np.nan, "float32"), dev)
    mod(d_a, d_c, 0.5)
    np.testing.assert_allclose(d_c.numpy(), a * np.float32(0.5) + 1, rtol=1e-6)
