"""bfloat16 on tensor cores: the dtype (``ir/dtype.py``: held in float32 arrays by the interpreters and
the emulator, rounded to nearest-even where a value becomes bfloat16), ``mma.sync.m16n8k16`` with
bf16 operands and fp32 accumulation (``MMA_KINDS``), for the GEMM (both layouts of B: ``ldmatrix
.trans`` moves 16-bit elements) and the implicit-GEMM conv2d.

Each kernel is emulated on fresh bf16-rounded inputs with the output poisoned, compared with the
float64 product of the same (rounded) values, and nvcc-compiled for sm_90; ``test_gpu_*`` run on a
GPU against torch's ``bfloat16`` (``-m cuda``).
"""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilecraft as tc
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.ir import dtype as dt
from tilecraft.topi.conv2d_nhwc_tensorcore import conv2d_nhwc_tensorcore
from tilecraft.topi.tensorcore import matmul_tensorcore

from .test_conv2d_nhwc_tensorcore import conv_ref
from .test_cuda_ops import gpu_available
from .test_tensorcore import _nvcc, _rel_err

pytestmark = pytest.mark.cuda


def _bf16_nearest(x: float) -> float:
    """bfloat16 rounding by its definition: of the two bfloat16 neighbours of the float32 ``x``
    (its bits with the low 16 cleared, and the next bfloat16 away from zero), the nearer; on a
    tie the one whose last mantissa bit is 0."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    lo = bits & 0xFFFF0000
    hi = lo + 0x10000
    f = lambda b: struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]   # noqa: E731
    dlo, dhi = abs(x - f(lo)), abs(f(hi) - x)
    if dlo < dhi or (dlo == dhi and not (lo >> 16) & 1):
        return f(lo)
    return f(hi)


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False, min_value=-2.0 ** 127, max_value=2.0 ** 127))
def test_round_bfloat16_is_nearest_even(x):
    assert float(dt.round_bfloat16(np.float32(x))) == _bf16_nearest(x)


def test_round_bfloat16_edges():
    ties = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8)], np.float32)
    assert dt.round_bfloat16(ties).tolist() == [1.0, 1 + 2 ** -6, -1.0]
    assert np.isnan(dt.round_bfloat16(np.float32(np.nan)))
    assert dt.round_bfloat16(np.float32(np.inf)) == np.inf
    assert dt.parse("bfloat16x8") == ("bfloat", 16, 8) and dt.is_float("bfloat16") and dt.nbytes("bfloat16") == 2


def _bf16(rng, shape):
    return dt.round_bfloat16(rng.uniform(-1, 1, shape))


GEMMS = [("row_major", dict(block=(2, 2), warp=(1, 2), chunk=2, stages=2)),
         ("col_major", dict(block=(1, 2), warp=(2, 1), chunk=1, stages=3, min_blocks=2)),
         ("row_major", dict(block=(1, 1), warp=(2, 2), chunk=2, stages=0, double_buffer=True))]


@pytest.mark.parametrize("layout_b,opts", GEMMS, ids=[f"{l}-s{o['stages']}" for l, o in GEMMS])
def test_bf16_gemm_emulated_and_compiled(layout_b, opts, rng):
    M, N, K = 64, 64, 96
    kw = dict(double_buffer=False) | opts
    s, (A, B, C) = matmul_tensorcore(M, N, K, impl="mma", dtype="bfloat16", layout_b=layout_b, **kw)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src and "const __nv_bfloat16*" in src
    a = _bf16(rng, (M, K))
    b = _bf16(rng, (K, N) if layout_b == "row_major" else (N, K))
    c = np.full((M, N), np.nan, "float32")
    emulate(func, [a, b, c])
    ref = a.astype("float64") @ (b.astype("float64") if layout_b == "row_major" else b.astype("float64").T)
    assert not np.isnan(c).any() and _rel_err(c, ref) < 1e-6
    _nvcc(src)


def test_bf16_conv_emulated_and_compiled(rng):
    layer = (2, 8, 8, 32, 32, 3, 3, 1, 1)
    s, (X, Wt, Y) = conv2d_nhwc_tensorcore(*layer, dtype="bfloat16", out_dtype="float32", block=(2, 2),
                                           warp=(1, 1), chunk=2, stages=2)
    func = tc.lower(s, [X, Wt, Y], target="cuda")
    src = generate_cuda(func)
    assert "tc_mma_16x16x16_bf16(" in src and "tc_cp_async_zfill<16>(" in src
    x, w = _bf16(rng, (2, 8, 8, 32)), _bf16(rng, (32, 3, 3, 32))
    y = np.full((128, 32), np.nan, "float32")
    emulate(func, [x, w, y])
    assert not np.isnan(y).any() and _rel_err(y, conv_ref(x, w, 1, 1)) < 1e-6
    _nvcc(src)


@pytest.mark.parametrize("layer,opts", [
    ((2, 8, 8, 32, 32, 3, 3, 1, 1), dict(block=(2, 1), warp=(1, 2), chunk=2, stages=3)),
    ((2, 8, 8, 32, 16, 1, 1, 1, 0), dict(block=(1, 1), warp=(2, 1), chunk=1, stages=0))])
def test_bf16_conv_with_a_bf16_output(layer, opts, rng):
    """bfloat16 Y: the float32 accumulator rounded to bfloat16 at the store (``__floats2bfloat162_rn``
    in CUDA C; the emulator rounds by the store's TE definition): every element is a bfloat16
    value, within bfloat16's rounding of the float64 convolution."""
    N, H, W, C, K, R, S, st, pad = layer
    s, (X, Wt, Y) = conv2d_nhwc_tensorcore(*layer, dtype="bfloat16", out_dtype="bfloat16", **opts)
    func = tc.lower(s, [X, Wt, Y], target="cuda")
    src = generate_cuda(func)
    assert "tc_mma_store(" in src and "__nv_bfloat16* __restrict__ C_out" in src
    x, w = _bf16(rng, (N, H, W, C)), _bf16(rng, (K, R, S, C))
    y = np.full((N * H * W, K), np.nan, "float32")           # bfloat16 values are held in float32
    emulate(func, [x, w, y])
    ref = conv_ref(x, w, st, pad)
    assert not np.isnan(y).any()
    np.testing.assert_array_equal(y, dt.round_bfloat16(y))  # representable: rounded at the store
    np.testing.assert_allclose(y, ref, rtol=2.0 ** -8, atol=1e-6 * np.abs(ref).max())
    _nvcc(src)


def test_bf16_arguments_must_be_rounded(rng):
    s, (A, B, C) = matmul_tensorcore(32, 32, 32, impl="mma", dtype="bfloat16", block=(1, 1), warp=(2, 2), chunk=1,
                                     double_buffer=False)
    func = tc.lower(s, [A, B, C], target="cuda")
    a = rng.uniform(-1, 1, (32, 32)).astype("float32")           # not rounded to bfloat16
    with pytest.raises(TypeError, match=r"'A' is bfloat16: pass float32 values rounded to bfloat16 "
                                        r"\(tilecraft.ir.dtype.round_bfloat16\), got float32 values that are not"):
        emulate(func, [a, _bf16(rng, (32, 32)), np.zeros((32, 32), "float32")])


def test_bf16_on_the_cpu_is_refused():
    from tilecraft import te
    from tilecraft.codegen.llvm_types import CodegenError
    A = te.placeholder((8,), "bfloat16", name="A")
    B = te.compute((8,), lambda i: A[i].astype("float32") * 2, name="B")
    with pytest.raises(CodegenError, match=r"bfloat16 is not supported by the LLVM \(CPU\) backend yet"):
        tc.build(te.create_schedule(B.op), [A, B], target="llvm")


def test_the_interpreter_rounds_casts_to_bf16(rng):
    from tilecraft import te
    from tilecraft.interp import evaluate
    A = te.placeholder((64,), "float32", name="A")
    B = te.compute((64,), lambda i: A[i].astype("bfloat16"), name="B")
    C = te.compute((64,), lambda i: B[i].astype("float32") * 3, name="C")
    a = rng.uniform(-4, 4, 64).astype("float32")
    b, c = evaluate([B, C], {A: a})
    np.testing.assert_array_equal(b, dt.round_bfloat16(a))
    np.testing.assert_array_equal(c, dt.round_bfloat16(a) * 3)


@pytest.mark.parametrize("layout_b", ["row_major", "col_major"])
def test_gpu_bf16_gemm(layout_b, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_bf16_gemm_emulated_and_compiled (emulator + nvcc) only")
    import torch
    M = N = K = 1024
    s, (A, B, C) = matmul_tensorcore(M, N, K, impl="mma", dtype="bfloat16", layout_b=layout_b, block=(2, 2),
                                     warp=(4, 4), chunk=2, stages=3, double_buffer=False, min_blocks=2)
    mod = tc.build(s, [A, B, C], target="cuda")
    for _ in range(2):
        a = torch.from_numpy(_bf16(rng, (M, K))).cuda().to(torch.bfloat16)
        b = torch.from_numpy(_bf16(rng, (K, N) if layout_b == "row_major" else (N, K))).cuda().to(torch.bfloat16)
        c = torch.full((M, N), float("nan"), device="cuda")
        mod(a, b, c)
        bb = b.double() if layout_b == "row_major" else b.double().t()
        ref = (a.double() @ bb).cpu().numpy()
        got = c.cpu().numpy()
        assert not np.isnan(got).any() and _rel_err(got, ref) < 1e-5


@pytest.mark.parametrize("out_dtype,tol", [("float32", 1e-5), ("bfloat16", 4e-3)])
def test_gpu_bf16_conv_resnet50(out_dtype, tol, rng):
    """The template's untuned bf16 conv at ResNet-50's 3x3 128@28 layer (batch 32), fp32 or bf16
    output, against torch's float64 convolution of the same bf16 values."""
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_bf16_conv_emulated_and_compiled (emulator + nvcc) only")
    import warnings

    import torch
    import torch.nn.functional as F

    import tilecraft.autotune as autotune
    from tilecraft.topi import conv2d_nhwc_tensorcore as CT
    layer = (32, 28, 28, 128, 128, 3, 3, 1, 1)
    N, H, W, C, K, R, S, st, pad = layer
    task = autotune.task.create(CT.TEMPLATE, args=(*layer, out_dtype, "bfloat16"), target="cuda")
    with tc.target.Target("cuda"), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the fallback warns once per workload and process
        s, (X, Wt, Y) = task.func(*task.args)
    mod = tc.build(s, [X, Wt, Y], target="cuda")
    for _ in range(2):                             # fresh inputs each time
        x = torch.from_numpy(_bf16(rng, (N, H, W, C))).cuda().to(torch.bfloat16)
        w = torch.from_numpy(_bf16(rng, (K, R, S, C))).cuda().to(torch.bfloat16)
        ref = F.conv2d(x.double().permute(0, 3, 1, 2), w.double().permute(0, 3, 1, 2), stride=st, padding=pad)
        ref = ref.permute(0, 2, 3, 1).reshape(-1, K).cpu().numpy()
        y = torch.full((N * H * W, K), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
        mod(x, w, y)
        got = y.float().cpu().numpy()
        assert not np.isnan(got).any() and _rel_err(got, ref) < tol
