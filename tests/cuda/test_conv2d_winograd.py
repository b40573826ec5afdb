"""Winograd F(m×m, 3×3) conv2d NCHW float32 (topi/conv2d_winograd_cuda.py) and its template
``topi/conv2d_nchw_winograd.cuda``.

The matrices are checked against the 1-D correlation they stand for (exactly, in fractions of
float64). Each schedule is lowered for CUDA, run in the emulator on fresh random inputs with the
output poisoned (NaN), compared with a float64 numpy convolution, and compiled by nvcc for
sm_90: padding 1 and 0, odd outputs (tiles that cross the image's edge), batch > 1, P not a
multiple of the GEMM's column block (zero columns), several k-steps, F(2×2) and F(4×4).
Tolerances: F(2×2) 1e-5 (a few fp32 ulps: its transforms add at most 4 values of the inputs'
size), F(4×4) 1e-4 (coefficients up to 8 and 1/24: about one decimal digit lost).
``test_gpu_*`` run ResNet-50's 3×3 layers at batch 32 on a GPU against torch (``-m cuda``).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tilecraft as tc
import tilecraft.autotune as autotune
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.topi import conv2d_winograd_cuda as WG
from tilecraft.topi.conv2d_winograd_cuda import (conv2d_nchw_winograd, winograd_matrices, winograd_tile_size,
                                                 winograd_weight_transform)

from .test_cuda_ops import gpu_available
from .test_tensorcore import _nvcc, _rel_err

pytestmark = pytest.mark.cuda

TOL = {2: 1e-5, 4: 1e-4}


def conv_ref(x, w, padding):
    """float64 NCHW convolution, stride 1."""
    N, C, H, W = x.shape
    OH, OW = H + 2 * padding - 2, W + 2 * padding - 2
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    y = np.zeros((N, w.shape[0], OH, OW))
    for a in range(3):
        for b in range(3):
            y += np.einsum("nchw,oc->nohw", xp[:, :, a:a + OH, b:b + OW], w[:, :, a, b].astype("float64"))
    return y


def _run(func, rng, N, CI, H, W, CO, padding, m):
    x = rng.uniform(-1, 1, (N, CI, H, W)).astype("float32")
    w = rng.uniform(-1, 1, (CO, CI, 3, 3)).astype("float32")
    OH, OW = H + 2 * padding - 2, W + 2 * padding - 2
    y = np.full((N, CO, OH, OW), np.nan, "float32")
    emulate(func, [x, winograd_weight_transform(w, m), y])
    return y, conv_ref(x, w, padding)


@pytest.mark.parametrize("m", [2, 4])
def test_matrices_compute_the_correlation(m):
    from fractions import Fraction as Fr
    mats = {k: [[Fr(v) for v in row] for row in WG._MATRICES[m][k]] for k in ("AT", "G", "BT")}
    alpha = m + 2
    rng = np.random.default_rng(m)
    for _ in range(5):
        d = [Fr(int(v)) for v in rng.integers(-9, 10, alpha)]
        g = [Fr(int(v)) for v in rng.integers(-9, 10, 3)]
        Gg = [sum(r[k] * g[k] for k in range(3)) for r in mats["G"]]
        Bd = [sum(r[k] * d[k] for k in range(alpha)) for r in mats["BT"]]
        y = [sum(r[k] * Gg[k] * Bd[k] for k in range(alpha)) for r in mats["AT"]]
        assert y == [sum(d[i + k] * g[k] for k in range(3)) for i in range(m)]
    AT, G, BT = winograd_matrices(m)
    assert AT.shape == (m, alpha) and G.shape == (alpha, 3) and BT.shape == (alpha, alpha)


def test_weight_transform_layout():
    w = np.random.default_rng(0).uniform(-1, 1, (6, 5, 3, 3)).astype("float32")
    U = winograd_weight_transform(w, 2)
    assert U.shape == (4, 4, 5, 6) and U.dtype == np.float32
    _, G, _ = winograd_matrices(2)
    np.testing.assert_allclose(U[:, :, 3, 1], G @ w[1, 3].astype("float64") @ G.T, rtol=1e-6)


CONVS = [
    # (N, CI, H, W, CO, padding, m, options)
    ((2, 16, 7, 7, 16, 1, 2, dict(block_co=16, block_p=32, threads=(4, 8), vthreads=(1, 1), k_tile=8,
                                  transform_threads=32))),
    ((3, 16, 6, 5, 32, 1, 2, dict(block_co=16, block_p=64, threads=(4, 8), vthreads=(1, 2), k_tile=8,
                                  double_buffer=False, transform_threads=64))),
    ((2, 8, 9, 9, 32, 0, 2, dict(block_co=32, block_p=32, threads=(4, 8), vthreads=(2, 1), k_tile=4))),
    ((2, 16, 7, 7, 16, 1, 4, dict(block_co=16, block_p=32, threads=(4, 8), vthreads=(1, 1), k_tile=8,
                                  transform_threads=32))),
    ((1, 16, 10, 10, 16, 1, 4, dict(block_co=16, block_p=32, threads=(4, 8), vthreads=(1, 1), k_tile=8))),
]
CONV_IDS = ["x".join(map(str, c[:5])) + f"-p{c[5]}-m{c[6]}" for c in CONVS]


@pytest.mark.parametrize("conv", CONVS, ids=CONV_IDS)
def test_winograd_emulated_and_compiled(conv, rng):
    N, CI, H, W, CO, pad, m, opts = conv
    s, args = conv2d_nchw_winograd(N, CI, H, W, CO, pad, m=m, **opts)
    func = tc.lower(s, args, target="cuda")
    src = generate_cuda(func)
    assert src.count("__global__") == 3            # input transform, batched GEMM, output transform
    assert " 0.0f * " not in src and "(0.0f * " not in src   # zero terms of the transforms left out
    y, ref = _run(func, rng, N, CI, H, W, CO, pad, m)
    assert not np.isnan(y).any(), "elements of the output were not written"
    assert _rel_err(y, ref) < TOL[m], conv
    _nvcc(src)


def test_epilogue_bias_relu(rng):
    from tilecraft import te
    N, CI, H, W, CO = 2, 16, 5, 6, 16
    B = te.placeholder((CO,), "float32", name="B")
    s, args = conv2d_nchw_winograd(N, CI, H, W, CO, 1, m=2, block_co=16, block_p=32, threads=(4, 8),
                                   vthreads=(1, 1), k_tile=8, epilogue=lambda v, n, c, y, x: te.max(v + B[c], 0.0),
                                   epilogue_args=[B])
    assert [t.name for t in args] == ["Data", "U", "B", "Out"]
    func = tc.lower(s, args, target="cuda")
    x = rng.uniform(-1, 1, (N, CI, H, W)).astype("float32")
    w = rng.uniform(-1, 1, (CO, CI, 3, 3)).astype("float32")
    b = rng.uniform(-1, 1, CO).astype("float32")
    y = np.full((N, CO, H, W), np.nan, "float32")
    emulate(func, [x, winograd_weight_transform(w, 2), b, y])
    ref = np.maximum(conv_ref(x, w, 1) + b[None, :, None, None], 0)
    assert (ref == 0).any() and (ref > 0).any()
    assert _rel_err(y, ref) < TOL[2]
    _nvcc(generate_cuda(func))


TEMPLATE_LAYERS = [(2, 16, 5, 5, 32, 3, 3, 1, 1, "float32"), (2, 16, 8, 8, 16, 3, 3, 1, 1, "float32"),
                   (2, 16, 6, 6, 16, 3, 3, 1, 1, "float32", 4)]


@pytest.mark.parametrize("args", TEMPLATE_LAYERS, ids=["x".join(map(str, a[:5])) + (f"-m{a[10]}" if len(a) > 10 else "")
                                                      for a in TEMPLATE_LAYERS])
def test_template_configs_emulated_and_compiled(args, rng):
    task = autotune.task.create(WG.TEMPLATE, args=args, target="cuda")
    assert len(task.config_space) > 1
    configs = [None] + [task.config_space.get(i) for i in task.config_space.sample_ints(2, rng)]
    m = args[10] if len(args) > 10 else winograd_tile_size(args[2])
    for cfg in configs:
        with tc.target.Target("cuda"):
            if cfg is None:
                with pytest.warns(UserWarning, match="fallback configuration"):
                    s, tensors = task.func(*task.args)
            else:
                s, tensors = task.instantiate(cfg)
        assert [int(d.value) for d in tensors[1].shape] == [m + 2, m + 2, args[1], args[4]]
        func = tc.lower(s, list(tensors), target="cuda")
        y, ref = _run(func, rng, *args[:5], args[8], m)
        assert not np.isnan(y).any()
        assert _rel_err(y, ref) < TOL[m], f"config {cfg}"
        _nvcc(generate_cuda(func))


def test_template_filter_keeps_fitting_tiles_only():
    task = autotune.task.create(WG.TEMPLATE, args=(32, 256, 14, 14, 256, 3, 3, 1, 1, "float32"), target="cuda")
    space = task.config_space
    assert len(space) > 100
    for i in range(0, len(space), 7):
        c = space.get(space.valid_index(i))
        assert WG.gemm_tiles_ok(256, 256, c["block_co"].val, c["block_p"].val, c["vthreads"].val,
                                c["threads"].val, c["k_tile"].val, bool(c["double_buffer"].val))
    assert winograd_tile_size(14) == 4 and winograd_tile_size(7) == 4 and winograd_tile_size(5) == 2


def test_cli_lists_the_template(capsys):
    from tilecraft.cli import main
    main(["templates"])
    assert WG.TEMPLATE in capsys.readouterr().out


def test_errors():
    with pytest.raises(ValueError, match=r"Winograd tile m=3 is not supported: use 2 or 4"):
        winograd_matrices(3)
    with pytest.raises(ValueError, match=r"Winograd weight transform: the filter must be \(CO, CI, 3, 3\), got "
                                         r"\(4, 4, 5, 5\)"):
        winograd_weight_transform(np.zeros((4, 4, 5, 5), "float32"))
    with pytest.raises(ValueError, match=r"Winograd GEMM tiles do not fit the layer CI=16, CO=48: block_co=32, "
                                         r"block_p=32"):
        conv2d_nchw_winograd(2, 16, 7, 7, 48, block_co=32, block_p=32, threads=(4, 8), vthreads=(1, 1))
    with pytest.raises(ValueError, match=r"Winograd conv2d takes 3x3 filters at stride 1, got 3x3 at stride 2: "
                                         r"use topi/conv2d_nchw.cuda"):
        autotune.task.create(WG.TEMPLATE, args=(2, 16, 8, 8, 16, 3, 3, 2, 1, "float32"), target="cuda")
    with pytest.raises(ValueError, match=r"Winograd conv2d is float32 only, got float16"):
        autotune.task.create(WG.TEMPLATE, args=(2, 16, 8, 8, 16, 3, 3, 1, 1, "float16"), target="cuda")
    with pytest.raises(ValueError, match=r"Winograd conv2d: no GEMM tile fits CI=16, CO=24"):
        WG.fallback_tiles(16, 24)


GPU_LAYERS = [(32, 64, 56, 56, 64), (32, 128, 28, 28, 128), (32, 256, 14, 14, 256), (32, 512, 7, 7, 512)]


@pytest.mark.parametrize("layer", GPU_LAYERS, ids=["x".join(map(str, lay)) for lay in GPU_LAYERS])
def test_gpu_winograd_resnet50(layer, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_winograd_emulated_and_compiled (emulator + nvcc) only")
    import torch
    import torch.nn.functional as F
    N, CI, H, W, CO = layer
    task = autotune.task.create(WG.TEMPLATE, args=(N, CI, H, W, CO, 3, 3, 1, 1, "float32"), target="cuda")
    with tc.target.Target("cuda"), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the fallback warns once per workload and process
        s, (X, U, Y) = task.func(*task.args)
    mod = tc.build(s, [X, U, Y], target="cuda")
    m = winograd_tile_size(H)
    for _ in range(2):                             # fresh inputs each time
        x = rng.uniform(-1, 1, (N, CI, H, W)).astype("float32")
        w = rng.uniform(-1, 1, (CO, CI, 3, 3)).astype("float32")
        xt = torch.from_numpy(x).cuda()
        ref = F.conv2d(xt.double(), torch.from_numpy(w).cuda().double(), padding=1).cpu().numpy()
        y = torch.full((N, CO, H, W), float("nan"), device="cuda")
        mod(xt, torch.from_numpy(winograd_weight_transform(w, m)).cuda(), y)
        got = y.cpu().numpy()
        assert not np.isnan(got).any()
        assert _rel_err(got, ref) < TOL[m]
