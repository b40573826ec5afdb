"""TVM's ``tvm.contrib.cblas``: matrix products as ``te.extern`` stages that call the packed
functions ``tvm.contrib.cblas.matmul`` / ``batch_matmul`` (``ir/packed.py``: numpy's ``@``,
which runs on numpy's BLAS). They run in the building process only (a library cannot call back
into Python: ``export_library`` refuses them).

>>> C = cblas.matmul(A, B)                 # C = A @ B, a stage named "C"
>>> D = te.compute(C.shape, lambda i, j: C[i, j] + bias)
"""
from __future__ import annotations

from .. import te, tir


def matmul(lhs, rhs, transa: bool = False, transb: bool = False, **kwargs):
    """``lhs @ rhs`` (each transposed first where asked), as an extern stage."""
    n = lhs.shape[1] if transa else lhs.shape[0]
    m = rhs.shape[0] if transb else rhs.shape[1]
    return te.extern((n, m), [lhs, rhs],
                     lambda ins, outs: tir.call_packed("tvm.contrib.cblas.matmul", ins[0], ins[1], outs[0],
                                                       transa, transb),
                     name="C", **kwargs)


def batch_matmul(lhs, rhs, transa: bool = False, transb: bool = False, iterative: bool = False, **kwargs):
    """``lhs[b] @ rhs[b]`` for every batch ``b``, as an extern stage."""
    b = lhs.shape[0]
    n = lhs.shape[2] if transa else lhs.shape[1]
    m = rhs.shape[1] if transb else rhs.shape[2]
    return te.extern((b, n, m), [lhs, rhs],
                     lambda ins, outs: tir.call_packed("tvm.contrib.cblas.batch_matmul", ins[0], ins[1],
                                                       outs[0], transa, transb),
                     name="C", **kwargs)
