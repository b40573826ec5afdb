"""The sm_90a wgmma GEMM (``topi/tensorcore_wgmma.py``, ``codegen/cuda_wgmma.py``): every
configuration generated and compiled by nvcc for sm_90a, run in the emulator by its intrinsics'
TE definitions on poisoned outputs, and on a GPU (``-m cuda``) against a float64 product."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.codegen.cuda_wgmma import swizzled_offset
from tilecraft.topi.tensorcore_wgmma import matmul_wgmma

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda

# (dtype, out_dtype, (M, N, K), options): K = 1, 2 and more steps than stages (the rings' phases wrap)
CONFIGS = [
    ("float16", "float16", (128, 256, 1024), dict(block=(128, 256), stages=4)),
    ("float16", "float32", (256, 256, 128), dict(block=(128, 128), stages=4, raster=2)),
    ("float16", "float16", (256, 128, 64), dict(block=(256, 128), stages=3)),
    ("float16", "float32", (128, 128, 448), dict(block=(64, 64), stages=5)),
    ("float32", "float32", (128, 256, 320), dict(block=(128, 256), stages=3)),
    ("float32", "float16", (128, 128, 96), dict(block=(128, 128), stages=4)),
    # lag 2 and 3: the producer's last steps are handed over after its loop (K of 1, 2 and many steps)
    ("float16", "float16", (256, 256, 1024), dict(block=(128, 256), stages=4, lag=2, raster=2)),
    ("float16", "float32", (128, 128, 64), dict(block=(128, 128), stages=5, lag=3)),
    ("float16", "float32", (128, 128, 128), dict(block=(128, 128), stages=5, lag=3)),
    ("float32", "float32", (128, 256, 352), dict(block=(128, 256), stages=4, lag=2)),
    # lag 0: no producer wait, each copy arrives on its stage's mbarrier when it lands (cp.async.mbarrier.arrive)
    ("float16", "float16", (256, 512, 1024), dict(block=(128, 256), stages=4, lag=0, raster=2)),
    ("float16", "float32", (128, 128, 64), dict(block=(64, 64), stages=3, lag=0)),
    ("float32", "float32", (128, 256, 352), dict(block=(128, 256), stages=3, lag=0)),
]
IDS = [f"{d}_{o}_{c['block'][0]}x{c['block'][1]}_s{c['stages']}_l{c.get('lag', 1)}_K{s[2]}" for d, o, s, c in CONFIGS]


def _inputs(rng, dtype, M, N, K):
    a = rng.uniform(-1, 1, (M, K)).astype(dtype)
    b = rng.uniform(-1, 1, (N, K)).astype(dtype)
    return a, b, a.astype("float64") @ b.astype("float64").T


def _rel_err(got, want) -> float:
    return float(np.linalg.norm(got.astype("float64") - want) / np.linalg.norm(want))


def _tol(dtype, out_dtype):
    # tf32 keeps 10 mantissa bits of each operand (wgmma truncates them: ~1e-3); a float16 C rounds at the store
    return 3e-3 if dtype == "float32" or out_dtype == "float16" else 1e-5


@pytest.mark.parametrize("dtype,out_dtype,size,opts", CONFIGS, ids=IDS)
def test_wgmma_compiled(dtype, out_dtype, size, opts):
    s, (A, B, C) = matmul_wgmma(*size, dtype=dtype, out_dtype=out_dtype, **opts)
    src = generate_cuda(tc.lower(s, [A, B, C], target="cuda"))
    kind = "f32.f16.f16" if dtype == "float16" else "f32.tf32.tf32"
    assert f"wgmma.mma_async.sync.aligned.m64n{opts['block'][1]}k" in src and kind in src
    assert "__syncthreads" not in src.split("tc_wgmma_pipeline(float* acc")[1].split("tc_wgmma_store(O*")[0] \
        .split("__syncthreads();")[1]          # one barrier: after the mbarriers' initialisation, none in the loop
    if find_nvcc() is None:
        pytest.skip("nvcc not found: the source was generated, not compiled")
    assert compile_cuda(src, "sm_90a")


# emulated at sizes of a few blocks (the emulator runs each intrinsic once per block, by its definition)
EMULATED = [
    ("float16", "float16", (256, 512, 192), dict(block=(128, 256), stages=4, raster=2)),
    ("float16", "float32", (128, 128, 64), dict(block=(64, 64), stages=3)),
    ("float32", "float32", (256, 128, 96), dict(block=(128, 128), stages=3)),
    ("float16", "float16", (128, 256, 256), dict(block=(128, 256), stages=4, lag=0)),
]


@pytest.mark.parametrize("dtype,out_dtype,size,opts", EMULATED, ids=[f"{d}_{o}_{s[0]}x{s[1]}x{s[2]}" for d, o, s, _ in
                                                                     EMULATED])
def test_wgmma_emulated(dtype, out_dtype, size, opts, rng):
    M, N, K = size
    s, (A, B, C) = matmul_wgmma(M, N, K, dtype=dtype, out_dtype=out_dtype, **opts)
    func = tc.lower(s, [A, B, C], target="cuda")
    a, b, ref = _inputs(rng, dtype, M, N, K)
    c = np.full((M, N), np.nan, out_dtype)
    emulate(func, [a, b, c])
    assert not np.isnan(c).any(), "elements of C were not written"
    # the emulator runs the definitions: float32 products (no tf32 rounding), float16 C rounded once
    assert _rel_err(c, ref) < (1e-3 if out_dtype == "float16" else 1e-6)


def _shifted_store(bm, bn, out="float32"):
    """wgmma_store with a lowering that points 8 elements past the tile (a wrong pointer)."""
    from tilecraft import te, tir
    from tilecraft.topi import tensorcore_wgmma as tw
    A = te.placeholder((bm, bn), name="A", dtype="float32")
    C = te.compute((bm, bn), lambda i, j: A[i, j], name="C")
    BA = tir.decl_buffer(A.shape, "float32", name="acc", scope="wgmma.accumulator", offset_factor=1)
    BC = tir.decl_buffer(C.shape, "float32", name="c", scope="global", strides=[te.var("ldc"), 1], offset_factor=1)

    def lower(ins, outs):
        call = tir.call_intrin("handle", "tir.tc_wgmma_store", ins[0].data, outs[0].access_ptr("w", offset=8),
                               outs[0].strides[0], bm, bn)
        return tw._threads(bm, tir.Evaluate(call))
    return te.decl_tensor_intrin(C.op, lower, name="wgmma_store_shifted", binds={A: BA, C: BC})


def test_wgmma_emulator_checks_the_store_pointer(rng, monkeypatch):
    """A lowering that stores the block's tile at the wrong place fails in the emulator."""
    from tilecraft.topi import tensorcore_wgmma as tw
    monkeypatch.setattr(tw, "wgmma_store", _shifted_store)
    s, (A, B, C) = tw.matmul_wgmma(128, 128, 64, block=(64, 64), stages=3)
    func = tc.lower(s, [A, B, C], target="cuda")
    a, b, _ = _inputs(rng, "float16", 128, 128, 64)
    with pytest.raises(Exception, match=r"tc_wgmma_store points at element 8 of 'C', but the tile bound to 'c' "
                                        r"starts at element 0"):
        emulate(func, [a, b, np.full((128, 128), np.nan, "float32")])


