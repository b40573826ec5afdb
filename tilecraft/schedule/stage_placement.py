"""The primitives that place a stage and its storage: where and whether it is computed
(compute_at, compute_inline, compute_root) and how its buffer is kept (storage_align,
set_scope, set_store_predicate, transform_layout, double_buffer, pipeline).

``StagePlacement`` is a base class of ``Stage`` (``stage.py``); its methods use the stage's
helpers (``_ref``, ``_leaf_index``, ``_axis_ref``, ...) defined there. Each primitive records one
step (``record.py``) and its docstring shows a loop nest before and after it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir.expr import IterVar
from ..te.extern import ExternOp
from ..te.tensor import ComputeOp
from .group import check_compute_at as check_group_attach, root_of as group_root_of
from .record import (ComputeAtStep, ComputeInlineStep, ComputeRootStep, DoubleBufferStep, PipelineStep,
                     SetScopeStep, SetStorePredicateStep, StorageAlignStep, TransformLayoutStep)
from .relations import ScheduleError
from .scan import check_attach as check_scan_attach

if TYPE_CHECKING:
    from .stage import Stage


class StagePlacement:
    """Placement and storage primitives of a ``Stage`` (see the module docstring)."""

    def compute_at(self, parent: "Stage", scope: IterVar):
        """Compute this stage inside ``parent``'s loop ``scope``, only the region that iteration needs.

        Before::                               After ``s[B].compute_at(s[C], i)``::

            for i in range(100):                   for i in range(100):
                B[i] = A[i] * 2.0                      B = allocate(float32[1])
            for i in range(100):                       B[0] = A[i] * 2.0
                C[i] = B[i] + 1.0                      C[i] = B[0] + 1.0
        """
        from .stage import Stage
        if not isinstance(parent, Stage):
            raise ScheduleError(f"compute_at of stage '{self.name}': the first argument must be a stage (s[T])")
        if parent is self:
            raise ScheduleError(f"compute_at of stage '{self.name}' into itself")
        k = parent._leaf_index(scope, f"compute_at of stage '{self.name}'")
        if isinstance(parent.op, ExternOp):      # a hybrid script's loops (HybridOp.axis)
            raise ScheduleError(f"compute_at of stage '{self.name}' at loop '{parent.leaf_iter_vars[k].var.name}' of "
                                f"stage '{parent.name}': a hybrid script reads its inputs as whole buffers, so "
                                f"'{self.name}' must be computed before it (at the root)")
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
