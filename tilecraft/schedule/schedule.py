"""Schedules: how each stage of a tensor expression is computed.

``s = te.create_schedule(C.op)`` makes one *stage* per operation; ``s[C]`` is C's stage. Each
primitive changes the stage's loop structure and is recorded as one frozen step (``record.py``)
that names stages and axes by name, so a schedule prints as JSON (``s.to_json()``, read back by
``from_json``) and as Python that runs (``s.to_python()``), and ``replay`` rebuilds the same loop
nest. ``tilecraft.lower`` interprets the final state; nothing downstream reads the steps.
Each primitive's docstring shows a loop nest before and after it.

This module holds the ``Schedule`` container (stages, cache_read/cache_write/rfactor/create_group,
the record) and ``create_schedule``/``replay``/``from_json``; a stage and its loop primitives are in
``stage.py``, its placement primitives in ``stage_placement.py``, the axis relations and
``ScheduleError`` in ``relations.py`` (all importable from here, as before).
"""
from __future__ import annotations

import json
from operator import attrgetter

from ..ir.expr import IterVar, TensorLoad
from ..ir.functor import IRMutator
from ..te.tensor import ComputeOp, Operation, Tensor, post_dfs_order
from .record import (CacheReadStep, CacheWriteStep, RFactorStep, Step, name_ref, python_form,
                     resolve_ref, step_from_json, steps_to_json, with_intrins)
from .relations import Fuse, IterAttr, ScheduleError, Singleton, Split    # noqa: F401 (re-exported)
from .scan import attach_scan_bodies
from .stage import Stage, _iv_name
from ..transform import PassContext

__all__ = ["Schedule", "ScheduleError", "Stage", "Split", "Fuse", "Singleton", "IterAttr",
           "create_schedule", "replay", "from_json"]


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


_stage_name = _tensor_name = attrgetter("name")     # how the record names stages and tensors