def test_swizzle_is_a_permutation_of_each_row():
    for row in range(16):
        offs = sorted(swizzled_offset(row, c) for c in range(8))
        assert offs == [128 * row + 16 * c for c in range(8)]
    assert swizzled_offset(9, 2) == 9 * 128 + 16 * 3


@pytest.mark.parametrize("block,K,stages,msg", [
    ((96, 128), 128, 4, r"the wgmma block tile is bm x bn with bm in 64, 128, 192, 256 .* got 96 x 128"),
    ((128, 192), 128, 4, r"bn in 64, 128, 256, got 128 x 192"),
    ((128, 128), 96, 4, r"K=96 is not a multiple of the wgmma main loop's step of 64 \(float16: 128 bytes of each row\)"),
    ((128, 128), 128, 2, r"stages=2: the wgmma main loop takes 3 to 8 shared stages"),
    ((256, 256), 128, 4, r"a 256 x 256 wgmma block with 4 stages needs 263232 bytes of shared memory, more than the "
                         r"232448 of a block \(sm_90\): fewer stages"),
])
def test_wgmma_config_errors(block, K, stages, msg):
    with pytest.raises(ValueError, match=msg):
        matmul_wgmma(256, 256, K, block=block, stages=stages)


@pytest.mark.parametrize("stages,lag", [(4, 3), (3, 2), (5, -1)])
def test_wgmma_lag_errors(stages, lag):
    with pytest.raises(ValueError, match=rf"lag={lag}: the wgmma producer keeps 0 to stages - 2 = {stages - 2} steps "
                                         r"of copies in flight \(more and it would wait on a stage the consumers "
                                         r"cannot free\)"):
        matmul_wgmma(256, 256, 256, block=(128, 128), stages=stages, lag=lag)


