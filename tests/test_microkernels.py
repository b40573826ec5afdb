"""The CPU micro-kernels (``tilecraft.topi.cpu_intrinsics``): fp32 FMA register tiles and int8
dot products, per ISA.

Every intrinsic is tensorized into a small GEMM or NCHW[x]c convolution with tails in the outer
loops and checked by ``check_llvm`` (the lowered-IR interpreter after every pass, where the
region runs by the intrinsic's TE definition; the LLVM build, bounds-checked and not, on
poisoned outputs) against numpy — int8 against exact int64 arithmetic on the full uint8 / int8
ranges. An ISA runs only where the host has it (the test says which feature is missing); its
machine code is checked everywhere, built with ``-mcpu``: the hot loop updates register
accumulators (as many distinct registers as the tile has), stores nothing, touches no stack
slot (no spills) and broadcasts A.
"""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.codegen.llvm_features import cpu_features
from tilecraft.topi import cpu_intrinsics as ci

from microkernel_asm import hot_loop, report

# a CPU name per ISA: the instructions are chosen from these targets' features, on any host
ISA_TARGETS = {
    "avx512": "llvm -mcpu=skylake-avx512",       # AVX-512F/BW, no VNNI: vpmaddubsw for int8
    "avx512vnni": "llvm -mcpu=cascadelake",
    "avx2": "llvm -mcpu=znver3",                 # AVX2 + FMA, no AVX-512, no VNNI
    "avxvnni": "llvm -mcpu=alderlake",           # AVX2 + AVX-VNNI (256-bit vpdpbusd)
}
HOST = cpu_features("llvm")


def _needs(isa, int8: bool) -> set:
    if int8:
        return {"avx512vnni": {"avx512vnni"}, "avxvnni": {"avxvnni"}, "avx512bw": {"avx512bw"},
                "avx2": {"avx2"}}[isa.int8]
    return {"avx512": {"avx512f"}, "avx2": {"avx2", "fma"}}[isa.name]


def _run_or_skip(isa, int8: bool):
    missing = _needs(isa, int8) - HOST
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(sorted(missing))} (the machine code is still checked "
                    f"by test_*_machine_code)")


