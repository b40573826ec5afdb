"""Knobs and schedules shared by the templates whose core is a row reduction (softmax, layer
norm, global pooling): the reduction runs in SIMD registers (``vectorize`` on its reduction axis,
``tilecraft/schedule/vector_reduce.py``), ``reduce_lanes`` wide with ``reduce_accumulators``
independent vector accumulators.
"""
from __future__ import annotations

# the knobs a row reduction gets in every template of this family (softmax, layer norm, pooling);
# the first values are the fallback's: 8 lanes (one AVX2 register; on the AVX-512 development
# machine 8 lanes ran softmax 4096x1024 faster than 16), 2 accumulators
REDUCE_LANES = [8, 16, 4, 1]
REDUCE_ACCUMULATORS = [2, 1, 4]


def define_reduce_knobs(cfg) -> None:
    """``reduce_lanes`` (the vector width of a row reduction; 1: scalar) and
    ``reduce_accumulators`` (independent vector accumulators, to hide the add's latency)."""
    cfg.define_knob("reduce_lanes", REDUCE_LANES)
    cfg.define_knob("reduce_accumulators", REDUCE_ACCUMULATORS)


def schedule_row_reduction(s, stage, lanes: int, accumulators: int, axis=None) -> None:
    """Vectorize a reduction over its (last) reduction axis: split by ``lanes``, then the outer part
    by ``accumulators`` (unrolled: that many vector accumulators).

    >>> schedule_row_reduction(s, mx, 16, 2)     # k -> k.outer.outer, k.outer.inner (unrolled), k.inner (vectorized)
    """
    if lanes <= 1:
        return
    st = s[stage]
    k = axis if axis is not None else st.op.reduce_axis[-1]
    ko, ki = st.split(k, factor=lanes)
    if accumulators > 1:
        ko, ku = st.split(ko, factor=accumulators)
        st.unroll(ku)
    st.vectorize(ki)
