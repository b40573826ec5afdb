"""bfloat16 on sm_90a's wgmma (``wgmma.mma_async ... .f32.bf16.bf16``): the wgmma GEMM
(``topi/tensorcore_wgmma.py``) with bfloat16 operands, float32 accumulation and float32 /
bfloat16 / float16 output, generated, compiled by nvcc for sm_90a, run in the emulator (by the
intrinsics' definitions and through the modelled swizzled ring holding the 16-bit patterns) on
poisoned outputs against a float64 product; on a GPU (``-m cuda``) against torch in float64."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.codegen.cuda_emulate_wgmma import _bf16_bits, _bf16_values
from tilecraft.ir.dtype import round_bfloat16
from tilecraft.topi.tensorcore_wgmma import matmul_wgmma

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda


def _inputs(rng, M, N, K):
    a = round_bfloat16(rng.uniform(-1, 1, (M, K)).astype("float32"))
    b = round_bfloat16(rng.uniform(-1, 1, (N, K)).astype("float32"))
    return a, b, a.astype("float64") @ b.astype("float64").T


def _rel_err(got, want) -> float:
    return float(np.linalg.norm(got.astype("float64") - want) / np.linalg.norm(want))


# (out_dtype, (M, N, K), options): 1 and several steps, the ring wrapping, bn 64/128/256
CASES = [("float32", (128, 128, 64), dict(block=(64, 64), stages=3)),
         ("bfloat16", (256, 256, 320), dict(block=(128, 256), stages=4)),
         ("float16", (128, 128, 448), dict(block=(128, 128), stages=3, lag=1))]


@pytest.mark.parametrize("out_dtype,size,opts", CASES, ids=[f"{o}_{s[0]}x{s[1]}x{s[2]}" for o, s, _ in CASES])
def test_bf16_wgmma_emulated_and_compiled(out_dtype, size, opts, rng):
    M, N, K = size
    s, (A, B, C) = matmul_wgmma(M, N, K, dtype="bfloat16", out_dtype=out_dtype, **opts)
    func = tc.lower(s, [A, B, C], target="cuda")
    a, b, ref = _inputs(rng, M, N, K)
    c = np.full((M, N), np.nan, "float16" if out_dtype == "float16" else "float32")
    emulate(func, [a, b, c])
    assert not np.isnan(c).any(), "elements of C were not written"
    if out_dtype == "bfloat16":
        assert np.array_equal(round_bfloat16(c), c)          # rounded once, at the store
    assert _rel_err(c, ref) < {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}[out_dtype]
    src = generate_cuda(func)
    assert "wgmma.mma_async.sync.aligned.m64n" in src and "f32.bf16.bf16" in src
    if out_dtype == "bfloat16":
        assert "__floats2bfloat162_rn" in src
    if find_nvcc() is None:
        pytest.skip("nvcc not found: the source was generated and emulated, not compiled")
    assert compile_cuda(src, "sm_90a")


def test_bf16_ring_holds_16_bit_patterns():
    x = round_bfloat16(np.array([1.0, -2.5, 3.140625, 65280.0], np.float32))
    bits = _bf16_bits(x)
    assert bits.dtype == np.uint16 and bits.tolist() == [0x3F80, 0xC020, 0x4049, 0x477F]
    assert np.array_equal(_bf16_values(bits.view(np.uint8)), x)


def test_bf16_wgmma_errors():
    with pytest.raises(ValueError, match="takes float16, bfloat16 or float32 \\(tf32\\) operands, got 'int8'"):
        matmul_wgmma(128, 128, 64, dtype="int8", block=(64, 64), stages=3)
    with pytest.raises(ValueError, match="stored as float32, float16 or bfloat16, not 'int8'"):
        matmul_wgmma(128, 128, 64, dtype="bfloat16", out_dtype="int8", block=(64, 64), stages=3)
    with pytest.raises(ValueError, match="K=96 is not a multiple of the wgmma main loop's step of 64"):
        matmul_wgmma(128, 128, 96, dtype="bfloat16", block=(64, 64), stages=3)


@pytest.mark.parametrize("out_dtype,size,opts", CASES + [("bfloat16", (1024, 1024, 1024),
                                                          dict(block=(128, 256), stages=4))])
def test_gpu_bf16_wgmma(out_dtype, size, opts, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_bf16_wgmma_emulated_and_compiled only")
    import torch
    M, N, K = size
    s, (A, B, C) = matmul_wgmma(M, N, K, dtype="bfloat16", out_dtype=out_dtype, **opts)
    mod = tc.build(s, [A, B, C], target="cuda")
    for _ in range(2):
        a, b, ref = _inputs(rng, M, N, K)
        ta = torch.from_numpy(a).cuda().to(torch.bfloat16)
        tb = torch.from_numpy(b).cuda().to(torch.bfloat16)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
        mod(ta, tb, c)
        got = c.float().cpu().numpy()
        assert not np.isnan(got).any()
        assert _rel_err(got, ref) < {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}[out_dtype]
