"""LLVM backend, the code generator: lowered ``PrimFunc`` → LLVM IR text.

Entry points:

* :func:`build_llvm` ``(funcs, target="llvm", entry_name=None) -> tilecraft.runtime.Module``
* :func:`codegen_llvm` ``(funcs, target) -> LLVMSource`` (text and signatures; no LLVM calls)
* ``llvm_jit.compile_llvm`` ``(source, lazy=False) -> Module`` (parse, ``opt``, MCJIT; ``lazy`` defers MCJIT)

The backend's other files: ``llvm_target.py`` (target options, target machines, the ``O<n>``
pipeline), ``llvm_jit.py`` (optimisation and machine code, on first use), ``llvm_types.py`` (types
and constants), and the mixins of :class:`LLVMCodegen`: ``llvm_parallel.py`` (parallel loops),
``llvm_math.py`` (intrinsic calls, as the intrinsic table's ``llvm=`` entries say, after
``codegen_llvm`` has legalized each function for LLVM), ``llvm_status.py`` (failure points), ``llvm_bounds.py`` (bound
checks); ``llvm_vector_reduce.py`` emits ``VectorReduce`` (the lanes of a vector folded in halves).

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
of at most 64 KiB, else ``aligned_alloc(64, ...)``/``free`` around its body, the size computed in
64 bits (the IR's int32 ``m * n`` may exceed 2**31 - 1); a NULL from
``aligned_alloc`` returns ``STATUS_OUT_OF_MEMORY`` naming the buffer and the bytes. Under
``PassContext(config={"tir.instrument_bound_checkers": True})`` every load and store is checked
against its buffer first (``llvm_bounds.py``).
"""
from __future__ import annotations

import re

from ..ir import dtype as dt
from ..ir.builtin import BUILTINS
from ..ir.packed import PACKED_CALL
from ..ir.expr import (AccessPtr, BinOp, Binary, Broadcast, BufferLoad, Call, Cast, Const, Let, Ramp,
                       Select, SizeVar, StringImm, Unary, UnOp, Var, VectorReduce)
from ..ir.functor import post_order_visit
from ..ir.stmt import (Allocate, AttrStmt, Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse,
                       LetStmt, PrimFunc, SeqStmt)
from ..runtime.signature import FuncSignature, signature_of
from ..runtime.status import STATUS_OUT_OF_MEMORY
from ..schedule.passes.legalize import legalize_func
from .llvm_bounds import BoundChecks
from .llvm_calls import CallEmitter
from .llvm_jit import LLVMSource, compile_llvm
from .llvm_math import MathCalls
from .llvm_parallel import THREADS_GLOBAL, ParallelLoops
from .llvm_status import ERROR_BUFFER_SYMBOL, StatusEmitter, printf_escape
from .llvm_target import LLVMOptions, parse_target
from .llvm_types import (CodegenError, cast_instruction, const_literal, intrinsic_suffix, kind, ll_type,
                         mem_type, splat_literal, zero)
from .llvm_vector_reduce import vector_reduce

STACK_LIMIT_BYTES = 64 * 1024

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

# the C ABI widens small integer arguments; LLVM must know how (as clang marks them)
_ARG_EXTENSION = {"bool": " zeroext", "uint8": " zeroext", "uint16": " zeroext",
                  "int8": " signext", "int16": " signext"}

# the integer ops of a size expression, done in i64 (see LLVMCodegen.size_i64)
_SIZE_OPS = {
    BinOp.ADD: lambda cg, a, b: cg.op(f"add nsw i64 {a}, {b}"),
    BinOp.SUB: lambda cg, a, b: cg.op(f"sub nsw i64 {a}, {b}"),
    BinOp.MUL: lambda cg, a, b: cg.op(f"mul nsw i64 {a}, {b}"),
    BinOp.FLOORDIV: lambda cg, a, b: cg.floordiv(a, b, "int64"),
    BinOp.FLOORMOD: lambda cg, a, b: cg.floormod(a, b, "int64"),
    BinOp.MIN: lambda cg, a, b: cg.minmax(a, b, "int64", "min"),
    BinOp.MAX: lambda cg, a, b: cg.minmax(a, b, "int64", "max"),
}

# integer ops whose untaken branch could trap (x86 traps on division by zero)
_TRAPPING = frozenset({BinOp.TRUNCDIV, BinOp.TRUNCMOD, BinOp.FLOORDIV, BinOp.FLOORMOD})


# ------------------------------------------------------------------------------------------------
# Code generation

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


