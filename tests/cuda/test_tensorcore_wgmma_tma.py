"""The wgmma GEMM with TMA loads (``matmul_wgmma(load="tma")``): the stages filled by bulk tensor
copies through tensor maps the kernel takes as ``__grid_constant__`` parameters, encoded on the host
(``runtime/cuda_tensor_map.py``) and packed first by the launcher. Generated and nvcc-compiled for
sm_90a, emulated (the TMA copy modelled as the copy it performs, swizzle included) against float64
products on poisoned outputs, and on a GPU (``-m cuda``)."""
from __future__ import annotations

import struct

import numpy as np
import pytest

import tilecraft as tc
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.codegen.cuda_wgmma import swizzled_offset
from tilecraft.ir import dtype as dt
from tilecraft.runtime import cuda_tensor_map as TM
from tilecraft.topi.tensorcore_wgmma import matmul_wgmma

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda

# (dtype, out_dtype, (M, N, K), options): K of 1 step, 2, and more steps than stages (the rings' phases wrap)
CONFIGS = [
    ("float16", "float16", (256, 512, 1024), dict(block=(128, 256), stages=4, raster=2, load="tma")),
    ("float16", "float16", (256, 256, 1024), dict(block=(128, 256), stages=4, load="tma", maxnreg=1)),
    ("float16", "float32", (256, 256, 64), dict(block=(256, 128), stages=3, load="tma", maxnreg=1)),
    ("float16", "float32", (128, 128, 448), dict(block=(64, 64), stages=5, load="tma")),
    ("float32", "float32", (128, 256, 320), dict(block=(128, 256), stages=3, load="tma")),
    ("float32", "float16", (128, 128, 64), dict(block=(128, 128), stages=4, load="tma", maxnreg=1)),
    ("bfloat16", "bfloat16", (256, 256, 512), dict(block=(128, 256), stages=4, load="tma", maxnreg=1)),
    # persistent grids: 3 and 4 tiles a block (the ring's phases go on across them; stages not dividing the steps)
    ("float16", "float16", (768, 512, 320), dict(block=(128, 256), stages=4, load="tma", persistent=4)),
    ("float16", "float32", (512, 512, 128), dict(block=(128, 128), stages=3, load="tma", raster=2, persistent=4)),
]
IDS = [f"{d}_{o}_{c['block'][0]}x{c['block'][1]}_s{c['stages']}{'_r' if c.get('maxnreg') else ''}"
       f"{'_p' if c.get('persistent') else ''}_K{s[2]}"
       for d, o, s, c in CONFIGS]


def _inputs(rng, dtype, M, N, K):
    a = rng.uniform(-1, 1, (M, K)).astype(dtype if dtype != "bfloat16" else "float32")
    b = rng.uniform(-1, 1, (N, K)).astype(dtype if dtype != "bfloat16" else "float32")
    if dtype == "bfloat16":                       # values a bfloat16 holds, kept in float32
        a, b = dt.round_bfloat16(a), dt.round_bfloat16(b)
    return a, b, a.astype("float64") @ b.astype("float64").T


def _rel_err(got, want) -> float:
    return float(np.linalg.norm(got.astype("float64") - want) / np.linalg.norm(want))


@pytest.mark.parametrize("dtype,out_dtype,size,opts", CONFIGS, ids=IDS)
def test_tma_wgmma_compiled(dtype, out_dtype, size, opts):
    s, (A, B, C) = matmul_wgmma(*size, dtype=dtype, out_dtype=out_dtype, **opts)
    src = generate_cuda(tc.lower(s, [A, B, C], target="cuda"))
    # the tensor maps come first (the launcher packs them at offsets 0 and 128), A's then B's
    head = src[src.index('extern "C" __global__'):].split("{")[0]
    params = head.split("(", 2)[2].split(", ")
    assert params[:2] == ["const __grid_constant__ CUtensorMap tc_tmap_0", "const __grid_constant__ CUtensorMap tc_tmap_1"]
    assert "#include <cuda.h>" in src
    loop = src.split("tc_wgmma_tma_mainloop(float* acc")[1].split("\n}\n")[0]
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in src
    assert "tc_mbar_arrive_expect_tx(full + 8 * s, STAGE_BYTES)" in loop and "cp.async.cg" not in loop
    call = src.split("tc_wgmma_tma_mainloop<")[-1]
    assert call.startswith(f"{opts['block'][0]}, {opts['block'][1]}, {opts['stages']}, {opts.get('maxnreg', 0)}, ")
    if find_nvcc() is None:
        pytest.skip("nvcc not found: the source was generated, not compiled")
    assert compile_cuda(src, "sm_90a")


