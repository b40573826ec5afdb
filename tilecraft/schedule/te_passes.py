"""TVM's ``tvm.te.schedule`` functions that its unit tests and TEDD drive: ``InferBound``,
``ScheduleOps``, ``CreateReadGraph``, ``PostDFSOrder``, ``AutoInlineElemWise``,
``AutoInlineBroadcast``, ``AutoInlineInjective``. They run the same code as :func:`tilecraft.lower`
(bound inference, the loop nests of ``schedule_ops``), exposed one step at a time;
``tilecraft/__init__.py`` hands this module to ``te`` as ``te.schedule`` (te sits below schedule).

>>> s = s.normalize()
>>> bounds = tvm.te.schedule.InferBound(s)
>>> bounds[xo].extent                       # the extent of loop xo
>>> stmt = tvm.te.schedule.ScheduleOps(s, bounds)
"""
from __future__ import annotations

from ..ir.expr import IterVar, Range, const
from ..ir.simplify import simplify
from ..te.tensor import Operation, PlaceholderOp, Tensor, post_dfs_order
from .bound import infer_bounds
from .lower import _consumers, inline_stages, lower
from .schedule import Schedule, ScheduleError, replay
from .relations import Fuse, Singleton, Split      # noqa: F401 (TVM's te.schedule.Fuse, ...: s[T].relations)
from ..ir.stmt import Buffer                         # noqa: F401 (TVM's te.schedule.Buffer: what te.extern passes)


def _outputs_and_inputs(sch: Schedule) -> list:
    """Every placeholder and output tensor of ``sch``: the arguments of a whole-program lowering."""
    args = [t for st in sch.stages if isinstance(st.op, PlaceholderOp) for t in st.op.outputs]
    return args + [t for st in sch.stages if st.is_output for t in st.op.outputs]


def InferBound(sch: Schedule) -> dict:
    """The range of every iteration variable of every scheduled stage: ``{IterVar: Range}`` (a
    root axis: the region the stage computes; a loop made by split/fuse: ``[0, extent)``).
    Inlined stages and placeholders have none.

    >>> InferBound(s)[xo]
    range(min=0, ext=(m + 31) // 32)
    """
    if not isinstance(sch, Schedule):
        raise TypeError(f"InferBound takes a schedule, got {type(sch).__name__}")
    bodies = inline_stages(sch)
    infos = infer_bounds(sch, bodies, _consumers(sch, bodies), {}, frozenset(_outputs_and_inputs(sch)))
    out: dict = {}
    for st, info in infos.items():
        for d, iv in enumerate(getattr(st.op, "axis", ())):
            if d < len(info.root_extent):
                out[iv] = Range(simplify(info.root_min[d]), simplify(info.root_extent[d]))
        for iv, ext in info.extent.items():
            if iv not in out:
                out[iv] = Range(const(0, "int32"), simplify(ext))
    return out


def ScheduleOps(sch: Schedule, bounds=None, debug_keep_trivial_loop: bool = False):
    """The loop nest of ``sch`` before storage flattening, with every placeholder and output as
    a buffer: what ``lower`` has after its ``schedule_ops`` pass. ``bounds`` (from
    :func:`InferBound`) is accepted and recomputed; ``debug_keep_trivial_loop`` is accepted
    (loops of extent 1 are kept here anyway).

    >>> print(ScheduleOps(s, InferBound(s)))
    """
    seen = {}

    def keep(pass_name, func):
        if pass_name == "schedule_ops" and "body" not in seen:
            seen["body"] = func.body
    lower(sch, _outputs_and_inputs(sch), after_pass=keep)
    return seen["body"]


def CreateReadGraph(roots) -> dict:
    """``{Operation: [the tensors it reads]}`` for every operation reachable from ``roots`` (an
    operation, a tensor or a list of either).

    >>> g = CreateReadGraph([C.op]); g[C.op]
    [A, B]
    """
    ops = [r.op if isinstance(r, Tensor) else r for r in (roots if isinstance(roots, (list, tuple)) else [roots])]
    for r in ops:
        if not isinstance(r, Operation):
            raise TypeError(f"CreateReadGraph takes operations or tensors, got {type(r).__name__}")
    return {op: list(op.input_tensors) for op in post_dfs_order(ops)}


def PostDFSOrder(roots, g: dict) -> list:
    """The operations of read graph ``g`` (:func:`CreateReadGraph`) reachable from ``roots``,
    each after the operations it reads."""
    ops = [r.op if isinstance(r, Tensor) else r for r in (roots if isinstance(roots, (list, tuple)) else [roots])]
    order, seen = [], set()

    def visit(op):
        stack = [(op, False)]
        while stack:
            o, done = stack.pop()
            if done:
                order.append(o)
                continue
            if o in seen:
                continue
            seen.add(o)
            stack.append((o, True))
            for t in reversed(g.get(o, ())):
                if t.op not in seen:
                    stack.append((t.op, False))
    for op in ops:
        visit(op)
    return order


def schedule_record(sch: Schedule) -> list:
    """``s.schedule_record``: TVM's snapshots of a schedule, as created and then after each
    primitive (one per ``s.primitive_record`` entry: ``["vanilla", "split", ...]``), each a new
    schedule made by replaying the first steps of ``s.steps`` on the same graph, e.g. to draw
    with ``contrib.tedd``. Empty unless the schedule was created under
    ``PassContext(config={"te.keep_schedule_record": True})``, as in TVM.

    >>> with tvm.transform.PassContext(config={"te.keep_schedule_record": True}):
    ...     s = te.create_schedule(C.op)
    >>> s[C].split(C.op.axis[0], factor=8); len(s.schedule_record)
    2
    """
    if not sch.keep_schedule_record:
        return []
    return [replay(sch.steps[:k], sch.outputs) for k in range(len(sch.steps) + 1)]


def _auto_inline(sch: Schedule, tags: tuple) -> None:
    for st in sch.stages:
        op = st.op
        if st.is_output or isinstance(op, PlaceholderOp) or st.attach_type == "inline":
            continue
        if getattr(op, "tag", "") in tags and not getattr(op, "reduce_axis", ()) and len(op.outputs) == 1:
            st.compute_inline()


def AutoInlineElemWise(sch: Schedule) -> None:
    """Inline every stage tagged ``elemwise`` that is not an output (TVM's pass of that name)."""
    _auto_inline(sch, ("elemwise",))


def AutoInlineBroadcast(sch: Schedule) -> None:
    """Inline every ``elemwise`` or ``broadcast`` stage that is not an output."""
    _auto_inline(sch, ("elemwise", "broadcast"))


def AutoInlineInjective(sch: Schedule) -> None:
    """Inline every ``elemwise``, ``broadcast`` or ``injective`` stage that is not an output."""
    _auto_inline(sch, ("elemwise", "broadcast", "injective"))


__all__ = ["InferBound", "ScheduleOps", "CreateReadGraph", "PostDFSOrder", "AutoInlineElemWise",
           "AutoInlineBroadcast", "AutoInlineInjective", "ScheduleError"]
