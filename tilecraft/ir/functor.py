"""Traversals over the IR: a rewriter that rebuilds only what changed, a read-only walk,
substitution and structural equality.

``IRMutator`` dispatches on the node's class to ``visit_<Class>`` methods; a subclass overrides
the ones it cares about and calls ``self.visit_expr``/``self.visit_stmt`` (or the default
method) for the children. A rewrite that changes nothing returns the very same node. The default
methods, ``children``, structural equality and ``expr_key`` all come from the structure each
node class declares (``child_fields``; see ``node.py``).
"""
from __future__ import annotations

import dataclasses
from operator import is_

from .expr import (AccessPtr, Binary, Broadcast, BufferLoad, BufferRegion, Call, Cast, Const, Expr,
                   Let, Ramp, Reduce, Select, SizeVar, StringImm, TensorLoad, Unary, Var, VectorReduce)
from .node import Node, mutator_default
from .stmt import (Allocate, AttrStmt, Buffer, BufferStore, Evaluate, For, IfThenElse, LetStmt,
                   SeqStmt, Stmt, seq)


class IRMutator:
    """Rebuilds a tree bottom-up. Override ``visit_<NodeClass>(self, node)`` to rewrite.

    Example::

        class Double(IRMutator):
            def visit_Const(self, e):
                return const(e.value * 2, e.dtype)

        Double().visit_expr(x + 1)          # x + 2
    """

    def visit_expr(self, e: Expr) -> Expr:
        return getattr(self, "visit_" + type(e).__name__)(e)

    def visit_stmt(self, s: Stmt) -> Stmt:
        return getattr(self, "visit_" + type(s).__name__)(s)

    def visit(self, node):
        return self.visit_stmt(node) if isinstance(node, Stmt) else self.visit_expr(node)

    def _exprs(self, es: tuple) -> tuple:
        """``visit_expr`` of each; ``es`` itself when none changed."""
        new = tuple(map(self.visit_expr, es))
        return es if all(map(is_, new, es)) else new

    def _stmts(self, ss: tuple) -> tuple:
        new = tuple(map(self.visit_stmt, ss))
        return ss if all(map(is_, new, ss)) else new

    # The defaults visit every child (visit_expr or visit_stmt, as the class declares it) and
    # rebuild the node only when one changed; node.py generates them from child_fields.
    visit_Var = mutator_default(Var)
    visit_SizeVar = mutator_default(SizeVar)
    visit_Const = mutator_default(Const)
    visit_Binary = mutator_default(Binary)
    visit_Unary = mutator_default(Unary)
    visit_Cast = mutator_default(Cast)
    visit_Select = mutator_default(Select)
    visit_Call = mutator_default(Call)
    visit_TensorLoad = mutator_default(TensorLoad)
    visit_BufferLoad = mutator_default(BufferLoad)
    visit_Reduce = mutator_default(Reduce)
    visit_Ramp = mutator_default(Ramp)
    visit_Broadcast = mutator_default(Broadcast)
    visit_Let = mutator_default(Let)
    visit_VectorReduce = mutator_default(VectorReduce)
    visit_StringImm = mutator_default(StringImm)
    visit_AccessPtr = mutator_default(AccessPtr)
    visit_BufferRegion = mutator_default(BufferRegion)
    visit_For = mutator_default(For)
    visit_BufferStore = mutator_default(BufferStore)
    visit_IfThenElse = mutator_default(IfThenElse)
    visit_LetStmt = mutator_default(LetStmt)
    visit_Evaluate = mutator_default(Evaluate)
    visit_AttrStmt = mutator_default(AttrStmt)

    def visit_SeqStmt(self, s):
        # not the derived default: a visited statement may become a sequence (flattened into
        # this one) or None (dropped), and an empty sequence becomes a no-op
        new = [self.visit_stmt(x) for x in s.seq]
        if all(map(is_, new, s.seq)):
            return s
        return seq(*new) or Evaluate(Const(0, "int32"))

    def visit_Allocate(self, s):
        # not the derived default: the buffer's shape and strides are expressions too, but they
        # live in the Buffer, which the accesses in the body name by identity. When one changes
        # (a substituted variable), the allocation and every access in its body get one new
        # buffer with the same storage (``data``).
        buf = s.buffer
        shape = self._exprs(buf.shape)
        strides = buf.strides if buf.strides is None else self._exprs(buf.strides)
        body = self.visit_stmt(s.body)
        if shape is not buf.shape or strides is not buf.strides:
            new = Buffer(buf.name, shape, buf.dtype, buf.scope, strides, buf.data)
            return Allocate(new, replace_refs(body, {buf: new}))
        return s if body is s.body else Allocate(buf, body)


