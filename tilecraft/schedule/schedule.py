"""Schedules: how each stage of a tensor expression is computed.

``s = te.create_schedule(C.op)`` makes one *stage* per operation; ``s[C]`` is C's stage. Each
primitive changes the stage's loop structure and is recorded as a frozen :class:`Step` that names
axes by name, so a schedule prints as JSON or Python and replays to the same loop nest
(:meth:`Schedule.to_json`, :func:`replay`). ``tilecraft.lower`` interprets the final state.
"""
from __future__ import annotations

import json
import numbers
from dataclasses import dataclass, field

from ..ir import dtype as dt
from ..ir.expr import (Const, Expr, IterKind, IterVar, Range, Reduce, TensorLoad, Var, convert,
                       const)
from ..ir.functor import IRMutator, substitute
from ..ir.stmt import ForKind
from ..te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor, post_dfs_order


class ScheduleError(ValueError):
    """An invalid schedule; the message names the stage and the axis."""


# ------------------------------------------------------------------------------------------------
# Relations between iteration variables

@dataclass(frozen=True, eq=False)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: Expr | None
    nparts: Expr | None


@dataclass(frozen=True, eq=False)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(frozen=True)
class Step:
    """One recorded schedule primitive. ``args`` holds names and numbers only."""
    primitive: str
    stage: str
    args: tuple = ()

    def to_json(self) -> list:
        return [self.primitive, self.stage, list(self.args)]

    def to_python(self) -> str:
        a = ", ".join(repr(x) for x in self.args)
        return f"s[{self.stage!r}].{self.primitive}({a})" if self.stage else f"s.{self.primitive}({a})"


@dataclass
class IterAttr:
    kind: ForKind = ForKind.SERIAL
    bind: IterVar | None = None
    pragmas: list = field(default_factory=list)


def _extent_of(iv: IterVar):
    return iv.dom.extent if iv.dom is not None else None


