"""Reverse-mode automatic differentiation of tensor-expression graphs: ``te.gradient``.

TVM's semantics (``tvm.te.gradient``, the Jacobian-based design of ``src/te/autodiff``): for the
output ``Y`` and a *head* ``H`` of shape ``prefix + Y.shape`` (an adjoint: what the Jacobians are
multiplied by), ``te.gradient(Y, [X], H)`` is one tensor of shape ``prefix + X.shape``::

    dX[p, j] = sum_i H[p, i] * dY[i] / dX[j]

With ``head=None`` the head is the identity of shape ``Y.shape + Y.shape``, so the result is the
whole Jacobian (shape ``Y.shape + X.shape``). For ``grad(sum(Y))`` pass a head of ones; for the
gradient of a scalar loss pass a head of shape ``Y.shape``.

How (one compute stage at a time, from the output backwards):

* every ``te.compute`` stage ``T`` on a path from an input to the output gets an adjoint
  ``T_grad`` (shape ``prefix + T.shape``): the sum of the contributions of its consumers;
* a consumer ``Y = f(..., X[idx(i, k)], ...)`` (data axes ``i``, reduce axes ``k``) contributes,
  for each distinct access ``X[idx]`` of its body, ``sum over (i, k) with idx(i, k) == j of
  adj_Y[p, i] * d body / d X[idx]``: the derivative of the body with respect to that access,
  summed over the reduce axes, times the consumer's adjoint (the chain rule);
* the Jacobian is never built: the equations ``idx(i, k) == j`` are solved per dimension. An
  index that is affine in one of the remaining axes (``i``, ``k``, ``y*2 + ry``) eliminates that
  axis (the one of largest extent, so the sums left are over the small ones: a convolution's
  input gradient sums over the kernel window, not the output image), with range and
  divisibility conditions; what is not solved stays a summed axis with the equation as a
  condition (``where=``). An elementwise consumer thus gives an elementwise adjoint, a matmul or
  dense layer a matmul-shaped one, a broadcast a sum over the broadcast axes.

Derivatives: ``+ - * /``, ``min``/``max``/``select`` (the branch taken), casts between floats,
``exp exp2 log log2 log10 sqrt rsqrt tanh sigmoid erf sin cos fabs pow fma`` (``floor``, ``ceil``,
``round``, ``trunc`` and anything integer have derivative 0); reductions ``sum`` (``where=`` and
``init=`` too) and ``max``/``min`` (the gradient goes to every position equal to the maximum;
TVM's goes to the first one: they differ only on ties). Anything else is an error naming the
stage and what is not differentiable.

>>> from tilecraft import te
>>> A = te.placeholder((4, 8), name="A", dtype="float64")
>>> B = te.placeholder((8, 5), name="B", dtype="float64")
>>> k = te.reduce_axis((0, 8), name="k")
>>> C = te.compute((4, 5), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> H = te.placeholder((4, 5), name="H", dtype="float64")
>>> dA, dB = te.gradient(C, [A, B], head=H)     # dA = H @ B.T, dB = A.T @ H
"""
from __future__ import annotations

import math

from ..ir import dtype as dt
from ..ir import intrinsics
from ..ir.expr import (Binary, BinOp, Call, Cast, Const, Expr, Range, Reduce, Select, TensorLoad,
                       Unary, UnOp, Var, cast, const, select)
from ..ir.functor import collect_vars, post_order_visit, structural_equal, substitute
from ..ir.simplify import simplify
from .operation import compute, reduce_axis, sum as te_sum
from .tensor import ComputeOp, PlaceholderOp, TEError, Tensor, post_dfs_order

# extent used to rank axes of symbolic extent: larger than any constant one
_SYMBOLIC_EXTENT = 1 << 40


def gradient(output, inputs, head=None):
    """The adjoints of ``inputs`` for ``output`` and ``head`` (TVM's ``te.gradient``): a list of
    tensors of shape ``prefix + X.shape``, ``head`` having shape ``prefix + output.shape``
    (``None``: the identity, so the results are the Jacobians ``output.shape + X.shape``).

    >>> H = te.placeholder(C.shape, name="H")           # e.g. ones: grad of C.sum()
    >>> dA, dB = te.gradient(C, [A, B], head=H)
    >>> s = te.create_schedule([dA.op, dB.op])
    """
    single = isinstance(inputs, Tensor)
    inputs = [inputs] if single else list(inputs)
    if not isinstance(output, Tensor):
        raise TEError(f"te.gradient: output must be a te.Tensor, got {type(output).__name__}")
    for x in inputs:
        if not isinstance(x, Tensor):
            raise TEError(f"te.gradient: inputs must be te.Tensors, got {type(x).__name__} {x!r}")
        if not dt.is_float(x.dtype):
            raise TEError(f"te.gradient: input '{x.name}' is {x.dtype}; only float tensors have gradients")
    if not dt.is_float(output.dtype):
        raise TEError(f"te.gradient: output '{output.name}' is {output.dtype}; only float outputs can be differentiated")
    if head is None:
        head = _identity_head(output)
    prefix = _check_head(head, output)
    return _Backward(output, inputs, head, prefix).run()


