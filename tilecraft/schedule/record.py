"""The schedule record: every primitive, once applied, is one frozen step naming stages and axes by name.

``s[C].split(i, factor=8)`` transforms the stage and appends ``SplitStep(stage="C", axis="i",
factor=8)`` to ``s.steps``. A step holds names and numbers only, so the record

* prints as JSON (``s.to_json()``, one object per step) and back (``tilecraft.schedule.from_json``);
* replays: ``step.apply(s)`` calls the same primitive on a schedule of the same definition (a
  separately built graph works: nothing refers to objects), and ``replay`` folds over ``apply``;
* prints as Python that runs (``s.to_python()``): the TVM-style calls, with the axes a primitive
  returns bound to variables, given ``s`` and the graph's tensors by name (``python_names``).

Names. A stage is named by its operation's name, a tensor by its own name, an axis by its
variable's name among the stage's current axes (``i.outer``, ``i.j.fused``). Stages that a
primitive creates have names made from their origin: ``cache_read(A, "shared", ...)`` makes
``A.shared``, ``cache_write(C, "local")`` makes ``C.local``, ``rfactor(C, ...)`` makes ``C.rf``;
the step records the name it made (``result``) and replay checks it gets the same. Where two
things of one kind share a name (two ``compute`` stages, two caches of ``A`` in ``shared``, a
reduction axis named like a data axis), the reference is ``name#k``, the k-th of that name in
the schedule's current order; replaying the same steps reaches the same order, so the
reference finds the same thing.

The JSON of a step is an object whose ``"step"`` is the primitive and whose other keys are the
step's fields (fields left at ``None`` are left out)::

    {"step": "split", "stage": "C", "axis": "i", "factor": 8}
    {"step": "cache_read", "tensor": "A", "scope": "shared", "readers": ["C"], "result": "A.shared"}

A split by a symbolic factor (``factor=n``) is applied and recorded in memory, but has no JSON or
Python form: ``to_json``/``to_python`` refuse it, naming the stage and axis.

Tensor intrinsics. ``s[C].tensorize(axis, intrin)`` records the intrinsic by its name
(``{"step": "tensorize", "stage": "C", "axis": "j.inner", "intrin": "gemv"}``); the step keeps
the object too, so ``replay(s.steps, ...)`` needs nothing more. A record read back from JSON gets
the intrinsics by name from the caller (``from_json(text, outputs, intrins=[gemv])``), and the
Python form refers to each as a variable of its name (``s[C].tensorize(C_j_inner, gemv)``;
``python_names(outputs, intrins=[gemv])`` gives that namespace). Two different intrinsics of
one name in one schedule cannot be told apart by name: ``to_json``/``to_python`` refuse them.
"""
from __future__ import annotations

import json
import keyword
import numbers
import re
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, ClassVar

from ..te.tensor import post_dfs_order
from ..te.tensor_intrin import TensorIntrin


def _error(msg: str):
    from .schedule import ScheduleError      # schedule.py imports this module
    return ScheduleError(msg)


# ------------------------------------------------------------------------------------------------
# Names that find the same thing again

def name_ref(obj, name: str, candidates, name_of) -> str:
    """``name``, or ``name#k`` when several candidates share it (``obj`` is the k-th of them).
    Runs for every primitive applied (the tuner applies thousands): ``name_of`` should be an
    ``operator.attrgetter``."""
    names = list(map(name_of, candidates))
    if names.count(name) <= 1:
        return name
    same = [c for c, n in zip(candidates, names) if n == name]
    return f"{name}#{next(k for k, c in enumerate(same) if c is obj)}"


def resolve_ref(ref: str, candidates, name_of, what: tuple, where: str):
    """The candidate that ``ref`` names (see ``name_ref``), else a ScheduleError naming ``where``.
    ``what`` is the kind of thing, singular and plural: ``("axis", "axes")``."""
    same = [c for c in candidates if name_of(c) == ref]
    if len(same) == 1:
        return same[0]
    if len(same) > 1:
        raise _error(f"{where}: {len(same)} {what[1]} are named {ref!r}; say which with "
                     f"'{ref}#0' ... '{ref}#{len(same) - 1}' (in the schedule's current order)")
    m = re.fullmatch(r"(.*)#(\d+)", ref)
    if m:
        same = [c for c in candidates if name_of(c) == m.group(1)]
        if int(m.group(2)) < len(same):
            return same[int(m.group(2))]
    names = ", ".join(dict.fromkeys(name_of(c) for c in candidates))
    raise _error(f"{where} has no {what[0]} named {ref!r} ({what[1]}: {names})")