EMULATED = [
    ("float16", "float16", (256, 512, 192), dict(block=(128, 256), stages=4, raster=2, load="tma")),
    ("float16", "float32", (128, 128, 256), dict(block=(64, 64), stages=3, load="tma")),
    ("float32", "float32", (256, 128, 96), dict(block=(128, 128), stages=3, load="tma", maxnreg=1)),
    ("bfloat16", "float32", (256, 256, 128), dict(block=(256, 128), stages=3, load="tma", maxnreg=1)),
    ("float16", "float16", (512, 512, 192), dict(block=(128, 128), stages=3, load="tma", raster=2, persistent=6)),
]


@pytest.mark.parametrize("dtype,out_dtype,size,opts", EMULATED, ids=[f"{d}_{o}_{s[0]}x{s[1]}x{s[2]}" for d, o, s, _ in
                                                                     EMULATED])
def test_tma_wgmma_emulated(dtype, out_dtype, size, opts, rng):
    M, N, K = size
    s, (A, B, C) = matmul_wgmma(M, N, K, dtype=dtype, out_dtype=out_dtype, **opts)
    func = tc.lower(s, [A, B, C], target="cuda")
    a, b, ref = _inputs(rng, dtype, M, N, K)
    c = np.full((M, N), np.nan, out_dtype if out_dtype != "bfloat16" else "float32")
    emulate(func, [a, b, c])
    assert not np.isnan(c).any(), "elements of C were not written"
    assert _rel_err(c, ref) < (1e-3 if out_dtype == "float16" else 1e-6)


@pytest.mark.parametrize("what", ["coordinates swapped", "no swizzle", "one row off"])
def test_emulator_models_the_tma_copy(what, rng, monkeypatch):
    """The emulator fills the stages by the TMA copy's rule from the tensor-map coordinates the C
    computes: swapping the coordinates, dropping the swizzle or starting a row off fails there."""
    from tilecraft.codegen import cuda_emulate_wgmma as M
    real = M.tma_copy

    def wrong(ring, dst, tensor, c0, c1, rows, cols):
        if what == "coordinates swapped":
            return real(ring, dst, tensor, c1, c0, rows, cols)
        if what == "one row off":
            return real(ring, dst, tensor, c0, c1 + 1, rows, cols)
        box = np.zeros((rows, cols), tensor.dtype)
        box[:] = tensor[c1:c1 + rows, c0:c0 + cols]
        ring[dst:dst + rows * 128] = box.view(np.uint8).reshape(-1)
    monkeypatch.setattr(M, "tma_copy", wrong)
    s, (A, B, C) = matmul_wgmma(256, 128, 256, block=(128, 128), stages=3, load="tma")
    func = tc.lower(s, [A, B, C], target="cuda")
    a, b, _ = _inputs(rng, "float16", 256, 128, 256)
    with pytest.raises(Exception, match=r"the main loop through the swizzled shared ring and the wgmma descriptors "
                                        r"gives .* its definition"):
        emulate(func, [a, b, np.full((256, 128), np.nan, "float32")])


