"""Calls out of generated CPU code: C functions, LLVM intrinsics, pointers into buffers, and the
LLVM IR that ``pragma import_llvm`` links in (what tensor intrinsics lower to).

* ``call_extern`` / ``call_pure_extern`` (``ir/builtin.py``) becomes a ``declare`` of the symbol
  with the arguments' C types (``ptr`` for handles; ``signext``/``zeroext`` for 8- and 16-bit
  integers, as the x86-64 C ABI wants) and a ``call``. One symbol called with two signatures,
  or named like a function of the module, is refused. The symbol must be defined by the
  module (``import_llvm``) or loaded in the process when the code is JIT-compiled (a library
  opened with ``ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)``): :func:`check_externs` says so
  before MCJIT would abort the process on an unresolved symbol.
* ``call_llvm_intrin`` / ``call_llvm_pure_intrin`` becomes a call of the named intrinsic
  (an overloaded one may be named without its suffix: LLVM supplies it). LLVM aborts the
  process when it cannot compile an intrinsic for the target (an AVX-512 one on an AVX2 CPU),
  and compiles an unknown ``llvm.*`` name into a call of a missing symbol, so each intrinsic is
  first compiled alone in a short-lived child process, once per process for each name,
  signature and target (:func:`check_llvm_intrinsic`; about 0.2 s).
* ``reinterpret`` is a ``bitcast`` (``<4 x i8>`` to ``i32``, ``<64 x i8>`` to ``<16 x i32>``).
* ``AccessPtr`` (``Buffer.access_ptr``) is the address of an element: ``getelementptr`` from the
  buffer's pointer. Bounds-checked builds check its whole extent.
* ``import_llvm`` texts are parsed (llvmlite's LLVM reads the IR of its own version and older:
  ``contrib.clang`` picks a clang that fits), given the module's triple and data layout, and
  linked into the module before it is optimised (:func:`link_imports`), so their functions can
  be inlined. A function that an earlier text (or the module) already defines keeps that
  definition.
"""
from __future__ import annotations

from functools import lru_cache

from ..ir import dtype as dt
from ..ir.builtin import EXTERN_CALLS, call_args, symbol_of
from ..ir.expr import Call, Const, StringImm
from ..ir.packed import MAKE_ARRAY
from ..runtime.status import STATUS_OUT_OF_BOUNDS, STATUS_PACKED_FUNC
from .llvm_status import printf_escape
from .llvm_types import CodegenError, const_literal, intrinsic_suffix, ll_type, mem_type

_EXTENSION = {"bool": " zeroext", "uint8": " zeroext", "uint16": " zeroext",
              "int8": " signext", "int16": " signext"}


def _codegen_error(msg: str):
    return CodegenError(msg)


