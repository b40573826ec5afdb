"""Traversals over the IR: a rewriter that rebuilds only what changed, a read-only walk,
substitution and structural equality.

``IRMutator`` dispatches on the node's class to ``visit_<Class>`` methods; a subclass overrides
the ones it cares about and calls ``self.visit_expr``/``self.visit_stmt`` (or the default
method) for the children. A rewrite that changes nothing returns the very same node.
"""
from __future__ import annotations

from .expr import (Binary, Broadcast, BufferLoad, Call, Cast, Const, Expr, Let, Ramp, Reduce,
                   Select, SizeVar, TensorLoad, Unary, Var, IterVar, Range, CommReducer)
from .stmt import (Allocate, AttrStmt, BufferStore, Evaluate, For, IfThenElse, LetStmt, SeqStmt,
                   Stmt, Buffer)


def _same_seq(a, b) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


class IRMutator:
    """Rebuilds a tree bottom-up. Override ``visit_<NodeClass>(self, node)`` to rewrite."""

    def visit_expr(self, e: Expr) -> Expr:
        return getattr(self, "visit_" + type(e).__name__)(e)

    def visit_stmt(self, s: Stmt) -> Stmt:
        return getattr(self, "visit_" + type(s).__name__)(s)

    def visit(self, node):
        return self.visit_stmt(node) if isinstance(node, Stmt) else self.visit_expr(node)

    def _exprs(self, es: tuple) -> tuple:
        new = tuple(self.visit_expr(x) for x in es)
        return es if _same_seq(es, new) else new

    # expressions
    def visit_Var(self, e): return e
    visit_SizeVar = visit_Var

    def visit_Const(self, e): return e

    def visit_Binary(self, e):
        a, b = self.visit_expr(e.a), self.visit_expr(e.b)
        return e if (a is e.a and b is e.b) else Binary(e.op, a, b, e.dtype)

    def visit_Unary(self, e):
        a = self.visit_expr(e.a)
        return e if a is e.a else Unary(e.op, a, e.dtype)

    def visit_Cast(self, e):
        v = self.visit_expr(e.value)
        return e if v is e.value else Cast(e.dtype, v)

    def visit_Select(self, e):
        c, t, f = self.visit_expr(e.condition), self.visit_expr(e.true_value), self.visit_expr(e.false_value)
        if c is e.condition and t is e.true_value and f is e.false_value:
            return e
        return Select(c, t, f, e.lazy)

    def visit_Call(self, e):
        args = self._exprs(e.args)
        return e if args is e.args else Call(e.name, args, e.dtype)

    def visit_TensorLoad(self, e):
        idx = self._exprs(e.indices)
        return e if idx is e.indices else TensorLoad(e.tensor, idx)

    def visit_BufferLoad(self, e):
        idx = self._exprs(e.indices)
        return e if idx is e.indices else BufferLoad(e.buffer, idx, e.dtype)

    def visit_Reduce(self, e):
        src = self._exprs(e.source)
        cond = self.visit_expr(e.condition)
        init = self._exprs(e.init)
        if src is e.source and cond is e.condition and init is e.init:
            return e
        return Reduce(e.combiner, src, e.axis, cond, e.value_index, init)

    def visit_Ramp(self, e):
        b, s = self.visit_expr(e.base), self.visit_expr(e.stride)
        return e if (b is e.base and s is e.stride) else Ramp(b, s, e.lanes)

    def visit_Broadcast(self, e):
        v = self.visit_expr(e.value)
        return e if v is e.value else Broadcast(v, e.lanes)

    def visit_Let(self, e):
        v, b = self.visit_expr(e.value), self.visit_expr(e.body)
        return e if (v is e.value and b is e.body) else Let(e.var, v, b)

    # statements
    def visit_For(self, s):
        mn, ext, body = self.visit_expr(s.min), self.visit_expr(s.extent), self.visit_stmt(s.body)
        if mn is s.min and ext is s.extent and body is s.body:
            return s
        return For(s.loop_var, mn, ext, s.kind, body, s.thread_tag, s.annotations)

    def visit_BufferStore(self, s):
        v, idx = self.visit_expr(s.value), self._exprs(s.indices)
        return s if (v is s.value and idx is s.indices) else BufferStore(s.buffer, v, idx)

    def visit_Allocate(self, s):
        b = self.visit_stmt(s.body)
        return s if b is s.body else Allocate(s.buffer, b)

    def visit_SeqStmt(self, s):
        new = [self.visit_stmt(x) for x in s.seq]
        if _same_seq(s.seq, new):
            return s
        from .stmt import seq
        return seq(*new) or Evaluate(Const(0, "int32"))

    def visit_IfThenElse(self, s):
        c = self.visit_expr(s.condition)
        t = self.visit_stmt(s.then_case)
        f = self.visit_stmt(s.else_case) if s.else_case is not None else None
        if c is s.condition and t is s.then_case and f is s.else_case:
            return s
        return IfThenElse(c, t, f)

    def visit_LetStmt(self, s):
        v, b = self.visit_expr(s.value), self.visit_stmt(s.body)
        return s if (v is s.value and b is s.body) else LetStmt(s.var, v, b)

    def visit_Evaluate(self, s):
        v = self.visit_expr(s.value)
        return s if v is s.value else Evaluate(v)

    def visit_AttrStmt(self, s):
        v = self.visit_expr(s.value) if isinstance(s.value, Expr) else s.value
        b = self.visit_stmt(s.body)
        return s if (v is s.value and b is s.body) else AttrStmt(s.key, s.node, v, b)