def test_tma_copy_is_the_producers_swizzled_layout_and_fills_zeros(rng):
    # the 128-byte swizzle on shared addresses puts chunk c of box row r where the cp.async producer does
    t = rng.integers(1, 2**15, (40, 80)).astype(np.uint16)
    ring = np.zeros(4096, np.uint8)
    M_tma = __import__("tilecraft.codegen.cuda_emulate_wgmma", fromlist=["tma_copy"]).tma_copy
    M_tma(ring, 1024, t, 8, 3, 16, 64)
    for r in range(16):
        for c in range(8):
            got = ring[1024 + swizzled_offset(r, c):1024 + swizzled_offset(r, c) + 16].view(np.uint16)
            assert (got == t[3 + r, 8 + 8 * c:16 + 8 * c]).all()
    # a box past the array's last row and column: zeros there (TMA's out-of-bounds fill)
    ring[:] = 0xFF
    M_tma(ring, 0, t, 40, 32, 16, 64)
    rows = [ring[swizzled_offset(r, c):swizzled_offset(r, c) + 16].view(np.uint16) for r in range(16) for c in range(8)]
    assert (rows[0] == t[32, 40:48]).all() and (rows[5 * 8 + 4] == t[37, 72:80]).all()
    assert (rows[5 * 8 + 5] == 0).all() and (rows[8 * 8] == 0).all()          # column 80, row 40: outside
    with pytest.raises(ValueError, match="not 1024-aligned"):
        M_tma(ring, 128, t, 0, 0, 8, 64)


def test_tensor_map_arguments_and_errors():
    spec = TM.TensorMapSpec(1, "float16", (128, 64))
    assert TM.tensor_map_args(spec, 0x7F0000000000, (4096, 2048)) == (
        6, 2, (2048, 4096), (4096,), (64, 128), (1, 1), 0, 3, 3, 0)
    assert TM.tensor_map_args(TM.TensorMapSpec(0, "float32", (256, 32)), 256, (8, 64))[0:5] == (
        7, 2, (64, 8), (256,), (32, 256))
    assert TM.tensor_map_args(TM.TensorMapSpec(0, "bfloat16", (64, 64)), 256, (64, 64))[0] == 9
    with pytest.raises(TM.TensorMapError, match=r"TMA needs a 16-byte aligned global address, got 0x8"):
        TM.tensor_map_args(spec, 8, (64, 64))
    with pytest.raises(TM.TensorMapError, match=r"TMA needs rows a multiple of 16 bytes apart; a row of 20 float16 "
                                                r"is 40 bytes"):
        TM.tensor_map_args(spec, 256, (64, 20))
    with pytest.raises(TM.TensorMapError, match=r"a TMA box of 512 x 64 float16: each side 1 to 256 elements"):
        TM.tensor_map_args(TM.TensorMapSpec(0, "float16", (512, 64)), 256, (1024, 64))
    with pytest.raises(TM.TensorMapError, match=r"a TMA tensor map here is 2-D; the buffer has shape \(2, 64, 64\)"):
        TM.tensor_map_args(spec, 256, (2, 64, 64))
    assert TM.TensorMapSpec.from_json(spec.to_json()) == spec


def test_missing_driver_is_a_clear_error(monkeypatch):
    import ctypes

    def no_lib(name, *a, **k):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(TM, "_libcuda", None)
    monkeypatch.setattr(ctypes, "CDLL", no_lib)
    monkeypatch.setattr(TM, "_cache", {})
    with pytest.raises(TM.TensorMapError, match=r"kernels with TMA copies \(load='tma'\) need the CUDA driver's "
                                                r"cuTensorMapEncodeTiled \(libcuda.so.1, CUDA 12\+\)"):
        TM.encode_tensor_map(TM.TensorMapSpec(0, "float16", (128, 64)), 1 << 20, (256, 256))


class _FakeArray:
    def __init__(self, ptr, shape, typestr):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr, "version": 3}


class _FakeKernel:
    def __init__(self, plan):
        self.plan, self.fn, self.block, self.smem = plan, "fn", plan.block, 0
        self.static_grid = tuple(plan.grid)


