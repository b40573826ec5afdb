"""From a schedule and its inferred bounds to one loop nest over buffers.

Afterwards the statement reads and writes ``Buffer``s with one index per dimension (relative to
the region each buffer holds), every stage's loops appear where it was attached, reductions are
initialised just outside their outermost reduction loop, and intermediate buffers are allocated
around the scope that uses them. A stage that is attached with ``compute_at`` but is also an
argument of the function writes its region into the argument's buffer (the whole tensor, at
absolute indices) and allocates nothing, as TVM does.

A reduction with a reduction loop bound to a GPU launch index (``threadIdx.*``/``blockIdx.*``) is
a *cross-thread reduction*: its initialisation and its reduction loops are wrapped in
``AttrStmt("cross_thread_reduction", stage name, "threadIdx.x", ...)`` (the tags of those loops,
comma-separated). Later passes keep everything that belongs to the reduction inside that scope
(loop partitioning splits loops in place), and ``gpu_thread_reduce`` turns the scope into a
per-thread fold, one all-reduce and one write.

A ``te.extern`` stage is its own statement, inside one ``AttrStmt("buffer_bind_scope", declared
buffer, BufferRegion(whole tensor))`` per input and output, which storage flattening resolves.

The buffer of an attached stage marked with ``double_buffer()`` is allocated inside
``AttrStmt("double_buffer_scope", buffer name, 1, Allocate(...))`` (``pipeline(stages)``: the
value is ``stages``); the GPU passes give it two copies (a ring of ``stages`` filled by
``cp.async``) where it stays inside a loop (``gpu_hoist_shared``, ``gpu_double_buffer``), the CPU
ignores it. The mark is part of the lowered function, so ``build(lower(...))`` keeps it.
"""
from __future__ import annotations

from ..ir import dtype as dt
from ..ir.expr import (BinOp, BufferLoad, Const, IterKind, TensorLoad, Var, binary, convert)
from ..ir.functor import IRMutator, collect_vars, substitute
from ..ir.simplify import simplify
from ..ir.expr import BufferRegion
from ..ir.stmt import (Allocate, AttrStmt, Buffer, BUFFER_BIND_SCOPE, BufferStore, Evaluate, For, ForKind,
                       IfThenElse, LetStmt, seq)
from .schedule import ScheduleError
from ..te.extern import ExternOp
from ..te.scan import ScanOp
from ..te.tensor import ComputeOp, PlaceholderOp
from .ragged import let_positions, wrap_bound_lets
from .tensorize import tensorized_axis, tensorized_nest
from .vector_reduce import (accumulator_index, combine_stores, plan_vector_reduction,
                            vector_reduction_nest)

CROSS_THREAD_REDUCTION = "cross_thread_reduction"
DOUBLE_BUFFER_SCOPE = "double_buffer_scope"
_LAUNCH_PREFIXES = ("threadIdx.", "blockIdx.")


class _ToBufferLoads(IRMutator):
    """``T[i, j]`` → ``T_buf[i - min_i, j - min_j]`` for the region T's buffer holds."""

    def __init__(self, buffers: dict, mins: dict):
        self.buffers, self.mins = buffers, mins

    def visit_TensorLoad(self, e):
        idx = self._exprs(e.indices)
        t = e.tensor
        buf = self.buffers[t]
        m = self.mins.get(t)
        if m is not None:
            idx = tuple(i if _zero(mn) else i - mn for i, mn in zip(idx, m))
        return BufferLoad(buf, tuple(idx), t.dtype)


def _zero(e):
    return isinstance(e, Const) and e.value == 0


def _and_all(conds):
    out = None
    for c in conds:
        out = c if out is None else binary(BinOp.AND, out, c)
    return out