def _identity_head(y: Tensor) -> Tensor:
    n = len(y.shape)

    def f(*ij):
        conds = [a == b for a, b in zip(ij[:n], ij[n:])]
        c = conds[0]
        for x in conds[1:]:
            c = c & x
        return select(c, const(1, y.dtype), const(0, y.dtype)) if conds else const(1, y.dtype)
    return compute(tuple(y.shape) * 2, f, name=f"{y.name}_identity")


def _check_head(head, y: Tensor) -> tuple:
    if not isinstance(head, Tensor):
        raise TEError(f"te.gradient: head must be a te.Tensor of shape prefix + {_shape_str(y.shape)}, "
                      f"got {type(head).__name__}")
    n, m = len(y.shape), len(head.shape)
    if m < n or not all(_same_extent(a, b) for a, b in zip(head.shape[m - n:], y.shape)):
        raise TEError(f"te.gradient: head '{head.name}' has shape {_shape_str(head.shape)}; it must end "
                      f"with the output '{y.name}''s shape {_shape_str(y.shape)}")
    if head.dtype != y.dtype:
        raise TEError(f"te.gradient: head '{head.name}' is {head.dtype} but the output '{y.name}' is {y.dtype}")
    return tuple(head.shape[:m - n])


def _shape_str(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _same_extent(a, b) -> bool:
    if isinstance(a, Const) and isinstance(b, Const):
        return a.value == b.value
    return structural_equal(a, b)


class _Backward:
    """One ``te.gradient`` call: adjoints from the output back to the inputs."""

    def __init__(self, output, inputs, head, prefix):
        self.output, self.inputs, self.head, self.prefix = output, inputs, head, prefix
        self.terms: dict = {}           # tensor -> [_Term], the contributions of its consumers
        self.adjoint: dict = {}         # tensor -> its adjoint tensor

    def run(self) -> list:
        order = post_dfs_order([self.output.op])
        wanted = {id(x) for x in self.inputs}
        needed = set()                  # ids of tensors from which an input is reached
        for op in order:
            for t in op.outputs:
                if id(t) in wanted or any(id(x) in needed for x in op.input_tensors):
                    needed.add(id(t))
        self.adjoint[self.output] = self.head
        for op in reversed(order):
            if isinstance(op, PlaceholderOp) or not any(id(t) in needed for t in op.outputs):
                continue
            if not isinstance(op, ComputeOp):
                raise TEError(f"te.gradient: stage '{op.name}' is a {type(op).__name__}; only te.compute "
                              f"stages (and placeholders) can be differentiated")
            if len(op.outputs) > 1:
                raise TEError(f"te.gradient: stage '{op.name}' has {len(op.outputs)} outputs (a tuple "
                              f"reduction); only single-output computes can be differentiated")
            y = op.output(0)
            adj = self.adjoint.get(y) or self.finish(y)
            for x in op.input_tensors:
                if id(x) in needed:
                    self.terms.setdefault(x, []).extend(_terms_of(op, x, adj, len(self.prefix)))
        return [self.adjoint.get(x) or self.finish(x) for x in self.inputs]

    def finish(self, x: Tensor) -> Tensor:
        """``x``'s adjoint: one stage summing its consumers' contributions (each contribution
        that needs a reduction is a stage of its own unless it is the only one)."""
        terms = self.terms.get(x, [])
        shape = tuple(self.prefix) + tuple(x.shape)
        name = f"{x.name}_grad"
        if len(terms) == 1:
            out = compute(shape, lambda *js: terms[0].body(js), name=name)
        else:
            parts = []
            for n, t in enumerate(terms):
                if t.needs_reduce():
                    red = compute(shape, lambda *js, _t=t: _t.body(js), name=f"{name}{n}")
                    parts.append(lambda js, _r=red: _r[js])
                else:
                    parts.append(lambda js, _t=t: _t.body(js))

            def total(*js):
                acc = const(0, x.dtype)
                for p in parts:
                    acc = _add(acc, p(js))
                return acc
            out = compute(shape, total, name=name)
        self.adjoint[x] = out
        return out


class _Term:
    """The contribution of one access ``X[idx]`` in the body of ``op`` to ``X``'s adjoint:
    ``sum over axes with idx == j of adj_Y[p, i] * deriv``, ``deriv`` and ``cond`` being
    expressions of ``op``'s axes."""

    def __init__(self, op, load, deriv, cond, axes, adj, nprefix):
        self.op, self.load, self.deriv, self.cond = op, load, deriv, cond
        self.axes, self.adj, self.nprefix = axes, adj, nprefix

    def solve(self, js):
        """Eliminate what ``idx == j`` determines: (the axes left to sum, conditions, value)."""
        p, j = js[:self.nprefix], js[self.nprefix:]
        free = {iv.var: iv.dom for iv in self.axes}
        vmap: dict = {}
        conds = [self.cond] if self.cond is not None else []
        x = self.load.tensor
        for d, idx in enumerate(self.load.indices):
            e = substitute(idx, vmap)
            lin = _linear(e, free)
            if lin is None or not lin[0]:
                conds.append(j[d] == e)
                continue
            coefs, rest = lin
            v = max(coefs, key=lambda u: (_extent_rank(free[u]), abs(coefs[u]) == 1))
            c = coefs[v]
            others = rest
            for u, cu in coefs.items():
                if u is not v:
                    others = others + u * cu if cu != 1 else others + u
            num = j[d] - others if not _is_zero(others) else j[d]
            num = simplify(num)
            if c == 1:
                val = num
            elif c == -1:
                val = -num
            else:
                val = num // c
                conds.append(num % c == 0)
            dom = free.pop(v)
            exact = val is j[d] and _is_zero(dom.min) and _same_extent(dom.extent, x.shape[d])
            if not exact:
                conds.append(val >= dom.min)
                conds.append(val < dom.min + dom.extent)
            vmap = {k: substitute(w, {v: val}) for k, w in vmap.items()}
            vmap[v] = val
        head = TensorLoad(self.adj, tuple(p) + tuple(vmap.get(iv.var, iv.var) for iv in self.op.axis))
        value = _mul(head, substitute(self.deriv, vmap))
        conds = [simplify(substitute(c, vmap)) for c in conds]
        conds = [c for c in conds if not (isinstance(c, Const) and c.value is True)]
        for v, dom in free.items():
            if collect_vars(dom.min) & set(vmap) or collect_vars(dom.extent) & set(vmap) or \
                    any(u in free for u in collect_vars(dom.min) | collect_vars(dom.extent)):
                raise TEError(f"te.gradient: stage '{self.op.name}': the axis '{v.name}' has bounds that "
                              f"depend on other axes (a ragged axis); not differentiable here")
        return free, conds, value

    def needs_reduce(self) -> bool:
        js = tuple(Var(f"j{d}", "int32") for d in range(self.nprefix + len(self.load.indices)))
        return bool(self.solve(js)[0])

    def body(self, js):
        free, conds, value = self.solve(js)
        cond = None
        for c in conds:
            cond = c if cond is None else cond & c
        if not free:
            return value if cond is None else select(cond, value, const(0, value.dtype), lazy=True)
        rmap, raxes = {}, []
        for v, dom in free.items():
            r = reduce_axis((dom.min, simplify(dom.min + dom.extent)), name=v.name)
            rmap[v] = r.var
            raxes.append(r)
        value = substitute(value, rmap)
        cond = None if cond is None else substitute(cond, rmap)
        return te_sum(value, axis=raxes, where=cond)


def _terms_of(op: ComputeOp, x: Tensor, adj: Tensor, nprefix: int) -> list:
    """The contributions of ``op``'s accesses of ``x`` to ``x``'s adjoint."""
    body = op.body[0]
    out = []
    if isinstance(body, Reduce):
        kind = _reducer_kind(body)
        if kind is None or len(body.source) != 1:
            raise TEError(f"te.gradient: stage '{op.name}' reduces with '{body.combiner.name}'; only sum, "
                          f"max and min reductions can be differentiated")
        src = body.source[0]
        cond = None if _is_true(body.condition) else body.condition
        mine = TensorLoad(op.output(0), tuple(iv.var for iv in op.axis))
        for load in _sites(src, x):
            d = _diff(src, load, op.name)
            if _is_zero(d):
                continue
            if kind != BinOp.ADD:
                d = select(src == mine, d, const(0, d.dtype))
            out.append(_Term(op, load, d, cond, op.axis + op.reduce_axis, adj, nprefix))
        if body.init:
            init = body.init[0]
            if kind != BinOp.ADD and _sites(init, x):
                raise TEError(f"te.gradient: stage '{op.name}': a max/min reduction with init= reading "
                              f"'{x.name}' cannot be differentiated")
            for load in _sites(init, x):
                d = _diff(init, load, op.name)
                if not _is_zero(d):
                    out.append(_Term(op, load, d, None, op.axis, adj, nprefix))
        return out
    for load in _sites(body, x):
        d = _diff(body, load, op.name)
        if not _is_zero(d):
            out.append(_Term(op, load, d, None, op.axis, adj, nprefix))
    return out


def _reducer_kind(r: Reduce):
    """``BinOp.ADD``/``MAX``/``MIN`` when the reducer is a sum/max/min, else None."""
    comb = r.combiner
    if len(comb.result) != 1:
        return None
    res = comb.result[0]
    if isinstance(res, Binary) and res.op in (BinOp.ADD, BinOp.MAX, BinOp.MIN) and \
            {id(res.a), id(res.b)} == {id(comb.lhs[0]), id(comb.rhs[0])}:
        return res.op
    return None


def _sites(e: Expr, x: Tensor) -> list:
    """The distinct accesses ``x[...]`` in ``e`` (structurally equal ones once)."""
    found = []

    def f(n):
        if isinstance(n, TensorLoad) and n.tensor is x and not any(structural_equal(n, m) for m in found):
            found.append(n)
    post_order_visit(e, f)
    return found


# ------------------------------------------------------------------------------------------------
# Index equations: affine forms

def _linear(e: Expr, free: dict):
    """``e`` as ``({v: c}, rest)``: integer coefficients of the free axes ``v`` and the rest,
    which has none of them; None when ``e`` is not affine in them (``i // 2``, ``i * k``)."""
    if not (collect_vars(e) & set(free)):
        return {}, e
    if isinstance(e, Var):
        return {e: 1}, const(0, e.dtype)
    if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB):
        a, b = _linear(e.a, free), _linear(e.b, free)
        if a is None or b is None:
            return None
        sign = 1 if e.op is BinOp.ADD else -1
        coefs = dict(a[0])
        for v, c in b[0].items():
            coefs[v] = coefs.get(v, 0) + sign * c
        coefs = {v: c for v, c in coefs.items() if c != 0}
        rest = a[1] + b[1] if sign == 1 else a[1] - b[1]
        return coefs, rest
    if isinstance(e, Binary) and e.op is BinOp.MUL:
        for s, o in ((e.a, e.b), (e.b, e.a)):
            if isinstance(o, Const) and isinstance(o.value, int) and not isinstance(o.value, bool):
                lin = _linear(s, free)
                if lin is None:
                    return None
                return {v: c * o.value for v, c in lin[0].items()}, lin[1] * o
        return None
    if isinstance(e, Unary) and e.op is UnOp.NEG:
        lin = _linear(e.a, free)
        return None if lin is None else ({v: -c for v, c in lin[0].items()}, -lin[1])
    return None


