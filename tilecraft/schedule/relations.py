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
from ..ir.expr import Const, Expr, IterVar, StringImm, convert
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

    @property
    def iter_type(self) -> int:
        """TVM's code of the loop's annotation (``IterVar.Unrolled``, ``IterVar.Vectorized``, ...)."""
        if self.tensor_intrin is not None:
            return IterVar.Tensorized
        return _ITER_TYPE.get(self.kind, IterVar.DataPar)

    @property
    def pragma_keys(self) -> list:
        """TVM's view of ``pragmas``: the keys as string immediates (``.value``)."""
        return [StringImm(k) for k, _ in self.pragmas]

    @property
    def pragma_values(self) -> list:
        return [convert(v) if v is not None else None for _, v in self.pragmas]


_ITER_TYPE = {ForKind.UNROLLED: IterVar.Unrolled, ForKind.VECTORIZED: IterVar.Vectorized,
              ForKind.PARALLEL: IterVar.Parallelized, ForKind.THREAD_BINDING: IterVar.ThreadIndex}


def _extent_of(iv: IterVar):
    return iv.dom.extent if iv.dom is not None else None


def _number(e):
    """A split amount as the record holds it: an int where it is a constant."""
    return e.value if isinstance(e, Const) else e

