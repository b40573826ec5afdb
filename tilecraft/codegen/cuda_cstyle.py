"""A C-style source renderer: tables from IR operators and dtypes to C, and one method per node.

The CUDA renderer (``cuda.py``) subclasses it and overrides only what differs from C (thread
indices, ``__shared__``, barriers, fp16, the all-reduce, the math table). Vector expressions
(after ``vectorize``) are rendered lane by lane into small arrays, with 4/8/16-byte loads and
stores where the address is provably aligned (``vector_access``).

What C evaluates eagerly and the IR may not: the wide loads of a vector store are hoisted ahead of
the statement (``hoisted_loads``). A load inside a branch of a lazy ``if_then_else`` (which may
guard an out-of-bounds access) is hoisted only under that branch's condition, ``if (c) { wide
load }``, and not at all when the condition differs between lanes. Everything else keeps the IR's
order: ``?:`` and ``&&``/``||`` are lazy in C, a vector ``let`` is computed lane by lane.
"""
from __future__ import annotations

import re

from ..ir import dtype as dt
from ..ir.builtin import BUILTINS, symbol_of
from ..ir.expr import (AccessPtr, BinOp, Binary, Broadcast, BufferLoad, Call, Cast, Const, Let, Ramp,
                       Select, Unary, UnOp, Var, VectorReduce)
from ..ir.functor import children
from ..schedule.passes.gpu_vector_index import known_multiple
from ..ir.stmt import Allocate, AttrStmt, BufferStore, Evaluate, For, IfThenElse, LetStmt

C_TYPES = {
    "bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
    "uint64": "unsigned long long", "float16": "half", "float32": "float", "float64": "double",
    "bfloat16": "__nv_bfloat16",
}

# operators with the same meaning in C; FLOORDIV/FLOORMOD/MIN/MAX are methods
INFIX = {
    BinOp.ADD: "+", BinOp.SUB: "-", BinOp.MUL: "*", BinOp.DIV: "/", BinOp.TRUNCDIV: "/",
    BinOp.TRUNCMOD: "%", BinOp.EQ: "==", BinOp.NE: "!=", BinOp.LT: "<", BinOp.LE: "<=",
    BinOp.GT: ">", BinOp.GE: ">=", BinOp.AND: "&&", BinOp.OR: "||", BinOp.BITAND: "&",
    BinOp.BITOR: "|", BinOp.BITXOR: "^", BinOp.SHL: "<<", BinOp.SHR: ">>",
}

# raw types for 4/8/16-byte vector accesses
RAW_VECTOR = {4: "unsigned int", 8: "uint2", 16: "uint4"}


def wide_access_bytes(buf, idx, lanes: int) -> int:
    """The byte width of one wide access for a stride-1 Ramp index if it is provably aligned
    (else 0: the lanes are accessed one by one). The emulator checks the proof at run time."""
    if not isinstance(idx, Ramp) or not (isinstance(idx.stride, Const) and idx.stride.value == 1):
        return 0
    width = lanes * dt.nbytes(dt.element_of(buf.dtype))
    if width not in RAW_VECTOR:
        return 0
    return width if known_multiple(idx.base) % lanes == 0 else 0