# ------------------------------------------------------------------------------------------------
# Steps

@dataclass(frozen=True)
class Step:
    """One recorded schedule primitive; subclasses hold its arguments as names and numbers.

    ``apply(s)`` performs it on schedule ``s`` through the public primitive (which records it
    again) and returns what the primitive returns; ``to_json()`` is its JSON object;
    ``python(p)`` its call as Python text (``p`` a ``PythonPrinter``).

    >>> s[C].split(C.op.axis[0], factor=8); s.steps[-1]
    SplitStep(stage='C', axis='i', factor=8, nparts=None)
    """
    kind: ClassVar[str] = ""

    def apply(self, s):
        raise NotImplementedError

    def python(self, p: "PythonPrinter") -> str:
        raise NotImplementedError

    def to_json(self) -> dict:
        out = {"step": self.kind}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out


def _integer(amount, how: str, stage: str, axis: str) -> int:
    if isinstance(amount, bool) or not isinstance(amount, numbers.Integral):
        raise _error(f"the split of axis '{axis}' in stage '{stage}' has the symbolic {how} `{amount}`: "
                     f"the schedule record (to_json, to_python) holds integer factors only")
    return int(amount)


@dataclass(frozen=True)
class SplitStep(Step):
    """``s[stage].split(axis, factor=...)`` or ``nparts=...``."""
    kind: ClassVar[str] = "split"
    stage: str
    axis: str
    factor: Any = None          # an int, or (in memory only) a symbolic expression
    nparts: Any = None

    def apply(self, s):
        st = s[self.stage]
        return st.split(st._axis_by_ref(self.axis), factor=self.factor, nparts=self.nparts)

    def _amount(self):
        how, amount = ("factor", self.factor) if self.factor is not None else ("nparts", self.nparts)
        return how, _integer(amount, how, self.stage, self.axis)

    def to_json(self) -> dict:
        how, amount = self._amount()
        return {"step": self.kind, "stage": self.stage, "axis": self.axis, how: amount}

    def python(self, p):
        how, amount = self._amount()
        return f"{p.stage(self.stage)}.split({p.axis(self.stage, self.axis)}, {how}={amount})"


@dataclass(frozen=True)
class TileStep(Step):
    """``s[stage].tile(x, y, x_factor, y_factor)``."""
    kind: ClassVar[str] = "tile"
    stage: str
    x: str
    y: str
    x_factor: Any               # ints, or (in memory only) symbolic expressions
    y_factor: Any

    def apply(self, s):
        st = s[self.stage]
        return st.tile(st._axis_by_ref(self.x), st._axis_by_ref(self.y), self.x_factor, self.y_factor)

    def to_json(self) -> dict:
        _integer(self.x_factor, "factor", self.stage, self.x)
        _integer(self.y_factor, "factor", self.stage, self.y)
        return super().to_json()

    def python(self, p):
        xf = _integer(self.x_factor, "factor", self.stage, self.x)
        yf = _integer(self.y_factor, "factor", self.stage, self.y)
        return (f"{p.stage(self.stage)}.tile({p.axis(self.stage, self.x)}, {p.axis(self.stage, self.y)}, "
                f"x_factor={xf}, y_factor={yf})")


@dataclass(frozen=True)
class FuseStep(Step):
    """``s[stage].fuse(*axes)``."""
    kind: ClassVar[str] = "fuse"
    stage: str
    axes: tuple

    def apply(self, s):
        st = s[self.stage]
        return st.fuse(*[st._axis_by_ref(a) for a in self.axes])

    def python(self, p):
        return f"{p.stage(self.stage)}.fuse({', '.join(p.axis(self.stage, a) for a in self.axes)})"