def test_wgmma_dtype_errors():
    with pytest.raises(ValueError, match=r"the wgmma GEMM takes float16, bfloat16 or float32 \(tf32\) operands, got 'int8'"):
        matmul_wgmma(128, 128, 128, dtype="int8")
    with pytest.raises(ValueError, match=r"the wgmma accumulator \(float32\) is stored as float32, float16 or bfloat16, not "
                                         r"'int32'"):
        matmul_wgmma(128, 128, 128, out_dtype="int32")
    with pytest.raises(ValueError, match=r"matmul_wgmma: M=200 is not a multiple of the block tile.s 128 \(block=\(128, 128\)\)"):
        matmul_wgmma(200, 128, 128, out_dtype="float16", block=(128, 128))


@pytest.mark.parametrize("dtype,out_dtype,size,opts", CONFIGS, ids=IDS)
def test_gpu_wgmma(dtype, out_dtype, size, opts, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_wgmma_emulated and test_wgmma_compiled only")
    import torch
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs an sm_90 GPU (H100, H200)")
    M, N, K = size
    s, (A, B, C) = matmul_wgmma(M, N, K, dtype=dtype, out_dtype=out_dtype, **opts)
    mod = tc.build(s, [A, B, C], target="cuda")
    for _ in range(2):                             # fresh inputs each time
        a, b, ref = _inputs(rng, dtype, M, N, K)
        c = torch.full((M, N), float("nan"), dtype=getattr(torch, out_dtype)).cuda()
        mod(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c)
        got = c.cpu().numpy()
        assert not np.isnan(got).any()
        assert _rel_err(got, ref) < _tol(dtype, out_dtype)


def test_wgmma_template_space_and_configs(rng):
    import tilecraft.autotune as autotune
    from tilecraft.topi import tensorcore_template as TT
    task = autotune.task.create("topi/matmul_wgmma.cuda", args=(4096, 4096, 4096, "float16", "float16"),
                                target="cuda")
    space = task.config_space
    assert 10 < len(space) < 6 * 4 * 3 * 3 * 4
    lags, loads = set(), set()
    for i in range(len(space)):                     # every configuration kept fits (shared memory, tiles, lag)
        e = space.get(space.valid_index(i))
        tma = e["load"].val != "cp.async"
        assert TT.wgmma_fits(4096, 4096, 4096, "float16", e["block"].val, e["stages"].val, e["raster"].val,
                             e["lag"].val, **TT.load_options(e["load"].val))
        assert e["lag"].val <= e["stages"].val - 2 and (not tma or e["lag"].val == 1)   # lag: cp.async only
        lags.add(e["lag"].val)
        loads.add(e["load"].val)
    assert lags == {1, 2, 3} and loads == {"cp.async", "tma", "tma_r", "tma_p"}
    assert not TT.wgmma_fits(4096, 4096, 4096, "float16", (256, 256), 4)          # 257 KiB of shared memory
    assert not TT.wgmma_fits(4096, 4096, 4096, "float16", (128, 128), 4, lag=3)   # the producer would deadlock
    # a small task: a sampled configuration and the fallback, emulated and compiled
    M, N, K = 256, 256, 128
    task = autotune.task.create("topi/matmul_wgmma.cuda", args=(M, N, K, "float16", "float32"), target="cuda")
    cfgs = [task.config_space.get(task.config_space.valid_index(int(rng.integers(len(task.config_space))))), None]
    for cfg in cfgs:
        with tc.target.Target("cuda"):
            if cfg is None:
                with pytest.warns(UserWarning, match="fallback configuration"):
                    s, args = task.func(*task.args)
            else:
                s, args = task.instantiate(cfg)
        a, b, ref = _inputs(rng, "float16", M, N, K)
        c = np.full((M, N), np.nan, "float32")
        emulate(tc.lower(s, args, target="cuda"), [a, b, c])
        assert _rel_err(c, ref) < 1e-6


@pytest.mark.parametrize("what", ["unswizzled ring", "descriptor stride"])
def test_wgmma_emulator_models_swizzle_and_descriptors(what, rng, monkeypatch):
    """The emulator runs the main loop through the swizzled ring and the descriptors too: writing
    the ring without the swizzle, or descriptors with another stride byte offset, fails there."""
    from tilecraft.codegen import cuda_emulate_wgmma as M
    from tilecraft.codegen import cuda_wgmma as W
    if what == "unswizzled ring":
        monkeypatch.setattr(M, "swizzled_offset", lambda r, c: 128 * r + 16 * c)
    else:
        monkeypatch.setattr(M, "wgmma_desc", lambda addr: W.wgmma_desc(addr) - ((512 >> 4) << 32))
    s, (A, B, C) = matmul_wgmma(128, 128, 128, block=(128, 128), stages=3)
    func = tc.lower(s, [A, B, C], target="cuda")
    a, b, _ = _inputs(rng, "float16", 128, 128, 128)
    with pytest.raises(Exception, match=r"the main loop through the swizzled shared ring and the wgmma descriptors "
                                        r"gives .* its definition .*: the swizzle, the descriptors or the ring's "
                                        r"stages disagree"):
        emulate(func, [a, b, np.full((128, 128), np.nan, "float32")])


def test_wgmma_c_uses_the_modelled_layout():
    """The C the producer and the descriptors use is the layout the emulator models."""
    from tilecraft.codegen.cuda_wgmma import wgmma_desc, wgmma_prelude
    src = wgmma_prelude({("float16", 128)})
    assert src.count("r * 128 + ((c ^ (r & 7)) << 4)") == 2          # A's and B's copies: swizzled_offset
    assert "((unsigned long long)(1024 >> 4) << 32)" in src and "(1ull << 62)" in src
    assert wgmma_desc(0x400) == 0x4000004000010040


@pytest.mark.parametrize("opts,msg", [
    (dict(block=(128, 128), stages=4, lag=3), r"tc_wgmma_mainloop with 4 stages: lag=3 must be 0 to stages - 2 = 2 "
                                              r"\(the producer would wait on a stage the consumers cannot free\)"),
    (dict(block=(96, 128), stages=4), r"tc_wgmma_mainloop of a 96 x 128 block: bm must be 64, 128, 192 or 256 "
                                      r"\(64 rows a consumer warpgroup\) and bn one of \(64, 128, 256\)"),
    (dict(block=(128, 128), stages=4, dtype="int8"), r"tc_wgmma_mainloop of 'A' \(int8\) and 'B' \(int8\): wgmma "
                                                     r"takes float16, bfloat16 or float32 \(tf32\) operands, both "
                                                     r"alike"),
])
def test_wgmma_codegen_errors(opts, msg, monkeypatch):
    # the CUDA C refuses what the topi checks keep out, for calls built some other way
    from tilecraft.codegen.cuda_wgmma import WgmmaError
    from tilecraft.topi import tensorcore_wgmma as tw
    monkeypatch.setattr(tw, "check_config", lambda *a: None)
    s, (A, B, C) = tw.matmul_wgmma(384, 128, 128, out_dtype="float32", **opts)
    with pytest.raises(WgmmaError, match=msg):
        generate_cuda(tc.lower(s, [A, B, C], target="cuda"))


def test_matmul_tensorcore_template_offers_wgmma(rng):
    # topi/matmul_tensorcore.cuda's `wgmma` knob: (bm, bn, stages, lag) of matmul_wgmma or None (mma.sync);
    # with a wgmma choice the mma.sync knobs sit at their first values (each wgmma configuration once per raster)
    import tilecraft.autotune as autotune
    from tilecraft.topi import tensorcore_template as TT
    M, N, K = 256, 256, 128
    task = autotune.task.create("topi/matmul_tensorcore.cuda", args=(M, N, K, "float16", "float32", "col_major"),
                                target="cuda")
    wg = [c for c in task.config_space if c["wgmma"].val is not None]
    assert wg and all(all(c[k].val == v for k, v in TT._MMA_FIRST.items()) for c in wg)
    assert len({(c["wgmma"].val, c["raster"].val) for c in wg}) == len(wg)
    assert all(c["wgmma"].val[0] <= M and M % c["wgmma"].val[0] == 0 for c in wg)
    cfg = wg[int(rng.integers(len(wg)))]
    with tc.target.Target("cuda"):
        s, (A, B, C) = task.instantiate(cfg)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    assert f"wgmma.mma_async.sync.aligned.m64n{cfg['wgmma'].val[1]}k16" in src, cfg
    a, b, ref = _inputs(rng, "float16", M, N, K)
    c = np.full((M, N), np.nan, "float32")
    emulate(func, [a, b, c])
    assert _rel_err(c, ref) < 1e-6, cfg
    # not offered where wgmma cannot run: B stored (K, N), int8, a target other than sm_90
    for args, target in [((M, N, K, "float16", "float32", "row_major"), "cuda"),
                         ((M, N, K, "int8", "int32", "col_major"), "cuda"),
                         ((M, N, K, "float16", "float32", "col_major"), "cuda -arch=sm_80")]:
        t = autotune.task.create("topi/matmul_tensorcore.cuda", args=args, target=target)
        assert "wgmma" not in t.config_space.space_map, (args, target)


def test_wgmma_source_compiles_for_sm_90_as_sm_90a():
    # any caller naming sm_90 (the bench's build_breakdown, an export) gets the arch-specific target: the
    # first H100 run's bench compiled with -arch=sm_90 and ptxas refused every wgmma kernel
    from tilecraft.codegen.cuda_compile import target_arch
    s, (A, B, C) = matmul_wgmma(128, 128, 64, block=(128, 128), stages=3)
    src = generate_cuda(tc.lower(s, [A, B, C], target="cuda"))
    assert target_arch(src, "sm_90") == "sm_90a" and target_arch(src, "sm_80") == "sm_80"
    assert target_arch("__global__ void f() {}", "sm_90") == "sm_90"
    if find_nvcc() is None:
        pytest.skip("nvcc not found: the source was generated, not compiled")
    assert compile_cuda(src, "sm_90", use_cache=False)


def test_cli_tunes_matmul_wgmma_by_name(capsys):
    from tilecraft.cli import main
    main(["templates"])
    assert "topi/matmul_wgmma.cuda   (tilecraft tune matmul_wgmma --target cuda)" in capsys.readouterr().out
