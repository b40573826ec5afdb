"""A stage: the schedule of one operation, and its loop primitives.

``Stage`` holds one operation's axes (``all_iter_vars``), their current loop order
(``leaf_iter_vars``), the relations that derived them (``relations.py``) and per-axis attributes.
This module has the primitives that reshape and annotate the stage's own loops (split, tile,
fuse, reorder, vectorize, unroll, parallel, bind, pragma, tensorize); those that place the stage
or its storage (compute_at/inline/root, storage_align, set_scope, set_store_predicate,
transform_layout, double_buffer, pipeline) come from ``stage_placement.py``. Each primitive
records one step (``record.py``) and its docstring shows a loop nest before and after it.
"""
from __future__ import annotations

import numbers
from operator import attrgetter
from typing import TYPE_CHECKING

from ..ir.expr import Const, Expr, IterKind, IterVar, Range, Var, convert, const
from ..ir.stmt import ForKind
from ..te.tensor import Operation
from .record import (BindStep, FuseStep, ParallelStep, PragmaStep, ReorderStep, SplitStep, Step,
                     TensorizeStep, TileStep, UnrollStep, VectorizeStep, name_ref, resolve_ref)
from .relations import Fuse, IterAttr, ScheduleError, Singleton, Split, _extent_of, _number
from .scan import check_ordered
from .stage_placement import StagePlacement

if TYPE_CHECKING:
    from .schedule import Schedule


class Stage(StagePlacement):
    """The schedule of one operation. Obtain with ``s[T]`` (T a tensor or an operation).

    Placement primitives (compute_at, compute_inline, ...) are inherited from ``StagePlacement``."""

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

        As in TVM, ``pragma(ax, "unroll")`` and ``pragma(ax, "vectorize")`` are ``unroll(ax)`` and
        ``vectorize(ax)``.
        """
        k = self._leaf_index(iv, "pragma")
        iv = self.leaf_iter_vars[k]
        if key in ("unroll", "vectorize") and value is None:     # TVM: these two are the primitives
            return self.unroll(iv) if key == "unroll" else self.vectorize(iv)
        if not isinstance(key, str) or not (value is None or isinstance(value, (bool, int, float, str))):
            raise ScheduleError(f"pragma on stage '{self.name}', axis '{iv.var.name}': the key must be a string and "
                                f"the value a number, a string or None, got {key!r} = {value!r}")
        self._attr(iv).pragmas.append((key, value))
        self._record(PragmaStep(self._ref(), self._axis_ref(iv), key, value))

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


_iv_name = attrgetter("var.name")     # how the record names axes