class NestBuilder:
    def __init__(self, sch, infos: dict, buffers: dict, mins: dict, attached: dict, args: set,
                 aligns: dict | None = None):
        self.sch, self.infos, self.buffers, self.mins = sch, infos, buffers, mins
        self.attached = attached          # (stage, IterVar) -> [stages]
        self.args = args                  # tensors whose buffers are function arguments
        self.aligns = aligns or {}        # buffer -> storage_align of its stage (tensorize's strides)
        self.to_loads = _ToBufferLoads(buffers, mins)
        self.vector_plans: dict = {}      # stage -> VectorPlan of a vectorized reduction axis

    def store_index(self, st, info, t) -> tuple:
        """Where the stage's output ``t`` is written: relative to the computed region in a buffer
        that holds only that region, absolute in an argument's buffer (the whole tensor)."""
        if t in self.args:
            return tuple(info.root_value(iv, d) for d, iv in enumerate(st.op.axis))
        return tuple(info.value[iv] for iv in st.op.axis)

    # ------------------------------------------------------------------------------------------
    def stage_nest(self, st):
        if isinstance(st.op, ExternOp):
            return self.extern_stmt(st)
        if isinstance(st.op, ScanOp):
            return self.scan_nest(st)
        tensorized = tensorized_axis(st)
        if tensorized is not None:
            if st.store_predicate is not None:
                raise ScheduleError(f"set_store_predicate on stage '{st.name}': the stage is tensorized, and the "
                                    f"intrinsic's stores cannot be guarded")
            return tensorized_nest(self, st, *tensorized)
        info = self.infos[st]
        leaves = st.leaf_iter_vars
        op = st.op
        is_reduce = bool(op.reduce_axis)
        plan = plan_vector_reduction(st, info, self.buffers) if is_reduce else None
        if plan is not None:
            self.vector_plans[st] = plan
        lets = let_positions(st, info) if info.ragged else {}
        # the guards that the outermost ragged bounds' `if` already checks (below) are not
        # repeated in the body: a row tail's guard there would keep the nonzero loop from vectorizing
        outer = {x.var for x in leaves[min(lets):]} if lets else set()
        hoisted = [c for c in info.conditions if not (collect_vars(c) & outer)] if lets else []
        body = self.compute_stmt(st, info, hoisted)
        # position of the first loop that depends on a reduction axis
        first_reduce = next((k for k, iv in enumerate(leaves) if iv.kind is IterKind.REDUCE), None)
        for k in range(len(leaves) - 1, -1, -1):
            iv = leaves[k]
            if k in lets:   # a ragged axis's bounds, loaded once just outside its outermost loop
                loop = wrap_bound_lets(self.make_for(st, iv, info, body), lets[k], self.to_loads)
                # only for points inside the stage's domain (a split tail's row has no bounds)
                inner_vars = {x.var for x in leaves[k:]}
                guard = _and_all(c for c in info.conditions if not (collect_vars(c) & inner_vars))
                if guard is not None:
                    loop = IfThenElse(guard, loop)
            else:
                loop = None
            if is_reduce and k == first_reduce:
                loops = loop or self.make_for(st, iv, info, body)
                tags = _launch_bound_reduce_tags(st, leaves[k:])
                if plan is not None:
                    if tags:
                        raise ScheduleError(
                            f"vectorize on stage '{st.name}': the reduction axis '{plan.lane.var.name}' is "
                            f"vectorized, but the reduction also runs across GPU threads ({', '.join(tags)}); "
                            f"vectorize a data-parallel axis instead, or leave the reduction axis serial")
                    body = vector_reduction_nest(self, st, info, k, loops)
                    continue
                body = seq(self.init_stmt(st, info, k), loops)
                if tags:
                    body = AttrStmt(CROSS_THREAD_REDUCTION, st.op.name, ",".join(tags), body)
            else:
                body = loop or self.make_for(st, iv, info, body)
        if is_reduce and first_reduce is None:
            body = seq(self.init_stmt(st, info, len(leaves)), body)
        return body

    def extern_stmt(self, st):
        """A ``te.extern`` stage: its statement, each declared buffer bound to its whole tensor."""
        op = st.op
        body = op.body
        if op.axis:                  # a hybrid script's own loops, as scheduled
            from .hybrid_loops import hybrid_loops
            body = hybrid_loops(self, st, self.infos[st])
        for declared, t in reversed(list(zip(op.input_placeholders + op.output_placeholders,
                                             op.inputs + op.outputs))):
            buf = self.buffers[t]
            begin = tuple(convert(0) for _ in buf.shape)
            body = AttrStmt(BUFFER_BIND_SCOPE, declared, BufferRegion(buf, begin, tuple(buf.shape)), body)
        return body

    def scan_nest(self, st):
        """A ``te.scan``: its loop over the steps (``scan.idx``, as split), with the body stages
        attached inside it; a split's tail guards them."""
        info = self.infos[st]
        body = None
        for k in range(len(st.leaf_iter_vars) - 1, -1, -1):
            iv = st.leaf_iter_vars[k]
            body = self.with_attached(st, iv, body)
            if k == len(st.leaf_iter_vars) - 1 and info.conditions and body is not None:
                body = IfThenElse(_and_all(info.conditions), body)
            body = self.loop(st, iv, info, body if body is not None else Evaluate(convert(0)))
        return body

    def make_for(self, st, iv, info, body):
        return self.loop(st, iv, info, self.with_attached(st, iv, body))

    def with_attached(self, st, iv, body):
        """``body`` after the stages attached at loop ``iv`` of ``st``, inside their allocations."""
        inner = self.attached.get((st, iv))
        if inner:
            allocs = []
            parts = []
            for x in inner:
                parts.append(self.stage_nest(x))
                allocs.extend((self.buffers[t], x.double_buffered and (x.pipeline_stages or 1))
                              for t in x.op.outputs if t not in self.args)
            body = seq(*parts, body)
            for b, db in reversed(allocs):
                body = Allocate(b, body)
                if db:
                    body = AttrStmt(DOUBLE_BUFFER_SCOPE, b.name, db, body)
        return body

    def loop(self, st, iv, info, body):
        attr = st.iter_var_attrs.get(iv)
        kind, tag, ann = ForKind.SERIAL, "", ()
        if attr is not None:
            kind = attr.kind
            if attr.bind is not None:
                tag = attr.bind.thread_tag
            if attr.pragmas:       # import_llvm is the function's (lower: llvm_imports)
                ann = tuple(("pragma_" + k, v) for k, v in attr.pragmas if k != "import_llvm")
        return For(iv.var, convert(0), info.extent[iv], kind, body, tag, ann)

    def _root_map(self, st, info):
        vmap = {}
        for d, iv in enumerate(st.op.axis):
            vmap[iv.var] = info.root_value(iv, d)
        for iv in st.op.reduce_axis:
            vmap[iv.var] = info.root_value(iv)
        return vmap

    def compute_stmt(self, st, info, hoisted=()):
        op = st.op
        vmap = self._root_map(st, info)
        idxs = [self.store_index(st, info, t) for t in op.outputs]
        bufs = [self.buffers[t] for t in op.outputs]
        conds = [c for c in info.conditions if not any(c is h for h in hoisted)]
        if st.store_predicate is not None:
            from .bound import enclosing_loops
            from .store_predicate import lowered_predicate
            pred = lowered_predicate(st, info, enclosing_loops(st),
                                     _launch_bound_reduce_tags(st, st.leaf_iter_vars) if op.reduce_axis else [])
            if pred is not None:
                conds = list(conds) + [self.to_loads.visit_expr(pred)]
        if not op.reduce_axis:
            stores = [BufferStore(b, self.to_loads.visit_expr(substitute(e, vmap)), idx)
                      for b, e, idx in zip(bufs, info.body, idxs)]
            body = seq(*stores)
        else:
            red = info.body[0]
            src = [self.to_loads.visit_expr(substitute(s, vmap)) for s in red.source]
            cond = red.condition
            where = None if isinstance(cond, Const) and cond.value is True else \
                self.to_loads.visit_expr(substitute(cond, vmap))
            plan = self.vector_plans.get(st)
            if plan is not None:            # fold into the vector accumulators instead
                bufs, idxs = plan.accs, [accumulator_index(plan)] * len(plan.accs)
                if where is not None and self.safe_everywhere(op, red.source):
                    # a per-lane select, which vectorizes (an `if` that differs between lanes
                    # would not); the source is then read at every point, so only where it
                    # provably may be
                    body = combine_stores(red.combiner, bufs, idxs, src, where)
                    c = _and_all(conds)
                    return body if c is None else IfThenElse(c, body)
            body = combine_stores(red.combiner, bufs, idxs, src)
            if where is not None:
                # inside the guards, not beside them: ``where=`` may read the tensor at the
                # reduction's point, which a split tail's guard keeps in bounds (`and` evaluates
                # both sides)
                body = IfThenElse(where, body)
        c = _and_all(conds)
        return body if c is None else IfThenElse(c, body)

    def safe_everywhere(self, op, exprs) -> bool:
        """Whether ``exprs`` (of ``op``'s axes) may be evaluated at every point of its domain,
        guards ignored: reads provably inside tensors whose buffers hold all of them (inputs, or
        stages computed whole), and no integer division."""
        from ..ir.functor import post_order_visit
        from .check_indices import reads_in_bounds
        tensors = []
        for e in exprs:
            post_order_visit(e, lambda n: tensors.append(n.tensor) if type(n) is TensorLoad else None)
        for t in tensors:
            buf = self.buffers.get(t)
            if buf is None or t in self.mins or not all(
                    isinstance(a, Const) and isinstance(b, Const) and a.value == b.value
                    for a, b in zip(buf.shape, t.shape)):
                return False
        return all(reads_in_bounds(op, e) for e in exprs)

    def init_stmt(self, st, info, pos: int, finish=None):
        """Set the reduction's outputs to their start values (``init=`` or the identity) over the
        data axes below ``pos``. With ``finish(fresh_vars, starts, buffers, indices)`` the stores
        are what it returns instead (a vectorized reduction's horizontal step; ``starts`` is None
        without ``init=``)."""
        op = st.op
        red = info.body[0]
        leaves = st.leaf_iter_vars
        inner = [iv for iv in leaves[pos:] if iv.kind is not IterKind.REDUCE]
        suffix = ".init" if finish is None else ".final"
        fresh = {iv.var: Var(iv.var.name + suffix, iv.var.dtype) for iv in inner}
        starts = red.combiner.identity
        if red.init:
            vmap = self._root_map(st, info)
            starts = [self.to_loads.visit_expr(substitute(substitute(x, vmap), fresh)) for x in red.init]
        bufs = [self.buffers[t] for t in op.outputs]
        idxs = [tuple(substitute(i, fresh) for i in self.store_index(st, info, t)) for t in op.outputs]
        if finish is None:
            body = seq(*[BufferStore(b, v, idx) for b, v, idx in zip(bufs, starts, idxs)])
        else:
            body = finish(fresh, starts if red.init else None, bufs, idxs)
        reduce_vars = {iv.var for iv in leaves if iv.kind is IterKind.REDUCE}
        from ..ir.functor import collect_vars
        conds = [substitute(c, fresh) for c in info.conditions if not (collect_vars(c) & reduce_vars)]
        c = _and_all(conds)
        if c is not None:
            body = IfThenElse(c, body)
        for iv in reversed(inner):
            attr = st.iter_var_attrs.get(iv)
            kind, tag = ForKind.SERIAL, ""
            if attr is not None:
                kind = attr.kind
                if attr.bind is not None:
                    tag = attr.bind.thread_tag
            body = For(fresh[iv.var], convert(0), info.extent[iv], kind, body, tag)
        return body


