"""Scheduling and lowering ``te.scan`` (``te/scan.py``): the scan's stage is a loop over its
``scan_axis``; the stages of its body run inside it, once per step.

* ``attach_scan_bodies`` (when a schedule is made): every body stage of a scan is attached at
  the scan's loop (TVM's scan group): the update stages for good, the others until the
  schedule moves them with ``compute_at`` to another body stage (``compute_root`` brings them
  back to the scan's loop; a loop outside the scan is refused: the body runs per step).
* ``scan_buffers`` (in ``lower``): each output of a scan has one buffer, the whole tensor, which
  its ``init`` writes (rows ``[0, T0)``, at the root, before the loop), its ``update`` writes
  (row ``t`` at step ``t``) and its state placeholder reads; all at absolute indices.

Afterwards (lowered)::

    scan = allocate(...)                 # unless scan is an argument
    for i in range(n): scan[0, i] = X[0, i]                     # init, at the root
    for scan.idx in range(m - 1):                               # the scan's loop (ordered)
        for i in range(n):                                      # update, attached
            scan[scan.idx + 1, i] = scan[scan.idx, i] + X[scan.idx + 1, i]
"""
from __future__ import annotations

from ..ir.expr import IterKind
from ..ir.stmt import Buffer
from ..te.scan import ScanOp


def scan_stages(sch) -> list:
    return [st for st in sch.stages if isinstance(st.op, ScanOp)]


def attach_scan_bodies(sch) -> None:
    """Attach each scan's body stages at the scan's (innermost) loop."""
    for scan in scan_stages(sch):
        for op in scan.op.body_ops:
            st = sch.stage_map.get(op)
            if st is not None:
                st.attach_type, st.attach_stage, st.attach_ivar = "scope", scan, scan.leaf_iter_vars[-1]


def scan_of_body(stage):
    """The scan stage whose body ``stage`` belongs to, or None."""
    for scan in scan_stages(stage.schedule):
        if stage.op in scan.op.body_ops:
            return scan
    return None


def is_scan_update(stage) -> bool:
    scan = scan_of_body(stage)
    return scan is not None and any(t.op is stage.op for t in scan.op.update)


def check_attach(stage, what: str, parent=None) -> None:
    """Refuse moving a scan's stages where they cannot run: an update anywhere but its scan's
    step, another body stage outside the scan's loop. ``parent`` is the target stage of a
    ``compute_at`` (None for compute_root/compute_inline)."""
    from .schedule import ScheduleError
    if isinstance(stage.op, ScanOp) and what != "compute_root":
        raise ScheduleError(f"{what} of the scan '{stage.name}': a scan runs at the root (its loop is "
                            f"the time steps); schedule its body stages instead")
    scan = scan_of_body(stage)
    if scan is None:
        return
    if is_scan_update(stage):
        raise ScheduleError(f"{what} of stage '{stage.name}': it is the update of scan '{scan.name}' and runs "
                            f"once per step inside the scan's loop; schedule its loops (split, bind, ...) instead")
    if parent is None:
        return
    cur = parent
    while cur is not None and cur is not scan:
        cur = cur.attach_stage if cur.attach_type == "scope" else None
    if cur is None:
        raise ScheduleError(f"compute_at of stage '{stage.name}' into '{parent.name}': '{stage.name}' is in the "
                            f"body of scan '{scan.name}' and runs once per step; compute it at a loop inside "
                            f"the scan (a stage of its body)")


def group_root(stage):
    """Where ``compute_root`` puts a stage: the scan's loop for a body stage, else the root."""
    scan = scan_of_body(stage)
    if scan is None:
        return None
    return scan, scan.leaf_iter_vars[-1]


def check_ordered(stage, iv, what: str) -> None:
    """The scan's loop runs its steps in order: no parallel, vectorize or bind."""
    from .schedule import ScheduleError
    if iv.kind is IterKind.ORDERED:
        raise ScheduleError(f"{what} on stage '{stage.name}': axis '{iv.var.name}' is the time axis of the scan; "
                            f"its steps run in order (each reads the earlier ones)")


def scan_buffers(sch, buffers: dict) -> set:
    """Give each scan output a buffer (its argument's, or a new whole-tensor one) and make its
    init, update and state placeholder use it too; return those aliased tensors (written and
    read at absolute indices, never allocated on their own)."""
    from .schedule import ScheduleError
    aliased = set()
    for st in scan_stages(sch):
        op = st.op
        for out, init, upd, state in zip(op.outputs, op.init, op.update, op.state_placeholder):
            for t in (init, upd, state):
                if t in buffers:
                    raise ScheduleError(f"'{t.name}' is part of scan '{op.name}' (its init, update or state) "
                                        f"and has no storage of its own; pass the scan's output '{out.name}'")
            buf = buffers.get(out)
            if buf is None:
                buf = buffers[out] = Buffer(out.name, out.shape, out.dtype, st.scope)
            for t in (init, upd, state):
                buffers[t] = buf
                aliased.add(t)
    return aliased


def state_placeholders(sch) -> set:
    return {p.op for st in scan_stages(sch) for p in st.op.state_placeholder}


def check_gpu_scans(sch) -> None:
    """For CUDA, each stage computed directly in a scan's loop is a kernel launched at every step:
    its outermost loop must be bound to the grid (the loop itself stays on the host)."""
    from .passes.gpu_kernels import LAUNCH_TAGS, GPULoweringError
    for scan in scan_stages(sch):
        for st in sch.stages:
            if st.attach_type != "scope" or st.attach_stage is not scan:
                continue
            attrs = [st.iter_var_attrs.get(iv) for iv in st.leaf_iter_vars]
            if not any(a is not None and a.bind is not None and a.bind.thread_tag in LAUNCH_TAGS for a in attrs):
                raise GPULoweringError(
                    f"stage '{st.name}' runs at every step of scan '{scan.name}' and is not bound to the GPU "
                    f"grid: for target 'cuda' the scan's loop stays on the host and launches '{st.name}' as a "
                    f"kernel per step, so its loops must be bound, e.g. "
                    f"s[{st.name}].bind(xo, te.thread_axis('blockIdx.x')) and "
                    f"s[{st.name}].bind(xi, te.thread_axis('threadIdx.x'))")
