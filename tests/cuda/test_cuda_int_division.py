"""Integer division and remainder in CUDA kernels, both roundings, on operands of every sign:
the emulator (which evaluates ``truncdiv``/``truncmod`` with the IR's one definition,
``ir.expr.trunc_divide``) against exact Python integers, and, where there is a GPU, the kernel
itself against the same."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.topi import cuda_schedules
from tilecraft.codegen.cuda_emulate import emulate

from tests.conftest import poison
from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda

N = 1000          # not a multiple of the block: the tail is guarded


def _schedule(dtype):
    A = te.placeholder((N,), dtype, name="A")
    B = te.placeholder((N,), dtype, name="B")
    outs = [te.compute((N,), lambda i: f(A[i], B[i]), name=name)
            for name, f in (("Q", te.truncdiv), ("R", te.truncmod),
                            ("FQ", te.floordiv), ("FR", te.floormod))]
    return cuda_schedules.naive(outs, threads=128), [A, B] + outs


def _inputs(rng, dtype):
    info = np.iinfo(dtype)
    a = rng.integers(-1000, 1000, size=N, endpoint=True).astype(dtype)
    b = rng.choice(np.array([-7, -3, -2, -1, 1, 2, 3, 5, 64], dtype=dtype), size=N)
    a[:6] = [info.min, info.max, -7, 7, -1, 0]
    b[:6] = [7, -2, 2, -2, 3, -5]
    return a, b


def _expected(a, b):
    exact = [(int(x), int(y)) for x, y in zip(a, b)]
    q = [math.trunc(Fraction(x, y)) for x, y in exact]
    return [q, [x - y * t for (x, y), t in zip(exact, q)],
            [x // y for x, y in exact], [x % y for x, y in exact]]


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_int_division_in_the_emulator(rng, dtype):
    s, args = _schedule(dtype)
    func = tilecraft.lower(s, args, target="cuda")
    a, b = _inputs(rng, dtype)
    outs = [poison((N,), dtype) for _ in range(4)]
    emulate(func, [a, b] + outs)
    for name, got, want in zip(("truncdiv", "truncmod", "floordiv", "floormod"), outs, _expected(a, b)):
        assert [int(v) for v in got] == want, name


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_int_division_on_the_gpu(rng, dtype):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: the kernel was checked in the emulator only")
    from tilecraft.runtime import cuda_ndarray
    s, args = _schedule(dtype)
    mod = tilecraft.build(s, args, target="cuda")
    dev = tilecraft.cuda(0)
    a, b = _inputs(rng, dtype)
    d_outs = [cuda_ndarray.array(poison((N,), dtype), dev) for _ in range(4)]
    mod(cuda_ndarray.array(a, dev), cuda_ndarray.array(b, dev), *d_outs)
    for name, d, want in zip(("truncdiv", "truncmod", "floordiv", "floormod"), d_outs, _expected(a, b)):
        assert [int(v) for v in d.numpy()] == want, name
