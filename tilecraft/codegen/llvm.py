"""LLVM backend: lowered ``PrimFunc`` → LLVM IR text → optimised IR → machine code, on first use.

Entry points:

* :func:`build_llvm` ``(funcs, target="llvm", entry_name=None) -> tilecraft.runtime.Module``
* :func:`codegen_llvm` ``(funcs, target) -> LLVMSource`` (text and signatures; no LLVM calls)
* :func:`compile_llvm` ``(source, lazy=False) -> Module`` (parse, ``opt``, MCJIT; ``lazy`` defers MCJIT)

IR is emitted as text, not through ``llvmlite.ir``: building the same 10,000 instructions takes
about 7 ms as text and 160 ms through ``llvmlite.ir`` (measured here), and code generation must be
fast because the tuner builds thousands of candidates.

Calling convention (C ABI; the exported header declares the same)::

    int32_t name(T0* buf0, T1* buf1, ..., <scalar params in their dtype>);   /* returns a status */

The status is 0, or a code of ``tilecraft.runtime.status`` after the code wrote a message to the
thread's error buffer (``llvm_status.py``: the one mechanism for every failure point).

Buffer pointers are ``noalias`` (the runtime refuses outputs that overlap other arguments) and
only element-aligned (numpy data may be 16-byte aligned). Floating-point instructions carry the
``contract`` flag only, so ``a*b+c`` may become an FMA; target option ``-fast-math`` turns on
all fast-math flags. Float ``min``/``max`` are ``a < b ? a : b`` (x86 ``minps`` semantics: a NaN
in ``a`` gives ``b``). ``round`` rounds half to even, like numpy.

Statements map to LLVM as follows: ``For`` is a counted loop (``unrolled`` adds
``llvm.loop.unroll.full``, ``vectorized`` adds ``llvm.loop.vectorize.enable``); a ``parallel``
``For`` is outlined into ``void body(void* closure)`` and run by ``GOMP_parallel`` (libgomp's
thread pool), each thread taking one static chunk; parallel loops nested in a parallel loop run
serially. ``Allocate`` is an ``alloca`` in the function's entry block when its size is a constant
of at most 64 KiB, else ``aligned_alloc(64, ...)``/``free`` around its body; a NULL from
``aligned_alloc`` returns ``STATUS_OUT_OF_MEMORY`` naming the buffer and the bytes. Under
``PassContext(config={"tir.instrument_bound_checkers": True})`` every load and store is checked
against its buffer first (``llvm_bounds.py``).
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from functools import lru_cache

from ..ir import dtype as dt
from ..ir.expr import (BinOp, Binary, Broadcast, BufferLoad, Call, Cast, Const, Let, Ramp, Select,
                       SizeVar, Unary, UnOp, Var, VectorReduce)
from ..ir.functor import post_order_visit
from ..ir.stmt import (Allocate, AttrStmt, Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse,
                       LetStmt, PrimFunc, SeqStmt)
from ..runtime.signature import FuncSignature, ParamSpec, dim_of_expr
from ..runtime.status import STATUS_OUT_OF_MEMORY
from .llvm_bounds import BoundChecks
from .llvm_vector_reduce import vector_reduce
from .llvm_status import (ERROR_BUFFER_SYMBOL, StatusEmitter, jit_error_message, jit_error_support,
                          printf_escape)
from .llvm_types import (cast_instruction, const_literal, intrinsic_suffix, kind, ll_type, mem_type,
                         splat_literal, zero)

STACK_LIMIT_BYTES = 64 * 1024
THREADS_GLOBAL = "tilecraft_num_threads"


class CodegenError(Exception):
    """The IR cannot be compiled by the LLVM backend (the message says which node and why)."""


# ------------------------------------------------------------------------------------------------
# Targets

@dataclass(frozen=True)
class LLVMOptions:
    """What the target string decides: ``llvm -mcpu=znver3 -mattr=+avx2 -opt-level=3 -fast-math``."""
    target: str
    triple: str
    cpu: str
    features: str
    opt_level: int = 3
    fast_math: bool = False


def parse_target(target="llvm") -> LLVMOptions:
    """Host CPU name and features unless ``-mcpu=``/``-mattr=`` say otherwise."""
    from ..target import Target
    t = Target(target)
    if t.kind != "llvm":
        raise CodegenError(f"the LLVM backend compiles for target 'llvm', got {str(t)!r}")
    check_target(t)
    llvm = _llvm()
    cpu = t.attrs.get("mcpu") or llvm.get_host_cpu_name()
    if "mattr" in t.attrs:
        features = t.attrs["mattr"]
    elif "mcpu" in t.attrs:
        features = ""
    else:
        features = llvm.get_host_cpu_features().flatten()
    triple = t.attrs.get("mtriple") or llvm.get_process_triple()
    try:
        opt = int(t.attrs.get("opt-level", 3))
    except ValueError:
        raise CodegenError(f"-opt-level must be 0..3, got {t.attrs['opt-level']!r}") from None
    fast = t.attrs.get("fast-math", "0") not in ("0", "false")
    return LLVMOptions(str(t), triple, cpu, features, opt, fast)


# LLVM aborts the whole process on some target options instead of reporting them: an unknown
# -mcpu on x86-64 ("LLVM ERROR: 64-bit code requested on a subtarget that doesn't support it"),
# an -mattr entry without +/- (an assertion). So they are checked here first, against the names
# LLVM lists for the triple; LLVM prints that list only to stderr (for the CPU name "help"), so
# it is read once per process from a short-lived child process.
_PROBE = ("import os, sys, llvmlite.binding as llvm\n"
          "llvm.initialize_native_target(); llvm.initialize_native_asmprinter()\n"
          "llvm.Target.from_triple(sys.argv[1]).create_target_machine(cpu='help', features='')\n"
          "sys.stderr.flush(); os._exit(0)\n")
_known_names: dict = {}
_checked_targets: set = set()


def known_cpus_and_features(triple: str) -> tuple[list[str], list[str]]:
    """The CPU names and feature names LLVM knows for ``triple`` (empty lists when LLVM cannot
    list them here).

    >>> cpus, features = known_cpus_and_features(_llvm().get_process_triple())
    >>> "skylake-avx512" in cpus, "avx2" in features
    (True, True)
    """
    if triple not in _known_names:
        import subprocess
        import sys

        try:
            out = subprocess.run([sys.executable, "-c", _PROBE, triple], capture_output=True, text=True,
                                 timeout=120).stderr
        except (OSError, subprocess.SubprocessError):
            out = ""
        sections: dict = {"cpus": [], "features": []}
        current = None
        for line in out.splitlines():
            if line.startswith("Available CPUs"):
                current = "cpus"
            elif line.startswith("Available features"):
                current = "features"
            elif current and line.startswith("  ") and " - " in line:
                sections[current].append(line.split()[0])
        _known_names[triple] = (sections["cpus"], sections["features"])
    return _known_names[triple]


def _unknown_name(what: str, name: str, known: list[str], target, triple: str, extra: str = "") -> str:
    import difflib

    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
    return (f"target {str(target)!r}: LLVM knows no {what} {name!r} for {triple}{hint}.{extra} "
            f"Valid {what}s: {', '.join(known)}")


def check_target(target="llvm") -> None:
    """Raise ``TargetError`` unless the ``-mcpu`` and ``-mattr`` of an ``llvm`` target name a
    CPU and features LLVM knows for the target's triple; the message lists the valid names and
    the closest ones. LLVM would otherwise abort the process. Checked once per process for
    each target string.

    >>> check_target("llvm -mcpu=skylakex")   # TargetError: ... no CPU 'skylakex' ... did you mean 'skylake'
    """
    from ..target import Target, TargetError

    t = Target(target)
    cpu, mattr = t.attrs.get("mcpu"), t.attrs.get("mattr")
    key = str(t)
    if t.kind != "llvm" or (cpu is None and mattr is None) or key in _checked_targets:
        return
    llvm = _llvm()
    triple = t.attrs.get("mtriple") or llvm.get_process_triple()
    host = llvm.get_host_cpu_name()
    if cpu is not None and not (cpu == host and triple == llvm.get_process_triple()):
        cpus, _ = known_cpus_and_features(triple)
        if cpus and cpu not in cpus:
            raise TargetError(_unknown_name("CPU", cpu, cpus, t, triple, f" This machine's CPU is {host!r}."))
    if mattr is not None:
        entries = [e.strip() for e in mattr.split(",") if e.strip()]
        for entry in entries:
            if entry[0] not in "+-" or len(entry) < 2:
                raise TargetError(f"target {str(t)!r}: each -mattr entry must be +feature or -feature "
                                  f"(e.g. -mattr=+avx2,+fma), got {entry!r}")
        _, features = known_cpus_and_features(triple)
        for entry in entries:
            if features and entry[1:] not in features:
                raise TargetError(_unknown_name("feature", entry[1:], features, t, triple))
    _checked_targets.add(key)


_llvm_ready = False


def _llvm():
    global _llvm_ready
    import llvmlite.binding as llvm
    if not _llvm_ready:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _llvm_ready = True
    return llvm


def target_machine(opts: LLVMOptions, reloc: str = "default"):
    """A fresh target machine (MCJIT takes ownership of the one it is given)."""
    llvm = _llvm()
    target = llvm.Target.from_triple(opts.triple)
    return target.create_target_machine(cpu=opts.cpu, features=opts.features, opt=opts.opt_level,
                                        reloc=reloc, codemodel="jitdefault" if reloc == "default" else "default")


@lru_cache(maxsize=8)
def _cached_target_machine(opts: LLVMOptions, reloc: str):
    return target_machine(opts, reloc)


def optimize(module, tm, opt_level: int) -> None:
    """Run LLVM's default ``O<opt_level>`` pipeline (new pass manager)."""
    llvm = _llvm()
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2
    pto.loop_unrolling = opt_level >= 1
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)