def gemm_fp32_schedule(M, N, K, mr, nr, kc, isa, a_layout="rows", unroll=1, parallel=True, prefetch=0):
    """C = A @ B with B packed in nr-wide panels (and A in mr-row panels), tensorized at the
    register tile; M, N have outer tails past a block of 2 tiles, K splits by kc (reset +
    update) unless kc == K (body); ``prefetch``: the kernel's A prefetch distance (bytes)."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    Bp = te.compute((N // nr, K, nr), lambda x, k, z: B[k, x * nr + z], name="Bp")
    if a_layout == "panel":
        Ap = te.compute((M // mr, K, mr), lambda x, k, z: A[x * mr + z, k], name="Ap")

        def a_at(i, k):
            return Ap[i // mr, k, i % mr]
    else:
        def a_at(i, k):
            return A[i, k]
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(a_at(i, k) * Bp[j // nr, k, j % nr], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, mi = s[C].split(i, factor=mr)
    jo, ni = s[C].split(j, factor=nr)
    ko, kk = s[C].split(k, factor=kc)
    s[C].reorder(io, jo, ko, mi, ni, kk)
    if parallel:
        s[C].parallel(io)
    s[C].tensorize(mi, ci.gemm_fp32(mr, nr, kc, isa=isa, a_layout=a_layout, unroll=unroll, prefetch=prefetch))
    if prefetch:
        s[C].pragma(io, "import_llvm", ci.PREFETCH_IR)
    return s, [A, B, C]


def dense_int8_schedule(M, N, K, mr, nr, kc, isa, exact=True, unroll=1):
    """C = data @ weight.T, uint8 × int8 → int32, weights packed [N / nr, K / 4, nr, 4]."""
    data = te.placeholder((M, K), "uint8", name="data")
    weight = te.placeholder((N, K), "int8", name="weight")
    Wp = te.compute((N // nr, K // 4, nr, 4), lambda x, y, z, w: weight[x * nr + z, y * 4 + w], name="Wp")
    k4 = te.reduce_axis((0, K // 4), name="k4")
    kb = te.reduce_axis((0, 4), name="kb")
    C = te.compute((M, N), lambda i, j: te.sum(data[i, k4 * 4 + kb].astype("int32")
                                               * Wp[j // nr, k4, j % nr, kb].astype("int32"), axis=[k4, kb]),
                   name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, mi = s[C].split(i, factor=mr)
    jo, ni = s[C].split(j, factor=nr)
    ko, kk = s[C].split(k4, factor=kc // 4)
    s[C].reorder(io, jo, ko, mi, ni, kk, kb)
    s[C].parallel(io)
    s[C].tensorize(mi, ci.gemm_u8s8s32(mr, nr, kc, isa=isa, exact=exact, unroll=unroll))
    return s, [data, weight, C]


def int8_inputs(rng, *shapes_kinds):
    return [rng.integers(0, 256, sh).astype("uint8") if kind == "u" else
            rng.integers(-128, 128, sh).astype("int8") for sh, kind in shapes_kinds]


# ------------------------------------------------------------------------------------------------
# fp32

@pytest.mark.parametrize("name", ["avx512", "avx2"])
@pytest.mark.parametrize("a_layout,kc,unroll", [("rows", 16, 1), ("panel", 16, 4), ("rows", 48, 2)],
                         ids=["rows-reset-update", "panel-unroll4", "rows-body"])
def test_gemm_fp32_runs(check_llvm, rand, name, a_layout, kc, unroll):
    isa = ci.vector_isa(ISA_TARGETS[name])
    _run_or_skip(isa, False)
    mr, nr = 3, 2 * isa.lanes
    M, N, K = 2 * mr, 2 * nr, 48
    s, (A, B, C) = gemm_fp32_schedule(M, N, K, mr, nr, kc, isa, a_layout, unroll)
    a, b = rand((M, K)), rand((K, N))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,mr,nr,reg", [("avx512", 8, 32, "zmm"), ("avx512", 12, 32, "zmm"),
                                            ("avx2", 4, 24, "ymm"), ("avx2", 6, 16, "ymm")])
def test_gemm_fp32_machine_code(name, mr, nr, reg):
    """The hot loop: mr × nr / lanes FMAs per step into as many registers, A broadcast, no store,
    no spill; built for the ISA's CPU on any host."""
    target = ISA_TARGETS[name]
    isa = ci.vector_isa(target)
    s, args = gemm_fp32_schedule(mr * 2, nr * 2, 256, mr, nr, 128, isa, unroll=4)
    asm = tc.build(s, args, target=target).get_source("asm")
    r = report(hot_loop(asm, "vfmadd"), "vfmadd")
    tiles = mr * nr // isa.lanes
    assert r.updates and r.updates % tiles == 0, r.text
    assert r.accumulators == tiles, r.text
    assert r.stores == 0 and r.stack == 0, r.text
    assert r.broadcasts >= mr * r.updates // tiles, r.text
    assert f"%{reg}" in r.text and ("zmm" not in r.text if reg == "ymm" else True), r.text


@pytest.mark.parametrize("name", ["avx512", "avx2"])
@pytest.mark.parametrize("kc,unroll,prefetch", [(16, 4, 64), (48, 1, 4), (48, 2, 4096)],
                         ids=["reset-update", "body-next-row", "body-past-the-slice"])
