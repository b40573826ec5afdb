"""``Schedule.create_group``: stages scheduled together (TVM <= 0.14).

``g = s.create_group(outputs=x1, inputs=x, include_inputs=True)`` groups the stages between
``inputs`` and ``outputs`` (the inputs' own stages too with ``include_inputs``). The stages of a
group that are at its root (not computed at another stage) go where the group goes:
``g.compute_at(s[x2], x2.op.axis[0])`` computes them all inside that loop, and ``compute_root``
of such a stage brings it back to the group's place. Groups nest: a group made of stages of
another group, or of a whole group, is a child of it (``g1.group == g2``). A stage of a group
cannot be computed at a stage outside its group.

Afterwards the stages' attachments are ordinary ``compute_at`` ones: lowering does not know
about groups.

Before::                                   After ``g.compute_at(s[x2], x2.op.axis[0])``::

    for i, j: x[i, j] = 1.0                    for i in range(m):
    for i, j: x1[i, j] = x[i, j] + 1               for j: x[0, j] = 1.0
    for i, j: x2[i, j] = x1[i, j] + 2              for j: x1[0, j] = x[0, j] + 1
                                                   for j: x2[i, j] = x1[0, j] + 2
"""
from __future__ import annotations


class Group:
    """Stages scheduled together: ``compute_at``/``compute_root`` move those at its root.
    ``attach_stage``/``attach_ivar`` say where it is computed (None: the root); ``group`` is the
    enclosing group; ``num_child_stages`` counts its direct stages and child groups."""

    def __init__(self, schedule, name: str):
        self.schedule, self.name = schedule, name
        self.group: Group | None = None
        self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None

    def __repr__(self):
        return f"group({self.name})"

    @property
    def num_child_stages(self) -> int:
        return (sum(1 for st in self.schedule.stages if st.group is self) +
                sum(1 for g in self.schedule.groups if g.group is self))

    def compute_at(self, parent, scope):
        """Compute the stages at the root of this group inside ``parent``'s loop ``scope``."""
        from .record import GroupComputeAtStep
        from .schedule import ScheduleError, Stage
        if not isinstance(parent, Stage):
            raise ScheduleError(f"compute_at of {self.name}: the first argument must be a stage (s[T])")
        if contains(self, parent):
            raise ScheduleError(f"compute_at of {self.name} at stage '{parent.name}', which is in the group")
        k = parent._leaf_index(scope, f"compute_at of {self.name}")
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, parent.leaf_iter_vars[k]
        self._place_roots()
        self.schedule.steps.append(GroupComputeAtStep(self.name, parent._ref(),
                                                      parent._axis_ref(parent.leaf_iter_vars[k])))

    def compute_root(self):
        """Compute the stages at the root of this group at the root (of its enclosing group)."""
        from .record import GroupComputeRootStep
        self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None
        self._place_roots()
        self.schedule.steps.append(GroupComputeRootStep(self.name))

    def _place_roots(self):
        for st in self.schedule.stages:
            if st.group_rooted and contains(self, st):
                place(st)


def contains(group, stage_or_group) -> bool:
    g = stage_or_group.group
    while g is not None:
        if g is group:
            return True
        g = g.group
    return False


def effective_attach(group):
    """Where the root of ``group`` is computed: its own attachment, else its enclosing group's."""
    while group is not None:
        if group.attach_type == "scope":
            return group.attach_stage, group.attach_ivar
        group = group.group
    return None


def place(stage) -> None:
    """Put a stage at the root of its group (``compute_root`` of a grouped stage)."""
    at = effective_attach(stage.group)
    stage.attach_type, stage.attach_stage, stage.attach_ivar = ("root", None, None) if at is None else ("scope", *at)


def root_of(stage):
    """Where ``compute_root`` puts a stage: the root of its group, or of its scan (TVM's scan
    group), else the root; as ``(stage, IterVar)`` or None."""
    if stage.group is not None:
        return effective_attach(stage.group)
    from .scan import group_root
    return group_root(stage)


def check_compute_at(stage, parent) -> None:
    """A grouped stage stays inside its group."""
    from .schedule import ScheduleError
    if stage.group is not None and not contains(stage.group, parent) and not _attached_inside(parent, stage.group):
        raise ScheduleError(f"compute_at of stage '{stage.name}' into '{parent.name}': '{stage.name}' is in "
                            f"{stage.group.name}, '{parent.name}' is not; compute it at a stage of its group, "
                            f"or move the group ({stage.group.name}.compute_at)")


def _attached_inside(parent, group) -> bool:
    """Whether ``parent`` is computed inside a stage of ``group`` (its loops run within the group)."""
    cur, seen = parent, set()
    while cur.attach_type == "scope" and cur.attach_stage is not None and id(cur) not in seen:
        seen.add(id(cur))
        cur = cur.attach_stage
        if contains(group, cur):
            return True
    return False


def create_group(sch, outputs, inputs, include_inputs: bool = False) -> Group:
    """See ``Schedule.create_group``."""
    from .schedule import ScheduleError
    from ..te.tensor import Tensor
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    ins = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    for t in outs + ins:
        if not isinstance(t, Tensor):
            raise ScheduleError(f"create_group: outputs and inputs must be tensors, got {t!r}")
    stages = _between(sch, [sch[t] for t in outs], [sch[t] for t in ins], include_inputs)
    if not stages:
        raise ScheduleError(f"create_group: no stage lies between the inputs ({', '.join(t.name for t in ins)}) "
                            f"and the outputs ({', '.join(t.name for t in outs)})")
    parent = _common_group(stages)
    g = Group(sch, f"group{len(sch.groups)}")
    g.group = parent
    for st in stages:
        child = st if st.group is parent else _child_of(parent, st)
        if child.group is not parent:
            raise ScheduleError(f"create_group: stage '{st.name}' is in another group ({st.group.name}) than "
                                f"the others; a group holds whole groups or stages of one group")
        child.group = g
    sch.groups.append(g)
    from .record import CreateGroupStep
    sch.steps.append(CreateGroupStep(tuple(sch._tensor_ref(sch._current(t)) for t in outs),
                                     tuple(sch._tensor_ref(sch._current(t)) for t in ins), bool(include_inputs), g.name))
    return g


def _between(sch, outs, ins, include_inputs) -> list:
    """The stages on a path from ``ins`` to ``outs`` (each input's too with ``include_inputs``),
    in schedule order (TVM's GetSubGraph: what the outputs reach, stopping at the inputs, that
    depends on an input)."""
    stop = set(map(id, ins))
    found: dict = {}

    def reaches(st) -> bool:
        if id(st) in found:
            return found[id(st)]
        if id(st) in stop:
            found[id(st)] = True
            return True
        found[id(st)] = False
        hit = False
        for t in st.op.input_tensors:
            p = sch.stage_map.get(t.op)
            if p is not None and reaches(p):
                hit = True
        found[id(st)] = hit
        return hit
    for st in outs:
        reaches(st)
    return [st for st in sch.stages if found.get(id(st)) and (include_inputs or id(st) not in stop)]


def _common_group(stages):
    chains = []
    for st in stages:
        chain, g = [], st.group
        while g is not None:
            chain.append(g)
            g = g.group
        chains.append(chain)
    for g in chains[0] + [None]:
        if all(g is None or g in c for c in chains):
            return g
    return None


def _child_of(parent, st):
    """The group holding ``st`` whose enclosing group is ``parent`` (or ``st`` itself)."""
    cur = st
    while cur.group is not None and cur.group is not parent:
        cur = cur.group
    return cur
