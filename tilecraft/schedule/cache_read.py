"""``Schedule.cache_read``: a stage that copies a tensor into memory of a scope for some readers.

The cache stage (``A.shared``) has one data-parallel axis per dimension of the tensor
(``ax0, ax1, ...``) and copies it element by element; it is placed right after the tensor's
producer (first, for a placeholder). Afterwards the given readers read the cache instead of the
tensor (other readers still read the tensor), and later stages follow the readers' new outputs.
"""
from __future__ import annotations

from ..ir.expr import IterKind, IterVar, Range, TensorLoad, Var, const
from ..te.tensor import ComputeOp, Tensor


def cache_read(sch, tensor, scope: str, readers):
    """See ``Schedule.cache_read``; returns ``(the cache tensor, its stage, the tensor's record
    name, the readers' record names)``, the names taken before the readers change."""
    from .schedule import ScheduleError, Stage
    if not isinstance(tensor, Tensor):
        raise ScheduleError(f"cache_read: expected a tensor, got {tensor!r}")
    tensor = sch._current(tensor)
    readers = readers if isinstance(readers, (list, tuple)) else [readers]
    reader_stages = [sch[r] for r in readers]
    for rs in reader_stages:
        if not any(t is tensor for t in rs.op.input_tensors):
            raise ScheduleError(f"cache_read of '{tensor.name}': stage '{rs.name}' does not read it")
    tensor_ref, reader_refs = sch._tensor_ref(tensor), tuple(sch._stage_ref(r) for r in reader_stages)
    cache = copy_compute(tensor, f"{tensor.name}.{scope}")
    st = Stage(cache.op, sch)
    st.scope = scope
    sch._insert_after(sch.stage_map.get(tensor.op), st)
    sch.stage_map[cache.op] = st
    sch._replace_inputs(reader_stages, {tensor: cache})
    return cache, st, tensor_ref, reader_refs


def copy_compute(tensor: Tensor, name: str) -> Tensor:
    """A compute op named ``name`` that copies ``tensor`` element by element (axes ``ax0..``)."""
    axis = tuple(IterVar(Range(const(0, s.dtype), s), Var(f"ax{d}", s.dtype), IterKind.DATA_PAR)
                 for d, s in enumerate(tensor.shape))
    op = ComputeOp(name, "", {}, axis, (), (TensorLoad(tensor, tuple(iv.var for iv in axis)),))
    return op.output(0)