def test_gemm_fp32_prefetching_runs(check_llvm, rand, name, kc, unroll, prefetch):
    """The A-panel prefetch asks for rows ahead of the step, the slice's last row near its end
    (4096 bytes is past every slice here): the bounds-checked build checks each address."""
    isa = ci.vector_isa(ISA_TARGETS[name])
    _run_or_skip(isa, False)
    mr, nr = 3, 2 * isa.lanes
    M, N, K = 2 * mr, 2 * nr, 48
    s, (A, B, C) = gemm_fp32_schedule(M, N, K, mr, nr, kc, isa, "panel", unroll, prefetch=prefetch)
    a, b = rand((M, K)), rand((K, N))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b}, rtol=1e-5, atol=1e-5)


def test_prefetch_needs_the_panel_layout():
    with pytest.raises(ValueError, match=r"gemm_fp32\(4, 16, 64\): prefetch=256 needs a_layout='panel'"):
        ci.gemm_fp32(4, 16, 64, isa=ci.vector_isa("llvm -mcpu=skylake-avx512"), prefetch=256)


def test_conv_fp32_runs(check_llvm, rand):
    isa = ci.vector_isa("llvm")
    _run_or_skip(isa, False)
    # CO is not a multiple of oc_bn: the packed kernel's last block is padded with zero filters
    co = 2 * isa.lanes - 3
    data, kernel, out, s = conv_schedule(isa, 1, 8, 9, 12, co, 3, 3, 1, 1, reg_n=4, ic_bn=4, int8=False)
    x, w = rand((1, 8, 9, 12)), rand((co, 8, 3, 3))
    check_llvm(s, [data, kernel, out], {data: x, kernel: w}, {out: conv_ref(x, w, 1, 1)}, rtol=1e-4, atol=1e-4)


def test_conv_fp32_stride_two_and_odd_tile(check_llvm, rand):
    isa = ci.vector_isa("llvm")
    _run_or_skip(isa, False)
    data, kernel, out, s = conv_schedule(isa, 1, 6, 11, 11, isa.lanes, 3, 3, 2, 1, reg_n=3, ic_bn=6, int8=False)
    x, w = rand((1, 6, 11, 11)), rand((isa.lanes, 6, 3, 3))
    check_llvm(s, [data, kernel, out], {data: x, kernel: w}, {out: conv_ref(x, w, 2, 1)}, rtol=1e-4, atol=1e-4)


def conv_ref(x, w, stride, pad):
    """Direct convolution in float64 (int8: exact), NCHW × OIHW."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    N, CI, H, W = x.shape
    CO, _, KH, KW = w.shape
    xp = np.pad(x64, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1
    out = np.zeros((N, CO, OH, OW))
    for r in range(KH):
        for q in range(KW):
            patch = xp[:, :, r:r + stride * OH:stride, q:q + stride * OW:stride]
            out += np.einsum("nchw,oc->nohw", patch, w64[:, :, r, q])
    return out


def conv_schedule(isa, N, CI, H, W, CO, KH, KW, stride, pad, reg_n, ic_bn, int8, oc_bn=None, ic_outer=True):
    """The conv2d_nchwc templates' stages and schedule with the given tile (their helpers)."""
    from tilecraft.topi.conv2d_microkernel import _schedule, packed_conv2d

    data = te.placeholder((N, CI, H, W), "uint8" if int8 else "float32", name="data")
    kernel = te.placeholder((CO, CI, KH, KW), "int8" if int8 else "float32", name="kernel")
    oc_bn = oc_bn or (isa.int8_lanes if int8 else isa.lanes)
    out, (dv, kv, conv) = packed_conv2d(data, kernel, stride, pad, ic_bn, oc_bn)
    s = te.create_schedule(out.op)
    mk = (ci.conv_u8s8s32 if int8 else ci.conv_fp32)(reg_n, oc_bn, KH, KW, ic_bn, stride, isa=isa)
    _schedule(s, dv, kv, conv, out, reg_n, ic_outer, mk)
    return data, kernel, out, s


# ------------------------------------------------------------------------------------------------
# int8