@dataclass(frozen=True)
class ReorderStep(Step):
    """``s[stage].reorder(*axes)``."""
    kind: ClassVar[str] = "reorder"
    stage: str
    axes: tuple

    def apply(self, s):
        st = s[self.stage]
        return st.reorder(*[st._axis_by_ref(a) for a in self.axes])

    def python(self, p):
        return f"{p.stage(self.stage)}.reorder({', '.join(p.axis(self.stage, a) for a in self.axes)})"


@dataclass(frozen=True)
class _AxisStep(Step):
    """A primitive that takes one axis and nothing else."""
    stage: str
    axis: str

    def apply(self, s):
        st = s[self.stage]
        return getattr(st, self.kind)(st._axis_by_ref(self.axis))

    def python(self, p):
        return f"{p.stage(self.stage)}.{self.kind}({p.axis(self.stage, self.axis)})"


@dataclass(frozen=True)
class VectorizeStep(_AxisStep):
    """``s[stage].vectorize(axis)``."""
    kind: ClassVar[str] = "vectorize"


@dataclass(frozen=True)
class UnrollStep(_AxisStep):
    """``s[stage].unroll(axis)``."""
    kind: ClassVar[str] = "unroll"


@dataclass(frozen=True)
class ParallelStep(_AxisStep):
    """``s[stage].parallel(axis)``."""
    kind: ClassVar[str] = "parallel"


@dataclass(frozen=True)
class BindStep(Step):
    """``s[stage].bind(axis, te.thread_axis(dom, thread, name=name))``; ``dom`` is ``(min, end)`` or None."""
    kind: ClassVar[str] = "bind"
    stage: str
    axis: str
    thread: str
    name: str | None = None     # the thread axis's own name, when it is not the tag
    dom: tuple | None = None

    def apply(self, s):
        from ..te.operation import thread_axis
        st = s[self.stage]
        return st.bind(st._axis_by_ref(self.axis), thread_axis(self.dom, self.thread, name=self.name or ""))

    def python(self, p):
        args = ([f"({self.dom[0]}, {self.dom[1]})"] if self.dom is not None else []) + [_lit(self.thread)]
        if self.name:
            args.append(f"name={_lit(self.name)}")
        return f"{p.stage(self.stage)}.bind({p.axis(self.stage, self.axis)}, te.thread_axis({', '.join(args)}))"


@dataclass(frozen=True)
class PragmaStep(Step):
    """``s[stage].pragma(axis, key, value)``."""
    kind: ClassVar[str] = "pragma"
    stage: str
    axis: str
    key: str
    value: Any = None

    def apply(self, s):
        st = s[self.stage]
        return st.pragma(st._axis_by_ref(self.axis), self.key, self.value)

    def python(self, p):
        value = "" if self.value is None else f", {_lit(self.value)}"
        return f"{p.stage(self.stage)}.pragma({p.axis(self.stage, self.axis)}, {_lit(self.key)}{value})"


@dataclass(frozen=True)
class ComputeAtStep(Step):
    """``s[stage].compute_at(s[parent], axis)``; ``axis`` is an axis of ``parent``."""
    kind: ClassVar[str] = "compute_at"
    stage: str
    parent: str
    axis: str

    def apply(self, s):
        parent = s[self.parent]
        return s[self.stage].compute_at(parent, parent._axis_by_ref(self.axis))

    def python(self, p):
        return (f"{p.stage(self.stage)}.compute_at({p.stage(self.parent)}, "
                f"{p.axis(self.parent, self.axis)})")


@dataclass(frozen=True)
class _StageStep(Step):
    """A primitive of a stage that takes no argument."""
    stage: str

    def apply(self, s):
        return getattr(s[self.stage], self.kind)()

    def python(self, p):
        return f"{p.stage(self.stage)}.{self.kind}()"


@dataclass(frozen=True)
class ComputeInlineStep(_StageStep):
    """``s[stage].compute_inline()``."""
    kind: ClassVar[str] = "compute_inline"


@dataclass(frozen=True)
class ComputeRootStep(_StageStep):
    """``s[stage].compute_root()``."""
    kind: ClassVar[str] = "compute_root"


@dataclass(frozen=True)
class DoubleBufferStep(_StageStep):
    """``s[stage].double_buffer()``."""
    kind: ClassVar[str] = "double_buffer"