def children(node) -> tuple:
    """The direct sub-nodes (expressions and statements) of a node, in field order."""
    t = type(node)
    if t is Binary: return (node.a, node.b)
    if t in (Var, SizeVar, Const): return ()
    if t is Unary: return (node.a,)
    if t is Cast: return (node.value,)
    if t is Select: return (node.condition, node.true_value, node.false_value)
    if t is Call: return node.args
    if t is TensorLoad or t is BufferLoad: return node.indices
    if t is Reduce: return node.source + node.init + (node.condition,)
    if t is Ramp: return (node.base, node.stride)
    if t is Broadcast: return (node.value,)
    if t is Let: return (node.value, node.body)
    if t is For: return (node.min, node.extent, node.body)
    if t is BufferStore: return (node.value,) + node.indices
    if t is Allocate: return (node.body,)
    if t is SeqStmt: return node.seq
    if t is IfThenElse:
        return (node.condition, node.then_case) + ((node.else_case,) if node.else_case is not None else ())
    if t is LetStmt: return (node.value, node.body)
    if t is Evaluate: return (node.value,)
    if t is AttrStmt: return ((node.value,) if isinstance(node.value, Expr) else ()) + (node.body,)
    raise TypeError(f"not an IR node: {node!r}")


def post_order_visit(node, fn) -> None:
    """Call ``fn`` on every node below and including ``node``, children first."""
    stack = [(node, False)]
    while stack:
        n, done = stack.pop()
        if done:
            fn(n)
            continue
        stack.append((n, True))
        for c in reversed(children(n)):
            stack.append((c, False))


def collect_vars(node) -> set:
    """The set of ``Var`` objects that occur in a tree."""
    out = set()

    def f(n):
        if isinstance(n, Var):
            out.add(n)
    post_order_visit(node, f)
    return out


def uses_var(node, pred) -> bool:
    found = []

    def f(n):
        if isinstance(n, Var) and pred(n):
            found.append(n)
    post_order_visit(node, f)
    return bool(found)


class _Substitute(IRMutator):
    def __init__(self, vmap):
        self.vmap = vmap

    def visit_Var(self, e):
        return self.vmap.get(e, e)
    visit_SizeVar = visit_Var


def substitute(node, vmap: dict):
    """Replace variables by expressions: ``substitute(i * 4 + j, {i: io})``."""
    if not vmap:
        return node
    return _Substitute(vmap).visit(node)


def structural_equal(a, b) -> bool:
    """True when two trees have the same shape, operators, constants and (identical) variables."""
    if a is b:
        return True
    ta = type(a)
    if ta is not type(b):
        return False
    if ta in (Var, SizeVar):
        return False
    if ta is Const:
        return a.dtype == b.dtype and a.value == b.value
    if isinstance(a, (int, float, str, bool)) or a is None:
        return a == b
    if ta is Binary:
        return a.op is b.op and a.dtype == b.dtype and structural_equal(a.a, b.a) and structural_equal(a.b, b.b)
    if ta is Unary:
        return a.op is b.op and structural_equal(a.a, b.a)
    if ta is Cast:
        return a.dtype == b.dtype and structural_equal(a.value, b.value)
    if ta is Call:
        return a.name == b.name and a.dtype == b.dtype and _seq_eq(a.args, b.args)
    if ta is TensorLoad:
        return a.tensor is b.tensor and _seq_eq(a.indices, b.indices)
    if ta is BufferLoad:
        return a.buffer is b.buffer and a.dtype == b.dtype and _seq_eq(a.indices, b.indices)
    if ta is Select:
        return a.lazy == b.lazy and _seq_eq((a.condition, a.true_value, a.false_value),
                                            (b.condition, b.true_value, b.false_value))
    if ta is Ramp:
        return a.lanes == b.lanes and structural_equal(a.base, b.base) and structural_equal(a.stride, b.stride)
    if ta is Broadcast:
        return a.lanes == b.lanes and structural_equal(a.value, b.value)
    if ta is Reduce:
        return (a.combiner is b.combiner and a.value_index == b.value_index and a.axis == b.axis
                and _seq_eq(a.source, b.source) and structural_equal(a.condition, b.condition)
                and _seq_eq(a.init, b.init))
    if ta is Let:
        return a.var is b.var and structural_equal(a.value, b.value) and structural_equal(a.body, b.body)
    return False


def _seq_eq(xs, ys) -> bool:
    return len(xs) == len(ys) and all(structural_equal(x, y) for x, y in zip(xs, ys))


def expr_key(e):
    """A hashable key equal for structurally equal expressions (used by CSE and caches)."""
    t = type(e)
    if t is Const:
        return ("c", e.value, e.dtype)
    if t is Var or t is SizeVar:
        return ("v", id(e))
    if t is Binary:
        return (e.op, expr_key(e.a), expr_key(e.b))
    if t is BufferLoad:
        return ("ld", id(e.buffer), e.dtype) + tuple(expr_key(i) for i in e.indices)
    if t is TensorLoad:
        return ("tl", id(e.tensor)) + tuple(expr_key(i) for i in e.indices)
    if t is Unary:
        return (e.op, expr_key(e.a))
    if t is Cast:
        return ("cast", e.dtype, expr_key(e.value))
    if t is Call:
        return ("call", e.name, e.dtype) + tuple(expr_key(a) for a in e.args)
    if t is Select:
        return ("sel", e.lazy, expr_key(e.condition), expr_key(e.true_value), expr_key(e.false_value))
    if t is Ramp:
        return ("ramp", e.lanes, expr_key(e.base), expr_key(e.stride))
    if t is Broadcast:
        return ("bc", e.lanes, expr_key(e.value))
    return ("id", id(e))