def _launch_bound_reduce_tags(st, leaves) -> list:
    """The launch tags (threadIdx.x, ...) that the stage's reduction loops among ``leaves`` are
    bound to, in loop order."""
    tags = []
    for iv in leaves:
        attr = st.iter_var_attrs.get(iv)
        if iv.kind is IterKind.REDUCE and attr is not None and attr.bind is not None:
            tag = attr.bind.thread_tag
            if tag.startswith(_LAUNCH_PREFIXES) and tag not in tags:
                tags.append(tag)
    return tags


def schedule_ops(sch, infos: dict, buffers: dict, mins: dict, arg_tensors: set, aligns: dict | None = None):
    """The whole program: every root stage's nest, in dependency order, with allocations; a
    tensorized stage's nest calls its intrinsic (``tensorize.py``)."""
    attached: dict = {}
    for st in sch.stages:
        if st in infos and st.attach_type == "scope" and not st.is_output:
            attached.setdefault((st.attach_stage, st.attach_ivar), []).append(st)
    nb = NestBuilder(sch, infos, buffers, mins, attached, arg_tensors, aligns)
    parts, allocs = [], []
    for st in sch.stages:
        if st not in infos:
            continue
        if st.attach_type == "scope" and not st.is_output:
            continue
        parts.append(nb.stage_nest(st))
        for t in st.op.outputs:
            if t not in arg_tensors:
                allocs.append(buffers[t])
    body = seq(*parts)
    for b in reversed(allocs):
        body = Allocate(b, body)
    return body
