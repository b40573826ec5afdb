"""``matmul_tensorcore(..., fragment_prefetch=True)``: the cp.async pipeline rotated so that the
first k slice's fragments of step k + 1 are loaded right after the barrier that lands that step,
before the last slice's mma.sync of step k (``gpu_double_buffer._rotate_slices``).

Each configuration is emulated on poisoned output and fresh inputs against float64 (the
emulator's cp.async model fails a read of a tile still in flight or read without the barrier)
and compiled by nvcc for sm_90; on a GPU (``-m cuda``) the same against float64.
"""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.topi.tensorcore import matmul_tensorcore

from .test_cuda_ops import gpu_available
from .test_tensorcore import _nvcc, _poisoned, _rel_err

pytestmark = pytest.mark.cuda

CASES = [
    # (dtype, layout_b, out_dtype, (M, N, K), options)
    ("float16", "row_major", None, (64, 64, 96), dict(block=(2, 1), warp=(2, 4), chunk=2, stages=3)),
    ("float16", "row_major", "float16", (64, 128, 128), dict(block=(1, 2), warp=(4, 2), chunk=4, stages=2, raster=0)),
    ("float16", "col_major", None, (128, 64, 64), dict(block=(2, 2), warp=(2, 1), chunk=2, stages=4, raster=2,
                                                       min_blocks=1)),
    # two steps, fewer than the stages: the prologue's second group is the last tile
    ("float16", "row_major", None, (32, 32, 64), dict(block=(1, 1), warp=(2, 2), chunk=2, stages=3)),
    ("bfloat16", "row_major", "bfloat16", (64, 64, 64), dict(block=(1, 2), warp=(4, 2), chunk=2, stages=3)),
    ("float32", "col_major", None, (64, 64, 48), dict(block=(2, 1), warp=(2, 4), chunk=3, stages=3)),
    ("int8", "col_major", None, (64, 64, 192), dict(block=(1, 2), warp=(4, 2), chunk=2, stages=3)),
]
IDS = [f"{d}-{lay}-{o or 'acc'}-{'x'.join(map(str, sz))}" for d, lay, o, sz, _ in CASES]


def _inputs(rng, dtype, layout_b, M, N, K):
    """A (M, K), B (K, N) or (N, K) of ``dtype`` (int8 over its whole range), the float64 product."""
    shape_b = (K, N) if layout_b == "row_major" else (N, K)
    if dtype == "int8":
        a, b = rng.integers(-128, 128, (M, K)).astype("int8"), rng.integers(-128, 128, shape_b).astype("int8")
    else:
        a = rng.uniform(-1, 1, (M, K)).astype("float32")
        b = rng.uniform(-1, 1, shape_b).astype("float32")
        if dtype == "bfloat16":
            from tilecraft.ir.dtype import round_bfloat16
            a, b = round_bfloat16(a), round_bfloat16(b)
        else:
            a, b = a.astype(dtype), b.astype(dtype)
    bb = b.astype("float64") if layout_b == "row_major" else b.astype("float64").T
    return a, b, a.astype("float64") @ bb


def _schedule(dtype, layout_b, out_dtype, size, opts):
    M, N, K = size
    return matmul_tensorcore(M, N, K, impl="mma", dtype=dtype, layout_b=layout_b, out_dtype=out_dtype,
                             fragment_prefetch=True, **opts)


def _check(got, ref, dtype, out_dtype, gpu=False):
    if dtype == "int8":
        np.testing.assert_array_equal(got, ref.astype("int64"))
        return
    got = np.asarray(got, "float32")
    assert not np.isnan(got).any(), "elements of C were not written"
    tol = 1e-6 if not gpu else 1e-5
    if out_dtype in ("float16", "bfloat16"):
        tol = 1e-3 if out_dtype == "float16" else 8e-3
    elif dtype == "float32" and gpu:
        tol = 2e-3                     # tf32 operands on the GPU (the emulator multiplies in float32)
    assert _rel_err(got, ref) < tol


@pytest.mark.parametrize("dtype,layout_b,out_dtype,size,opts", CASES, ids=IDS)
def test_fragment_prefetch_emulated_and_compiled(dtype, layout_b, out_dtype, size, opts, rng):
    s, (A, B, C) = _schedule(dtype, layout_b, out_dtype, size, opts)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    # the rotated loop: the next step's first slice goes into fragments that live across iterations
    assert "_next[" in src and "tc_cp_async_wait" in src
    loop = src[src.index("for (int k_outer"):]
    assert loop.index("tc_mma_16x16x") < loop.index("tc_cp_async_wait"), "the wait did not move into the step"
    for _ in range(2):                                 # fresh inputs each time
        a, b, ref = _inputs(rng, dtype, layout_b, *size)
        c = _poisoned(size[0], size[1], "float32" if C.dtype == "bfloat16" else C.dtype)
        if C.dtype == "bfloat16":
            c = np.full(c.shape, np.nan, "float32")
        emulate(func, [a, b, c])
        _check(c, ref, dtype, out_dtype)
    _nvcc(src)


