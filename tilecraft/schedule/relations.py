"""The records a stage keeps of how its axes were derived, and the schedule's error class.

A stage's ``relations`` list says how each new axis came from older ones: ``Split`` (one axis into
outer and inner), ``Fuse`` (two adjacent axes into one) and ``Singleton`` (an extent-1 axis made
from nothing by ``fuse()``); ``IterAttr`` holds what primitives set on one axis (loop kind, thread
binding, pragmas, tensor intrinsic). Bound inference (``bound.py``) walks these relations.
Imported by ``stage.py``, ``stage_placement.py`` and ``schedule.py`` (which re-exports them).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..error import TVMError
from ..ir.expr import Const, Expr, IterVar
from ..ir.stmt import ForKind
from ..te.tensor_intrin import TensorIntrin


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