@dataclass(frozen=True)
class PipelineStep(Step):
    """``s[stage].pipeline(stages)``."""
    kind: ClassVar[str] = "pipeline"
    stage: str
    stages: int

    def apply(self, s):
        return s[self.stage].pipeline(self.stages)

    def python(self, p):
        return f"{p.stage(self.stage)}.pipeline({self.stages})"


@dataclass(frozen=True)
class StorageAlignStep(Step):
    """``s[stage].storage_align(axis, factor, offset)``; ``axis`` is one of the stage's ``op.axis``."""
    kind: ClassVar[str] = "storage_align"
    stage: str
    axis: str
    factor: int
    offset: int

    def apply(self, s):
        st = s[self.stage]
        return st.storage_align(st._root_axis_by_ref(self.axis), self.factor, self.offset)

    def python(self, p):
        return (f"{p.stage(self.stage)}.storage_align({p.root_axis(self.stage, self.axis)}, "
                f"{self.factor}, {self.offset})")


@dataclass(frozen=True)
class SetScopeStep(Step):
    """``s[stage].set_scope(scope)``."""
    kind: ClassVar[str] = "set_scope"
    stage: str
    scope: str

    def apply(self, s):
        return s[self.stage].set_scope(self.scope)

    def python(self, p):
        return f"{p.stage(self.stage)}.set_scope({_lit(self.scope)})"


def _tuples(x):
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


@dataclass(frozen=True)
class SetStorePredicateStep(Step):
    """``s[stage].set_store_predicate(pred)``; ``predicate`` is its JSON tree
    (``schedule/store_predicate.py``)."""
    kind: ClassVar[str] = "set_store_predicate"
    stage: str
    predicate: tuple

    def __post_init__(self):
        object.__setattr__(self, "predicate", _tuples(self.predicate))

    def apply(self, s):
        from .store_predicate import from_json
        st = s[self.stage]
        return st.set_store_predicate(from_json(st, self.predicate))

    def python(self, p):
        from .store_predicate import python
        return f"{p.stage(self.stage)}.set_store_predicate({python(p, self.stage, self.predicate)})"


@dataclass(frozen=True)
class CreateGroupStep(Step):
    """``s.create_group(outputs, inputs, include_inputs)``; ``result`` is the group's name
    (``group0``, ``group1``, ... in creation order)."""
    kind: ClassVar[str] = "create_group"
    outputs: tuple
    inputs: tuple
    include_inputs: bool = False
    result: str | None = None

    def apply(self, s):
        g = s.create_group([s._tensor_by_ref(t) for t in self.outputs], [s._tensor_by_ref(t) for t in self.inputs],
                           self.include_inputs)
        if self.result is not None and g.name != self.result:
            raise _error(f"create_group made '{g.name}' where the record says '{self.result}'")
        return g

    def python(self, p):
        outs = ", ".join(p.tensor(t) for t in self.outputs)
        ins = ", ".join(p.tensor(t) for t in self.inputs)
        return f"s.create_group(outputs=[{outs}], inputs=[{ins}], include_inputs={self.include_inputs})"


def _group(s, name: str):
    for g in s.groups:
        if g.name == name:
            return g
    raise _error(f"no group named '{name}' (groups: {', '.join(g.name for g in s.groups) or 'none'})")


@dataclass(frozen=True)
class GroupComputeAtStep(Step):
    """``g.compute_at(s[parent], axis)`` of a group made by ``create_group``."""
    kind: ClassVar[str] = "group_compute_at"
    group: str
    parent: str
    axis: str

    def apply(self, s):
        parent = s[self.parent]
        return _group(s, self.group).compute_at(parent, parent._axis_by_ref(self.axis))

    def python(self, p):
        return f"{p.var[_group(p.s, self.group)]}.compute_at({p.stage(self.parent)}, {p.axis(self.parent, self.axis)})"


@dataclass(frozen=True)
class GroupComputeRootStep(Step):
    """``g.compute_root()`` of a group."""
    kind: ClassVar[str] = "group_compute_root"
    group: str

    def apply(self, s):
        return _group(s, self.group).compute_root()

    def python(self, p):
        return f"{p.var[_group(p.s, self.group)]}.compute_root()"


