"""Math intrinsics in CUDA kernels: fma's one rounding, erf (issue 8), an unknown intrinsic's
message. Every intrinsic of the table, for every dtype, is checked in the emulator, compiled by
nvcc and run on a GPU by ``tests/test_intrinsics_table.py``."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tilecraft
from tilecraft import interp, te
from tilecraft.codegen import cuda_emulate
from tilecraft.topi import cuda_schedules as cs
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.ir import intrinsics
from tilecraft.ir.expr import Call

pytestmark = pytest.mark.cuda

_erf = np.vectorize(math.erf)


def _op(name: str, dtype: str, n: int):
    ins = [te.placeholder((n,), dtype, name=f"X{k}") for k in range(intrinsics.lookup(name).arity)]
    C = te.compute((n,), lambda i: intrinsics.call(name, *[X[i] for X in ins]), name=f"C_{name}")
    return ins, C


def test_fma_rounds_once(rng):
    # c = -round(a*b): fma gives the rounding error of a*b, a*b + c in two roundings gives 0
    ins, C = _op("fma", "float32", 256)
    a, b = (rng.uniform(1, 2, 256).astype("float32") for _ in range(2))
    c = -(a * b)
    out = np.full(256, np.nan, "float32")
    cuda_emulate.emulate(tilecraft.lower(cs.naive(C, threads=64), ins + [C], target="cuda"), [a, b, c, out])
    want = (a.astype("float64") * b + c).astype("float32")
    assert np.count_nonzero(want) > 200
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(interp.evaluate([C], dict(zip(ins, [a, b, c])))[0], want)


def test_erf_in_a_kernel(rng):
    # issue 8: te.erf compiled for CUDA, emulated (was KeyError: 'erf')
    X = te.placeholder((257,), name="X")
    Y = te.compute((257,), lambda i: 0.5 * X[i] * (1 + te.erf(X[i] * 0.7071067811865476)), name="gelu")
    x = rng.standard_normal(257).astype("float32")
    y = np.full(257, np.nan, "float32")
    func = tilecraft.lower(cs.naive(Y, threads=64), [X, Y], target="cuda")
    assert "erff(" in generate_cuda(func)
    cuda_emulate.emulate(func, [x, y])
    want = 0.5 * x.astype("float64") * (1 + _erf(x.astype("float64") / np.sqrt(2)))
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=2e-6)


def test_unknown_intrinsic_is_named():
    X = te.placeholder((64,), name="X")
    Y = te.compute((64,), lambda i: Call("bessel_j0", (X[i],), "float32"), name="Y")
    func = tilecraft.lower(cs.naive(Y, threads=64), [X, Y], target="cuda")
    with pytest.raises(cuda_emulate.EmulationError, match=r"does not know the intrinsic 'bessel_j0'"):
        cuda_emulate.emulate(func, [np.ones(64, "float32"), np.zeros(64, "float32")])
