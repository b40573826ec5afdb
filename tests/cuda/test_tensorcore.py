"""Tensor cores through tensorize: TVM's wmma path and the PTX mma.sync path (topi/tensorcore.py,
codegen/cuda_tensorcore.py, codegen/cuda_emulate_intrin.py).

Each schedule is lowered for CUDA, run in the emulator (the tensorized regions by the intrinsics'
TE definitions, once per warp, with the lowering's operands checked against them) on fresh random
inputs with the output poisoned, compared with a float64 numpy reference, and compiled with
``nvcc -arch=sm_90``; ``test_gpu_*`` run them on a GPU (``-m cuda``). TVM's tensor-core
convolution tutorial runs as a script (tests/tvm_scripts/opt_conv_tensorcore.py) and, at small
sizes, emulated and compiled here.
"""
from __future__ import annotations

import contextlib
import io
import os
import pathlib
import runpy

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te, tir
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.topi.tensorcore import matmul_tensorcore

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "tvm_scripts" / "opt_conv_tensorcore.py"


def _nvcc(src: str):
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and emulated but not compiled")
    assert len(compile_cuda(src, "sm_90")) > 0


def _rel_err(got, want) -> float:
    return float(np.linalg.norm(got.astype("float64") - want) / np.linalg.norm(want))


def _gemm_inputs(rng, M, N, K, layout_b):
    a = rng.uniform(-1, 1, (M, K)).astype("float16")
    b = rng.uniform(-1, 1, (K, N) if layout_b == "row_major" else (N, K)).astype("float16")
    bb = b.astype("float64") if layout_b == "row_major" else b.astype("float64").T
    return a, b, a.astype("float64") @ bb


# -- the GEMM schedule, both implementations, both layouts of B ------------------------------------

GEMMS = [
    # (impl, layout_b, size, options)
    ("wmma", "row_major", (64, 64, 32), dict(block=(1, 1), warp=(1, 1), chunk=2, double_buffer=False)),
    ("wmma", "row_major", (128, 256, 96), dict(block=(2, 2), warp=(2, 2), chunk=2)),
    ("wmma", "col_major", (128, 128, 64), dict(block=(2, 2), warp=(2, 1), chunk=2)),
    ("mma", "row_major", (64, 64, 32), dict(block=(1, 1), warp=(1, 1), chunk=2, double_buffer=False)),
    ("mma", "row_major", (128, 256, 96), dict(block=(2, 2), warp=(2, 2), chunk=2)),
    ("mma", "col_major", (256, 128, 64), dict(block=(2, 4), warp=(4, 1), chunk=2)),
    # the fragments of a whole 64-deep step loaded before its first mma
    ("mma", "row_major", (128, 128, 128), dict(block=(2, 2), warp=(2, 4), chunk=4, prefetch=True)),
    ("mma", "col_major", (128, 128, 96), dict(block=(2, 2), warp=(4, 2), chunk=2, prefetch=True, stages=3)),
    ("wmma", "col_major", (64, 128, 64), dict(block=(2, 2), warp=(2, 2), chunk=2, prefetch=True)),
]
GEMM_IDS = [f"{i}-{l}-{'x'.join(map(str, sz))}" for i, l, sz, _ in GEMMS]


@pytest.mark.parametrize("impl,layout_b,size,opts", GEMMS, ids=GEMM_IDS)
def test_gemm_emulated_and_compiled(impl, layout_b, size, opts, rng):
    M, N, K = size
    s, (A, B, C) = matmul_tensorcore(M, N, K, impl=impl, layout_b=layout_b, **opts)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    if impl == "wmma":
        assert "nvcuda::wmma::mma_sync(" in src and "nvcuda::wmma::load_matrix_sync(" in src
    else:
        assert "tc_mma_16x16x16(" in src and "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src
        assert ("tc_ldmatrix_x4<true, false>" if layout_b == "row_major" else "tc_ldmatrix_x4<false, true>") in src
    a, b, ref = _gemm_inputs(rng, M, N, K, layout_b)
    c = np.full((M, N), np.nan, "float32")
    emulate(func, [a, b, c])
    assert not np.isnan(c).any(), "elements of C were not written"
    assert _rel_err(c, ref) < 1e-6
    _nvcc(src)


