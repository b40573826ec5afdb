"""CUDA: a reduction over a vectorized reduction axis inside one thread (each thread folds its
row into a small local array of accumulators, then ``VectorReduce`` folds the lanes). Emulated
against numpy; the CUDA C is compiled with nvcc where it is installed and run where there is a
GPU. A vectorized reduction axis of a reduction that also runs across threads is refused
(``tests/test_errors.py``)."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.testing import sum_tolerance

from .test_cuda_reduce_init import _run

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("reducer", ["sum", "max"])
def test_per_thread_vectorized_reduction_with_tail_and_init(rng, reducer):
    rows, cols = 70, 46
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    S = te.compute((rows,), lambda i: getattr(te, reducer)(A[i, k], axis=k, init=0.5), name="S")
    s = te.create_schedule(S.op)
    bo, bi = s[S].split(S.op.axis[0], factor=32)
    s[S].bind(bo, te.thread_axis("blockIdx.x"))
    s[S].bind(bi, te.thread_axis("threadIdx.x"))
    ko, ki = s[S].split(k, factor=4)
    ko, ku = s[S].split(ko, factor=2)
    s[S].unroll(ku)
    s[S].vectorize(ki)
    func = tilecraft.lower(s, [A, S], target="cuda")
    assert "vector_reduce_" in str(func)
    a = rng.uniform(-1, 1, (rows, cols)).astype("float32")
    a[3] -= 2.0                               # the init wins in this row (max)
    out = np.full(rows, np.nan, "float32")
    _run(s, [A, S], [a, out])
    if reducer == "sum":
        np.testing.assert_allclose(out, a.astype("float64").sum(1) + 0.5, rtol=0,
                                   atol=sum_tolerance(a, axis=1, extra=0.5).max())
    else:
        np.testing.assert_array_equal(out, np.maximum(a.max(1), 0.5))