def test_plan_and_launch_arguments_put_the_tensor_maps_first(monkeypatch):
    """plan_of lists the kernel's tensor maps (A's box of bm rows, B's of bn) as its first
    parameters; prepare() encodes them from the arguments' pointers and shapes (once: cached) and
    passes each as 16 words before the pointers; the plan survives JSON (export_library)."""
    from tilecraft.runtime import cuda_runtime as R
    s, (A, B, C) = matmul_wgmma(256, 512, 128, block=(128, 256), stages=3, load="tma", out_dtype="float16")
    plan = R.plan_of(tc.lower(s, [A, B, C], target="cuda"))
    (k,) = plan.kernels
    assert k.tensor_maps == (TM.TensorMapSpec(0, "float16", (128, 64)), TM.TensorMapSpec(1, "float16", (256, 64)))
    assert k.params[:3] == (("tmap", 0), ("tmap", 1), ("arg", 0)) and k.types == "Q" * 32 + "PPP"
    assert R.KernelPlan.from_json(k.to_json()) == k
    calls = []

    def fake_encode(spec, ptr, shape):
        calls.append((spec.buffer_index, ptr, tuple(shape)))
        return tuple(range(1000 * spec.buffer_index, 1000 * spec.buffer_index + 16))
    monkeypatch.setattr(R, "encode_tensor_map", fake_encode)
    f = R.CUDAFunction(None, plan, [_FakeKernel(k)])
    args = [_FakeArray(0x10000, (256, 128), "<f2"), _FakeArray(0x20000, (512, 128), "<f2"),
            _FakeArray(0x30000, (256, 512), "<f2")]
    ((fn, grid, block, kargs, smem),) = f.prepare(args)
    assert calls == [(0, 0x10000, (256, 128)), (1, 0x20000, (512, 128))]
    assert kargs == list(range(16)) + list(range(1000, 1016)) + [0x10000, 0x20000, 0x30000]
    assert len(struct.pack(k.types, *kargs)) == 128 * 2 + 3 * 8       # the maps at offsets 0 and 128
    assert grid == (2, 2, 1) and block == (384, 1, 1)


def test_tensor_maps_are_packed_at_the_offsets_the_driver_reports(monkeypatch):
    """A launch buffer packed from offset 0 put the maps 112 bytes early on the H100 (ptxas aligns
    a CUtensorMap in the constant bank, whose parameters start at 0x210): every TMA kernel faulted
    with "illegal instruction". The loader asks the driver for the layout (param_layout) and pads."""
    from tilecraft.runtime import cuda_runtime as R
    s, (A, B, C) = matmul_wgmma(256, 512, 128, block=(128, 256), stages=3, load="tma", out_dtype="float16")
    (k,) = R.plan_of(tc.lower(s, [A, B, C], target="cuda")).kernels
    layout = ((112, 128), (240, 128), (368, 8), (376, 8), (384, 8))
    seen = []
    monkeypatch.setattr(TM, "param_layout", lambda image, name: seen.append((image, name)) or layout)

    class Fn:
        def prepare(self, fmt):
            self.fmt = fmt

        def set_attribute(self, what, value):
            pass
    monkeypatch.setattr(R, "driver", lambda: type("D", (), {"function_attribute": type("A", (), {
        "MAX_DYNAMIC_SHARED_SIZE_BYTES": 0})})())
    fn = Fn()
    R._Kernel(k, fn, b"cubin")
    assert seen == [(b"cubin", k.name)]
    assert fn.fmt == "112x" + "Q" * 32 + "PPP"
    buf = struct.pack(fn.fmt, *range(32), 1, 2, 3)
    assert struct.unpack_from("<Q", buf, 112)[0] == 0 and struct.unpack_from("<Q", buf, 240)[0] == 16
    assert struct.unpack_from("<Q", buf, 368)[0] == 1
    with pytest.raises(TM.TensorMapError, match="reports 2 kernel parameters, the launch plan has 5"):
        TM.padded_format(k.types, 2, layout[:2])
    with pytest.raises(TM.TensorMapError, match="does not fit the launch plan"):
        TM.padded_format(k.types, 2, ((0, 128), (64, 128), (192, 8), (200, 8), (208, 8)))


def test_plain_kernels_take_no_tensor_maps():
    from tilecraft.runtime import cuda_runtime as R
    s, (A, B, C) = matmul_wgmma(128, 128, 64, block=(128, 128), stages=3)
    (k,) = R.plan_of(tc.lower(s, [A, B, C], target="cuda")).kernels
    assert k.tensor_maps == () and "tensor_maps" not in k.to_json() and k.types == "PPP"
    assert "CUtensorMap" not in generate_cuda(tc.lower(s, [A, B, C], target="cuda"))


