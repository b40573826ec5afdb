"""``te.scan``: a recurrence over the first dimension of its tensors (time), as TVM's scan.

``te.scan(init, update, state_placeholder, inputs=None)`` returns tensors of ``update``'s shape
whose rows ``t < T0`` (``T0 = init.shape[0]``) are ``init``'s and whose rows ``t >= T0`` are
``update``'s, computed in order of ``t``. ``update`` reads earlier rows of the result through
``state_placeholder`` (a placeholder of the result's shape): ``s_state[t - 1, i]``. Reading the
state at ``t`` or later is invalid (the interpreter reports it as an out-of-bounds read: at step
``t`` the state holds rows ``0..t-1``). Lists of ``init``/``update``/``state_placeholder`` make
a scan with several states that advance together.

The *body* of the scan is every operation between ``update`` and the state placeholders (and the
``inputs`` listed): those stages run once per step, inside the scan's loop over ``scan_axis``
(``op.scan_axis``, named ``<name>.idx``, ranging over ``[T0, T)``). A schedule attaches the
update stages to that loop and the other body stages there too (TVM's scan group); they can be
scheduled as usual inside it (``compute_at`` into each other, ``split``, ``bind``, ...).

>>> m, n = te.var("m"), te.var("n")
>>> X = te.placeholder((m, n), name="X")
>>> s_state = te.placeholder((m, n))
>>> s_init = te.compute((1, n), lambda _, i: X[0, i])
>>> s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i])
>>> s_scan = te.scan(s_init, s_update, s_state, inputs=[X])        # cumsum over rows
"""
from __future__ import annotations

from ..ir.expr import Const, IterKind, IterVar, Range, Var
from ..ir.simplify import simplify
from .tag import scoped_tag
from .tensor import Operation, PlaceholderOp, TEError, Tensor


class ScanOp(Operation):
    """``te.scan``: outputs of ``update``'s shapes, rows ``[0, T0)`` from ``init`` and rows
    ``[T0, T)`` from ``update``, computed step by step along ``scan_axis``."""

    __slots__ = ("name", "tag", "attrs", "scan_axis", "init", "update", "state_placeholder", "inputs",
                 "outputs", "_body", "__weakref__")
    axis = ()
    reduce_axis = ()

    def __init__(self, name, tag, attrs, scan_axis, init, update, state_placeholder, inputs):
        self.name, self.tag, self.attrs = name, tag, dict(attrs or {})
        self.scan_axis = scan_axis
        self.init, self.update = tuple(init), tuple(update)
        self.state_placeholder, self.inputs = tuple(state_placeholder), tuple(inputs)
        n = len(self.update)
        self.outputs = tuple(Tensor(self, i, u.shape, u.dtype, name if n == 1 else f"{name}.v{i}")
                             for i, u in enumerate(self.update))
        self._body = None

    @property
    def root_iter_vars(self) -> tuple:
        """The scan's own loop: ``scan_axis`` (a schedule can split it)."""
        return (self.scan_axis,)

    @property
    def input_tensors(self) -> list:
        """``init`` then ``update`` (TVM's order): the stages the scan's loop is made of."""
        return list(self.init) + list(self.update)

    @property
    def body_ops(self) -> list:
        """The operations that run at every step, producers first: those on a path from
        ``update`` to a state placeholder or a listed input (the boundaries excluded)."""
        if self._body is None:
            self._body = scan_body(self)
        return list(self._body)

    def __repr__(self):
        return f"ScanOp({self.name})"


def scan_body(op: ScanOp) -> list:
    boundary = {t.op for t in op.state_placeholder} | {t.op for t in op.inputs}
    reaches: dict = {}
    order: list = []

    def visit(o) -> bool:
        if o in boundary:
            return True
        if o in reaches:
            return reaches[o]
        reaches[o] = False
        hit = False
        for t in o.input_tensors:
            hit = visit(t.op) or hit
        reaches[o] = hit
        if hit:
            order.append(o)
        return hit
    for t in op.update:
        visit(t.op)
    for t in op.update:
        if t.op not in order:
            order.append(t.op)
    return order


