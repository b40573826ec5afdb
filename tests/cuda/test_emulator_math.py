"""Every math intrinsic the CUDA backend translates runs in the emulator and agrees with the
reference interpreter and with float64 numpy (float16 computes in float32 and rounds once, as
the generated code does); nvcc compiles them all."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tilecraft
from tilecraft import interp, te
from tilecraft.codegen import cuda as cuda_backend
from tilecraft.codegen import cuda_emulate
from tilecraft.topi import cuda_schedules as cs
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.ir.expr import Call

pytestmark = pytest.mark.cuda

CUDA_INTRINSICS = sorted(set(cuda_backend.MATH) | {"sigmoid"})

# name -> (arity, input range, float64 reference)
_erf = np.vectorize(math.erf)
REFERENCE = {
    "exp": (1, (-5, 5), np.exp), "exp2": (1, (-5, 5), np.exp2), "log": (1, (0.1, 10), np.log),
    "log2": (1, (0.1, 10), np.log2), "log10": (1, (0.1, 10), np.log10), "sqrt": (1, (0.1, 10), np.sqrt),
    "rsqrt": (1, (0.1, 10), lambda x: 1 / np.sqrt(x)), "tanh": (1, (-4, 4), np.tanh),
    "erf": (1, (-3, 3), _erf), "floor": (1, (-9, 9), np.floor), "ceil": (1, (-9, 9), np.ceil),
    "round": (1, (-9, 9), np.rint), "trunc": (1, (-9, 9), np.trunc), "sin": (1, (-4, 4), np.sin),
    "cos": (1, (-4, 4), np.cos), "fabs": (1, (-9, 9), np.abs), "pow": (2, (0.5, 3), np.power),
    "fma": (3, (-3, 3), lambda a, b, c: a * b + c), "isnan": (1, (-9, 9), np.isnan),
    "sigmoid": (1, (-8, 8), lambda x: 1 / (1 + np.exp(-x))),
}
# relative: float16 rounds a float32 result once (2^-11), so the sigmoid's three float16 steps fail
TOL = {"float64": (1e-12, 1e-15), "float32": (2e-6, 1e-12), "float16": (4.9e-4, 1e-7)}


def test_every_cuda_intrinsic_has_a_reference_here():
    assert sorted(REFERENCE) == CUDA_INTRINSICS


def test_the_tables_name_the_same_intrinsics():
    missing_emu = set(CUDA_INTRINSICS) - set(cuda_emulate._MATH)
    missing_interp = set(CUDA_INTRINSICS) - set(interp._CALLS)
    assert not missing_emu, f"the emulator lacks {sorted(missing_emu)}"
    assert not missing_interp, f"the interpreter lacks {sorted(missing_interp)}"


def _op(name: str, dtype: str, n: int):
    arity, _, _ = REFERENCE[name]
    ins = [te.placeholder((n,), dtype, name=f"X{k}") for k in range(arity)]
    out_dtype = "bool" if name == "isnan" else dtype
    C = te.compute((n,), lambda i: Call(name, tuple(X[i] for X in ins), out_dtype), name=f"C_{name}")
    return ins, C


def _inputs(rng, name, dtype, n):
    arity, (lo, hi), _ = REFERENCE[name]
    xs = [rng.uniform(lo, hi, n).astype(dtype) for _ in range(arity)]
    if name == "isnan":
        xs[0][rng.random(n) < 0.3] = np.nan
    if name in ("floor", "ceil", "round", "trunc"):
        xs[0][:8] = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, 3.0], dtype)   # ties and edges
    return xs


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("name", CUDA_INTRINSICS)
def test_intrinsic_in_the_emulator(name, dtype, rng):
    n = 300
    ins, C = _op(name, dtype, n)
    xs = _inputs(rng, name, dtype, n)
    out = np.full(n, True if name == "isnan" else np.nan, C.dtype)
    emulate_out = out.copy()
    cuda_emulate.emulate(tilecraft.lower(cs.naive(C, threads=64), ins + [C], target="cuda"), xs + [emulate_out])
    got_interp = interp.evaluate([C], dict(zip(ins, xs)))[0]
    _, _, ref = REFERENCE[name]
    want = ref(*[x.astype("float64") for x in xs])
    if name == "isnan":
        np.testing.assert_array_equal(emulate_out, want)
        np.testing.assert_array_equal(got_interp, want)
        return
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(emulate_out.astype("float64"), want, rtol=rtol, atol=atol,
                               err_msg=f"emulator's {name} ({dtype}) vs float64 numpy")
    # the emulator and the interpreter compute the same way
    np.testing.assert_array_equal(emulate_out, got_interp,
                                  err_msg=f"emulator's {name} ({dtype}) vs the interpreter's")


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


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is absent: the intrinsics were emulated, not compiled")
def test_every_intrinsic_compiles():
    funcs = []
    for dtype in ("float32", "float64", "float16"):
        for name in CUDA_INTRINSICS:
            ins, C = _op(name, dtype, 64)
            funcs.append(tilecraft.lower(cs.naive(C, threads=64), ins + [C], target="cuda",
                                         name=f"{name}_{dtype}"))
    assert len(compile_cuda(generate_cuda(funcs), "sm_90")) > 0
