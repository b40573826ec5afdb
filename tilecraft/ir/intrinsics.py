"""The intrinsic table: every function a ``Call`` may name, once.

A row (:class:`Intrinsic`) says everything the compiler knows about one intrinsic:

* ``name`` (what ``Call.name`` holds) and ``arity``;
* the dtype rule: ``dtypes``, the element dtypes its arguments may have (all arguments share one
  dtype, scalar or vector), and ``result``, the result's element dtype (``SAME`` as the
  arguments, or a fixed one such as ``"bool"``);
* ``pure``: no side effects and no dependence on memory, so CSE may compute it once;
* ``reference``: the numpy function that defines its value. The reference interpreter, the
  lowered-IR interpreter and the CUDA emulator all evaluate it through :func:`evaluate` (float16
  computes in float32 and rounds once, as both backends do);
* per target, native or decomposed: ``llvm`` (:class:`LLVMLowering`: an overloaded LLVM
  intrinsic, a libm symbol, an inline float32-vector implementation of the code generator) and
  ``cuda`` (:class:`CUDALowering`: the C function per dtype). ``None`` means the target lacks it
  and the ``legalize`` pass (``schedule/passes/legalize.py``) replaces the call by ``expand``,
  a decomposition into other IR;
* ``ulps``: the largest error, in units in the last place of the result's dtype, any backend
  may make against the exact value; ``domain``: where its inputs are interesting. The test that
  walks this table (``tests/test_intrinsics_table.py``) holds every consumer to both.

How each target treats float16 math and float64 → float16 conversions is in :data:`TARGETS`.

Adding an intrinsic is one row here plus, where a target has it natively, its name in that
row's ``llvm=``/``cuda=``; the te constructor is one line in ``te/intrin.py``. Target
(hardware) intrinsics, such as the micro-kernels tensorize maps loop nests onto, belong in the
same table with ``kind="target"`` (see the end of :data:`TABLE`).

>>> from tilecraft.ir import intrinsics
>>> intrinsics.lookup("exp").llvm.intrinsic
'llvm.exp'
>>> intrinsics.evaluate("sigmoid", [np.zeros(3, "float16")], "float16")
array([0.5, 0.5, 0.5], dtype=float16)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import dtype as dt
from .dtype import DTypeError
from .expr import BinOp, Call, Expr, binary, const, convert, div, neg

SAME = "same"          # ``result``: the arguments' dtype
FLOATS = ("float16", "float32", "float64")


@dataclass(frozen=True)
class LLVMLowering:
    """How the LLVM backend computes an intrinsic natively (the first that applies):
    ``vector_f32``, a method of the code generator for float32 vectors (LLVM would call libm once
    per lane); ``intrinsic``, an overloaded LLVM intrinsic (``llvm.exp`` → ``llvm.exp.v8f32``),
    elementwise on vectors; ``libm``, a libm function for float64 (float32 appends ``f``), called
    lane by lane; ``inline``, a method of the code generator for every dtype."""
    intrinsic: str | None = None
    libm: str | None = None
    vector_f32: str | None = None
    inline: str | None = None


@dataclass(frozen=True)
class CUDALowering:
    """The CUDA C function for float32 and for float64 arguments (float16 computes in float32:
    ``TARGETS["cuda"]``); for an integer intrinsic, ``float32`` is the 32-bit function and
    ``float64`` the 64-bit one (``__popc`` / ``__popcll``): :meth:`function`."""
    float32: str
    float64: str

    def function(self, element_dtype: str) -> str:
        """The C function for arguments of ``element_dtype``: the 64-bit one for 64-bit dtypes."""
        return self.float64 if element_dtype in ("float64", "int64", "uint64") else self.float32


@dataclass(frozen=True)
class Intrinsic:
    """One row of the table (the module docstring explains the fields)."""
    name: str
    arity: int
    dtypes: tuple
    reference: Callable
    result: str = SAME
    pure: bool = True
    llvm: LLVMLowering | None = None
    cuda: CUDALowering | None = None
    expand: Callable | None = None      # (args, dtype) -> Expr, for targets without it
    ulps: float = 1.0
    domain: tuple = (-10.0, 10.0)
    kind: str = "math"                  # "math" (te has it), "builtin" (compiler), "target"
    doc: str = ""

    def result_dtype(self, arg_dtype: str) -> str:
        """The result dtype for arguments of ``arg_dtype`` (lanes kept): ``float32x8`` → ``boolx8``
        for ``isnan``."""
        if self.result == SAME:
            return arg_dtype
        return dt.with_lanes(self.result, dt.lanes(arg_dtype))

    def native_on(self, target: str) -> bool:
        """Whether ``target`` (``"llvm"``, ``"cuda"``) computes it without ``expand``."""
        return getattr(self, target) is not None


@dataclass(frozen=True)
class TargetRules:
    """What ``legalize`` does for one target besides expanding the intrinsics it lacks.

    ``float16_math_in_float32``: float16 intrinsics compute in float32 and round once.
    ``float64_to_float16``: ``"native"`` (the backend converts in one rounding, CUDA's
    ``__double2half``) or ``"round_to_odd"`` (through float32 rounded to odd, so the second
    rounding is exact; LLVM would call compiler-rt's ``__truncdfhf2``, which a JIT process may
    lack)."""
    float16_math_in_float32: bool
    float64_to_float16: str


TARGETS = {
    "llvm": TargetRules(float16_math_in_float32=True, float64_to_float16="round_to_odd"),
    "cuda": TargetRules(float16_math_in_float32=True, float64_to_float16="native"),
}


# --- numpy references ----------------------------------------------------------------------------
# float32 arguments compute in float64 and round once: the reference is correctly rounded up to
# float64's own error (numpy's float32 loops are up to 3 ulps off), so every backend is held to
# the same truth on every machine.

def _in_float64(fn):
    def reference(*args):
        if args[0].dtype == np.float32:
            return fn(*(a.astype(np.float64) for a in args)).astype(np.float32)
        return fn(*args)
    reference.__name__ = getattr(fn, "__name__", "reference")
    return reference


def _erf(x):
    return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x


def _pow(x, y):
    """``np.power`` with C's (and LLVM's, CUDA's) values where a base is -inf: numpy takes an
    array to the scalar power 0.5 as a square root, so ``pow(-inf, 0.5)`` is nan there; C gives
    inf (and -inf / -0 for odd integer powers)."""
    r = np.power(x, y)
    neg_inf = np.isneginf(x) & ~np.isnan(y)
    if np.any(neg_inf):
        x, y = np.broadcast_arrays(x, y)
        odd = (np.mod(y, 2) == 1) | (np.mod(y, 2) == -1)
        mag = np.where(y > 0, np.inf, np.where(y < 0, 0.0, 1.0)).astype(r.dtype)
        r = np.where(neg_inf, np.where(odd, -mag, mag), r).astype(r.dtype)
    return r


def _rsqrt(x):
    return 1 / np.sqrt(x)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _fma(a, b, c):
    """``a * b + c`` rounded once (C's ``fma``)."""
    if a.dtype == np.float64:
        return _fma_float64(a, b, c)
    # the float32 product is exact in float64; the sum is exact as s + err (TwoSum), and s
    # rounded to odd with err's sign keeps the one rounding to float32 correct
    p = a.astype(np.float64) * b.astype(np.float64)
    c = c.astype(np.float64)
    s = p + c
    v = s - p
    err = (p - (s - v)) + (c - v)
    bits = s.view(np.int64)
    nudge = np.isfinite(err) & (err != 0) & ((bits & 1) == 0)
    s = np.where(nudge, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(np.float32)


def _fma_exact(a, b, c):
    from fractions import Fraction
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    try:
        return float(exact)                          # correctly rounded
    except OverflowError:
        return math.inf if exact > 0 else -math.inf


_fma_float64 = np.vectorize(_fma_exact, otypes=[np.float64])


def _round_to_float32_odd(x):
    """float64 → float32, rounded to odd: an inexact nearest result with an even mantissa is
    replaced by its odd neighbour on the other side of the exact value."""
    x = np.asarray(x, np.float64)
    near = x.astype(np.float32)
    back = near.astype(np.float64)
    bits = near.view(np.int32)
    inexact = (back != x) & ~np.isnan(x)
    fix = inexact & ((bits & 1) == 0)
    step = np.where(np.abs(back) > np.abs(x), np.int32(-1), np.int32(1))
    return np.where(fix, bits + step, bits).astype(np.int32).view(np.float32)


# --- decompositions, for targets without a native form -----------------------------------------

def _expand_rsqrt(args, dtype):
    (x,) = args
    return div(const(1.0, dt.element_of(dtype)), Call("sqrt", (x,), dtype))


def _expand_sigmoid(args, dtype):
    (x,) = args
    one = const(1.0, dt.element_of(dtype))
    return div(one, binary(BinOp.ADD, one, Call("exp", (neg(x),), dtype)))


def _expand_isnan(args, dtype):
    (x,) = args
    return binary(BinOp.NE, x, x)


def _popcount(x):
    """The number of set bits of each element (of its two's-complement bits when signed), in the
    element's own dtype (TVM's ``tir.popcount``)."""
    x = np.asarray(x)
    u = x.view(np.dtype(f"uint{x.dtype.itemsize * 8}"))
    if hasattr(np, "bitwise_count"):                      # numpy >= 2.0
        return np.bitwise_count(u).astype(x.dtype)
    count = np.zeros(u.shape, np.uint64)
    u = u.astype(np.uint64)
    for _ in range(x.dtype.itemsize * 8):
        count += u & np.uint64(1)
        u = u >> np.uint64(1)
    return count.astype(x.dtype)


def _expand_likely(args, dtype):
    return args[0]


def _math(name, reference, *, llvm=None, cuda=None, arity=1, expand=None, ulps=2.0,
          domain=(-10.0, 10.0), result=SAME, doc=""):
    return Intrinsic(name, arity, FLOATS, reference, result=result, llvm=llvm, cuda=cuda,
                     expand=expand, ulps=ulps, domain=domain, doc=doc)


L, C = LLVMLowering, CUDALowering

# ulps: CUDA's documented maximum errors (CUDA C Programming Guide, "Mathematical Functions"),
# which bound the libm and inline LLVM forms too
TABLE = (
    _math("exp", _in_float64(np.exp), llvm=L(intrinsic="llvm.exp", vector_f32="vector_expf"), cuda=C("expf", "exp"),
          domain=(-90.0, 90.0)),
    _math("exp2", _in_float64(np.exp2), llvm=L(intrinsic="llvm.exp2"), cuda=C("exp2f", "exp2"), domain=(-130.0, 130.0)),
    _math("log", _in_float64(np.log), llvm=L(intrinsic="llvm.log", vector_f32="vector_logf"), cuda=C("logf", "log"),
          domain=(0.0, 1e4)),
    _math("log2", _in_float64(np.log2), llvm=L(intrinsic="llvm.log2"), cuda=C("log2f", "log2"), domain=(0.0, 1e4)),
    _math("log10", _in_float64(np.log10), llvm=L(intrinsic="llvm.log10"), cuda=C("log10f", "log10"), domain=(0.0, 1e4)),
    _math("sqrt", _in_float64(np.sqrt), llvm=L(intrinsic="llvm.sqrt"), cuda=C("sqrtf", "sqrt"), ulps=0.5, domain=(0.0, 1e4)),
    _math("rsqrt", _in_float64(_rsqrt), cuda=C("rsqrtf", "rsqrt"), expand=_expand_rsqrt, domain=(0.0, 1e4)),
    _math("tanh", _in_float64(np.tanh), llvm=L(libm="tanh", vector_f32="vector_tanhf"), cuda=C("tanhf", "tanh"),
          domain=(-10.0, 10.0)),
    _math("sigmoid", _in_float64(_sigmoid), expand=_expand_sigmoid, ulps=4.0, domain=(-20.0, 20.0),
          doc="1 / (1 + exp(-x))"),
    _math("erf", _erf, llvm=L(libm="erf", vector_f32="vector_erff"), cuda=C("erff", "erf"), domain=(-4.0, 4.0)),
    _math("floor", np.floor, llvm=L(intrinsic="llvm.floor"), cuda=C("floorf", "floor"), ulps=0.0),
    _math("ceil", np.ceil, llvm=L(intrinsic="llvm.ceil"), cuda=C("ceilf", "ceil"), ulps=0.0),
    _math("round", np.rint, llvm=L(intrinsic="llvm.roundeven"), cuda=C("rintf", "rint"), ulps=0.0,
          doc="rounds half to even, like numpy"),
    _math("trunc", np.trunc, llvm=L(intrinsic="llvm.trunc"), cuda=C("truncf", "trunc"), ulps=0.0),
    _math("sin", _in_float64(np.sin), llvm=L(intrinsic="llvm.sin"), cuda=C("sinf", "sin"), domain=(-7.0, 7.0)),
    _math("cos", _in_float64(np.cos), llvm=L(intrinsic="llvm.cos"), cuda=C("cosf", "cos"), domain=(-7.0, 7.0)),
    _math("fabs", np.abs, llvm=L(intrinsic="llvm.fabs"), cuda=C("fabsf", "fabs"), ulps=0.0),
    _math("pow", _in_float64(_pow), llvm=L(intrinsic="llvm.pow"), cuda=C("powf", "pow"), arity=2, ulps=4.0,
          domain=(0.0, 4.0)),
    _math("fma", _fma, llvm=L(intrinsic="llvm.fma"), cuda=C("fmaf", "fma"), arity=3, ulps=0.5,
          doc="a * b + c rounded once"),
    _math("isnan", np.isnan, cuda=C("isnan", "isnan"), expand=_expand_isnan, result="bool", ulps=0.0),
    Intrinsic("popcount", 1, ("int32", "uint32", "int64", "uint64"), _popcount, llvm=L(intrinsic="llvm.ctpop"),
              cuda=C("__popc", "__popcll"), ulps=0.0, domain=(-2.0 ** 31, 2.0 ** 31 - 1),
              doc="the number of set bits (TVM's tir.popcount; the hybrid script's popcount)"),
    # --- compiler builtins ----------------------------------------------------------------------
    Intrinsic("likely", 1, ("bool",), lambda x: x, expand=_expand_likely, ulps=0.0, kind="builtin",
              doc="its argument; a hint that the condition usually holds (TVM's tir.likely)"),
    Intrinsic("round_to_float32_odd", 1, ("float64",), _round_to_float32_odd, result="float32",
              llvm=L(inline="float64_to_float32_odd"), ulps=0.0, domain=(-7e4, 7e4), kind="builtin",
              doc="float64 → float32 rounded to odd; legalize puts it under a float64 → float16 "
                  "cast where the target has no direct conversion, so the second rounding is exact"),
    # --- target intrinsics ----------------------------------------------------------------------
    # Hardware instructions (vector FMA tiles, int8 dot products, tensor-core mma.sync, ...) go
    # here with kind="target": a native lowering on the targets that have the instruction (e.g.
    # llvm=L(intrinsic="llvm.x86.avx512.vpdpbusd.512"), plus the target features it needs) and
    # a reference, so the interpreters and the emulator run them by their definition.
)

INTRINSICS = {row.name: row for row in TABLE}
PURE_CALLS = frozenset(row.name for row in TABLE if row.pure)


def lookup(name: str) -> Intrinsic | None:
    """The row named ``name``, or None for a call outside the table (a GPU builtin, an extern).

    >>> lookup("erf").cuda.float32
    'erff'
    """
    return INTRINSICS.get(name)


_COUNT = {1: "a", 2: "two", 3: "three"}


def _dtype_words(row: Intrinsic) -> str:
    return "float" if row.dtypes == FLOATS else "/".join(row.dtypes)


def call(name: str, *args, api: str | None = None) -> Call:
    """A checked call of the intrinsic ``name``: the arity and the dtype rule of its row. Python
    numbers take the dtype of the first expression argument. ``api`` names the function the user
    called, for the message (``te.power``; ``te.<name>`` by default).

    >>> call("exp", te.placeholder((4,), name="A")[0])
    exp(A[0])
    """
    row = INTRINSICS[name]
    api = api or f"te.{name}"
    if len(args) != row.arity:
        raise DTypeError(f"{api} takes {row.arity} argument{'s' if row.arity > 1 else ''}, got {len(args)}")
    first = next((a for a in args if isinstance(a, Expr)), None)
    args = tuple(convert(a, None if first is None else dt.element_of(first.dtype)) for a in args)
    d = args[0].dtype
    if row.arity == 1:
        if dt.element_of(d) not in row.dtypes:
            raise DTypeError(f"{api} needs {_COUNT[1]} {_dtype_words(row)} argument, got `{args[0]}` of dtype {d}; "
                             f"cast it first with .astype('{row.dtypes[min(1, len(row.dtypes) - 1)]}')")
    elif any(a.dtype != d for a in args) or dt.element_of(d) not in row.dtypes:
        got = [a.dtype for a in args]
        raise DTypeError(f"{api} needs {_COUNT.get(row.arity, row.arity)} {_dtype_words(row)} arguments of one "
                         f"dtype, got {', '.join(got[:-1])} and {got[-1]}")
    return Call(name, args, row.result_dtype(d))


def evaluate(name: str, args: list, dtype: str):
    """The value of ``name(*args)`` as a numpy array of ``dtype``'s element type, by the row's
    reference: float16 arguments compute in float32 and the result rounds once. Raises KeyError
    for a name outside the table (each caller names the intrinsic in its own error).

    >>> evaluate("exp", [np.float32(1.0)], "float32")
    2.7182817
    """
    fn = INTRINSICS[name].reference
    args = [np.asarray(a) for a in args]
    if any(a.dtype == np.float16 for a in args):
        args = [a.astype(np.float32) for a in args]
    el = dt.element_of(dtype)
    with np.errstate(all="ignore"):
        return np.asarray(fn(*args)).astype(np.bool_ if el == "bool" else np.dtype(el), copy=False)


# CUDA's fast-math versions of table rows (``__expf``: fewer ulps of accuracy, same function)
CUDA_FAST_MATH = {"__expf": "exp", "__logf": "log", "__log2f": "log2", "__log10f": "log10",
                  "__sinf": "sin", "__cosf": "cos", "__powf": "pow"}


def intrinsic_of_cuda_function(symbol: str) -> str | None:
    """The row whose CUDA C function ``symbol`` is (its float32 or float64 name, or a fast-math
    version), or None: what the CUDA emulator evaluates ``call_pure_extern("float32", "__expf",
    x)`` by (TVM's intrin_math tutorial calls CUDA's math library directly).

    >>> intrinsic_of_cuda_function("logf"), intrinsic_of_cuda_function("__expf")
    ('log', 'exp')
    """
    if symbol in CUDA_FAST_MATH:
        return CUDA_FAST_MATH[symbol]
    for row in TABLE:
        if row.cuda is not None and symbol in (row.cuda.float32, row.cuda.float64):
            return row.name
    return None
