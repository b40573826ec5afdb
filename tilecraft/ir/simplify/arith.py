"""The integer facts that simplification rules ask about: linear forms and value intervals.

Integers wrap modulo ``2**bits`` (see ``expr.py``). Two notions keep the rules sound under wrap:

* the **linear form** of an integer expression, ``c0 + c1*t1 + c2*t2 + ...`` over *atoms* ``ti``
  (anything that is not ``+``, ``-``, ``*`` by a constant or negation), is congruent to it modulo
  ``2**bits`` always, so rebuilding an expression from its linear form is always exact;
* the **interval** ``bound(e)`` holds the value ``e`` actually takes (after wrap). ``fits(e)`` says
  that the linear form's mathematical value (computed from the atoms' intervals without wrap)
  stays inside the dtype's range, so it *equals* ``e``: only then may a rule reason about
  division, ordering or comparison through the linear form.

Example::

    >>> a = Analyzer({i: (0, 3), j: (0, 31)})
    >>> a.bound(i * 32 + j)
    (0, 127)
"""
from __future__ import annotations

from .. import dtype as dt
from ..expr import BinOp, Binary, Cast, Const, Select, SizeVar, Unary, UnOp, Var, trunc_divide, trunc_remainder
from ..functor import expr_key

LINEAR_OPS = (BinOp.ADD, BinOp.SUB, BinOp.MUL)


def _linear_parts(e) -> tuple:
    """The children whose linear forms make up ``e``'s."""
    t = type(e)
    if t is Binary and e.op in LINEAR_OPS:
        return (e.a, e.b)
    if t is Unary and e.op is UnOp.NEG:
        return (e.a,)
    return ()


def is_index(e) -> bool:
    """Scalar integer expressions are the ones the linear machinery reasons about."""
    d = e.dtype
    return d in _INT_SCALARS or (dt.is_int(d) and dt.lanes(d) == 1)


_INT_SCALARS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})


def dtype_range(d: str) -> tuple[int, int]:
    return dt.min_value(d), dt.max_value(d)


def wrap(v: int, d: str) -> int:
    """``v`` reduced to the value range of the integer dtype ``d``."""
    b = dt.bits(d)
    v &= (1 << b) - 1
    if not dt.is_uint(d) and v >= 1 << (b - 1):
        v -= 1 << b
    return v


def signed_wrap(v: int, d: str) -> int:
    """``v`` modulo ``2**bits`` as a signed number: the representative used for coefficients."""
    b = dt.bits(d)
    v &= (1 << b) - 1
    return v - (1 << b) if v >= 1 << (b - 1) else v


class Linear:
    """``const + sum(coef * atom)``; ``terms`` maps an atom's ``expr_key`` to ``(atom, coef)``.

    Coefficients and the constant are kept as signed representatives modulo ``2**bits``;
    terms with coefficient 0 are dropped. Treat instances as immutable.
    """
    __slots__ = ("terms", "const")

    def __init__(self, terms: dict, const: int):
        self.terms = terms
        self.const = const

    def scaled(self, k: int, d: str) -> "Linear":
        terms = {}
        for key, (atom, c) in self.terms.items():
            c = signed_wrap(c * k, d)
            if c:
                terms[key] = (atom, c)
        return Linear(terms, signed_wrap(self.const * k, d))

    def plus(self, other: "Linear", d: str, sign: int = 1) -> "Linear":
        terms = dict(self.terms)
        for key, (atom, c) in other.terms.items():
            old = terms.get(key)
            c = signed_wrap((old[1] if old else 0) + sign * c, d)
            if c:
                terms[key] = (old[0] if old else atom, c)
            elif old:
                del terms[key]
        return Linear(terms, signed_wrap(self.const + sign * other.const, d))