@pytest.mark.parametrize("impl,layout_b,size,opts", GEMMS, ids=GEMM_IDS)
def test_gpu_gemm(impl, layout_b, size, opts, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_gemm_emulated_and_compiled (emulator + nvcc) only")
    import torch
    M, N, K = size
    s, (A, B, C) = matmul_tensorcore(M, N, K, impl=impl, layout_b=layout_b, **opts)
    mod = tc.build(s, [A, B, C], target="cuda")
    for _ in range(2):                             # fresh inputs each time
        a, b, ref = _gemm_inputs(rng, M, N, K, layout_b)
        c = torch.full((M, N), float("nan"), device="cuda")
        mod(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c)
        got = c.cpu().numpy()
        assert not np.isnan(got).any()
        assert _rel_err(got, ref) < 1e-5


# -- the other mma.sync kinds (tf32, int8), the float16 epilogue, rasterized blocks -----------------

KINDS = [
    # (dtype, out_dtype, size, options, the instruction the C must hold)
    ("float32", None, (64, 128, 96), dict(block=(2, 2), warp=(1, 2), chunk=2),
     "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
    ("int8", None, (128, 64, 192), dict(block=(2, 1), warp=(2, 2), chunk=2, stages=3),
     "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"),
    ("float16", "float16", (128, 128, 64), dict(block=(2, 2), warp=(2, 2), chunk=2, raster=2),
     "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
    ("float32", None, (96, 64, 64), dict(block=(1, 2), warp=(2, 1), chunk=4, stages=2, raster=3),
     "cvt.rna.tf32.f32"),
]
KIND_IDS = [f"{d}-{o or 'acc'}-{'x'.join(map(str, sz))}" for d, o, sz, _, _ in KINDS]


def _kind_inputs(rng, dtype, M, N, K):
    """A (M, K) and B (N, K) of ``dtype`` (int8: the whole range, tails included), the float64 A @ B.T."""
    if dtype == "int8":
        a, b = rng.integers(-128, 128, (M, K)).astype("int8"), rng.integers(-128, 128, (N, K)).astype("int8")
    else:
        a, b = rng.uniform(-1, 1, (M, K)).astype(dtype), rng.uniform(-1, 1, (N, K)).astype(dtype)
    return a, b, a.astype("float64") @ b.astype("float64").T


def _poisoned(M, N, dtype):
    return np.full((M, N), 0x5A5A5A5A, "int32") if dtype == "int32" else np.full((M, N), np.nan, dtype)


@pytest.mark.parametrize("dtype,out_dtype,size,opts,ptx", KINDS, ids=KIND_IDS)
def test_mma_kinds_emulated_and_compiled(dtype, out_dtype, size, opts, ptx, rng):
    M, N, K = size
    s, (A, B, C) = matmul_tensorcore(M, N, K, impl="mma", layout_b="col_major", dtype=dtype, out_dtype=out_dtype,
                                     **opts)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    assert ptx in src and "tc_ldmatrix" in src
    a, b, ref = _kind_inputs(rng, dtype, M, N, K)
    c = _poisoned(M, N, C.dtype)
    emulate(func, [a, b, c])
    if dtype == "int8":
        np.testing.assert_array_equal(c, ref.astype("int64"))          # exact: int32 accumulation
    else:
        assert not np.isnan(c).any(), "elements of C were not written"
        # the emulator runs the definition (fp32 products; float16 C rounds once at the store)
        assert _rel_err(c, ref) < (1e-3 if out_dtype == "float16" else 1e-6)
    _nvcc(src)


@pytest.mark.parametrize("dtype,out_dtype,size,opts,ptx", KINDS, ids=KIND_IDS)
def test_gpu_mma_kinds(dtype, out_dtype, size, opts, ptx, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_mma_kinds_emulated_and_compiled (emulator + nvcc) only")
    import torch
    M, N, K = size
    s, (A, B, C) = matmul_tensorcore(M, N, K, impl="mma", layout_b="col_major", dtype=dtype, out_dtype=out_dtype,
                                     **opts)
    mod = tc.build(s, [A, B, C], target="cuda")
    for _ in range(2):                             # fresh inputs each time
        a, b, ref = _kind_inputs(rng, dtype, M, N, K)
        c = torch.from_numpy(_poisoned(M, N, C.dtype)).cuda()
        mod(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c)
        got = c.cpu().numpy()
        if dtype == "int8":
            np.testing.assert_array_equal(got, ref.astype("int64"))
        else:
            assert not np.isnan(got).any()
            # tf32 operands keep 10 mantissa bits (rel. error near 3e-4); float16 C rounds at the store
            assert _rel_err(got, ref) < (2e-3 if dtype == "float32" or out_dtype == "float16" else 1e-5)


def test_kind_errors():
    with pytest.raises(ValueError, match=r"a tensor-core GEMM of int8 operands takes B as \(N, K\), layout_b='col_major': "
                                         r"ldmatrix transposes 16-bit elements only"):
        matmul_tensorcore(64, 64, 64, impl="mma", dtype="int8")
    with pytest.raises(ValueError, match=r"tensor-core operands must be float16 on the wmma path, got 'float32'"):
        matmul_tensorcore(64, 64, 64, impl="wmma", dtype="float32", layout_b="col_major")
    with pytest.raises(ValueError, match=r"tensor-core operands must be float16 or float32 or int8 or bfloat16 on the mma path, "
                                         r"got 'float64'"):
        matmul_tensorcore(64, 64, 64, impl="mma", dtype="float64", layout_b="col_major")
    with pytest.raises(ValueError, match=r"the mma path stores a int32 accumulator as one of \['int32'\], not "
                                         r"'float16'"):
        matmul_tensorcore(64, 64, 64, impl="mma", dtype="int8", layout_b="col_major", out_dtype="float16")
    with pytest.raises(ValueError, match=r"the wmma path stores a float32 accumulator as one of \['float32'\], "
                                         r"not 'float16'"):
        matmul_tensorcore(64, 64, 64, impl="wmma", out_dtype="float16")
    # found on the GPU: 1024 rows in blocks of 256 are 4 block rows, not groups of 8
    with pytest.raises(ValueError, match=r"raster=8 numbers the blocks in groups of 8 block rows, but M=1024 has 4 "
                                         r"block rows of 256: choose a raster that divides 4 \(or 0\)"):
        matmul_tensorcore(1024, 1024, 1024, impl="mma", block=(4, 2), warp=(4, 4), raster=8)


# -- TVM's tensor-core convolution tutorial ------------------------------------------------------------

def _tutorial(monkeypatch, sizes: str):
    monkeypatch.setenv("TC_CONV_SIZES", sizes)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        ns = runpy.run_path(str(SCRIPT))
    return ns, out.getvalue()


def _conv_reference(ns, a, w):
    """float64 reference of the tutorial's NHWCnc convolution (padding 1, stride 1)."""
    N, H, Wd, IC, n, ic = a.shape
    kh, kw = ns["kernel_h"], ns["kernel_w"]
    x = a.astype("float64").transpose(0, 4, 1, 2, 3, 5).reshape(N * n, H, Wd, IC * ic)     # NHWC
    x = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    f = w.astype("float64").transpose(0, 1, 2, 4, 3, 5).reshape(kh, kw, IC * ic, -1)       # HWIO
    out = np.zeros((N * n, H, Wd, f.shape[-1]))
    for y in range(kh):
        for z in range(kw):
            out += np.einsum("bhwc,co->bhwo", x[:, y:y + H, z:z + Wd], f[y, z])
    OC = f.shape[-1] // 16
    return out.reshape(N, n, H, Wd, OC, 16).transpose(0, 2, 3, 4, 1, 5)


def test_tutorial_emulated_and_compiled(monkeypatch, rng):
    # the tutorial's schedule at sizes the emulator runs in seconds: 2 x 2 pixels, 128 images, 32 -> 256
    # channels (two blocks along the output channels, 8 warps each)
    ns, printed = _tutorial(monkeypatch, "128,2,2,32,256")
    assert "tvm_mma_sync(" in printed and "tvm_load_matrix_sync(" in printed
    s, A, W, Conv = ns["s"], ns["A"], ns["W"], ns["Conv"]
    with tc.transform.PassContext(config={"tir.UnrollLoop": {"auto_max_step": 16}}):
        func = tc.lower(s, [A, W, Conv], target="cuda")
    src = generate_cuda(func)
    assert "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> Conv_wmma_accumulator[8];" in src
    a = rng.uniform(-1, 1, ns["data_shape"]).astype("float16")
    w = rng.uniform(-1, 1, ns["kernel_shape"]).astype("float16")
    c = np.full(ns["output_shape"], np.nan, "float32")
    emulate(func, [a, w, c])
    assert not np.isnan(c).any()
    assert _rel_err(c, _conv_reference(ns, a, w)) < 1e-6
    _nvcc(src)


def test_gpu_tutorial(monkeypatch, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_tutorial_emulated_and_compiled (emulator + nvcc) only")
    import torch
    ns, _ = _tutorial(monkeypatch, "256,14,14,64,512")
    s, A, W, Conv = ns["s"], ns["A"], ns["W"], ns["Conv"]
    with tc.transform.PassContext(config={"tir.UnrollLoop": {"auto_max_step": 16}}):
        mod = tc.build(s, [A, W, Conv], target="cuda")
    a = rng.uniform(-1, 1, ns["data_shape"]).astype("float16")
    w = rng.uniform(-1, 1, ns["kernel_shape"]).astype("float16")
    c = torch.full(ns["output_shape"], float("nan"), device="cuda")
    mod(torch.from_numpy(a).cuda(), torch.from_numpy(w).cuda(), c)
    got = c.cpu().numpy()
    assert not np.isnan(got).any()
    assert _rel_err(got, _conv_reference(ns, a, w)) < 1e-5
