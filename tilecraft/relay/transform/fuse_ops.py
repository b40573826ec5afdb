"""``FuseOps``: group operators into kernels by TVM's rules; each group becomes a primitive
function (``Primitive=1``) called from ``main``.

The mechanism is TVM's: the dataflow graph's **post-dominator tree** (a node's immediate
post-dominator is the nearest node that every path from it to the function's result passes
through; a node read by the result itself, or by a tuple, has none), and groups that grow by
fusing a group into the group of its output's post-dominator when **every node on every path**
between them obeys the rules; all those nodes join. A value read by one consumer is the
simple case (its post-dominator is that consumer); a value read by several (a residual
connection, GELU's two reads of its input, a softmax written out as max/subtract/exp/sum/divide)
joins the group where its readers meet, or stays its own group's result.

The rules, by the source group's :class:`~tilecraft.relay.op.OpPattern` (after what it already
holds) and the patterns of the groups on the paths:

* an anchor group (conv2d, dense, pooling: out_elemwise_fusable): every group on the paths and
  the post-dominator's are element-wise or broadcast (the epilogue: bias, batch-norm shift,
  ReLU, a residual add);
* an element-wise, broadcast or injective group: the groups on the paths are at most
  injective, the post-dominator's at most a reduction (a reduction takes its injective inputs
  along; anchors are never entered from their inputs); injective sources fuse after the
  others (TVM's phase 1), so element-wise ops first join their producers' anchors;
* a reduction group ends there, an opaque op (softmax, layer_norm) and a tuple are alone, and
  a group has at most one anchor.

Every group has one result (its last member) and is convex. Afterwards ``main`` calls only
primitive functions (plus tuples and projections between them); their parameters are the
group's inputs, non-scalar constants included (weights stay arguments so the executor owns
them). With ``opt_level`` 0 every operator is its own group.

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
    """A union-find set of graph nodes; the root's fields describe the whole group."""
    __slots__ = ("parent", "members", "pattern", "anchors", "root")

    def __init__(self, node, pattern):
        self.parent = None
        self.members = [node]
        self.pattern = pattern
        self.anchors = int(pattern in _ANCHORS)
        self.root = node

    def find(self) -> "_Group":
        g = self
        while g.parent is not None:
            g = g.parent
        if g is not self:                      # path compression
            node = self
            while node.parent is not g and node.parent is not None:
                node.parent, node = g, node.parent
        return g


def _merge(child: _Group, parent: _Group) -> None:
    child, parent = child.find(), parent.find()
    if child is parent:
        return
    child.parent = parent
    parent.members = child.members + parent.members
    parent.pattern = max(parent.pattern, child.pattern)
    parent.anchors += child.anchors


def _fcond(src_pattern):
    """``ok(group_pattern, op_pattern, is_sink)`` for the nodes between a source group and its
    post-dominator (``op_pattern``: the node's operator, which reads the values on the path;
    ``group_pattern``: what its group holds)."""
    if src_pattern == OpPattern.OUT_ELEMWISE_FUSABLE:
        return lambda group, op, sink: group <= OpPattern.BROADCAST and op <= OpPattern.BROADCAST
    if src_pattern <= OpPattern.INJECTIVE:
        # into an anchor's epilogue or a reduction's input at the sink, never an anchor's input
        return lambda group, op, sink: (group <= OpPattern.OUT_ELEMWISE_FUSABLE and op <= OpPattern.COMM_REDUCE
                                        if sink else group <= OpPattern.INJECTIVE)
    return None


