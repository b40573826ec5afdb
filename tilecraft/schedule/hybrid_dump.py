"""``te.hybrid.build(sch, inputs, outputs)``: a schedule's loop nest printed back as a hybrid script
(TVM's ``HybridModule``), which runs as Python on numpy arrays or parses again into a stage.

Afterwards holds: the module's source is one ``def name(<inputs>)`` in the hybrid language whose
body is the loop nest of ``lower``'s ``schedule_ops`` pass (before storage flattening: tensors
keep their dimensions): each output an ``output_tensor``, each intermediate stage an
``allocate`` where the schedule realizes it, loops as ``range`` / ``parallel`` / ``vectorize`` /
``unroll`` / ``bind``, guards as ``if``. A symbolic extent that is not an input is read as
``t.shape[k]`` of an input tensor that has it. What the hybrid language cannot say is an error
naming it (C's truncating division of integers, tensor intrinsics, a view into part of a buffer).

>>> mod = te.hybrid.build(s, [n, m, a, b], [c])
>>> print(mod.get_source())
def outer_product(n, m, a, b):
    c = output_tensor((n, m), "float32")
    for i in range(n):
        ...
"""
from __future__ import annotations

import keyword
import math
import re

from ..ir.expr import BinOp, Binary, BufferLoad, BufferRegion, Call, Cast, Const, Let, Select, UnOp, Unary, Var
from ..ir.stmt import Allocate, AttrStmt, BUFFER_BIND_SCOPE, BufferStore, Evaluate, For, ForKind, IfThenElse, \
    LetStmt, SeqStmt
from ..te.tensor import Tensor
from .lower import lower

_LOOPS = {ForKind.SERIAL: "range", ForKind.PARALLEL: "parallel", ForKind.VECTORIZED: "vectorize",
          ForKind.UNROLLED: "unroll"}
_CALLS = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "sigmoid": "sigmoid", "sin": "sin",
          "cos": "cos", "floor": "floor", "ceil": "ceil", "round": "round", "trunc": "trunc", "exp2": "exp2",
          "log2": "log2", "log10": "log10", "erf": "erf", "pow": "power", "fabs": "abs", "popcount": "popcount"}
_INFIX = {BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV, BinOp.FLOORDIV, BinOp.FLOORMOD, BinOp.EQ, BinOp.NE,
          BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE, BinOp.AND, BinOp.OR}
# Python's binding strength of each operator: a child is parenthesized only where it binds weaker
_PREC = {BinOp.OR: 1, BinOp.AND: 2, BinOp.EQ: 4, BinOp.NE: 4, BinOp.LT: 4, BinOp.LE: 4, BinOp.GT: 4,
         BinOp.GE: 4, BinOp.ADD: 6, BinOp.SUB: 6, BinOp.MUL: 7, BinOp.DIV: 7, BinOp.FLOORDIV: 7,
         BinOp.FLOORMOD: 7}
_ATOM = 9
_HYBRID_NAMES = {"output_tensor", "allocate", "range", "const_range", "unroll", "parallel", "vectorize", "bind",
                 "min", "max", "abs", "len", "ceil_div", "power", "max_num_threads", *_CALLS.values(),
                 "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
                 "float64", "bool"}


class HybridDumpError(ValueError):
    """The loop nest holds something the hybrid language has no way to say."""


def build(sch, inputs, outputs, name: str = "hybrid_func"):
    """TVM's ``te.hybrid.build``: the schedule ``sch`` of ``outputs`` over ``inputs`` (tensors and
    the symbolic sizes a caller passes, ``te.var``s) as a :class:`~tilecraft.te.hybrid.HybridModule`.

    >>> mod = te.hybrid.build(s, [a, b], [c], name="outer")
    >>> mod(a_np, b_np)                          # the scheduled loops run as Python
    """
    from ..te.hybrid.module import HybridModule
    return HybridModule(dump(sch, inputs, outputs, name), name)


def dump(sch, inputs, outputs, name: str = "hybrid_func") -> str:
    """The hybrid source of ``sch``'s loop nest (see the module docstring)."""
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = list(inputs)
    for x in inputs:
        if not isinstance(x, (Tensor, Var)):
            raise HybridDumpError(f"te.hybrid.build: inputs are tensors and te.vars, got {x!r}")
    tensors = [x for x in inputs if isinstance(x, Tensor)] + outputs
    seen = {}

    def keep(pass_name, func):
        if pass_name == "schedule_ops" and "func" not in seen:
            seen["func"] = func
    lower(sch, tensors, name=name, after_pass=keep)
    func = seen["func"]
    return _Printer(name, inputs, outputs, tensors, func).source()


