"""conv2d NHWC on sm_90a's wgmma (topi/conv2d_nhwc_wgmma.py): the implicit GEMM on the wgmma
pipeline with the producer gathering A (cp.async, zero-fill in the padding).

Without a GPU: the model of the kernel (the gather into the poisoned swizzled ring with the C's
index arithmetic, the descriptors, each wgmma by its TE definition) against a float64 numpy
convolution on fresh random inputs (padding, stride 2, 1×1, several channel steps per tap, the
block tiles 64/128/256 × 64/128/256), every error message, and nvcc compiling the kernel for
sm_90a; on a GPU (``-m cuda``) the kernel itself against torch in float64, output poisoned.
"""
from __future__ import annotations

import numpy as np
import pytest

from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.topi.conv2d_nhwc_tensorcore import out_size
from tilecraft.topi.conv2d_nhwc_wgmma import (ConvWgmma, check_conv_wgmma, conv2d_nhwc_wgmma,
                                               conv2d_nhwc_wgmma_source, model_conv_wgmma)

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda


def _inputs(rng, N, H, W, C, K, R, S):
    x = rng.uniform(-1, 1, (N, H, W, C)).astype("float16")
    w = (rng.uniform(-1, 1, (K, R, S, C)) / np.sqrt(R * S * C)).astype("float16")
    return x, w


def _reference(x, w, stride, pad):
    """float64 numpy convolution, (N·OH·OW, K)."""
    N, H, W, C = x.shape
    K, R, S, _ = w.shape
    OH, OW = out_size(H, W, R, S, stride, pad)
    xp = np.zeros((N, H + 2 * pad, W + 2 * pad, C))
    xp[:, pad:pad + H, pad:pad + W] = x
    y = np.zeros((N, OH, OW, K))
    for r in range(R):
        for s in range(S):
            win = xp[:, r:r + stride * (OH - 1) + 1:stride, s:s + stride * (OW - 1) + 1:stride]
            y += (win.reshape(-1, C) @ w[:, r, s].astype(np.float64).T).reshape(y.shape)
    return y.reshape(-1, K)


def _rel_err(got, want) -> float:
    return float(np.linalg.norm(got.astype("float64") - want) / np.linalg.norm(want))


# (N, H, W, C, K, R, S, stride, pad), block, stages: padding on every side, stride 2 (with its odd
# border), 1x1, two channel steps per tap (C=128), more steps than stages (the ring wraps), a block
# spanning images (M tile across n), bm 64/128/256 and bn 64/128/256
CASES = [
    ((2, 8, 8, 64, 64, 3, 3, 1, 1), (128, 64), 3),
    ((1, 15, 15, 128, 128, 3, 3, 2, 1), (64, 128), 4),
    ((2, 8, 8, 128, 64, 1, 1, 1, 0), (128, 64), 3),
    ((4, 4, 4, 64, 256, 3, 3, 1, 1), (64, 256), 5),
    ((2, 16, 6, 64, 128, 3, 1, 1, 1), (256, 128), 4),
]


@pytest.mark.parametrize("shape,block,stages", CASES, ids=[f"{s[1]}x{s[2]}x{s[3]}_k{s[4]}_{s[5]}x{s[6]}_s{s[7]}"
                                                           f"_p{s[8]}_{b[0]}x{b[1]}" for s, b, _ in CASES])
def test_model_against_numpy(shape, block, stages, rng):
    N, H, W, C, K, R, S, st, pad = shape
    x, w = _inputs(rng, N, H, W, C, K, R, S)
    got = model_conv_wgmma(x, w, st, pad, block=block, stages=stages)
    assert not np.isnan(got).any()          # every step's bytes landed in the poisoned ring
    assert _rel_err(got, _reference(x, w, st, pad)) < 1e-5


