"""Prints IR as readable, Python-like code (the format of golden files and ``lower(...)``).

Example::

    def vadd(A: float32[n], B: float32[n], C: float32[n], n: int32):
      for i.outer in parallel(0, (n + 63) // 64):
        for i.inner in vectorized(0, 64):
          if i.outer * 64 + i.inner < n:
            C[i.outer * 64 + i.inner] = A[i.outer * 64 + i.inner] + B[i.outer * 64 + i.inner]

Distinct variables with the same name are printed with a ``_1``, ``_2`` suffix.
"""
from __future__ import annotations

from . import dtype as dt
import json

from .expr import (AccessPtr, BinOp, Binary, Broadcast, BufferLoad, BufferRegion, Call, Cast, Const,
                   Let, Ramp, Reduce, Select, SizeVar, StringImm, TensorLoad, Unary, UnOp, Var,
                   VectorReduce, IterVar)
from .stmt import (Allocate, AttrStmt, BufferStore, Evaluate, For, ForKind, IfThenElse, LetStmt,
                   SeqStmt, Buffer, PrimFunc)

_PREC = {
    BinOp.OR: 1, BinOp.AND: 2,
    BinOp.EQ: 4, BinOp.NE: 4, BinOp.LT: 4, BinOp.LE: 4, BinOp.GT: 4, BinOp.GE: 4,
    BinOp.BITOR: 5, BinOp.BITXOR: 6, BinOp.BITAND: 7, BinOp.SHL: 8, BinOp.SHR: 8,
    BinOp.ADD: 9, BinOp.SUB: 9,
    BinOp.MUL: 10, BinOp.DIV: 10, BinOp.FLOORDIV: 10, BinOp.FLOORMOD: 10,
}
_FUNC_OPS = {BinOp.MIN: "min", BinOp.MAX: "max", BinOp.TRUNCDIV: "truncdiv", BinOp.TRUNCMOD: "truncmod"}
_ATOM = 12
# vector_reduce_add(v), vector_reduce_max(v), ...
_REDUCE_NAMES = {BinOp.ADD: "add", BinOp.MUL: "mul", BinOp.MIN: "min", BinOp.MAX: "max",
                 BinOp.AND: "and", BinOp.OR: "or", BinOp.BITAND: "bitand", BinOp.BITOR: "bitor",
                 BinOp.BITXOR: "bitxor"}


