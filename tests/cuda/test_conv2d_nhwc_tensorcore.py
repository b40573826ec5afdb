"""conv2d NHWC on tensor cores as an implicit GEMM (topi/conv2d_nhwc_tensorcore.py) and its template
``topi/conv2d_nhwc_tensorcore.cuda``.

Each schedule is lowered for CUDA, run in the emulator on fresh random inputs with the output
poisoned (NaN), compared with a float64 numpy convolution, and compiled by nvcc for sm_90: padding
(the border fetched by ``tc_cp_async_zfill``), stride 2, 1×1 filters, a 3×1 filter, several
k-steps per filter tap, fp16 and fp32 output, the synchronous (``stages=0``) and pipelined fetch.
A copy whose zero-fill predicate is dropped must fail in the emulator (it reads outside the
input); layers no tile divides are refused naming the dimension; ``test_gpu_*`` run ResNet-50
layers at batch 32 on a GPU against torch (``-m cuda``).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tilecraft as tc
import tilecraft.autotune as autotune
from tilecraft import te
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_emulate import EmulationError, emulate
from tilecraft.schedule.passes import gpu_double_buffer
from tilecraft.topi import conv2d_nhwc_tensorcore as CT
from tilecraft.topi.conv2d_nhwc_tensorcore import conv2d_nhwc_gemm, conv2d_nhwc_tensorcore, out_size

from .test_cuda_ops import gpu_available
from .test_tensorcore import _nvcc, _rel_err

pytestmark = pytest.mark.cuda


def conv_ref(x, w, stride, padding):
    """float64 NHWC convolution of ``x`` (N, H, W, C) with ``w`` (K, R, S, C): (N·OH·OW, K)."""
    N, H, W, C = x.shape
    K, R, S, _ = w.shape
    OH, OW = out_size(H, W, R, S, stride, padding)
    xp = np.zeros((N, H + 2 * padding, W + 2 * padding, C))
    xp[:, padding:padding + H, padding:padding + W] = x
    y = np.zeros((N, OH, OW, K))
    for r in range(R):
        for s in range(S):
            patch = xp[:, r:r + stride * (OH - 1) + 1:stride, s:s + stride * (OW - 1) + 1:stride, :]
            y += patch @ w[:, r, s, :].astype("float64").T
    return y.reshape(-1, K)


def _inputs(rng, N, H, W, C, K, R, S):
    x = rng.uniform(-1, 1, (N, H, W, C)).astype("float16")
    w = rng.uniform(-1, 1, (K, R, S, C)).astype("float16")
    return x, w


def _run(func, rng, layer, out_dtype):
    N, H, W, C, K, R, S, st, pad = layer
    OH, OW = out_size(H, W, R, S, st, pad)
    x, w = _inputs(rng, N, H, W, C, K, R, S)
    y = np.full((N * OH * OW, K), np.nan, out_dtype)
    emulate(func, [x, w, y])
    return y, conv_ref(x.astype("float64"), w.astype("float64"), st, pad)


def _check(y, ref, out_dtype, what=""):
    assert not np.isnan(y).any(), f"{what}: elements of the output were not written"
    assert _rel_err(y, ref) < (1e-3 if out_dtype == "float16" else 1e-6), what


CONVS = [
    # ((N, H, W, C, K, R, S, stride, padding), out_dtype, options)
    ((2, 8, 8, 32, 64, 3, 3, 1, 1), "float32", dict(block=(2, 2), warp=(1, 1), chunk=1, stages=3)),
    ((2, 7, 7, 32, 32, 3, 3, 2, 1), "float16", dict(block=(2, 1), warp=(1, 2), chunk=2, stages=2)),
    ((2, 8, 8, 64, 32, 1, 1, 1, 0), "float16", dict(block=(2, 2), warp=(2, 1), chunk=2, stages=3)),
    ((1, 8, 8, 48, 16, 3, 1, 1, 1), "float32", dict(block=(1, 1), warp=(1, 1), chunk=1, stages=0)),
    ((2, 8, 12, 64, 32, 3, 3, 1, 1), "float16", dict(block=(2, 2), warp=(1, 1), chunk=2, stages=4, min_blocks=2,
                                                    raster=3)),
    ((4, 9, 9, 16, 16, 3, 3, 2, 0), "float16", dict(block=(1, 1), warp=(4, 1), chunk=1, stages=2)),
]
CONV_IDS = ["x".join(map(str, lay)) + f"-{od}-s{o['stages']}" for lay, od, o in CONVS]


@pytest.mark.parametrize("layer,out_dtype,opts", CONVS, ids=CONV_IDS)
def test_conv_emulated_and_compiled(layer, out_dtype, opts, rng):
    s, (X, Wt, Y) = conv2d_nhwc_tensorcore(*layer, out_dtype=out_dtype, **opts)
    func = tc.lower(s, [X, Wt, Y], target="cuda")
    src = generate_cuda(func)
    assert "mma.sync.aligned" in src and "tc_ldmatrix" in src
    if opts["stages"]:
        # the gather is 16-byte copies: zero-filled where a tap falls into the padding
        assert ("tc_cp_async_zfill<16>(" in src) == bool(layer[-1])
        assert "tc_cp_async<16>(" in src
    y, ref = _run(func, rng, layer, out_dtype)
    _check(y, ref, out_dtype, str(layer))
    _nvcc(src)


def test_dropping_the_zero_fill_predicate_reads_outside_the_input(monkeypatch, rng):
    orig = gpu_double_buffer._async_fetch

    def no_pred(stmt):
        out = orig(stmt)
        if out is None:
            return out
        from tilecraft.ir.expr import Call
        from tilecraft.ir.functor import IRMutator

        class Drop(IRMutator):
            def visit_Call(self, e):
                if e.name == "tc_cp_async_zfill":
                    return Call("tc_cp_async", e.args[:3], e.dtype)
                return super().visit_Call(e)
        return Drop().visit_stmt(out)
    monkeypatch.setattr(gpu_double_buffer, "_async_fetch", no_pred)
    layer = (2, 8, 8, 32, 32, 3, 3, 1, 1)
    s, (X, Wt, Y) = conv2d_nhwc_tensorcore(*layer, block=(2, 2), warp=(1, 1), chunk=1, stages=2)
    func = tc.lower(s, [X, Wt, Y], target="cuda")
    assert "tc_cp_async_zfill<" not in generate_cuda(func)
    with pytest.raises(EmulationError, match=r"out-of-bounds access X\[-?\d+\]"):
        _run(func, rng, layer, "float16")


def test_the_gemm_view():
    X = te.placeholder((2, 8, 8, 32), "float16", name="X")
    Wt = te.placeholder((16, 3, 3, 32), "float16", name="W")
    A, B, Y = conv2d_nhwc_gemm(X, Wt, stride=2, padding=1)
    assert [int(d.value) for d in A.shape] == [9, 2 * 4 * 4, 32]
    assert [int(d.value) for d in B.shape] == [9, 16, 32]
    assert [int(d.value) for d in Y.shape] == [32, 16] and Y.dtype == "float32"
    assert [r.var.name for r in Y.op.reduce_axis] == ["rs", "c"]


# -- the template --------------------------------------------------------------------------------------

TEMPLATE_LAYERS = [(2, 8, 8, 32, 64, 3, 3, 1, 1, "float16"), (2, 8, 8, 64, 32, 1, 1, 2, 0, "float32")]


@pytest.mark.parametrize("args", TEMPLATE_LAYERS, ids=["x".join(map(str, a[:9])) for a in TEMPLATE_LAYERS])
def test_template_configs_emulated_and_compiled(args, rng):
    task = autotune.task.create(CT.TEMPLATE, args=args, target="cuda")
    assert len(task.config_space) > 1
    configs = [None] + [task.config_space.get(i) for i in task.config_space.sample_ints(2, rng)]
    for cfg in configs:
        with tc.target.Target("cuda"):
            if cfg is None:
                with pytest.warns(UserWarning, match="fallback configuration"):
                    s, tensors = task.func(*task.args)
            else:
                s, tensors = task.instantiate(cfg)
        func = tc.lower(s, list(tensors), target="cuda")
        y, ref = _run(func, rng, args[:9], args[9])
        _check(y, ref, args[9], f"config {cfg}")
        _nvcc(generate_cuda(func))


def test_template_filter_keeps_dividing_tiles_only():
    # M = 2·8·8 = 128, K = 48: only one-tile-wide blocks divide K; C = 32: steps of 16 or 32
    task = autotune.task.create(CT.TEMPLATE, args=(2, 8, 8, 32, 48, 3, 3, 1, 1, "float16"), target="cuda")
    space = task.config_space
    assert len(space) > 1
    for i in range(len(space)):
        c = space.get(space.valid_index(i))
        assert 48 % (16 * c["block"].val[1] * c["warp"].val[1]) == 0
        assert 128 % (16 * c["block"].val[0] * c["warp"].val[0]) == 0
        assert 32 % (16 * c["chunk"].val) == 0
    # the fallbacks tile ResNet-50's layers at batch 32 with 128 x 128 blocks where K allows
    assert CT.conv_fits(32 * 14 * 14, 256, 256, 3, 3, (2, 2), (4, 4), 2, 3)
    assert not CT.conv_fits(32 * 56 * 56, 64, 64, 3, 3, (2, 2), (4, 4), 2, 3)      # K = 64 < 128


def test_fallback_gives_the_gpu_enough_blocks():
    # ResNet-50 at batch 32 (the H100 run of bench/results/h100_2026-11-24_s21_tcconv: the fastest
    # variant at four layers, 5% / 15% behind at the 56x56 ones): 128 x 128 blocks where that gives a block
    # per multiprocessor (196 at 28x28 and the stride-2 layer), 128 x 64 at 56x56 (K = 64) and at
    # 14x14 (196 blocks; 128 x 128 would be 98 for 132 multiprocessors)
    for (N, H, W, C, K, R, S, st, pad), want in (((32, 56, 56, 64, 64, 3, 3, 1, 1), (128, 64)),
                                                 ((32, 28, 28, 128, 128, 3, 3, 1, 1), (128, 128)),
                                                 ((32, 56, 56, 128, 128, 3, 3, 2, 1), (128, 128)),
                                                 ((32, 14, 14, 256, 256, 3, 3, 1, 1), (128, 64)),
                                                 ((32, 14, 14, 1024, 256, 1, 1, 1, 0), (128, 64)),
                                                 ((32, 56, 56, 256, 64, 1, 1, 1, 0), (128, 64))):
        OH, OW = out_size(H, W, R, S, st, pad)
        M = N * OH * OW
        o = CT.fallback(M, K, lambda o: CT.conv_fits(M, K, C, R, S, o["block"], o["warp"], o["chunk"], o["stages"]))
        assert (16 * o["block"][0] * o["warp"][0], 16 * o["block"][1] * o["warp"][1]) == want
        assert (M // want[0]) * (K // want[1]) >= CT.MIN_BLOCKS
    # a layer too small for MIN_BLOCKS gets the tile with the most blocks
    assert CT.fallback(128, 64, lambda o: True)["warp"] == (1, 1)


def test_cli_lists_the_template(capsys):
    from tilecraft.cli import main
    main(["templates"])
    assert CT.TEMPLATE in capsys.readouterr().out


# -- errors -----------------------------------------------------------------------------------------

def test_errors():
    with pytest.raises(ValueError, match=r"conv2d_nhwc_tensorcore: C=48 input channels is not a multiple of the "
                                         r"reduction step's 32 \(16 x chunk=2\): a step must not straddle two filter "
                                         r"taps; choose a chunk with 16·chunk dividing C \(or pad the channels\)"):
        conv2d_nhwc_tensorcore(2, 8, 8, 48, 32, 3, 3, 1, 1, chunk=2)
    with pytest.raises(ValueError, match=r"conv2d_nhwc_tensorcore: N·OH·OW=98 output pixels \(2x7x7\) is not a "
                                         r"multiple of the block tile's 32 \(16 x block\[0\]=2 x warp\[0\]=1\)"):
        conv2d_nhwc_tensorcore(2, 7, 7, 32, 32, 3, 3, 1, 1, block=(2, 2), warp=(1, 1), chunk=1)
    with pytest.raises(ValueError, match=r"conv2d_nhwc_tensorcore: K=48 output channels is not a multiple of the "
                                         r"block tile's 32 \(16 x block\[1\]=2 x warp\[1\]=1\)"):
        conv2d_nhwc_tensorcore(2, 8, 8, 32, 48, 3, 3, 1, 1, block=(2, 2), warp=(1, 1), chunk=1)
    with pytest.raises(ValueError, match=r"conv2d_nhwc_tensorcore takes float16 or bfloat16 input and weights, got "
                                         r"'float32'"):
        conv2d_nhwc_tensorcore(2, 8, 8, 32, 32, 3, 3, dtype="float32")
    with pytest.raises(ValueError, match=r"conv2d_nhwc_tensorcore writes float16, bfloat16 or float32, got "
                                         r"out_dtype='int32'"):
        conv2d_nhwc_tensorcore(2, 8, 8, 32, 32, 3, 3, out_dtype="int32")
    with pytest.raises(ValueError, match=r"topi/conv2d_nhwc_tensorcore.cuda: C=3 input channels is not a multiple of "
                                         r"16 \(the tensor-core tile\); no configuration tiles it: pad the input "
                                         r"channels to a multiple of 16"):
        autotune.task.create(CT.TEMPLATE, args=(32, 224, 224, 3, 64, 7, 7, 2, 3, "float16"), target="cuda")
    with pytest.raises(ValueError, match=r"topi/conv2d_nhwc_tensorcore.cuda: N·OH·OW=49 output pixels is not a "
                                         r"multiple of 16"):
        autotune.task.create(CT.TEMPLATE, args=(1, 7, 7, 32, 32, 3, 3, 1, 1, "float16"), target="cuda")
    X = te.placeholder((1, 8, 8, 32), "float16", name="X")
    with pytest.raises(ValueError, match=r"conv2d NHWC: the input X has C=32 channels but the weights W \(K, R, S, "
                                         r"C\) have 16"):
        conv2d_nhwc_gemm(X, te.placeholder((16, 3, 3, 16), "float16", name="W"), 1, 1)
    with pytest.raises(ValueError, match=r"conv2d NHWC: a 9x9 filter with stride 1 and padding 0 leaves no output "
                                         r"of the 8x8 input"):
        conv2d_nhwc_gemm(X, te.placeholder((16, 9, 9, 32), "float16", name="W"), 1, 0)


# -- on a GPU: ResNet-50 layers at batch 32 against torch -------------------------------------------

GPU_LAYERS = [(32, 56, 56, 64, 64, 3, 3, 1, 1), (32, 14, 14, 256, 256, 3, 3, 1, 1),
              (32, 56, 56, 256, 64, 1, 1, 1, 0), (32, 56, 56, 128, 128, 3, 3, 2, 1)]


@pytest.mark.parametrize("layer", GPU_LAYERS, ids=["x".join(map(str, lay)) for lay in GPU_LAYERS])
def test_gpu_conv_resnet50(layer, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_conv_emulated_and_compiled (emulator + nvcc) only")
    import torch
    import torch.nn.functional as F
    N, H, W, C, K, R, S, st, pad = layer
    task = autotune.task.create(CT.TEMPLATE, args=(*layer, "float16"), target="cuda")
    with tc.target.Target("cuda"), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the fallback warns once per workload and process
        s, (X, Wt, Y) = task.func(*task.args)
    mod = tc.build(s, [X, Wt, Y], target="cuda")
    OH, OW = out_size(H, W, R, S, st, pad)
    for _ in range(2):                             # fresh inputs each time
        x, w = _inputs(rng, N, H, W, C, K, R, S)
        xt, wt = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
        ref = F.conv2d(xt.double().permute(0, 3, 1, 2), wt.double().permute(0, 3, 1, 2), stride=st, padding=pad)
        ref = ref.permute(0, 2, 3, 1).reshape(-1, K).cpu().numpy()
        y = torch.full((N * OH * OW, K), float("nan"), device="cuda", dtype=torch.float16)
        mod(xt, wt, y)
        got = y.cpu().numpy()
        assert not np.isnan(got).any()
        assert _rel_err(got, ref) < 2e-3


def test_zero_fill_copy_call():
    from tilecraft import tir
    S = tir.decl_buffer((64,), "float16", name="S", scope="shared")
    G = tir.decl_buffer((64,), "float16", name="G")
    i = te.var("i")
    call = tir.call_intrin("handle", "tir.tc_cp_async_zfill", S.access_ptr("w"), G.access_ptr("r"), 16, i < 3)
    assert call.name == "tc_cp_async_zfill" and len(call.args) == 4
    with pytest.raises(TypeError, match=r"call_intrin\('tir.tc_cp_async_zfill'\): argument 3 \(pred\) must be a "
                                        r"scalar bool condition, got `i` \(int32\)"):
        tir.call_intrin("handle", "tir.tc_cp_async_zfill", S.access_ptr("w"), G.access_ptr("r"), 16, i)
    with pytest.raises(ValueError, match=r"takes 4 argument\(s\) \(dst, src, bytes, pred\), got 3"):
        tir.call_intrin("handle", "tir.tc_cp_async_zfill", S.access_ptr("w"), G.access_ptr("r"), 16)
