"""The calls of the IR that are not math: each named once here, with its argument and dtype rule.

A tensor intrinsic's lowering (``te.decl_tensor_intrin``) calls the hardware or a micro-kernel
through these; every backend and evaluator looks them up by ``Call.name``:

=========================  ==================================================================
``call_extern``            a C function: ``Call("call_extern", (StringImm(symbol), *args), dtype)``;
                           the symbol is resolved in the built module (``pragma import_llvm``) or
                           in the process. It may read and write memory through its pointer
                           arguments (``Buffer.access_ptr``).
``call_pure_extern``       the same, for a function whose result depends only on its arguments
                           and that has no effect.
``call_llvm_intrin``       an LLVM intrinsic: ``(StringImm(name), Const(n, "uint32"), *args)``;
                           ``name`` is LLVM's (``"llvm.x86.avx512.vpdpbusd.512"``,
                           ``"llvm.fma.v16f32"``). ``n`` is TVM's signature count: the types of
                           the first ``n`` arguments are LLVM's overload suffix, appended to a
                           name that lacks it (``llvm.fma`` with a float32x8 argument and
                           ``n = 1`` is ``llvm.fma.v8f32``). The result has ``dtype``.
``call_llvm_pure_intrin``  the same, for an intrinsic without effects.
``reinterpret``            ``Call("reinterpret", (value,), dtype)``: the bits of ``value`` read as
                           ``dtype``, of the same total size (TVM's ``tir.reinterpret``): four
                           ``uint8`` lanes as one ``int32``, ``int8x64`` as ``int32x16``, what
                           the operands of an int8 dot-product instruction need. It names no
                           symbol.
=========================  ==================================================================

None of them is evaluated by the interpreters: a tensorized region runs there by the
intrinsic's TE definition (``interp.run_tensor_intrin``). The calls are never merged, moved or
dropped by CSE and dead-code removal (they are not in ``cse.PURE_CALLS``).

>>> call_extern("int32", "gemv_update", Cb.access_ptr("w"), Ab.access_ptr("r"), 16)
>>> call_llvm_pure_intrin("float32x8", "llvm.fma.v8f32", a, b, c)
>>> reinterpret("int32", Ab.vload([0], "uint8x4"))
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from . import dtype as dt
from .expr import AccessPtr, Call, Const, Expr, StringImm, Var, convert, const

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]*\Z")


@dataclass(frozen=True)
class Builtin:
    """One builtin call: its name, whether it is pure, and what its first arguments are."""
    name: str
    pure: bool
    symbol_kind: str          # what the StringImm first argument names: "C function", "LLVM intrinsic";
                              # "" for a call without one (reinterpret)
    doc: str


BUILTINS = {b.name: b for b in (
    Builtin("call_extern", False, "C function", "a C function, resolved in the module or the process"),
    Builtin("call_pure_extern", True, "C function", "a C function without effects"),
    Builtin("call_llvm_intrin", False, "LLVM intrinsic", "an LLVM intrinsic by name"),
    Builtin("call_llvm_pure_intrin", True, "LLVM intrinsic", "an LLVM intrinsic without effects"),
    Builtin("reinterpret", True, "", "the bits of a value as another dtype of the same size"),
)}
EXTERN_CALLS = frozenset({"call_extern", "call_pure_extern"})
LLVM_INTRIN_CALLS = frozenset({"call_llvm_intrin", "call_llvm_pure_intrin"})


def _args(kind: str, symbol: str, args) -> tuple:
    out = []
    for k, a in enumerate(args):
        if isinstance(a, str):
            raise TypeError(f"{kind}('{symbol}'): argument {k} is the string {a!r}; only the "
                            f"function's name may be a string")
        try:
            out.append(convert(a))
        except TypeError:
            raise TypeError(f"{kind}('{symbol}'): argument {k} must be an expression or a number, "
                            f"got {type(a).__name__} {a!r}") from None
    return tuple(out)


def _extern(kind: str, dtype, func_name, args) -> Call:
    if not isinstance(func_name, str) or not _SYMBOL.match(func_name):
        raise ValueError(f"{kind}: the function name must be a C identifier, got {func_name!r}")
    return Call(kind, (StringImm(func_name),) + _args(kind, func_name, args), dt.normalize(dtype))


def call_extern(dtype, func_name: str, *args) -> Call:
    """Call the C function ``func_name`` (defined in LLVM IR linked with ``pragma import_llvm``,
    or loaded in the process) for its result of ``dtype`` or its effect.

    >>> ib.emit(call_extern("int32", "gemv_update", cc.access_ptr("w"), aa.access_ptr("r"), m))
    """
    return _extern("call_extern", dtype, func_name, args)


def call_pure_extern(dtype, func_name: str, *args) -> Call:
    """Like :func:`call_extern`, for a function without effects (its result depends only on
    its arguments): ``call_pure_extern("float32", "expf", x)``."""
    return _extern("call_pure_extern", dtype, func_name, args)


def _llvm_intrin(kind: str, dtype, name, args) -> Call:
    if not isinstance(name, str) or not name.startswith("llvm.") or not _SYMBOL.match(name):
        raise ValueError(f"{kind}: the name must be an LLVM intrinsic's, such as 'llvm.fma.v8f32' "
                         f"or 'llvm.x86.avx2.pmadd.wd', got {name!r}")
    args = _args(kind, name, args)
    if args and isinstance(args[0], Const) and args[0].dtype == "uint32":
        nsig, args = args[0], args[1:]        # TVM's signature count
    else:
        nsig = const(0, "uint32")
    if nsig.value > len(args):
        raise ValueError(f"{kind}('{name}'): the signature count {nsig.value} exceeds the "
                         f"{len(args)} argument(s)")
    return Call(kind, (StringImm(name), nsig) + args, dt.normalize(dtype))


def call_llvm_intrin(dtype, name: str, *args) -> Call:
    """Call the LLVM intrinsic ``name`` (LLVM's own name) with a result of ``dtype``. A first
    argument that is a ``uint32`` constant is TVM's signature count (see the module docstring).

    >>> call_llvm_intrin("int32x16", "llvm.x86.avx512.vpdpbusd.512", c, a, b)
    """
    return _llvm_intrin("call_llvm_intrin", dtype, name, args)


def call_llvm_pure_intrin(dtype, name: str, *args) -> Call:
    """Like :func:`call_llvm_intrin`, for an intrinsic without effects (most are):
    ``call_llvm_pure_intrin("float32x8", "llvm.fma.v8f32", a, b, c)``."""
    return _llvm_intrin("call_llvm_pure_intrin", dtype, name, args)


def reinterpret(dtype, value) -> Call:
    """The bits of ``value`` read as ``dtype`` (TVM's ``tir.reinterpret``); both hold the same
    number of bits: ``reinterpret("int32", Ab.vload([0], "uint8x4"))`` is four bytes as one
    ``int32`` (the first byte the lowest), ``reinterpret("int32x16", Bb.vload([0, 0], "int8x64"))``
    64 bytes as 16 ``int32`` lanes. Booleans and handles have no bits to read.

    >>> reinterpret("float32", tir.const(0x3F800000, "int32"))      # 1.0
    """
    dtype = dt.normalize(dtype)
    try:
        value = convert(value)
    except TypeError:
        raise TypeError(f"reinterpret: the value must be an expression or a number, got "
                        f"{type(value).__name__} {value!r}") from None
    for d in (dtype, value.dtype):
        if dt.is_bool(d) or d == "handle":
            raise ValueError(f"reinterpret of `{value}` ({value.dtype}) as {dtype}: {d} has no bits to "
                             f"reinterpret; use a cast")
    have, want = dt.bits(value.dtype) * dt.lanes(value.dtype), dt.bits(dtype) * dt.lanes(dtype)
    if have != want:
        raise ValueError(f"reinterpret of `{value}` ({value.dtype}, {have} bits) as {dtype} ({want} bits): "
                         f"the sizes differ")
    return Call("reinterpret", (value,), dtype)


def call_intrin(dtype, func_name: str, *args) -> Call:
    """A builtin of this table or a math function by name (TVM's ``tir.call_intrin``; a
    ``"tir."`` prefix is accepted): ``call_intrin("float32", "tir.exp", x)``."""
    from .cse import PURE_CALLS
    name = func_name[4:] if isinstance(func_name, str) and func_name.startswith("tir.") else func_name
    if name == "reinterpret":
        if len(args) != 1:
            raise ValueError(f"call_intrin('{func_name}') takes one argument, got {len(args)}")
        return reinterpret(dtype, args[0])
    if name in BUILTINS:
        if not args or not isinstance(args[0], (str, StringImm)):
            raise ValueError(f"call_intrin('{func_name}'): the first argument is the "
                             f"{BUILTINS[name].symbol_kind}'s name")
        first = args[0].value if isinstance(args[0], StringImm) else args[0]
        make = {"call_extern": call_extern, "call_pure_extern": call_pure_extern,
                "call_llvm_intrin": call_llvm_intrin, "call_llvm_pure_intrin": call_llvm_pure_intrin}[name]
        return make(dtype, first, *args[1:])
    if name in WARP_BUILTINS:
        return call_warp_builtin(name, args)
    if name in ASYNC_COPY_BUILTINS:
        return call_async_copy(name, args)
    if name in BLOCK_BUILTINS:
        return call_block_builtin(name, args)
    if name in PURE_CALLS:
        return Call(name, _args("call_intrin", name, args), dt.normalize(dtype))
    from .intrin_rules import is_registered_op
    if is_registered_op(name):          # declared by register_op_attr / register_intrin_lowering
        return Call(name, _args("call_intrin", name, args), dt.normalize(dtype))
    raise ValueError(f"call_intrin: unknown intrinsic {func_name!r} (declare a new one with "
                     f"tvm.ir.register_op_attr({func_name!r}, 'TCallEffectKind', ...)); known: "
                     f"{', '.join(sorted(BUILTINS) + sorted(WARP_BUILTINS) + sorted(ASYNC_COPY_BUILTINS) + sorted(BLOCK_BUILTINS))}, "
                     f"{', '.join(sorted(PURE_CALLS))}")


# ------------------------------------------------------------------------------------------------
# GPU tensor-core calls: warp-collective (all 32 threads of a warp call them together, with the
# same arguments) on *fragments*, buffers in one of FRAGMENT_SCOPES that only these calls touch.
# A fragment holds 16 x 16 tiles (m x k for matrix_a, k x n for matrix_b, m x n for the
# accumulator); ``index`` picks one tile of a fragment buffer (TVM's ``elem_offset // 256``).
# Argument kinds, checked when the call is built:
#   frag    a fragment buffer's ``data``        shape   an integer constant (m, n, k)
#   index   which tile of the fragment (int)    ptr     Buffer.access_ptr of the tile in memory
#   stride  the memory tile's row stride        layout  "row_major" or "col_major"
#   value   the fill value (a number)

FRAGMENT_SCOPES = frozenset({"wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator",
                             "mma.matrix_a", "mma.matrix_b", "mma.accumulator", "wgmma.accumulator"})
LAYOUTS = ("row_major", "col_major")


@dataclass(frozen=True)
class WarpBuiltin:
    """One warp-collective tensor-core call: its name, the kind of each argument, what it does."""
    name: str
    params: tuple
    doc: str


WARP_BUILTINS = {b.name: b for b in (
    # TVM's wmma calls (nvcuda::wmma in CUDA C), fragments in the wmma.* scopes
    WarpBuiltin("tvm_fill_fragment", ("frag", "shape", "shape", "shape", "index", "value"),
                "set every element of the fragment tile to value"),
    WarpBuiltin("tvm_load_matrix_sync",
                ("frag", "shape", "shape", "shape", "index", "ptr", "stride", "layout"),
                "load the fragment tile from memory (rows `stride` elements apart; col_major: "
                "the memory holds its transpose)"),
    WarpBuiltin("tvm_mma_sync", ("frag", "index") * 4, "d[di] = a[ai] @ b[bi] + c[ci]"),
    WarpBuiltin("tvm_store_matrix_sync",
                ("frag", "shape", "shape", "shape", "index", "ptr", "stride", "layout"),
                "store the accumulator tile to memory"),
    # the PTX path (ldmatrix, mma.sync.m16n8k16, per-lane stores), fragments in the mma.* scopes
    WarpBuiltin("tc_ldmatrix", ("frag", "index", "ptr", "stride", "layout"),
                "ldmatrix.x4 (.trans for a tile stored the other way) of a 16 x 16 tile in shared memory"),
    WarpBuiltin("tc_mma_sync", ("frag", "index") * 4,
                "d[di] = a[ai] @ b[bi] + c[ci] as two mma.sync.aligned.m16n8k16 (fp32 accumulation)"),
    WarpBuiltin("tc_mma_fill", ("frag", "index", "value"), "set the accumulator tile to value"),
    WarpBuiltin("tc_mma_store", ("frag", "index", "ptr", "stride"),
                "store the accumulator tile, row-major, each lane its own elements"),
)}


# ------------------------------------------------------------------------------------------------
# Asynchronous copies (PTX ``cp.async``, sm_80 and later): each thread copies global memory into
# shared memory without going through registers, and waits for its own copies by groups.
#   tc_cp_async(dst, src, bytes)   start copying ``bytes`` (4, 8 or 16, aligned to that) from ``src``
#                                  (an access_ptr into global memory) to ``dst`` (into shared memory)
#   tc_cp_async_zfill(dst, src, bytes, pred)
#                                  the same copy where ``pred`` holds; else ``bytes`` zeros land in
#                                  ``dst`` and ``src`` is not read (src-size 0: a padded fetch)
#   tc_cp_async_commit()           the copies this thread started since its last commit form a group
#   tc_cp_async_wait(n)            wait until at most the newest ``n`` of this thread's groups are in
#                                  flight; the others have landed (a barrier then shows them to the block)

@dataclass(frozen=True)
class AsyncCopyBuiltin:
    """One per-thread asynchronous-copy call: its name, the kind of each argument, what it does."""
    name: str
    params: tuple
    doc: str


ASYNC_COPY_BUILTINS = {b.name: b for b in (
    AsyncCopyBuiltin("tc_cp_async", ("dst", "src", "bytes"),
                     "start copying `bytes` bytes from global `src` to shared `dst` (cp.async)"),
    AsyncCopyBuiltin("tc_cp_async_zfill", ("dst", "src", "bytes", "pred"),
                     "copy `bytes` bytes from global `src` to shared `dst` where `pred` holds, else fill them "
                     "with zeros without reading `src` (cp.async with src-size 0)"),
    AsyncCopyBuiltin("tc_cp_async_commit", (), "close this thread's group of copies (cp.async.commit_group)"),
    AsyncCopyBuiltin("tc_cp_async_wait", ("count",),
                     "wait until at most `count` of this thread's groups are in flight (cp.async.wait_group)"),
)}
ASYNC_COPY_BYTES = (4, 8, 16)


def call_async_copy(name: str, args) -> Call:
    """A call of :data:`ASYNC_COPY_BUILTINS` with its arguments checked (``call_intrin`` builds
    them): ``call_intrin("handle", "tir.tc_cp_async", AS.access_ptr("w", offset=i), A.access_ptr("r",
    offset=j), 16)``."""
    row = ASYNC_COPY_BUILTINS[name]
    if len(args) != len(row.params):
        raise ValueError(f"call_intrin('tir.{name}') takes {len(row.params)} argument(s) "
                         f"({', '.join(row.params)}), got {len(args)}")
    out = []
    for k, (kind, a) in enumerate(zip(row.params, args)):
        where = f"call_intrin('tir.{name}'): argument {k} ({kind})"
        if isinstance(a, str):
            raise TypeError(f"{where} is the string {a!r}")
        a = convert(a)
        if kind in ("dst", "src"):
            scope = "shared" if kind == "dst" else "global"
            if not isinstance(a, AccessPtr) or a.buffer.scope != scope:
                raise TypeError(f"{where} must be a pointer into {scope} memory (Buffer.access_ptr of a "
                                f"{scope} buffer), got `{a}`")
        elif kind == "bytes" and not (isinstance(a, Const) and a.value in ASYNC_COPY_BYTES):
            raise ValueError(f"{where} must be 4, 8 or 16 (what one cp.async copies), got `{a}`")
        elif kind == "pred" and not (dt.is_bool(a.dtype) and dt.lanes(a.dtype) == 1):
            raise TypeError(f"{where} must be a scalar bool condition, got `{a}` ({a.dtype})")
        elif kind == "count" and not (isinstance(a, Const) and dt.is_int(a.dtype) and 0 <= a.value <= 7):
            raise ValueError(f"{where} must be a constant from 0 to 7 (cp.async.wait_group's), got `{a}`")
        out.append(a)
    return Call(name, tuple(out), "handle")


# ------------------------------------------------------------------------------------------------
# Block-collective tensor-core calls (sm_90a ``wgmma``): every thread of the block calls them
# together with the same arguments; the block is one producer warpgroup (copies) and bm / 64
# consumer warpgroups (``wgmma.mma_async``). Their fragment, in scope ``wgmma.accumulator``, is
# the block's bm x bn accumulator tile, spread over the consumers' registers.
#   tc_wgmma_mainloop(frag, a, lda, b, ldb, k, smem, bm, bn, stages, lag)   frag = a @ b.T (a: bm x k,
#       b: bn x k, both k-major in global memory) through a ring of `stages` 128-byte-swizzled
#       shared buffers at `smem`, the producer `lag` steps of copies in flight before it
#       releases a stage to the consumers (0: each copy releases it when it lands)
#   tc_wgmma_tma_mainloop(frag, a, lda, b, ldb, k, smem, bm, bn, stages, maxnreg)   the same product,
#       the stages filled by TMA (one thread's cp.async.bulk.tensor per operand and step, completing
#       on the stage's mbarrier) through tensor maps of a's and b's buffers, which the kernel takes
#       as parameters (runtime/cuda_tensor_map.py); a and b whole rows of their 2-D buffers;
#       maxnreg 1: setmaxnreg moves registers from the producer warpgroup to the consumers
#   tc_wgmma_store(frag, c, ldc, bm, bn)                                c = frag (row-major)
#   tc_wgmma_conv_mainloop(frag, x, w, m0, smem, bm, bn, stages, lag, N, H, W, C, R, S, stride, pad)
#       frag = rows m0 .. m0 + bm of the implicit GEMM of x (N, H, W, C) with w (bn, R, S, C): the
#       producer gathers A (zeros in the padding; codegen/cuda_wgmma_conv.py)

@dataclass(frozen=True)
class BlockBuiltin:
    """One block-collective tensor-core call: its name, the kind of each argument, what it does."""
    name: str
    params: tuple
    doc: str


BLOCK_BUILTINS = {b.name: b for b in (
    BlockBuiltin("tc_wgmma_mainloop", ("frag", "ptr", "stride", "ptr", "stride", "const", "ptr", "const", "const",
                                       "const", "count"),
                 "frag = a @ b.T over k through cp.async + mbarriers + wgmma.mma_async (warp-specialized)"),
    BlockBuiltin("tc_wgmma_tma_mainloop", ("frag", "ptr", "stride", "ptr", "stride", "const", "ptr", "const", "const",
                                           "const", "count"),
                 "frag = a @ b.T over k through TMA bulk tensor copies + mbarriers + wgmma.mma_async"),
    BlockBuiltin("tc_wgmma_conv_mainloop", ("frag", "ptr", "ptr", "stride", "ptr") + ("const",) * 11 + ("stride",),
                 "frag = the implicit GEMM of a NHWC conv (rows m0.., the gather by the producer) @ KRSC weights.T"),
    BlockBuiltin("tc_wgmma_store", ("frag", "ptr", "stride", "const", "const"),
                 "store the block's accumulator tile, row-major, each consumer thread its own elements"),
)}


def call_block_builtin(name: str, args) -> Call:
    """A call of :data:`BLOCK_BUILTINS` with its arguments checked (``call_intrin`` builds them):
    ``call_intrin("handle", "tir.tc_wgmma_store", acc.data, C.access_ptr("w"), C.strides[0], 128, 256)``."""
    row = BLOCK_BUILTINS[name]
    if len(args) != len(row.params):
        raise ValueError(f"call_intrin('tir.{name}') takes {len(row.params)} arguments "
                         f"({', '.join(row.params)}), got {len(args)}")
    out = []
    for k, (kind, a) in enumerate(zip(row.params, args)):
        where = f"call_intrin('tir.{name}'): argument {k} ({kind})"
        if isinstance(a, str):
            raise TypeError(f"{where} is the string {a!r}")
        a = convert(a)
        if kind == "frag" and not (isinstance(a, Var) and a.dtype == "handle"):
            raise TypeError(f"{where} must be a fragment buffer's data (acc.data), got `{a}`")
        if kind == "ptr" and not isinstance(a, AccessPtr):
            raise TypeError(f"{where} must be a pointer into memory (Buffer.access_ptr), got `{a}`")
        if kind == "const" and not (isinstance(a, Const) and dt.is_int(a.dtype) and a.value > 0):
            raise ValueError(f"{where} must be a positive integer constant, got `{a}`")
        if kind == "count" and not (isinstance(a, Const) and dt.is_int(a.dtype) and a.value >= 0):
            raise ValueError(f"{where} must be a non-negative integer constant, got `{a}`")
        if kind == "stride" and not dt.is_int(a.dtype):
            raise TypeError(f"{where} must be an integer expression, got `{a}` ({a.dtype})")
        out.append(a)
    return Call(name, tuple(out), "handle")


def is_block_call(e) -> bool:
    """Whether ``e`` is a block-collective tensor-core call (:data:`BLOCK_BUILTINS`)."""
    return isinstance(e, Call) and e.name in BLOCK_BUILTINS


def call_warp_builtin(name: str, args) -> Call:
    """A call of :data:`WARP_BUILTINS` with its arguments checked (``call_intrin`` builds them):
    ``call_intrin("handle", "tir.tvm_mma_sync", BC.data, 0, BA.data, 0, BB.data, 0, BC.data, 0)``."""
    row = WARP_BUILTINS[name]
    if len(args) != len(row.params):
        raise ValueError(f"call_intrin('tir.{name}') takes {len(row.params)} arguments "
                         f"({', '.join(row.params)}), got {len(args)}")
    out = []
    for k, (kind, a) in enumerate(zip(row.params, args)):
        where = f"call_intrin('tir.{name}'): argument {k} ({kind})"
        if kind == "layout":
            a = a.value if isinstance(a, StringImm) else a
            if a not in LAYOUTS:
                raise ValueError(f"{where} must be 'row_major' or 'col_major', got {a!r}")
            out.append(StringImm(a))
            continue
        if isinstance(a, str):
            raise TypeError(f"{where} is the string {a!r}")
        a = convert(a)
        if kind == "frag" and not (isinstance(a, Var) and a.dtype == "handle"):
            raise TypeError(f"{where} must be a fragment buffer's data (BC.data), got `{a}`")
        if kind == "ptr" and not isinstance(a, AccessPtr):
            raise TypeError(f"{where} must be a pointer into memory (Buffer.access_ptr), got `{a}`")
        if kind == "shape" and not (isinstance(a, Const) and a.value == 16):
            raise ValueError(f"{where} must be 16 (tiles are 16 x 16 x 16), got `{a}`")
        if kind in ("index", "stride") and not dt.is_int(a.dtype):
            raise TypeError(f"{where} must be an integer expression, got `{a}` ({a.dtype})")
        out.append(a)
    return Call(name, tuple(out), "handle")


def warp_operands(call: Call) -> dict:
    """The arguments of a warp builtin call by kind: ``{"frag": [(data, index), ...], "ptr":
    AccessPtr or None, "stride", "layout", "value"}`` (fragments in argument order)."""
    row = WARP_BUILTINS[call.name]
    out = {"frag": [], "ptr": None, "stride": None, "layout": "row_major", "value": None}
    pending = None
    for kind, a in zip(row.params, call.args):
        if kind == "frag":
            pending = a
        elif kind == "index":
            out["frag"].append((pending, a))
        elif kind == "layout":
            out["layout"] = a.value
        elif kind != "shape":
            out[kind] = a
    return out


def symbol_of(call: Call) -> str:
    """The C function or LLVM intrinsic a builtin call names: ``symbol_of(call_extern("int32", "f")) == "f"``
    (the builtin's own name for one without a symbol: ``reinterpret``)."""
    if not BUILTINS[call.name].symbol_kind:
        return call.name
    return call.args[0].value


def call_args(call: Call) -> tuple:
    """The arguments a builtin call passes (after its symbol, and the LLVM signature count)."""
    if not BUILTINS[call.name].symbol_kind:
        return call.args
    return call.args[2:] if call.name in LLVM_INTRIN_CALLS else call.args[1:]


def is_builtin_call(e) -> bool:
    """Whether ``e`` is a call of this table (the symbol calls; see also :func:`is_warp_call`)."""
    return isinstance(e, Call) and e.name in BUILTINS


def is_warp_call(e) -> bool:
    """Whether ``e`` is a warp-collective tensor-core call (:data:`WARP_BUILTINS`)."""
    return isinstance(e, Call) and e.name in WARP_BUILTINS
