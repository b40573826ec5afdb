"""The simplest correct GPU schedule of any operator: every stage its own kernel, one thread per
output element.

The tuner checks CUDA candidates against it (``autotune.local.build_reference_func``), so it lives
in the schedule layer rather than with the hand-written schedules of ``topi.cuda_schedules``
(which offers it as ``cuda_schedules.naive`` too).

>>> s = naive(C, threads=128)          # then tilecraft.build(s, [A, B, C], target="cuda")
"""
from __future__ import annotations

from ..te.operation import thread_axis
from ..te.tensor import ComputeOp
from .schedule import create_schedule


def naive(outputs, threads: int = 256):
    """The simplest correct GPU schedule of ``outputs`` (a tensor, an op or a list of them): every
    computed stage is its own kernel, its fused output axes split over ``threads``-thread blocks,
    reductions serial in each thread. The tuner's reference for checking CUDA candidates.

    For ``C[i, j] = A[i, j] * 2`` of shape (64, 100) and 256 threads, as ``lower`` prints it::

        for i in range(0, 64):                                   # before: te.create_schedule
          for j in range(0, 100):
            C[i * 100 + j] = A[i * 100 + j] * 2.0

        for i.j.fused.outer in thread_binding(0, 25, thread="blockIdx.x"):      # after
          for i.j.fused.inner in thread_binding(0, 256, thread="threadIdx.x"):
            C[i.j.fused.outer * 256 + i.j.fused.inner] = A[i.j.fused.outer * 256 + i.j.fused.inner] * 2.0
    """
    outs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    s = create_schedule([getattr(t, "op", t) for t in outs])
    for st in s.stages:
        if isinstance(st.op, ComputeOp) and st.op.axis:
            fused = st.fuse(*st.op.axis) if len(st.op.axis) > 1 else st.op.axis[0]
            b, t = st.split(fused, factor=threads)
            st.bind(b, thread_axis("blockIdx.x"))
            st.bind(t, thread_axis("threadIdx.x"))
    return s