def children(node) -> tuple:
    """The direct sub-nodes (expressions and statements) of a node, in the order its class
    declares them (``child_fields``): ``children(a + b) == (a, b)``."""
    if isinstance(node, Node):
        return node.children()
    raise TypeError(f"not an IR node: {node!r}")


def post_order_visit(node, fn) -> None:
    """Call ``fn`` on every node below and including ``node``, children first (left to right),
    once per occurrence: ``post_order_visit(a + b, print)`` prints a, b, a + b."""
    # a pre-order walk that takes the children right to left is the post-order reversed
    order, stack = [], [node]
    while stack:
        n = stack.pop()
        order.append(n)
        stack.extend(n.children())
    for n in reversed(order):
        fn(n)


def collect_vars(node) -> set:
    """The set of ``Var`` objects that occur in a tree: ``collect_vars(i * 4 + j) == {i, j}``."""
    out, stack = set(), [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Var):
            out.add(n)
        else:
            stack.extend(n.children())
    return out


def uses_var(node, pred) -> bool:
    """Whether a variable for which ``pred`` holds occurs in a tree."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Var):
            if pred(n):
                return True
        else:
            stack.extend(n.children())
    return False


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


def replace_refs(node, mapping: dict):
    """``node`` with every by-identity reference (a ``ref_fields`` field: the buffer of a load,
    store or allocation, the tensor of a ``TensorLoad``, the variable a loop binds) to a key of
    ``mapping`` replaced by its value; ``node`` itself when there is none.
    ``replace_refs(body, {old_buffer: new_buffer})`` makes every access name the new buffer."""
    done: dict = {}
    stack = [node]
    while stack:
        n = stack[-1]
        if id(n) in done:
            stack.pop()
            continue
        kids = n.children()
        missing = [k for k in kids if id(k) not in done]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        new = n.with_children(tuple(done[id(k)] for k in kids))
        refs = {f: mapping[getattr(n, f)] for f in type(n).ref_fields if getattr(n, f) in mapping}
        done[id(n)] = dataclasses.replace(new, **refs) if refs else new
    return done[id(node)]


def structural_equal(a, b) -> bool:
    """True when two trees have the same shape, operators, constants and (identical) variables,
    buffers and tensors: ``structural_equal(x + 1, x + 1)`` but not ``(x + 1, y + 1)``.

    Nodes compare by their ``node_key`` and then child by child, without recursion (sums can be
    thousands of terms deep). Plain values (numbers, strings, None) compare with ``==``.
    """
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if type(x) is not type(y):
            return False
        if not isinstance(x, Node):
            if isinstance(x, (int, float, str, bool)) and x == y:
                continue
            return False
        kx, ky = x.children(), y.children()
        if len(kx) != len(ky) or x.node_key() != y.node_key():
            return False
        stack.extend(zip(kx, ky))
    return True


def expr_key(e):
    """A hashable key equal for structurally equal expressions (used by linear forms and
    caches): the node's ``node_key`` with its children's keys nested in it."""
    return e.node_key(tuple(map(expr_key, e.children())))
