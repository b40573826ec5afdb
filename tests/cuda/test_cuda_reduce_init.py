"""CUDA: reductions with ``init=`` across threads (``gpu_thread_reduce``): each thread folds from
the identity and the start value is combined once into the block's result. Emulated against
numpy; the CUDA C is compiled with nvcc where it is installed and run where there is a GPU."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.testing import assert_sum_close

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda


def _run(s, args, arrays):
    """Emulate (arrays written in place), compile with nvcc, and on a GPU run the kernel too and
    require the same outputs as the emulator (within float rounding)."""
    func = tilecraft.lower(s, args, target="cuda")
    inputs = [a.copy() for a in arrays]
    emulate(func, arrays)
    if find_nvcc() is not None:
        assert len(compile_cuda(generate_cuda(func), "sm_90")) > 0
    if gpu_available() is None:
        from tilecraft.runtime import cuda_ndarray
        dev = tilecraft.cuda(0)
        d = [cuda_ndarray.array(a, dev) for a in inputs]
        tilecraft.build(s, args, target="cuda")(*d)
        for got, want in zip(d, arrays):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("output", ["global", "attached"])
def test_cross_thread_sum_with_init_from_a_tensor(rng, output):
    rows, cols = 5, 256
    A = te.placeholder((rows, cols), name="A")
    I = te.placeholder((rows,), name="I")
    k = te.reduce_axis((0, cols), name="k")
    S = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k, init=I[i]), name="S")
    s = te.create_schedule(S.op)
    if output == "global":
        s[S].bind(S.op.axis[0], te.thread_axis("blockIdx.x"))
        ko, ki = s[S].split(k, factor=64)
        s[S].bind(ki, te.thread_axis("threadIdx.x"))
        args, scale = [A, I, S], 1.0
    else:                                 # a local reduction, attached to its consumer's block
        O = te.compute((rows,), lambda i: S[i] * 2.0, name="O")
        s = te.create_schedule(O.op)
        s[O].bind(O.op.axis[0], te.thread_axis("blockIdx.x"))
        s[S].compute_at(s[O], O.op.axis[0])
        ko, ki = s[S].split(s[S].op.reduce_axis[0], factor=64)
        s[S].bind(ki, te.thread_axis("threadIdx.x"))
        args, scale = [A, I, O], 2.0          # O = 2 S: exact
    a = rng.uniform(-1, 1, (rows, cols)).astype("float32")
    i0 = rng.uniform(-1, 1, rows).astype("float32")
    out = np.full(rows, np.nan, "float32")
    _run(s, args, [a, i0, out])
    # 256 terms and the init in float32, in the threads' order, against float64
    assert_sum_close(out, scale * (a.astype("float64").sum(1) + i0),
                     scale * (np.abs(a).sum(1, dtype="float64") + np.abs(i0)), cols + 1)


@pytest.mark.parametrize("reducer", ["sum", "max"])
def test_cross_thread_reduction_with_a_constant_init_after_rfactor(rng, reducer):
    rows, cols = 4, 512
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    M = te.compute((rows,), lambda i: getattr(te, reducer)(A[i, k], axis=k, init=0.5), name="M")
    s = te.create_schedule(M.op)
    ko, ki = s[M].split(k, factor=32)
    MF = s.rfactor(M, ki)
    s[M].bind(s[M].op.axis[0], te.thread_axis("blockIdx.x"))
    s[M].bind(s[M].op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    s[MF].compute_at(s[M], s[M].op.reduce_axis[0])
    a = rng.uniform(-1, 1, (rows, cols)).astype("float32")
    a[1] -= 2.0                             # this row's maximum is below the init
    out = np.full(rows, np.nan, "float32")
    _run(s, [A, M], [a, out])
    if reducer == "sum":
        assert_sum_close(out, a.astype("float64").sum(1) + 0.5, np.abs(a).sum(1, dtype="float64") + 0.5, cols + 1)
    else:
        np.testing.assert_array_equal(out, np.maximum(a.max(1), 0.5))