@pytest.mark.parametrize("kw,msg", [
    (dict(load="bulk"), r"load='bulk': the wgmma producer fills its stages by 'cp.async' or 'tma'"),
    (dict(maxnreg=1), r"maxnreg=1: 0, or 1 \(setmaxnreg\) with load='tma' \(the cp.async producer needs its "
                      r"registers\)"),
    (dict(load="tma", maxnreg=2), r"maxnreg=2: 0, or 1 \(setmaxnreg\) with load='tma'"),
])
def test_tma_config_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        matmul_wgmma(128, 128, 64, block=(128, 128), stages=3, **kw)


@pytest.mark.parametrize("dtype,out_dtype,size,opts", CONFIGS, ids=IDS)
def test_gpu_tma_wgmma(dtype, out_dtype, size, opts, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_tma_wgmma_emulated and test_tma_wgmma_compiled only")
    import torch
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("TMA + wgmma need an sm_90 GPU (H100, H200)")
    M, N, K = size
    s, (A, B, C) = matmul_wgmma(M, N, K, dtype=dtype, out_dtype=out_dtype, **opts)
    mod = tc.build(s, [A, B, C], target="cuda")
    for _ in range(2):                             # fresh inputs (new pointers: new tensor maps) each time
        a, b, ref = _inputs(rng, dtype, M, N, K)
        c = torch.full((M, N), float("nan"), dtype=getattr(torch, out_dtype)).cuda()
        mod(*(torch.from_numpy(x).to(getattr(torch, dtype)).cuda() for x in (a, b)), c)
        got = c.float().cpu().numpy()
        assert not np.isnan(got).any()
        tol = 3e-3 if dtype == "float32" or out_dtype != "float32" else 1e-5
        assert _rel_err(got, ref) < tol


def test_templates_offer_tma(rng):
    """topi/matmul_tensorcore.cuda's `wgmma` knob and topi/matmul_wgmma.cuda's `load` knob offer TMA
    loads (with and without setmaxnreg); an instantiated TMA configuration is emulated right."""
    import tilecraft.autotune as autotune
    from tilecraft.topi import tensorcore_template as TT
    assert TT.wgmma_options((128, 256, 4, 1, "tma_r")) == dict(block=(128, 256), stages=4, lag=1, load="tma", maxnreg=1,
                                                               persistent=0)
    assert TT.wgmma_options((128, 256, 4, 2)) == dict(block=(128, 256), stages=4, lag=2, load="cp.async", maxnreg=0,
                                                      persistent=0)
    assert TT.load_options("tma_p") == dict(load="tma", maxnreg=0, persistent=TT.PERSISTENT_SMS)
    with pytest.raises(ValueError, match=r"load 'bulk': one of cp.async, tma, tma_r, tma_p"):
        TT.load_options("bulk")
    assert not TT.wgmma_fits(4096, 4096, 4096, "float16", (128, 256), 4, load="tma", maxnreg=1, persistent=132)
    M, N, K = 256, 256, 128
    task = autotune.task.create("topi/matmul_tensorcore.cuda", args=(M, N, K, "float16", "float32", "col_major"),
                                target="cuda")
    tma = [c for c in task.config_space if c["wgmma"].val is not None and len(c["wgmma"].val) == 5]
    assert {c["wgmma"].val[4] for c in tma} == {"tma", "tma_r", "tma_p"}
    cfg = tma[int(rng.integers(len(tma)))]
    with tc.target.Target("cuda"):
        s, (A, B, C) = task.instantiate(cfg)
    func = tc.lower(s, [A, B, C], target="cuda")
    assert "tc_wgmma_tma_mainloop<" in generate_cuda(func), cfg
    a, b, ref = _inputs(rng, "float16", M, N, K)
    c = np.full((M, N), np.nan, "float32")
    emulate(func, [a, b, c])
    assert _rel_err(c, ref) < 1e-6, cfg
    task = autotune.task.create("topi/matmul_wgmma.cuda", args=(M, N, K, "float16", "float16"), target="cuda")
    assert {c["load"].val for c in task.config_space} == {"cp.async", "tma", "tma_r", "tma_p"}


def test_encode_calls_the_driver_once_per_array(monkeypatch):
    """encode_tensor_map hands cuTensorMapEncodeTiled a 128-byte aligned map and tensor_map_args'
    values, returns the map's 16 words, and encodes an array (pointer, shape) once."""
    import ctypes
    seen = []

    class FakeDriver:
        def cuTensorMapEncodeTiled(self, out, dtype, rank, addr, dims, strides, box, estrides, *enums):
            m = out._obj
            assert ctypes.addressof(m) % 128 == 0
            seen.append((dtype.value, rank.value, addr.value, list(dims), list(strides), list(box), list(estrides),
                         [e.value for e in enums]))
            for i in range(16):
                m[i] = 100 + i
            return 0
    monkeypatch.setattr(TM, "_libcuda", FakeDriver())
    monkeypatch.setattr(TM, "_cache", {})
    spec = TM.TensorMapSpec(0, "bfloat16", (256, 64))
    words = TM.encode_tensor_map(spec, 1 << 20, (512, 1024))
    assert words == tuple(range(100, 116))
    assert TM.encode_tensor_map(spec, 1 << 20, (512, 1024)) == words and len(seen) == 1      # cached
    assert seen == [(9, 2, 1 << 20, [1024, 512], [2048], [64, 256], [1, 1], [0, 3, 3, 0])]
    TM.encode_tensor_map(spec, 2 << 20, (512, 1024))                                        # another array
    assert len(seen) == 2

    class FailingDriver:
        def cuTensorMapEncodeTiled(self, *a):
            return 1                                                                        # CUDA_ERROR_INVALID_VALUE
    monkeypatch.setattr(TM, "_libcuda", FailingDriver())
    with pytest.raises(TM.TensorMapError, match=r"cuTensorMapEncodeTiled failed \(CUresult 1\) for a bfloat16 array "
                                                r"of shape \(512, 512\) at 0x100000, box \(256, 64\)"):
        TM.encode_tensor_map(spec, 1 << 20, (512, 512))


def test_persistent_grid_deals_tiles():
    """A persistent kernel: grid = the largest divisor of the tile count up to the SM count, the
    block's tiles a serial loop around the main loop and the store, no __syncthreads there (the main
    loop's mbarriers order its ring across tiles), the ring's step count kept in the kernel."""
    from tilecraft.runtime import cuda_runtime as R
    from tilecraft.topi.tensorcore_wgmma import persistent_grid
    assert (persistent_grid(512, 132), persistent_grid(2048, 132), persistent_grid(32, 132),
            persistent_grid(7 * 19, 132)) == (128, 128, 32, 19)
    s, (A, B, C) = matmul_wgmma(768, 512, 320, block=(128, 256), stages=4, load="tma", persistent=4)
    func = tc.lower(s, [A, B, C], target="cuda")
    (k,) = R.plan_of(func).kernels
    assert k.grid == (4, 1, 1) and k.block == (384, 1, 1)
    body = generate_cuda(func).split('extern "C"')[1]
    assert "int tc_wgmma_steps = 0;" in body and "__syncthreads" not in body
    loop = body.split("for (int ")[1]
    assert "< 3; ++" in loop.split("{")[0] and "tc_wgmma_tma_mainloop<" in loop and "tc_wgmma_store<" in loop
    with pytest.raises(ValueError, match=r"persistent=4: a persistent grid needs load='tma' and maxnreg=0"):
        matmul_wgmma(256, 256, 128, block=(128, 128), stages=3, persistent=4)
    with pytest.raises(ValueError, match=r"persistent=4: a persistent grid needs load='tma' and maxnreg=0"):
        matmul_wgmma(256, 256, 128, block=(128, 128), stages=3, load="tma", maxnreg=1, persistent=4)
