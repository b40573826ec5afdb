"""Loop partitioning: split a loop at the point where a guard inside it stops being always true.

A split whose factor does not divide the extent leaves a guard in the loop body::

    for i.outer in parallel(0, 16):                  # n = 1000, factor 64
      for i.inner in vectorized(0, 64):
        if i.outer * 64 + i.inner < n: ...

Afterwards the loop runs in two parts: the iterations where the guard holds for every inner
iteration, with the guard removed (so the inner loop vectorizes), then the rest with the guard::

    for i.outer in parallel(0, n // 64):             (bounds simplified)
      for i.inner in vectorized(0, 64): ...          # no guard
    for i.outer in parallel(n // 64, ...):
      for i.inner in vectorized(0, 64):
        if i.outer * 64 + i.inner < n: ...

Only guards of the form ``a*v + rest < E`` with a positive constant ``a`` are used, where ``v``
is the loop's variable, ``rest`` ranges over loops nested inside, and ``E`` does not depend on
them. The range of ``rest`` is that of the nested loops, narrowed by the constant bounds on their
variables that hold wherever the guard is tested: the other conjuncts of its condition and the
conditions of the ``if``s around it inside the loop (in ``if ty < 2 and k*2 + ty < 32`` the guard
``k*2 + ty < 32`` needs ``ty <= 1``, not the last thread ``ty``, so ``k < 16`` keeps it). Each
loop is partitioned at most once, on its first such guard; the head drops that guard and every
other whose split point is the same or provably later (the copies of one width guard in a
reduction's init and in its update, or in the unrolled lanes of a register tile), and a loop that contains an already
partitioned loop is not duplicated again (a guard that always holds is still removed), so code
size at most doubles.

Block barriers: a loop that contains a cross-thread reduction (``AttrStmt("cross_thread_reduction")``,
see ``schedule_ops``; its all-reduce is a barrier) or a store into shared memory (barriers go
around it) is not split at a point that depends on a ``threadIdx`` loop: every thread of a block
must reach the barriers equally often, and the GPU lowering does not place barriers in loops
whose bounds differ between threads. A loop inside a cross-thread reduction is split in place,
so the peeled iterations stay inside the reduction, before its all-reduce.
"""
from __future__ import annotations

from ...ir.expr import (BinOp, Binary, Const, Var, binary, const, max_expr, min_expr)
from ...ir.functor import IRMutator, collect_vars, structural_equal, substitute
from ...ir.simplify import simplify
from ...ir.stmt import For, ForKind, IfThenElse, LetStmt, seq
from ..bound import Interval
from ..schedule_ops import CROSS_THREAD_REDUCTION


def _conjuncts(c):
    if isinstance(c, Binary) and c.op is BinOp.AND:
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


class _FindGuard(IRMutator):
    """Collects guards, each with the conditions known to hold where it is tested, and the extents
    of loops nested in the loop being examined."""

    def __init__(self):
        self.guards: list = []          # (guard, [conditions that hold where it is tested])
        self.context: list = []         # conjuncts of the enclosing then-branches
        self.inner: dict = {}
        self.loops: list = []
        self.lets: set = set()   # bound inside the loop (e.g. inner split points): out of scope outside
        self.cross_thread = False   # the loop contains a cross-thread reduction
        self.shared = False         # the loop stores into shared memory (barriers will sit in it)

    def visit_For(self, s):
        self.inner[s.loop_var] = (s.min, s.extent)
        self.loops.append(s)
        return super().visit_For(s)

    def visit_LetStmt(self, s):
        self.lets.add(s.var)
        return super().visit_LetStmt(s)

    def visit_IfThenElse(self, s):
        parts = _conjuncts(s.condition)
        self.guards.extend((p, self.context + [q for q in parts if q is not p]) for p in parts)
        outer = self.context
        self.context = outer + parts
        self.visit_stmt(s.then_case)
        self.context = outer
        if s.else_case is not None:
            self.visit_stmt(s.else_case)
        return s

    def visit_AttrStmt(self, s):
        self.cross_thread = self.cross_thread or s.key == CROSS_THREAD_REDUCTION
        return super().visit_AttrStmt(s)

    def visit_BufferStore(self, s):
        self.shared = self.shared or s.buffer.scope == "shared"
        return s

    # expressions are not searched
    def visit_expr(self, e):
        return e


class _DropGuard(IRMutator):
    """Removes the conjuncts ``guards`` (by identity) from the conditions of the ``if``s."""

    def __init__(self, guards):
        self.guards = {id(g) for g in guards}

    def visit_IfThenElse(self, s):
        s = super().visit_IfThenElse(s)
        parts = _conjuncts(s.condition)
        if not any(id(p) in self.guards for p in parts):
            return s
        rest = [p for p in parts if id(p) not in self.guards]
        if not rest:
            return s.then_case
        cond = rest[0]
        for p in rest[1:]:
            cond = binary(BinOp.AND, cond, p)
        return IfThenElse(cond, s.then_case, s.else_case)

    def visit_expr(self, e):
        return e