INT8_ISAS = ["avx512vnni", "avxvnni", "avx512", "avx2"]


@pytest.mark.parametrize("name", INT8_ISAS)
@pytest.mark.parametrize("kc", [16, 64], ids=["reset-update", "body"])
def test_gemm_u8s8s32_exact_on_full_ranges(check_llvm, rng, name, kc):
    """Any uint8 and int8 values (the AVX2 / AVX512-BW forms split the data so vpmaddubsw cannot
    saturate), against int64 arithmetic."""
    isa = ci.vector_isa(ISA_TARGETS[name])
    _run_or_skip(isa, True)
    mr, nr = 3, 2 * isa.int8_lanes
    M, N, K = 2 * mr, 2 * nr, 64
    s, (d, w, C) = dense_int8_schedule(M, N, K, mr, nr, kc, isa)
    a, b = int8_inputs(rng, ((M, K), "u"), ((N, K), "s"))
    a[0, :2], b[0, :2] = 255, -128                # the pair that saturates vpmaddubsw
    want = a.astype(np.int64) @ b.astype(np.int64).T
    check_llvm(s, [d, w, C], {d: a, w: b}, {C: want}, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["avx512", "avx2"])
def test_saturating_form_is_exact_in_its_documented_range(check_llvm, rng, name):
    """exact=False (TVM's and FBGEMM's single vpmaddubsw): exact for data <= 127; data of 255
    against weights of -128 saturates (which is why exact=True is the default)."""
    isa = ci.vector_isa(ISA_TARGETS[name])
    _run_or_skip(isa, True)
    mr, nr, M, K = 2, isa.int8_lanes, 4, 32
    N = 2 * nr
    s, (d, w, C) = dense_int8_schedule(M, N, K, mr, nr, 32, isa, exact=False)
    a = rng.integers(0, 128, (M, K)).astype("uint8")
    b = rng.integers(-128, 128, (N, K)).astype("int8")
    check_llvm(s, [d, w, C], {d: a, w: b}, {C: a.astype(np.int64) @ b.astype(np.int64).T}, rtol=0, atol=0)
    f = tc.build(s, [d, w, C])
    a, b = np.full((M, K), 255, "uint8"), np.full((N, K), -128, "int8")
    c = np.zeros((M, N), "int32")
    f(a, b, c)
    assert (c == 16 * -32768).all()               # each pair clipped to -32768 instead of -65280


def test_conv_u8s8s32_runs(check_llvm, rng):
    isa = ci.vector_isa("llvm")
    _run_or_skip(isa, True)
    lanes = isa.int8_lanes
    data, kernel, out, s = conv_schedule(isa, 1, 8, 9, 10, 3 * lanes, 3, 3, 1, 1, reg_n=5, ic_bn=4, int8=True,
                                         oc_bn=lanes, ic_outer=False)
    x, w = int8_inputs(rng, ((1, 8, 9, 10), "u"), ((3 * lanes, 8, 3, 3), "s"))
    check_llvm(s, [data, kernel, out], {data: x, kernel: w}, {out: conv_ref(x, w, 1, 1).astype(np.int64)},
               rtol=0, atol=0)


@pytest.mark.parametrize("name,mnemonic,reg", [("avx512vnni", "vpdpbusd", "zmm"), ("avxvnni", "vpdpbusd", "ymm"),
                                               ("avx512", "vpaddd", "zmm"), ("avx2", "vpaddd", "ymm")])