def hoisted_loads(value, lanes: int, access=wide_access_bytes) -> list:
    """The vector loads of a vector store's ``value`` that the C loads widely before the statement,
    as ``(load, bytes, guard)`` in first-seen order. ``guard`` is ``((select, taken), ...)``: the
    lazy selects (``if_then_else``) whose branches enclose every use of the load, with the side
    taken; the C loads it only where all of them pick that side (``()``: unconditionally). A load
    under a lazy select whose condition differs between lanes, or used under different guards, is
    not hoisted (each lane loads it under its own ``?:``). ``access`` is the renderer's alignment
    proof (``wide_access_bytes``); the emulator checks the same list against the buffers' bounds.

    >>> # for  B[ramp(4t, 1, 4)] = if_then_else(i + 1 < n, A[ramp(64 * i + 4t + 64, 1, 4)], 0)
    >>> # [(A[...], 16, ((that select, True),))]:  if (i + 1 < n) { 16-byte load of A }
    """
    found: dict = {}                      # load -> [bytes, guard or None (uses disagree)]

    def walk(x, guard):
        if isinstance(x, BufferLoad) and dt.lanes(x.dtype) > 1:
            seen = found.get(x)
            if seen is not None:
                seen[1] = _merge_guards(seen[1], guard)
                return
            wide = access(x.buffer, x.indices[0], lanes)
            if wide:
                found[x] = [wide, guard]
                return
        if isinstance(x, Select) and x.lazy:
            walk(x.condition, guard)
            if dt.lanes(x.condition.dtype) == 1:      # one condition for every lane: load under it
                walk(x.true_value, guard + ((x, True),))
                walk(x.false_value, guard + ((x, False),))
            return
        for c in children(x):
            walk(c, guard)
    walk(value, ())
    return [(load, wide, guard) for load, (wide, guard) in found.items() if guard is not None]


def _merge_guards(a, b):
    """The guard of a load used under guards ``a`` and ``b``: none if either use is unguarded,
    ``a`` if they are the same selects and sides, else None (not hoisted)."""
    if a == () or b == ():
        return ()
    if a is None or b is None or len(a) != len(b):
        return None
    same = all(x[0] is y[0] and x[1] == y[1] for x, y in zip(a, b))
    return a if same else None


def _reserved_names() -> frozenset:
    """Names the generated C means something else by: C/C++ keywords, CUDA's built-in functions
    and variables, and every math function of the intrinsic table. A buffer or variable so named
    (a ``topi.max`` stage is ``max``) is renamed ``max_1``: as ``max`` it would hide the function."""
    from ..ir.intrinsics import CUDA_FAST_MATH, TABLE
    words = set("""auto break case char const continue default do double else enum extern float for goto
        if inline int long register restrict return short signed sizeof static struct switch typedef union
        unsigned void volatile while bool true false class namespace template typename new delete this
        operator private public protected virtual friend using asm half nv_bfloat16 int8_t int16_t int32_t
        int64_t uint8_t uint16_t uint32_t uint64_t max min abs fabs fabsf fmaxf fminf fmax fmin isnan isinf
        threadIdx blockIdx blockDim gridDim warpSize __syncthreads""".split())
    words |= set(CUDA_FAST_MATH)
    for row in TABLE:
        if row.cuda is not None:
            words |= {n for n in (row.cuda.float32, row.cuda.float64) if n}
    return frozenset(words)


RESERVED_NAMES = _reserved_names()