def test_model_bf16_against_numpy(rng):
    """bfloat16: the ring holds the 16-bit patterns (64 channels a step), read back as bfloat16."""
    from tilecraft.ir.dtype import round_bfloat16
    x = round_bfloat16(rng.uniform(-1, 1, (1, 15, 15, 128)).astype("float32"))
    w = round_bfloat16((rng.uniform(-1, 1, (128, 3, 3, 128)) / 34).astype("float32"))
    got = model_conv_wgmma(x, w, 2, 1, block=(64, 128), stages=4, dtype="bfloat16")
    assert not np.isnan(got).any()
    assert _rel_err(got, _reference(x, w, 2, 1)) < 1e-5
    src = conv2d_nhwc_wgmma_source(1, 15, 15, 128, 128, 3, 3, 2, 1, "bfloat16", "bfloat16", block=(64, 128), stages=4)
    assert "f32.bf16.bf16" in src and "tc_wgmma_conv_a<64, __nv_bfloat16>" in src
    if find_nvcc() is not None:
        assert len(compile_cuda(src, "sm_90a")) > 0


def test_model_sees_a_dropped_zero_fill(rng, monkeypatch):
    """The model is not blind to the padding: a gather that reads the clamped pixel instead of
    zeros (a dropped src-size 0) differs from numpy."""
    import tilecraft.topi.conv2d_nhwc_wgmma as CW
    x, w = _inputs(rng, 2, 8, 8, 64, 64, 3, 3)
    real = np.where
    monkeypatch.setattr(CW.np, "where", lambda c, a, b: real(np.ones_like(c), a, b) if np.ndim(a) == 3 else real(c, a, b))
    got = model_conv_wgmma(x, w, 1, 1, block=(128, 64), stages=3)
    assert _rel_err(got, _reference(x, w, 1, 1)) > 1e-2


@pytest.mark.parametrize("args,msg", [
    ((2, 8, 8, 96, 64, 3, 3, 1, 1, "float16", "float16", (128, 64), 4, 1), "C=96 input channels is not a multiple of 64"),
    ((2, 8, 8, 48, 64, 1, 1, 1, 0, "float16", "float16", (128, 64), 4, 1), "pad the channels to a multiple of 64"),
    ((2, 7, 7, 64, 64, 3, 3, 1, 1, "float16", "float16", (128, 64), 4, 1),
     "N·OH·OW=98 output pixels (2x7x7) is not a multiple of the block tile's 128"),
    ((2, 8, 8, 64, 96, 3, 3, 1, 1, "float16", "float16", (128, 64), 4, 1),
     "K=96 output channels is not a multiple of the block tile's 64"),
    ((2, 8, 8, 64, 64, 3, 3, 1, 1, "float32", "float32", (128, 64), 4, 1), "takes float16 or bfloat16 input and weights"),
    ((2, 8, 8, 64, 64, 3, 3, 1, 1, "float16", "int8", (128, 64), 4, 1), "writes float16, bfloat16 or float32"),
    ((2, 8, 8, 64, 64, 3, 3, 1, 1, "float16", "float16", (96, 64), 4, 1), "the wgmma block tile is bm x bn"),
    ((2, 8, 8, 64, 64, 3, 3, 1, 1, "float16", "float16", (128, 64), 4, 3), "lag=3"),
    ((2, 3, 3, 64, 64, 5, 5, 1, 0, "float16", "float16", (128, 64), 4, 1), "leaves no output of the 3x3 input"),
])
def test_errors(args, msg):
    with pytest.raises(ValueError, match=None) as e:
        check_conv_wgmma(*args)
    assert msg in str(e.value)


def test_source_uses_the_modelled_gather():
    """The C's gather is the model's: rows t / 8 + 16 i, chunk t % 8 swizzled by the row, zero-fill
    by source size; the pipeline is the GEMM's (called through its A-fill hook, not copied)."""
    src = conv2d_nhwc_wgmma_source(2, 8, 8, 64, 64, 3, 3, 1, 1, block=(128, 64), stages=3)
    assert "row * 128 + (((t & 7) ^ (row & 7)) << 4)" in src and "const int row = (t >> 3) + 16 * i" in src
    assert 'cp.async.cg.shared.global [%0], [%1], 16, %2;' in src and '"r"(inside ? 16 : 0)' in src
    assert src.count("void tc_wgmma_pipeline(") == 1 and "tc_wgmma_pipeline<128, 64, 3, 1, half" in src
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16" in src