class Stage:
    """The schedule of one operation. Obtain with ``s[T]`` (T a tensor or an operation)."""

    def __init__(self, op: Operation, schedule: "Schedule"):
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self.all_iter_vars: list[IterVar] = list(op.axis) + list(op.reduce_axis)
        self.leaf_iter_vars: list[IterVar] = list(self.all_iter_vars)
        self.relations: list = []
        self.iter_var_attrs: dict[IterVar, IterAttr] = {}
        self.attach_type = "root"        # "root", "inline", "scope"
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        self.scope = "global"
        self.is_output = False
        self.align: dict[int, tuple[int, int]] = {}
        self.double_buffered = False

    @property
    def name(self) -> str:
        return self.op.name

    def __repr__(self) -> str:
        return f"stage({self.name}, {type(self.op).__name__})"

    # helpers -----------------------------------------------------------------------------------
    def _record(self, primitive: str, *args) -> None:
        self.schedule.steps.append(Step(primitive, self.name, tuple(args)))

    def _leaf_index(self, iv, what: str) -> int:
        if isinstance(iv, Var):
            for k, x in enumerate(self.leaf_iter_vars):
                if x.var is iv:
                    return k
        if not isinstance(iv, IterVar):
            raise ScheduleError(f"{what} on stage '{self.name}': expected an axis (IterVar), got {iv!r}")
        for k, x in enumerate(self.leaf_iter_vars):
            if x is iv:
                return k
        owner = self.schedule._owner_of(iv)
        if owner is not None and owner is not self:
            raise ScheduleError(f"{what} on stage '{self.name}': axis '{iv.var.name}' belongs to stage "
                                f"'{owner.name}', not '{self.name}'")
        if iv in self.all_iter_vars:
            raise ScheduleError(f"{what} on stage '{self.name}': axis '{iv.var.name}' was already split or "
                                f"fused; use the axes that replaced it ({self._leaf_names()})")
        raise ScheduleError(f"{what} on stage '{self.name}': '{iv.var.name}' is not an axis of this stage "
                            f"(its axes are {self._leaf_names()})")

    def _leaf_names(self) -> str:
        return ", ".join(x.var.name for x in self.leaf_iter_vars)

    def _new_iv(self, name: str, kind: IterKind, extent) -> IterVar:
        taken = {x.var.name for x in self.all_iter_vars}
        base, k = name, 1
        while name in taken:
            name = f"{base}_{k}"
            k += 1
        dom = Range(const(0), convert(extent)) if extent is not None else None
        iv = IterVar(dom, Var(name, "int32"), kind)
        self.all_iter_vars.append(iv)
        return iv

    def _attr(self, iv: IterVar) -> IterAttr:
        a = self.iter_var_attrs.get(iv)
        if a is None:
            a = self.iter_var_attrs[iv] = IterAttr()
        return a

    # primitives --------------------------------------------------------------------------------
    def split(self, parent: IterVar, factor=None, nparts=None):
        """Split an axis into an outer and an inner axis.

        Before (``extent 1000``)::            After ``split(i, factor=64)``::

            for i in range(1000):                 for i.outer in range(16):
                C[i] = ...                            for i.inner in range(64):
                                                          if i.outer * 64 + i.inner < 1000:
                                                              C[i.outer * 64 + i.inner] = ...

        A factor that does not divide the extent is correct: the tail is guarded.
        ``nparts=`` fixes the outer extent instead. Returns ``(outer, inner)``.
        """
        what = "split"
        k = self._leaf_index(parent, what)
        parent = self.leaf_iter_vars[k]
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"split of axis '{parent.var.name}' in stage '{self.name}': give exactly one "
                                f"of factor= or nparts=")
        amount = factor if factor is not None else nparts
        if isinstance(amount, bool) or not isinstance(amount, (numbers.Integral, Expr)):
            raise ScheduleError(f"split of axis '{parent.var.name}' in stage '{self.name}': the factor must "
                                f"be a positive integer, got {amount!r}")
        amount_e = convert(amount)
        if isinstance(amount_e, Const) and amount_e.value <= 0:
            raise ScheduleError(f"split of axis '{parent.var.name}' in stage '{self.name}': the "
                                f"{'factor' if factor is not None else 'nparts'} must be positive, got {amount_e.value}")
        ext = _extent_of(parent)
        ext_v = ext.value if isinstance(ext, Const) else None
        a = amount_e.value if isinstance(amount_e, Const) else None
        if factor is not None:
            outer_ext = -(-ext_v // a) if (ext_v is not None and a) else None
            inner_ext = amount_e
        else:
            outer_ext = amount_e
            inner_ext = -(-ext_v // a) if (ext_v is not None and a) else None
        outer = self._new_iv(parent.var.name + ".outer", parent.kind, outer_ext)
        inner = self._new_iv(parent.var.name + ".inner", parent.kind, inner_ext)
        self.relations.append(Split(parent, outer, inner, amount_e if factor is not None else None,
                                    amount_e if nparts is not None else None))
        self.leaf_iter_vars[k:k + 1] = [outer, inner]
        self._record("split", parent.var.name, "factor" if factor is not None else "nparts",
                     amount_e.value if isinstance(amount_e, Const) else str(amount_e))
        return outer, inner

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """Split two axes and order them ``(x.outer, y.outer, x.inner, y.inner)``; returns those four."""
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *args):
        """Fuse adjacent axes (outer first) into one.

        Before::                               After ``fuse(i, j)``::

            for i in range(4):                     for i.j.fused in range(32):
                for j in range(8):                     C[i.j.fused // 8, i.j.fused % 8] = ...
                    C[i, j] = ...
        """
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        if len(args) == 0:
            raise ScheduleError(f"fuse on stage '{self.name}': give at least one axis")
        idx = [self._leaf_index(a, "fuse") for a in args]
        ivs = [self.leaf_iter_vars[k] for k in idx]
        if len(args) == 1:
            return ivs[0]
        for a, b in zip(idx, idx[1:]):
            if b != a + 1:
                raise ScheduleError(f"fuse on stage '{self.name}': axes {', '.join(v.var.name for v in ivs)} must "
                                    f"be adjacent and in order, outer first (current order: {self._leaf_names()})")
        kinds = {v.kind for v in ivs}
        if len(kinds) > 1:
            raise ScheduleError(f"fuse on stage '{self.name}': cannot fuse reduction and data-parallel axes "
                                f"({', '.join(v.var.name for v in ivs)})")
        self._record("fuse", *[v.var.name for v in ivs])
        cur = ivs[0]
        for nxt in ivs[1:]:
            e1, e2 = _extent_of(cur), _extent_of(nxt)
            ext = (e1.value * e2.value) if isinstance(e1, Const) and isinstance(e2, Const) else None
            fused = self._new_iv(f"{cur.var.name}.{nxt.var.name}.fused", cur.kind, ext)
            self.relations.append(Fuse(cur, nxt, fused))
            cur = fused
        self.leaf_iter_vars[idx[0]:idx[-1] + 1] = [cur]
        return cur

    def reorder(self, *args):
        """Put the given axes, in this order, in the positions they occupy now.

        Before::                               After ``reorder(j, i)``::

            for i in range(4):                     for j in range(8):
                for j in range(8): ...                 for i in range(4): ...
        """
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        idx = [self._leaf_index(a, "reorder") for a in args]
        if len(set(idx)) != len(idx):
            raise ScheduleError(f"reorder on stage '{self.name}': an axis appears twice")
        ivs = [self.leaf_iter_vars[k] for k in idx]
        for pos, iv in zip(sorted(idx), ivs):
            self.leaf_iter_vars[pos] = iv
        self._record("reorder", *[v.var.name for v in ivs])

    def _annotate(self, iv, kind: ForKind, what: str):
        k = self._leaf_index(iv, what)
        iv = self.leaf_iter_vars[k]
        if kind in (ForKind.VECTORIZED, ForKind.PARALLEL) and iv.kind is IterKind.REDUCE:
            raise ScheduleError(f"{what} on stage '{self.name}': axis '{iv.var.name}' is a reduction axis; "
                                f"only data-parallel axes can be {what}d (reorder it inside, or use rfactor)")
        self._attr(iv).kind = kind
        self._record(what, iv.var.name)

    def vectorize(self, iv):
        """Run an axis (constant extent, usually innermost) as one vector operation (SIMD)."""
        self._annotate(iv, ForKind.VECTORIZED, "vectorize")

    def unroll(self, iv):
        """Unroll an axis (constant extent)."""
        self._annotate(iv, ForKind.UNROLLED, "unroll")

    def parallel(self, iv):
        """Run the iterations of an axis on the CPU thread pool."""
        self._annotate(iv, ForKind.PARALLEL, "parallel")

    def bind(self, iv, thread_ivar: IterVar):
        """Bind an axis to a GPU index: ``s[C].bind(xo, te.thread_axis("blockIdx.x"))``."""
        k = self._leaf_index(iv, "bind")
        iv = self.leaf_iter_vars[k]
        if not isinstance(thread_ivar, IterVar) or thread_ivar.kind is not IterKind.THREAD:
            raise ScheduleError(f"bind on stage '{self.name}': the second argument must be te.thread_axis(...)")
        a = self._attr(iv)
        a.kind, a.bind = ForKind.THREAD_BINDING, thread_ivar
        self._record("bind", iv.var.name, thread_ivar.thread_tag, thread_ivar.var.name)

    def pragma(self, iv, key: str, value=None):
        """Annotate a loop: ``pragma(ax, "auto_unroll_max_step", 16)`` unrolls small inner loops."""
        k = self._leaf_index(iv, "pragma")
        iv = self.leaf_iter_vars[k]
        self._attr(iv).pragmas.append((key, value))
        self._record("pragma", iv.var.name, key, value)

    def compute_at(self, parent: "Stage", scope: IterVar):
        """Compute this stage inside ``parent``'s loop ``scope``, only the region that iteration needs.

        Before::                               After ``s[B].compute_at(s[C], i)``::

            for i in range(n): B[i] = A[i]*2       for i in range(n):
            for i in range(n): C[i] = B[i]+1           B_local[0] = A[i]*2
                                                       C[i] = B_local[0]+1
        """
        if not isinstance(parent, Stage):
            raise ScheduleError(f"compute_at of stage '{self.name}': the first argument must be a stage (s[T])")
        if parent is self:
            raise ScheduleError(f"compute_at of stage '{self.name}' into itself")
        k = parent._leaf_index(scope, f"compute_at of stage '{self.name}'")
        if self.is_output:
            raise ScheduleError(f"compute_at of stage '{self.name}': it is an output of the schedule")
        cur = parent
        while cur.attach_type == "scope" and cur.attach_stage is not None:
            if cur.attach_stage is self:
                raise ScheduleError(f"compute_at of stage '{self.name}' at loop '{parent.leaf_iter_vars[k].var.name}' of "
                                    f"stage '{parent.name}' makes a cycle of attachments ('{parent.name}' is "
                                    f"itself computed inside '{self.name}')")
            cur = cur.attach_stage
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, parent.leaf_iter_vars[k]
        self._record("compute_at", parent.name, parent.leaf_iter_vars[k].var.name)

    def compute_inline(self):
        """Substitute this stage's formula into its consumers; it gets no loops or storage."""
        if not isinstance(self.op, ComputeOp):
            raise ScheduleError(f"compute_inline: stage '{self.name}' is not a compute stage")
        if self.op.reduce_axis:
            raise ScheduleError(f"compute_inline: stage '{self.name}' is a reduction and cannot be inlined")
        if self.is_output:
            raise ScheduleError(f"compute_inline: stage '{self.name}' is an output of the schedule")
        self.attach_type, self.attach_stage, self.attach_ivar = "inline", None, None
        self._record("compute_inline")

    def compute_root(self):
        """Compute this stage at the top level (undo compute_at / compute_inline)."""
        self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None
        self._record("compute_root")

    def storage_align(self, axis: IterVar, factor: int, offset: int):
        """Pad the stride of ``axis`` so that ``stride % factor == offset`` (avoids bank conflicts)."""
        for d, iv in enumerate(self.op.axis):
            if iv is axis:
                if factor <= 0:
                    raise ScheduleError(f"storage_align on stage '{self.name}': factor must be positive")
                self.align[d] = (int(factor), int(offset))
                self._record("storage_align", iv.var.name, int(factor), int(offset))
                return
        raise ScheduleError(f"storage_align on stage '{self.name}': axis must be one of op.axis "
                            f"({', '.join(iv.var.name for iv in self.op.axis)})")

    def set_scope(self, scope: str):
        self.scope = scope
        self._record("set_scope", scope)

    def double_buffer(self):
        """Use two buffers alternately so the next tile's fetch overlaps this tile's use (GPU)."""
        self.double_buffered = True
        self._record("double_buffer")

    def tensorize(self, axis, intrin):
        raise ScheduleError(f"tensorize on stage '{self.name}': not supported yet")


class _ReplaceLoads(IRMutator):
    def __init__(self, vmap: dict):
        self.vmap = vmap

    def visit_TensorLoad(self, e):
        e2 = super().visit_TensorLoad(e)
        t = self.vmap.get(e2.tensor)
        return TensorLoad(t, e2.indices) if t is not None else e2


def _replace_op_inputs(op: ComputeOp, vmap: dict) -> ComputeOp:
    m = _ReplaceLoads(vmap)
    body = tuple(m.visit_expr(b) for b in op.body)
    if all(a is b for a, b in zip(body, op.body)):
        return op
    return ComputeOp(op.name, op.tag, op.attrs, op.axis, op.reduce_axis, body,
                     tuple(t.name for t in op.outputs))


class Schedule:
    """All the stages of a computation. ``s[T]`` returns T's stage."""

    def __init__(self, outputs: list):
        self.outputs = list(outputs)
        self.steps: list[Step] = []
        self.stages: list[Stage] = []
        self.stage_map: dict = {}
        for op in post_dfs_order(self.outputs):
            st = Stage(op, self)
            self.stages.append(st)
            self.stage_map[op] = st
        for op in self.outputs:
            self.stage_map[op].is_output = True

    def __getitem__(self, key) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        if isinstance(key, Stage):
            return key
        if isinstance(key, str):
            for st in self.stages:
                if st.name == key:
                    return st
            raise ScheduleError(f"no stage named {key!r} (stages: {', '.join(st.name for st in self.stages)})")
        st = self.stage_map.get(op)
        if st is None:
            raise ScheduleError(f"'{getattr(op, 'name', op)}' is not part of this schedule "
                                f"(stages: {', '.join(st.name for st in self.stages)})")
        return st

    def _owner_of(self, iv: IterVar):
        for st in self.stages:
            if iv in st.all_iter_vars:
                return st
        return None

    def _readers_of(self, tensor: Tensor) -> list[Stage]:
        return [st for st in self.stages if isinstance(st.op, ComputeOp) and
                any(t is tensor for t in st.op.input_tensors)]

    def _replace_inputs(self, stages, vmap: dict):
        # a replaced op has new output tensors: later stages that read it must follow them
        targets = {id(st) for st in stages}
        renamed: dict = {}
        for st in self.stages:
            if not isinstance(st.op, ComputeOp):
                continue
            m = {**vmap, **renamed} if id(st) in targets else renamed
            new = _replace_op_inputs(st.op, m) if m else st.op
            if new is not st.op:
                renamed.update(zip(st.op.outputs, new.outputs))
                self.stage_map[new] = st
                st.op = new

    def cache_read(self, tensor: Tensor, scope: str, readers) -> Tensor:
        """A stage that copies ``tensor`` into memory of ``scope`` (``shared``, ``local``,
        ``global``) for the given readers, which then read the copy. Attach it with
        ``compute_at`` to fetch a tile at a time."""
        if not isinstance(tensor, Tensor):
            raise ScheduleError(f"cache_read: expected a tensor, got {tensor!r}")
        tensor = self._current(tensor)
        readers = readers if isinstance(readers, (list, tuple)) else [readers]
        reader_stages = [self[r] for r in readers]
        for rs in reader_stages:
            if not any(t is tensor for t in rs.op.input_tensors):
                raise ScheduleError(f"cache_read of '{tensor.name}': stage '{rs.name}' does not read it")
        name = f"{tensor.name}.{scope}"
        cache = _copy_compute(tensor, name)
        st = Stage(cache.op, self)
        st.scope = scope
        self._insert_after(self.stage_map.get(tensor.op), st)
        self.stage_map[cache.op] = st
        self._replace_inputs(reader_stages, {tensor: cache})
        self.steps.append(Step("cache_read", "", (tensor.name, scope, tuple(r.name for r in reader_stages))))
        return cache

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute ``tensor`` into a cache of ``scope``, then copy it out. Returns the cache
        tensor; ``s[tensor]`` becomes the copy-out stage, which keeps the original axes
        (``C.op.axis``). Must come before other primitives on that stage."""
        if isinstance(tensor, (list, tuple)):
            raise ScheduleError("cache_write of several outputs at once is not supported")
        st = self[tensor]
        op = st.op
        if not isinstance(op, ComputeOp):
            raise ScheduleError(f"cache_write: stage '{st.name}' is not a compute stage")
        if len(op.outputs) > 1:
            raise ScheduleError(f"cache_write: stage '{st.name}' has several outputs; not supported")
        if st.relations or st.iter_var_attrs or len(st.leaf_iter_vars) != len(st.all_iter_vars):
            raise ScheduleError(f"cache_write of '{st.name}' must come before other schedule primitives on "
                                f"that stage (it replaces the stage's axes)")
        name = f"{op.name}.{scope}"
        new_axis = tuple(IterVar(iv.dom, Var(iv.var.name + ".c", iv.var.dtype), iv.kind) for iv in op.axis)
        vmap = {old.var: new.var for old, new in zip(op.axis, new_axis)}
        body = tuple(substitute(b, vmap) for b in op.body)
        cache_op = ComputeOp(name, op.tag, op.attrs, new_axis, op.reduce_axis, body)
        cache = cache_op.output(0)
        out_axis = op.axis   # TVM keeps the original axes on the copy-out stage: C.op.axis stays valid
        copy_op = ComputeOp(op.name, op.tag, op.attrs, out_axis, (),
                            (TensorLoad(cache, tuple(iv.var for iv in out_axis)),),
                            tuple(t.name for t in op.outputs))
        cst = Stage(cache_op, self)
        cst.scope = scope
        idx = self.stages.index(st)
        self.stages.insert(idx, cst)
        self.stage_map[cache_op] = cst
        old_out = op.outputs[0]
        st.op = copy_op
        st.all_iter_vars = list(out_axis)
        st.leaf_iter_vars = list(out_axis)
        self.stage_map[copy_op] = st
        self._replace_inputs([x for x in self.stages if x is not st and x is not cst], {old_out: copy_op.output(0)})
        self.steps.append(Step("cache_write", "", (op.name, scope)))
        return cache

    def rfactor(self, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> Tensor:
        """Factor a reduction: the partial results over ``axis`` (a leaf reduce axis of
        ``tensor``'s stage) become a new stage whose data axis is ``axis``; the original stage then
        reduces over those partials. Lets a long sum run in parallel."""
        from .rfactor import rfactor as _rfactor
        out = _rfactor(self, tensor, axis, factor_axis)
        self.steps.append(Step("rfactor", "", (tensor.name, axis.var.name, factor_axis)))
        return out

    def _current(self, tensor: Tensor) -> Tensor:
        st = self.stage_map.get(tensor.op)
        return st.op.outputs[tensor.value_index] if st is not None else tensor

    def _insert_after(self, stage, new: Stage):
        if stage is None:
            self.stages.insert(0, new)
        else:
            self.stages.insert(self.stages.index(stage) + 1, new)

    # records -----------------------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps([s.to_json() for s in self.steps])

    def to_python(self) -> str:
        return "\n".join(s.to_python() for s in self.steps)


def _copy_compute(tensor: Tensor, name: str) -> Tensor:
    axis = tuple(IterVar(Range(const(0, s.dtype), s), Var(f"ax{d}", s.dtype), IterKind.DATA_PAR)
                 for d, s in enumerate(tensor.shape))
    op = ComputeOp(name, "", {}, axis, (), (TensorLoad(tensor, tuple(iv.var for iv in axis)),))
    return op.output(0)


def create_schedule(ops) -> Schedule:
    """A schedule whose stages compute everything at the root in the natural loop order."""
    if isinstance(ops, (Operation, Tensor)):
        ops = [ops]
    out = []
    for o in ops:
        if isinstance(o, Tensor):
            o = o.op
        if not isinstance(o, Operation):
            raise ScheduleError(f"create_schedule expects operations (C.op) or tensors, got {o!r}")
        out.append(o)
    return Schedule(out)


def replay(steps, outputs) -> Schedule:
    """Rebuild a schedule by replaying recorded steps (``json.loads(s.to_json())``) on ``outputs``."""
    s = create_schedule(outputs)
    for prim, stage_name, args in steps:
        if not stage_name:
            if prim == "cache_read":
                tname, scope, readers = args
                s.cache_read(_tensor_named(s, tname), scope, [s[r] .op for r in readers])
            elif prim == "cache_write":
                s.cache_write(_tensor_named(s, args[0]), args[1])
            elif prim == "rfactor":
                tname, axname, fa = args
                t = _tensor_named(s, tname)
                st = s[t]
                s.rfactor(t, _axis_named(st, axname), fa)
            continue
        st = s[stage_name]
        if prim == "split":
            ax, how, amount = args
            amount = amount if isinstance(amount, int) else _expr_named(amount)
            st.split(_axis_named(st, ax), **{how: amount})
        elif prim == "fuse":
            st.fuse(*[_axis_named(st, a) for a in args])
        elif prim == "reorder":
            st.reorder(*[_axis_named(st, a) for a in args])
        elif prim in ("vectorize", "unroll", "parallel"):
            getattr(st, prim)(_axis_named(st, args[0]))
        elif prim == "bind":
            from ..te.operation import thread_axis
            st.bind(_axis_named(st, args[0]), thread_axis(args[1], name=args[2]))
        elif prim == "pragma":
            st.pragma(_axis_named(st, args[0]), args[1], args[2])
        elif prim == "compute_at":
            parent = s[args[0]]
            st.compute_at(parent, _axis_named(parent, args[1]))
        elif prim in ("compute_inline", "compute_root", "double_buffer"):
            getattr(st, prim)()
        elif prim == "storage_align":
            st.storage_align(next(iv for iv in st.op.axis if iv.var.name == args[0]), args[1], args[2])
        elif prim == "set_scope":
            st.set_scope(args[0])
        else:
            raise ScheduleError(f"replay: unknown primitive {prim!r}")
    return s


def _tensor_named(s: Schedule, name: str) -> Tensor:
    for st in s.stages:
        for t in st.op.outputs:
            if t.name == name:
                return t
    raise ScheduleError(f"replay: no tensor named {name!r}")


def _axis_named(st: Stage, name: str) -> IterVar:
    for iv in st.leaf_iter_vars:
        if iv.var.name == name:
            return iv
    raise ScheduleError(f"replay: stage '{st.name}' has no axis named {name!r} (axes: {st._leaf_names()})")


def _expr_named(text: str):
    raise ScheduleError(f"replay: symbolic split factor {text!r} cannot be replayed")