def test_fragment_prefetch_same_as_plain_pipeline(rng):
    """The rotation changes where the loads and the barrier are, not what is computed: both
    schedules give the same C bit for bit in the emulator."""
    size, opts = (64, 64, 128), dict(block=(2, 2), warp=(2, 2), chunk=2, stages=3)
    a, b, _ = _inputs(rng, "float16", "row_major", *size)
    out = []
    for fp in (False, True):
        s, (A, B, C) = matmul_tensorcore(*size, impl="mma", fragment_prefetch=fp, **opts)
        c = np.full(size[:2], np.nan, "float32")
        emulate(tc.lower(s, [A, B, C], target="cuda"), [a, b, c])
        out.append(c)
    np.testing.assert_array_equal(out[0], out[1])


def test_fragment_prefetch_too_few_groups_waited_fails(monkeypatch, rng):
    """Mutation: waiting for one group fewer lets the next step's first slice be loaded from a
    tile still in flight; the emulator must refuse it."""
    import tilecraft.schedule.passes.gpu_double_buffer as db
    orig = db._async_call

    def lax(name, *args):
        return orig(name, *((args[0] + 1,) if name == "tc_cp_async_wait" else args))
    monkeypatch.setattr(db, "_async_call", lax)
    size = (32, 32, 128)
    s, (A, B, C) = matmul_tensorcore(*size, impl="mma", block=(1, 1), warp=(2, 2), chunk=2, stages=3,
                                     fragment_prefetch=True)
    func = tc.lower(s, [A, B, C], target="cuda")
    a, b, _ = _inputs(rng, "float16", "row_major", *size)
    with pytest.raises(Exception, match="in flight"):
        emulate(func, [a, b, np.full(size[:2], np.nan, "float32")])


SPREAD = [
    ("float16", "row_major", "float16", (64, 64, 320), dict(block=(2, 1), warp=(2, 4), chunk=4, stages=3)),
    ("int8", "col_major", None, (64, 32, 256), dict(block=(1, 1), warp=(4, 2), chunk=2, stages=4)),
]


@pytest.mark.parametrize("dtype,layout_b,out_dtype,size,opts", SPREAD,
                         ids=[f"{c[0]}-chunk{c[4]['chunk']}" for c in SPREAD])
def test_spread_copies_emulated_and_compiled(dtype, layout_b, out_dtype, size, opts, rng):
    """``spread_copies``: the step's copies dealt out before its slices, one commit before the
    wait; emulated (a copy into a slot still being read, or a group committed after the wait,
    fails there) and compiled."""
    M, N, K = size
    s, (A, B, C) = matmul_tensorcore(M, N, K, impl="mma", dtype=dtype, layout_b=layout_b, out_dtype=out_dtype,
                                     fragment_prefetch=True, spread_copies=True, **opts)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    loop = src[src.index("for (int k_outer"):]
    first_mma, commit = loop.index("tc_mma_16x16x"), loop.index("tc_cp_async_commit")
    assert loop.count("tc_cp_async<16>") > loop[:first_mma].count("tc_cp_async<16>") > 0, "the copies were not spread"
    assert first_mma < commit < loop.index("tc_cp_async_wait")
    a, b, ref = _inputs(rng, dtype, layout_b, *size)
    c = _poisoned(M, N, C.dtype)
    emulate(func, [a, b, c])
    _check(c, ref, dtype, out_dtype)
    _nvcc(src)


@pytest.mark.parametrize("opts,what", [
    (dict(stages=3, chunk=2, spread_copies=True, fragment_prefetch=False), "needs fragment_prefetch=True"),
    (dict(stages=0, chunk=2), "stages > 0, got 0"),
    (dict(stages=3, chunk=1), "chunk >= 2, got 1"),
    (dict(stages=3, chunk=2, prefetch=True), "prefetch=False, got True"),
])
def test_fragment_prefetch_errors(opts, what):
    with pytest.raises(ValueError, match="fragment_prefetch|spread_copies") as e:
        matmul_tensorcore(64, 64, 64, impl="mma", block=(1, 1), warp=(2, 2), **{"fragment_prefetch": True, **opts})
    assert what in str(e.value)


