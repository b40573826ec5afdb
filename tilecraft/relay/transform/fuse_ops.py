"""``FuseOps``: group operators into kernels by TVM's rules; each group becomes a primitive
function (``Primitive=1``) called from ``main``.

The rules, by :class:`~tilecraft.relay.op.OpPattern`, for a producer group P whose result only
the consumer call N reads:

* P element-wise, broadcast or injective, N element-wise, broadcast, injective or a
  reduction: P fuses into N (injective ops fuse into their producers and consumers; a
  reduction takes its injective inputs along);
* P has a conv2d/dense/pooling anchor (out_elemwise_fusable), N element-wise or broadcast:
  P fuses into N (the epilogue: bias, batch-norm shift, ReLU, residual add);
* nothing else: a reduction or an injective op after an anchor ends the group, an opaque op
  (softmax, layer_norm) is a group of its own, a group has at most one anchor.

A node read by several consumers starts a group of its own, unless all of them end up in one
group and every edge obeys the rules above: then it joins that group (a diamond, such as GELU's
two reads of its input). Every group has one result and is convex. (TVM fuses through diamonds
with a post-dominator tree, which also fuses when the readers are in different groups that the
result post-dominates; that is a later part.)
Afterwards ``main`` calls only primitive functions (plus tuples and projections between
them); their parameters are the group's inputs, non-scalar constants included (weights stay
arguments so the executor owns them). With ``opt_level`` 0 every operator is its own group.

>>> mod = FuseOps()(InferType()(mod))      # doctest: +SKIP
"""
from __future__ import annotations

from tilecraft.transform import PassContext

from ..ir import Attrs, Call, Constant, Function, Tuple, Var, children, post_order, with_children
from ..op import OpPattern
from .infer_type import infer_expr
from .pass_infra import function_pass

_ANCHORS = (OpPattern.COMM_REDUCE, OpPattern.OUT_ELEMWISE_FUSABLE)


class _Group:
    __slots__ = ("members", "pattern", "anchor", "root")

    def __init__(self, node, pattern):
        self.members = [node]
        self.pattern = pattern
        self.anchor = pattern in _ANCHORS
        self.root = node


def _can_fuse(p: _Group, g: _Group, consumer_pattern) -> bool:
    if p.anchor and g.anchor:
        return False
    if p.pattern <= OpPattern.INJECTIVE:
        return consumer_pattern <= OpPattern.COMM_REDUCE
    if p.pattern == OpPattern.OUT_ELEMWISE_FUSABLE:
        return consumer_pattern <= OpPattern.BROADCAST
    return False


def partition(body, opt_level: int) -> dict:
    """``{id(node): group}`` for every operator call of ``body`` (tuples absorbed into the
    concatenate that reads them are members too)."""
    nodes = post_order(body)
    uses: dict = {}
    for n in nodes:
        for c in children(n):
            uses[id(c)] = uses.get(id(c), 0) + 1
    uses[id(body)] = uses.get(id(body), 0) + 1
    group: dict = {}
    for n in nodes:
        if type(n) is not Call or isinstance(n.op, Function):
            continue
        g = group[id(n)] = _Group(n, n.op.pattern)
        producers = []
        for a in n.args:
            if type(a) is Tuple and uses[id(a)] == 1:   # concatenate's input: inside its kernel
                g.members.append(a)
                group[id(a)] = g
                producers.extend(a.fields)
            else:
                producers.append(a)
        if opt_level == 0 or g.pattern == OpPattern.OPAQUE:
            continue
        for p in producers:
            pg = group.get(id(p))
            if pg is None or pg is g or uses[id(p)] != 1 or not _can_fuse(pg, g, n.op.pattern):
                continue
            for m in pg.members:
                group[id(m)] = g
            g.members = pg.members + g.members
            g.pattern = max(g.pattern, pg.pattern)
            g.anchor = g.anchor or pg.anchor
    if opt_level:
        _fuse_diamonds(nodes, group, uses, body)
    return group


def _fuse_diamonds(nodes, group: dict, uses: dict, body) -> None:
    """Merge a group whose result several calls read into their group when they are all in
    one group and every edge obeys the rules. The merged group stays convex with one result:
    a group's members other than its root are read only inside it, so no path from the
    producer leaves the consumers' group and comes back."""
    readers: dict = {}
    for n in nodes:
        for c in children(n):
            readers.setdefault(id(c), []).append(n)
    changed = True
    while changed:
        changed = False
        for n in reversed(nodes):
            pg = group.get(id(n))
            if pg is None or pg.root is not n or n is body or uses[id(n)] < 2:
                continue
            rs = readers.get(id(n), [])
            groups = {id(group.get(id(r))) for r in rs}
            g = group.get(id(rs[0])) if rs else None
            if g is None or g is pg or len(groups) != 1:
                continue
            if not all(type(r) is Call and _can_fuse(pg, g, r.op.pattern) for r in rs):
                continue
            for m in pg.members:
                group[id(m)] = g
            g.members = pg.members + g.members
            g.pattern = max(g.pattern, pg.pattern)
            g.anchor = g.anchor or pg.anchor
            changed = True


def _op_names(members) -> str:
    names = [m.op.name.replace("nn.", "nn_") for m in members if type(m) is Call]
    return "_".join(names)


def fuse_function(f: Function, opt_level: int) -> Function:
    """``f`` with its operators grouped into primitive functions."""
    group = partition(f.body, opt_level)
    memo: dict = {}
    for n in post_order(f.body):
        g = group.get(id(n))
        if g is None:
            memo[id(n)] = with_children(n, tuple(memo[id(c)] for c in children(n)))
        elif g.root is n:
            memo[id(n)] = _make_call(g, memo)
    body = infer_expr(memo[id(f.body)])
    return Function(f.params, body, body.ty, f.attrs)


def _make_call(g: _Group, memo: dict) -> Call:
    members = {id(m) for m in g.members}
    params, args, param_of, local = [], [], {}, {}

    def inside(e):
        if id(e) in local:
            return local[id(e)]
        if id(e) in members:
            new = with_children(e, tuple(inside(c) for c in children(e)))
            new = new.with_type(e.ty) if new.ty is None else new
            local[id(e)] = new
            return new
        if type(e) is Constant and e.data.ndim == 0:
            return e
        if id(e) not in param_of:
            param_of[id(e)] = Var(f"p{len(params)}", e.ty)
            params.append(param_of[id(e)])
            args.append(memo[id(e)])
        return param_of[id(e)]
    body = inside(g.root)
    fn = Function(params, body, body.ty, Attrs({"Primitive": 1, "Name": _op_names(g.members)}))
    return Call(fn, args)


def _run(f: Function, mod) -> Function:
    return fuse_function(f, PassContext.current().opt_level)


def FuseOps():
    """The pass (TVM's ``relay.transform.FuseOps()``); at opt_level 0 each operator is its own
    primitive function."""
    return function_pass(_run, "FuseOps", 0)