@pytest.mark.parametrize("shape,block,stages", [((32, 56, 56, 64, 64, 3, 3, 1, 1), (128, 64), 4),
                                                ((32, 14, 14, 256, 256, 3, 3, 1, 1), (128, 256), 4),
                                                ((32, 56, 56, 128, 128, 3, 3, 2, 1), (128, 128), 5)])
def test_compiles_for_sm_90a(shape, block, stages):
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and modelled, not compiled")
    conv = conv2d_nhwc_wgmma(*shape, block=block, stages=stages)
    assert len(compile_cuda(conv.source, "sm_90a")) > 0
    N, H, W, C, K, R, S, st, pad = shape
    OH, OW = out_size(H, W, R, S, st, pad)
    assert conv.grid == (N * OH * OW // block[0], K // block[1], 1) and conv.threads == 128 * (1 + block[0] // 64)


def test_call_checks_arrays():
    conv = ConvWgmma(2, 8, 8, 64, 64, 3, 3, 1, 1, block=(128, 64), stages=3)

    class Fake:
        __cuda_array_interface__ = {"shape": (2, 8, 8, 32), "data": (0, False), "typestr": "<f2", "version": 3}
    from tilecraft.topi import conv2d_nhwc_wgmma as CW
    with pytest.raises(ValueError, match=r"x \(NHWC\) must be a contiguous array of shape \(2, 8, 8, 64\)"):
        CW._device_ptr(Fake(), (2, 8, 8, 64), "x (NHWC)")
    with pytest.raises(TypeError, match="must be a device array"):
        CW._device_ptr(np.zeros((2, 8, 8, 64)), (2, 8, 8, 64), "x (NHWC)")
    assert conv.out_shape == (128, 64)


GPU_CASES = [CASES[0], CASES[1], CASES[4], ((32, 14, 14, 256, 256, 3, 3, 1, 1), (128, 128), 4),
                     ((32, 56, 56, 128, 128, 3, 3, 2, 1), (128, 128), 4)]


@pytest.mark.parametrize("shape,block,stages", GPU_CASES)
@pytest.mark.parametrize("dtype,out_dtype", [("float16", "float16"), ("float16", "float32"), ("bfloat16", "bfloat16")])
def test_gpu_conv_wgmma(shape, block, stages, dtype, out_dtype, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_model_against_numpy and test_compiles_for_sm_90a only")
    import torch
    N, H, W, C, K, R, S, st, pad = shape
    conv = conv2d_nhwc_wgmma(*shape, dtype=dtype, out_dtype=out_dtype, block=block, stages=stages)
    for _ in range(2):                             # fresh inputs each time
        x, w = _inputs(rng, N, H, W, C, K, R, S)
        tx, tw = (torch.from_numpy(v).cuda().to(getattr(torch, dtype)) for v in (x, w))
        y = torch.full(conv.out_shape, float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
        conv(tx, tw, y)
        got = y.float().cpu().numpy()
        assert not np.isnan(got).any()
        ref = _reference(tx.float().cpu().numpy(), tw.float().cpu().numpy(), st, pad)
        assert _rel_err(got, ref) < (2e-3 if out_dtype != "bfloat16" else 8e-3)


# -- the TE schedule (conv2d_nhwc_wgmma_te) and the template's wgmma knob ----------------------------

TE_CASES = [((4, 8, 8, 64, 128, 3, 3, 1, 1), (128, 64), 3, "float16", "float16"),     # 2 x 2 blocks, m0 > 0
            ((1, 15, 15, 128, 128, 3, 3, 2, 1), (64, 128), 4, "float16", "float32"),
            ((2, 8, 8, 128, 64, 1, 1, 1, 0), (64, 64), 3, "bfloat16", "bfloat16")]


@pytest.mark.parametrize("shape,block,stages,dtype,out_dtype", TE_CASES,
                         ids=[f"{c[0][1]}x{c[0][2]}x{c[0][3]}_k{c[0][4]}_{c[0][5]}x{c[0][6]}_s{c[0][7]}_{c[3]}_{c[4]}"
                              for c in TE_CASES])
def test_te_schedule_emulated_and_compiled(shape, block, stages, dtype, out_dtype, rng):
    """tensorize binds each block's first row (the intrinsic's scalar parameter m0); the emulator
    runs the definition per block and the modelled gather, on poisoned output."""
    import tilecraft as tc
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.cuda_emulate import emulate
    from tilecraft.ir.dtype import round_bfloat16
    from tilecraft.topi.conv2d_nhwc_wgmma import conv2d_nhwc_wgmma_te
    N, H, W, C, K, R, S, st, pad = shape
    s, (X, Wt, Y) = conv2d_nhwc_wgmma_te(*shape, dtype=dtype, out_dtype=out_dtype, block=block, stages=stages)
    func = tc.lower(s, [X, Wt, Y], target="cuda")
    x, w = _inputs(rng, N, H, W, C, K, R, S)
    if dtype == "bfloat16":
        x, w = round_bfloat16(x.astype("float32")), round_bfloat16(w.astype("float32"))
    y = np.full(tuple(int(d.value) for d in Y.shape), np.nan, "float16" if out_dtype == "float16" else "float32")
    emulate(func, [x, w, y])
    assert not np.isnan(y).any()
    assert _rel_err(y, _reference(x, w, st, pad)) < {"float16": 1e-3, "float32": 1e-5, "bfloat16": 8e-3}[out_dtype]
    src = generate_cuda(func)
    assert f"tc_wgmma_conv_a<{block[0]}," in src and "tc_wgmma_pipeline<" in src
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and emulated, not compiled")
    assert len(compile_cuda(src, "sm_90")) > 0          # sm_90a, picked for wgmma


def test_emulator_models_the_gather(rng, monkeypatch):
    """The emulator runs each block through the modelled gather too: a gather off by one image row
    fails there, naming the block tile."""
    import tilecraft as tc
    from tilecraft.codegen import cuda_wgmma_conv
    from tilecraft.codegen.cuda_emulate import EmulationError, emulate
    from tilecraft.topi.conv2d_nhwc_wgmma import conv2d_nhwc_wgmma_te
    s, (X, Wt, Y) = conv2d_nhwc_wgmma_te(2, 8, 8, 64, 64, 3, 3, 1, 1, block=(128, 64), stages=3)
    func = tc.lower(s, [X, Wt, Y], target="cuda")
    x, w = _inputs(rng, 2, 8, 8, 64, 64, 3, 3)
    real = cuda_wgmma_conv.model_fill_a

    def shifted_gather(ring, sa, x, m0, kt, shape, bm):       # reads the pixel one row down
        return real(ring, sa, np.ascontiguousarray(np.roll(x, -1, axis=1)), m0, kt, shape, bm)
    monkeypatch.setattr(cuda_wgmma_conv, "model_fill_a", shifted_gather)
    y = np.full((128, 64), np.nan, "float16")
    with pytest.raises(EmulationError, match=r"the conv's gather through the swizzled shared ring and the wgmma "
                                             r"descriptors gives .* of the block tile"):
        emulate(func, [x, w, y])


def _template(args, target="cuda"):
    import warnings

    import tilecraft as tc
    import tilecraft.autotune as autotune
    from tilecraft.topi import conv2d_nhwc_tensorcore as CT
    task = autotune.task.create(CT.TEMPLATE, args=args, target=target)
    with tc.target.Target(target), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s, t = task.func(*task.args)
    return task, s, list(t)


def test_template_offers_wgmma_on_sm_90():
    from tilecraft.topi import conv2d_nhwc_tensorcore as CT
    task, s, t = _template((32, 14, 14, 256, 256, 3, 3, 1, 1, "float16"))
    assert "wgmma" in task.config_space.space_map
    vals = {e["wgmma"].val for e in task.config_space}
    assert None in vals and (128, 64, 4, 1) in vals and (128, 256, 4, 2) in vals
    assert (256, 64, 4, 1) not in vals                  # 32·14·14 = 6272 rows: not a multiple of 256
    # the fastest tiles measured on an H100 (bench/results/h100_2026-11-25_s22_tcconv2/)
    assert CT.wgmma_conv_fallback((32, 14, 14, 256, 256, 3, 3, 1, 1), "float16") == (128, 128, 4, 1)
    assert CT.wgmma_conv_fallback((32, 28, 28, 128, 128, 3, 3, 1, 1), "float16") == (256, 128, 4, 1)
    assert CT.wgmma_conv_fallback((32, 56, 56, 64, 64, 3, 3, 1, 1), "float16") == (256, 64, 4, 1)
    assert CT.wgmma_conv_fallback((32, 56, 56, 128, 128, 3, 3, 2, 1), "float16") == (256, 128, 4, 1)
    assert CT.wgmma_conv_fallback((1, 8, 8, 64, 64, 3, 3, 1, 1), "float16") == (64, 64, 4, 1)
    assert CT.wgmma_conv_fallback((1, 7, 7, 64, 64, 3, 3, 1, 1), "float16") is None        # 49 rows
    assert any(st.op.name == "Y" for st in s.stages) and not any(st.op.name == "A_gather" for st in s.stages)


@pytest.mark.parametrize("args,target", [((32, 14, 14, 256, 256, 3, 3, 1, 1, "float16"), "cuda -arch=sm_80"),
                                         ((2, 8, 8, 48, 64, 3, 3, 1, 1, "float16"), "cuda")])
def test_template_keeps_mma_sync(args, target):
    """Before sm_90, or with C not a multiple of 64, the template is the mma.sync one (no knob)."""
    task, s, t = _template(args, target)
    assert "wgmma" not in task.config_space.space_map
    assert any(st.op.name == "A_gather" for st in s.stages)


@pytest.mark.parametrize("args", [(32, 56, 56, 64, 64, 3, 3, 1, 1, "float16", "float16"),
                                  (32, 14, 14, 256, 256, 3, 3, 1, 1, "float16", "float16"),
                                  (32, 56, 56, 128, 128, 3, 3, 2, 1, "float16", "float16"),
                                  (32, 14, 14, 1024, 256, 1, 1, 1, 0, "bfloat16", "bfloat16")])
def test_gpu_template_fallback_is_wgmma(args, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_te_schedule_emulated_and_compiled only")
    import tilecraft as tc
    import torch
    N, H, W, C, K, R, S, st, pad, _, dtype = args          # (..., out_dtype, dtype): the template's order
    task, s, t = _template(args)
    mod = tc.build(s, t, target="cuda")
    assert "tc_wgmma_conv_a" in mod.get_source()
    for _ in range(2):
        x, w = _inputs(rng, N, H, W, C, K, R, S)
        tx, tw = (torch.from_numpy(v).cuda().to(getattr(torch, dtype)) for v in (x, w))
        OH, OW = out_size(H, W, R, S, st, pad)
        y = torch.full((N * OH * OW, K), float("nan"), device="cuda", dtype=getattr(torch, dtype))
        mod(tx, tw, y)
        got = y.float().cpu().numpy()
        assert not np.isnan(got).any()
        ref = _reference(tx.float().cpu().numpy(), tw.float().cpu().numpy(), st, pad)
        assert _rel_err(got, ref) < (2e-3 if dtype == "float16" else 8e-3)