# ------------------------------------------------------------------------------------------------
# Instruction tables.  "{fm}" is replaced by the fast-math flags of the module.

_BINARY = {}
for _k in "su":
    _BINARY.update({(BinOp.ADD, _k): "add", (BinOp.SUB, _k): "sub", (BinOp.MUL, _k): "mul",
                    (BinOp.BITAND, _k): "and", (BinOp.BITOR, _k): "or", (BinOp.BITXOR, _k): "xor",
                    (BinOp.SHL, _k): "shl", (BinOp.EQ, _k): "icmp eq", (BinOp.NE, _k): "icmp ne"})
_BINARY.update({
    (BinOp.ADD, "f"): "fadd{fm}", (BinOp.SUB, "f"): "fsub{fm}", (BinOp.MUL, "f"): "fmul{fm}",
    (BinOp.DIV, "f"): "fdiv{fm}",
    (BinOp.TRUNCDIV, "s"): "sdiv", (BinOp.TRUNCMOD, "s"): "srem",
    (BinOp.TRUNCDIV, "u"): "udiv", (BinOp.TRUNCMOD, "u"): "urem",
    (BinOp.FLOORDIV, "u"): "udiv", (BinOp.FLOORMOD, "u"): "urem",
    (BinOp.SHR, "s"): "ashr", (BinOp.SHR, "u"): "lshr",
    (BinOp.LT, "s"): "icmp slt", (BinOp.LE, "s"): "icmp sle", (BinOp.GT, "s"): "icmp sgt", (BinOp.GE, "s"): "icmp sge",
    (BinOp.LT, "u"): "icmp ult", (BinOp.LE, "u"): "icmp ule", (BinOp.GT, "u"): "icmp ugt", (BinOp.GE, "u"): "icmp uge",
    (BinOp.EQ, "f"): "fcmp oeq", (BinOp.NE, "f"): "fcmp une", (BinOp.LT, "f"): "fcmp olt",
    (BinOp.LE, "f"): "fcmp ole", (BinOp.GT, "f"): "fcmp ogt", (BinOp.GE, "f"): "fcmp oge",
    (BinOp.EQ, "b"): "icmp eq", (BinOp.NE, "b"): "icmp ne", (BinOp.LT, "b"): "icmp ult",
    (BinOp.LE, "b"): "icmp ule", (BinOp.GT, "b"): "icmp ugt", (BinOp.GE, "b"): "icmp uge",
    (BinOp.AND, "b"): "and", (BinOp.OR, "b"): "or",
    (BinOp.BITAND, "b"): "and", (BinOp.BITOR, "b"): "or", (BinOp.BITXOR, "b"): "xor",
})

# math calls that are one LLVM intrinsic, elementwise on vectors
_MATH_INTRINSICS = {
    "exp": "llvm.exp", "exp2": "llvm.exp2", "log": "llvm.log", "log2": "llvm.log2",
    "log10": "llvm.log10", "sqrt": "llvm.sqrt", "fabs": "llvm.fabs", "floor": "llvm.floor",
    "ceil": "llvm.ceil", "round": "llvm.roundeven", "trunc": "llvm.trunc", "sin": "llvm.sin",
    "cos": "llvm.cos", "pow": "llvm.pow", "fma": "llvm.fma", "nearbyint": "llvm.roundeven",
}
# float32 vector math computed inline (LLVM would call libm once per lane): name -> method
_VECTOR_F32 = {"exp": "vector_expf", "tanh": "vector_tanhf", "log": "vector_logf"}
# math calls only libm has: name for float64; float32 appends "f"
_LIBM = {"tanh": "tanh", "erf": "erf"}

# the C ABI widens small integer arguments; LLVM must know how (as clang marks them)
_ARG_EXTENSION = {"bool": " zeroext", "uint8": " zeroext", "uint16": " zeroext",
                  "int8": " signext", "int16": " signext"}

# integer ops whose untaken branch could trap (x86 traps on division by zero)
_TRAPPING = frozenset({BinOp.TRUNCDIV, BinOp.TRUNCMOD, BinOp.FLOORDIV, BinOp.FLOORMOD})


# ------------------------------------------------------------------------------------------------
# Code generation

@dataclass(frozen=True)
class LLVMSource:
    """The output of :func:`codegen_llvm`: module text plus what the runtime needs to call it."""
    text: str
    signatures: tuple
    options: LLVMOptions
    entry_name: str
    has_parallel: bool
    can_fail: bool = False         # some function has a failure point (see llvm_status.py)


class _Function:
    """Per LLVM function state: its instructions, entry-block allocas and current block."""

    def __init__(self, name: str):
        self.name = name
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.block = "entry"
        self.heap: list[str] = []   # live aligned_alloc pointers, freed by a failure return
        self.can_fail = False       # a failure point returns a status from this function


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# symbols generated code (or LLVM's lowering of it) may call: a function must not be named so
_RESERVED_NAMES = frozenset(
    "main malloc free aligned_alloc memcpy memmove memset abort exit "
    "exp expf exp2 exp2f log logf log2 log2f log10 log10f sqrt sqrtf pow powf sin sinf cos cosf "
    "tanh tanhf erf erff fabs fabsf floor floorf ceil ceilf round roundf roundeven roundevenf "
    "trunc truncf fma fmaf fmod fmodf".split())


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", name)