class Analyzer:
    """Answers questions about integer expressions under known variable bounds.

    ``var_bounds`` maps ``Var`` to inclusive ``(lo, hi)``. Answers are cached per node; call
    :meth:`invalidate` when a variable's bounds change to something it had not been before.
    """

    def __init__(self, bounds=None):
        self.var_bounds: dict = {}
        for v, (lo, hi) in (bounds or {}).items():
            v = getattr(v, "var", v)          # an IterVar stands for its variable
            lo, hi = getattr(lo, "value", lo), getattr(hi, "value", hi)   # Const bounds too
            self.var_bounds[v] = (int(lo), int(hi))
        self._lin: dict = {}                  # id(e) -> (e, Linear)
        self._bnd: dict = {}                  # id(e) -> (e, (lo, hi))
        self.canonical: dict = {}             # id(e) -> e, for nodes known to be canonical sums

    def build(self, lin: Linear, d: str):
        """The canonical expression of ``lin`` (see :func:`build_linear`)."""
        return build_linear(lin, d, self.canonical)

    def invalidate(self) -> None:
        self._bnd.clear()

    # linear forms -------------------------------------------------------------------------
    def linear(self, e) -> Linear:
        hit = self._lin.get(id(e))
        if hit is not None:
            return hit[1]
        cache = self._lin
        stack = [e]                      # iterative: sums can be very long chains
        while stack:
            n = stack[-1]
            if id(n) in cache:
                stack.pop()
                continue
            parts = _linear_parts(n)
            missing = [p for p in parts if id(p) not in cache]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            cache[id(n)] = (n, self._linear(n))
        return cache[id(e)][1]

    def _linear(self, e) -> Linear:
        """The linear form of ``e`` from those of its parts (already cached)."""
        t, d = type(e), e.dtype
        if t is Const:
            return Linear({}, signed_wrap(e.value, d))
        if t is Binary and e.op in LINEAR_OPS:
            la, lb = self._lin[id(e.a)][1], self._lin[id(e.b)][1]
            if e.op is BinOp.ADD:
                return la.plus(lb, d)
            if e.op is BinOp.SUB:
                return la.plus(lb, d, -1)
            if not lb.terms:
                return la.scaled(lb.const, d)
            if not la.terms:
                return lb.scaled(la.const, d)
        elif t is Unary and e.op is UnOp.NEG:
            return self._lin[id(e.a)][1].scaled(-1, d)
        return Linear({expr_key(e): (e, 1)}, 0)

    def linear_interval(self, lin: Linear) -> tuple[int, int]:
        """The interval of the linear form's mathematical (unwrapped) value."""
        lo = hi = lin.const
        for atom, c in lin.terms.values():
            alo, ahi = self.bound(atom)
            if c > 0:
                lo, hi = lo + c * alo, hi + c * ahi
            else:
                lo, hi = lo + c * ahi, hi + c * alo
        return lo, hi

    def fits(self, e) -> bool:
        """True when ``e`` equals its linear form's unwrapped value for every assignment."""
        lo, hi = self.linear_interval(self.linear(e))
        dlo, dhi = dtype_range(e.dtype)
        return dlo <= lo and hi <= dhi

    def difference(self, a, b) -> tuple[int, int]:
        """An interval holding ``a - b`` (mathematically, no wrap) for scalar integers."""
        if self.fits(a) and self.fits(b):
            d = a.dtype
            # the wide difference of the two exact linear forms; coefficients stay unwrapped
            la, lb = self.linear(a), self.linear(b)
            terms = dict(la.terms)
            for key, (atom, c) in lb.terms.items():
                old = terms.get(key)
                nc = (old[1] if old else 0) - c
                if nc:
                    terms[key] = (atom, nc)
                elif old:
                    del terms[key]
            return self.linear_interval(Linear(terms, la.const - lb.const))
        alo, ahi = self.bound(a)
        blo, bhi = self.bound(b)
        return alo - bhi, ahi - blo

    # intervals ----------------------------------------------------------------------------
    def bound(self, e) -> tuple[int, int]:
        """Inclusive ``(lo, hi)`` of the values the scalar integer expression ``e`` takes."""
        hit = self._bnd.get(id(e))
        if hit is not None:
            return hit[1]
        cache = self._bnd
        stack = [e]                      # iterative, like linear()
        while stack:
            n = stack[-1]
            if id(n) in cache:
                stack.pop()
                continue
            missing = [p for p in self._bound_parts(n) if id(p) not in cache]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            dlo, dhi = dtype_range(n.dtype)
            lo, hi = self._bound(n)
            if lo < dlo or hi > dhi or lo > hi:
                lo, hi = dlo, dhi        # it may wrap: anything in range
            cache[id(n)] = (n, (lo, hi))
        return cache[id(e)][1]

    def _bound_parts(self, e) -> tuple:
        """The subexpressions whose intervals ``_bound(e)`` asks for."""
        t = type(e)
        if t is Binary:
            if e.op in LINEAR_OPS:
                lin = self.linear(e)
                if len(lin.terms) == 1 and not lin.const and next(iter(lin.terms.values()))[0] is e:
                    return (e.a, e.b)
                return tuple(atom for atom, _ in lin.terms.values())
            if e.op in (BinOp.MIN, BinOp.MAX) or e.op in _DIVMOD:
                return (e.a, e.b)
            return ()
        if t is Unary and e.op is UnOp.NEG:
            return tuple(atom for atom, _ in self.linear(e).terms.values())
        if t is Select:
            return (e.true_value, e.false_value)
        if t is Cast and is_index(e.value):
            return (e.value,)
        return ()

    def _bound(self, e) -> tuple[int, int]:
        t = type(e)
        d = e.dtype
        if t is Const:
            return e.value, e.value
        if t is Var or t is SizeVar:
            lo, hi = dtype_range(d)
            if t is SizeVar:
                lo = max(lo, 0)
            vb = self.var_bounds.get(e)
            if vb is not None:
                lo, hi = max(lo, vb[0]), min(hi, vb[1])
            return lo, hi
        if t is Binary:
            op = e.op
            if op in LINEAR_OPS:
                lin = self.linear(e)
                if len(lin.terms) == 1 and not lin.const:
                    (atom, c), = lin.terms.values()
                    if atom is e:     # a product of two non-constant factors
                        return _mul_interval(self.bound(e.a), self.bound(e.b))
                return self.linear_interval(lin)
            if op is BinOp.MIN or op is BinOp.MAX:
                (alo, ahi), (blo, bhi) = self.bound(e.a), self.bound(e.b)
                if op is BinOp.MIN:
                    return min(alo, blo), min(ahi, bhi)
                return max(alo, blo), max(ahi, bhi)
            if op in _DIVMOD:
                return _divmod_interval(op, self.bound(e.a), self.bound(e.b), d)
            return dtype_range(d)
        if t is Unary and e.op is UnOp.NEG:
            return self.linear_interval(self.linear(e))
        if t is Select:
            (alo, ahi), (blo, bhi) = self.bound(e.true_value), self.bound(e.false_value)
            return min(alo, blo), max(ahi, bhi)
        if t is Cast:
            src = e.value.dtype
            if dt.is_bool(src):
                return 0, 1
            if is_index(e.value):
                lo, hi = self.bound(e.value)
                dlo, dhi = dtype_range(d)
                if dlo <= lo and hi <= dhi:
                    return lo, hi
        return dtype_range(d)