def _extent_rank(dom: Range) -> int:
    return dom.extent.value if isinstance(dom.extent, Const) else _SYMBOLIC_EXTENT


# ------------------------------------------------------------------------------------------------
# Derivatives of expressions

def _diff(e: Expr, site: TensorLoad, stage: str) -> Expr:
    """``d e / d site``: the derivative of ``e`` with respect to the access ``site`` (other
    accesses, even of the same tensor, are independent variables)."""
    memo: dict = {}

    def d(n):
        key = id(n)
        if key not in memo:
            memo[key] = rule(n)
        return memo[key]

    def rule(n):
        if not dt.is_float(n.dtype):
            return None                         # integers (indices, conditions): no derivative
        zero = const(0, n.dtype)
        if isinstance(n, TensorLoad):
            return const(1, n.dtype) if structural_equal(n, site) else zero
        if isinstance(n, (Const, Var)):
            return zero
        if isinstance(n, Binary):
            a, b = n.a, n.b
            if n.op is BinOp.ADD:
                return _add(d(a), d(b))
            if n.op is BinOp.SUB:
                return _sub(d(a), d(b))
            if n.op is BinOp.MUL:
                return _add(_mul(d(a), b), _mul(a, d(b)))
            if n.op is BinOp.DIV:
                return _sub(_div(d(a), b), _div(_mul(a, d(b)), b * b))
            if n.op in (BinOp.MIN, BinOp.MAX):
                da, db = d(a), d(b)
                if _is_zero(da) and _is_zero(db):
                    return zero
                return select(a <= b if n.op is BinOp.MIN else a >= b, da, db)
            if n.op is BinOp.FLOORDIV:
                return zero
        if isinstance(n, Unary) and n.op is UnOp.NEG:
            return _neg(d(n.a))
        if isinstance(n, Cast):
            if not dt.is_float(n.value.dtype):
                return zero
            inner = d(n.value)
            return zero if _is_zero(inner) else cast(n.dtype, inner)
        if isinstance(n, Select):
            dt_, df = d(n.true_value), d(n.false_value)
            if _is_zero(dt_) and _is_zero(df):
                return zero
            return select(n.condition, dt_, df, lazy=n.lazy)
        if isinstance(n, Call) and n.name in _CALL_RULES:
            total = zero
            for pos, arg in enumerate(n.args):
                da = d(arg)
                if not _is_zero(da):
                    total = _add(total, _mul(_CALL_RULES[n.name](n, pos), da))
            return total
        what = f"`{n}`"
        if isinstance(n, Call):
            sym = n.args[0] if n.name.startswith("call_") and n.args else None
            what = f"the function '{getattr(sym, 'value', n.name)}'"
        raise TEError(f"te.gradient: stage '{stage}': {what} is not differentiable here")
    return d(e)