class _Graph:
    """The fusible dataflow graph of a function body: its nodes (calls of table operators,
    tuples, projections) in post order, each node's readers, and the post-dominator tree."""

    def __init__(self, body):
        self.body = body
        self.nodes = [n for n in post_order(body) if type(n) is not Var and type(n) is not Constant
                      and type(n) is not Function]
        uses: dict = {}
        for n in self.nodes:
            for c in children(n):
                uses[id(c)] = uses.get(id(c), 0) + 1
        # a tuple read only by one concatenate is inside that concatenate's kernel: its fields'
        # reader is the concatenate
        self.absorbed = {id(n): r for r in self.nodes if type(r) is Call
                         for n in r.args if type(n) is Tuple and uses.get(id(n)) == 1 and id(n) != id(body)}
        self.readers: dict = {id(n): [] for n in self.nodes}
        for r in self.nodes:
            if id(r) in self.absorbed:
                continue
            srcs = [f for a in r.args for f in (a.fields if id(a) in self.absorbed else (a,))] \
                if type(r) is Call else list(children(r))
            for c in srcs:
                if id(c) in self.readers and r not in self.readers[id(c)]:
                    self.readers[id(c)].append(r)
        self.ipdom: dict = {}
        self.depth: dict = {}
        for n in reversed(self.nodes):
            if id(n) in self.absorbed:
                continue
            rs = self.readers[id(n)]
            dom = None
            if n is not body and rs:
                dom = rs[0]
                for r in rs[1:]:
                    dom = self._lca(dom, r)
                    if dom is None:
                        break
            self.ipdom[id(n)] = dom
            self.depth[id(n)] = 0 if dom is None else self.depth[id(dom)] + 1

    def _lca(self, a, b):
        while a is not b:
            if a is None or b is None:
                return None
            da, db = self.depth[id(a)], self.depth[id(b)]
            if da >= db:
                a = self.ipdom[id(a)]
            if db >= da:
                b = self.ipdom[id(b)]
        return a

    def between(self, src, sink) -> list:
        """The nodes on the paths from ``src`` to its post-dominator ``sink`` (both excluded)."""
        out, seen, stack = [], {id(src), id(sink)}, list(self.readers[id(src)])
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            out.append(n)
            stack.extend(self.readers[id(n)])
        return out


def _pattern(n) -> OpPattern:
    if type(n) is Call and not isinstance(n.op, Function):
        return n.op.pattern
    return OpPattern.OPAQUE


def partition(body, opt_level: int) -> dict:
    """``{id(node): group}`` for every operator call of ``body`` (tuples absorbed into the
    concatenate that reads them are members too); each group's ``root`` is its result."""
    graph = _Graph(body)
    groups = {id(n): _Group(n, _pattern(n)) for n in graph.nodes if id(n) not in graph.absorbed}
    for t, reader in graph.absorbed.items():
        g = groups[id(reader)]
        groups[t] = g
        g.members.insert(0, next(a for a in reader.args if id(a) == t))
    if opt_level:
        for phase in (0, 1):
            for n in graph.nodes:
                if id(n) in graph.absorbed:
                    continue
                _try_fuse(graph, groups, n, phase)
    out = {}
    for n in graph.nodes:
        if type(n) is Call and not isinstance(n.op, Function) or id(n) in graph.absorbed:
            out[id(n)] = groups[id(n)].find()
    for g in {id(g): g for g in out.values()}.values():
        members = {id(m) for m in g.members}
        g.members = [m for m in graph.nodes if id(m) in members]       # in post order
        g.root = g.members[-1]
    return out


def _try_fuse(graph: _Graph, groups: dict, n, phase: int) -> None:
    sink = graph.ipdom.get(id(n))
    g = groups[id(n)].find()
    if sink is None or g.pattern == OpPattern.OPAQUE or _pattern(n) == OpPattern.OPAQUE:
        return
    target = groups[id(sink)].find()
    if target is g:
        return                                    # already fused with its post-dominator
    if (g.pattern == OpPattern.INJECTIVE) != (phase == 1):
        return
    ok = _fcond(g.pattern)
    if ok is None:
        return
    path = graph.between(n, sink)
    if not all(ok(groups[id(m)].find().pattern, _pattern(m), False) for m in path) \
            or not ok(target.pattern, _pattern(sink), True):
        return
    path_groups = {id(x): x for x in (groups[id(m)].find() for m in path) if x is not target and x is not g}
    if g.anchors + target.anchors + sum(x.anchors for x in path_groups.values()) > 1:
        return
    for x in path_groups.values():
        _merge(x, target)
    _merge(g, target)


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
