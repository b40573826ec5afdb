"""What a hybrid script's names mean when it runs as plain Python on numpy arrays (TVM's
``te.hybrid.runtime``): ``output_tensor`` and ``allocate`` make zero-filled arrays, every loop
construct is ``range``, the math intrinsics are numpy's.

The script runs with these names added to a *copy* of its globals (``run_python``): the module
that defined it never sees them.
"""
from __future__ import annotations

import math
import types

import numpy as np


def _output_tensor(shape, dtype="float32"):
    return np.zeros(tuple(int(s) for s in shape), dtype=dtype)


def _allocate(shape, dtype="float32", scope="global"):  # noqa: ARG001 - TVM's signature
    return np.zeros(tuple(int(s) for s in shape), dtype=dtype)


def _range(*args):
    return range(*(int(a) for a in args))


def _bind(tag, extent):  # noqa: ARG001
    return range(int(extent))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _ceil_div(a, b):
    return (a + b - 1) // b


def _popcount(x):
    """Set bits of an integer: of its dtype's width for numpy integers (int32 -1: 32), of a
    64-bit two's complement for Python ints."""
    if isinstance(x, (np.generic, np.ndarray)) and np.asarray(x).dtype.kind in "iu":
        from ...ir.intrinsics import evaluate
        return evaluate("popcount", [np.asarray(x)], str(np.asarray(x).dtype))[()]
    return bin(int(x) & 0xFFFFFFFFFFFFFFFF).count("1")


def _max_num_threads(allow_none=True):  # noqa: ARG001 - TVM's signature
    from ...target import Target
    t = Target.current()
    if t is None:
        raise RuntimeError("max_num_threads() needs a current target (with tvm.target.Target('cuda'))")
    return int(t.attrs.get("max_num_threads", 1024 if t.kind == "cuda" else 1))


def _cast(dtype):
    return lambda x: np.dtype(dtype).type(x)


HYBRID_GLOBALS = {
    "output_tensor": _output_tensor, "allocate": _allocate,
    "range": _range, "const_range": _range, "unroll": _range, "parallel": _range,
    "vectorize": _range, "bind": _bind,
    "sqrt": np.sqrt, "log": np.log, "exp": np.exp, "tanh": np.tanh, "sigmoid": _sigmoid,
    "power": np.power, "pow": np.power, "sin": np.sin, "cos": np.cos, "floor": np.floor,
    "ceil": np.ceil, "round": np.rint, "trunc": np.trunc, "fabs": np.abs, "abs": abs,
    "min": min, "max": max, "ceil_div": _ceil_div, "popcount": _popcount, "max_num_threads": _max_num_threads,
    "exp2": np.exp2, "log2": np.log2, "log10": np.log10, "erf": np.vectorize(math.erf),
    **{name: _cast(name) for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                      "uint64", "float16", "float32", "float64", "bool")},
}


def run_python(func, args):
    """Call the hybrid function ``func`` as plain Python on ``args`` (numpy arrays, numbers,
    lists), the hybrid names bound as above."""
    env = dict(func.__globals__)
    env.update(HYBRID_GLOBALS)
    plain = types.FunctionType(func.__code__, env, func.__name__, func.__defaults__, func.__closure__)
    with np.errstate(all="ignore"):
        return plain(*args)
