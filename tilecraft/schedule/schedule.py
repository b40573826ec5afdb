"""Schedules: how each stage of a tensor expression is computed.

``s = te.create_schedule(C.op)`` makes one *stage* per operation; ``s[C]`` is C's stage. Each
primitive changes the stage's loop structure and is recorded as one frozen step (``record.py``)
that names stages and axes by name, so a schedule prints as JSON (``s.to_json()``, read back by
``from_json``) and as Python that runs (``s.to_python()``), and ``replay`` rebuilds the same loop
nest. ``tilecraft.lower`` interprets the final state; nothing downstream reads the steps.
Each primitive's docstring shows a loop nest before and after it.
"""
from __future__ import annotations

import json
import numbers
from operator import attrgetter
from dataclasses import dataclass, field

from ..ir.expr import (Const, Expr, IterKind, IterVar, Range, TensorLoad, Var, convert,
                       const)
from ..ir.functor import IRMutator
from ..ir.stmt import ForKind
from ..te.tensor import ComputeOp, Operation, Tensor, post_dfs_order
from .record import (BindStep, CacheReadStep, CacheWriteStep, ComputeAtStep, ComputeInlineStep,
                     ComputeRootStep, DoubleBufferStep, FuseStep, ParallelStep, PipelineStep, PragmaStep,
                     ReorderStep, RFactorStep, SetScopeStep, SetStorePredicateStep, SplitStep, Step,
                     StorageAlignStep, TensorizeStep, TileStep, TransformLayoutStep,
                     UnrollStep, VectorizeStep, name_ref, python_form, resolve_ref, step_from_json,
                     steps_to_json, with_intrins)
from ..te.tensor_intrin import TensorIntrin
from .group import check_compute_at as check_group_attach, root_of as group_root_of
from .scan import attach_scan_bodies, check_attach as check_scan_attach, check_ordered
from ..error import TVMError
from ..transform import PassContext


class ScheduleError(ValueError, TVMError):
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


@dataclass(frozen=True, eq=False)
class Singleton:
    """An axis of extent 1 that maps to no axis of the operation: ``fuse()`` of no axes."""
    iv: IterVar


@dataclass
class IterAttr:
    kind: ForKind = ForKind.SERIAL
    bind: IterVar | None = None
    pragmas: list = field(default_factory=list)
    tensor_intrin: TensorIntrin | None = None     # s[C].tensorize(this axis, intrin)


def _extent_of(iv: IterVar):
    return iv.dom.extent if iv.dom is not None else None


def _number(e):
    """A split amount as the record holds it: an int where it is a constant."""
    return e.value if isinstance(e, Const) else e