def _c(n: Call, v: float) -> Const:
    return const(v, n.dtype)


def _call(name, *args):
    return intrinsics.call(name, *args)


# d n / d n.args[pos], for each differentiable intrinsic
_CALL_RULES = {
    "exp": lambda n, p: n,
    "exp2": lambda n, p: n * _c(n, math.log(2.0)),
    "log": lambda n, p: _c(n, 1.0) / n.args[0],
    "log2": lambda n, p: _c(n, 1.0 / math.log(2.0)) / n.args[0],
    "log10": lambda n, p: _c(n, 1.0 / math.log(10.0)) / n.args[0],
    "sqrt": lambda n, p: _c(n, 0.5) / n,
    "rsqrt": lambda n, p: _c(n, -0.5) * n / n.args[0],
    "tanh": lambda n, p: _c(n, 1.0) - n * n,
    "sigmoid": lambda n, p: n * (_c(n, 1.0) - n),
    "erf": lambda n, p: _c(n, 2.0 / math.sqrt(math.pi)) * _call("exp", -(n.args[0] * n.args[0])),
    "sin": lambda n, p: _call("cos", n.args[0]),
    "cos": lambda n, p: -_call("sin", n.args[0]),
    "fabs": lambda n, p: select(n.args[0] >= _c(n, 0.0), _c(n, 1.0), _c(n, -1.0)),
    "pow": lambda n, p: (n.args[1] * _call("pow", n.args[0], n.args[1] - _c(n, 1.0)) if p == 0
                         else n * _call("log", n.args[0])),
    "fma": lambda n, p: (n.args[1], n.args[0], _c(n, 1.0))[p],
    "floor": lambda n, p: _c(n, 0.0),
    "ceil": lambda n, p: _c(n, 0.0),
    "round": lambda n, p: _c(n, 0.0),
    "trunc": lambda n, p: _c(n, 0.0),
}


# Constructors that fold the zeros and ones the chain rule makes (a derivative is mostly zeros)

def _is_zero(e) -> bool:
    return isinstance(e, Const) and not isinstance(e.value, bool) and e.value == 0


def _is_one(e) -> bool:
    return isinstance(e, Const) and not isinstance(e.value, bool) and e.value == 1


def _is_true(e) -> bool:
    return isinstance(e, Const) and e.value is True


def _add(a, b):
    return b if _is_zero(a) else a if _is_zero(b) else a + b


def _sub(a, b):
    return a if _is_zero(b) else _neg(b) if _is_zero(a) else a - b


def _neg(a):
    return a if _is_zero(a) else -a


def _mul(a, b):
    if _is_zero(a):
        return a
    if _is_zero(b):
        return b
    return b if _is_one(a) else a if _is_one(b) else a * b


def _div(a, b):
    return a if _is_zero(a) else a / b
