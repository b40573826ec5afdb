"""Hybrid scripts on the GPU (TVM's ``test_bind`` and ``test_allocate``'s CUDA halves, in spirit):
``bind("threadIdx.x", n)`` / ``bind("blockIdx.x", n)`` loops become the kernel's launch, a
``shared`` allocation is shared by the block (barrier inserted), a ``local`` one is per thread.
``outer_bound_axes``: a script's plain loops bound to blocks and threads by the schedule
(``HybridOp.axis``; a split tail guarded). ``test_emulated``: lowered for CUDA, run in the lock-step emulator on fresh inputs with poisoned
outputs and compiled with nvcc; ``test_gpu``: the same on a GPU (skipped without one)."""
from __future__ import annotations

import numpy as np
import pytest

from tilecraft import te

from .cuda_cases import Case, check_emulated, check_on_gpu

pytestmark = pytest.mark.cuda


@te.hybrid.script
def vec_add_threads(a, b):
    c = output_tensor(a.shape, "float32")
    for tx in bind("threadIdx.x", a.shape[0]):
        c[tx] = a[tx] + b[tx]
    return c


@te.hybrid.script
def vec_add_grid(a, b):
    c = output_tensor(a.shape, "float32")
    for bx in bind("blockIdx.x", ceil_div(a.shape[0], 128)):
        for tx in bind("threadIdx.x", 128):
            if bx * 128 + tx < a.shape[0]:
                c[bx * 128 + tx] = a[bx * 128 + tx] + b[bx * 128 + tx]
    return c


@te.hybrid.script
def share_vec_add(a, b):
    c = output_tensor((256,), "float32")
    for i in bind("threadIdx.x", 256):
        shared = allocate((256,), "float32", "shared")
        local = allocate((1,), "float32", "local")
        shared[i] = a[255 - i]
        local[0] = b[i]
        c[i] = shared[255 - i] + local[0]
    return c


@te.hybrid.script
def row_sum(a):
    c = output_tensor((a.shape[0],), a.dtype)
    total = allocate((1,), a.dtype, "local")
    for i in bind("threadIdx.x", a.shape[0]):
        total[0] = 0.0
        for k in const_range(a.shape[1]):
            total[0] += a[i, k]
        c[i] = total[0]
    return c


@te.hybrid.script
def outer_plain(a, b):
    c = output_tensor((a.shape[0], b.shape[0]), "float32")
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            c[i, j] = a[i] * b[j]
    return c


def _bind_outer(s, out):
    """The script's plain loops (its axes, TVM's test_schedule) bound by the schedule."""
    i, j = out.op.axis
    jo, ji = s[out].split(j, factor=32)
    s[out].reorder(i, jo, ji)
    s[out].bind(i, te.thread_axis("blockIdx.x"))
    s[out].bind(jo, te.thread_axis("blockIdx.y"))
    s[out].bind(ji, te.thread_axis("threadIdx.x"))


def _case(name, script, shapes, reference, emu, gpu, schedule=None):
    def make(n):
        ins = [te.placeholder(s(n), name=f"in{k}") for k, s in enumerate(shapes)]
        out = script(*ins)
        s = te.create_schedule(out.op)
        if schedule is not None:
            schedule(s, out)
        return s, [*ins, out]

    def out_shapes(n):
        s, args = make(n)
        return [(tuple(int(d.value) for d in args[-1].shape), "float32")]
    return Case(name, make, lambda rng, n: [rng.standard_normal(s(n)).astype("float32") for s in shapes],
                lambda ins, n: [reference(*[x.astype("float64") for x in ins])], out_shapes,
                emu=dict(n=emu), gpu=dict(n=gpu))


CASES = [
    _case("vec_add_threads", vec_add_threads, [lambda n: (n,)] * 2, lambda a, b: a + b, 200, 1000),
    _case("vec_add_grid", vec_add_grid, [lambda n: (n,)] * 2, lambda a, b: a + b, 300, 100_000),
    _case("share_vec_add", share_vec_add, [lambda n: (256,)] * 2, lambda a, b: a + b, 0, 0),
    _case("row_sum", row_sum, [lambda n: (n, 5)], lambda a: a.sum(1), 64, 512),
    _case("outer_bound_axes", outer_plain, [lambda n: (n,), lambda n: (70,)], lambda a, b: np.outer(a, b), 5, 300,
          schedule=_bind_outer),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_emulated(case, rng):
    check_emulated(case, rng)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gpu(case, rng):
    check_on_gpu(case, rng, trials=2)


def test_bind_loops_are_the_launch():
    import tilecraft
    a, b = te.placeholder((300,), name="a"), te.placeholder((300,), name="b")
    c = vec_add_grid(a, b)
    func = tilecraft.lower(te.create_schedule(c.op), [a, b, c], target="cuda")
    assert "grid(3, 1, 1) block(128, 1, 1)" in str(func)
    np.testing.assert_allclose(vec_add_grid(np.ones(300, "float32"), np.ones(300, "float32")), 2.0)
