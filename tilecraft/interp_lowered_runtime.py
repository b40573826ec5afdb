"""The runtime of the lowered-IR interpreter: the functions the Python code that
``interp_lowered`` generates calls (bounds-checked and masked vector loads and stores, integer
division as C and TVM define it, casts, lazily evaluated selects, the iteration budget), its error
classes, and the namespace the generated code runs in.

>>> import numpy as np
>>> from tilecraft.interp_lowered_runtime import NAMESPACE
>>> NAMESPACE["_floordiv"](np.array([-7]), np.array([2]))
array([-4])
"""
from __future__ import annotations

import numpy as np

from .interp import fold_lanes, run_tensor_intrin, tile_view
from .ir import dtype as dt
from .ir import intrinsics
from .ir.expr import BinOp, trunc_divide, trunc_remainder
from .testing import poison

class LoweredInterpError(RuntimeError):
    """The lowered function cannot run: an out-of-bounds access, a division by zero, an
    unknown construct, or more loop iterations than the budget."""


class BudgetExceeded(LoweredInterpError):
    """The loop nest runs more iterations than the ``budget`` given to :func:`run`."""

    def __init__(self, msg: str, steps: int):
        super().__init__(msg)
        self.steps = steps



# ------------------------------------------------------------------------------------------------
# helpers the generated code calls

def _np(dtype: str) -> np.dtype:
    e = dt.element_of(dtype)
    return np.dtype(np.bool_ if e == "bool" else e)


def _is_index(dtype: str) -> bool:
    """Scalars of these dtypes may be Python ints in the generated code (exact index math)."""
    return dtype in ("int32", "int64")


def _oob(what, name, idx, size):
    raise LoweredInterpError(f"out-of-bounds {what} {name}[{idx}] (size {size})")


def _oob_dim(what, name, idxs, shape):
    raise LoweredInterpError(f"out-of-bounds {what} {name}[{', '.join(map(str, idxs))}] "
                             f"(shape {list(shape)})")


def _bad_size(name, got, want):
    raise LoweredInterpError(f"'{name}' has {want} elements by its shape, got an array of {got}")


def _flat_view(view):
    """``view`` (an n-d numpy view) as a 1-d view of the same memory, or None when its elements
    are not contiguous."""
    flat = view.reshape(-1)
    return flat if np.shares_memory(flat, view) or flat.size == 0 else None


def _vload(arr, idx, lanes, name, mask=None):
    """Lanes of ``arr`` at ``idx`` (an index per lane, or a scalar: lanes from there on)."""
    if np.ndim(idx) == 0:
        idx = int(idx) + _iota(lanes)
    live = idx if mask is None else idx[mask]
    if live.size and (live.min() < 0 or live.max() >= arr.size):
        bad = live[(live < 0) | (live >= arr.size)][0]
        _oob("load", name, int(bad), arr.size)
    if mask is None:
        return arr[idx]
    return np.where(mask, arr[np.where(mask, idx, 0)], np.zeros((), arr.dtype))


def _vstore(arr, idx, value, lanes, name):
    if np.ndim(idx) == 0:
        idx = int(idx) + _iota(lanes)
    if idx.min() < 0 or idx.max() >= arr.size:
        bad = idx[(idx < 0) | (idx >= arr.size)][0]
        _oob("store", name, int(bad), arr.size)
    arr[idx] = value


def _sload_masked(arr, idx, name, mask):
    """A scalar load under a vector mask: performed only if some lane needs it."""
    if not mask.any():
        return arr.dtype.type(0)
    if not 0 <= idx < arr.size:
        _oob("load", name, idx, arr.size)
    return arr[idx]


_IOTA: dict = {}


def _iota(lanes: int) -> np.ndarray:
    a = _IOTA.get(lanes)
    if a is None:
        a = _IOTA[lanes] = np.arange(lanes, dtype=np.int64)
    return a


def _ramp(base, stride, lanes, dtype):
    return (base + stride * _iota(lanes)).astype(dtype)


def _alloc(size, dtype):
    size = int(size)
    if size < 0:
        raise LoweredInterpError(f"allocation of {size} elements")
    return poison(size, dtype)


def _check_div(b, mask=None):
    if np.ndim(b) == 0:
        if b == 0:
            raise ZeroDivisionError
        return b
    zero = b == 0
    if mask is not None:
        zero &= mask
        b = np.where(mask, b, np.ones((), b.dtype))
    if zero.any():
        raise ZeroDivisionError
    return b


def _floordiv(a, b, mask=None):
    return a // _check_div(b, mask)


def _floormod(a, b, mask=None):
    return a % _check_div(b, mask)


def _truncdiv(a, b, mask=None):
    return trunc_divide(a, _check_div(b, mask))


def _truncmod(a, b, mask=None):
    return trunc_remainder(a, _check_div(b, mask))


def _fmin(a, b):
    return a if (a < b or a != a) else b     # NaN-propagating, as np.minimum


def _fmax(a, b):
    return a if (a > b or a != a) else b


def _cast_int(x, dtype):
    """An integer or bool scalar or vector to the integer ``dtype``, wrapping (C conversion);
    a Python int stays one for int32/int64."""
    if type(x) is int or type(x) is bool:
        if dtype in (np.int32, np.int64):
            bits = dtype.itemsize * 8
            x = int(x) & ((1 << bits) - 1)
            return x - (1 << bits) if x >> (bits - 1) else x
        return np.int64(x).astype(dtype)
    return x.astype(dtype)


def _float_to_int(x, dtype):
    return np.trunc(np.nan_to_num(x)).astype(dtype)


def _to_float(x, dtype):
    return x.astype(dtype) if type(x) is np.ndarray and x.ndim else dtype.type(x)


def _to_bool(x):
    return x != 0


def _reinterpret(x, src, dst):
    """``reinterpret``: the bytes of ``x`` (lanes of ``src``) read as ``dst``; one lane is a scalar."""
    out = np.ascontiguousarray(np.asarray(x, src)).reshape(-1).view(dst)
    return out if out.size > 1 else out[0]


def _lazy_select(cond, true_side, false_side):
    """A lazy vector select: each side is evaluated under its mask (a function of the mask)."""
    c = np.asarray(cond, bool)
    return np.where(c, true_side(c), false_side(~c))


def _lazy_select_masked(cond, outer, true_side, false_side):
    c = np.asarray(cond, bool)
    return np.where(c, true_side(outer & c), false_side(outer & ~c))


def _budget_exceeded(counter):
    raise BudgetExceeded(f"the loop nest runs more than {counter[1]} iterations (the budget)", counter[0])


NAMESPACE = {
    "np": np, "_oob": _oob, "_oob_dim": _oob_dim, "_vload": _vload, "_vstore": _vstore,
    "_sload_masked": _sload_masked, "_ramp": _ramp, "_alloc": _alloc, "_floordiv": _floordiv,
    "_floormod": _floormod, "_truncdiv": _truncdiv, "_truncmod": _truncmod, "_fmin": _fmin,
    "_fmax": _fmax, "_cast_int": _cast_int, "_float_to_int": _float_to_int, "_to_float": _to_float,
    "_to_bool": _to_bool, "_lazy_select": _lazy_select, "_lazy_select_masked": _lazy_select_masked,
    "_budget_exceeded": _budget_exceeded, "_iota": _iota, "_bad_size": _bad_size,
    "_intrinsic": intrinsics.evaluate, "_reinterpret": _reinterpret,
    "_view": tile_view, "_flat_view": _flat_view, "_run_intrin": run_tensor_intrin,
    "_vreduce": fold_lanes, "BinOp": BinOp,
}
