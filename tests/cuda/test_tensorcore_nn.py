"""Tensor-core batch_matmul and dense + bias + GELU (topi/tensorcore_nn.py) and their templates
(``topi/batch_matmul_tensorcore.cuda``, ``topi/dense_tensorcore.cuda``).

Each schedule is lowered for CUDA, run in the emulator on fresh random inputs with the output
poisoned, compared with float64 numpy (int8 exactly), and compiled by nvcc for sm_90; the
templates' fallbacks and sampled configurations likewise; shapes no tile divides are refused with
errors naming the dimension; ``test_gpu_*`` run the attention and BERT shapes on a GPU against
float64 (``-m cuda``).
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tilecraft as tc
import tilecraft.autotune as autotune
from tilecraft import te
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.topi import tensorcore_nn as TN
from tilecraft.topi.tensorcore import block_axes, gemm_compute
from tilecraft.topi.tensorcore_nn import batch_matmul_tensorcore, dense_tensorcore

from .test_cuda_ops import gpu_available
from .test_tensorcore import _nvcc, _poisoned, _rel_err

pytestmark = pytest.mark.cuda

_erf = np.vectorize(math.erf)


def _bmm_inputs(rng, dtype, batch, M, N, K, layout_b):
    """A (batch, M, K), B stored as ``layout_b`` says, the float64 A[b] @ B[b] (int8: whole range)."""
    bshape = (batch, K, N) if layout_b == "row_major" else (batch, N, K)
    if dtype == "int8":
        a = rng.integers(-128, 128, (batch, M, K)).astype("int8")
        b = rng.integers(-128, 128, bshape).astype("int8")
    else:
        a, b = rng.uniform(-1, 1, (batch, M, K)).astype(dtype), rng.uniform(-1, 1, bshape).astype(dtype)
    bb = b.astype("float64") if layout_b == "row_major" else b.astype("float64").transpose(0, 2, 1)
    return a, b, a.astype("float64") @ bb


def _poisoned3(shape, dtype):
    return _poisoned(int(np.prod(shape[:-1])), shape[-1], dtype).reshape(shape)


def _check(got, ref, dtype, out_dtype, what=""):
    if dtype == "int8":
        np.testing.assert_array_equal(got, ref.astype("int64"), err_msg=what)
    else:
        assert not np.isnan(got).any(), f"{what}: elements of the output were not written"
        assert _rel_err(got, ref) < (1e-3 if out_dtype == "float16" else 1e-6), what


# -- batch_matmul ------------------------------------------------------------------------------

BMMS = [
    # (dtype, out_dtype, layout_b, (batch, M, N, K), options)
    ("float16", "float16", "col_major", (3, 64, 32, 48), dict(block=(2, 1), warp=(1, 2), chunk=1, stages=2)),
    ("float16", None, "row_major", (2, 64, 64, 96), dict(block=(2, 2), warp=(2, 1), chunk=2, stages=3)),
    ("float16", "float16", "row_major", (2, 128, 64, 64), dict(block=(2, 2), warp=(2, 1), chunk=2, stages=0,
                                                               double_buffer=True, raster=2, min_blocks=2)),
    ("float32", None, "col_major", (2, 32, 64, 32), dict(block=(1, 2), warp=(2, 1), chunk=2, stages=2)),
    ("int8", None, "col_major", (2, 32, 32, 64), dict(block=(1, 1), warp=(2, 2), chunk=1, stages=2)),
]
BMM_IDS = [f"{d}-{o or 'acc'}-{l}-{'x'.join(map(str, sz))}" for d, o, l, sz, _ in BMMS]


@pytest.mark.parametrize("dtype,out_dtype,layout_b,size,opts", BMMS, ids=BMM_IDS)
def test_batch_matmul_emulated_and_compiled(dtype, out_dtype, layout_b, size, opts, rng):
    batch, M, N, K = size
    s, (A, B, C) = batch_matmul_tensorcore(batch, M, N, K, layout_b=layout_b, dtype=dtype, out_dtype=out_dtype,
                                           **opts)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    assert "blockIdx.z" in src and "mma.sync.aligned" in src
    a, b, ref = _bmm_inputs(rng, dtype, batch, M, N, K, layout_b)
    c = _poisoned3((batch, M, N), C.dtype)
    emulate(func, [a, b, c])
    _check(c, ref, dtype, out_dtype)
    _nvcc(src)


def test_attention_shapes_compile():
    """12 heads x seq 512 x head dim 64 (generated and nvcc-compiled; emulated at small sizes above)."""
    for layout_b, (M, N, K) in (("col_major", (512, 512, 64)), ("row_major", (512, 64, 512))):
        s, (A, B, C) = batch_matmul_tensorcore(12, M, N, K, layout_b=layout_b, out_dtype="float16", block=(2, 2),
                                               warp=(4, 2), chunk=2, stages=3)
        _nvcc(generate_cuda(tc.lower(s, [A, B, C], target="cuda")))


# -- dense + bias + GELU --------------------------------------------------------------------------

def _dense_inputs(rng, dtype, out_dtype, M, N, K, form):
    x, w = rng.uniform(-1, 1, (M, K)).astype(dtype), rng.uniform(-1, 1, (N, K)).astype(dtype)
    bias = rng.uniform(-2, 2, N).astype(out_dtype)
    z = x.astype("float64") @ w.astype("float64").T + bias.astype("float64")
    if form == "erf":
        ref = 0.5 * z * (1 + _erf(z / math.sqrt(2)))
    elif form == "tanh":
        ref = 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    else:
        ref = z
    return x, w, bias, ref


DENSES = [
    # (dtype, out_dtype, gelu, (M, N, K), options)
    ("float16", "float16", "erf", (64, 128, 64), dict(block=(2, 2), warp=(1, 2), chunk=2, stages=2)),
    ("float16", "float32", "tanh", (128, 64, 96), dict(block=(2, 1), warp=(2, 2), chunk=1, stages=3, vec=2)),
    ("float16", "float16", "none", (64, 64, 128), dict(block=(1, 2), warp=(2, 1), chunk=4, stages=0, raster=2)),
    ("float32", "float32", "erf", (32, 64, 64), dict(block=(1, 2), warp=(2, 1), chunk=2, stages=2, min_blocks=1)),
]
DENSE_IDS = [f"{d}-{o}-{g}-{'x'.join(map(str, sz))}" for d, o, g, sz, _ in DENSES]


@pytest.mark.parametrize("dtype,out_dtype,form,size,opts", DENSES, ids=DENSE_IDS)
def test_dense_gelu_emulated_and_compiled(dtype, out_dtype, form, size, opts, rng):
    M, N, K = size
    s, (X, W, bias, Y) = dense_tensorcore(M, N, K, dtype=dtype, out_dtype=out_dtype, gelu_form=form, **opts)
    func = tc.lower(s, [X, W, bias, Y], target="cuda")
    src = generate_cuda(func)
    assert "tc_mma_store" in src and ("erff(" in src) == (form == "erf") and ("tanhf(" in src) == (form == "tanh")
    x, w, bias_v, ref = _dense_inputs(rng, dtype, out_dtype, M, N, K, form)
    y = _poisoned(M, N, out_dtype)
    emulate(func, [x, w, bias_v, y])
    # tf32 operands: the emulator multiplies in float32 (the GPU rounds to tf32 first)
    _check(y, ref, dtype, out_dtype)
    _nvcc(src)


def test_bert_shape_compiles():
    """BERT-base's first FFN layer: 1024 tokens, 768 -> 3072, fp16, the template's fallback."""
    task = autotune.task.create("topi/dense_tensorcore.cuda", args=(1024, 3072, 768, "float16", "float16", "erf"),
                                target="cuda")
    with tc.target.Target("cuda"), pytest.warns(UserWarning, match="fallback configuration"):
        s, args = task.func(*task.args)
    _nvcc(generate_cuda(tc.lower(s, list(args), target="cuda")))


# -- the templates ----------------------------------------------------------------------------------

TEMPLATES = [
    ("topi/batch_matmul_tensorcore.cuda", (2, 64, 64, 64, "float16", "float16", "col_major"), 2),
    ("topi/batch_matmul_tensorcore.cuda", (2, 32, 48, 64, "float16", "float32", "row_major"), 2),
    ("topi/dense_tensorcore.cuda", (64, 128, 64, "float16", "float16", "erf"), 2),
]


def _run_template(name, args, func, rng, what):
    if name.startswith("topi/batch"):
        batch, M, N, K, dtype, out_dtype, layout_b = args
        a, b, ref = _bmm_inputs(rng, dtype, batch, M, N, K, layout_b)
        c = _poisoned3((batch, M, N), out_dtype)
        emulate(func, [a, b, c])
        _check(c, ref, dtype, out_dtype, what)
    else:
        M, N, K, dtype, out_dtype, form = args
        x, w, bias, ref = _dense_inputs(rng, dtype, out_dtype, M, N, K, form)
        y = _poisoned(M, N, out_dtype)
        emulate(func, [x, w, bias, y])
        _check(y, ref, dtype, out_dtype, what)


@pytest.mark.parametrize("name,args,n", TEMPLATES, ids=[f"{t.split('/')[1].split('.')[0]}-{'x'.join(map(str, a[:4]))}"
                                                          for t, a, _ in TEMPLATES])
def test_template_configs_emulated_and_compiled(name, args, n, rng):
    task = autotune.task.create(name, args=args, target="cuda")
    assert len(task.config_space) > 1
    configs = [None] + [task.config_space.get(i) for i in task.config_space.sample_ints(n, rng)]
    for cfg in configs:
        with tc.target.Target("cuda"):
            if cfg is None:
                with pytest.warns(UserWarning, match="fallback configuration"):
                    s, tensors = task.func(*task.args)
            else:
                s, tensors = task.instantiate(cfg)
        func = tc.lower(s, list(tensors), target="cuda")
        _run_template(name, args, func, rng, f"config {cfg}")
        _nvcc(generate_cuda(func))


def test_template_filter_keeps_dividing_tiles_only():
    # N = 48: only blocks one warp of one tile wide (16 columns) divide it
    task = autotune.task.create("topi/batch_matmul_tensorcore.cuda", args=(2, 32, 48, 64, "float16", "float32",
                                                                         "row_major"), target="cuda")
    space = task.config_space
    for i in range(len(space)):
        c = space.get(space.valid_index(i))
        assert 48 % (16 * c["block"].val[1] * c["warp"].val[1]) == 0
        assert 32 % (16 * c["block"].val[0] * c["warp"].val[0]) == 0
    # the epilogue's float32 tile counts against shared memory: 256 x 128 with a 4-stage 64-deep ring does not fit
    assert TN.fits(4096, 4096, 4096, "float16", "col_major", (4, 2), (4, 4), 4, 4)
    assert not TN.dense_fits(4096, 4096, 4096, "float16", (4, 2), (4, 4), 4, 4)
    assert TN.dense_fits(1024, 3072, 768, "float16", (2, 2), (4, 4), 2, 3)


def test_cli_lists_the_templates(capsys):
    from tilecraft.cli import main
    main(["templates"])
    out = capsys.readouterr().out
    assert "topi/batch_matmul_tensorcore.cuda" in out and "topi/dense_tensorcore.cuda" in out


# -- errors -----------------------------------------------------------------------------------------

def test_errors():
    with pytest.raises(ValueError, match=r"topi/dense_tensorcore.cuda: M=1000 is not a multiple of 16 \(the "
                                         r"tensor-core tile\); no configuration tiles it: pad the operands to a "
                                         r"multiple of 16"):
        autotune.task.create("topi/dense_tensorcore.cuda", args=(1000, 3072, 768, "float16", "float16", "erf"),
                             target="cuda")
    with pytest.raises(ValueError, match=r"topi/batch_matmul_tensorcore.cuda: K=72 is not a multiple of 32 \(the "
                                         r"int8 mma.sync depth\)"):
        autotune.task.create("topi/batch_matmul_tensorcore.cuda", args=(12, 128, 128, 72, "int8", "int32",
                                                                        "col_major"), target="cuda")
    with pytest.raises(ValueError, match=r"C: N=96 is not a multiple of the block tile's 64 \(16 x block\[1\]=2 x "
                                         r"warp\[1\]=2\)"):
        batch_matmul_tensorcore(2, 64, 96, 64, block=(2, 2), warp=(2, 2))
    with pytest.raises(ValueError, match=r"K=48 \(the columns of A\) is not a multiple of the reduction step's 32 "
                                         r"\(16 for float16 x chunk=2\)"):
        batch_matmul_tensorcore(2, 64, 64, 48, block=(2, 2), warp=(2, 2), chunk=2)
    with pytest.raises(ValueError, match=r"a tensor-core batch_matmul of int8 operands takes B as \(batch, N, K\), "
                                         r"layout_b='col_major'"):
        batch_matmul_tensorcore(2, 64, 64, 64, dtype="int8")
    with pytest.raises(ValueError, match=r"gelu must be one of 'erf', 'tanh', 'none', got 'relu'"):
        dense_tensorcore(64, 64, 64, gelu_form="relu")
    with pytest.raises(ValueError, match=r"dense_tensorcore takes float16 or float32 operands and output, got "
                                         r"'int8' -> 'float16'"):
        dense_tensorcore(64, 64, 64, dtype="int8")
    A = te.placeholder((2, 3, 32, 32), "float16", name="A")
    C = gemm_compute(A, te.placeholder((2, 3, 32, 32), "float16", name="B"), "row_major", "float32")
    with pytest.raises(ValueError, match=r"a tensor-core schedule binds one batch axis to blockIdx.z; C has 2"):
        block_axes(te.create_schedule(C.op), C, (1, 1), (1, 1))


# -- on a GPU: the attention and BERT shapes against float64 ----------------------------------------

GPU_BMMS = [("col_major", (12, 128, 128, 64)), ("row_major", (12, 128, 64, 128)),
            ("col_major", (12, 512, 512, 64)), ("row_major", (12, 512, 64, 512))]


@pytest.mark.parametrize("layout_b,size", GPU_BMMS, ids=[f"{l}-{'x'.join(map(str, s))}" for l, s in GPU_BMMS])
def test_gpu_batch_matmul_attention(layout_b, size, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_batch_matmul_emulated_and_compiled (emulator + nvcc) only")
    import torch
    batch, M, N, K = size
    task = autotune.task.create("topi/batch_matmul_tensorcore.cuda",
                                args=(batch, M, N, K, "float16", "float16", layout_b), target="cuda")
    with tc.target.Target("cuda"), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the fallback warns once per workload and process
        s, (A, B, C) = task.func(*task.args)
    mod = tc.build(s, [A, B, C], target="cuda")
    for _ in range(2):                             # fresh inputs each time
        a, b, ref = _bmm_inputs(rng, "float16", batch, M, N, K, layout_b)
        c = torch.from_numpy(_poisoned3((batch, M, N), "float16")).cuda()
        mod(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c)
        got = c.cpu().numpy()
        assert not np.isnan(got).any()
        assert _rel_err(got, ref) < 2e-3


@pytest.mark.parametrize("out_dtype,form", [("float16", "erf"), ("float32", "tanh")])
def test_gpu_dense_gelu_bert(out_dtype, form, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_dense_gelu_emulated_and_compiled (emulator + nvcc) only")
    import torch
    M, N, K = 1024, 3072, 768
    task = autotune.task.create("topi/dense_tensorcore.cuda", args=(M, N, K, "float16", out_dtype, form),
                                target="cuda")
    with tc.target.Target("cuda"), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the fallback warns once per workload and process
        s, (X, W, bias, Y) = task.func(*task.args)
    mod = tc.build(s, [X, W, bias, Y], target="cuda")
    for _ in range(2):
        x, w, b, ref = _dense_inputs(rng, "float16", out_dtype, M, N, K, form)
        y = torch.from_numpy(_poisoned(M, N, out_dtype)).cuda()
        mod(torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda(), torch.from_numpy(b).cuda(), y)
        got = y.cpu().numpy()
        assert not np.isnan(got).any()
        assert _rel_err(got, ref) < 2e-3