def _identifier(hint: str) -> str:
    base = re.sub(r"[^0-9A-Za-z_]", "_", hint) or "v"
    return "v" + base if base[0].isdigit() else base


class _Printer:
    def __init__(self, name, inputs, outputs, tensors, func):
        self.name, self.lines, self.names, self.taken = name, [], {}, set(_HYBRID_NAMES) | {name}
        self.alias = {}                       # a declared buffer (buffer_bind_scope) -> the one it views
        self.shape_of_var = {}                # a symbolic size -> "a.shape[0]"
        buffers = [p for p in func.params if not isinstance(p, Var)]
        self.params = []
        for x in inputs:
            if isinstance(x, Var):
                self.params.append(self.name_of(x, x.name))
        for t, b in zip(tensors, buffers):
            n = self.name_of(b, t.name)
            if t not in outputs:
                self.params.append(n)
                for k, d in enumerate(t.shape):
                    if isinstance(d, Var) and d not in self.names:
                        self.shape_of_var.setdefault(d, f"{n}.shape[{k}]")
        self.outputs = [(self.names[b], b) for t, b in zip(tensors, buffers) if t in outputs]
        self.body = func.body

    def name_of(self, obj, hint: str) -> str:
        n = self.names.get(obj)
        if n is None:
            base, k = _identifier(hint), 0
            n = base
            while n in self.taken or keyword.iskeyword(n):
                k += 1
                n = f"{base}_{k}"
            self.taken.add(n)
            self.names[obj] = n
        return n

    def source(self) -> str:
        self.emit(0, f"def {self.name}({', '.join(self.params)}):")
        for n, b in self.outputs:
            self.emit(1, f"{n} = output_tensor({self.shape(b.shape)}, {b.dtype!r})")
        self.stmt(self.body, 1)
        self.emit(1, f"return {', '.join(n for n, _ in self.outputs)}")
        return "\n".join(self.lines) + "\n"

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def shape(self, shape) -> str:
        items = [self.expr(d) for d in shape]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"

    def buf(self, b) -> str:
        b = self.alias.get(b, b)
        return self.name_of(b, b.name)

    # --- statements ---------------------------------------------------------------------------
    def stmt(self, s, d: int) -> None:
        n0 = len(self.lines)
        getattr(self, "s_" + type(s).__name__, self.s_unknown)(s, d)
        if len(self.lines) == n0:
            self.emit(d, "pass")

    def s_unknown(self, s, d):
        raise HybridDumpError(f"te.hybrid.build: a {type(s).__name__} statement has no hybrid form: {s}")

    def s_SeqStmt(self, s: SeqStmt, d):
        for x in s.seq:
            self.stmt(x, d)

    def s_For(self, s: For, d):
        v = self.name_of(s.loop_var, s.loop_var.name)
        if s.kind is ForKind.THREAD_BINDING:
            if not (isinstance(s.min, Const) and s.min.value == 0):
                raise HybridDumpError(f"te.hybrid.build: the thread loop '{s.loop_var.name}' starts at {s.min}")
            head = f"bind({s.thread_tag!r}, {self.expr(s.extent)})"
        else:
            rng = self.expr(s.extent) if isinstance(s.min, Const) and s.min.value == 0 else \
                f"{self.expr(s.min)}, {self.expr(s.min)} + {self.expr(s.extent)}"
            head = f"{_LOOPS[s.kind]}({rng})"
        self.emit(d, f"for {v} in {head}:")
        self.stmt(s.body, d + 1)

    def s_BufferStore(self, s: BufferStore, d):
        self.emit(d, f"{self.buf(s.buffer)}[{self.indices(s.indices)}] = {self.expr(s.value)}")

    def s_Allocate(self, s: Allocate, d):
        b = s.buffer
        self.emit(d, f"{self.buf(b)} = allocate({self.shape(b.shape)}, {b.dtype!r}, {b.scope!r})")
        self.stmt(s.body, d)

    def s_IfThenElse(self, s: IfThenElse, d):
        self.emit(d, f"if {self.expr(s.condition)}:")
        self.stmt(s.then_case, d + 1)
        if s.else_case is not None:
            self.emit(d, "else:")
            self.stmt(s.else_case, d + 1)

    def s_LetStmt(self, s: LetStmt, d):
        self.emit(d, f"{self.name_of(s.var, s.var.name)} = {self.expr(s.value)}")
        self.stmt(s.body, d)

    def s_Evaluate(self, s: Evaluate, d):
        if not isinstance(s.value, Const):
            raise HybridDumpError(f"te.hybrid.build: the call `{s.value}` has no hybrid form")

    def s_AttrStmt(self, s: AttrStmt, d):
        if s.key == BUFFER_BIND_SCOPE:
            region = s.value
            if not isinstance(region, BufferRegion) or not all(
                    isinstance(b, Const) and b.value == 0 for b in region.begin):
                raise HybridDumpError(f"te.hybrid.build: a view into part of a buffer ({region}) has no hybrid "
                                      f"form (a tensorized or extern stage)")
            self.alias[s.node] = self.alias.get(region.buffer, region.buffer)
        self.stmt(s.body, d)

    # --- expressions --------------------------------------------------------------------------
    def indices(self, idx) -> str:
        if not idx:
            raise HybridDumpError("te.hybrid.build: a 0-d tensor has no hybrid form (index it as a 1-element one)")
        return ", ".join(self.expr(i) for i in idx)

    def expr(self, e, prec: int = 0) -> str:
        """``e`` as Python, parenthesized when it binds weaker than ``prec``."""
        if isinstance(e, int):
            return str(e)
        text = getattr(self, "e_" + type(e).__name__, self.e_unknown)(e)
        p = _PREC.get(e.op, _ATOM) if isinstance(e, Binary) else 8 if isinstance(e, Unary) and e.op is UnOp.NEG \
            else 3 if isinstance(e, Unary) else 0 if isinstance(e, Select) else _ATOM
        return f"({text})" if p < prec else text

    def e_unknown(self, e):
        raise HybridDumpError(f"te.hybrid.build: `{e}` ({type(e).__name__}) has no hybrid form")

    def e_Const(self, e: Const):
        if e.dtype == "bool":
            return "True" if e.value else "False"
        if e.dtype.startswith("float"):
            v = float(e.value)
            if not math.isfinite(v):
                raise HybridDumpError(f"te.hybrid.build: the constant {v} has no hybrid form")
            return repr(v) if e.dtype == "float32" else f"{e.dtype}({v!r})"
        return str(int(e.value)) if e.dtype == "int32" else f"{e.dtype}({int(e.value)})"

    def e_Var(self, e: Var):
        if e in self.names:
            return self.names[e]
        if e in self.shape_of_var:
            return self.shape_of_var[e]
        raise HybridDumpError(f"te.hybrid.build: the size '{e.name}' is neither an input nor the extent of an "
                              f"input tensor: pass it among the inputs")

    e_SizeVar = e_Var

    def e_Binary(self, e: Binary):
        if e.op in (BinOp.MIN, BinOp.MAX):
            return f"{e.op.value}({self.expr(e.a)}, {self.expr(e.b)})"
        if e.op not in _INFIX:
            raise HybridDumpError(f"te.hybrid.build: `{e}`: the hybrid language has no {e.op.value}")
        p = _PREC[e.op]
        # left-associative; comparisons never chain (a < b < c means something else in Python)
        left = p + 1 if p == 4 else p
        return f"{self.expr(e.a, left)} {e.op.value} {self.expr(e.b, p + 1)}"

    def e_Unary(self, e: Unary):
        return f"-{self.expr(e.a, 8)}" if e.op is UnOp.NEG else f"not {self.expr(e.a, 3)}"

    def e_Cast(self, e: Cast):
        return f"{e.dtype}({self.expr(e.value)})"

    def e_Select(self, e: Select):
        return f"{self.expr(e.true_value, 1)} if {self.expr(e.condition, 1)} else {self.expr(e.false_value)}"

    def e_Call(self, e: Call):
        if e.name not in _CALLS:
            raise HybridDumpError(f"te.hybrid.build: the call `{e}` has no hybrid form")
        return f"{_CALLS[e.name]}({', '.join(self.expr(a) for a in e.args)})"

    def e_BufferLoad(self, e: BufferLoad):
        return f"{self.buf(e.buffer)}[{self.indices(e.indices)}]"

    def e_Let(self, e: Let):
        self.names[e.var] = f"({self.expr(e.value)})"       # the value in place of the variable
        return self.expr(e.body)
