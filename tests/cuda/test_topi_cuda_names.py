"""TVM's ``topi.cuda`` schedule and compute names (``tilecraft/topi/cuda.py``), called as a TVM
script calls them: the outputs (a tensor or a list) of a ``topi`` compute and its epilogue,
under ``with Target("cuda")``. ``test_emulated``: each lowered for CUDA, run in the lock-step
emulator on fresh inputs with NaN-poisoned outputs (shapes with tails) against numpy, and
compiled with nvcc; ``test_gpu``: the same at larger shapes on a GPU (skipped without one)."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tvm
from tilecraft import te, topi
from tilecraft.topi.testing import conv2d_nchw_python

from .cuda_cases import Case, check_emulated, check_on_gpu

pytestmark = pytest.mark.cuda


def _case(name, shapes, build, reference, emu, gpu, rtol=1e-5, atol=1e-5):
    """``build(*placeholders)`` → ``(out, schedule function)``, called under ``Target("cuda")``."""
    def make(**size):
        ins = [te.placeholder(sh, name=f"in{k}") for k, sh in enumerate(shapes(**size))]
        with tvm.target.Target("cuda"):
            out, sched = build(*ins)
            s = sched([out])
        return s, [*ins, out]

    def out_shapes(**size):
        _, args = make(**size)
        return [(topi.utils.get_const_tuple(args[-1].shape), "float32")]

    def inputs(rng, **size):
        return [rng.standard_normal(sh).astype("float32") for sh in shapes(**size)]
    return Case(name, make, inputs, lambda ins, **size: [reference(*[x.astype("float64") for x in ins])],
                out_shapes, emu=emu, gpu=gpu, rtol=rtol, atol=atol)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _avg_pool_3x3_s2_p1(x):
    """Average over the window's pixels inside the image (count_include_pad=False)."""
    N, C, H, W = x.shape
    OH, OW = (H + 2 - 3) // 2 + 1, (W + 2 - 3) // 2 + 1
    out = np.zeros((N, C, OH, OW))
    for y in range(OH):
        for xx in range(OW):
            y0, y1 = max(y * 2 - 1, 0), min(y * 2 + 2, H)
            x0, x1 = max(xx * 2 - 1, 0), min(xx * 2 + 2, W)
            out[:, :, y, xx] = x[:, :, y0:y1, x0:x1].mean(axis=(2, 3))
    return out