class Stage:
    """The schedule of one operation. Obtain with ``s[T]`` (T a tensor or an operation)."""

    def __init__(self, op: Operation, schedule: "Schedule"):
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self.all_iter_vars: list[IterVar] = (list(op.axis) + list(op.reduce_axis) +
                                             list(getattr(op, "root_iter_vars", ())))   # te.scan's loop
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
        self.pipeline_stages = 0         # pipeline(stages): a cp.async ring of that many copies
        self.store_predicate = None      # set_store_predicate (store_predicate.py)
        self.group, self.group_rooted = None, True       # create_group (group.py)

    @property
    def name(self) -> str:
        return self.op.name

    def __repr__(self) -> str:
        return f"stage({self.name}, {type(self.op).__name__})"

    # helpers -----------------------------------------------------------------------------------
    def _record(self, step: Step) -> None:
        self.schedule.steps.append(step)

    def _ref(self) -> str:
        """This stage's name in the record (``name#k`` if another stage has its name)."""
        return self.schedule._stage_ref(self)

    def _leaf(self, iv, what: str) -> IterVar:
        return self.leaf_iter_vars[self._leaf_index(iv, what)]

    def _axis_ref(self, iv: IterVar) -> str:
        """A current axis's name in the record (``name#k`` if another current axis has its name)."""
        return name_ref(iv, iv.var.name, self.leaf_iter_vars, _iv_name)

    def _axis_by_ref(self, ref: str) -> IterVar:
        return resolve_ref(ref, self.leaf_iter_vars, _iv_name, ("axis", "axes"), f"stage '{self.name}'")

    def _root_axis_ref(self, iv: IterVar) -> str:
        return name_ref(iv, iv.var.name, self.op.axis, _iv_name)

    def _root_axis_by_ref(self, ref: str) -> IterVar:
        return resolve_ref(ref, self.op.axis, _iv_name, ("axis", "axes"), f"stage '{self.name}' (op.axis)")

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

    def _move_attached(self, old: IterVar, new: IterVar) -> None:
        """Stages computed at loop ``old`` of this stage follow it when it is split (to the inner
        loop) or fused as the inner loop (to the fused one): TVM's legalization of compute_at
        targets, so that they keep running once per iteration of the loops they were inside."""
        for st in self.schedule.stages:
            if st.attach_stage is self and st.attach_ivar is old:
                st.attach_ivar = new

    def _attr(self, iv: IterVar) -> IterAttr:
        a = self.iter_var_attrs.get(iv)
        if a is None:
            a = self.iter_var_attrs[iv] = IterAttr()
        return a

    # primitives --------------------------------------------------------------------------------
    # Each one checks its arguments, changes the stage, and records one step (record.py) that
    # names the stage and the axes as they were before the change.
    def split(self, parent: IterVar, factor=None, nparts=None):
        """Split an axis into an outer and an inner axis; returns ``(outer, inner)``.

        Before::                               After ``s[C].split(i, factor=64)``::

            for i in range(1000):                  for i.outer in range(16):
                C[i] = A[i] * 2                        for i.inner in range(64):
                                                           if i.outer * 64 + i.inner < 1000:
                                                               C[i.outer * 64 + i.inner] = ...

        A factor that does not divide the extent is correct: the tail is guarded (and loop
        partitioning later peels it). ``nparts=4`` fixes the outer extent instead
        (``i.outer`` in range(4), ``i.inner`` in range(250)).
        """
        k = self._leaf_index(parent, "split")
        ref = self._axis_ref(self.leaf_iter_vars[k])
        outer, inner, amount = self._split(k, factor, nparts)
        amount = _number(amount)
        self._record(SplitStep(self._ref(), ref, *((amount, None) if factor is not None else (None, amount))))
        return outer, inner

    def _split(self, k: int, factor, nparts):
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
        self._move_attached(parent, inner)
        return outer, inner, amount_e

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """Split two axes and order them ``(x.outer, y.outer, x.inner, y.inner)``; returns those four.

        Before::                               After ``s[C].tile(i, j, 8, 16)``::

            for i in range(64):                    for i.outer in range(8):
                for j in range(64):                    for j.outer in range(4):
                    C[i, j] = ...                          for i.inner in range(8):
                                                               for j.inner in range(16):
                                                                   C[i.outer * 8 + i.inner,
                                                                     j.outer * 16 + j.inner] = ...
        """
        refs = self._axis_ref(self._leaf(x_parent, "tile")), self._axis_ref(self._leaf(y_parent, "tile"))
        xo, xi, xa = self._split(self._leaf_index(x_parent, "tile"), x_factor, None)
        yo, yi, ya = self._split(self._leaf_index(y_parent, "tile"), y_factor, None)
        self._reorder([xo, yo, xi, yi])
        self._record(TileStep(self._ref(), refs[0], refs[1], _number(xa), _number(ya)))
        return xo, yo, xi, yi

    def fuse(self, *args):
        """Fuse adjacent axes (outer first) into one; returns it.

        Before::                               After ``s[C].fuse(i, j)``::

            for i in range(4):                     for i.j.fused in range(32):
                for j in range(8):                     C[i.j.fused // 8, i.j.fused % 8] = ...
                    C[i, j] = ...
        """
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        if len(args) == 0:
            return self._fuse_none()
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
        self._record(FuseStep(self._ref(), tuple(self._axis_ref(v) for v in ivs)))
        cur = ivs[0]
        for nxt in ivs[1:]:
            e1, e2 = _extent_of(cur), _extent_of(nxt)
            ext = (e1.value * e2.value) if isinstance(e1, Const) and isinstance(e2, Const) else None
            fused = self._new_iv(f"{cur.var.name}.{nxt.var.name}.fused", cur.kind, ext)
            self.relations.append(Fuse(cur, nxt, fused))
            self._move_attached(nxt, fused)
            cur = fused
        self.leaf_iter_vars[idx[0]:idx[-1] + 1] = [cur]
        return cur

    def _fuse_none(self) -> IterVar:
        """``fuse()`` of no axes (TVM): a new outermost loop of extent 1, e.g. a place to
        ``compute_at`` a producer of a 0-dimensional stage, which has no loop of its own.

        Before (``S`` of shape ())::             After ``s[S].fuse()``::

            S[()] = A[()] + 1.0                    for singleton in range(1):
                                                       S[()] = A[()] + 1.0
        """
        iv = self._new_iv("singleton", IterKind.DATA_PAR, 1)
        self.relations.append(Singleton(iv))
        self.leaf_iter_vars.insert(0, iv)
        self._record(FuseStep(self._ref(), ()))
        return iv

    def reorder(self, *args):
        """Put the given axes, in this order, in the positions they occupy now.

        Before::                               After ``s[C].reorder(j, i)``::

            for i in range(4):                     for j in range(8):
                for j in range(8):                     for i in range(4):
                    C[i, j] = ...                          C[i, j] = ...
        """
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        refs = tuple(self._axis_ref(self._leaf(a, "reorder")) for a in args)
        self._reorder(args)
        self._record(ReorderStep(self._ref(), refs))

    def _reorder(self, args):
        idx = [self._leaf_index(a, "reorder") for a in args]
        if len(set(idx)) != len(idx):
            raise ScheduleError(f"reorder on stage '{self.name}': an axis appears twice")
        ivs = [self.leaf_iter_vars[k] for k in idx]
        for pos, iv in zip(sorted(idx), ivs):
            self.leaf_iter_vars[pos] = iv

    def _annotate(self, iv, kind: ForKind, what: str, step):
        k = self._leaf_index(iv, what)
        iv = self.leaf_iter_vars[k]
        if kind in (ForKind.PARALLEL, ForKind.VECTORIZED):
            check_ordered(self, iv, what)
        if kind is ForKind.PARALLEL and iv.kind is IterKind.REDUCE:
            raise ScheduleError(f"{what} on stage '{self.name}': axis '{iv.var.name}' is a reduction axis; "
                                f"only data-parallel axes can run in parallel (use rfactor to make the "
                                f"partial results of a reduction axis data-parallel)")
        self._attr(iv).kind = kind
        self._record(step(self._ref(), self._axis_ref(iv)))

    def vectorize(self, iv):
        """Run an axis (constant extent, usually innermost) as one vector operation (SIMD).

        Before::                               After ``s[C].vectorize(i.inner)``::

            for i.outer in range(128):             for i.outer in range(128):
                for i.inner in range(8):               C[ramp(i.outer * 8, 1, 8)] =
                    C[i.outer * 8 + i.inner] =             A[ramp(i.outer * 8, 1, 8)] * broadcast(2.0, 8)
                        A[i.outer * 8 + i.inner] * 2.0

        On a reduction axis each lane gets its own accumulator, combined once at the end
        (``schedule/vector_reduce.py``; unrolled reduction axes add more accumulators)::

            C[i] = 0.0                             C.vacc[ramp(0, 1, 8)] = broadcast(0.0, 8)
            for k.outer in range(128):             for k.outer in range(128):
                for k.inner in range(8):               C.vacc[ramp(0, 1, 8)] = C.vacc[ramp(0, 1, 8)] +
                    C[i] = C[i] +                          A[i, ramp(k.outer * 8, 1, 8)]
                        A[i, k.outer * 8 + k.inner]    C[i] = vector_reduce_add(C.vacc[ramp(0, 1, 8)])
        """
        self._annotate(iv, ForKind.VECTORIZED, "vectorize", VectorizeStep)

    def unroll(self, iv):
        """Unroll an axis (constant extent).

        Before::                               After ``s[C].unroll(i.inner)``::

            for i.outer in range(256):             for i.outer in range(256):
                for i.inner in range(4):               C[i.outer * 4] = A[i.outer * 4] * 2.0
                    C[i.outer * 4 + i.inner] =         C[i.outer * 4 + 1] = A[i.outer * 4 + 1] * 2.0
                        A[i.outer * 4 + i.inner] * 2.0 C[i.outer * 4 + 2] = ...
                                                       C[i.outer * 4 + 3] = ...
        """
        self._annotate(iv, ForKind.UNROLLED, "unroll", UnrollStep)

    def parallel(self, iv):
        """Run the iterations of an axis on the CPU thread pool.

        Before::                               After ``s[C].parallel(i.outer)``::

            for i.outer in range(4):               for i.outer in parallel(4):
                for i.inner in range(256):             for i.inner in range(256):
                    C[i.outer * 256 + i.inner] = ...       C[i.outer * 256 + i.inner] = ...
        """
        self._annotate(iv, ForKind.PARALLEL, "parallel", ParallelStep)

    def bind(self, iv, thread_ivar: IterVar):
        """Bind an axis to a GPU index: ``s[C].bind(xo, te.thread_axis("blockIdx.x"))``.

        Before::                               After binding i.outer to blockIdx.x, i.inner to threadIdx.x::

            for i.outer in range(4):               for i.outer in thread_binding(4, thread="blockIdx.x"):
                for i.inner in range(256):             for i.inner in thread_binding(256, thread="threadIdx.x"):
                    C[i.outer * 256 + i.inner] = ...       C[i.outer * 256 + i.inner] = ...

        The loops become the launch grid (4 blocks of 256 threads) when lowered for ``cuda``.
        """
        k = self._leaf_index(iv, "bind")
        iv = self.leaf_iter_vars[k]
        if not isinstance(thread_ivar, IterVar) or thread_ivar.kind is not IterKind.THREAD:
            raise ScheduleError(f"bind on stage '{self.name}': the second argument must be te.thread_axis(...)")
        check_ordered(self, iv, "bind")
        a = self._attr(iv)
        a.kind, a.bind = ForKind.THREAD_BINDING, thread_ivar
        tag, name, dom = thread_ivar.thread_tag, thread_ivar.var.name, thread_ivar.dom
        if dom is not None:
            lo, ext = dom.min, dom.extent
            dom = (lo.value, lo.value + ext.value) if isinstance(lo, Const) and isinstance(ext, Const) else None
        self._record(BindStep(self._ref(), self._axis_ref(iv), tag, None if name == tag else name, dom))

    def pragma(self, iv, key: str, value=None):
        """Annotate a loop; ``pragma(ax, "auto_unroll_max_step", 16)`` unrolls the loop nests
        inside ``ax`` with at most 16 iterations in all.

        Before::                               After ``s[C].pragma(i.outer, "auto_unroll_max_step", 16)``::

            for i.outer in range(256):             for i.outer in range(256, pragma_auto_unroll_max_step=16):
                for i.inner in range(4):               C[i.outer * 4] = ...
                    C[i.outer * 4 + i.inner] = ...     C[i.outer * 4 + 1] = ...
                                                       C[i.outer * 4 + 2] = ...
                                                       C[i.outer * 4 + 3] = ...
        """
        k = self._leaf_index(iv, "pragma")
        iv = self.leaf_iter_vars[k]
        if not isinstance(key, str) or not (value is None or isinstance(value, (bool, int, float, str))):
            raise ScheduleError(f"pragma on stage '{self.name}', axis '{iv.var.name}': the key must be a string and "
                                f"the value a number, a string or None, got {key!r} = {value!r}")
        self._attr(iv).pragmas.append((key, value))
        self._record(PragmaStep(self._ref(), self._axis_ref(iv), key, value))

    def compute_at(self, parent: "Stage", scope: IterVar):
        """Compute this stage inside ``parent``'s loop ``scope``, only the region that iteration needs.

        Before::                               After ``s[B].compute_at(s[C], i)``::

            for i in range(100):                   for i in range(100):
                B[i] = A[i] * 2.0                      B = allocate(float32[1])
            for i in range(100):                       B[0] = A[i] * 2.0
                C[i] = B[i] + 1.0                      C[i] = B[0] + 1.0
        """
        if not isinstance(parent, Stage):
            raise ScheduleError(f"compute_at of stage '{self.name}': the first argument must be a stage (s[T])")
        if parent is self:
            raise ScheduleError(f"compute_at of stage '{self.name}' into itself")
        k = parent._leaf_index(scope, f"compute_at of stage '{self.name}'")
        if self.is_output:
            raise ScheduleError(f"compute_at of stage '{self.name}': it is an output of the schedule")
        check_scan_attach(self, "compute_at", parent)
        check_group_attach(self, parent)
        self.group_rooted = False
        cur = parent
        while cur.attach_type == "scope" and cur.attach_stage is not None:
            if cur.attach_stage is self:
                raise ScheduleError(f"compute_at of stage '{self.name}' at loop '{parent.leaf_iter_vars[k].var.name}' of "
                                    f"stage '{parent.name}' makes a cycle of attachments ('{parent.name}' is "
                                    f"itself computed inside '{self.name}')")
            cur = cur.attach_stage
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, parent.leaf_iter_vars[k]
        self._record(ComputeAtStep(self._ref(), parent._ref(), parent._axis_ref(parent.leaf_iter_vars[k])))

    def compute_inline(self):
        """Substitute this stage's formula into its consumers; it gets no loops or storage.

        Before::                               After ``s[B].compute_inline()``::

            for i in range(100):                   for i in range(100):
                B[i] = A[i] * 2.0                      C[i] = A[i] * 2.0 + 1.0
            for i in range(100):
                C[i] = B[i] + 1.0
        """
        if not isinstance(self.op, ComputeOp):
            raise ScheduleError(f"compute_inline: stage '{self.name}' is not a compute stage")
        if self.op.reduce_axis:
            raise ScheduleError(f"compute_inline: stage '{self.name}' is a reduction and cannot be inlined")
        if self.is_output:
            raise ScheduleError(f"compute_inline: stage '{self.name}' is an output of the schedule")
        check_scan_attach(self, "compute_inline")
        self.group_rooted = False
        self.attach_type, self.attach_stage, self.attach_ivar = "inline", None, None
        self._record(ComputeInlineStep(self._ref()))

    def compute_root(self):
        """Compute this stage at the top level (undo compute_at / compute_inline).

        Before (``B`` attached at ``i``)::        After ``s[B].compute_root()``::

            for i in range(100):                   for i in range(100):
                B[0] = A[i] * 2.0                      B[i] = A[i] * 2.0
                C[i] = B[0] + 1.0                  for i in range(100):
                                                       C[i] = B[i] + 1.0
        """
        check_scan_attach(self, "compute_root")
        at = group_root_of(self)     # in a group (a scan's body too): where the group is computed
        self.group_rooted = True
        self.attach_type, self.attach_stage, self.attach_ivar = ("root", None, None) if at is None else ("scope", *at)
        self._record(ComputeRootStep(self._ref()))

    def storage_align(self, axis: IterVar, factor: int, offset: int):
        """Pad the stride of ``axis`` (one of ``op.axis``) so that ``stride % factor == offset``
        (avoids shared-memory bank conflicts); the values stay where they were.

        Before (``AA`` 16 × 30)::                After ``s[AA].storage_align(AA.op.axis[0], 32, 1)``::

            AA = allocate(float32[480])            AA = allocate(float32[528])
            AA[ax0 * 30 + ax1] = A[...]            AA[ax0 * 33 + ax1] = A[...]
        """
        for d, iv in enumerate(self.op.axis):
            if iv is axis:
                if factor <= 0:
                    raise ScheduleError(f"storage_align on stage '{self.name}': factor must be positive")
                self.align[d] = (int(factor), int(offset))
                self._record(StorageAlignStep(self._ref(), self._root_axis_ref(iv), int(factor), int(offset)))
                return
        raise ScheduleError(f"storage_align on stage '{self.name}': axis must be one of op.axis "
                            f"({', '.join(iv.var.name for iv in self.op.axis)})")

    def set_scope(self, scope: str):
        """Keep this stage's buffer in memory of ``scope`` (``global``, ``shared``, ``local``).

        Before::                               After ``s[B].set_scope("shared")``::

            B = allocate(float32[100], "global")   B = allocate(float32[100], "shared")
        """
        self.scope = scope
        self._record(SetScopeStep(self._ref(), scope))

    def set_store_predicate(self, predicate):
        """Store the stage's values only where ``predicate`` holds (``tx.var == 0``: one of the
        threads that compute the same value writes it); see ``schedule/store_predicate.py``.

        Before::                               After ``s[B].set_store_predicate(tx.var == 0)``::

            for tx in thread_binding(32):          for tx in thread_binding(32):
                B[0] = A[0] * 2.0                      if tx == 0:
                                                           B[0] = A[0] * 2.0
        """
        from .store_predicate import check_predicate
        if not isinstance(self.op, ComputeOp):
            raise ScheduleError(f"set_store_predicate: stage '{self.name}' is not a compute stage")
        self.store_predicate, tree = check_predicate(self, predicate)
        self._record(SetStorePredicateStep(self._ref(), tree))

    def transform_layout(self, mapping):
        """Store this stage's tensor in the layout ``mapping(*index)`` gives (a permutation or
        split of its axes); a compute stage then iterates the new layout, whose loops are
        returned (``schedule/transform_layout.py``).

        Before::                               After ``s[B].transform_layout(lambda i, j: [j, i])``::

            for i in range(4):                     for ax0 in range(6):
                for j in range(6):                     for ax1 in range(4):
                    B[i, j] = A[i, j] * 2.0                B[ax0, ax1] = A[ax1, ax0] * 2.0
        """
        from .transform_layout import transform_layout
        ref = self._ref()
        loops, names, tree = transform_layout(self, mapping)
        self._record(TransformLayoutStep(ref, names, tree))
        return loops

    def double_buffer(self):
        """Give a shared tile two buffers, so that the next tile's fetch overlaps this tile's
        compute (GPU). The stage must be attached inside a loop of its kernel (the loop of tiles).

        Before (``AS`` attached at ``k.outer``)::  After ``s[AS].double_buffer()`` (lowered for cuda)::

            for k.outer in range(n):               AS[0:size] = A[tile 0]
                AS[i] = A[tile k.outer]            for k.outer in range(n):
                sync()                                 if k.outer + 1 < n: reg = A[tile k.outer + 1]
                ... compute(AS) ...                    ... compute(AS[(k.outer % 2) * size + ...]) ...
                sync()                                 if k.outer + 1 < n: AS[((k.outer + 1) % 2) * size + i] = reg
                                                       sync()

        ``lower`` marks the allocation (``# attr double_buffer_scope(AS) = 1``); the GPU pass
        ``gpu_double_buffer`` does the rest (see its docstring).
        """
        self.double_buffered = True
        self._record(DoubleBufferStep(self._ref()))

    def pipeline(self, stages: int = 3):
        """Fetch a shared tile with asynchronous copies (``cp.async``, 16 bytes per thread) into a
        ring of ``stages`` buffers, ``stages - 1`` tiles ahead of the compute (GPU, sm_80+).
        ``double_buffer`` generalised: the copies go straight to shared memory, with no registers
        and no stores after the compute. The stage must be attached inside a loop of its kernel,
        and its fetch must be copies of 4, 8 or 16 bytes (``vectorize`` the innermost axis); else
        the buffers still alternate along the loop but are filled by ordinary loads and stores.

        Before (``AS`` attached at ``k.outer``)::  After ``s[AS].pipeline(3)`` (lowered for cuda)::

            for k.outer in range(n):               cp.async AS[slot 0] <- A[tile 0]; commit
                AS[i] = A[tile k.outer]            cp.async AS[slot 1] <- A[tile 1]; commit
                sync()                             for k.outer in range(n):
                ... compute(AS) ...                    cp.async.wait_group 1   # tile k.outer landed
                sync()                                 sync()
                                                       if k.outer + 2 < n:
                                                           cp.async AS[slot (k.outer + 2) % 3] <- A[tile k.outer + 2]
                                                       commit
                                                       ... compute(AS[slot k.outer % 3]) ...
                                                   sync()

        (``slot j`` is ``AS[j * size : (j + 1) * size]``.) One barrier per iteration orders both
        the landed copies before the reads and the reads of a slot before it is filled again.
        """
        stages = int(stages)
        if stages < 2:
            raise ValueError(f"pipeline on '{self.name}': stages must be at least 2 (a ring of that many "
                             f"buffers), got {stages}")
        self.double_buffered = True
        self.pipeline_stages = stages
        self._record(PipelineStep(self._ref(), stages))

    def tensorize(self, axis, intrin):
        """Compute the loops from ``axis`` inwards with a tensor intrinsic (``te.decl_tensor_intrin``).

        Before (``j`` split by 16)::            After ``s[C].tensorize(j.inner, gemv)`` (gemv: 16 × 64)::

            for i in range(1024):                  for i in range(1024):
                for j.outer in range(32):              for j.outer in range(32):
                    for j.inner in range(16):              call_extern("gemv_update",
                        C[i, j.outer*16 + j.inner] = 0         C.access_ptr("w", offset=i*512 + j.outer*16),
                        for k in range(64):                    A.access_ptr("r", offset=i*64),
                            C[i, j.outer*16 + j.inner] +=      B.access_ptr("r", offset=j.outer*1024),
                                A[i, k] * B[j.outer*16         16, 64, 64)
                                            + j.inner, k]

        When the stage is lowered, the loops under ``axis`` must compute exactly the intrinsic's
        TE definition on one box of the tensors (its shapes, index pattern, reduction axes and
        dtypes), and each box must fit the intrinsic's declared buffers (strides, offset factor,
        scope); a mismatch is a ``ScheduleError`` saying which part differs. A reduction whose
        reduction loops all lie inside ``axis`` uses the intrinsic's ``body``; with reduction
        loops outside, ``reset`` runs before them and ``update`` inside them (or, without a
        ``reset``, ``body`` on their first iteration and ``update`` after).
        """
        from .tensorize import check_tensorize
        iv = self.leaf_iter_vars[self._leaf_index(axis, "tensorize")]
        check_tensorize(self, iv, intrin)
        self._attr(iv).tensor_intrin = intrin
        self._record(TensorizeStep(self._ref(), self._axis_ref(iv), intrin.name, intrin))


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
        self.groups: list = []         # create_group
        self.stages: list[Stage] = []
        self.stage_map: dict = {}
        for op in post_dfs_order(self.outputs):
            st = Stage(op, self)
            self.stages.append(st)
            self.stage_map[op] = st
        for op in self.outputs:
            self.stage_map[op].is_output = True
        attach_scan_bodies(self)
        # TVM's PassContext(config={"te.keep_schedule_record": True}): te_passes.schedule_record
        self.keep_schedule_record = PassContext.current().get("te.keep_schedule_record")

    @property
    def schedule_record(self) -> list:
        """TVM's snapshots after each primitive (``te_passes.schedule_record``)."""
        from .te_passes import schedule_record
        return schedule_record(self)

    @property
    def primitive_record(self) -> list:
        """TVM's names of the primitives applied (``te_passes.schedule_record``)."""
        return ["vanilla"] + [step.kind for step in self.steps] if self.keep_schedule_record else []

    def normalize(self) -> "Schedule":
        """TVM's ``s.normalize()``: loops here always start at 0, so ``s`` itself."""
        return self

    def __getitem__(self, key) -> Stage:
        """The stage of a tensor, an operation, or a name (``s["C"]``; ``s["compute#1"]`` for the
        second of two stages named ``compute``)."""
        op = key.op if isinstance(key, Tensor) else key
        if isinstance(key, Stage):
            return key
        if isinstance(key, str):
            return resolve_ref(key, self.stages, _stage_name, ("stage", "stages"), "the schedule")
        st = self.stage_map.get(op)
        if st is None:
            raise ScheduleError(f"'{getattr(op, 'name', op)}' is not part of this schedule "
                                f"(stages: {', '.join(st.name for st in self.stages)})")
        return st

    def _stage_ref(self, st: Stage) -> str:
        return name_ref(st, st.name, self.stages, _stage_name)

    def _tensor_ref(self, t: Tensor) -> str:
        """A current tensor's name in the record (``name#k`` if another tensor has its name)."""
        return name_ref(t, t.name, [x for st in self.stages for x in st.op.outputs], _tensor_name)

    def _tensor_by_ref(self, ref: str) -> Tensor:
        return resolve_ref(ref, [x for st in self.stages for x in st.op.outputs], _tensor_name,
                           ("tensor", "tensors"), "the schedule")

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
        ``global``) for the given readers, which then read the copy; returns the copy, a tensor
        named ``A.shared`` (a second cache of A in the same scope has the same name; the record
        tells them apart as ``A.shared#0`` and ``A.shared#1``).

        Before::                               After ``AS = s.cache_read(A, "shared", [C])``::

            for i in range(16):                    AS = allocate(float32[16, 30], "shared")
                for j in range(30):                for ax0 in range(16):
                    C[i, j] = A[i, j] * 2.0            for ax1 in range(30):
                                                           AS[ax0, ax1] = A[ax0, ax1]
                                                   for i in range(16):
                                                       for j in range(30):
                                                           C[i, j] = AS[i, j] * 2.0

        Attach it with ``s[AS].compute_at(s[C], i)`` to fetch one row (a tile) at a time.
        """
        from .cache_read import cache_read as _cache_read
        cache, st, tensor_ref, reader_refs = _cache_read(self, tensor, scope, readers)
        self.steps.append(CacheReadStep(tensor_ref, scope, reader_refs, self._stage_ref(st)))
        return cache

    def cache_write(self, tensor, scope: str):
        """Compute ``tensor`` into a cache of ``scope``, then copy it out. Returns the cache
        tensor (``C.local``); ``s[tensor]`` becomes the copy-out stage, which keeps the original
        axes (``C.op.axis``). A list of a stage's outputs caches them all (a list back).

        Before::                               After ``CL = s.cache_write(C, "local")``::

            for i in range(16):                    CL = allocate(float32[16, 30], "local")
                for j in range(30):                for i.c in range(16):
                    C[i, j] = A[i, j] * 2.0            for j.c in range(30):
                                                           CL[i.c, j.c] = A[i.c, j.c] * 2.0
                                                   for i in range(16):
                                                       for j in range(30):
                                                           C[i, j] = CL[i, j]

        After other primitives on the stage (split, fuse, reorder of data-parallel loops), the
        cache takes the current loops as its axes and the copy-out starts afresh from the
        original axes (TVM's re-layout; ``schedule/cache_write.py``). Attach the cache with
        ``s[CL].compute_at(s[C], ...)`` to keep a register tile.
        """
        from .cache_write import cache_write as _cache_write
        refs, cst, out = _cache_write(self, tensor, scope)
        ref = tuple(refs) if isinstance(tensor, (list, tuple)) else refs[0]
        self.steps.append(CacheWriteStep(ref, scope, self._stage_ref(cst)))
        return out

    def rfactor(self, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> Tensor:
        """Factor a reduction: the partial results over ``axis`` (a leaf reduce axis of
        ``tensor``'s stage) become a new stage (``S.rf``, returned) whose data axis is ``axis``
        (at position ``factor_axis``); the original stage then reduces over those partials. Lets
        a long sum run in parallel.

        Before (``k`` split into 4 × 256)::      After ``SF = s.rfactor(S, k.outer)``::

            S[0] = 0.0                             SF = allocate(float32[4])
            for k.outer in range(4):               for k.outer.v in range(4):
                for k.inner in range(256):             SF[k.outer.v] = 0.0
                    S[0] += A[k.outer * 256            for k.inner in range(256):
                              + k.inner]                   SF[k.outer.v] += A[k.outer.v * 256 + k.inner]
                                                   S[0] = 0.0
                                                   for k.outer.v_1 in range(4):
                                                       S[0] += SF[k.outer.v_1]

        ``s[SF].parallel(SF.op.axis[0])`` then sums the four parts on four threads.
        """
        from .rfactor import rfactor as _rfactor
        st = self[tensor]
        leaves, tref = list(st.leaf_iter_vars), self._tensor_ref(st.op.outputs[getattr(tensor, "value_index", 0)])
        out = _rfactor(self, tensor, axis, factor_axis)       # checks the axis, then replaces the stage's axes
        iv = next(x for x in leaves if x is axis or x.var is axis)
        rf = self[out[0] if isinstance(out, list) else out]
        self.steps.append(RFactorStep(tref, name_ref(iv, iv.var.name, leaves, _iv_name), factor_axis,
                                      self._stage_ref(rf)))
        return out

    def create_group(self, outputs, inputs, include_inputs: bool = False):
        """Group the stages between ``inputs`` and ``outputs`` (TVM): ``g.compute_at(s[X], ax)``
        then computes those at the group's root inside that loop (``schedule/group.py``).

        >>> g = s.create_group(outputs=x1, inputs=x, include_inputs=True)
        >>> g.compute_at(s[x2], x2.op.axis[0])
        """
        from .group import create_group
        return create_group(self, outputs, inputs, include_inputs)

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
        """The recorded steps as JSON text, one step per line; ``from_json(text, outputs)`` rebuilds
        the schedule.

        >>> print(s.to_json())
        [{"step": "split", "stage": "C", "axis": "i", "factor": 64},
         {"step": "parallel", "stage": "C", "axis": "i.outer"}]
        """
        return steps_to_json(self.steps)

    def to_python(self) -> str:
        """The recorded steps as Python code that performs them again, given ``s`` (a fresh
        schedule of the same outputs) and the graph's tensors by name (``python_names``).

        >>> print(s.to_python())
        from tilecraft import te
        # s: te.create_schedule of the same outputs; the tensors by name: C
        C_i = s[C].op.axis[0]
        C_i_outer, C_i_inner = s[C].split(C_i, factor=64)
        s[C].parallel(C_i_outer)
        """
        return python_form(self.steps, create_schedule(self.outputs))


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


def replay(steps, outputs, intrins=()) -> Schedule:
    """A new schedule of ``outputs`` with ``steps`` applied in order: ``Step`` objects, or their
    JSON objects (``json.loads(s.to_json())``). Steps name stages and axes by name, so they apply
    to a separately built graph of the same definition. ``intrins`` (a list of tensor
    intrinsics, or ``{name: intrinsic}``) supplies those that JSON steps name.

    >>> s2 = replay(s.steps, [C.op])          # s2.to_json() == s.to_json()
    """
    s = create_schedule(outputs)
    for k, step in enumerate(steps):
        step = with_intrins(step_from_json(step, f"replay of step {k}"), intrins, f"replay of step {k}")
        try:
            step.apply(s)
        except ScheduleError as e:
            stage = getattr(step, "stage", None) or getattr(step, "tensor", "")
            raise ScheduleError(f"replay of step {k} ({step.kind} of '{stage}'): {e}") from None
    return s


def from_json(text: str, outputs, intrins=()) -> Schedule:
    """The schedule that ``s.to_json()`` describes, rebuilt on ``outputs`` (see ``replay``); the
    tensor intrinsics its steps name come from ``intrins``.

    >>> s2 = from_json(s.to_json(), [C.op], intrins=[gemv])
    """
    try:
        steps = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScheduleError(f"from_json: not JSON ({e})") from None
    if not isinstance(steps, list):
        raise ScheduleError(f"from_json: expected a list of steps, got {type(steps).__name__}")
    return replay(steps, outputs, intrins)


_stage_name = _tensor_name = attrgetter("name")     # how the record names stages, tensors, axes
_iv_name = attrgetter("var.name")