def _var_bounds(inner: dict, facts) -> dict:
    """``{loop var: (lo, hi)}`` of the nested loops, narrowed by the facts ``x < c``, ``x <= c``,
    ``x > c``, ``x >= c`` (either side) with ``x`` a nested loop's variable and ``c`` a constant."""
    out = {x: (r[0], r[0] + r[1] - 1) for x, r in inner.items()}
    for f in facts:
        if not (isinstance(f, Binary) and f.op in (BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE)):
            continue
        x, c, op = f.a, f.b, f.op
        if isinstance(x, Const) and isinstance(c, Var):         # c op x  ->  x op' c
            x, c = c, x
            op = {BinOp.LT: BinOp.GT, BinOp.LE: BinOp.GE, BinOp.GT: BinOp.LT, BinOp.GE: BinOp.LE}[op]
        if not (isinstance(x, Var) and x in out and isinstance(c, Const)):
            continue
        lo, hi = out[x]
        if op in (BinOp.LT, BinOp.LE):
            bound = c.value - 1 if op is BinOp.LT else c.value
            if isinstance(hi, Const) and bound < hi.value:
                out[x] = (lo, const(bound, x.dtype))
        else:
            bound = c.value + 1 if op is BinOp.GT else c.value
            if isinstance(lo, Const) and bound > lo.value:
                out[x] = (const(bound, x.dtype), hi)
    return out


def _split_point(loop: For, guard, inner: dict, lets: set = frozenset(), facts=()):
    """The first iteration at which ``guard`` may fail where ``facts`` hold, or None if the guard
    doesn't fit."""
    if not (isinstance(guard, Binary) and guard.op in (BinOp.LT, BinOp.LE)):
        return None
    v = loop.loop_var
    lhs, E = guard.a, guard.b
    if guard.op is BinOp.LE:
        E = E + 1
    if v in collect_vars(E) or collect_vars(E) & (set(inner) | lets):
        return None
    if v not in collect_vars(lhs):
        return None
    at0 = simplify(substitute(lhs, {v: const(0, v.dtype)}))
    at1 = simplify(substitute(lhs, {v: const(1, v.dtype)}))
    a = simplify(at1 - at0)
    if not (isinstance(a, Const) and a.value > 0):
        return None
    diff = simplify(lhs - (v * a.value + at0))
    if not (isinstance(diff, Const) and diff.value == 0):
        return None

    bounds = _var_bounds(inner, facts)
    rng = Interval(bounds.get)(at0)
    if rng is None:
        return None
    rest_max = simplify(rng[1])
    if collect_vars(rest_max) & (set(inner) | {v} | lets):
        return None
    # a*v + rest_max < E  <=>  v <= (E - rest_max - 1) // a
    return simplify((E - rest_max - 1) // a.value + 1)


def _guards_holding_before(loop: For, m, guard, finder) -> list:
    """``guard`` and every other guard of the loop that holds wherever ``loop``'s variable is
    below ``m`` (``guard``'s split point): their own split point is ``m`` or provably later. The
    same guard is often tested in several places (a reduction's init and its update, the
    unrolled lanes of a register tile); each copy is a different node."""
    out = [guard]
    for g, facts in finder.guards:
        if g is guard:
            continue
        m2 = _split_point(loop, g, finder.inner, finder.lets, facts)
        if m2 is None:
            continue
        later = simplify(m2 - m)
        if (isinstance(later, Const) and later.value >= 0) or structural_equal(m2, m):
            out.append(g)
    return out


class _Partition(IRMutator):
    def __init__(self):
        self.made: set = set()     # ids of loops this pass duplicated
        self.thread_vars: set = set()   # variables of the enclosing loops bound to threadIdx

    def visit_For(self, s):
        threaded = s.kind is ForKind.THREAD_BINDING and s.thread_tag.startswith("threadIdx")
        if threaded:
            self.thread_vars.add(s.loop_var)
        s = super().visit_For(s)
        if threaded:
            self.thread_vars.discard(s.loop_var)
        if s.kind not in (ForKind.SERIAL, ForKind.PARALLEL) or not (isinstance(s.min, Const) and s.min.value == 0):
            return s
        finder = _FindGuard()
        finder.visit_stmt(s.body)
        # at most one duplication per loop nest: code size (and LLVM time) stays within 2x
        nested_split = any(id(x) in self.made for x in finder.loops)
        for g, facts in finder.guards:
            m = _split_point(s, g, finder.inner, finder.lets, facts)
            if m is None:
                continue
            drop = _guards_holding_before(s, m, g, finder)
            m = simplify(max_expr(const(0, m.dtype), min_expr(m, s.extent)))
            if isinstance(m, Const) and isinstance(s.extent, Const) and m.value >= s.extent.value:
                return For(s.loop_var, s.min, s.extent, s.kind, _DropGuard(drop).visit_stmt(s.body),
                           s.thread_tag, s.annotations)
            if isinstance(m, Const) and m.value <= 0:
                return s
            if nested_split:
                continue
            if (finder.cross_thread or finder.shared) and collect_vars(m) & self.thread_vars:
                continue
            bound = None
            if not isinstance(m, Const):
                bound = Var(s.loop_var.name + ".split", m.dtype)
                bound, m = (bound, m), bound
            head = For(s.loop_var, s.min, m, s.kind, _DropGuard(drop).visit_stmt(s.body), s.thread_tag,
                       s.annotations)
            tv = Var(s.loop_var.name, s.loop_var.dtype)
            tail_body = substitute(s.body, {s.loop_var: tv + m})
            tail = For(tv, const(0, m.dtype), simplify(s.extent - m), s.kind, tail_body, s.thread_tag,
                       s.annotations)
            self.made.update((id(head), id(tail)))
            out = seq(head, tail)
            if bound is not None:
                out = LetStmt(bound[0], bound[1], out)
            return out
        return s


def partition_loops(body):
    return _Partition().visit_stmt(body)
