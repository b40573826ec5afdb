"""Reductions: ``init=`` (the value a reduction starts from, TVM's ``Reduce.init``) and the
shapes ``rfactor`` gives its partial tensors.

``te.sum(x, axis=k, init=v)`` folds the combiner over the reduction domain starting from ``v``
instead of the identity; points where ``where=`` fails contribute nothing, so an empty domain
gives ``v``. ``init`` may read tensors at the output's indices (``init=I[i, j]``). With
``rfactor`` the partial stage starts from the identity and the final stage from ``init``.
"""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te


def test_rfactor_shape_of_an_unsplit_symbolic_axis_prints_plainly():
    n = te.var("n")
    A = te.placeholder((n, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    CF = s.rfactor(C, k)
    assert repr(CF) == "Tensor(C.rf, shape=(n, n), dtype=float32)"
    k1 = te.reduce_axis((1, n), name="k1")
    assert str(k1.dom.extent) == "n - 1"
