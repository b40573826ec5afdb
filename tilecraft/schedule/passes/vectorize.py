"""Vectorization: a ``vectorized`` loop of constant extent L becomes one L-lane statement.

Afterwards the loop variable is gone: expressions that depended on it are vectors (indices that
are affine in it become ``Ramp(base, stride, L)``; the rest are built lane-wise), and expressions
that did not stay scalar and are ``Broadcast`` where they meet a vector; ``ramp(b, 1, L) // d`` and
``% d`` with ``b`` provably a multiple of L and ``d`` a constant multiple of L are a scalar
``b // d`` and ``ramp(b % d, 1, L)`` (the lanes never cross a multiple of ``d``: a fused fetch's
row index stays scalar, and so does a condition computed from it). A loop whose body cannot
be vectorized safely (a store that all lanes would write to one address, a condition that varies
across lanes, a guarded load, nested loops or allocations) stays a ``vectorized`` loop, which the
backends run as a scalar loop with a vectorization hint. A lazy select (``if_then_else``) whose
condition is the same for every lane stays lazy, with that scalar condition, when a side may
fault (a load, an integer division): only the side it picks is evaluated.
"""
from __future__ import annotations

from ...ir import dtype as dt
from ...ir.expr import (BinOp, Binary, Broadcast, BufferLoad, Call, Cast, Const, Expr, Let, Ramp,
                        Select, Unary, Var, COMPARISONS)
from ...ir.expr import binary as make_binary
from ...ir.functor import IRMutator, collect_vars, post_order_visit
from ...ir.stmt import (Allocate, AttrStmt, BufferStore, Evaluate, For, ForKind, IfThenElse,
                        LetStmt, SeqStmt)


class CannotVectorize(Exception):
    pass


def _lanes(e) -> int:
    return dt.lanes(e.dtype)


def _bcast(e, n: int):
    if _lanes(e) == n:
        return e
    if isinstance(e, Ramp) or _lanes(e) != 1:
        raise CannotVectorize("lane mismatch")
    return Broadcast(e, n)