class CallEmitter:
    """The call methods of :class:`~tilecraft.codegen.llvm.LLVMCodegen` (a mixin); they use its
    ``op``/``declare``/``expr``/``index_i64``/``buffer_ptr``/``fail_if``. ``self.externs`` maps
    each C symbol called to its LLVM signature."""

    def builtin_call(self, e) -> str:
        """A call of ``ir/builtin.py``'s table: an extern C function, an LLVM intrinsic, a
        reinterpretation of bits."""
        if e.name == "reinterpret":
            return self.reinterpret(e)
        symbol, args = symbol_of(e), call_args(e)
        ret = ll_type(e.dtype)
        types = [self._arg_type(a, e.name, symbol, k) for k, a in enumerate(args)]
        values = [self.expr(a) for a in args]
        if e.name in EXTERN_CALLS:
            sig = (ret, tuple(types))
            if symbol in self.function_names:
                raise _codegen_error(f"{e.name}('{symbol}'): the module defines a function of that name")
            seen = self.externs.setdefault(symbol, sig)
            if seen != sig:
                raise _codegen_error(f"{e.name}('{symbol}') is called as {_c_sig(sig)} here and as "
                                     f"{_c_sig(seen)} elsewhere in this module")
            exts = [_EXTENSION.get(a.dtype, "") for a in args]
            self.declare(symbol, f"declare {ret}{_EXTENSION.get(e.dtype, '')} @{symbol}("
                                 f"{', '.join(t + x for t, x in zip(types, exts))})")
            return self.op(f"call {ret} @{symbol}({', '.join(f'{t}{x} {v}' for t, x, v in zip(types, exts, values))})")
        name = _mangled(symbol, e.args[1].value, args)
        check_llvm_intrinsic(name, ret, tuple(types),
                             tuple(const_literal(a.value, a.dtype) if isinstance(a, Const) else None for a in args),
                             self.opts.triple, self.opts.cpu, self.opts.features)
        self.declare(name, f"declare {ret} @{name}({', '.join(types)})")
        return self.op(f"call {ret} @{name}({', '.join(f'{t} {v}' for t, v in zip(types, values))})")

    def reinterpret(self, e) -> str:
        """``reinterpret``: a ``bitcast`` between types of the same size (``<4 x i8>`` → ``i32``)."""
        (value,) = e.args
        src, dst = value.dtype, e.dtype
        if dt.is_bool(src) or dt.is_bool(dst) or "handle" in (src, dst) or \
                dt.bits(src) * dt.lanes(src) != dt.bits(dst) * dt.lanes(dst):
            raise _codegen_error(f"reinterpret of {src} as {dst} in `{e}`: both must be numbers of the "
                                 f"same total size")
        v = self.expr(value)
        if src == dst:
            return v
        return self.op(f"bitcast {ll_type(src)} {v} to {ll_type(dst)}")

    def packed_call(self, e) -> str:
        """``call_packed`` (``ir/packed.py``): the arguments as tagged ``int64`` words on the
        stack, a call of the runtime's callback (``runtime/packed.py``), a failure return when
        the Python function raised; the value is the function's ``int32`` result."""
        import llvmlite.binding as llvm
        from ..runtime import packed as rt
        llvm.add_symbol(rt.SYMBOL, rt.dispatcher_address())
        name = e.args[0].value
        words = []
        for a in e.args[1:]:
            if isinstance(a, Call) and a.name == MAKE_ARRAY:
                ptr, buf = self.expr(a.args[0]), a.args[0].buffer
                words += [str(rt.TAG_ARRAY), self.op(f"ptrtoint ptr {ptr} to i64"),
                          str(rt.DTYPES.index(buf.dtype)), str(len(a.args) - 1)]
                words += [self.index_i64(d) for d in a.args[1:]]
            elif dt.is_float(a.dtype):
                v = self.expr(a)
                if a.dtype != "float64":
                    v = self.op(f"fpext {ll_type(a.dtype)} {v} to double")
                words += [str(rt.TAG_FLOAT), self.op(f"bitcast double {v} to i64")]
            else:
                v, t = self.expr(a), ll_type(a.dtype)
                if t != "i64":
                    ext = "zext" if dt.is_uint(a.dtype) or dt.is_bool(a.dtype) else "sext"
                    v = self.op(f"{ext} {t} {v} to i64")
                words += [str(rt.TAG_INT), v]
        n = len(words)
        array = self.alloca(f"[{max(n, 1)} x i64]", 8)
        for k, w in enumerate(words):
            slot = self.op(f"getelementptr inbounds [{max(n, 1)} x i64], ptr {array}, i64 0, i64 {k}")
            self.emit(f"store i64 {w}, ptr {slot}, align 8")
        result = self.alloca("i32", 4)
        self.declare(rt.SYMBOL, f"declare i32 @{rt.SYMBOL}(ptr, i32, ptr, ptr)")
        rc = self.op(f"call i32 @{rt.SYMBOL}(ptr {self.format_constant(name)}, i32 {n}, ptr {array}, "
                     f"ptr {result})")
        self.fail_if(self.op(f"icmp ne i32 {rc}, 0"), STATUS_PACKED_FUNC,
                     f"the packed function '{printf_escape(name)}' raised an exception")
        return self.op(f"load i32, ptr {result}, align 4")

    def _arg_type(self, a, kind: str, symbol: str, k: int) -> str:
        if isinstance(a, StringImm):
            raise _codegen_error(f"{kind}('{symbol}'): argument {k} is a string; only the function's name may be")
        return ll_type(a.dtype)

    def e_AccessPtr(self, e) -> str:
        base = self.buffer_ptr(e.buffer)
        off = self.index_i64(e.offset)
        if self.bound_checks:
            self._check_access_range(e, off)
        if off == "0":
            return base
        return self.op(f"getelementptr inbounds {mem_type(e.buffer.dtype)}, ptr {base}, i64 {off}")

    def _check_access_range(self, e, off: str) -> None:
        """Elements ``off .. off + extent - 1`` lie in the buffer (when extent > 0)."""
        ext = self.buffer_extent(e.buffer)
        n = self.index_i64(e.extent)
        end = self.op(f"add i64 {off}, {n}")
        some = self.op(f"icmp sgt i64 {n}, 0")
        bad = self.op(f"or i1 {self.op(f'icmp uge i64 {off}, {ext}')}, {self.op(f'icmp ugt i64 {end}, {ext}')}")
        last = self.op(f"add i64 {end}, -1")
        idx = self.op(f"select i1 {self.op(f'icmp uge i64 {off}, {ext}')}, i64 {off}, i64 {last}")
        self.fail_if(self.op(f"and i1 {some}, {bad}"), STATUS_OUT_OF_BOUNDS,
                     self._bounds_message(e.buffer, e.access_mask & 2 != 0), [("i64", idx), ("i64", ext)])

    def e_StringImm(self, e) -> str:
        raise _codegen_error(f"the string {e.value!r} is used as a value; strings are only the names "
                             f"of call_extern and call_llvm_intrin")


def _c_sig(sig) -> str:
    ret, types = sig
    return f"{ret}({', '.join(types)})"


