"""``topi/matmul_tensorcore.cuda``'s fallback (nothing tuned, or ``apply_history_best`` without a
record) is the wgmma GEMM on sm_90 where the ``wgmma`` knob exists, and ``mma.sync`` elsewhere
(older arches, B stored (K, N), int8); ``topi/matmul_wgmma.cuda``'s fallback follows the same
rule (``wgmma_fallback``: the best measured tile that still gives about a block per SM)."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
import tilecraft.autotune as autotune
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.topi import tensorcore_template as TT

pytestmark = pytest.mark.cuda


def _fallback_source(args, target):
    task = autotune.task.create("topi/matmul_tensorcore.cuda", args=args, target=target)
    with tc.target.Target(target), autotune.apply_history_best(None):
        with pytest.warns(UserWarning, match="fallback configuration"):
            s, bufs = task.func(*task.args)
    return s, bufs, generate_cuda(tc.lower(s, bufs, target="cuda"))


@pytest.mark.parametrize("args,target,want", [
    ((4096, 4096, 4096, "float16", "float16", "col_major"), "cuda", "tc_wgmma_tma_mainloop<128, 256, 4, 0, half"),
    ((4096, 4096, 4096, "float32", "float32", "col_major"), "cuda -arch=sm_90", "tc_wgmma_tma_mainloop<128, 256, 4, 0, float"),
    # 128 x 256 would be 32 blocks at 1024^2 (132 SMs): the first tile giving >= 128 blocks
    ((1024, 1024, 1024, "float16", "float16", "col_major"), "cuda", "tc_wgmma_mainloop<64, 128, 6, 3, half"),
    ((4096, 4096, 4096, "float16", "float16", "col_major"), "cuda -arch=sm_80", "mma.sync"),
    ((4096, 4096, 4096, "float16", "float16", "row_major"), "cuda", "mma.sync"),
    ((4096, 4096, 4096, "int8", "int32", "col_major"), "cuda", "mma.sync"),
], ids=["fp16_sm90", "tf32_sm90", "fp16_1024", "sm80", "B_row_major", "int8"])
def test_fallback_per_arch(args, target, want):
    _, _, src = _fallback_source(args, target)
    assert want in src
    assert ("wgmma.mma_async" in src) == want.startswith("tc_wgmma")


def test_wgmma_fallback_rule():
    assert TT.wgmma_fallback(4096, 4096, 4096, "float16")["block"] == (128, 256)
    assert TT.wgmma_fallback(8192, 8192, 8192, "float16")["block"] == (128, 256)
    assert TT.wgmma_fallback(1024, 1024, 1024, "float16")["block"] == (64, 128)
    assert TT.wgmma_fallback(256, 256, 128, "float16")["block"] == (64, 64)     # none gives 128 blocks: the most
    assert TT.wgmma_fallback(4096, 4096, 40, "float16") is None                   # K not whole 128-byte steps
    # the rule's choice is a valid configuration of the wgmma template's own fallback
    task = autotune.task.create("topi/matmul_wgmma.cuda", args=(1024, 1024, 1024, "float16", "float16"),
                                target="cuda")
    with tc.target.Target("cuda"), pytest.warns(UserWarning, match="fallback configuration"):
        s, bufs = task.func(*task.args)
    assert "tc_wgmma_mainloop<64, 128, 6, 3, half" in generate_cuda(tc.lower(s, bufs, target="cuda"))


def test_fallback_emulated(rng):
    """The sm_90 fallback of a small task computes the GEMM (emulated, poisoned output, float64 reference)."""
    M, N, K = 256, 256, 128
    s, (A, B, C), src = _fallback_source((M, N, K, "float16", "float32", "col_major"), "cuda")
    assert "wgmma.mma_async" in src
    a = rng.uniform(-1, 1, (M, K)).astype("float16")
    b = rng.uniform(-1, 1, (N, K)).astype("float16")
    c = np.full((M, N), np.nan, "float32")
    emulate(tc.lower(s, [A, B, C], target="cuda"), [a, b, c])
    ref = a.astype("float64") @ b.astype("float64").T
    assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < 1e-6


def test_bench_wgmma_variants_generate():
    """bench/cuda_tensorcore.py's wgmma variants (the GPU runs time them): each one's CUDA C is generated
    at 2048^3 with its diagnostic patch of the prelude applied (a patch that no longer matches the
    prelude fails here, not on the GPU)."""
    import importlib.util
    import pathlib
    import sys
    bench = pathlib.Path(__file__).resolve().parents[2] / "bench"
    sys.path.insert(0, str(bench))
    try:
        spec = importlib.util.spec_from_file_location("bench_cuda_tensorcore", bench / "cuda_tensorcore.py")
        B = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(B)
    finally:
        sys.path.remove(str(bench))
    from tilecraft.codegen import cuda_wgmma as W
    from tilecraft.topi.tensorcore import matmul_tensorcore
    names = [k for k, v in B.VARIANTS.items() if v.get("impl") == "wgmma"]
    assert any("diag" in B.VARIANTS[k] for k in names)
    for name in names:
        kw = dict(B.VARIANTS[name])
        lay = kw.pop("layout_b")
        diag = kw.pop("diag", None)
        with B._patched(diag):
            s, args = B._make(matmul_tensorcore, 2048, lay, kw)
            src = generate_cuda(tc.lower(s, args, target="cuda"))
        for d in (diag or "").split("+"):
            if d:
                assert B.DIAG_PATCHES[d][1] in src, (name, d)
    assert "acc[0] != -1234.5f" not in W.WGMMA_PRELUDE                                # restored


def test_fallback_is_a_point_of_the_space():
    """On sm_90 the template's fallback (128 x 256 wgmma, TMA loads) is recorded in the fallback
    configuration's knobs, so tune_tasks measures it first and a tuning run cannot end slower than
    the untuned template (an H100 run: the space's best in 256 random trials 395 TFLOP/s at 4096^3,
    the fallback 724). A fallback the space does not offer (64 x 128 at 1024^3) stays unrecorded."""
    import warnings
    from tilecraft.autotune.model_tuning import fallback_config
    task = autotune.task.create("topi/matmul_tensorcore.cuda", args=(4096, 4096, 4096, "float16", "float16",
                                                                    "col_major"), target="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = fallback_config(task)
    assert cfg is not None and cfg["wgmma"].val == (128, 256, 4, 1, "tma") and cfg["raster"].val == 8
    with tc.target.Target("cuda"):
        s, bufs = task.instantiate(cfg)
    assert "tc_wgmma_tma_mainloop<128, 256, 4, 0, half" in generate_cuda(tc.lower(s, bufs, target="cuda"))
    small = autotune.task.create("topi/matmul_tensorcore.cuda", args=(1024, 1024, 1024, "float16", "float16",
                                                                     "col_major"), target="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert fallback_config(small) is None
