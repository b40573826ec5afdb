"""TVM's ``tir.ir_builder``: write a statement imperatively, as a tensor intrinsic's lowering does.

>>> ib = tvm.tir.ir_builder.create()
>>> acc = ib.allocate("float32", (16,), name="acc", scope="local")
>>> with ib.for_range(0, 16, name="i") as i:
...     acc[i] = Ab.vload([i])
>>> with ib.if_scope(n > 0):
...     ib.emit(tvm.tir.call_extern("int32", "flush", Cb.access_ptr("w")))
>>> with ib.else_scope():
...     ib.emit(Cb.vstore([0], 0.0))
>>> stmt = ib.get()

Statements are appended to the innermost open scope (a loop, a branch); ``allocate`` and ``let``
cover the statements that follow them in their scope.
"""
from __future__ import annotations

from contextlib import contextmanager

from ..ir import dtype as dt
from ..ir.expr import BufferLoad, Expr, Var, convert
from ..ir.stmt import (Allocate, AttrStmt, Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse,
                       LetStmt, Stmt, seq)

_KINDS = {"serial": ForKind.SERIAL, "parallel": ForKind.PARALLEL, "vectorize": ForKind.VECTORIZED,
          "unroll": ForKind.UNROLLED}


class BufferVar:
    """A buffer as ``allocate`` and ``buffer_ptr`` return it: ``x[i]`` loads, ``x[i] = v`` stores."""

    def __init__(self, builder: "IRBuilder", buffer: Buffer):
        self._builder, self.buffer = builder, buffer

    def _index(self, index) -> tuple:
        idx = tuple(index) if isinstance(index, (tuple, list)) else (index,)
        if len(idx) != len(self.buffer.shape):
            raise ValueError(f"buffer '{self.buffer.name}' has {len(self.buffer.shape)} dimension(s), "
                             f"indexed with {len(idx)}")
        return tuple(convert(i) for i in idx)

    def __getitem__(self, index):
        return BufferLoad(self.buffer, self._index(index), self.buffer.dtype)

    def __setitem__(self, index, value):
        value = convert(value, self.buffer.dtype) if not isinstance(value, Expr) else value
        if value.dtype != self.buffer.dtype:
            raise ValueError(f"storing a {value.dtype} value into the {self.buffer.dtype} buffer "
                             f"'{self.buffer.name}'")
        self._builder.emit(BufferStore(self.buffer, value, self._index(index)))

    @property
    def dtype(self) -> str:
        return self.buffer.dtype


class IRBuilder:
    """Builds one statement; see the module docstring. Make one with :func:`create`."""

    def __init__(self):
        self._scopes: list[list] = [[]]
        self._loops = 0

    # --- statements ------------------------------------------------------------------------
    def emit(self, stmt) -> None:
        """Append a statement (an expression becomes ``Evaluate``, as a call for its effect)."""
        if isinstance(stmt, Expr):
            stmt = Evaluate(stmt)
        if not (isinstance(stmt, Stmt) or callable(stmt)):
            raise TypeError(f"ir_builder.emit: expected a statement or an expression, got {stmt!r}")
        self._scopes[-1].append(stmt)

    def scope_attr(self, node, attr_key: str, value) -> None:
        """Put the statements that follow in this scope under ``AttrStmt(attr_key, node, value)``."""
        value = convert(value) if not isinstance(value, (str, type(None))) else value
        self.emit(lambda body: AttrStmt(attr_key, node, value, body))

    @contextmanager
    def for_range(self, begin, end, name: str = "i", dtype: str = "int32", kind: str = "serial"):
        """A loop ``for name in range(begin, end)``; yields its variable. ``kind``: "serial",
        "parallel", "vectorize" or "unroll". Nested loops left named "i" become j, k, ..."""
        if kind not in _KINDS:
            raise ValueError(f"ir_builder.for_range: kind must be one of {', '.join(_KINDS)}, got {kind!r}")
        if name == "i":
            name = "ijk"[self._loops] if self._loops < 3 else f"i_{self._loops - 3}"
        self._loops += 1
        var = Var(name, dt.normalize(dtype))
        begin = convert(begin, var.dtype) if not isinstance(begin, Expr) else begin
        end = convert(end, var.dtype) if not isinstance(end, Expr) else end
        self._scopes.append([])
        try:
            yield var
        finally:
            self._loops -= 1
        body = self._close()
        extent = end - begin
        self.emit(For(var, begin, extent, _KINDS[kind], body))

    @contextmanager
    def if_scope(self, cond):
        """The statements of the block run where ``cond`` holds; an ``else_scope`` may follow."""
        cond = convert(cond)
        if not dt.is_bool(cond.dtype):
            raise ValueError(f"ir_builder.if_scope: the condition `{cond}` is {cond.dtype}, not bool")
        self._scopes.append([])
        yield
        self.emit(IfThenElse(cond, self._close()))

    @contextmanager
    def else_scope(self):
        """The statements run where the condition of the ``if_scope`` just closed fails."""
        prev = self._scopes[-1][-1] if self._scopes[-1] else None
        if not isinstance(prev, IfThenElse) or prev.else_case is not None:
            raise ValueError("ir_builder.else_scope must follow an if_scope")
        self._scopes[-1].pop()
        self._scopes.append([])
        yield
        self.emit(IfThenElse(prev.condition, prev.then_case, self._close()))

    def let(self, var_name: str, value) -> Var:
        """A variable bound to ``value`` for the statements that follow in this scope."""
        value = convert(value)
        var = Var(var_name, value.dtype)
        self.emit(lambda body: LetStmt(var, value, body))
        return var

    def allocate(self, dtype, shape, name: str = "buf", scope: str = "local") -> BufferVar:
        """A buffer for the statements that follow in this scope: ``x = ib.allocate("float32",
        (16,), "x")``, then ``x[i] = ...`` and ``x[i]``."""
        shape = tuple(convert(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        buf = Buffer(name, shape, dt.normalize(dtype), scope or "local")
        self.emit(lambda body: Allocate(buf, body))
        return BufferVar(self, buf)

    def buffer_ptr(self, buffer: Buffer) -> BufferVar:
        """Index a buffer (a declared one, an argument) with ``x[i]`` / ``x[i] = v``."""
        return BufferVar(self, buffer)

    # --- result ----------------------------------------------------------------------------
    def _close(self) -> Stmt:
        items = self._scopes.pop()
        body = None
        for item in reversed(items):
            if callable(item) and not isinstance(item, Stmt):
                body = item(body if body is not None else Evaluate(0))
            else:
                body = seq(item, body)
        return body if body is not None else Evaluate(0)

    def get(self) -> Stmt:
        """The statement built so far (every scope must be closed)."""
        if len(self._scopes) != 1:
            raise ValueError("ir_builder.get: a scope (for_range, if_scope) is still open")
        items = self._scopes[0]
        self._scopes.append(list(items))
        return self._close()


def create() -> IRBuilder:
    """A new builder: ``ib = tvm.tir.ir_builder.create()``."""
    return IRBuilder()