def _max_pool_2x2(x):
    N, C, H, W = x.shape
    return x[:, :, :H // 2 * 2, :W // 2 * 2].reshape(N, C, H // 2, 2, W // 2, 2).max(axis=(3, 5))


CASES = [
    _case("injective_broadcast", lambda n, m: [(n, m), (m,)],
          lambda a, b: (topi.nn.relu(a * b + a), topi.cuda.schedule_injective),
          lambda a, b: np.maximum(a * b + a, 0), dict(n=37, m=29), dict(n=1000, m=1003)),
    _case("reduce_all", lambda n, m: [(n, m, 5), (m, 5)],
          lambda a, b: (topi.sum(topi.elemwise_sum([a + b, a * b]) / 2.0), topi.cuda.schedule_reduce),
          lambda a, b: np.asarray(((a + b + a * b) / 2).sum()), dict(n=23, m=10), dict(n=400, m=100),
          rtol=1e-4, atol=1e-4),
    _case("reduce_rows_then_scale", lambda n, m: [(n, m)],
          lambda a: (topi.sum(a, axis=1) * 2.0, topi.cuda.schedule_reduce),
          lambda a: a.sum(1) * 2, dict(n=45, m=37), dict(n=4000, m=999), rtol=1e-4, atol=1e-4),
    _case("reduce_max_keepdims", lambda n, m: [(n, m, 3)],
          lambda a: (topi.max(a, axis=(1, 2), keepdims=True), topi.cuda.schedule_reduce),
          lambda a: a.max(axis=(1, 2), keepdims=True), dict(n=33, m=21), dict(n=2000, m=300)),
    _case("softmax", lambda n, m: [(n, m)], lambda x: (topi.nn.softmax(x), topi.cuda.schedule_softmax),
          _softmax, dict(n=6, m=150), dict(n=512, m=1000), rtol=1e-5, atol=1e-6),
    _case("pool_avg", lambda n, hw: [(n, 3, hw, hw)],
          lambda x: (topi.nn.pool2d(x, "avg", (3, 3), (2, 2), (1, 1, 1, 1)),
                     lambda outs: topi.cuda.schedule_pool(outs, "NCHW")),
          _avg_pool_3x3_s2_p1, dict(n=2, hw=9), dict(n=8, hw=113)),
    _case("pool_max_relu", lambda n, hw: [(n, 3, hw, hw)],
          lambda x: (topi.nn.relu(topi.nn.pool2d(x, "max", (2, 2), (2, 2), (0, 0, 0, 0))),
                     lambda outs: topi.cuda.schedule_pool(outs, "NCHW")),
          lambda x: np.maximum(_max_pool_2x2(x), 0), dict(n=2, hw=11), dict(n=8, hw=224)),
    _case("adaptive_pool_global_avg", lambda n, hw: [(n, 5, hw, hw + 1)],
          lambda x: (topi.nn.global_pool(x, "avg"), topi.cuda.schedule_adaptive_pool),
          lambda x: x.mean(axis=(2, 3), keepdims=True), dict(n=2, hw=7), dict(n=32, hw=56), rtol=1e-4, atol=1e-5),
    _case("conv2d_nchw_relu", lambda n, hw: [(n, 3, hw, hw), (8, 3, 5, 5)],
          lambda d, k: (topi.nn.relu(topi.cuda.conv2d_nchw(d, k, 1, 2, 1)), topi.cuda.schedule_conv2d_nchw),
          lambda d, k: np.maximum(conv2d_nchw_python(d, k, 1, 2), 0), dict(n=1, hw=12), dict(n=2, hw=224),
          rtol=1e-4, atol=1e-4),
    _case("conv2d_nchw_stride2_nn", lambda n, hw: [(n, 16, hw, hw), (32, 16, 3, 3)],
          lambda d, k: (topi.nn.conv2d_nchw(d, k, 2, 1, 1), topi.cuda.schedule_conv2d_nchw),
          lambda d, k: conv2d_nchw_python(d, k, 2, 1), dict(n=1, hw=10), dict(n=1, hw=56), rtol=1e-4, atol=1e-4),
    _case("conv2d_nchw_dilated_asym", lambda n, hw: [(n, 4, hw, hw + 2), (8, 4, 3, 3)],
          lambda d, k: (topi.nn.conv2d_nchw(d, k, 1, (1, 0, 2, 1), 2), topi.cuda.schedule_conv2d_nchw),
          lambda d, k: _dilated_ref(d, k), dict(n=1, hw=9), dict(n=1, hw=64), rtol=1e-4, atol=1e-4),
    _case("dense_small_batch_bias_relu", lambda n, k: [(n, k), (21, k), (21,)],
          lambda d, w, b: (topi.nn.relu(topi.cuda.dense_small_batch(d, w, b)),
                           topi.cuda.schedule_dense_small_batch),
          lambda d, w, b: np.maximum(d @ w.T + b, 0), dict(n=3, k=70), dict(n=16, k=4096), rtol=1e-4, atol=1e-4),
    _case("dense_large_batch", lambda n, k: [(n, k), (19, k)],
          lambda d, w: (topi.cuda.dense_large_batch(d, w), topi.cuda.schedule_dense_large_batch),
          lambda d, w: d @ w.T, dict(n=37, k=9), dict(n=1024, k=512), rtol=1e-4, atol=1e-4),
    _case("batch_matmul_relu", lambda b, n: [(b, n, 9), (b, 19, 9)],
          lambda x, y: (topi.nn.relu(topi.cuda.batch_matmul(x, y)), topi.cuda.schedule_batch_matmul),
          lambda x, y: np.maximum(x @ y.transpose(0, 2, 1), 0), dict(b=2, n=17), dict(b=12, n=384),
          rtol=1e-4, atol=1e-4),
]


def _dilated_ref(d, k):
    """Dilation 2, padding (top 1, left 0, bottom 2, right 1): a plain loop over the taps."""
    dp = np.pad(d, ((0, 0), (0, 0), (1, 2), (0, 1)))
    N, C, H, W = dp.shape
    CO, _, KH, KW = k.shape
    OH, OW = H - (KH - 1) * 2, W - (KW - 1) * 2
    out = np.zeros((N, CO, OH, OW))
    for ry in range(KH):
        for rx in range(KW):
            patch = dp[:, :, ry * 2:ry * 2 + OH, rx * 2:rx * 2 + OW]
            out += np.einsum("nchw,oc->nohw", patch, k[:, :, ry, rx])
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_emulated(case, rng):
    check_emulated(case, rng)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gpu(case, rng):
    check_on_gpu(case, rng, trials=2)


def test_tvm_argument_forms():
    """A tensor or a list of tensors; ``tvm.target.cuda()`` as the context; the schedule of an
    elementwise stage is one thread per element (the TVM names are the ones the tutorial uses)."""
    A = te.placeholder((100,), name="A")
    B = topi.nn.relu(A)
    with tvm.target.cuda():
        for outs in (B, [B]):
            text = str(tvm.lower(topi.cuda.schedule_injective(outs), [A, B], target="cuda"))
            assert "threadIdx.x" in text and "blockIdx.x" in text
    assert str(tvm.target.cuda(arch="sm_90")) == "cuda -arch=sm_90"


def test_conv2d_nchw_takes_the_tuned_tiles(rng):
    """Under apply_history_best with a record of the topi/conv2d_nchw.cuda workload the schedule
    takes the record's tiles (the block shape follows them), and the kernel still computes the
    convolution (emulated); without the record: the template's fallback tiles."""
    from tilecraft import autotune
    from tilecraft.codegen.cuda_emulate import emulate
    import tilecraft.topi.conv2d_cuda  # noqa: F401  (registers the template)
    args = (1, 8, 8, 8, 16, 3, 3, 1, 1, "float32")
    task = autotune.task.create("topi/conv2d_nchw.cuda", args=args, target="cuda")
    want = {"tile_co": 4, "co_per_thread": 2, "tile_y": 4, "tile_x": 8, "x_per_thread": 2, "ci_tile": 4}
    cfg = next(c for c in task.config_space if all(c[k].val == v for k, v in want.items()))
    records = [(autotune.MeasureInput(task.target, task, cfg), autotune.MeasureResult((1e-3,), 0))]

    def lowered():
        d = te.placeholder((1, 8, 8, 8), name="d")
        k = te.placeholder((16, 8, 3, 3), name="k")
        with tvm.target.Target("cuda"):
            out = topi.nn.relu(topi.cuda.conv2d_nchw(d, k, 1, 1, 1))
            s = topi.cuda.schedule_conv2d_nchw(out)
        return tvm.lower(s, [d, k, out], target="cuda")
    with autotune.apply_history_best(records):
        f = lowered()
    # threads: tile_x / x_per_thread, tile_y, tile_co / co_per_thread; blocks: 16/4 * 8/4 * 8/8
    assert "grid(8, 1, 1) block(4, 4, 2)" in str(f)
    with pytest.warns(UserWarning, match="no tuned configuration"):
        assert "grid(8, 1, 1) block(4, 4, 2)" not in str(lowered())
    d, k = rng.standard_normal((1, 8, 8, 8)).astype("float32"), rng.standard_normal((16, 8, 3, 3)).astype("float32")
    out = np.full((1, 16, 8, 8), np.nan, "float32")
    emulate(f, [d, k, out])
    np.testing.assert_allclose(out, np.maximum(conv2d_nchw_python(d, k, 1, 1), 0), rtol=1e-4, atol=1e-4)


def test_schedule_errors():
    A = te.placeholder((10, 10), name="A")
    with pytest.raises(ValueError, match="topi.cuda.schedule_conv2d_nchw: no conv2d_nchw stage"):
        topi.cuda.schedule_conv2d_nchw(topi.nn.relu(A))
    with pytest.raises(ValueError, match="topi.cuda.schedule_softmax: expected the output of topi.nn.softmax"):
        topi.cuda.schedule_softmax(topi.nn.relu(A))
    with pytest.raises(ValueError, match="topi.cuda.schedule_softmax: only a softmax over the last axis"):
        topi.cuda.schedule_softmax(topi.nn.softmax(A, axis=0))
    with pytest.raises(TypeError, match="takes a tensor or a list of tensors"):
        topi.cuda.schedule_injective("A")


def test_a_buffer_named_like_a_cuda_function_is_renamed():
    """``topi.max``'s stage is named ``max``: as a C variable it hid CUDA's ``max`` (nvcc: "expression
    preceding parentheses of apparent call must have function type"); it is ``max_1`` now."""
    from tilecraft.codegen.cuda import generate_cuda
    A = te.placeholder((8, 40), name="exp")
    M = topi.max(A, axis=1)
    with tvm.target.Target("cuda"):
        s = topi.cuda.schedule_reduce(M)
    src = generate_cuda(tvm.lower(s, [A, M], target="cuda"))
    assert "max_1[" in src and "exp_1[" in src and " max[" not in src and "max(max_red[0], exp_1[" in src