@dataclass(frozen=True)
class TransformLayoutStep(Step):
    """``s[stage].transform_layout(lambda i, j: [...])``: the mapping's argument names and each new
    index as a JSON tree (``schedule/transform_layout.py``)."""
    kind: ClassVar[str] = "transform_layout"
    stage: str
    args: tuple
    index: tuple

    def __post_init__(self):
        object.__setattr__(self, "index", _tuples(self.index))

    def apply(self, s):
        from .transform_layout import mapping_from_record
        return s[self.stage].transform_layout(mapping_from_record(self.args, self.index))

    def python(self, p):
        from .transform_layout import python_lambda
        return f"{p.stage(self.stage)}.transform_layout({python_lambda(self.args, self.index)})"


@dataclass(frozen=True)
class _CreatingStep(Step):
    """A primitive that adds a stage; ``result`` is the name it got (None: not checked)."""

    def _check_result(self, s, out):
        if self.result is None:
            return out
        t = out[0] if isinstance(out, list) else out
        got = s._stage_ref(s[t])
        if got != self.result:
            raise _error(f"{self.kind} made the stage '{got}' where the record says '{self.result}' "
                         f"(the schedule differs from the one recorded)")
        return out


@dataclass(frozen=True)
class CacheReadStep(_CreatingStep):
    """``s.cache_read(tensor, scope, readers)``: ``readers`` are stages."""
    kind: ClassVar[str] = "cache_read"
    tensor: str
    scope: str
    readers: tuple
    result: str | None = None

    def apply(self, s):
        out = s.cache_read(s._tensor_by_ref(self.tensor), self.scope, [s[r] for r in self.readers])
        return self._check_result(s, out)

    def python(self, p):
        readers = ", ".join(p.stage_tensor(r) for r in self.readers)
        return f"s.cache_read({p.tensor(self.tensor)}, {_lit(self.scope)}, [{readers}])"


@dataclass(frozen=True)
class CacheWriteStep(_CreatingStep):
    """``s.cache_write(tensor, scope)``; ``tensor`` is a tuple for the outputs of a stage of
    several (``s.cache_write([C0, C1], scope)``)."""
    kind: ClassVar[str] = "cache_write"
    tensor: str | tuple
    scope: str
    result: str | None = None

    def apply(self, s):
        if isinstance(self.tensor, tuple):
            t = [s._tensor_by_ref(x) for x in self.tensor]
        else:
            t = s._tensor_by_ref(self.tensor)
        return self._check_result(s, s.cache_write(t, self.scope))

    def python(self, p):
        if isinstance(self.tensor, tuple):
            return f"s.cache_write([{', '.join(p.tensor(x) for x in self.tensor)}], {_lit(self.scope)})"
        return f"s.cache_write({p.tensor(self.tensor)}, {_lit(self.scope)})"


@dataclass(frozen=True)
class RFactorStep(_CreatingStep):
    """``s.rfactor(tensor, axis, factor_axis)``; ``axis`` is an axis of the tensor's stage."""
    kind: ClassVar[str] = "rfactor"
    tensor: str
    axis: str
    factor_axis: int = 0
    result: str | None = None

    def apply(self, s):
        t = s._tensor_by_ref(self.tensor)
        return self._check_result(s, s.rfactor(t, s[t]._axis_by_ref(self.axis), self.factor_axis))

    def python(self, p):
        stage = p.stage_of_tensor(self.tensor)
        fa = f", factor_axis={self.factor_axis}" if self.factor_axis else ""
        return f"s.rfactor({p.tensor(self.tensor)}, {p.axis(stage, self.axis)}{fa})"


