"""``double_buffer()`` is an attribute of the lowered IR (``# attr double_buffer_scope(X) = 1``
around the tile's allocation, emitted by ``schedule_ops``), which the GPU passes read. So a
function lowered without a target and built for CUDA later (TVM's ``build(lower(...))``) keeps
its double buffering."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.topi import cuda_schedules as cs
from tilecraft.codegen.cuda import for_gpu, generate_cuda
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.ir.functor import post_order_visit
from tilecraft.ir.stmt import Allocate, AttrStmt
from tilecraft.schedule.passes.gpu_kernels import GPULoweringError
from tilecraft.schedule.passes.gpu_lower import kernels_of

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda

SHAPE = dict(block=(16, 16), threads=(4, 4), vthreads=(1, 1), k_tile=8)


def _marks(func) -> dict:
    """{buffer name: the scope of the allocation under the mark} for every double_buffer_scope."""
    out = {}

    def f(n):
        if isinstance(n, AttrStmt) and n.key == "double_buffer_scope":
            assert isinstance(n.body, Allocate) and n.body.buffer.name == n.node, n
            out[n.node] = n.body.buffer.scope
    post_order_visit(func.body, f)
    return out


def _shared(func) -> dict:
    (info, _), = kernels_of(func.body)[1]
    return {b.name: int(b.shape[0].value) for b in info.shared}


def test_lowered_ir_marks_the_double_buffered_tiles():
    s, args = cs.matmul(32, 32, 32, double_buffer=True, **SHAPE)
    assert _marks(tilecraft.lower(s, args)) == {"AT": "shared", "B.shared": "shared"}
    assert "# attr double_buffer_scope(B.shared) = 1" in str(tilecraft.lower(s, args))
    s, args = cs.matmul(32, 32, 32, double_buffer=False, **SHAPE)
    assert _marks(tilecraft.lower(s, args)) == {}


def test_build_of_a_function_lowered_without_target_keeps_double_buffering(rng):
    # was: for_gpu(lower(s, args)) made single buffers (the marks travelled beside the IR)
    s, args = cs.matmul(32, 32, 32, double_buffer=True, **SHAPE)
    late = for_gpu(tilecraft.lower(s, args))
    s, args = cs.matmul(32, 32, 32, double_buffer=True, **SHAPE)
    direct = tilecraft.lower(s, args, target="cuda")
    assert _shared(late) == _shared(direct) == {"AT": 2 * 8 * 16, "B.shared": 2 * 8 * 16}
    assert generate_cuda(late) == generate_cuda(direct)
    assert _marks(direct) == {}                        # the GPU pass consumed the marks
    a, b = rng.standard_normal((32, 32)).astype("float32"), rng.standard_normal((32, 32)).astype("float32")
    c = np.full((32, 32), np.nan, "float32")
    emulate(late, [a, b, c])
    np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-5, atol=1e-5)
    if gpu_available() is None:       # and on a GPU: tc.build of the function lowered without target
        from tilecraft.runtime import cuda_ndarray
        s, args = cs.matmul(32, 32, 32, double_buffer=True, **SHAPE)
        mod = tilecraft.build(tilecraft.lower(s, args), target="cuda")
        assert "float AT[256];" in mod.get_source() and "float B_shared[256];" in mod.get_source()
        dev = tilecraft.cuda(0)
        d = [cuda_ndarray.array(x, dev) for x in (a, b, np.full((32, 32), np.nan, "float32"))]
        mod(*d)
        np.testing.assert_allclose(d[2].numpy(), c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("K", [8, 5])
def test_a_marked_tile_whose_loop_runs_once_keeps_one_buffer(rng, K):
    # K <= k_tile: one tile, nothing to overlap with; built from a function lowered without target
    s, args = cs.matmul(16, 24, K, double_buffer=True, **SHAPE)
    plain = tilecraft.lower(s, args)
    assert _marks(plain) == {"AT": "shared", "B.shared": "shared"}
    func = for_gpu(plain)
    assert _shared(func) == {"AT": K * 16, "B.shared": K * 16}
    a, b = rng.standard_normal((16, K)).astype("float32"), rng.standard_normal((K, 24)).astype("float32")
    c = np.full((16, 24), np.nan, "float32")
    emulate(func, [a, b, c])
    np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-5, atol=1e-5)


def test_double_buffer_at_the_block_loop():
    # refused by lower(target="cuda"), which sees the schedule; a function lowered without a
    # target keeps one buffer there (the tile is at no loop in time)
    def schedule():
        A = te.placeholder((64, 64), name="A")
        B = te.compute((64, 64), lambda i, j: A[i, j] * 2, name="B")
        s = te.create_schedule(B.op)
        AS = s.cache_read(A, "shared", [B])
        i, j = B.op.axis
        s[B].bind(i, te.thread_axis("blockIdx.x"))
        s[B].bind(j, te.thread_axis("threadIdx.x"))
        s[AS].compute_at(s[B], i)
        s[AS].bind(s[AS].op.axis[1], te.thread_axis("threadIdx.x"))
        s[AS].double_buffer()
        return s, [A, B]
    with pytest.raises(GPULoweringError, match=r"double_buffer on 'A.shared': the stage is not attached inside a "
                                               r"loop of the kernel"):
        tilecraft.lower(*schedule(), target="cuda")
    assert _shared(for_gpu(tilecraft.lower(*schedule()))) == {"A.shared": 64}
