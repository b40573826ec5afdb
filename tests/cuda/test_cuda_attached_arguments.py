"""CUDA: a stage attached with compute_at that is also an argument (see
``schedule/passes/gpu_attached_args.py``). Attached inside every thread-bound loop, each thread
computes and stores what it reads itself: emulated, compiled with nvcc, run on a GPU where there
is one. Attached where threads would share its global buffer: refused, naming the stage."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.schedule.passes.gpu_kernels import GPULoweringError

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda


def _graph(rows, cols):
    A = te.placeholder((rows, cols), name="A")
    B = te.compute((rows, cols), lambda i, j: te.exp(A[i, j]) - 1.0, name="B")
    C = te.compute((rows, cols), lambda i, j: B[i, j] * A[i, j], name="C")
    return A, B, C


def _schedule(rows, cols, level="thread"):
    A, B, C = _graph(rows, cols)
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=32)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.y"))
    s[C].bind(jo, te.thread_axis("blockIdx.x"))
    s[C].bind(ji, te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], ji if level == "thread" else jo)
    return s, [A, B, C]


def _check(outs, a):
    b = np.exp(a.astype("float64")) - 1
    np.testing.assert_allclose(outs[0], b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[1], b * a, rtol=1e-5, atol=1e-6)


def test_attached_inside_the_thread_loop_is_emulated_and_compiled(rng):
    rows, cols = 3, 70                          # 70 % 32: a tail of threads
    s, args = _schedule(rows, cols)
    func = tilecraft.lower(s, args, target="cuda")
    a = rng.uniform(-1, 1, (rows, cols)).astype("float32")
    outs = [np.full((rows, cols), np.nan, "float32") for _ in range(2)]
    emulate(func, [a] + outs)
    _check(outs, a)
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and emulated but not compiled")
    assert len(compile_cuda(generate_cuda(func), "sm_90")) > 0


def test_attached_inside_the_thread_loop_on_the_gpu(rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked in the emulator by the test above")
    from tilecraft.runtime import cuda_ndarray
    rows, cols = 37, 1000
    s, args = _schedule(rows, cols)
    mod = tilecraft.build(s, args, target="cuda")
    a = rng.uniform(-1, 1, (rows, cols)).astype("float32")
    dev = tilecraft.cuda(0)
    x = cuda_ndarray.array(a, dev)
    outs = [cuda_ndarray.array(np.full((rows, cols), np.nan, "float32"), dev) for _ in range(2)]
    mod(x, *outs)
    _check([o.numpy() for o in outs], a)


def test_attached_at_the_block_level_is_refused():
    s, args = _schedule(3, 70, level="block")
    with pytest.raises(GPULoweringError, match=r"stage 'B' is an argument attached with compute_at at loop "
                                               r"'j.outer' of stage 'C', outside the loop bound to threadIdx.x"):
        tilecraft.lower(s, args, target="cuda")
    A, B, C = args
    tilecraft.lower(s, [A, C], target="cuda")       # not an argument: a private buffer, accepted


def test_attached_with_its_own_thread_loop_is_refused():
    A, B, C = _graph(3, 64)
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=32)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(ji, te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], jo)
    s[B].bind(s[B].split(B.op.axis[1], factor=32)[1], te.thread_axis("threadIdx.x"))
    with pytest.raises(GPULoweringError, match=r"stage 'B' is an argument .* with its own loop bound to "
                                               r"threadIdx.x: on the GPU its threads would share B's global buffer"):
        tilecraft.lower(s, [A, B, C], target="cuda")