_DIVMOD = (BinOp.FLOORDIV, BinOp.FLOORMOD, BinOp.TRUNCDIV, BinOp.TRUNCMOD)


def _mul_interval(a, b) -> tuple[int, int]:
    ps = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return min(ps), max(ps)


def _divmod_interval(op, a, b, d) -> tuple[int, int]:
    lo, hi = a
    blo, bhi = b
    if blo > 0 or bhi < 0:            # the divisor's sign is known
        if op is BinOp.FLOORDIV or op is BinOp.TRUNCDIV:
            f = (lambda x, y: x // y) if op is BinOp.FLOORDIV else trunc_divide
            qs = [f(x, y) for x in (lo, hi) for y in (blo, bhi)]
            return min(qs), max(qs)
        m = max(abs(blo), abs(bhi))       # |remainder| < m
        if blo == bhi:                     # constant divisor: maybe one period
            c = blo
            if op is BinOp.FLOORMOD and lo // c == hi // c:
                return lo % c, hi % c
            if op is BinOp.TRUNCMOD and trunc_divide(lo, c) == trunc_divide(hi, c) and (lo >= 0 or hi <= 0):
                return trunc_remainder(lo, c), trunc_remainder(hi, c)
        if op is BinOp.FLOORMOD:
            if bhi < 0:
                return -(m - 1), 0
            return 0, (min(m - 1, hi) if lo >= 0 else m - 1)
        # truncmod takes the sign of the dividend
        return (0 if lo >= 0 else max(lo, -(m - 1))), (0 if hi <= 0 else min(hi, m - 1))
    return dtype_range(d)


def build_linear(lin: Linear, d: str, made: dict | None = None):
    """The canonical expression of a linear form: positive terms first (larger coefficients
    first, then by a structural order), then subtracted terms, then the constant.

    ``{x: 1}, 7`` → ``x + 7``; ``{xo: 32, xi: 1}, 0`` → ``xo * 32 + xi``; ``{x: -1}, 5`` → ``5 - x``.
    ``made``, when given, receives every node built (by id): they are canonical already.
    """
    pos, neg = [], []
    for atom, c in lin.terms.values():
        (pos if c > 0 else neg).append((atom, c))
    if len(pos) > 1:
        pos.sort(key=lambda t: (-t[1], order_key(t[0])))
    if len(neg) > 1:
        neg.sort(key=lambda t: (t[1], order_key(t[0])))
    k = lin.const

    def node(n):
        if made is not None:
            made[id(n)] = n
        return n

    def c(v):
        return Const(wrap(v, d), d)

    e = None
    for atom, co in pos:
        term = atom if co == 1 else node(Binary(BinOp.MUL, atom, c(co), d))
        e = term if e is None else node(Binary(BinOp.ADD, e, term, d))
    if e is None and neg:
        if k > 0:
            e = c(k)
            k = 0
        else:
            atom, co = neg.pop(0)
            e = node(Unary(UnOp.NEG, atom, d) if co == -1 else Binary(BinOp.MUL, atom, c(co), d))
    for atom, co in neg:
        term = atom if co == -1 else node(Binary(BinOp.MUL, atom, c(-co), d))
        e = node(Binary(BinOp.SUB, e, term, d))
    if e is None:
        return c(k)
    if k > 0:
        e = node(Binary(BinOp.ADD, e, c(k), d))
    elif k < 0:
        e = node(Binary(BinOp.SUB, e, c(-k), d))
    return e


def order_key(e):
    """A deterministic structural sort key (names, operators, constants; not object ids)."""
    t = type(e)
    if t is Var or t is SizeVar:
        return (0, e.name)
    if t is Const:
        return (1, str(e.value))
    if t is Binary:
        return (2, e.op.value, order_key(e.a), order_key(e.b))
    if t is Unary:
        return (3, e.op.value, order_key(e.a))
    if t is Cast:
        return (4, e.dtype, order_key(e.value))
    owner = getattr(e, "buffer", None) or getattr(e, "tensor", None)
    name = getattr(e, "name", None) or getattr(owner, "name", "")
    kids = getattr(e, "indices", None) or getattr(e, "args", None) or ()
    return (5, t.__name__, name) + tuple(order_key(k) for k in kids)