class _Vectorizer:
    def __init__(self, var: Var, lanes: int):
        self.var, self.n = var, lanes
        self.vec_vars: dict = {}

    # expressions --------------------------------------------------------------------------
    def expr(self, e: Expr) -> Expr:
        t = type(e)
        if t is Var:
            if e is self.var:
                return Ramp(Const(0, e.dtype), Const(1, e.dtype), self.n)
            return self.vec_vars.get(e, e)
        if t is Const:
            return e
        if t is Binary:
            a, b = self.expr(e.a), self.expr(e.b)
            if a is e.a and b is e.b:
                return e
            return self.binary(e.op, a, b)
        if t is Unary:
            a = self.expr(e.a)
            if a is e.a:
                return e
            if isinstance(a, Ramp):
                return Ramp(-a.base, -a.stride, a.lanes) if e.op.name == "NEG" else Unary(e.op, a, dt.with_lanes(e.dtype, self.n))
            return Unary(e.op, a, a.dtype)
        if t is Cast:
            v = self.expr(e.value)
            if v is e.value:
                return e
            return Cast(dt.with_lanes(e.dtype, self.n), v)
        if t is BufferLoad:
            idx = self.expr(e.indices[0])
            if idx is e.indices[0]:
                return e
            return BufferLoad(e.buffer, (idx,), dt.with_lanes(e.dtype, self.n))
        if t is Call:
            args = [self.expr(a) for a in e.args]
            if all(a is b for a, b in zip(args, e.args)):
                return e
            args = [_bcast(a, self.n) for a in args]
            return Call(e.name, tuple(args), dt.with_lanes(e.dtype, self.n))
        if t is Select:
            c, a, b = self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)
            if c is e.condition and a is e.true_value and b is e.false_value:
                return e
            guarded = e.lazy and (_may_fault(e.true_value) or _may_fault(e.false_value))
            if guarded and _lanes(c) > 1:
                raise CannotVectorize("guarded load varies across lanes")
            a, b = _bcast(a, self.n), _bcast(b, self.n)
            if guarded:
                # one condition for every lane: still evaluate only the side it picks (the other
                # may read out of bounds or divide by zero)
                return Select(c, a, b, True)
            if _lanes(c) == 1:
                c = Broadcast(c, self.n)
            return Select(c, a, b, False)
        if t is Ramp or t is Broadcast:
            raise CannotVectorize("nested vectorization")
        if t is Let:
            raise CannotVectorize("let expression")
        raise CannotVectorize(f"cannot vectorize {t.__name__}")

    def binary(self, op: BinOp, a, b):
        la, lb = _lanes(a), _lanes(b)
        n = self.n
        if la == 1 and lb == 1:              # both lane-invariant (a ramp's quotient, below)
            return make_binary(op, a, b)
        ra, rb = isinstance(a, Ramp), isinstance(b, Ramp)
        if op is BinOp.ADD and (ra or rb):
            if ra and rb:
                return Ramp(a.base + b.base, a.stride + b.stride, n)
            if ra and lb == 1:
                return Ramp(a.base + b, a.stride, n)
            if rb and la == 1:
                return Ramp(a + b.base, b.stride, n)
        if op is BinOp.SUB and ra and lb == 1:
            return Ramp(a.base - b, a.stride, n)
        if op is BinOp.MUL and ((ra and lb == 1) or (rb and la == 1)):
            r, s = (a, b) if ra else (b, a)
            return Ramp(r.base * s, r.stride * s, n)
        if op in (BinOp.FLOORDIV, BinOp.FLOORMOD) and ra and _lane_aligned(a, b):
            # the lanes never cross a multiple of the divisor: one quotient for all of them
            return a.base // b if op is BinOp.FLOORDIV else Ramp(a.base % b, a.stride, n)
        out = dt.with_lanes(a.dtype if la > 1 else b.dtype, n)
        if op in COMPARISONS:
            out = dt.with_lanes("bool", n)
        return Binary(op, _bcast(a, n), _bcast(b, n), out)

    # statements ---------------------------------------------------------------------------
    def stmt(self, s):
        t = type(s)
        if t is BufferStore:
            v = self.expr(s.value)
            idx = self.expr(s.indices[0])
            if _lanes(idx) == 1:
                raise CannotVectorize("every lane would store to one address")
            return BufferStore(s.buffer, _bcast(v, self.n), (idx,))
        if t is SeqStmt:
            return SeqStmt(tuple(self.stmt(x) for x in s.seq))
        if t is IfThenElse:
            c = self.expr(s.condition)
            if _lanes(c) != 1:
                raise CannotVectorize("condition varies across lanes")
            return IfThenElse(c, self.stmt(s.then_case),
                              self.stmt(s.else_case) if s.else_case is not None else None)
        if t is LetStmt:
            v = self.expr(s.value)
            if _lanes(v) == 1:
                return LetStmt(s.var, v, self.stmt(s.body))
            nv = Var(s.var.name, dt.with_lanes(s.var.dtype, self.n))
            self.vec_vars[s.var] = nv
            return LetStmt(nv, v, self.stmt(s.body))
        if t is AttrStmt:
            return AttrStmt(s.key, s.node, s.value, self.stmt(s.body))
        raise CannotVectorize(f"{t.__name__} inside a vectorized loop")


def _lane_aligned(r, d) -> bool:
    """Whether ``ramp(b, 1, n) // d`` is the same for every lane: ``d`` a positive constant
    multiple of ``n`` and ``b`` provably a multiple of ``n``."""
    from .gpu_vector_index import known_multiple
    n = r.lanes
    return (isinstance(d, Const) and dt.lanes(d.dtype) == 1 and int(d.value) > 0 and int(d.value) % n == 0
            and isinstance(r.stride, Const) and r.stride.value == 1 and known_multiple(r.base) % n == 0)


_TRAPPING = frozenset({BinOp.TRUNCDIV, BinOp.TRUNCMOD, BinOp.FLOORDIV, BinOp.FLOORMOD})


def _may_fault(e) -> bool:
    """Whether evaluating ``e`` where it is not needed could fault: a load, an integer division."""
    found = []
    post_order_visit(e, lambda n: found.append(1) if isinstance(n, BufferLoad) or (
        isinstance(n, Binary) and n.op in _TRAPPING and not dt.is_float(n.dtype)) else None)
    return bool(found)


class _VectorizeLoops(IRMutator):
    def visit_For(self, s):
        s = super().visit_For(s)
        if s.kind is not ForKind.VECTORIZED or not isinstance(s.extent, Const):
            return s
        lanes = s.extent.value
        if lanes <= 1 or not (isinstance(s.min, Const) and s.min.value == 0):
            return s
        try:
            return _Vectorizer(s.loop_var, lanes).stmt(s.body)
        except CannotVectorize:
            return s


def vectorize_loops(body):
    return _VectorizeLoops().visit_stmt(body)
