"""The bridge from compiled CPU code to packed Python functions (``ir/packed.py``).

Generated code calls one C function, ``__tilecraft_packed_call(name, nwords, words)``, a ctypes
callback made here, whose address the LLVM backend gives the JIT (``dispatcher_address``).
``words`` (``int64_t``) hold the arguments, each a tag and its payload:

    0, value                            an integer (bools included)
    1, bits                             a float, as the bits of a double
    2, address, dtype, ndim, shape...   an array: ``dtype`` indexes :data:`DTYPES`

Arrays reach the function as ``tilecraft.nd`` arrays viewing the compiled function's memory. The
callback returns the function's result (an int; None is 0) in ``*result`` and 0, or, when the
function raised, keeps the exception for the caller (:func:`take_error`, which the compiled
function's wrapper raises from) and returns 1.

Exported libraries cannot call back into a Python process that loads them later: building a
library whose code calls a packed function is refused (``codegen/export.py``).
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..ir import packed
from .device import cpu
from .ndarray import NDArray

SYMBOL = "__tilecraft_packed_call"
DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64")
TAG_INT, TAG_FLOAT, TAG_ARRAY = 0, 1, 2

_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32,
                              ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int32))
_errors = threading.local()
_callback = None


def _decode(n: int, words) -> list:
    args, k = [], 0
    while k < n:
        tag = words[k]
        if tag == TAG_INT:
            args.append(int(words[k + 1]))
            k += 2
        elif tag == TAG_FLOAT:
            args.append(float(np.array([words[k + 1]], np.int64).view(np.float64)[0]))
            k += 2
        else:
            addr, dtype, ndim = words[k + 1], np.dtype(DTYPES[words[k + 2]]), words[k + 3]
            shape = tuple(int(words[k + 4 + d]) for d in range(ndim))
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            raw = (ctypes.c_char * max(size, 1)).from_address(addr)
            args.append(np.frombuffer(raw, dtype=dtype, count=size // dtype.itemsize).reshape(shape))
            k += 4 + ndim
    return args


def _dispatch(name, n, words, result) -> int:
    try:
        result[0] = packed.call(name.decode(), _decode(n, words))
        return 0
    except BaseException as e:          # noqa: BLE001 - handed to the caller, never lost here
        _errors.pending = e
        return 1


def as_ndarray(a: np.ndarray) -> NDArray:
    """A numpy array (a view of a buffer) as the ``tilecraft.nd`` array packed functions get."""
    return NDArray(a, cpu(0))


packed.wrap_array = as_ndarray      # handed down to ir/packed.py (the interpreter calls through it)


def dispatcher_address() -> int:
    """The address of the C callback that generated code calls (made once per process)."""
    global _callback
    if _callback is None:
        _callback = _PROTOTYPE(_dispatch)
    return ctypes.cast(_callback, ctypes.c_void_p).value


def take_error():
    """The exception a packed function raised in this thread since the last call (or None)."""
    e = getattr(_errors, "pending", None)
    _errors.pending = None
    return e
