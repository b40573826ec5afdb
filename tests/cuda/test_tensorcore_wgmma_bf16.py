"""bfloat16 through the sm_90a wgmma GEMM (``wgmma.mma_async.m64nNk16.f32.bf16.bf16``): generated and
nvcc-compiled for sm_90a, emulated on poisoned outputs (the values held in float32, rounded; the
data-path model moves their 16-bit patterns through the swizzled ring), offered and used as the
fallback by ``topi/matmul_tensorcore.cuda`` on sm_90, and on a GPU (``-m cuda``) against float64."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
import tilecraft.autotune as autotune
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.ir import dtype as dt
from tilecraft.topi import tensorcore_template  # noqa: F401 (registers topi/matmul_tensorcore.cuda)
from tilecraft.topi.tensorcore_wgmma import matmul_wgmma

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda

# (out_dtype, (M, N, K), options): one step, more steps than stages, lag 0
CONFIGS = [
    ("bfloat16", (256, 512, 192), dict(block=(128, 256), stages=4, raster=2)),
    ("float32", (128, 128, 64), dict(block=(64, 64), stages=3)),
    ("bfloat16", (128, 256, 512), dict(block=(128, 256), stages=3, lag=0)),
]
IDS = [f"{o}_{c['block'][0]}x{c['block'][1]}_K{s[2]}_l{c.get('lag', 1)}" for o, s, c in CONFIGS]


def _inputs(rng, M, N, K):
    a = dt.round_bfloat16(rng.uniform(-1, 1, (M, K)).astype("float32"))
    b = dt.round_bfloat16(rng.uniform(-1, 1, (N, K)).astype("float32"))
    return a, b, a.astype("float64") @ b.astype("float64").T


@pytest.mark.parametrize("out_dtype,size,opts", CONFIGS, ids=IDS)
def test_wgmma_bf16_emulated_and_compiled(out_dtype, size, opts, rng):
    M, N, K = size
    s, (A, B, C) = matmul_wgmma(M, N, K, dtype="bfloat16", out_dtype=out_dtype, **opts)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    assert f"wgmma.mma_async.sync.aligned.m64n{opts['block'][1]}k16.f32.bf16.bf16" in src
    a, b, ref = _inputs(rng, M, N, K)
    c = np.full((M, N), np.nan, "float32")
    emulate(func, [a, b, c])
    assert not np.isnan(c).any(), "elements of C were not written"
    err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
    if out_dtype == "bfloat16":               # every element a bfloat16 value, within its rounding
        assert np.array_equal(c, dt.round_bfloat16(c))
        assert np.all(np.abs(c - ref) <= 2.0 ** -8 * np.abs(ref) + 1e-6)
    else:
        assert err < 1e-6
    if find_nvcc() is None:
        pytest.skip("nvcc not found: the source was generated and emulated, not compiled")
    assert compile_cuda(src, "sm_90a")


def test_wgmma_bf16_model_moves_the_bit_patterns(rng, monkeypatch):
    """The data-path model puts bf16's 16-bit patterns through the ring: without the swizzle it fails."""
    from tilecraft.codegen import cuda_emulate_wgmma as M
    monkeypatch.setattr(M, "swizzled_offset", lambda r, c: 128 * r + 16 * c)
    s, (A, B, C) = matmul_wgmma(128, 128, 128, dtype="bfloat16", block=(128, 128), stages=3)
    a, b, _ = _inputs(rng, 128, 128, 128)
    with pytest.raises(Exception, match=r"the main loop through the swizzled shared ring and the wgmma descriptors"):
        emulate(tc.lower(s, [A, B, C], target="cuda"), [a, b, np.full((128, 128), np.nan, "float32")])


def test_template_offers_and_falls_back_to_wgmma_for_bf16(rng):
    M, N, K = 256, 256, 128
    task = autotune.task.create("topi/matmul_tensorcore.cuda", args=(M, N, K, "bfloat16", "bfloat16", "col_major"),
                                target="cuda")
    assert any(c["wgmma"].val is not None for c in task.config_space)
    with tc.target.Target("cuda"), pytest.warns(UserWarning, match="fallback configuration"):
        s, (A, B, C) = task.func(*task.args)
    func = tc.lower(s, [A, B, C], target="cuda")
    assert ".f32.bf16.bf16" in generate_cuda(func) and "wgmma.mma_async" in generate_cuda(func)
    a, b, ref = _inputs(rng, M, N, K)
    c = np.full((M, N), np.nan, "float32")
    emulate(func, [a, b, c])
    assert np.array_equal(c, dt.round_bfloat16(c)) and np.all(np.abs(c - ref) <= 2.0 ** -8 * np.abs(ref) + 1e-6)


@pytest.mark.parametrize("out_dtype,size,opts", CONFIGS + [("bfloat16", (1024, 1024, 1024),
                                                            dict(block=(128, 256), stages=4, raster=8))],
                         ids=IDS + ["bfloat16_128x256_1024"])
def test_gpu_wgmma_bf16(out_dtype, size, opts, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_wgmma_bf16_emulated_and_compiled only")
    import torch
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs an sm_90 GPU (H100, H200)")
    M, N, K = size
    s, (A, B, C) = matmul_wgmma(M, N, K, dtype="bfloat16", out_dtype=out_dtype, **opts)
    mod = tc.build(s, [A, B, C], target="cuda")
    for _ in range(2):                             # fresh inputs each time
        a, b, ref = _inputs(rng, M, N, K)
        c = torch.full((M, N), float("nan"), dtype=getattr(torch, out_dtype), device="cuda")
        mod(torch.from_numpy(a).cuda().bfloat16(), torch.from_numpy(b).cuda().bfloat16(), c)
        got = c.float().cpu().numpy().astype("float64")
        assert not np.isnan(got).any()
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < (3e-3 if out_dtype == "bfloat16" else 1e-5)