class Printer:
    def __init__(self):
        self.names: dict[int, str] = {}
        self.taken: dict[str, int] = {}
        self.lines: list[str] = []

    def name(self, v) -> str:
        key = id(v)
        n = self.names.get(key)
        if n is None:
            base = v.name
            count = self.taken.get(base, 0)
            n = base if count == 0 else f"{base}_{count}"
            self.taken[base] = count + 1
            self.names[key] = n
        return n

    # expressions ------------------------------------------------------------------------
    def expr(self, e, prec: int = 0) -> str:
        s, p = self._expr(e)
        return f"({s})" if p < prec else s

    def _expr(self, e):
        t = type(e)
        if t is Var or t is SizeVar:
            return self.name(e), _ATOM
        if t is Const:
            return self._const(e), _ATOM
        if t is Binary:
            if e.op in _FUNC_OPS:
                return f"{_FUNC_OPS[e.op]}({self.expr(e.a)}, {self.expr(e.b)})", _ATOM
            p = _PREC[e.op]
            # left-associative: the right operand needs parentheses at equal precedence
            return f"{self.expr(e.a, p)} {e.op.value} {self.expr(e.b, p + 1)}", p
        if t is Unary:
            if e.op is UnOp.NOT:
                return f"not {self.expr(e.a, 3)}", 3
            return f"-{self.expr(e.a, 11)}", 11
        if t is Cast:
            return f"{e.dtype}({self.expr(e.value)})", _ATOM
        if t is Select:
            fn = "if_then_else" if e.lazy else "select"
            return f"{fn}({self.expr(e.condition)}, {self.expr(e.true_value)}, {self.expr(e.false_value)})", _ATOM
        if t is Call:
            if e.name == "reinterpret":       # the dtype is the whole point: tir.reinterpret's form
                return f'reinterpret("{e.dtype}", {self.expr(e.args[0])})', _ATOM
            return f"{e.name}({', '.join(self.expr(a) for a in e.args)})", _ATOM
        if t is TensorLoad:
            return f"{e.tensor.name}[{', '.join(self.expr(i) for i in e.indices)}]", _ATOM
        if t is BufferLoad:
            return f"{self.buffer_name(e.buffer)}[{', '.join(self.expr(i) for i in e.indices)}]", _ATOM
        if t is Reduce:
            src = ", ".join(self.expr(s) for s in e.source)
            if len(e.source) > 1:
                src = f"({src})"
            axes = ", ".join(self.name(a.var) for a in e.axis)
            extra = ""
            if not (isinstance(e.condition, Const) and e.condition.value is True):
                extra = f", where={self.expr(e.condition)}"
            if e.init:
                init = ", ".join(self.expr(x) for x in e.init)
                extra += f", init={init if len(e.init) == 1 else '(' + init + ')'}"
            sel = f"[{e.value_index}]" if len(e.source) > 1 else ""
            return f"{e.combiner.name}({src}, axis=[{axes}]{extra}){sel}", _ATOM
        if t is Ramp:
            return f"ramp({self.expr(e.base)}, {self.expr(e.stride)}, {e.lanes})", _ATOM
        if t is Broadcast:
            return f"broadcast({self.expr(e.value)}, {e.lanes})", _ATOM
        if t is VectorReduce:
            return f"vector_reduce_{_REDUCE_NAMES[e.op]}({self.expr(e.value)})", _ATOM
        if t is Let:
            return f"let({self.name(e.var)} = {self.expr(e.value)}, {self.expr(e.body)})", _ATOM
        if t is StringImm:
            return json.dumps(e.value), _ATOM
        if t is AccessPtr:
            mask = {1: "r", 2: "w", 3: "rw"}.get(e.access_mask, e.access_mask)
            return (f'{self.buffer_name(e.buffer)}.access_ptr("{mask}", offset={self.expr(e.offset)}, '
                    f'extent={self.expr(e.extent)})'), _ATOM
        if t is BufferRegion:
            box = ", ".join(f"{self.expr(b)}:+{self.expr(x)}" for b, x in zip(e.begin, e.extent))
            strides = f" (strides {', '.join(self.expr(x) for x in e.strides)})" if e.strides else ""
            return f"{self.buffer_name(e.buffer)}[{box}]{strides}", _ATOM
        return repr(e), _ATOM

    @staticmethod
    def _const(e) -> str:
        if dt.is_bool(e.dtype):
            return "True" if e.value else "False"
        if dt.is_float(e.dtype):
            v = repr(float(e.value))
            return v if e.dtype == "float32" else f"{e.dtype}({v})"
        return str(e.value) if e.dtype == "int32" else f"{e.dtype}({e.value})"

    def buffer_name(self, b) -> str:
        return self.name(b.data) if b.data is not None else b.name

    # statements ---------------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def stmt(self, s, depth: int) -> None:
        t = type(s)
        if t is SeqStmt:
            for x in s.seq:
                self.stmt(x, depth)
        elif t is For:
            kind = {ForKind.SERIAL: "range", ForKind.PARALLEL: "parallel", ForKind.VECTORIZED: "vectorized",
                    ForKind.UNROLLED: "unroll", ForKind.THREAD_BINDING: "thread_binding"}[s.kind]
            extra = f', thread="{s.thread_tag}"' if s.thread_tag else ""
            for k, v in s.annotations:
                extra += f", {k}={v!r}"
            self.emit(depth, f"for {self.name(s.loop_var)} in {kind}({self.expr(s.min)}, "
                             f"{self.expr(s.extent)}{extra}):")
            self.stmt(s.body, depth + 1)
        elif t is BufferStore:
            idx = ", ".join(self.expr(i) for i in s.indices)
            self.emit(depth, f"{self.buffer_name(s.buffer)}[{idx}] = {self.expr(s.value)}")
        elif t is Allocate:
            b = s.buffer
            shape = ", ".join(self.expr(x) for x in b.shape)
            self.emit(depth, f"{self.buffer_name(b)} = allocate({b.dtype}[{shape}], \"{b.scope}\")")
            self.stmt(s.body, depth)
        elif t is IfThenElse:
            self.emit(depth, f"if {self.expr(s.condition)}:")
            self.stmt(s.then_case, depth + 1)
            if s.else_case is not None:
                self.emit(depth, "else:")
                self.stmt(s.else_case, depth + 1)
        elif t is LetStmt:
            self.emit(depth, f"{self.name(s.var)} = {self.expr(s.value)}")
            self.stmt(s.body, depth)
        elif t is Evaluate:
            self.emit(depth, self.expr(s.value))
        elif t is AttrStmt:
            node = self.buffer_name(s.node) if isinstance(s.node, Buffer) else \
                s.node.name if hasattr(s.node, "name") else s.node
            val = self.expr(s.value) if hasattr(s.value, "dtype") else repr(s.value)
            self.emit(depth, f"# attr {s.key}({node}) = {val}")
            self.stmt(s.body, depth)
        else:
            self.emit(depth, repr(s))

    def func(self, f: PrimFunc) -> str:
        params = []
        for p in f.params:
            if isinstance(p, Buffer):
                shape = ", ".join(self.expr(x) for x in p.shape)
                params.append(f"{self.buffer_name(p)}: {p.dtype}[{shape}]")
            else:
                params.append(f"{self.name(p)}: {p.dtype}")
        head = f"def {f.name}({', '.join(params)}):"
        self.lines = []
        for text in f.attr("import_llvm", ()):
            self.emit(1, f"# import_llvm: {len(text.splitlines())} lines of LLVM IR")
        self.stmt(f.body, 1)
        return "\n".join([head] + self.lines)


def expr_str(e) -> str:
    return Printer().expr(e)


def stmt_str(s) -> str:
    p = Printer()
    p.stmt(s, 0)
    return "\n".join(p.lines)


def func_str(f) -> str:
    return Printer().func(f)