class LLVMCodegen(StatusEmitter, BoundChecks):
    """Emits one LLVM module for a list of PrimFuncs. Expressions and statements are dispatched
    by node class through the ``_EXPR``/``_STMT`` tables; binary operators through ``_BINARY``
    plus the few overrides in ``_binary_special``; failure points through ``fail_if``
    (:class:`~tilecraft.codegen.llvm_status.StatusEmitter`)."""

    def __init__(self, opts: LLVMOptions, bound_checks: bool = False):
        self.opts = opts
        self.bound_checks = bound_checks      # check every access (llvm_bounds.py)
        fm = " fast" if opts.fast_math else " contract"
        self.binary_table = {k: v.format(fm=fm) for k, v in _BINARY.items()}
        self.fm = fm
        self.n = 0
        self.declares: dict[str, str] = {}
        self.metadata: list[str] = []
        self.n_meta = 0
        self.done_funcs: list[str] = []
        self.has_parallel = False
        self.attr_line = (f'attributes #0 = {{ nounwind "target-cpu"="{opts.cpu}" '
                          f'"target-features"="{opts.features}" }}')

    # --- module -------------------------------------------------------------------------
    def module_text(self) -> str:
        parts = [f'target triple = "{self.opts.triple}"', ""]
        if self.has_parallel:
            parts.append(f"@{THREADS_GLOBAL} = global i32 0, align 4")
        parts.extend(self.declares.values())
        parts.extend(self.done_funcs)
        parts.append(self.attr_line)
        parts.extend(self.metadata)
        return "\n".join(parts) + "\n"

    def declare(self, name: str, decl: str) -> None:
        if name not in self.declares:
            self.declares[name] = decl

    def loop_metadata(self, *props: str) -> str:
        ident = self.n_meta
        self.n_meta += len(props) + 1
        refs = ", ".join(f"!{ident + 1 + i}" for i in range(len(props)))
        self.metadata.append(f"!{ident} = distinct !{{!{ident}, {refs}}}")
        for i, p in enumerate(props):
            self.metadata.append(f"!{ident + 1 + i} = !{{{p}}}")
        return f"!{ident}"

    # --- low-level emission -------------------------------------------------------------
    def tmp(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def label(self) -> str:
        self.n += 1
        return f"L{self.n}"

    def emit(self, line: str) -> None:
        self.fn.lines.append("  " + line)

    def op(self, instr: str) -> str:
        r = self.tmp()
        self.fn.lines.append(f"  {r} = {instr}")
        return r

    def start_block(self, name: str) -> None:
        self.fn.lines.append(f"{name}:")
        self.fn.block = name

    def alloca(self, ty: str, align: int) -> str:
        r = self.tmp()
        self.fn.allocas.append(f"  {r} = alloca {ty}, align {align}")
        return r

    def finish_function(self, header: str, ret: str) -> None:
        fn = self.fn
        body = [header + " {", "entry:"] + fn.allocas + fn.lines + [f"  {ret}", "}", ""]
        self.done_funcs.append("\n".join(body))

    # --- functions ----------------------------------------------------------------------
    def add_function(self, func: PrimFunc) -> FuncSignature:
        if not _IDENT.match(func.name):
            raise CodegenError(f"function name {func.name!r} is not a C identifier")
        if func.name in _RESERVED_NAMES or func.name.startswith(("GOMP_", "omp_", "llvm.", "tilecraft_")):
            raise CodegenError(f"function name {func.name!r} would shadow a C library or runtime "
                               "symbol that generated code calls; choose another name")
        sig = signature_of(func)
        self.func_name = func.name
        self.fn = _Function(func.name)
        self.env: dict = {}
        self.buf_by_name: dict = {}
        self.mask = None            # the lanes a vector lazy select's side is evaluated for
        self._mask_type = None
        self.in_parallel = False
        self.n_outlined = 0
        args = []
        for i, p in enumerate(func.params):
            if isinstance(p, Buffer):
                name = f"%{_safe(p.name)}_{i}"
                args.append(f"ptr noalias {name}")
                self.env[p.data] = name
                self.buf_by_name.setdefault(p.name, name)
            elif isinstance(p, Var) and p.dtype == "float16":
                # passed as its bits (uint16_t in the header): C compilers disagree on _Float16
                name = f"%{_safe(p.name)}_{i}"
                args.append(f"i16 zeroext {name}")
                self.env[p] = self.op(f"bitcast i16 {name} to half")
            elif isinstance(p, Var):
                name = f"%{_safe(p.name)}_{i}"
                args.append(f"{ll_type(p.dtype)}{_ARG_EXTENSION.get(p.dtype, '')} {name}")
                self.env[p] = name
            else:
                raise CodegenError(f"parameter {i} of {func.name} is a {type(p).__name__}; "
                                   "expected a Buffer or a Var")
        self.stmt(func.body)
        self.finish_function(f"define i32 @{func.name}({', '.join(args)}) #0", "ret i32 0")
        return sig

    # --- statements ---------------------------------------------------------------------
    def stmt(self, s) -> None:
        try:
            fn = self._STMT[type(s)]
        except KeyError:
            raise CodegenError(f"the LLVM backend cannot compile a {type(s).__name__} statement") from None
        fn(self, s)

    def s_SeqStmt(self, s: SeqStmt) -> None:
        for x in s.seq:
            self.stmt(x)

    def s_AttrStmt(self, s: AttrStmt) -> None:
        self.stmt(s.body)

    def s_Evaluate(self, s: Evaluate) -> None:
        if not isinstance(s.value, Const):
            self.expr(s.value)

    def s_LetStmt(self, s: LetStmt) -> None:
        self.bind(s.var, self.expr(s.value), lambda: self.stmt(s.body))

    def bind(self, var: Var, value: str, body) -> None:
        old = self.env.get(var)
        self.env[var] = value
        body()
        if old is None:
            del self.env[var]
        else:
            self.env[var] = old

    def s_IfThenElse(self, s: IfThenElse) -> None:
        if dt.lanes(s.condition.dtype) != 1:
            raise CodegenError(f"an if condition must be a scalar bool, got {s.condition.dtype}")
        c = self.expr(s.condition)
        then_l, else_l, end_l = self.label(), self.label(), self.label()
        self.emit(f"br i1 {c}, label %{then_l}, label %{else_l if s.else_case is not None else end_l}")
        self.start_block(then_l)
        self.stmt(s.then_case)
        self.emit(f"br label %{end_l}")
        if s.else_case is not None:
            self.start_block(else_l)
            self.stmt(s.else_case)
            self.emit(f"br label %{end_l}")
        self.start_block(end_l)

    def s_BufferStore(self, s: BufferStore) -> None:
        buf, idx = s.buffer, self.flat_index(s.buffer, s.indices)
        value = self.expr(s.value)
        vt = s.value.dtype
        lanes = dt.lanes(vt)
        elem = buf.dtype
        if dt.is_bool(vt):
            value = self.op(f"zext {ll_type(vt)} {value} to {mem_type(vt)}")
        if dt.element_of(vt) != dt.element_of(elem):
            raise CodegenError(f"storing a {vt} value into {buf.name}, a {elem} buffer: `{s.value}`")
        mty = mem_type(vt)
        align = dt.nbytes(elem)
        if lanes == 1:
            if dt.lanes(idx.dtype) != 1:
                raise CodegenError(f"storing the scalar {vt} value `{s.value}` to the vector index `{idx}`")
            p = self.element_ptr(buf, idx, store=True)
            self.emit(f"store {mty} {value}, ptr {p}, align {align}")
            return
        if _is_contiguous(idx, lanes) or dt.lanes(idx.dtype) == 1:
            p = self.element_ptr(buf, idx.base if isinstance(idx, Ramp) else idx, lanes, store=True)
            self.emit(f"store {mty} {value}, ptr {p}, align {align}")
            return
        if dt.lanes(idx.dtype) != lanes:
            raise CodegenError(f"store of {vt} to {buf.name} with index `{idx}` of {idx.dtype}")
        ptrs = self.vector_ptrs(buf, idx, store=True)
        self.emit(f"call void @llvm.masked.scatter.v{lanes}{_elem_suffix(mty)}.v{lanes}p0({mty} {value}, "
                  f"<{lanes} x ptr> {ptrs}, i32 {align}, <{lanes} x i1> {splat_literal(True, f'boolx{lanes}')})")

    def s_Allocate(self, s: Allocate) -> None:
        buf = s.buffer
        esize = dt.nbytes(buf.dtype)
        const_count = _const_product(buf.shape)
        if const_count is not None and const_count * esize <= STACK_LIMIT_BYTES:
            p = self.alloca(f"[{max(const_count, 1)} x {mem_type(buf.dtype)}]", 64)
            self.bind(buf.data, p, lambda: self.stmt(s.body))
            return
        n = "1"
        for d in buf.shape:
            v = self.index_i64(d)
            n = v if n == "1" else self.op(f"mul nsw i64 {n}, {v}")
        nbytes = self.op(f"mul nsw i64 {n}, {esize}")
        rounded = self.op(f"add nsw i64 {nbytes}, 127")
        rounded = self.op(f"and i64 {rounded}, -64")
        self.declare("aligned_alloc", "declare noalias ptr @aligned_alloc(i64, i64)")
        self.declare("free", "declare void @free(ptr)")
        p = self.op(f"call noalias ptr @aligned_alloc(i64 64, i64 {rounded})")
        self.fail_if(self.op(f"icmp eq ptr {p}, null"), STATUS_OUT_OF_MEMORY,
                     f"out of memory: could not allocate %lld bytes for buffer "
                     f"'{printf_escape(buf.name)}' in function '{printf_escape(self.func_name)}'",
                     [("i64", nbytes)])
        self.fn.heap.append(p)
        self.bind(buf.data, p, lambda: self.stmt(s.body))
        self.fn.heap.pop()
        self.emit(f"call void @free(ptr {p})")

    def s_For(self, s: For) -> None:
        if s.kind is ForKind.PARALLEL and not self.in_parallel:
            return self.parallel_for(s)
        if s.kind is ForKind.THREAD_BINDING:
            raise CodegenError(f"loop {s.loop_var.name} is bound to {s.thread_tag or 'a GPU thread'}; "
                               "thread bindings need the CUDA target")
        md = None
        if s.kind is ForKind.UNROLLED:
            md = self.loop_metadata('!"llvm.loop.unroll.full"')
        elif s.kind is ForKind.VECTORIZED:
            md = self.loop_metadata('!"llvm.loop.vectorize.enable", i1 true')
        begin, extent = self.loop_bounds(s)
        end = self.add(s.loop_var.dtype, begin, extent)
        self.loop(s.loop_var, begin, end, lambda: self.stmt(s.body), md)

    def loop_bounds(self, s: For) -> tuple:
        """min and extent in the loop variable's dtype."""
        d = s.loop_var.dtype
        return tuple(self.convert(self.expr(x), x.dtype, d) for x in (s.min, s.extent))

    def add(self, dtype: str, a: str, b: str) -> str:
        if a == "0":
            return b
        if b == "0":
            return a
        return self.op(f"add nsw {ll_type(dtype)} {a}, {b}")

    def loop(self, var: Var, begin: str, end: str, body, md: str | None = None) -> None:
        ty = ll_type(var.dtype)
        cmp = "ult" if dt.is_uint(var.dtype) else "slt"
        head, body_l, latch, exit_l = self.label(), self.label(), self.label(), self.label()
        pre = self.fn.block
        self.emit(f"br label %{head}")
        self.start_block(head)
        i, nxt = self.tmp(), self.tmp()
        self.emit(f"{i} = phi {ty} [{begin}, %{pre}], [{nxt}, %{latch}]")
        c = self.op(f"icmp {cmp} {ty} {i}, {end}")
        self.emit(f"br i1 {c}, label %{body_l}, label %{exit_l}")
        self.start_block(body_l)
        self.bind(var, i, body)
        self.emit(f"br label %{latch}")
        self.start_block(latch)
        self.emit(f"{nxt} = add nsw {ty} {i}, 1")
        self.emit(f"br label %{head}" + (f", !llvm.loop {md}" if md else ""))
        self.start_block(exit_l)

    def parallel_for(self, s: For) -> None:
        """Run the loop on libgomp's thread pool.

        Three pieces: the caller packs the loop bounds and every value the body uses into a
        closure struct and calls ``GOMP_parallel(@f_parK, closure, threads, 0)``; ``f_parK`` (run by
        each thread) unpacks it, picks its static chunk and calls ``f_parK_body(start, stop, ...)``,
        whose buffer parameters are ``noalias`` so that, once inlined, loops in the body vectorize
        without runtime alias checks.
        """
        self.has_parallel = True
        for name, decl in (("GOMP_parallel", "declare void @GOMP_parallel(ptr, ptr, i32, i32)"),
                           ("omp_get_thread_num", "declare i32 @omp_get_thread_num()"),
                           ("omp_get_num_threads", "declare i32 @omp_get_num_threads()")):
            self.declare(name, decl)
        ity = ll_type(s.loop_var.dtype)
        begin, extent = self.loop_bounds(s)
        # one field per distinct value: two buffers resolving to one pointer must not both be noalias
        fields, keys_of = [], {}
        for key, ty in self.free_values(s.body):
            value = self.env[key]
            if value not in keys_of:
                keys_of[value] = []
                fields.append((value, ty))
            keys_of[value].append(key)
        outlined = f"{self.fn.name}_par{self.n_outlined}"
        self.n_outlined += 1

        saved = (self.fn, self.env, self.mask)
        self.in_parallel = True
        # the body: parameters (start, stop, fields...); returns a status if it has failure points
        self.fn, self.env, self.mask = _Function(outlined + "_body"), {}, None
        params = [f"{ity} %start", f"{ity} %stop"]
        for k, (value, ty) in enumerate(fields):
            name = f"%c{k}"
            params.append(f"{ty} noalias {name}" if ty == "ptr" else f"{ty} {name}")
            for key in keys_of[value]:
                self.env[key] = name
        self.loop(s.loop_var, "%start", "%stop", lambda: self.stmt(s.body))
        can_fail = self.fn.can_fail
        self.finish_function(f"define internal {'i32' if can_fail else 'void'} @{outlined}_body"
                             f"({', '.join(params)}) #0", "ret i32 0" if can_fail else "ret void")
        self.fn, self.env, self.mask = saved
        self.in_parallel = False

        # the caller: closure = (begin, extent, fields..., [status, message of the first failure])
        all_fields = [(begin, ity), (extent, ity)] + fields
        n_in = len(all_fields)
        if can_fail:
            all_fields += [("0", "i32"), ("null", "ptr")]
        sty = "{" + ", ".join(ty for _, ty in all_fields) + "}"
        closure = self.alloca(sty, 8)
        for k, (value, ty) in enumerate(all_fields):
            p = self.op(f"getelementptr inbounds {sty}, ptr {closure}, i32 0, i32 {k}")
            self.emit(f"store {ty} {value}, ptr {p}")
        # never more threads than iterations; 0 (the exported library's default) lets libgomp choose
        nt = self.op(f"load i32, ptr @{THREADS_GLOBAL}, align 4")
        cap = extent
        if ity != "i32":
            cap = self.op(f"call {ity} @llvm.smin.{ity}({ity} {extent}, {ity} 1073741824)")
            cap = self.op(f"trunc {ity} {cap} to i32")
        cap = self.op(f"call i32 @llvm.smax.i32(i32 {cap}, i32 1)")
        capped = self.op(f"call i32 @llvm.smin.i32(i32 {nt}, i32 {cap})")
        positive = self.op(f"icmp sgt i32 {nt}, 0")
        nt = self.op(f"select i1 {positive}, i32 {capped}, i32 0")
        self.emit(f"call void @GOMP_parallel(ptr @{outlined}, ptr {closure}, i32 {nt}, i32 0)")
        if can_fail:
            status_p = self.op(f"getelementptr inbounds {sty}, ptr {closure}, i32 0, i32 {n_in}")
            message_p = self.op(f"getelementptr inbounds {sty}, ptr {closure}, i32 0, i32 {n_in + 1}")
            status = self.op(f"load i32, ptr {status_p}")
            self.fail_with_status(status, self.op(f"load ptr, ptr {message_p}"))

        # the thread entry: unpack, take this thread's chunk, call the body
        saved = (self.fn, self.env)
        self.fn, self.env = _Function(outlined), {}
        vals = []
        for k, (_, ty) in enumerate(all_fields[:n_in]):
            p = self.op(f"getelementptr inbounds {sty}, ptr %closure, i32 0, i32 {k}")
            vals.append(self.op(f"load {ty}, ptr {p}"))
        lo, ext = vals[0], vals[1]
        tid = self.op("call i32 @omp_get_thread_num()")
        nth = self.op("call i32 @omp_get_num_threads()")
        if ity != "i32":
            tid, nth = self.op(f"sext i32 {tid} to {ity}"), self.op(f"sext i32 {nth} to {ity}")
        chunk = self.op(f"add nsw {ity} {ext}, {nth}")
        chunk = self.op(f"sub nsw {ity} {chunk}, 1")
        chunk = self.op(f"sdiv {ity} {chunk}, {nth}")
        start = self.op(f"mul nsw {ity} {tid}, {chunk}")
        stop = self.op(f"add nsw {ity} {start}, {chunk}")
        stop = self.op(f"call {ity} @llvm.smin.{ity}({ity} {stop}, {ity} {ext})")
        start = self.op(f"add nsw {ity} {start}, {lo}")
        stop = self.op(f"add nsw {ity} {stop}, {lo}")
        args = [f"{ity} {start}", f"{ity} {stop}"] + [f"{ty} {v}" for v, (_, ty) in zip(vals[2:], fields)]
        if can_fail:
            rc = self.op(f"call i32 @{outlined}_body({', '.join(args)})")
            self.record_first_failure(
                rc, self.op(f"getelementptr inbounds {sty}, ptr %closure, i32 0, i32 {n_in}"),
                self.op(f"getelementptr inbounds {sty}, ptr %closure, i32 0, i32 {n_in + 1}"))
        else:
            self.emit(f"call void @{outlined}_body({', '.join(args)})")
        self.finish_function(f"define internal void @{outlined}(ptr noalias %closure) #0", "ret void")
        self.fn, self.env = saved

    def free_values(self, body) -> list:
        """(key, LLVM type) of every bound variable and buffer pointer that ``body`` uses."""
        seen: dict = {}

        def visit(n):
            t = type(n)
            if t is Var or t is SizeVar:
                if n in self.env and n not in seen:
                    seen[n] = ll_type(n.dtype) if n.dtype != "handle" else "ptr"
            elif t is BufferLoad or t is BufferStore:
                self._capture_buffer(n.buffer, seen)
                if self.bound_checks:           # the checks read the buffer's extent
                    for d in n.buffer.shape:
                        post_order_visit(d, visit)
            elif t is Allocate:
                for d in n.buffer.shape:
                    if not isinstance(d, int):
                        post_order_visit(d, visit)
        post_order_visit(body, visit)
        return list(seen.items())

    def _capture_buffer(self, buf, seen) -> None:
        if buf.data in seen:
            return
        if buf.data in self.env:
            seen[buf.data] = "ptr"
        elif buf.name in self.buf_by_name:
            self.env[buf.data] = self.buf_by_name[buf.name]
            seen[buf.data] = "ptr"

    # --- memory -------------------------------------------------------------------------
    def buffer_ptr(self, buf) -> str:
        p = self.env.get(buf.data)
        if p is None:
            p = self.buf_by_name.get(buf.name) if not self.in_parallel else None
            if p is None:
                raise CodegenError(f"buffer {buf.name!r} is neither a parameter nor allocated")
        return p

    def flat_index(self, buf, indices):
        if len(indices) != 1:
            raise CodegenError(f"buffer {buf.name} is accessed with {len(indices)} indices; the LLVM "
                               "backend needs flattened (1-d) buffer accesses")
        return indices[0]

    def index_i64(self, e) -> str:
        """An index expression as i64 (sign- or zero-extended)."""
        if isinstance(e, int):
            return str(e)
        if isinstance(e, Const):
            return str(int(e.value))
        v = self.expr(e)
        if e.dtype in ("int64", "uint64"):
            return v
        return self.op(f"{'zext' if dt.is_uint(e.dtype) or dt.is_bool(e.dtype) else 'sext'} "
                       f"{ll_type(e.dtype)} {v} to i64")

    def element_ptr(self, buf, index, lanes: int = 1, store: bool = False) -> str:
        """The address of element ``index`` of ``buf`` (the first of ``lanes`` contiguous ones)."""
        base = self.buffer_ptr(buf)
        if self.bound_checks:
            i = self.index_i64(index)
            self.check_contiguous(buf, i, lanes, store)
            return base if i == "0" else self.op(f"getelementptr inbounds {mem_type(buf.dtype)}, ptr {base}, i64 {i}")
        if isinstance(index, Const) and index.value == 0:
            return base
        return self.op(f"getelementptr inbounds {mem_type(buf.dtype)}, ptr {base}, i64 {self.index_i64(index)}")

    def vector_ptrs(self, buf, index, store: bool = False) -> str:
        lanes = dt.lanes(index.dtype)
        v = self.expr(index)
        if dt.element_of(index.dtype) not in ("int64", "uint64"):
            ext = "zext" if dt.is_uint(index.dtype) else "sext"
            v = self.op(f"{ext} {ll_type(index.dtype)} {v} to <{lanes} x i64>")
        if self.bound_checks:
            self.check_lanes(buf, v, lanes, None if store else self.mask, store)
        return self.op(f"getelementptr inbounds {mem_type(buf.dtype)}, ptr {self.buffer_ptr(buf)}, "
                       f"<{lanes} x i64> {v}")

    # --- expressions --------------------------------------------------------------------
    def expr(self, e) -> str:
        try:
            fn = self._EXPR[type(e)]
        except KeyError:
            raise CodegenError(f"the LLVM backend cannot compile a {type(e).__name__} expression: "
                               f"`{e}`") from None
        return fn(self, e)

    def e_Var(self, e: Var) -> str:
        try:
            return self.env[e]
        except KeyError:
            raise CodegenError(f"variable {e.name!r} is used but not defined (not a parameter, loop "
                               "variable or let binding)") from None

    def e_Const(self, e: Const) -> str:
        return const_literal(e.value, e.dtype)

    def e_Binary(self, e: Binary) -> str:
        special = self._binary_special.get((e.op, kind(e.a.dtype)))
        a, b = self.expr(e.a), self.expr(e.b)
        if self.mask is not None and e.op in _TRAPPING and not dt.is_float(e.dtype):
            b = self.safe_divisor(b, e.b.dtype)
        if special is not None:
            return special(self, a, b, e.a.dtype)
        instr = self.binary_table.get((e.op, kind(e.a.dtype)))
        if instr is None:
            raise CodegenError(f"operator {e.op.value!r} is not defined on {e.a.dtype}: `{e}`")
        return self.op(f"{instr} {ll_type(e.a.dtype)} {a}, {b}")

    def floordiv(self, a: str, b: str, dtype: str) -> str:
        ty = ll_type(dtype)
        q = self.op(f"sdiv {ty} {a}, {b}")
        adjust = self._floor_adjust(a, b, dtype)
        return self.op(f"sub {ty} {q}, {self.op(f'zext {ll_type(_bool_of(dtype))} {adjust} to {ty}')}")

    def floormod(self, a: str, b: str, dtype: str) -> str:
        ty = ll_type(dtype)
        r = self.op(f"srem {ty} {a}, {b}")
        adjust = self._floor_adjust(a, b, dtype, r)
        rb = self.op(f"add {ty} {r}, {b}")
        return self.op(f"select {ll_type(_bool_of(dtype))} {adjust}, {ty} {rb}, {ty} {r}")

    def _floor_adjust(self, a, b, dtype, r=None) -> str:
        """True where truncation and floor differ: a non-zero remainder whose sign differs from b's."""
        ty = ll_type(dtype)
        if r is None:
            r = self.op(f"srem {ty} {a}, {b}")
        nonzero = self.op(f"icmp ne {ty} {r}, {zero(dtype)}")
        signs = self.op(f"xor {ty} {r}, {b}")
        differ = self.op(f"icmp slt {ty} {signs}, {zero(dtype)}")
        return self.op(f"and {ll_type(_bool_of(dtype))} {nonzero}, {differ}")

    def minmax(self, a: str, b: str, dtype: str, which: str) -> str:
        ty = ll_type(dtype)
        k = kind(dtype)
        if k == "f":
            c = self.op(f"fcmp {'olt' if which == 'min' else 'ogt'} {ty} {a}, {b}")
            return self.op(f"select {ll_type(_bool_of(dtype))} {c}, {ty} {a}, {ty} {b}")
        name = f"llvm.{'s' if k == 's' else 'u'}{which}.{intrinsic_suffix(dtype)}"
        self.declare(name, f"declare {ty} @{name}({ty}, {ty})")
        return self.op(f"call {ty} @{name}({ty} {a}, {ty} {b})")

    _binary_special = {
        (BinOp.FLOORDIV, "s"): floordiv,
        (BinOp.FLOORMOD, "s"): floormod,
        **{(BinOp.MIN, k): (lambda self, a, b, d: self.minmax(a, b, d, "min")) for k in "fsub"},
        **{(BinOp.MAX, k): (lambda self, a, b, d: self.minmax(a, b, d, "max")) for k in "fsub"},
    }

    def e_Unary(self, e: Unary) -> str:
        a = self.expr(e.a)
        ty = ll_type(e.dtype)
        if e.op is UnOp.NOT:
            ones = splat_literal(True, e.dtype) if dt.lanes(e.dtype) > 1 else "true"
            return self.op(f"xor {ty} {a}, {ones}")
        if dt.is_float(e.dtype):
            return self.op(f"fneg {ty} {a}")
        return self.op(f"sub {ty} {zero(e.dtype)}, {a}")

    def e_Cast(self, e: Cast) -> str:
        return self.convert(self.expr(e.value), e.value.dtype, e.dtype)

    def convert(self, v: str, src: str, dst: str) -> str:
        if src == dst:
            return v
        if dt.lanes(src) != dt.lanes(dst):
            raise CodegenError(f"cannot cast {src} to {dst}: the lane counts differ")
        if dt.is_bool(dst):
            cmp = "fcmp une" if dt.is_float(src) else "icmp ne"
            return self.op(f"{cmp} {ll_type(src)} {v}, {zero(src)}")
        if dt.is_bool(src):
            return self.op(f"{'uitofp' if dt.is_float(dst) else 'zext'} {ll_type(src)} {v} to {ll_type(dst)}")
        # float16 from anything but float32 goes through float32: LLVM would call compiler-rt
        # helpers (__truncdfhf2, ...) that a JIT process may not have
        if dt.element_of(dst) == "float16" and dt.element_of(src) == "float64":
            return self.convert(self.float64_to_float32_odd(v, src), dt.with_lanes("float32", dt.lanes(src)), dst)
        if dt.element_of(dst) == "float16" and dt.element_of(src) != "float32":
            mid = dt.with_lanes("float32", dt.lanes(src))
            return self.convert(self.convert(v, src, mid), mid, dst)
        if dt.element_of(src) == "float16" and dt.element_of(dst) != "float32":
            mid = dt.with_lanes("float32", dt.lanes(src))
            return self.convert(self.convert(v, src, mid), mid, dst)
        instr = cast_instruction(src, dst)
        if not instr:
            return v
        return self.op(f"{instr} {ll_type(src)} {v} to {ll_type(dst)}")

    def float64_to_float32_odd(self, v: str, src: str) -> str:
        """float64 -> float32 rounded to odd, so that a second rounding to float16 is exact.

        Rounding twice to nearest (double -> float -> half) can be off by one half ulp; rounding the
        first step to odd keeps a sticky bit, and float32's 13 extra bits make the second rounding
        the correctly rounded one. An inexact nearest result with an even mantissa is replaced by
        its odd neighbour on the other side of the exact value (one integer step in its bits).
        """
        n = dt.lanes(src)
        i32d = dt.with_lanes("int32", n)
        f32, f64, i32, i1 = (ll_type(dt.with_lanes("float32", n)), ll_type(src), ll_type(i32d),
                             ll_type(dt.with_lanes("bool", n)))

        def ci(v: int) -> str:
            return splat_literal(v, i32d) if n > 1 else const_literal(v, i32d)

        near = self.op(f"fptrunc {f64} {v} to {f32}")
        back = self.op(f"fpext {f32} {near} to {f64}")
        inexact = self.op(f"fcmp one {f64} {back}, {v}")
        bits = self.op(f"bitcast {f32} {near} to {i32}")
        low = self.op(f"and {i32} {bits}, {ci(1)}")
        even = self.op(f"icmp eq {i32} {low}, {ci(0)}")
        fix = self.op(f"and {i1} {inexact}, {even}")
        # bits grow with magnitude: step down when the nearest value overshot |v|, else up
        abs_back = self.math("fabs", [back], src, None)
        abs_v = self.math("fabs", [v], src, None)
        over = self.op(f"fcmp ogt {f64} {abs_back}, {abs_v}")
        step = self.op(f"select {i1} {over}, {i32} {ci(-1)}, {i32} {ci(1)}")
        moved = self.op(f"add {i32} {bits}, {step}")
        odd = self.op(f"select {i1} {fix}, {i32} {moved}, {i32} {bits}")
        return self.op(f"bitcast {i32} {odd} to {f32}")

    def e_Select(self, e: Select) -> str:
        ty = ll_type(e.dtype)
        if e.lazy and (_may_fault(e.true_value) or _may_fault(e.false_value)):
            if dt.lanes(e.condition.dtype) == 1:
                return self.branchy_select(e)
            return self.masked_select(e)
        c = self.expr(e.condition)
        t, f = self.expr(e.true_value), self.expr(e.false_value)
        return self.op(f"select {ll_type(e.condition.dtype)} {c}, {ty} {t}, {ty} {f}")

    def branchy_select(self, e: Select) -> str:
        """Evaluate only the chosen side: the other may hold an out-of-bounds load."""
        ty = ll_type(e.dtype)
        c = self.expr(e.condition)
        tl, fl, join = self.label(), self.label(), self.label()
        self.emit(f"br i1 {c}, label %{tl}, label %{fl}")
        self.start_block(tl)
        t = self.expr(e.true_value)
        t_end = self.fn.block
        self.emit(f"br label %{join}")
        self.start_block(fl)
        f = self.expr(e.false_value)
        f_end = self.fn.block
        self.emit(f"br label %{join}")
        self.start_block(join)
        return self.op(f"phi {ty} [{t}, %{t_end}], [{f}, %{f_end}]")

    def masked_select(self, e: Select) -> str:
        """A vector lazy select: vector loads on each side only touch the lanes it selects."""
        cty = ll_type(e.condition.dtype)
        c = self.expr(e.condition)
        not_c = self.op(f"xor {cty} {c}, {splat_literal(True, e.condition.dtype)}")
        outer = self.mask
        sides = []
        outer_type = self._mask_type
        self._mask_type = cty
        for m, side in ((c, e.true_value), (not_c, e.false_value)):
            self.mask = m if outer is None else self.op(f"and {cty} {outer}, {m}")
            sides.append(self.expr(side))
        self.mask, self._mask_type = outer, outer_type
        ty = ll_type(e.dtype)
        return self.op(f"select {cty} {c}, {ty} {sides[0]}, {ty} {sides[1]}")

    def e_Let(self, e: Let) -> str:
        out = []
        self.bind(e.var, self.expr(e.value), lambda: out.append(self.expr(e.body)))
        return out[0]

    def e_Ramp(self, e: Ramp) -> str:
        lanes, sd = e.lanes, e.base.dtype
        vty = ll_type(e.dtype)
        base = self.broadcast(self.expr(e.base), sd, lanes)
        if isinstance(e.stride, Const):
            s = int(e.stride.value)
            steps = f"<{', '.join(f'{ll_type(sd)} {i * s}' for i in range(lanes))}>"
        else:
            iota = f"<{', '.join(f'{ll_type(sd)} {i}' for i in range(lanes))}>"
            stride = self.broadcast(self.expr(e.stride), sd, lanes)
            steps = self.op(f"mul {vty} {stride}, {iota}")
        return self.op(f"add {vty} {base}, {steps}")

    def e_Broadcast(self, e: Broadcast) -> str:
        if isinstance(e.value, Const):
            return splat_literal(e.value.value, e.dtype)
        return self.broadcast(self.expr(e.value), e.value.dtype, e.lanes)

    def broadcast(self, v: str, dtype: str, lanes: int) -> str:
        sty = ll_type(dtype)
        vty = f"<{lanes} x {sty}>"
        one = self.op(f"insertelement {vty} poison, {sty} {v}, i64 0")
        return self.op(f"shufflevector {vty} {one}, {vty} poison, <{lanes} x i32> zeroinitializer")

    def e_BufferLoad(self, e: BufferLoad) -> str:
        buf = e.buffer
        idx = self.flat_index(buf, e.indices)
        lanes = dt.lanes(e.dtype)
        if dt.element_of(e.dtype) != dt.element_of(buf.dtype):
            raise CodegenError(f"a {e.dtype} load from {buf.name}, a {buf.dtype} buffer: `{e}`")
        mty, align = mem_type(e.dtype), dt.nbytes(buf.dtype)
        if lanes == 1:
            if dt.lanes(idx.dtype) != 1:
                raise CodegenError(f"a scalar {e.dtype} load from {buf.name} with the vector index `{idx}`")
            if self.mask is None:
                v = self.op(f"load {mty}, ptr {self.element_ptr(buf, idx)}, align {align}")
            else:
                v = self.guarded_scalar_load(buf, idx, mty, align)
        elif _is_contiguous(idx, lanes) or dt.lanes(idx.dtype) == 1:   # a scalar index: lanes from there on
            p = self.element_ptr(buf, idx.base if isinstance(idx, Ramp) else idx, lanes)
            if self.mask is None:
                v = self.op(f"load {mty}, ptr {p}, align {align}")
            else:
                v = self.op(f"call {mty} @llvm.masked.load.v{lanes}{_elem_suffix(mty)}.p0(ptr {p}, "
                            f"i32 {align}, <{lanes} x i1> {self.mask}, {mty} zeroinitializer)")
        else:
            if dt.lanes(idx.dtype) != lanes:
                raise CodegenError(f"load of {e.dtype} from {buf.name} with index `{idx}` of {idx.dtype}")
            ptrs = self.vector_ptrs(buf, idx)
            mask = self.mask or splat_literal(True, f"boolx{lanes}")
            v = self.op(f"call {mty} @llvm.masked.gather.v{lanes}{_elem_suffix(mty)}.v{lanes}p0("
                        f"<{lanes} x ptr> {ptrs}, i32 {align}, <{lanes} x i1> {mask}, {mty} zeroinitializer)")
        if dt.is_bool(e.dtype):
            v = self.op(f"icmp ne {mty} {v}, zeroinitializer")
        return v

    def safe_divisor(self, b: str, dtype: str) -> str:
        """Under a vector mask, divide by 1 where no lane needs the quotient (x86 traps on 0)."""
        ty = ll_type(dtype)
        if dt.lanes(dtype) > 1:
            return self.op(f"select {self._mask_type} {self.mask}, {ty} {b}, {ty} {splat_literal(1, dtype)}")
        lanes = self._mask_type[1:].split(" ")[0]
        anyl = self.op(f"call i1 @llvm.vector.reduce.or.v{lanes}i1({self._mask_type} {self.mask})")
        return self.op(f"select i1 {anyl}, {ty} {b}, {ty} 1")

    def guarded_scalar_load(self, buf, idx, mty: str, align: int) -> str:
        """A scalar load inside a masked (vector, lazy) select: load only if some lane needs it."""
        mty_mask = self._mask_type                    # "<8 x i1>"
        lanes = mty_mask[1:].split(" ")[0]
        anyl = self.op(f"call i1 @llvm.vector.reduce.or.v{lanes}i1({mty_mask} {self.mask})")
        load_l, join = self.label(), self.label()
        pre = self.fn.block
        self.emit(f"br i1 {anyl}, label %{load_l}, label %{join}")
        self.start_block(load_l)
        v = self.op(f"load {mty}, ptr {self.element_ptr(buf, idx)}, align {align}")
        loaded = self.fn.block
        self.emit(f"br label %{join}")
        self.start_block(join)
        return self.op(f"phi {mty} [{v}, %{loaded}], [zeroinitializer, %{pre}]")

    def e_Call(self, e: Call) -> str:
        name = e.name
        if name == "likely":
            return self.expr(e.args[0])
        d = e.dtype
        if name in ("abs", "fabs") and not dt.is_float(d):
            ty = ll_type(d)
            intr = f"llvm.abs.{intrinsic_suffix(d)}"
            self.declare(intr, f"declare {ty} @{intr}({ty}, i1)")
            return self.op(f"call {ty} @{intr}({ty} {self.expr(e.args[0])}, i1 false)")
        if name == "abs":
            name = "fabs"
        if not dt.is_float(d):
            raise CodegenError(f"the math function {name!r} needs float arguments, got {d}: `{e}`")
        args = [self.expr(a) for a in e.args]
        if dt.element_of(d) == "float16":
            # compute in float32 and round once, as numpy does
            wide = dt.with_lanes("float32", dt.lanes(d))
            args = [self.convert(a, d, wide) for a in args]
            return self.convert(self.math(name, args, wide, e), wide, d)
        return self.math(name, args, d, e)

    def math(self, name: str, args: list, d: str, e) -> str:
        ty = ll_type(d)
        if dt.element_of(d) == "float32" and dt.lanes(d) > 1 and name in _VECTOR_F32:
            return getattr(self, _VECTOR_F32[name])(args[0], d)
        if name in _MATH_INTRINSICS:
            intr = f"{_MATH_INTRINSICS[name]}.{intrinsic_suffix(d)}"
            self.declare(intr, f"declare {ty} @{intr}({', '.join([ty] * len(args))})")
            return self.op(f"call{self.fm} {ty} @{intr}({', '.join(f'{ty} {a}' for a in args)})")
        one = splat_literal(1.0, d) if dt.lanes(d) > 1 else const_literal(1.0, d)
        if name == "rsqrt":
            s = self.math("sqrt", args, d, e)
            return self.op(f"fdiv{self.fm} {ty} {one}, {s}")
        if name == "sigmoid":
            neg = self.op(f"fneg {ty} {args[0]}")
            ex = self.math("exp", [neg], d, e)
            den = self.op(f"fadd{self.fm} {ty} {one}, {ex}")
            return self.op(f"fdiv{self.fm} {ty} {one}, {den}")
        if name in _LIBM:
            return self.libm(_LIBM[name] + ("f" if dt.element_of(d) == "float32" else ""), args, d)
        raise CodegenError(f"unknown intrinsic {e.name!r} in `{e}`; the LLVM backend knows "
                           f"{', '.join(sorted(set(_MATH_INTRINSICS) | set(_LIBM) | {'rsqrt', 'sigmoid', 'abs', 'likely'}))}")

    def vector_expf(self, x: str, d: str) -> str:
        """exp on float32 vectors without a libm call per lane (LLVM would scalarize
        ``llvm.exp.v8f32``): Cephes' expf, x = n*ln2 + r, exp(r) by a degree-7 polynomial, times
        2**n built in the exponent bits. About 1 ulp; exact 0, inf and NaN at the ends."""
        lanes = dt.lanes(d)
        ty, ity = ll_type(d), f"<{lanes} x i32>"

        def c(v):
            return splat_literal(v, d)

        def f(instr, a, b):
            return self.op(f"{instr} {ty} {a}, {b}")
        xc = self.minmax(x, c(88.72283935546875), d, "min")
        xc = self.minmax(xc, c(-104.0), d, "max")
        n = self.math("floor", [f("fadd", f("fmul", xc, c(1.44269504088896341)), c(0.5))], d, None)
        r = f("fsub", xc, f("fmul", n, c(0.693359375)))
        r = f("fsub", r, f("fmul", n, c(-2.12194440e-4)))
        p = c(1.9875691500e-4)
        for k in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
            p = f("fadd", f("fmul", p, r), c(k))
        y = f("fadd", f("fadd", f("fmul", p, f("fmul", r, r)), r), c(1.0))
        # 2**n as 2**(n//2) * 2**(n - n//2): both factors stay normal for n in [-150, 128]
        i32 = f"int32x{lanes}"
        ni = self.op(f"fptosi {ty} {n} to {ity}")
        halves = (self.op(f"ashr {ity} {ni}, {splat_literal(1, i32)}"),)
        halves += (self.op(f"sub {ity} {ni}, {halves[0]}"),)
        for h in halves:
            biased = self.op(f"add {ity} {h}, {splat_literal(127, i32)}")
            bits = self.op(f"shl {ity} {biased}, {splat_literal(23, i32)}")
            y = f("fmul", y, self.op(f"bitcast {ity} {bits} to {ty}"))
        bty = ll_type(f"boolx{lanes}")
        big = self.op(f"fcmp ogt {ty} {x}, {c(88.72283935546875)}")
        y = self.op(f"select {bty} {big}, {ty} {c(float('inf'))}, {ty} {y}")
        small = self.op(f"fcmp olt {ty} {x}, {c(-103.97)}")
        y = self.op(f"select {bty} {small}, {ty} {c(0.0)}, {ty} {y}")
        nan = self.op(f"fcmp uno {ty} {x}, {x}")
        return self.op(f"select {bty} {nan}, {ty} {x}, {ty} {y}")

    def vector_logf(self, x: str, d: str) -> str:
        """log on float32 vectors (Cephes' logf): x = m * 2**e with m in [sqrt(1/2), sqrt(2)) read
        off the bits (subnormals scaled by 2**23 first), log(m) by a degree-8 polynomial in m - 1,
        plus e * ln2 in two parts. About 1 ulp; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf."""
        lanes = dt.lanes(d)
        ty, bty = ll_type(d), ll_type(f"boolx{lanes}")
        i32 = f"int32x{lanes}"
        ity = ll_type(i32)

        def c(v):
            return splat_literal(v, d)

        def ci(v):
            return splat_literal(v, i32)

        def f(instr, a, b):
            return self.op(f"{instr} {ty} {a}, {b}")

        def sel(cond, a, b, t=ty):
            return self.op(f"select {bty} {cond}, {t} {a}, {t} {b}")
        tiny = self.op(f"fcmp olt {ty} {x}, {c(1.1754943508222875e-38)}")
        xs = sel(tiny, f("fmul", x, c(8388608.0)), x)
        bits = self.op(f"bitcast {ty} {xs} to {ity}")
        e = self.op(f"sub {ity} {self.op(f'lshr {ity} {bits}, {ci(23)}')}, {ci(126)}")
        e = sel(tiny, self.op(f"sub {ity} {e}, {ci(23)}"), e, ity)
        mbits = self.op(f"or {ity} {self.op(f'and {ity} {bits}, {ci(0x007FFFFF)}')}, {ci(0x3F000000)}")
        m = self.op(f"bitcast {ity} {mbits} to {ty}")              # in [0.5, 1)
        low = self.op(f"fcmp olt {ty} {m}, {c(0.707106781186547524)}")
        e = sel(low, self.op(f"sub {ity} {e}, {ci(1)}"), e, ity)
        m = sel(low, f("fsub", f("fadd", m, m), c(1.0)), f("fsub", m, c(1.0)))
        fe = self.op(f"sitofp {ity} {e} to {ty}")
        z = f("fmul", m, m)
        p = c(7.0376836292e-2)
        for k in (-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
                  -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1):
            p = f("fadd", f("fmul", p, m), c(k))
        y = f("fmul", f("fmul", p, m), z)
        y = f("fadd", y, f("fmul", fe, c(-2.12194440e-4)))
        y = f("fsub", y, f("fmul", z, c(0.5)))
        y = f("fadd", f("fadd", m, y), f("fmul", fe, c(0.693359375)))
        # the ends: inf stays, 0 gives -inf, negatives and NaN give NaN
        y = sel(self.op(f"fcmp oeq {ty} {x}, {c(float('inf'))}"), x, y)
        y = sel(self.op(f"fcmp oeq {ty} {x}, {c(0.0)}"), c(float("-inf")), y)
        return sel(self.op(f"fcmp ult {ty} {x}, {c(0.0)}"), c(float("nan")), y)

    def vector_tanhf(self, x: str, d: str) -> str:
        """tanh on float32 vectors (Cephes' tanhf): an odd polynomial below |x| = 0.625, else
        ``1 - 2 / (exp(2|x|) + 1)`` with x's sign."""
        lanes = dt.lanes(d)
        ty, bty = ll_type(d), ll_type(f"boolx{lanes}")

        def c(v):
            return splat_literal(v, d)

        def f(instr, a, b):
            return self.op(f"{instr} {ty} {a}, {b}")
        z = f("fmul", x, x)
        p = c(-5.70498872745e-3)
        for k in (2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1):
            p = f("fadd", f("fmul", p, z), c(k))
        small = f("fadd", f("fmul", f("fmul", p, z), x), x)
        ax = self.math("fabs", [x], d, None)
        e2 = self.vector_expf(f("fmul", ax, c(2.0)), d)
        big = f("fsub", c(1.0), f("fdiv", c(2.0), f("fadd", e2, c(1.0))))
        neg = self.op(f"fcmp olt {ty} {x}, {c(0.0)}")
        big = self.op(f"select {bty} {neg}, {ty} {self.op(f'fneg {ty} {big}')}, {ty} {big}")
        is_big = self.op(f"fcmp ogt {ty} {ax}, {c(0.625)}")
        return self.op(f"select {bty} {is_big}, {ty} {big}, {ty} {small}")

    def libm(self, fname: str, args: list, d: str) -> str:
        """Call a scalar libm function, lane by lane for vectors."""
        sty = ll_type(dt.element_of(d))
        self.declare(fname, f"declare {sty} @{fname}({', '.join([sty] * len(args))}) nounwind")
        lanes = dt.lanes(d)
        if lanes == 1:
            return self.op(f"call {sty} @{fname}({', '.join(f'{sty} {a}' for a in args)})")
        vty = ll_type(d)
        out = "poison"
        for i in range(lanes):
            xs = [self.op(f"extractelement {vty} {a}, i64 {i}") for a in args]
            r = self.op(f"call {sty} @{fname}({', '.join(f'{sty} {x}' for x in xs)})")
            out = self.op(f"insertelement {vty} {out}, {sty} {r}, i64 {i}")
        return out

    _EXPR = {Var: e_Var, SizeVar: e_Var, Const: e_Const, Binary: e_Binary, Unary: e_Unary, Cast: e_Cast,
             Select: e_Select, Let: e_Let, Ramp: e_Ramp, Broadcast: e_Broadcast,
             BufferLoad: e_BufferLoad, Call: e_Call, VectorReduce: vector_reduce}
    _STMT = {SeqStmt: s_SeqStmt, AttrStmt: s_AttrStmt, Evaluate: s_Evaluate, LetStmt: s_LetStmt,
             IfThenElse: s_IfThenElse, BufferStore: s_BufferStore, Allocate: s_Allocate, For: s_For}


def _bool_of(dtype: str) -> str:
    return dt.with_lanes("bool", dt.lanes(dtype))


def _elem_suffix(vector_mem_type: str) -> str:
    """``"<8 x float>"`` → ``"f32"``."""
    elem = vector_mem_type.rsplit(" ", 1)[1].rstrip(">")
    return {"half": "f16", "float": "f32", "double": "f64"}.get(elem, elem)


def _is_contiguous(idx, lanes: int) -> bool:
    return (isinstance(idx, Ramp) and idx.lanes == lanes and isinstance(idx.stride, Const)
            and idx.stride.value == 1)


def _const_product(shape):
    n = 1
    for d in shape:
        if isinstance(d, int):
            n *= d
        elif isinstance(d, Const):
            n *= int(d.value)
        else:
            return None
    return n


def _may_fault(e) -> bool:
    """Whether evaluating ``e`` could fault: it loads memory or divides integers."""
    found = []

    def visit(n):
        if type(n) is BufferLoad or (type(n) is Binary and n.op in _TRAPPING and not dt.is_float(n.dtype)):
            found.append(n)
    post_order_visit(e, visit)
    return bool(found)


# ------------------------------------------------------------------------------------------------
# Signatures (what the runtime checks and the exported header declares)

def signature_of(func: PrimFunc) -> FuncSignature:
    """The parameters of a PrimFunc as a :class:`FuncSignature` (symbolic names made unique)."""
    names: dict = {}
    taken: dict = {}

    def var_name(v: Var) -> str:
        if v not in names:
            count = taken.get(v.name, 0)
            taken[v.name] = count + 1
            names[v] = v.name if count == 0 else f"{v.name}_{count}"
        return names[v]

    def dim(d):
        return dim_of_expr(d, var_name, lambda bad: CodegenError(
            f"{func.name}: the buffer dimension `{bad}` is not an integer expression of the shape parameters"))

    written = set()

    def visit(n):
        if type(n) is BufferStore:
            written.add(n.buffer.data)
            written.add(n.buffer.name)
    post_order_visit(func.body, visit)
    scalar_vars = [p for p in func.params if isinstance(p, Var)]
    for v in scalar_vars:          # scalar parameters keep their own names first
        var_name(v)
    params = []
    for p in func.params:
        if isinstance(p, Buffer):
            params.append(ParamSpec(p.name, "buffer", dt.element_of(p.dtype),
                                    tuple(dim(d) for d in p.shape),
                                    p.data in written or p.name in written))
        elif isinstance(p, Var):
            params.append(ParamSpec(var_name(p), "scalar", p.dtype))
    sig = FuncSignature(func.name, tuple(params))
    known = {s.name for s in sig.scalars}
    for b in sig.buffers:
        for d in b.shape:
            for n in _dim_names(d):
                if n not in known:
                    raise CodegenError(f"{func.name}: the shape of {b.name} uses {n!r}, which is not "
                                       "a parameter of the function")
    return sig


def _dim_names(d):
    if isinstance(d, str):
        yield d
    elif isinstance(d, tuple):
        for x in d[1:]:
            yield from _dim_names(x)


# ------------------------------------------------------------------------------------------------
# Entry points

def codegen_llvm(funcs, target="llvm", entry_name: str | None = None,
                 bound_checks: bool | None = None) -> LLVMSource:
    """Emit the LLVM IR text of one module holding ``funcs`` (PrimFuncs). ``bound_checks``
    (default: the current PassContext's ``tir.instrument_bound_checkers``) checks every access."""
    if isinstance(funcs, PrimFunc):
        funcs = [funcs]
    funcs = list(funcs)
    if not funcs:
        raise CodegenError("codegen_llvm needs at least one PrimFunc")
    seen = set()
    for f in funcs:
        if not isinstance(f, PrimFunc):
            raise CodegenError(f"expected PrimFuncs, got {type(f).__name__}")
        if f.name in seen:
            raise CodegenError(f"two functions are named {f.name!r}")
        seen.add(f.name)
    opts = target if isinstance(target, LLVMOptions) else parse_target(target)
    if bound_checks is None:
        from ..transform import PassContext
        bound_checks = PassContext.current().get("tir.instrument_bound_checkers")
    cg = LLVMCodegen(opts, bound_checks)
    sigs = tuple(cg.add_function(f) for f in funcs)
    entry = entry_name or funcs[0].name
    if entry not in seen:
        raise CodegenError(f"entry function {entry!r} is not among {sorted(seen)}")
    return LLVMSource(cg.module_text(), sigs, opts, entry, cg.has_parallel,
                      can_fail=ERROR_BUFFER_SYMBOL in cg.declares)


class LLVMArtifact:
    """The optimised LLVM module behind a :class:`~tilecraft.runtime.Module` built by this
    backend, and the machine code made from it on demand.

    The IR is parsed and optimised once, when the module is built, with the position-independent
    target machine that exported libraries need. Code generation waits until it is needed and
    starts from that optimised module: MCJIT compiles it on the first call, ``get_function``
    lookup or timing (with the JIT's own target machine: default relocations, large code model,
    so the code may be loaded anywhere), and ``export_library`` emits the object file from it.
    A module that is only exported, as the tuner's builder does, is optimised and compiled once.
    """

    def __init__(self, source: LLVMSource, optimized):
        self.source = source
        # Code generation rewrites the module it is given, and a copy (clone, bitcode or text)
        # loses LLVM's use-list order, which shifts register allocation a little. So the first
        # code generation gets the module as optimised (the code is then exactly what one
        # optimise-and-compile gives) and a copy is kept for a second one (JIT after export).
        self._fresh = optimized
        self._copy = None
        self._object: bytes | None = None
        self._engine = None
        self._ir_text: str | None = None
        self.has_parallel = source.has_parallel
        opts = source.options
        self.machine = {"triple": opts.triple, "cpu": opts.cpu, "features": opts.features}

    def _take_module(self):
        """An optimised module that code generation may consume (call with the lock held)."""
        if self._fresh is None:
            return self._copy.clone()
        mod, self._fresh = self._fresh, None
        self._copy = mod.clone()
        return mod

    def _unconsumed(self):
        return self._fresh if self._fresh is not None else self._copy

    def object_code(self) -> bytes:
        """The module as a position-independent object file (generated once, then kept)."""
        with _compile_lock:
            if self._object is None:
                tm = _cached_target_machine(self.source.options, "pic")
                self._object = tm.emit_object(self._take_module())
            return self._object

    @property
    def engine(self):
        """The MCJIT engine holding the JIT-compiled code; compiled on first use."""
        if self._engine is None:
            self._jit()
        return self._engine

    def function_address(self, name: str) -> int:
        return self.engine.get_function_address(name)

    def _jit(self) -> None:
        llvm = _llvm()
        with _compile_lock:
            if self._engine is not None:
                return
            if self.source.can_fail:        # its failure points call tilecraft_error_buffer()
                jit_error_support(llvm, target_machine(self.source.options))
            engine = llvm.create_mcjit_compiler(self._take_module(), target_machine(self.source.options))
            engine.finalize_object()
            if self.has_parallel:
                from ..runtime.threads import register_thread_count_cell
                register_thread_count_cell(self, engine.get_global_value_address(THREADS_GLOBAL))
            self._engine = engine

    def get_source(self, fmt: str = "ll") -> str:
        if fmt == "ll":
            with _compile_lock:
                if self._ir_text is None:
                    self._ir_text = str(self._unconsumed())
                return self._ir_text
        if fmt in ("ll-raw", "ll_raw"):
            return self.source.text
        if fmt in ("asm", "s"):      # for the JIT's target machine, from a copy of the module
            with _compile_lock:
                tm = _cached_target_machine(self.source.options, "default")
                return tm.emit_assembly(self._unconsumed().clone())
        raise ValueError(f"unknown source format {fmt!r}: expected 'll', 'll-raw', 'asm' or 'manifest'")

    def export_library(self, module, path: str) -> str:
        from .export import export_llvm
        return export_llvm(self, module, path)


def parse_and_optimize(source: LLVMSource, tm):
    llvm = _llvm()
    try:
        mod = llvm.parse_assembly(source.text)
        mod.verify()
    except RuntimeError as e:
        raise CodegenError(f"LLVM rejected the generated IR: {e}\n--- IR ---\n{source.text}") from None
    mod.triple = source.options.triple
    mod.data_layout = str(tm.target_data)
    optimize(mod, tm, source.options.opt_level)
    return mod


_compile_lock = threading.Lock()   # llvmlite parses into LLVM's global context: one build at a time


def compile_llvm(source: LLVMSource, lazy: bool = False):
    """Optimise and JIT-compile; returns a :class:`tilecraft.runtime.Module`. With ``lazy=True``
    (what :func:`build_llvm` does) only the optimisation happens now, and machine code is made
    when the module is first called or exported."""
    from functools import partial

    from ..runtime.module import Function, Module
    if source.has_parallel:
        from ..runtime.threads import libgomp_path
        libgomp_path()         # fail at build, not at the first call, when OpenMP is missing
    with _compile_lock:
        optimized = parse_and_optimize(source, _cached_target_machine(source.options, "pic"))
    artifact = LLVMArtifact(source, optimized)
    functions = {sig.name: Function(sig, partial(artifact.function_address, sig.name), keepalive=artifact,
                                    parallel=source.has_parallel, error_message=jit_error_message)
                 for sig in source.signatures}
    if not lazy:
        for f in functions.values():
            f.resolve()
    return Module(functions, source.entry_name, source.options.target, artifact)


def build_llvm(funcs, target="llvm", entry_name: str | None = None):
    """Compile PrimFuncs for the CPU: ``mod = build_llvm([func]); mod(a, b, c)``.

    The IR is optimised here; machine code is generated when the module is first called or
    exported (see :class:`LLVMArtifact`)."""
    return compile_llvm(codegen_llvm(funcs, target, entry_name), lazy=True)