class CStyleRenderer:
    """Renders statements and expressions of one function body as C."""

    types = C_TYPES
    infix = INFIX
    indent_unit = "  "

    def __init__(self):
        self.lines: list = []
        self.names: dict = {}          # Var/Buffer (by identity) -> C name
        self.taken: set = set(RESERVED_NAMES)
        self.tmp_count = 0
        self.vec_vars: dict = {}       # vector let var -> C array name

    # --- names and types ----------------------------------------------------------------------
    def ctype(self, dtype: str) -> str:
        return self.types[dt.element_of(dtype)]

    def fresh(self, hint: str) -> str:
        base = re.sub(r"[^0-9A-Za-z_]", "_", hint) or "v"
        if base[0].isdigit():
            base = "v" + base
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    def name_of(self, obj, hint: str) -> str:
        n = self.names.get(obj)
        if n is None:
            n = self.names[obj] = self.fresh(hint)
        return n

    def buf(self, b) -> str:
        return self.name_of(b.data if b.data is not None else b, b.name)

    def tmp(self, hint: str = "t") -> str:
        self.tmp_count += 1
        return self.fresh(f"{hint}{self.tmp_count}")

    # --- output ---------------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.lines.append(self.indent_unit * depth + text)

    # --- statements -----------------------------------------------------------------------
    def stmt(self, s, d: int) -> None:
        getattr(self, "s_" + type(s).__name__)(s, d)

    def s_SeqStmt(self, s, d):
        for x in s.seq:
            self.stmt(x, d)

    def s_For(self, s: For, d):
        v = self.name_of(s.loop_var, s.loop_var.name)
        lo, ext = self.expr(s.min), self.expr(s.extent)
        end = ext if (isinstance(s.min, Const) and s.min.value == 0) else f"{lo} + {ext}"
        pragma = self.loop_pragma(s)
        if pragma:
            self.emit(d, pragma)
        t = self.ctype(s.loop_var.dtype)
        self.emit(d, f"for ({t} {v} = {lo}; {v} < {end}; ++{v}) {{")
        self.stmt(s.body, d + 1)
        self.emit(d, "}")

    def loop_pragma(self, s: For) -> str:
        return ""

    def s_IfThenElse(self, s: IfThenElse, d):
        self.emit(d, f"if ({self.expr(s.condition)}) {{")
        self.stmt(s.then_case, d + 1)
        if s.else_case is not None:
            self.emit(d, "} else {")
            self.stmt(s.else_case, d + 1)
        self.emit(d, "}")

    def s_LetStmt(self, s: LetStmt, d):
        lanes = dt.lanes(s.var.dtype)
        scoped = s.var in self.names
        if scoped:                      # the same variable bound again (replicated code): new scope
            self.emit(d, "{")
            d += 1
            del self.names[s.var]
        if lanes > 1:
            arr = self.name_of(s.var, s.var.name)
            self.vec_vars[s.var] = arr
            self.emit(d, f"{self.ctype(s.var.dtype)} {arr}[{lanes}];")
            for k in range(lanes):
                self.emit(d, f"{arr}[{k}] = {self.lane(s.value, k)};")
        else:
            v = self.name_of(s.var, s.var.name)
            self.emit(d, f"const {self.ctype(s.var.dtype)} {v} = {self.expr(s.value)};")
        self.stmt(s.body, d)
        if scoped:
            self.emit(d - 1, "}")

    def s_Evaluate(self, s: Evaluate, d):
        if isinstance(s.value, Const):
            return
        self.emit(d, self.expr(s.value) + ";")

    def s_AttrStmt(self, s: AttrStmt, d):
        self.stmt(s.body, d)

    def s_Allocate(self, s: Allocate, d):
        b = s.buffer
        key = b.data if b.data is not None else b
        scoped = key in self.names          # the same buffer allocated again (unrolled code)
        if scoped:
            self.emit(d, "{")
            d += 1
        self.emit(d, f"{self.alloc_qualifier(b)}{self.ctype(b.dtype)} {self.buf(b)}[{self.expr(b.shape[0])}];")
        self.stmt(s.body, d)
        if scoped:
            self.emit(d - 1, "}")

    def alloc_qualifier(self, b) -> str:
        return ""

    def s_BufferStore(self, s: BufferStore, d):
        lanes = dt.lanes(s.value.dtype) if dt.lanes(s.value.dtype) > 1 else dt.lanes(s.indices[0].dtype)
        if lanes == 1:
            self.emit(d, f"{self.buf(s.buffer)}[{self.expr(s.indices[0])}] = {self.expr(s.value)};")
            return
        self.vector_store(s, lanes, d)

    # --- vectors: one small array per vector value, lanes by index ------------------------------
    def vector_store(self, s: BufferStore, lanes: int, d):
        idx = s.indices[0]
        pre = self.hoist_vector_loads(s.value, lanes, d)
        vals = [self.lane(s.value, k, pre) for k in range(lanes)]
        wide = self.vector_access(s.buffer, idx, lanes)
        if wide and s.value in pre:            # a vector copy: one wide load, one wide store
            raw = RAW_VECTOR[wide]
            self.emit(d, f"*({raw}*)({self.buf(s.buffer)} + {self.expr(idx.base)}) = *({raw}*){pre[s.value]};")
            return
        if wide:
            arr = self.tmp("st")
            self.emit(d, f"__align__({wide}) {self.ctype(s.buffer.dtype)} {arr}[{lanes}];")
            for k, v in enumerate(vals):
                self.emit(d, f"{arr}[{k}] = {v};")
            raw = RAW_VECTOR[wide]
            self.emit(d, f"*({raw}*)({self.buf(s.buffer)} + {self.expr(idx.base)}) = *({raw}*){arr};")
            return
        for k, v in enumerate(vals):
            self.emit(d, f"{self.buf(s.buffer)}[{self.lane(idx, k)}] = {v};")

    def vector_access(self, buf, idx, lanes: int) -> int:
        return wide_access_bytes(buf, idx, lanes)

    def hoist_vector_loads(self, e, lanes: int, d) -> dict:
        """Load each vector BufferLoad of ``e`` that ``hoisted_loads`` picks once, widely, into a
        small array (under the conditions of the lazy selects around it)."""
        out: dict = {}
        for x, wide, guard in hoisted_loads(e, lanes, self.vector_access):
            arr = self.tmp("ld")
            raw = RAW_VECTOR[wide]
            self.emit(d, f"__align__({wide}) {self.ctype(x.dtype)} {arr}[{lanes}];")
            load = f"*({raw}*){arr} = *(const {raw}*)({self.buf(x.buffer)} + {self.expr(x.indices[0].base)});"
            if guard:
                conds = [self.expr(sel.condition) if taken else f"!{self.expr(sel.condition)}"
                         for sel, taken in guard]
                self.emit(d, f"if ({' && '.join(conds)}) {{ {load} }}")
            else:
                self.emit(d, load)
            out[x] = arr
        return out

    def lane(self, e, k: int, pre: dict | None = None) -> str:
        """The C expression for lane ``k`` of a (possibly vector) expression."""
        if dt.lanes(e.dtype) == 1:
            return self.expr(e)
        t = type(e)
        if pre and e in pre:
            return f"{pre[e]}[{k}]"
        if t is Ramp:
            return self.expr(e.base + e.stride * k) if k else self.expr(e.base)
        if t is Broadcast:
            return self.expr(e.value)
        if t is Var:
            return f"{self.vec_vars[e]}[{k}]"
        if t is BufferLoad:
            return f"{self.buf(e.buffer)}[{self.lane(e.indices[0], k, pre)}]"
        if t is Binary:
            return self.binary(e.op, self.lane(e.a, k, pre), self.lane(e.b, k, pre), dt.element_of(e.a.dtype),
                               e.b)
        if t is Unary:
            return self.unary(e.op, self.lane(e.a, k, pre), dt.element_of(e.dtype))
        if t is Cast:
            return self.cast(dt.element_of(e.dtype), dt.element_of(e.value.dtype), self.lane(e.value, k, pre))
        if t is Select:
            return (f"({self.lane(e.condition, k, pre)} ? {self.lane(e.true_value, k, pre)} : "
                    f"{self.lane(e.false_value, k, pre)})")
        if t is Call:
            return self.call(e.name, [self.lane(a, k, pre) for a in e.args], dt.element_of(e.dtype), e.args)
        raise NotImplementedError(f"cannot render lane {k} of {t.__name__}: {e}")

    # --- expressions ----------------------------------------------------------------------
    def expr(self, e) -> str:
        return getattr(self, "e_" + type(e).__name__)(e)

    def e_Var(self, e: Var) -> str:
        return self.name_of(e, e.name)

    e_SizeVar = e_Var

    def e_Const(self, e: Const) -> str:
        return self.const(e.value, e.dtype)

    def const(self, v, dtype: str) -> str:
        if dt.is_bool(dtype):
            return "true" if v else "false"
        if dt.is_float(dtype):
            return self.float_const(float(v), dtype)
        suffix = {"int64": "LL", "uint32": "U", "uint64": "ULL"}.get(dtype, "")
        if dtype == "int32" and v == -2**31:
            return "(-2147483647 - 1)"
        if dtype == "int64" and v == -2**63:
            return "(-9223372036854775807LL - 1)"
        text = f"{v}{suffix}"
        return f"({text})" if v < 0 else text

    def float_const(self, v: float, dtype: str) -> str:
        text = repr(v)
        if dtype == "float32":
            text += "f"
        return f"({text})" if v < 0 else text

    def e_Binary(self, e: Binary) -> str:
        return self.binary(e.op, self.expr(e.a), self.expr(e.b), e.a.dtype, e.b)

    def binary(self, op, a: str, b: str, dtype: str, b_node=None) -> str:
        if op is BinOp.FLOORDIV:
            return self.floordiv(a, b, dtype, b_node)
        if op is BinOp.FLOORMOD:
            return self.floormod(a, b, dtype, b_node)
        if op is BinOp.MIN or op is BinOp.MAX:
            return self.minmax(op, a, b, dtype)
        return f"({a} {self.infix[op]} {b})"

    def floordiv(self, a, b, dtype, b_node) -> str:
        return f"tc_floordiv({a}, {b})"

    def floormod(self, a, b, dtype, b_node) -> str:
        return f"tc_floormod({a}, {b})"

    def minmax(self, op, a, b, dtype) -> str:
        return f"{'min' if op is BinOp.MIN else 'max'}({a}, {b})"

    def e_Unary(self, e: Unary) -> str:
        return self.unary(e.op, self.expr(e.a), e.dtype)

    def unary(self, op, a: str, dtype: str) -> str:
        return f"(!{a})" if op is UnOp.NOT else f"(-{a})"

    def e_Cast(self, e: Cast) -> str:
        return self.cast(e.dtype, e.value.dtype, self.expr(e.value))

    def cast(self, dst: str, src: str, v: str) -> str:
        return f"(({self.ctype(dst)}){v})"

    def e_Select(self, e: Select) -> str:
        return f"({self.expr(e.condition)} ? {self.expr(e.true_value)} : {self.expr(e.false_value)})"

    def e_Call(self, e: Call) -> str:
        if e.name == "reinterpret":
            raise NotImplementedError(f"reinterpret in a kernel (`{e}`): the CUDA backend does not "
                                      f"support it yet")
        if e.name in BUILTINS:
            raise NotImplementedError(
                f"{e.name}('{symbol_of(e)}') in a kernel: this backend cannot call C functions or LLVM "
                f"intrinsics, only CUDA's math functions such as __expf or logf (a tensorized stage "
                f"lowered for the CPU can; GPU tensor intrinsics are declared with their own builtins)")
        return self.call(e.name, [self.expr(a) for a in e.args], e.dtype, e.args)

    def e_AccessPtr(self, e: AccessPtr) -> str:
        return f"(&{self.buf(e.buffer)}[{self.expr(e.offset)}])"

    def call(self, name: str, args: list, dtype: str, nodes=()) -> str:
        return f"{name}({', '.join(args)})"

    def e_BufferLoad(self, e: BufferLoad) -> str:
        return f"{self.buf(e.buffer)}[{self.expr(e.indices[0])}]"

    def e_VectorReduce(self, e: VectorReduce) -> str:
        """The lanes folded in halves (``v[:n/2] op v[n/2:]``), as the LLVM backend does."""
        elem = dt.element_of(e.value.dtype)
        v = [self.lane(e.value, k) for k in range(dt.lanes(e.value.dtype))]
        while len(v) > 2 and len(v) % 2 == 0:
            h = len(v) // 2
            v = [self.binary(e.op, v[k], v[k + h], elem) for k in range(h)]
        out = v[0]
        for x in v[1:]:
            out = self.binary(e.op, out, x, elem)
        return out

    def e_Let(self, e: Let) -> str:
        raise NotImplementedError("Let expressions are not rendered; lowering removes them")

    def e_Ramp(self, e: Ramp) -> str:
        raise NotImplementedError(f"a vector index `{e}` outside a vector statement")

    def e_Broadcast(self, e: Broadcast) -> str:
        return self.expr(e.value)
