"""The one driver that applies the rules of ``rules.py``: bottom-up over expressions (iteratively,
so deep trees do not exhaust Python's stack), and through statements with loop bounds in scope.
"""
from __future__ import annotations

from ..expr import Const, Expr, logical_not
from ..functor import collect_vars, post_order_visit, substitute
from ..stmt import (Allocate, AttrStmt, BufferStore, Evaluate, For, ForKind, IfThenElse, LetStmt,
                    PrimFunc, SeqStmt, Stmt)
from .arith import Analyzer, is_index
from .rules import rules_for

# A rule's result is simplified again; this caps how often one node may be rewritten in a row,
# so that two rules that undo each other cannot loop forever.
MAX_REWRITES = 32

# a loop that runs once becomes its body; a parallel one too (its one iteration would wake a
# thread team); loops bound to GPU threads stay (they define the launch)
_DROPPABLE_UNIT_LOOPS = (ForKind.SERIAL, ForKind.UNROLLED, ForKind.VECTORIZED, ForKind.PARALLEL)


def simplify(node, bounds=None):
    """Simplify an expression, a statement or a ``PrimFunc``.

    ``bounds`` maps variables to inclusive integer bounds ``(lo, hi)``; loop variables get theirs
    from their ``For``. Returns ``node`` itself when nothing changed. A statement that simplifies
    to nothing becomes ``Evaluate(0)``; a loop of extent 1 that is not bound to a GPU thread
    becomes its body.

    Example::

        >>> x = Var("x")
        >>> simplify((x + 3) + 4)
        x + 7
        >>> i, j = Var("i"), Var("j")
        >>> simplify((i * 32 + j) // 32, {i: (0, 15), j: (0, 31)})
        i
    """
    s = Simplifier(bounds)
    if isinstance(node, Expr):
        return s.expr(node)
    if isinstance(node, PrimFunc):
        return node.with_body(s.stmt_or_noop(node.body))
    if isinstance(node, Stmt):
        return s.stmt_or_noop(node)
    raise TypeError(f"simplify expects an Expr, a Stmt or a PrimFunc, got {type(node).__name__}")


_SAME = object()     # in ``by_struct``: "simplifies to itself"


