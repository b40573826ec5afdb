"""LLVM types, constants and conversions for tilecraft dtypes (tables used by ``llvm.py``), and the
LLVM backend's error, :class:`CodegenError`.

In registers ``bool`` is ``i1``; in memory it is one byte (``i8``), as numpy stores it.
``float16`` is LLVM's ``half``. Vector dtypes map to LLVM vectors: ``"float32x8"`` → ``<8 x float>``.

>>> ll_type("float32x8"), mem_type("bool"), const_literal(1.5, "float32")
('<8 x float>', 'i8', '0x3FF8000000000000')
"""
from __future__ import annotations

import math
import struct
from functools import lru_cache

from ..ir import dtype as dt
from ..error import TVMError


class CodegenError(TVMError):
    """The IR cannot be compiled by the LLVM backend (the message says which node and why)."""


_SCALAR = {
    ("bool", 1): "i1", ("int", 8): "i8", ("int", 16): "i16", ("int", 32): "i32", ("int", 64): "i64",
    ("uint", 8): "i8", ("uint", 16): "i16", ("uint", 32): "i32", ("uint", 64): "i64",
    ("float", 16): "half", ("float", 32): "float", ("float", 64): "double",
    ("handle", 64): "ptr",
}
# the name LLVM's overloaded intrinsics use for an element type
_SUFFIX = {"i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64",
           "half": "f16", "float": "f32", "double": "f64", "ptr": "p0"}


@lru_cache(maxsize=None)
def ll_type(dtype: str) -> str:
    """The register type of a dtype."""
    code, bits, lanes = dt.parse(dtype)
    if code == "bfloat":
        raise CodegenError(f"{dtype} is not supported by the LLVM (CPU) backend yet: bfloat16 runs on the CUDA "
                           f"tensor-core path (mma.sync); compute in float32 on the CPU")
    t = _SCALAR[(code, bits)]
    return t if lanes == 1 else f"<{lanes} x {t}>"


@lru_cache(maxsize=None)
def mem_type(dtype: str) -> str:
    """The in-memory type of a dtype (bool is a byte)."""
    code, bits, lanes = dt.parse(dtype)
    if code == "bfloat":
        return ll_type(dtype)                   # the error above
    t = "i8" if code == "bool" else _SCALAR[(code, bits)]
    return t if lanes == 1 else f"<{lanes} x {t}>"


@lru_cache(maxsize=None)
def kind(dtype: str) -> str:
    """One letter that picks instructions: f(loat), s(igned), u(nsigned), b(ool)."""
    code = dt.parse(dtype)[0]
    return {"float": "f", "int": "s", "uint": "u", "bool": "b"}[code]


@lru_cache(maxsize=None)
def intrinsic_suffix(dtype: str) -> str:
    """``"float32"`` → ``"f32"``, ``"int32x8"`` → ``"v8i32"``."""
    code, bits, lanes = dt.parse(dtype)
    s = _SUFFIX[_SCALAR[(code, bits)]]
    return s if lanes == 1 else f"v{lanes}{s}"


def const_literal(value, dtype: str) -> str:
    """A scalar constant as LLVM text. Floats are written in hex, so they are exact."""
    code, bits, _ = dt.parse(dtype)
    if code == "bool":
        return "true" if value else "false"
    if code in ("int", "uint"):
        return str(int(value))
    v = float(value)
    if bits == 16:
        try:
            h = struct.unpack("<H", struct.pack("<e", v))[0]
        except OverflowError:
            h = 0x7C00 if v > 0 else 0xFC00
        return f"0xH{h:04X}"
    if bits == 32 and math.isfinite(v):
        try:
            v = struct.unpack("<f", struct.pack("<f", v))[0]
        except OverflowError:
            v = math.inf if v > 0 else -math.inf
    return f"0x{struct.unpack('<Q', struct.pack('<d', v))[0]:016X}"


def splat_literal(value, dtype: str) -> str:
    """A constant vector of ``dtype`` (a vector dtype) with every lane ``value``."""
    return f"splat ({ll_type(dt.element_of(dtype))} {const_literal(value, dtype)})"


def zero(dtype: str) -> str:
    return "zeroinitializer" if dt.lanes(dtype) > 1 else const_literal(0, dtype)


def cast_instruction(src: str, dst: str) -> str | None:
    """The one LLVM conversion instruction from ``src`` to ``dst`` (same lanes), or None when the
    conversion needs more than one instruction (to/from bool, or via float32) or none at all."""
    sc, sb, _ = dt.parse(src)
    dc, db, _ = dt.parse(dst)
    if sc == "bool" or dc == "bool":
        return None
    if sc in ("int", "uint") and dc in ("int", "uint"):
        if sb == db:
            return ""
        if sb > db:
            return "trunc"
        return "sext" if sc == "int" else "zext"
    if sc == "float" and dc == "float":
        return "" if sb == db else ("fptrunc" if sb > db else "fpext")
    if sc == "float":
        return "fptosi" if dc == "int" else "fptoui"
    return "sitofp" if sc == "int" else "uitofp"