@dataclass(frozen=True)
class TensorizeStep(Step):
    """``s[stage].tensorize(axis, intrin)``; ``intrin`` is the intrinsic's name, ``tensor_intrin``
    the object (in memory only: JSON and Python refer to it by name)."""
    kind: ClassVar[str] = "tensorize"
    stage: str
    axis: str
    intrin: str
    tensor_intrin: Any = field(default=None, compare=False, repr=False)

    def apply(self, s):
        if self.tensor_intrin is None:
            raise _error(f"tensorize of stage '{self.stage}': the tensor intrinsic '{self.intrin}' "
                         f"is not given; pass it by name: from_json(text, outputs, intrins=[...]) "
                         f"or replay(steps, outputs, intrins=[...])")
        st = s[self.stage]
        return st.tensorize(st._axis_by_ref(self.axis), self.tensor_intrin)

    def to_json(self) -> dict:
        return {"step": self.kind, "stage": self.stage, "axis": self.axis, "intrin": self.intrin}

    def python(self, p):
        return f"{p.stage(self.stage)}.tensorize({p.axis(self.stage, self.axis)}, {p.intrin(self.intrin)})"


def intrins_by_name(steps) -> dict:
    """``{name: TensorIntrin}`` of the intrinsics that ``steps`` tensorize with; two different
    intrinsics of one name are refused (the record names them)."""
    out: dict = {}
    for st in steps:
        obj = getattr(st, "tensor_intrin", None)
        if obj is None:
            continue
        seen = out.setdefault(st.intrin, obj)
        if seen is not obj:
            raise _error(f"two different tensor intrinsics are named '{st.intrin}' in this schedule; "
                         f"the record refers to them by name: give them distinct names "
                         f"(te.decl_tensor_intrin(..., name=...))")
    return out


def with_intrins(step: Step, intrins, where: str) -> Step:
    """``step`` with its tensor intrinsic taken from ``intrins`` (a list of intrinsics or a
    ``{name: intrinsic}`` dict) where the step names one it does not hold."""
    if not isinstance(step, TensorizeStep) or step.tensor_intrin is not None or not intrins:
        return step
    table = intrins if isinstance(intrins, dict) else {i.name: i for i in intrins}
    obj = table.get(step.intrin)
    if obj is None:
        raise _error(f"{where}: the tensor intrinsic '{step.intrin}' is not among those given "
                     f"({', '.join(table) or 'none'})")
    return replace(step, tensor_intrin=obj)


STEP_TYPES = {cls.kind: cls for cls in (
    SplitStep, TileStep, FuseStep, ReorderStep, VectorizeStep, UnrollStep, ParallelStep, BindStep,
    PragmaStep, ComputeAtStep, ComputeInlineStep, ComputeRootStep, DoubleBufferStep, PipelineStep,
    StorageAlignStep, SetScopeStep, CacheReadStep, CacheWriteStep, RFactorStep, TensorizeStep,
    SetStorePredicateStep, CreateGroupStep, GroupComputeAtStep, GroupComputeRootStep, TransformLayoutStep)}


# ------------------------------------------------------------------------------------------------
# JSON

def step_from_json(obj, where: str = "step") -> Step:
    """The step a JSON object (``step.to_json()``, parsed) describes.

    >>> step_from_json({"step": "split", "stage": "C", "axis": "i", "factor": 8})
    SplitStep(stage='C', axis='i', factor=8, nparts=None)

    A list ``[primitive, stage, [args]]`` (the record format before steps were typed) is read too.
    """
    if isinstance(obj, Step):
        return obj
    if isinstance(obj, (list, tuple)):
        return _from_legacy(obj, where)
    if not isinstance(obj, dict) or "step" not in obj:
        raise _error(f"{where}: expected an object with a \"step\" key, got {obj!r}")
    cls = STEP_TYPES.get(obj["step"])
    if cls is None:
        raise _error(f"{where}: unknown primitive {obj['step']!r} (known: {', '.join(STEP_TYPES)})")
    known = {f.name: f for f in fields(cls) if f.compare}      # not a tensorize step's object
    extra = sorted(set(obj) - set(known) - {"step"})
    if extra:
        raise _error(f"{where}: {obj['step']} has no field(s) {', '.join(extra)} "
                     f"(its fields: {', '.join(known)})")
    missing = [n for n, f in known.items() if n not in obj and f.default is MISSING]
    if missing:
        raise _error(f"{where}: {obj['step']} needs the field(s) {', '.join(missing)}")
    args = {k: tuple(v) if isinstance(v, list) else v for k, v in obj.items() if k != "step"}
    return cls(**args)


