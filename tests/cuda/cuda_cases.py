"""The GPU schedules the CUDA tests run: each case makes a schedule at a given size, random inputs
(outputs poisoned with NaN) and the numpy reference of its outputs.

Two sizes per case: ``emu`` is small enough for the CPU emulator (and shows tails, warp-only
reductions, ...), ``gpu`` is what runs on the device machine.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tilecraft.topi import cuda_schedules as cs


@dataclass
class Case:
    name: str
    make: object                 # (**size) -> (schedule, args)
    inputs: object               # (rng, **size) -> list of input arrays
    reference: object            # (inputs, **size) -> list of expected outputs
    out_shapes: object           # (**size) -> [(shape, dtype)]
    emu: dict = field(default_factory=dict)
    gpu: dict = field(default_factory=dict)
    rtol: float = 1e-5
    atol: float = 1e-5


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def _softmax_ref(ins, **k):
    x = ins[0].astype("float64")
    e = np.exp(x - x.max(1, keepdims=True))
    return [e / e.sum(1, keepdims=True)]


def _layer_norm_ref(ins, eps=1e-5, **k):
    x, g, b = (a.astype("float64") for a in ins)
    m = x.mean(1, keepdims=True)
    v = x.var(1, keepdims=True)
    return [(x - m) / np.sqrt(v + eps) * g + b]


def _conv_ref(ins, pad=1, **k):
    d, w = (a.astype("float64") for a in ins)
    n, ci, h, wd = d.shape
    co, _, kh, kw = w.shape
    dp = np.pad(d, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, co, oh, ow))
    for ry in range(kh):
        for rx in range(kw):
            patch = dp[:, :, ry:ry + oh, rx:rx + ow]
            out += np.einsum("ncyx,oc->noyx", patch, w[:, :, ry, rx])
    return [out]


def _pool_ref(ins, size=2, stride=2, **k):
    x = ins[0]
    n, c, h, w = x.shape
    oh, ow = (h - size) // stride + 1, (w - size) // stride + 1
    out = np.full((n, c, oh, ow), -np.inf, x.dtype)
    for ry in range(size):
        for rx in range(size):
            out = np.maximum(out, x[:, :, ry:ry + stride * oh:stride, rx:rx + stride * ow:stride])
    return [out]


CASES = [
    Case("elementwise",
         lambda n, **k: cs.elementwise(None),
         lambda rng, n, **k: [_f32(rng, n), _f32(rng, n)],
         lambda ins, **k: [np.exp(ins[0].astype("float64")) * ins[1] + 1],
         lambda n, **k: [((n,), "float32")],
         emu=dict(n=1001), gpu=dict(n=(1 << 20) + 3)),
    Case("matmul_vthread_shared",
         lambda M, N, K, **k: cs.matmul(M, N, K, **k),
         lambda rng, M, N, K, **k: [_f32(rng, M, K), _f32(rng, K, N)],
         lambda ins, **k: [ins[0].astype("float64") @ ins[1]],
         lambda M, N, **k: [((M, N), "float32")],
         emu=dict(M=128, N=128, K=32), gpu=dict(M=512, N=384, K=256), rtol=1e-4, atol=1e-4),
    Case("matmul_small_tiles_no_double_buffer",
         lambda M, N, K, **k: cs.matmul(M, N, K, block=(32, 64), vthreads=(1, 2), threads=(8, 8),
                                        k_tile=4, double_buffer=False),
         lambda rng, M, N, K, **k: [_f32(rng, M, K), _f32(rng, K, N)],
         lambda ins, **k: [ins[0].astype("float64") @ ins[1]],
         lambda M, N, **k: [((M, N), "float32")],
         emu=dict(M=64, N=64, K=12), gpu=dict(M=256, N=512, K=100), rtol=1e-4, atol=1e-4),
    Case("conv2d_nchw",
         lambda **k: cs.conv2d_nchw(**k),
         lambda rng, N, CI, H, W, CO, **k: [_f32(rng, N, CI, H, W), _f32(rng, CO, CI, 3, 3)],
         _conv_ref,
         lambda N, CO, H, W, **k: [((N, CO, H, W), "float32")],
         emu=dict(N=1, CI=16, H=8, W=8, CO=16, ci_tile=8),
         gpu=dict(N=1, CI=64, H=56, W=56, CO=64), rtol=1e-4, atol=1e-4),
    Case("softmax_warp",
         lambda rows, cols, **k: cs.softmax(rows, cols, **k),
         lambda rng, rows, cols, **k: [_f32(rng, rows, cols)],
         _softmax_ref,
         lambda rows, cols, **k: [((rows, cols), "float32")],
         emu=dict(rows=3, cols=256, threads=32), gpu=dict(rows=100, cols=512, threads=32)),
    Case("softmax_block",
         lambda rows, cols, **k: cs.softmax(rows, cols, **k),
         lambda rng, rows, cols, **k: [_f32(rng, rows, cols)],
         _softmax_ref,
         lambda rows, cols, **k: [((rows, cols), "float32")],
         emu=dict(rows=2, cols=1024, threads=256), gpu=dict(rows=300, cols=4096, threads=256)),
    Case("layer_norm",
         lambda rows, cols, **k: cs.layer_norm(rows, cols, **k),
         lambda rng, rows, cols, **k: [_f32(rng, rows, cols) + 3, _f32(rng, cols), _f32(rng, cols)],
         _layer_norm_ref,
         lambda rows, cols, **k: [((rows, cols), "float32")],
         emu=dict(rows=3, cols=256, threads=64), gpu=dict(rows=128, cols=768), rtol=1e-4, atol=1e-4),
    Case("max_pool2d",
         lambda N, C, H, W, **k: cs.max_pool2d(N, C, H, W, **k),
         lambda rng, N, C, H, W, **k: [_f32(rng, N, C, H, W)],
         _pool_ref,
         lambda N, C, H, W, size=2, stride=2, **k: [((N, C, (H - size) // stride + 1, (W - size) // stride + 1), "float32")],
         emu=dict(N=1, C=3, H=9, W=8, size=3, stride=2), gpu=dict(N=4, C=64, H=56, W=56)),
    Case("row_sum_rfactor",
         lambda n, m, **k: cs.row_sum_rfactor(n, m, **k),
         lambda rng, n, m, **k: [_f32(rng, n, m)],
         lambda ins, **k: [ins[0].astype("float64").sum(1)],
         lambda n, **k: [((n,), "float32")],
         emu=dict(n=40, m=100), gpu=dict(n=4096, m=1000), rtol=1e-4, atol=1e-4),
    Case("matmul_fp16_fp32_acc",
         lambda M, N, K, **k: cs.matmul(M, N, K, dtype="float16", acc="float32", block=(64, 64),
                                        threads=(8, 8)),
         lambda rng, M, N, K, **k: [_f32(rng, M, K).astype("float16"), _f32(rng, K, N).astype("float16")],
         lambda ins, **k: [ins[0].astype("float64") @ ins[1].astype("float64")],
         lambda M, N, **k: [((M, N), "float32")],
         emu=dict(M=64, N=64, K=32), gpu=dict(M=256, N=256, K=512), rtol=1e-3, atol=1e-3),
    Case("elementwise_fp16",
         lambda n, **k: cs.elementwise(n, dtype="float16"),
         lambda rng, n, **k: [_f32(rng, n).astype("float16"), _f32(rng, n).astype("float16")],
         lambda ins, **k: [np.exp(ins[0].astype("float64")) * ins[1] + 1],
         lambda n, **k: [((n,), "float16")],
         emu=dict(n=4096), gpu=dict(n=1 << 20), rtol=1e-2, atol=1e-2),
]

CASES.append(
    Case("transpose_storage_align",
         lambda n, m, **k: cs.transpose(n, m, **k),
         lambda rng, n, m, **k: [_f32(rng, n, m)],
         lambda ins, **k: [ins[0].T.copy()],
         lambda n, m, **k: [((m, n), "float32")],
         emu=dict(n=64, m=96), gpu=dict(n=2048, m=1000)))



def _cast_f64_f16(n, **k):
    from tilecraft import te
    A = te.placeholder((n,), "float64", name="A")
    C = te.compute((n,), lambda i: A[i].astype("float16"), name="C")
    return cs.naive(C), [A, C]


def _near_half_ties(rng, n, **k):
    """float64 values a hair either side of float16 halfway points: rounding twice gets them wrong."""
    h = (rng.standard_normal(n) * 100).astype("float16")
    mid = (h.astype("float64") + np.nextafter(h, np.float16(np.inf)).astype("float64")) / 2
    return [mid + rng.choice([-1.0, 0.0, 1.0], n) * np.abs(mid) * 2.0 ** -40]


CASES.append(
    Case("cast_float64_to_float16", _cast_f64_f16, _near_half_ties,
         lambda ins, **k: [ins[0].astype("float16")],
         lambda n, **k: [((n,), "float16")],
         emu=dict(n=2000), gpu=dict(n=1 << 20), rtol=0, atol=0))

CASE_IDS = [c.name for c in CASES]


def make_arrays(case: Case, rng, size: dict):
    ins = case.inputs(rng, **size)
    outs = [np.full(shape, np.nan, dtype) for shape, dtype in case.out_shapes(**size)]
    return ins, outs


def check_outputs(case: Case, ins, outs, size: dict, where: str):
    for got, want in zip(outs, case.reference(ins, **size)):
        assert not np.isnan(got).any(), f"{case.name} ({where}): some outputs were never written"
        np.testing.assert_allclose(got.astype("float64"), want, rtol=case.rtol, atol=case.atol,
                                   err_msg=f"{case.name} ({where})")


def check_emulated(case: Case, rng, trials: int = 1, arrays=make_arrays, check=check_outputs,
                   needle: str | None = None) -> None:
    """``case`` at its emulator size: emulated ``trials`` times (fresh inputs, freshly poisoned
    outputs) and checked; then its CUDA C (holding ``needle`` when given) compiled for sm_90 at
    both sizes, or a skip that says nvcc is absent."""
    import pytest

    import tilecraft
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
    from tilecraft.codegen.cuda_emulate import emulate

    s, args = case.make(**case.emu)
    func = tilecraft.lower(s, args, target="cuda")
    for _ in range(trials):
        ins, outs = arrays(case, rng, case.emu)
        emulate(func, ins + outs)
        check(case, ins, outs, case.emu, "emulator")
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and emulated but not compiled")
    src = generate_cuda(func)
    if needle is not None:
        assert needle in src
    assert len(compile_cuda(src, "sm_90")) > 0
    s, args = case.make(**case.gpu)
    compile_cuda(generate_cuda(tilecraft.lower(s, args, target="cuda")), "sm_90")


def check_on_gpu(case: Case, rng, trials: int = 1, arrays=make_arrays, check=check_outputs,
                 needle: str | None = None) -> None:
    """``case`` at its GPU size, built (its source holding ``needle`` when given) and run
    ``trials`` times on fresh inputs (a race shows as a wrong or varying result), or a skip that
    says why kernels cannot run here."""
    import pytest

    import tilecraft
    from tilecraft.runtime import cuda_ndarray

    from .test_cuda_ops import gpu_available

    why = gpu_available()
    if why:
        pytest.skip(f"{why}: the kernel was checked by test_emulated (emulator + nvcc) only")
    s, args = case.make(**case.gpu)
    mod = tilecraft.build(s, args, target="cuda")
    if needle is not None:
        assert needle in mod.get_source()
    dev = tilecraft.cuda(0)
    for _ in range(trials):
        ins, outs = arrays(case, rng, case.gpu)
        d_ins = [cuda_ndarray.array(a, dev) for a in ins]
        d_outs = [cuda_ndarray.array(a, dev) for a in outs]
        mod(*d_ins, *d_outs)
        check(case, ins, [d.numpy() for d in d_outs], case.gpu, "gpu")
