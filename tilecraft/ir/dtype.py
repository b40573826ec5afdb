"""Data types are plain strings: ``"float32"``, ``"int8"``, ``"bool"``, and vector types ``"float32x8"``.

``"bfloat16"`` (8 exponent bits like float32, 7 mantissa bits) is a float type; numpy has none,
so the interpreters and the emulator hold its values in float32 arrays, each rounded to a
bfloat16 (to nearest, ties to even: :func:`round_bfloat16`) where a value becomes one.

``"handle"`` is an address (a buffer's ``data``, ``Buffer.access_ptr``, a string argument of
``call_extern``): neither integer, float nor bool, one lane, 64 bits.

Helpers here parse them once (cached) so the rest of the compiler can ask simple questions.
"""
from __future__ import annotations

from functools import lru_cache
from ..error import TVMError

SCALAR_TYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64", "bfloat16")


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
    for code in ("bfloat", "float", "uint", "int"):
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
    return parse(dtype)[0] in ("float", "bfloat")


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
    if code == "bfloat":
        return 3.3895313892515355e38
    if code == "float":
        return {16: 65504.0, 32: 3.4028234663852886e38, 64: 1.7976931348623157e308}[b]
    if code == "uint":
        return (1 << b) - 1
    if code == "bool":
        return True
    return (1 << (b - 1)) - 1


def min_value(dtype: str):
    code, b, _ = parse(dtype)
    if code in ("float", "bfloat"):
        return -max_value(dtype)
    if code == "uint":
        return 0
    if code == "bool":
        return False
    return -(1 << (b - 1))


def numpy_name(dtype: str) -> str:
    """The numpy dtype name that holds ``dtype``'s elements: itself, or ``float32`` for bfloat16
    (whose values are kept rounded to bfloat16)."""
    e = element_of(dtype)
    return "float32" if e == "bfloat16" else e


def round_bfloat16(x):
    """``x`` (numpy, any float) rounded to bfloat16 (to nearest, ties to even; NaN stays NaN),
    as float32: the value a ``__float2bfloat16_rn`` gives.

    >>> float(round_bfloat16(np.float32(1.00390625)))     # 1 + 2^-8: a tie, to the even 1.0
    1.0
    """
    import numpy as np
    f = np.asarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    out = r.view(np.float32)
    return np.where(np.isnan(f), f, out).astype(np.float32)