def _from_legacy(item, where: str) -> Step:
    """``[primitive, stage, args]`` → a step (created stages are not checked: the old record
    did not name them)."""
    if len(item) == 3 and isinstance(item[0], str) and item[0] not in STEP_TYPES:
        raise _error(f"{where}: unknown primitive {item[0]!r} (known: {', '.join(STEP_TYPES)})")
    try:
        prim, stage, args = item
        args = list(args)
        if prim == "split":
            return SplitStep(stage, args[0], **{args[1]: args[2]})
        if prim in ("fuse", "reorder"):
            return STEP_TYPES[prim](stage, tuple(args))
        if prim in ("vectorize", "unroll", "parallel"):
            return STEP_TYPES[prim](stage, args[0])
        if prim == "bind":
            return BindStep(stage, args[0], args[1], args[2] if args[2] != args[1] else None)
        if prim == "pragma":
            return PragmaStep(stage, args[0], args[1], args[2])
        if prim == "compute_at":
            return ComputeAtStep(stage, args[0], args[1])
        if prim in ("compute_inline", "compute_root", "double_buffer"):
            return STEP_TYPES[prim](stage)
        if prim == "storage_align":
            return StorageAlignStep(stage, args[0], args[1], args[2])
        if prim == "set_scope":
            return SetScopeStep(stage, args[0])
        if prim == "cache_read":
            return CacheReadStep(args[0], args[1], tuple(args[2]))
        if prim == "cache_write":
            return CacheWriteStep(args[0], args[1])
        if prim == "rfactor":
            return RFactorStep(args[0], args[1], args[2])
    except (ValueError, TypeError, IndexError, KeyError):
        pass
    raise _error(f"{where}: cannot read {item!r} as a recorded step")


def steps_to_json(steps) -> str:
    """JSON text of a list of steps, one step per line."""
    intrins_by_name(steps)
    return "[" + ",\n ".join(json.dumps(st.to_json()) for st in steps) + "]"


# ------------------------------------------------------------------------------------------------
# Python

def _lit(v) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v)


def _ident(name: str) -> str:
    out = re.sub(r"\W", "_", name)
    if not out or out[0].isdigit():
        out = "_" + out
    return out + "_" if keyword.iskeyword(out) else out


def python_names(outputs, intrins=()) -> dict:
    """``{variable name: tensor}`` for every tensor of the graph of ``outputs``, as the code of
    ``Schedule.to_python()`` names them: the tensor's name made an identifier (``A.shared`` →
    ``A_shared``), with ``_1``, ``_2`` ... after a name already taken; then the tensor
    intrinsics ``intrins`` (a list or a ``{name: intrinsic}`` dict) the same way.

    >>> code = s.to_python()
    >>> exec(code, {"s": te.create_schedule(C.op), **python_names([C.op], intrins=[gemv])})
    """
    ops = [o.op if hasattr(o, "op") else o for o in (outputs if isinstance(outputs, (list, tuple)) else [outputs])]
    taken, out = {"s", "te"}, {}
    for op in post_dfs_order(ops):
        for t in op.outputs:
            name = _fresh(_ident(t.name), taken)
            out[name] = t
    items = intrins.items() if isinstance(intrins, dict) else ((i.name, i) for i in intrins)
    for name, intrin in items:
        out[_fresh(_ident(name), taken)] = intrin
    return out


def _fresh(name: str, taken: set) -> str:
    base, k = name, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