class Simplifier:
    """One simplification run: a memo of simplified nodes and the bounds in scope."""

    def __init__(self, bounds=None):
        self.an = Analyzer(bounds)
        self.memo: dict = {}            # id(node) -> (node, structure number, simplified)
        self.interned: dict = {}        # flat structural key -> structure number
        self.by_struct: dict = {}       # structure number -> simplified expression
        self.last_binding: dict = {}    # var -> the bounds it had when last in scope

    # expressions --------------------------------------------------------------------------
    def expr(self, root):
        """The simplified ``root``. Every node is looked up by identity, then by structure
        (hash-consed: a node's key holds its children's structure numbers, so it is flat), so a
        subexpression repeated as distinct objects is simplified once."""
        memo = self.memo
        hit = memo.get(id(root))
        if hit is not None:
            return hit[2]
        by_struct = self.by_struct
        stack = [root]
        while stack:
            e = stack[-1]
            if id(e) in memo:
                stack.pop()
                continue
            kids = e.children() if isinstance(e, Expr) else ()
            waiting = False
            for k in kids:
                if id(k) not in memo:
                    stack.append(k)
                    waiting = True
            if waiting:
                continue
            stack.pop()
            if not isinstance(e, Expr):
                memo[id(e)] = (e, self._intern(("o", id(e))), e)
                continue
            sid = self._intern(e.node_key(tuple(memo[id(k)][1] for k in kids)))
            r = by_struct.get(sid)
            if r is _SAME:
                r = e               # keep identity: this structure is already simplified
            elif r is None:
                n = e.with_children(tuple(memo[id(k)][2] for k in kids))
                r = self._rewrite(n)
                by_struct[sid] = _SAME if r is e else r
            memo[id(e)] = (e, sid, r)
            self._fixpoint(r)
        return memo[id(root)][2]

    def _intern(self, key) -> int:
        sid = self.interned.get(key)
        if sid is None:
            sid = self.interned[key] = len(self.interned)
        return sid

    def _fixpoint(self, r) -> None:
        """Record that ``r`` (whose children are all simplified) simplifies to itself."""
        if id(r) in self.memo:
            return
        sid = self._intern(r.node_key(tuple(self.memo[id(k)][1] for k in r.children())))
        self.memo[id(r)] = (r, sid, r)
        self.by_struct.setdefault(sid, _SAME)

    def _rewrite(self, n):
        """Apply the first rule that fires, simplify what it returns, repeat until none fires."""
        an, memo = self.an, self.memo
        for _ in range(MAX_REWRITES):
            for rule in rules_for(n):
                r = rule(n, an)
                if r is not None and r is not n:
                    break
            else:
                return n
            hit = memo.get(id(r))
            if hit is not None:
                return hit[2]
            n = r.with_children(tuple(self.expr(k) for k in r.children()))
        return n

    # statements ---------------------------------------------------------------------------
    def stmt_or_noop(self, s):
        r = self.stmt(s)
        if r is None:
            return s if _is_noop(s) else Evaluate(Const(0, "int32"))
        return r

    def stmt(self, s):
        """The simplified statement, or None when it does nothing."""
        return getattr(self, "_" + type(s).__name__)(s)

    def _bind(self, var, lo: int, hi: int):
        """Put ``lo <= var <= hi`` in scope; returns what to restore."""
        vb = self.an.var_bounds
        old = vb.get(var)
        if old is not None:
            lo, hi = max(lo, old[0]), min(hi, old[1])
        prev = self.last_binding.get(var)
        if prev is not None and prev != (lo, hi):
            # the same variable bound again differently (sibling loops): forget what was
            # derived under the old bounds
            self.memo.clear()
            self.interned.clear()       # its keys hold ids of objects only memo kept alive
            self.by_struct.clear()
            self.an.invalidate()
        self.last_binding[var] = (lo, hi)
        vb[var] = (lo, hi)
        return old

    def _unbind(self, var, old) -> None:
        if old is None:
            self.an.var_bounds.pop(var, None)
        else:
            self.an.var_bounds[var] = old

    def _For(self, s):
        mn, ext = self.expr(s.min), self.expr(s.extent)
        cm = mn.value if type(mn) is Const and is_index(mn) else None
        ce = ext.value if type(ext) is Const and is_index(ext) else None
        if ce is not None and ce <= 0:
            return None
        if ce == 1 and s.kind in _DROPPABLE_UNIT_LOOPS and not _in_buffer_shapes(s.loop_var, s.body):
            return self.stmt(substitute(s.body, {s.loop_var: mn}))
        bound = None
        if cm is not None and ce is not None:
            bound = (cm, cm + ce - 1)
        elif is_index(mn) and is_index(ext):
            (mlo, mhi), (elo, ehi) = self.an.bound(mn), self.an.bound(ext)
            if ehi < 1:
                return None
            bound = (mlo, mhi + ehi - 1)
        if bound is not None:
            old = self._bind(s.loop_var, *bound)
            body = self.stmt(s.body)
            self._unbind(s.loop_var, old)
        else:
            body = self.stmt(s.body)
        if body is None:
            return None
        if mn is s.min and ext is s.extent and body is s.body:
            return s
        return For(s.loop_var, mn, ext, s.kind, body, s.thread_tag, s.annotations)

    def _IfThenElse(self, s):
        c = self.expr(s.condition)
        if type(c) is Const:
            if c.value:
                return self.stmt(s.then_case)
            return self.stmt(s.else_case) if s.else_case is not None else None
        t = self.stmt(s.then_case)
        f = self.stmt(s.else_case) if s.else_case is not None else None
        if t is None and f is None:
            return None
        if t is None:
            c, t, f = self.expr(logical_not(c)), f, None
        if c is s.condition and t is s.then_case and f is s.else_case:
            return s
        return IfThenElse(c, t, f)

    def _SeqStmt(self, s):
        out, changed = [], False
        for x in s.seq:
            y = self.stmt(x)
            if y is not x:
                changed = True
            if y is None:
                continue
            if type(y) is SeqStmt:
                out.extend(y.seq)
            else:
                out.append(y)
        if not changed:
            return s
        if not out:
            return None
        return out[0] if len(out) == 1 else SeqStmt(tuple(out))

    def _BufferStore(self, s):
        v = self.expr(s.value)
        idx = tuple(self.expr(i) for i in s.indices)
        if v is s.value and all(a is b for a, b in zip(idx, s.indices)):
            return s
        return BufferStore(s.buffer, v, idx)

    def _Allocate(self, s):
        body = self.stmt(s.body)
        if body is None:
            return None
        return s if body is s.body else Allocate(s.buffer, body)

    def _LetStmt(self, s):
        v = self.expr(s.value)
        if is_index(v):
            old = self._bind(s.var, *self.an.bound(v))
            body = self.stmt(s.body)
            self._unbind(s.var, old)
        else:
            body = self.stmt(s.body)
        if body is None:
            return None
        return s if (v is s.value and body is s.body) else LetStmt(s.var, v, body)

    def _Evaluate(self, s):
        v = self.expr(s.value)
        if type(v) is Const:
            return None
        return s if v is s.value else Evaluate(v)

    def _AttrStmt(self, s):
        v = self.expr(s.value) if isinstance(s.value, Expr) else s.value
        body = self.stmt(s.body)
        if body is None:
            return None
        return s if (v is s.value and body is s.body) else AttrStmt(s.key, s.node, v, body)


def _in_buffer_shapes(var, body) -> bool:
    """Whether an allocation's shape mentions ``var``. (Such a unit loop is kept, as it always
    was; substitution reaches buffer shapes since IRMutator.visit_Allocate visits them, so
    dropping it would now be sound too.)"""
    found = []

    def f(n):
        if type(n) is Allocate and any(var in collect_vars(x) for x in n.buffer.shape):
            found.append(n)
    post_order_visit(body, f)
    return bool(found)


def _is_noop(s) -> bool:
    return type(s) is Evaluate and type(s.value) is Const