class LLVMCodegen(StatusEmitter, BoundChecks, ParallelLoops, MathCalls, CallEmitter):
    """Emits one LLVM module for a list of PrimFuncs. Expressions and statements are dispatched
    by node class through the ``_EXPR``/``_STMT`` tables; binary operators through ``_BINARY``
    plus the few overrides in ``_binary_special``; failure points through ``fail_if``
    (:class:`~tilecraft.codegen.llvm_status.StatusEmitter`); the mixins emit parallel loops
    (``llvm_parallel.py``), math calls (``llvm_math.py``), calls of C functions and LLVM
    intrinsics and buffer pointers (``llvm_calls.py``), failure points (``llvm_status.py``)
    and bound checks (``llvm_bounds.py``)."""

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
        self.externs: dict = {}               # C symbol -> (return type, argument types)
        self.function_names: set = set()      # the module's functions (no extern may be named so)
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

    def new_function(self, name: str) -> _Function:
        """Fresh state for an LLVM function being emitted (the mixins outline functions too)."""
        return _Function(name)

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
        sig = signature_of(func, CodegenError)
        self.func_name = func.name
        self.fn = self.new_function(func.name)
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
        # a chain of lets (CSE makes hundreds in an unrolled micro-kernel) binds in a loop: one
        # Python frame for the chain, not a few per let
        saved = []
        while isinstance(s, LetStmt):
            saved.append((s.var, self.env.get(s.var)))
            self.env[s.var] = self.expr(s.value)
            s = s.body
        self.stmt(s)
        for var, old in reversed(saved):
            if old is None:
                del self.env[var]
            else:
                self.env[var] = old

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
            v = self.size_i64(d)
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

    def size_i64(self, e) -> str:
        """A size (a buffer extent, a product of loop extents) as i64, its arithmetic done in 64
        bits: the IR states ``m * n`` in int32, whose true value may not fit in 32 bits."""
        if type(e) is Binary and e.op in _SIZE_OPS and dt.lanes(e.dtype) == 1 and not dt.is_float(e.dtype):
            a, b = self.size_i64(e.a), self.size_i64(e.b)
            return _SIZE_OPS[e.op](self, a, b)
        return self.index_i64(e)

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
        # helpers (__truncdfhf2, ...) that a JIT process may not have. From float64 that would
        # round twice: legalize puts round_to_float32_odd (float64_to_float32_odd) first.
        if dt.element_of(dst) == "float16" and dt.element_of(src) == "float64":
            raise CodegenError(f"cannot convert {src} to {dst} in one rounding: the function was not "
                               f"legalized for LLVM (legalize_func)")
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
        if e.name in BUILTINS:                  # call_extern, call_llvm_intrin, ...
            return self.builtin_call(e)
        if e.name == PACKED_CALL:               # call_packed: a Python function (llvm_calls.py)
            return self.packed_call(e)
        return MathCalls.e_Call(self, e)

    _EXPR = {Var: e_Var, SizeVar: e_Var, Const: e_Const, Binary: e_Binary, Unary: e_Unary, Cast: e_Cast,
             Select: e_Select, Let: e_Let, Ramp: e_Ramp, Broadcast: e_Broadcast,
             BufferLoad: e_BufferLoad, Call: e_Call, AccessPtr: CallEmitter.e_AccessPtr,
             StringImm: CallEmitter.e_StringImm, VectorReduce: vector_reduce}
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
    # what LLVM lacks in terms of what it has (a no-op for functions lowered with target="llvm")
    funcs = [legalize_func(f, "llvm") for f in funcs]
    if bound_checks is None:
        from ..transform import PassContext
        bound_checks = PassContext.current().get("tir.instrument_bound_checkers")
    cg = LLVMCodegen(opts, bound_checks)
    cg.function_names = set(seen)
    sigs = tuple(cg.add_function(f) for f in funcs)
    entry = entry_name or funcs[0].name
    if entry not in seen:
        raise CodegenError(f"entry function {entry!r} is not among {sorted(seen)}")
    imports = tuple(dict.fromkeys(text for f in funcs for text in f.attr("import_llvm", ())))
    return LLVMSource(cg.module_text(), sigs, opts, entry, cg.has_parallel,
                      can_fail=ERROR_BUFFER_SYMBOL in cg.declares, imports=imports,
                      externs=tuple(cg.externs))


def build_llvm(funcs, target="llvm", entry_name: str | None = None):
    """Compile PrimFuncs for the CPU: ``mod = build_llvm([func]); mod(a, b, c)``.

    The IR is optimised here; machine code is generated when the module is first called or
    exported (see :class:`~tilecraft.codegen.llvm_jit.LLVMArtifact`)."""
    return compile_llvm(codegen_llvm(funcs, target, entry_name), lazy=True)