def test_gemm_u8s8s32_machine_code(name, mnemonic, reg):
    target = ISA_TARGETS[name]
    isa = ci.vector_isa(target)
    tiles_per_row = 2 if isa.int8 in ("avx512vnni", "avxvnni") else 1
    mr = {"avx512vnni": 8, "avxvnni": 4, "avx512bw": 4, "avx2": 2}[isa.int8]
    nr = tiles_per_row * isa.int8_lanes
    s, args = dense_int8_schedule(2 * mr, 2 * nr, 512, mr, nr, 256, isa, unroll=4)
    asm = tc.build(s, args, target=target).get_source("asm")
    r = report(hot_loop(asm, mnemonic), mnemonic)
    tiles = mr * nr // isa.int8_lanes
    per_step = tiles if mnemonic == "vpdpbusd" else 2 * tiles      # exact: two products per tile
    assert r.updates and r.updates % per_step == 0, r.text
    assert r.accumulators >= tiles, r.text
    assert r.stores == 0 and r.stack == 0, r.text
    assert r.broadcasts >= 1, r.text
    assert f"%{reg}" in r.text, r.text
    if mnemonic == "vpdpbusd":
        assert r.accumulators == tiles, r.text
    else:
        assert "vpmaddubsw" in r.text and "vpmaddwd" in r.text, r.text


# ------------------------------------------------------------------------------------------------
# TVM's anchor

