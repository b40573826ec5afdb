"""Declaring operators: placeholders, computes, reduction axes, reducers and intrinsics.

>>> from tilecraft import te
>>> n = te.var("n")
>>> A = te.placeholder((n,), name="A")
>>> B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
>>> k = te.reduce_axis((0, n), name="k")
>>> S = te.compute((1,), lambda _: te.sum(A[k], axis=k), name="S")
"""
from __future__ import annotations

import inspect
import numbers

from ..ir import dtype as dt
from ..ir.dtype import DTypeError
from ..ir.expr import (BinOp, Call, CommReducer, Const, Expr, IterKind, IterVar, Range, Reduce,
                       SizeVar, TensorLoad, Var, binary, cast, const, convert, logical_not, select)
from ..ir.functor import post_order_visit, collect_vars
from ..ir.simplify import simplify
from .tag import scoped_tag
from .tensor import (ComputeOp, PlaceholderOp, TEError, Tensor, is_reduce_var,
                     register_reduce_var)


def var(name: str = "v", dtype: str = "int32") -> Var:
    """A symbolic scalar, e.g. an extent known only at run time: ``n = te.var("n")``."""
    return Var(name, dt.normalize(dtype))


def size_var(name: str = "n", dtype: str = "int32") -> SizeVar:
    """Like ``var`` but known to be non-negative (a size)."""
    return SizeVar(name, dt.normalize(dtype))