def _as_list(x, what: str, where: str) -> list:
    xs = list(x) if isinstance(x, (list, tuple)) else [x]
    for k, t in enumerate(xs):
        if not isinstance(t, Tensor):
            raise TEError(f"{where}: {what} {k} must be a tensor, got {type(t).__name__} {t!r}")
    return xs


def _provably_equal(a, b) -> bool:
    d = simplify(a - b)
    return isinstance(d, Const) and d.value == 0


def scan(init, update, state_placeholder, inputs=None, name: str = "scan", tag: str = "", attrs=None):
    """A recurrence (see the module docstring); returns its output tensor, or a list of them
    when ``init``/``update``/``state_placeholder`` are lists (one per state).

    >>> s_scan = te.scan(s_init, s_update, s_state, inputs=[X])
    >>> s1, s2 = te.scan([i1, i2], [u1, u2], [state1, state2], inputs=[X])
    """
    where = f"scan '{name}'"
    tag = scoped_tag(tag, where)
    single = isinstance(update, Tensor)
    init = _as_list(init, "init", where)
    update = _as_list(update, "update", where)
    state = _as_list(state_placeholder, "state_placeholder", where)
    inputs = _as_list(inputs or [], "input", where)
    if not (len(init) == len(update) == len(state)):
        raise TEError(f"{where}: {len(init)} init, {len(update)} update and {len(state)} state tensor(s); "
                      f"give one of each per state")
    if not update:
        raise TEError(f"{where}: needs at least one state")
    for k, (i, u, p) in enumerate(zip(init, update, state)):
        what = f"{where}, state {k} ('{p.name}')"
        if not isinstance(p.op, PlaceholderOp):
            raise TEError(f"{what}: state_placeholder must be a te.placeholder, got the result of "
                          f"'{p.op.name}'")
        if not (i.dtype == u.dtype == p.dtype):
            raise TEError(f"{what}: init '{i.name}' is {i.dtype}, update '{u.name}' {u.dtype} and the state "
                          f"{p.dtype}; they must agree")
        if not (i.ndim == u.ndim == p.ndim) or u.ndim == 0:
            raise TEError(f"{what}: init '{i.name}', update '{u.name}' and the state have {i.ndim}, {u.ndim} and "
                          f"{p.ndim} dimension(s); they must have the same number, at least one (time first)")
        if not _provably_equal(u.shape[0], p.shape[0]):
            raise TEError(f"{what}: the update '{u.name}' has {u.shape[0]} time steps but the state has "
                          f"{p.shape[0]}; they must be equal")
        if not _provably_equal(u.shape[0], update[0].shape[0]):
            raise TEError(f"{what}: the update '{u.name}' has {u.shape[0]} time steps but '{update[0].name}' "
                          f"has {update[0].shape[0]}; every state advances along one time axis")
        if not _provably_equal(i.shape[0], init[0].shape[0]):
            raise TEError(f"{what}: init '{i.name}' gives {i.shape[0]} first step(s) but '{init[0].name}' "
                          f"gives {init[0].shape[0]}; every state starts at the same step")
        for d in range(1, u.ndim):
            if not (_provably_equal(i.shape[d], u.shape[d]) and _provably_equal(u.shape[d], p.shape[d])):
                raise TEError(f"{what}: dimension {d} is {i.shape[d]} in init '{i.name}', {u.shape[d]} in "
                              f"update '{u.name}' and {p.shape[d]} in the state; they must be equal")
    t0, t_end = init[0].shape[0], update[0].shape[0]
    if isinstance(simplify(t_end - t0), Const) and simplify(t_end - t0).value < 0:
        raise TEError(f"{where}: init gives {t0} steps but there are only {t_end}")
    scan_axis = IterVar(Range(t0, simplify(t_end - t0)), Var(f"{name}.idx", t_end.dtype), IterKind.ORDERED)
    op = ScanOp(name, tag, attrs, scan_axis, init, update, state, inputs)
    init_ops = {t.op for t in init}
    for u in update:
        if u.op in init_ops:
            raise TEError(f"{where}: '{u.name}' is both an init and an update")
    for o in op.body_ops:
        if len(getattr(o, "axis", ())) == 0:
            raise TEError(f"{where}: the body stage '{o.name}' has no axes; every stage that runs per step "
                          f"needs time as its first axis")
    return op.output(0) if single else list(op.outputs)