def test_dot_16x1x16_uint8_int8_int32_as_tvm_uses_it(check_llvm, rng):
    """TVM's ``dot_16x1x16_uint8_int8_int32`` on a dense layer with the weights in its layout
    ``[N / 16, K / 4, 16, 4]``: j split by 16 and k by 4, tensorized at the 16 lanes."""
    target = "llvm" if "avx512vnni" in HOST or "avx512bw" in HOST else "llvm -mcpu=cascadelake"
    pc = ci.dot_16x1x16_uint8_int8_int32(target)
    M, N, K = 3, 48, 20
    data = te.placeholder((M, K), "uint8", name="data")
    Wp = te.placeholder((N // 16, K // 4, 16, 4), "int8", name="Wp")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(data[i, k].astype("int32")
                                               * Wp[j // 16, k // 4, j % 16, k % 4].astype("int32"), axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=16)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(i, jo, ko, ji, ki)
    s[C].tensorize(ji, pc)
    assert pc.name.endswith("avx512vnni" if "vnni" in target or "avx512vnni" in HOST else "avx512bw")
    if target != "llvm":
        asm = tc.build(s, [data, Wp, C], target=target).get_source("asm")
        assert "vpdpbusd" in asm
        pytest.skip("this CPU lacks AVX512-BW: built for cascadelake (vpdpbusd checked), not run")
    a = rng.integers(0, 128, (M, K)).astype("uint8")      # TVM's range (no saturation without VNNI)
    w = rng.integers(-128, 128, (N // 16, K // 4, 16, 4)).astype("int8")
    dense_w = w.transpose(0, 2, 1, 3).reshape(N, K)
    check_llvm(s, [data, Wp, C], {data: a, Wp: w}, {C: a.astype(np.int64) @ dense_w.astype(np.int64).T},
               rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------
# choosing and refusing

def test_isa_follows_the_target_not_the_host():
    assert ci.vector_isa("llvm -mcpu=skylake-avx512") == ci.VectorISA("avx512", 16, 32, "avx512bw", 16)
    assert ci.vector_isa("llvm -mcpu=cascadelake").int8 == "avx512vnni"
    assert ci.vector_isa("llvm -mcpu=alderlake") == ci.VectorISA("avx2", 8, 16, "avxvnni", 8)
    assert ci.vector_isa("llvm -mcpu=znver3") == ci.VectorISA("avx2", 8, 16, "avx2", 8)
    assert ci.vector_isa("llvm -mcpu=x86-64") == ci.VectorISA("sse", 4, 16, None, 8)
    assert ci.vector_isa("llvm -mcpu=znver3 -mattr=+avxvnni").int8 == "avxvnni"
    assert ci.vector_isa("llvm -mcpu=cascadelake -mattr=-avx512vnni").int8 == "avx512bw"
    with tc.target.Target("llvm -mcpu=znver3"):
        assert ci.vector_isa().name == "avx2"       # the current target by default


def test_the_vendor_follows_the_target_cpu():
    assert ci.cpu_vendor("llvm -mcpu=emeraldrapids") == ci.cpu_vendor("llvm -mcpu=skylake-avx512") == "intel"
    assert ci.cpu_vendor("llvm -mcpu=znver5") == ci.cpu_vendor("llvm -mcpu=znver3 -mattr=+avx512f") == "amd"
    assert ci.cpu_vendor("llvm -mcpu=x86-64-v4") == ""
    with tc.target.Target("llvm -mcpu=sapphirerapids"):
        assert ci.cpu_vendor() == "intel"           # the current target by default


def test_tile_columns_must_be_whole_vectors():
    with pytest.raises(ValueError, match=r"gemm_fp32\(4, 24, 64\): the tile is 4 × 24; its columns must be a "
                                         r"multiple of the target's 16 lanes"):
        ci.gemm_fp32(4, 24, 64, isa=ci.vector_isa("llvm -mcpu=skylake-avx512"))


def test_unroll_must_divide_the_reduction():
    with pytest.raises(ValueError, match=r"unroll=3 must divide the innermost reduction extent 64"):
        ci.gemm_fp32(4, 16, 64, isa=ci.vector_isa("llvm -mcpu=skylake-avx512"), unroll=3)


def test_a_layout_is_rows_or_panel():
    with pytest.raises(ValueError, match=r"a_layout must be 'rows' or 'panel', got 'cols'"):
        ci.gemm_fp32(4, 16, 64, isa=ci.vector_isa("llvm -mcpu=skylake-avx512"), a_layout="cols")


def test_int8_reduction_in_groups_of_four():
    with pytest.raises(ValueError, match=r"kc must be a multiple of 4"):
        ci.gemm_u8s8s32(4, 16, 30, isa=ci.vector_isa("llvm -mcpu=cascadelake"))
    with pytest.raises(ValueError, match=r"ic_bn must be a multiple of 4"):
        ci.conv_u8s8s32(4, 16, 3, 3, 6, isa=ci.vector_isa("llvm -mcpu=cascadelake"))


def test_int8_needs_avx2():
    with pytest.raises(ValueError, match=r"the target has no int8 dot product \(AVX2 at least\); its ISA is sse"):
        ci.gemm_u8s8s32(4, 8, 16, isa=ci.vector_isa("llvm -mcpu=x86-64"))


def test_tvm_intrinsic_needs_512_bit_vectors():
    with pytest.raises(ValueError, match=r"dot_16x1x16_uint8_int8_int32 needs AVX512-BW or AVX512-VNNI; the "
                                         r"target llvm -mcpu=znver3 has avx2"):
        ci.dot_16x1x16_uint8_int8_int32("llvm -mcpu=znver3")


# ------------------------------------------------------------------------------------------------
# the printed IR

@pytest.mark.parametrize("name,int8", [("avx512", False), ("avx2", False), ("avx512vnni", True), ("avx2", True)],
                         ids=["fp32-avx512", "fp32-avx2", "int8-vnni", "int8-avx2-exact"])
def test_tensorized_module_shows_the_calls(golden, name, int8):
    """The lowered GEMM: reset, then per kc slice the update's accumulators loaded from C, one
    step per k (FMAs on zmm/ymm, vpdpbusd, or the exact vpmaddubsw + vpmaddwd pairs), stored
    back; the same on any host (the ISA is the target's)."""
    isa = ci.vector_isa(ISA_TARGETS[name])
    if int8:
        s, args = dense_int8_schedule(2, 2 * isa.int8_lanes, 16, 2, isa.int8_lanes, 8, isa)
    else:
        s, args = gemm_fp32_schedule(2, 2 * isa.lanes, 8, 2, isa.lanes, 4, isa, parallel=False)
    golden(f"microkernel_{'int8' if int8 else 'fp32'}_{name}", str(tc.lower(s, args)))