def _shape(shape, where: str) -> tuple:
    if isinstance(shape, (numbers.Integral, Expr)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise TEError(f"{where}: shape must be a tuple of integers or integer expressions, got {shape!r}")
    out = []
    for d, s in enumerate(shape):
        if isinstance(s, IterVar):
            s = s.var
        if isinstance(s, float) and s.is_integer():
            s = int(s)      # TVM scripts write N / bn under Python 3; an integral float is accepted
        if isinstance(s, bool) or not isinstance(s, (numbers.Integral, Expr)):
            raise TEError(f"{where}: dimension {d} of the shape is {s!r} ({type(s).__name__}); "
                          f"shapes must be integral")
        e = convert(s)
        if not dt.is_int(e.dtype):
            raise TEError(f"{where}: dimension {d} of the shape `{e}` has dtype {e.dtype}; shapes must be integral")
        if isinstance(e, Const) and e.value < 0:
            raise TEError(f"{where}: dimension {d} of the shape is negative ({e.value})")
        out.append(e)
    return tuple(out)


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of the given shape and dtype."""
    shape = _shape(shape, f"placeholder '{name}'")
    return PlaceholderOp(name, shape, dt.normalize(dtype)).output(0)


def reduce_axis(dom, name: str = "rv") -> IterVar:
    """A reduction axis over ``dom = (lo, hi)`` (half-open) or a ``Range``."""
    if isinstance(dom, Range):
        rng = dom
    elif isinstance(dom, (tuple, list)) and len(dom) == 2:
        lo, hi = (convert(x) for x in dom)
        for x in (lo, hi):
            if not dt.is_int(x.dtype):
                raise TEError(f"reduce_axis '{name}': bounds must be integers, got `{x}` ({x.dtype})")
        # (0, n) has extent n, not `n - 0`: it shows in shapes made from the axis (rfactor)
        rng = Range(lo, hi if isinstance(lo, Const) and lo.value == 0 else simplify(hi - lo))
    else:
        raise TEError(f"reduce_axis '{name}': expected (lo, hi), got {dom!r}")
    v = Var(name, rng.extent.dtype)
    register_reduce_var(v)
    return IterVar(rng, v, IterKind.REDUCE)


def thread_axis(dom=None, tag: str = "", name: str = "") -> IterVar:
    """A GPU thread index to ``bind`` a loop to: ``te.thread_axis("threadIdx.x")``,
    ``te.thread_axis("vthread")``, ``te.thread_axis((0, 2), "vthread", name="vx")``."""
    if isinstance(dom, str):
        dom, tag = None, dom
    valid = ("threadIdx.x", "threadIdx.y", "threadIdx.z", "blockIdx.x", "blockIdx.y", "blockIdx.z",
             "vthread", "cthread")
    if tag not in valid:
        raise TEError(f"thread_axis: unknown tag {tag!r}; expected one of {', '.join(valid)}")
    rng = None
    if dom is not None:
        lo, hi = dom
        rng = Range(convert(lo), convert(hi) - convert(lo))
    return IterVar(rng, Var(name or tag, "int32"), IterKind.THREAD, tag)


def _lambda_arg_names(fcompute, ndim: int) -> list[str]:
    try:
        sig = inspect.signature(fcompute)
    except (TypeError, ValueError):
        return [f"i{d}" for d in range(ndim)]
    params = list(sig.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return [f"i{d}" for d in range(ndim)]
    if len(params) != ndim:
        raise TEError(f"the compute function takes {len(params)} argument(s) but the shape has "
                      f"{ndim} dimension(s)")
    return [p.name for p in params]


def compute(shape, fcompute, name: str = "compute", tag: str = "", attrs=None):
    """A tensor whose element at each index is ``fcompute(*index)``.

    The axes are named after the lambda's arguments (``C.op.axis``). A body that is a tuple makes
    several outputs (returned as a list), as tuple reductions like argmax need.

    >>> C = compute((n, m), lambda i, j: A[i, j] + B[j], name="C")
    """
    return compute_tagged(shape, fcompute, name, scoped_tag(tag, f"compute '{name}'"), attrs)


def compute_tagged(shape, fcompute, name: str, tag: str, attrs=None):
    """``compute`` with exactly this tag, whatever ``te.tag_scope`` encloses it (topi's operators
    keep theirs, as TVM's C++ ones do)."""
    shape = _shape(shape, f"compute '{name}'")
    names = _lambda_arg_names(fcompute, len(shape))
    axis = tuple(IterVar(Range(const(0, s.dtype), s), Var(nm, s.dtype), IterKind.DATA_PAR)
                 for nm, s in zip(names, shape))
    body = fcompute(*[iv.var for iv in axis])
    bodies = tuple(body) if isinstance(body, (list, tuple)) else (body,)
    bodies = tuple(_to_expr(b, name) for b in bodies)
    reduce_axes = _check_body(bodies, axis, name)
    _check_ragged_bounds(reduce_axes, name)
    op = ComputeOp(name, tag, attrs or {}, axis, reduce_axes, bodies)
    return list(op.outputs) if len(bodies) > 1 else op.output(0)


def _check_ragged_bounds(r_axes: tuple, name: str) -> None:
    """A reduce axis's bounds may read tensors and the output's axes (a ragged axis), not
    another reduce axis: the bounds are loaded once per output point."""
    for iv in r_axes:
        for part in (iv.dom.min, iv.dom.extent):
            for v in collect_vars(part):
                if is_reduce_var(v):
                    raise TEError(f"compute '{name}': the bounds of the reduce axis '{iv.var.name}' use the reduce "
                                  f"axis '{v.name}'; bounds may use the output's axes and tensor loads "
                                  f"(row_ptr[i], row_ptr[i + 1]), not another reduction axis")


def _to_expr(b, name):
    if isinstance(b, Tensor):
        raise TEError(f"compute '{name}': the body is a whole tensor '{b.name}'; index it, e.g. {b.name}[i]")
    try:
        return convert(b)
    except TypeError:
        raise TEError(f"compute '{name}': the body must be an expression, got {type(b).__name__}") from None


def _check_body(bodies: tuple, axis: tuple, name: str) -> tuple:
    """Reductions only at the top of a body, all outputs agreeing; reduce axes only inside them."""
    reduces = [b for b in bodies if isinstance(b, Reduce)]
    if reduces and len(reduces) != len(bodies):
        raise TEError(f"compute '{name}': either every output of a tuple body is a reduction or none is")
    r_axes: tuple = ()
    if reduces:
        first = reduces[0]
        for r in reduces[1:]:
            if r.combiner is not first.combiner or r.axis != first.axis or r.init is not first.init:
                raise TEError(f"compute '{name}': the outputs of a tuple reduction must come from one reducer call")
        r_axes = first.axis
        for x in first.init:
            for v in collect_vars(x):
                if is_reduce_var(v):
                    raise TEError(f"compute '{name}': init `{x}` of te.{first.combiner.name} uses the reduce "
                                  f"axis '{v.name}'; init is one value per output element (use the output's axes)")
    inner = [s for r in reduces for s in r.source] + [r.condition for r in reduces[:1]]
    outer = list(reduces[0].init) if reduces else list(bodies)

    for b in bodies:
        def nested(n, _b=b):
            if isinstance(n, Reduce) and n is not _b:
                raise TEError(f"compute '{name}': a reduction (te.sum/max/min) must be the whole body, "
                              f"not part of an expression; compute it in its own stage and combine after")
        for part in ([b] if not isinstance(b, Reduce) else list(b.source) + list(b.init) + [b.condition]):
            post_order_visit(part, nested)

    allowed = {iv.var for iv in axis} | {iv.var for iv in r_axes}
    for part in outer + inner:
        for v in collect_vars(part):
            if is_reduce_var(v) and v not in allowed:
                where = "outside a reduction" if v not in {iv.var for iv in r_axes} else ""
                raise TEError(f"compute '{name}': the reduce axis '{v.name}' is used {where or 'but not reduced'}; "
                              f"wrap the expression in te.sum(..., axis={v.name}) (or max/min)")
    return r_axes


# ----------------------------------------------------------------------------------------------
# Reducers

class Reducer:
    """A reduction built by ``comm_reducer``; call it as ``r(expr, axis=k, where=cond, init=v)``.

    ``init`` (TVM's ``Reduce.init``) is the value the fold starts from instead of the identity:
    a number or an expression of the output's axes (``init=I[i, j]``), one per value of a tuple
    reducer. ``te.sum(A[k], axis=k, init=10.0)`` over ``ones(16)`` is 26.
    """

    def __init__(self, fcombine, fidentity, name: str):
        self.fcombine, self.fidentity, self.name = fcombine, fidentity, name
        self._cache: dict = {}

    def _combiner(self, dtypes: tuple) -> CommReducer:
        c = self._cache.get(dtypes)
        if c is None:
            lhs = tuple(Var(f"x{i}" if len(dtypes) > 1 else "x", d) for i, d in enumerate(dtypes))
            rhs = tuple(Var(f"y{i}" if len(dtypes) > 1 else "y", d) for i, d in enumerate(dtypes))
            if len(dtypes) == 1:
                res = self.fcombine(lhs[0], rhs[0])
                ident = self.fidentity(dtypes[0])
            else:
                res = self.fcombine(lhs, rhs)
                ident = self.fidentity(*dtypes)
            res = tuple(res) if isinstance(res, (list, tuple)) else (res,)
            ident = tuple(ident) if isinstance(ident, (list, tuple)) else (ident,)
            res = tuple(convert(r) for r in res)
            ident = tuple(convert(x, d) if not isinstance(x, Expr) else x for x, d in zip(ident, dtypes))
            if len(res) != len(dtypes) or len(ident) != len(dtypes):
                raise TEError(f"reducer '{self.name}': combine and identity must give {len(dtypes)} value(s)")
            for r, d in zip(res, dtypes):
                if r.dtype != d:
                    raise DTypeError(f"reducer '{self.name}': the combined value `{r}` is {r.dtype}, expected {d}")
            c = CommReducer(lhs, rhs, res, ident, self.name)
            self._cache[dtypes] = c
        return c

    def __call__(self, expr, axis=None, where=None, init=None, *rest):
        if axis is None:
            raise TEError(f"te.{self.name}: give the reduce axes (axis=k, made by te.reduce_axis), "
                          f"or two or more values to combine")
        if not isinstance(axis, (IterVar, list, tuple)):
            # TVM: a reducer called on plain values combines them: mysum(a, b) is a + b
            try:
                return self.combine(expr, axis, *[x for x in (where, init, *rest) if x is not None])
            except DTypeError as e:
                if not isinstance(axis, Var):
                    raise
                raise TEError(f"te.{self.name}: axis must be reduce axes made by te.reduce_axis, got the "
                              f"variable '{axis.name}'; called with plain values a reducer combines them "
                              f"(TVM), and these do not combine: {e}") from None
        if rest:
            raise TEError(f"te.{self.name}: called with a reduce axis, it takes (expr, axis, where=, "
                          f"init=); {len(rest)} more argument(s) given")
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for a in axes:
            if not isinstance(a, IterVar) or a.kind is not IterKind.REDUCE:
                raise TEError(f"te.{self.name}: axis must be reduce axes made by te.reduce_axis, got {a!r}")
        srcs = tuple(convert(e) for e in expr) if isinstance(expr, (list, tuple)) else (convert(expr),)
        cond = convert(True) if where is None else convert(where)
        if not dt.is_bool(cond.dtype):
            raise DTypeError(f"te.{self.name}: `where` must be a bool condition, got {cond.dtype}")
        comb = self._combiner(tuple(s.dtype for s in srcs))
        inits = () if init is None else self._init(init, srcs)
        outs = tuple(Reduce(comb, srcs, axes, cond, i, inits) for i in range(len(srcs)))
        return outs if len(outs) > 1 else outs[0]

    def combine(self, *values):
        """The combine function folded over plain values, left to right (TVM's reducer called
        without a reduce axis): ``te.sum(a, b, c)`` is ``(a + b) + c``.

        >>> mymax = te.comm_reducer(lambda x, y: te.max(x, y), lambda t: te.min_value(t))
        >>> mymax(A[i], B[i])                   # max(A[i], B[i])
        """
        res = values[0]
        for v in values[1:]:
            res = self.fcombine(res, v)
        return tuple(res) if isinstance(res, list) else res

    def _init(self, init, srcs: tuple) -> tuple:
        vals = tuple(init) if isinstance(init, (list, tuple)) else (init,)
        if len(vals) != len(srcs):
            raise TEError(f"te.{self.name}: init has {len(vals)} value(s) but the reduction has {len(srcs)}")
        out = []
        for v, s in zip(vals, srcs):
            if isinstance(v, Tensor):
                raise TEError(f"te.{self.name}: init is a whole tensor '{v.name}'; index it, e.g. {v.name}[i]")
            try:
                e = v if isinstance(v, Expr) else convert(v, s.dtype)
            except (TypeError, DTypeError) as err:
                raise TEError(f"te.{self.name}: init {v!r} is not a value of the reduction's dtype "
                              f"{s.dtype} ({err})") from None
            if e.dtype != s.dtype:
                raise DTypeError(f"te.{self.name}: init `{e}` is {e.dtype} but the reduction is {s.dtype}")
            out.append(e)
        return tuple(out)


def comm_reducer(fcombine, fidentity, name: str = "reduce") -> Reducer:
    """A commutative reducer from a combine function and an identity function.

    >>> argmax = te.comm_reducer(lambda x, y: (te.select(x[1] >= y[1], x[0], y[0]),
    ...                                        te.max(x[1], y[1])),
    ...                          lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    """
    return Reducer(fcombine, fidentity, name)


sum = comm_reducer(lambda x, y: x + y, lambda t: const(0, t), name="sum")
_max_reducer = comm_reducer(lambda x, y: binary(BinOp.MAX, x, y), lambda t: const(dt.min_value(t), t), name="max")
_min_reducer = comm_reducer(lambda x, y: binary(BinOp.MIN, x, y), lambda t: const(dt.max_value(t), t), name="min")


def max(expr, axis=None, where=None, init=None, *rest):  # noqa: A001 - TVM's name
    """``te.max(expr, axis=k)`` (``where=``, ``init=`` as for ``te.sum``) reduces;
    ``te.max(a, b)`` (or more values) is the elementwise maximum."""
    return _max_reducer(expr, axis, where, init, *rest)


def min(expr, axis=None, where=None, init=None, *rest):  # noqa: A001
    """``te.min(expr, axis=k)`` (``where=``, ``init=`` as for ``te.sum``) reduces;
    ``te.min(a, b)`` (or more values) is the elementwise minimum."""
    return _min_reducer(expr, axis, where, init, *rest)
