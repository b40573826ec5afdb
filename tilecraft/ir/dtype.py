"""Data types are plain strings: ``"float32"``, ``"int8"``, ``"bool"``, and vector types ``"float32x8"``.

``"handle"`` is an address (a buffer's ``data``, ``Buffer.access_ptr``, a string argument of
``call_extern``): neither integer, float nor bool, one lane, 64 bits.

Helpers here parse them once (cached) so the rest of the compiler can ask simple questions.
"""
from __future__ import annotations

from functools import lru_cache
from ..error import TVMError

SCALAR_TYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64")


# TVM's short names: te.compute(..., lambda i: A[i].astype("float")) is float32
ALIASES = {"float": "float32", "int": "int32", "uint": "uint32"}


class DTypeError(TypeError, TVMError):
    pass


@lru_cache(maxsize=None)
def parse(dtype: str) -> tuple[str, int, int]:
    """``"float32x8"`` → ``("float", 32, 8)``; ``"bool"`` → ``("bool", 1, 1)``."""
    if not isinstance(dtype, str):
        raise DTypeError(f"a dtype must be a string like 'float32', got {dtype!r}")
    base, lanes = dtype, 1
    if "x" in dtype:
        base, _, l = dtype.partition("x")
        if not l.isdigit() or int(l) < 1:
            raise DTypeError(f"malformed vector dtype {dtype!r}")
        lanes = int(l)
    if base == "bool":
        return "bool", 1, lanes
    if dtype == "handle":
        return "handle", 64, 1
    for code in ("float", "uint", "int"):
        if base.startswith(code):
            bits = base[len(code):]
            if base in SCALAR_TYPES:
                return code, int(bits), lanes
    raise DTypeError(f"unsupported dtype {dtype!r}: expected one of {', '.join(SCALAR_TYPES)}")


def normalize(dtype) -> str:
    """Accept numpy dtypes and Python types (and TVM's ``"float"``, ``"int"``); return the
    canonical string: ``normalize("float") == normalize(np.float32) == "float32"``."""
    if isinstance(dtype, str):
        dtype = ALIASES.get(dtype, dtype)
        parse(dtype)
        return dtype
    try:
        import numpy as np
        s = np.dtype(dtype).name
    except TypeError:
        raise DTypeError(f"unsupported dtype {dtype!r}") from None
    parse(s)
    return s


def is_float(dtype: str) -> bool:
    return parse(dtype)[0] == "float"


def is_int(dtype: str) -> bool:
    return parse(dtype)[0] in ("int", "uint")


def is_uint(dtype: str) -> bool:
    return parse(dtype)[0] == "uint"


def is_bool(dtype: str) -> bool:
    return parse(dtype)[0] == "bool"


def bits(dtype: str) -> int:
    return parse(dtype)[1]


def lanes(dtype: str) -> int:
    return parse(dtype)[2]


def element_of(dtype: str) -> str:
    return dtype.partition("x")[0] if "x" in dtype else dtype


def with_lanes(dtype: str, n: int) -> str:
    e = element_of(dtype)
    return e if n == 1 else f"{e}x{n}"


def nbytes(dtype: str) -> int:
    code, b, l = parse(dtype)
    return max(1, b // 8) * l


def max_value(dtype: str):
    code, b, _ = parse(dtype)
    if code == "float":
        return {16: 65504.0, 32: 3.4028234663852886e38, 64: 1.7976931348623157e308}[b]
    if code == "uint":
        return (1 << b) - 1
    if code == "bool":
        return True
    return (1 << (b - 1)) - 1


def min_value(dtype: str):
    code, b, _ = parse(dtype)
    if code == "float":
        return -max_value(dtype)
    if code == "uint":
        return 0
    if code == "bool":
        return False
    return -(1 << (b - 1))