@pytest.mark.parametrize("dtype,layout_b,out_dtype,size,opts", CASES, ids=IDS)
def test_gpu_fragment_prefetch(dtype, layout_b, out_dtype, size, opts, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_fragment_prefetch_emulated_and_compiled (emulator + nvcc) only")
    import torch
    s, (A, B, C) = _schedule(dtype, layout_b, out_dtype, size, opts)
    mod = tc.build(s, [A, B, C], target="cuda")
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "int8": torch.int8}
    for _ in range(2):
        a, b, ref = _inputs(rng, dtype, layout_b, *size)
        ta = torch.from_numpy(np.asarray(a, "float32" if dtype == "bfloat16" else a.dtype)).to(tdt[dtype]).cuda()
        tb = torch.from_numpy(np.asarray(b, "float32" if dtype == "bfloat16" else b.dtype)).to(tdt[dtype]).cuda()
        if C.dtype == "int32":
            c = torch.from_numpy(_poisoned(size[0], size[1], "int32")).cuda()
        else:
            c = torch.full(size[:2], float("nan"), device="cuda", dtype=tdt.get(C.dtype, torch.float32))
        mod(ta, tb, c)
        _check(c.float().cpu().numpy() if C.dtype != "int32" else c.cpu().numpy(), ref, dtype, out_dtype, gpu=True)


# -- the template's fallback where no wgmma applies, and the bench's variants ------------------------

def test_mma_fallback_rule():
    from tilecraft.topi import tensorcore_template as TT
    f = TT.mma_fallback(4096, 4096, 4096, "float16", "row_major")
    assert (f["block"], f["warp"], f["chunk"], f["stages"], f["fragment_prefetch"]) == ((2, 4), (4, 4), 2, 4, True)
    assert TT.mma_fallback(4096, 4096, 4096, "float32", "col_major")["fragment_prefetch"] is False   # tf32: off
    assert TT.mma_fallback(4096, 4096, 4096, "bfloat16", "row_major")["fragment_prefetch"] is True
    # N = 128: 128 x 256 does not fit
    assert TT.mma_fallback(2048, 128, 192, "float16", "row_major")["block"] == (4, 2)
    small = TT.mma_fallback(128, 256, 128, "float16", "row_major")     # one block row: not rasterized
    assert (small["block"], small["raster"]) == ((2, 4), 0)
    assert TT.mma_fallback(48, 48, 48, "float16", "row_major")["block"] == (1, 1)       # only the smallest


def test_mma_fallback_emulated(rng):
    """The non-sm_90 fallback (B stored (K, N): no wgmma) at its smallest fitting size computes the
    GEMM, fp16 C (emulated on poisoned output against float64) and compiles."""
    import tilecraft.autotune as autotune
    from tilecraft.topi import tensorcore_template  # noqa: F401 (registers the template)
    M, N, K = 128, 256, 128
    task = autotune.task.create("topi/matmul_tensorcore.cuda", args=(M, N, K, "float16", "float16", "row_major"),
                                target="cuda")
    with tc.target.Target("cuda"), autotune.apply_history_best(None):
        with pytest.warns(UserWarning, match="fallback configuration"):
            s, (A, B, C) = task.func(*task.args)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    assert "_next[" in src and "__launch_bounds__(256, 1)" in src
    a, b, ref = _inputs(rng, "float16", "row_major", M, N, K)
    c = np.full((M, N), np.nan, "float16")
    emulate(func, [a, b, c])
    _check(c, ref, "float16", "float16")
    _nvcc(src)


def test_bench_mma_variants_generate():
    """bench/cuda_tensorcore.py's mma.sync variants with fragment_prefetch or a diagnostic patch: each
    one's CUDA C is generated at 4096^3 (a patch that no longer matches the prelude fails here, not on
    the GPU), and the prelude is restored afterwards."""
    import importlib.util
    import pathlib
    import sys
    from tilecraft.codegen import cuda as R
    bench = pathlib.Path(__file__).resolve().parents[2] / "bench"
    sys.path.insert(0, str(bench))
    try:
        spec = importlib.util.spec_from_file_location("bench_cuda_tensorcore_mma", bench / "cuda_tensorcore.py")
        Bm = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(Bm)
    finally:
        sys.path.remove(str(bench))
    names = [k for k, v in Bm.VARIANTS.items() if v.get("impl") == "mma" and (
        v.get("fragment_prefetch") or v.get("diag") in Bm.MMA_DIAG_PATCHES)]
    assert len(names) >= 10
    before = R.MMA_PRELUDE
    for name in names:
        kw = dict(Bm.VARIANTS[name])
        lay = kw.pop("layout_b", "row_major")
        diag = kw.pop("diag", None)
        with Bm._patched(diag):
            s, args = Bm._make(matmul_tensorcore, 4096, lay, kw)
            src = generate_cuda(tc.lower(s, args, target="cuda"))
        assert ("_next[" in src) == bool(kw.get("fragment_prefetch")), name
        if diag:
            assert Bm.MMA_DIAG_PATCHES[diag][1] in src, name
    assert R.MMA_PRELUDE == before
