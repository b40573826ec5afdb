"""Small constructors for hand-built lowered IR (1-d buffers, Ramp indices) used by the LLVM tests."""
import numpy as np

from tilecraft.ir import (Broadcast, Buffer, BufferLoad, BufferStore, For, ForKind, PrimFunc, Ramp,
                          Var, const, convert)
from tilecraft.ir import dtype as dt

RNG = np.random.default_rng()   # a test module's seeded_ir_helpers fixture replaces it with the test's rng


def buf(name, shape, dtype="float32", scope="global"):
    return Buffer(name, tuple(shape), dtype, scope)


def ld(b, index, lanes=1):
    """``b[index]``, or ``b[ramp(index, 1, lanes)]`` when lanes > 1."""
    index = convert(index)
    if lanes > 1 and dt.lanes(index.dtype) == 1:
        index = Ramp(index, const(1, index.dtype), lanes)
    return BufferLoad(b, (index,), dt.with_lanes(b.dtype, dt.lanes(index.dtype)))


def st(b, index, value, lanes=1):
    index = convert(index)
    if lanes > 1 and dt.lanes(index.dtype) == 1:
        index = Ramp(index, const(1, index.dtype), lanes)
    return BufferStore(b, value, (index,))


def loop(var, extent, body, kind=ForKind.SERIAL, lo=0):
    return For(var, convert(lo, var.dtype), convert(extent, var.dtype), kind, body)


def func(name, params, body):
    return PrimFunc(name, tuple(params), body)


def rand(shape, dtype="float32", lo=-4.0, hi=4.0):
    """Random non-zero data (never all zeros: a kernel that does nothing must fail)."""
    d = np.dtype(dtype)
    if d.kind == "f":
        x = RNG.uniform(lo, hi, size=shape)
        x[x == 0] = 0.5
        return x.astype(d)
    if d.kind == "b":
        return RNG.integers(0, 2, size=shape).astype(bool)
    info = np.iinfo(d)
    x = RNG.integers(max(info.min, int(lo) * 25), min(info.max, int(hi) * 25) + 1, size=shape)
    x[x == 0] = 3
    return x.astype(d)


def poisoned(shape, dtype="float32"):
    """An output array filled with a value no correct kernel writes."""
    d = np.dtype(dtype)
    if d.kind == "f":
        return np.full(shape, np.nan, d)
    if d.kind == "b":
        return np.zeros(shape, d)
    return np.full(shape, np.iinfo(d).max - 1, d)


def splat(value, lanes):
    return Broadcast(convert(value), lanes)


__all__ = ["buf", "ld", "st", "loop", "func", "rand", "poisoned", "splat", "Var", "const"]