class PythonPrinter:
    """Prints steps as Python while applying them to ``s``, a fresh schedule of the same
    outputs, whose stages and axes at each point give the variables the code uses."""

    def __init__(self, s, intrins=None):
        self.s = s
        self.lines: list[str] = []
        self.taken = {"s", "te"}
        self.var: dict = {}            # Tensor, IterVar or TensorIntrin -> its variable in the code
        self.given: dict = {}          # the variables of the graph's tensors that the code uses
        self.intrins = dict(intrins or {})
        self._graph = python_names(s.outputs, self.intrins)
        for name, t in self._graph.items():
            self.taken.add(name)
            self.var[t] = name

    # ---- references to stages, tensors and axes ----
    def _origin_tensor(self, st, index: int = 0):
        t = st.origin_op.outputs[index]
        name = self.var[t]
        if self._graph.get(name) is t:
            self.given[name] = True
        return name

    def stage_tensor(self, ref: str) -> str:
        """The variable of the tensor whose stage ``ref`` names."""
        return self._origin_tensor(self.s[ref])

    def stage(self, ref: str) -> str:
        return f"s[{self.stage_tensor(ref)}]"

    def stage_of_tensor(self, ref: str) -> str:
        return self.s._stage_ref(self.s[self.s._tensor_by_ref(ref)])

    def intrin(self, name: str) -> str:
        """The variable of the tensor intrinsic named ``name``."""
        var = self.var[self.intrins[name]]
        self.given[var] = True
        return var

    def tensor(self, ref: str) -> str:
        t = self.s._tensor_by_ref(ref)
        return self._origin_tensor(self.s[t], t.value_index)

    def axis(self, stage_ref: str, ref: str) -> str:
        """The variable of a current axis of a stage; a root axis not named yet is bound first
        (``C_i, C_j = s[C].op.axis``)."""
        st = self.s[stage_ref]
        iv = st._axis_by_ref(ref)
        if iv not in self.var:
            self._bind_roots(st, iv)
        return self.var[iv]

    def root_axis(self, stage_ref: str, ref: str) -> str:
        st = self.s[stage_ref]
        iv = st._root_axis_by_ref(ref)
        if iv not in self.var:
            self._bind_roots(st, iv)
        return self.var[iv]

    def _bind_roots(self, st, iv):
        if iv is getattr(st.op, "scan_axis", None):          # te.scan's loop
            self.lines.append(f"{self._name_axis(st, iv)} = s[{self._origin_tensor(st)}].op.scan_axis")
            return
        for what in ("axis", "reduce_axis"):
            ivs = list(getattr(st.op, what))
            if any(x is iv for x in ivs):
                break
        else:
            raise _error(f"to_python: axis '{iv.var.name}' of stage '{st.name}' comes from no step")
        stage = f"s[{self._origin_tensor(st)}]"
        names = [self.var.get(x) or self._name_axis(st, x) for x in ivs]
        if len(ivs) == 1:
            self.lines.append(f"{names[0]} = {stage}.op.{what}[0]")
        else:
            self.lines.append(f"{', '.join(names)} = {stage}.op.{what}")

    def _name_axis(self, st, iv) -> str:
        name = _fresh(f"{self._origin_tensor(st)}_{_ident(iv.var.name)}", self.taken)
        self.var[iv] = name
        return name

    # ---- one step ----
    def add(self, step: Step) -> None:
        call = step.python(self)
        out = step.apply(self.s)
        names = self._names_of(step, out)
        self.lines.append(f"{names} = {call}" if names else call)

    def _names_of(self, step, out) -> str:
        if out is None:
            return ""
        items = list(out) if isinstance(out, (list, tuple)) else [out]
        names = []
        for x in items:
            if hasattr(x, "num_child_stages"):                   # a group (create_group)
                names.append(_fresh(x.name, self.taken))
                self.var[x] = names[-1]
            elif hasattr(x, "op"):                               # a tensor made by the step
                names.append(_fresh(_ident(x.name), self.taken))
                self.var[x] = names[-1]
            else:                                                # an axis made by the step
                st = self.s[step.stage]
                names.append(self.var.get(x) or self._name_axis(st, x))
        return ", ".join(names) + ("," if len(names) == 1 and isinstance(out, (list, tuple)) else "")

    def text(self) -> str:
        intrins = [v for v in self.given if isinstance(self._graph.get(v), TensorIntrin)]
        tensors = [v for v in self.given if v not in intrins]
        head = ["from tilecraft import te",
                f"# s: te.create_schedule of the same outputs; the tensors by name: "
                f"{', '.join(tensors) or '(none used)'}"
                + (f"; the tensor intrinsics by name: {', '.join(intrins)}" if intrins else "")]
        return "\n".join(head + self.lines)


def python_form(steps, fresh) -> str:
    """Python code that performs ``steps`` (see ``Schedule.to_python``); ``fresh`` is a new
    schedule of the same outputs, which this applies the steps to as it prints them."""
    p = PythonPrinter(fresh, intrins_by_name(steps))
    for step in steps:
        p.add(step)
    return p.text()