def _mangled(name: str, nsig: int, args) -> str:
    """TVM's signature count: the first ``nsig`` argument types as LLVM's overload suffix, unless
    the name already ends with it."""
    if not nsig:
        return name
    suffix = "".join("." + intrinsic_suffix(a.dtype) for a in args[:nsig])
    return name if name.endswith(suffix) else name + suffix


# ------------------------------------------------------------------------------------------------
# intrinsics, checked in a child process

_PROBE = """
import sys
import llvmlite.binding as llvm
llvm.initialize_native_target(); llvm.initialize_native_asmprinter()
triple, cpu, features = sys.argv[1:4]
mod = llvm.parse_assembly(sys.stdin.read())
mod.verify()
tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=0)
sys.stdout.write(tm.emit_assembly(mod))
"""


@lru_cache(maxsize=None)
def check_llvm_intrinsic(name: str, ret: str, types: tuple, consts: tuple, triple: str, cpu: str,
                         features: str) -> None:
    """Raise ``CodegenError`` unless LLVM compiles a call of intrinsic ``name`` (result ``ret``,
    arguments ``types``; ``consts`` holds the literal of each constant argument, None for the
    others: immediate operands must stay constants) for the target, to real instructions. Run in
    a child process: LLVM aborts its process on an intrinsic the CPU lacks."""
    import subprocess
    import sys

    params, call = [], []
    for k, (t, c) in enumerate(zip(types, consts)):
        if c is None:
            params.append(f"{t} %a{k}")
            call.append(f"{t} %a{k}")
        else:
            call.append(f"{t} {c}")
    text = (f"declare {ret} @{name}({', '.join(types)})\n"
            f"define {ret} @probe({', '.join(params)}) {{\n"
            f"  %r = call {ret} @{name}({', '.join(call)})\n  ret {ret} %r\n}}\n")
    try:
        r = subprocess.run([sys.executable, "-c", _PROBE, triple, cpu, features], input=text,
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as err:
        raise _codegen_error(f"could not check the LLVM intrinsic '{name}' in a child process: {err}") from None
    sig = f"{ret}({', '.join(types)})"
    if r.returncode != 0:
        lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
        said = next((x for x in lines if "LLVM ERROR" in x), None) or (lines[-1] if lines else f"exit {r.returncode}")
        raise _codegen_error(f"LLVM cannot compile the intrinsic '{name}' as {sig} for CPU '{cpu}' with "
                             f"features '{features}': {said.strip()} (an intrinsic of an instruction set "
                             f"this target lacks, or the wrong argument types)")
    if name in r.stdout:
        raise _codegen_error(f"LLVM does not know the intrinsic '{name}' (it would call a function of "
                             f"that name); check the name, e.g. 'llvm.fma.v8f32' or "
                             f"'llvm.x86.avx2.pmadd.wd'")


# ------------------------------------------------------------------------------------------------
# modules

def link_imports(llvm, mod, imports) -> None:
    """Link the LLVM IR texts of ``pragma import_llvm`` into ``mod`` (before optimisation)."""
    for k, text in enumerate(imports):
        try:
            other = llvm.parse_assembly(text)
            other.verify()
        except RuntimeError as err:
            lines = [x.strip() for x in str(err).strip().splitlines() if x.strip()]
            said = next((x.replace("<string>:", "line ", 1) for x in lines if "error:" in x), lines[0] if lines else err)
            raise _codegen_error(f"the LLVM IR given by pragma import_llvm (number {k}) does not parse: "
                                 f"{said} (LLVM {llvm.llvm_version_info[0]} reads the "
                                 f"IR of its own version and older)") from None
        other.triple = mod.triple
        other.data_layout = mod.data_layout
        defined = {f.name for f in mod.functions if not f.is_declaration}
        for f in other.functions:
            if f.name in defined and not f.is_declaration:
                # already defined by an earlier import (or the module): keep that one, as TVM's
                # linking of only what is still needed does
                f.linkage = llvm.Linkage.linkonce_odr
        try:
            mod.link_in(other)
        except RuntimeError as err:
            raise _codegen_error(f"linking the LLVM IR of pragma import_llvm (number {k}) failed: "
                                 f"{str(err).strip()}") from None


def check_externs(mod, externs, function: str) -> None:
    """Every C symbol the module calls is defined in it or loaded in this process; MCJIT would
    abort the process on one that is not."""
    if not externs:
        return
    import ctypes
    import llvmlite.binding as llvm

    defined = {f.name for f in mod.functions if not f.is_declaration}
    process = ctypes.CDLL(None)
    for name in externs:
        if name in defined or llvm.address_of_symbol(name):
            continue
        try:
            getattr(process, name)
        except AttributeError:
            raise _codegen_error(
                f"'{function}' calls the external function '{name}', which is neither in its module "
                f"(link LLVM IR with s[C].pragma(axis, \"import_llvm\", text)) nor loaded in this process "
                f"(open its shared library with ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL) first)") from None
