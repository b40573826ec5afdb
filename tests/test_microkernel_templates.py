"""The tensorized templates (``topi/matmul_microkernel.py``, ``topi/conv2d_microkernel.py``) on
the host's ISA: the fallback config and random configs of each space, built and run on
poisoned outputs (bounds-checked and not, the lowered-IR interpreter after every pass where the
loop nest is small) against numpy — int8 exactly against int64 arithmetic on the full uint8 /
int8 ranges. Shapes are small and not powers of two; the conv2d has fewer filters than a whole
channel block (the packed kernel's last block is padded with zero filters) and a stride-2 case.
The tuning CLI lists the templates.
"""
import numpy as np
import pytest

import tilecraft as tc
import tilecraft.autotune as autotune
from tilecraft.codegen.llvm_features import cpu_features
from tilecraft.topi import conv2d_microkernel  # noqa: F401  (registers the templates)
from tilecraft.topi import matmul_microkernel  # noqa: F401
from tilecraft.topi.cpu_intrinsics import vector_isa

from test_microkernels import conv_ref, int8_inputs

HOST = cpu_features("llvm")
ISA = vector_isa("llvm")
needs_fma = pytest.mark.skipif(not {"avx2", "fma"} <= HOST and "avx512f" not in HOST,
                               reason="this CPU has no FMA (AVX2 + FMA or AVX-512); the micro-kernels' "
                                      "machine code is checked in test_microkernels.py")
needs_int8 = pytest.mark.skipif(ISA.int8 is None, reason="this CPU has no int8 dot product (AVX2 at least)")


def configs(task, rng, n=3):
    """None (the fallback) and ``n`` random valid configs of the task's space."""
    return [None] + [task.config_space.get(i) for i in task.config_space.sample_ints(n, rng)]


def instantiate(task, cfg):
    with tc.target.Target("llvm"):
        if cfg is None:
            with pytest.warns(UserWarning, match="fallback configuration"):
                return task.func(*task.args)
        return task.instantiate(cfg)


@needs_fma
def test_matmul_tensorized(check_llvm, rand, rng):
    M, N, K = 24, 6 * ISA.lanes, 128
    task = autotune.task.create("topi/matmul_tensorized.llvm", args=(M, N, K, "float32"), target="llvm")
    a, b = rand((M, K)), rand((K, N))
    space = task.config_space
    # A packed and B read in place (the fallback is the other way round)
    other = next(c for c in (space.get(space.valid_index(i)) for i in rng.permutation(len(space)))
                 if c["pack_a"].val == 1 and c["pack_b"].val == 0)
    for cfg in configs(task, rng) + [other]:
        s, (A, B, C) = instantiate(task, cfg)
        check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b}, rtol=1e-4, atol=1e-4, passes=False)


@needs_fma
def test_matmul_tensorized_pads_m_for_tiles_that_do_not_divide_it(check_llvm, rand, rng):
    """M = 37 is prime: every tile but whole-matrix ones pads it. A is packed with zero rows up
    to whole blocks, each block of C computed in a compact buffer and copied out; the padding
    rows must never reach C (check_llvm poisons it), in the fallback and in random configs with
    the largest tiles (14 × 32 on AVX-512)."""
    M, N, K = 37, 4 * ISA.lanes, 96
    task = autotune.task.create("topi/matmul_tensorized.llvm", args=(M, N, K, "float32"), target="llvm")
    space = task.config_space
    padded = [c for c in space if M % c["tile"].val[0]]
    assert padded and all(c["c_block"].val == 1 and c["pack_a"].val == 1 for c in padded)
    biggest = max(c["tile"].val[0] * c["tile"].val[1] for c in padded)
    picks = [padded[i] for i in rng.choice(len(padded), 2, replace=False)]
    picks.append(next(c for c in padded if c["tile"].val[0] * c["tile"].val[1] == biggest))
    a, b = rand((M, K)), rand((K, N))
    for cfg in [None] + picks:
        s, (A, B, C) = instantiate(task, cfg)
        check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b}, rtol=1e-4, atol=1e-4, passes=False)


@needs_fma
def test_matmul_tensorized_c_block_without_padding(check_llvm, rand, rng):
    M, N, K = 32, 2 * ISA.lanes, 64
    task = autotune.task.create("topi/matmul_tensorized.llvm", args=(M, N, K, "float32"), target="llvm")
    blocked = [c for c in task.config_space if c["c_block"].val == 1 and M % c["tile"].val[0] == 0]
    a, b = rand((M, K)), rand((K, N))
    for i in rng.choice(len(blocked), 2, replace=False):
        s, (A, B, C) = instantiate(task, blocked[i])
        check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b}, rtol=1e-4, atol=1e-4, passes=False)


@needs_fma
def test_matmul_tensorized_a_prefetch(check_llvm, rand, rng):
    """Knob a_prefetch (only with pack_a): the kernel asks for the A panel ahead; random configs
    with it, padded M (37) and not, bounds-checked (the addresses stay in the slice)."""
    for M in (37, 24):
        N, K = 2 * ISA.lanes, 96
        task = autotune.task.create("topi/matmul_tensorized.llvm", args=(M, N, K, "float32"), target="llvm")
        with_pf = [c for c in task.config_space if c["a_prefetch"].val]
        assert with_pf and all(c["pack_a"].val == 1 for c in with_pf)
        a, b = rand((M, K)), rand((K, N))
        for i in rng.choice(len(with_pf), 2, replace=False):
            s, (A, B, C) = instantiate(task, with_pf[i])
            check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b}, rtol=1e-4, atol=1e-4, passes=False)


@pytest.mark.parametrize("tile,k_unroll", [((14, 32), 1), ((8, 32), 4), ((6, 64), 2)])
def test_matmul_tensorized_prefetch_machine_code(tile, k_unroll):
    """With a_prefetch the template's hot loop has one ``prefetcht0`` a step beside its FMAs
    (AVX-512, 1024³, the padded tiles included). Whether LLVM spills at 28-30 of 32 zmm depends
    on the loop nest around the kernel, with the prefetch or without (bench/cpu_gemm_anatomy.py
    --asm counts it per variant), so this checks the prefetches, not the spills."""
    from microkernel_asm import hot_loop, report
    target = "llvm -mcpu=skylake-avx512"
    task = autotune.task.create("topi/matmul_tensorized.llvm", args=(1024, 1024, 1024, "float32"), target=target)
    cfg = next(c for c in task.config_space if c["tile"].val == tile and c["k_unroll"].val == k_unroll
               and c["kc"].val == 256 and c["c_block"].val == 1 and c["a_prefetch"].val == 1024
               and c["order"].val == "nm" and c["pack_b"].val == 1)
    with tc.target.Target(target):
        s, args = task.instantiate(cfg)
    r = report(hot_loop(tc.build(s, args, target=target).get_source("asm"), "vfmadd"), "vfmadd")
    accs = tile[0] * tile[1] // 16
    assert r.accumulators >= accs - 2, r.text
    assert r.text.count("prefetcht0") == r.updates // accs == k_unroll, r.text


def test_padded_blocks_waste_little():
    from tilecraft.topi.matmul_microkernel import _valid_blocks, padded_rows
    assert padded_rows(1024, 14, 2) == 1036 and padded_rows(1024, 8, 32) == 1024
    assert _valid_blocks(1024, 1024, (14, 32), 4, 8, pack_a=1, c_block=1)        # 1064 rows: 3.9% more
    assert not _valid_blocks(1024, 1024, (14, 32), 8, 8, pack_a=1, c_block=1)    # 1120 rows: 9.4% more
    assert not _valid_blocks(1024, 1024, (14, 32), 1, 8, pack_a=0, c_block=1)    # A read in place: no rows to pad
    assert not _valid_blocks(1024, 1024, (14, 32), 1, 8, pack_a=1, c_block=0)    # C written in place
    assert _valid_blocks(37, 64, (14, 32), 1, 2, pack_a=1, c_block=1)            # 42 rows: single tiles always


@needs_int8
def test_dense_int8_on_weights_packed_beforehand_is_exact(check_llvm, rng):
    """``weight_layout="packed"``: the weights come packed by dense_int8_pack_weight with the
    config's panel width (the template packs nothing in the call)."""
    from tilecraft.topi.matmul_microkernel import dense_int8_pack_weight, dense_int8_weight_panel
    M, N, K = 12, 3 * ISA.int8_lanes, 128
    task = autotune.task.create("topi/dense_int8.llvm", args=(M, N, K, "packed"), target="llvm")
    a, w = int8_inputs(rng, ((M, K), "u"), ((N, K), "s"))
    a[0, :2], w[0, :2] = 255, -128
    want = a.astype(np.int64) @ w.astype(np.int64).T
    for cfg in configs(task, rng):
        s, (d, wt, C) = instantiate(task, cfg)
        nr = wt.shape[2].value
        assert cfg is None or dense_int8_weight_panel(cfg) == nr
        assert "packedW" not in str(tc.lower(s, [d, wt, C]))
        check_llvm(s, [d, wt, C], {d: a, wt: dense_int8_pack_weight(w, nr)}, {C: want}, rtol=0, atol=0, passes=False)


def test_dense_int8_weight_layout_errors():
    from tilecraft.topi.matmul_microkernel import dense_int8_pack_weight
    with pytest.raises(ValueError, match=r"topi/dense_int8.llvm: weight_layout is 'NK' or 'packed', got 'KN'"):
        autotune.task.create("topi/dense_int8.llvm", args=(16, 32, 64, "KN"), target="llvm -mcpu=cascadelake")
    with pytest.raises(ValueError, match=r"dense_int8_pack_weight: weights 40 × 64 need N a multiple of nr = 32 "
                                         r"and K a multiple of 4"):
        dense_int8_pack_weight(np.zeros((40, 64), "int8"), 32)
    w = np.arange(2 * 32 * 8).astype("int8").reshape(64, 8)
    p = dense_int8_pack_weight(w, 32)
    assert p.shape == (2, 2, 32, 4) and p[1, 1, 3, 2] == w[32 + 3, 4 + 2]


@needs_int8
def test_dense_int8_is_exact(check_llvm, rng):
    M, N, K = 12, 3 * ISA.int8_lanes, 128
    task = autotune.task.create("topi/dense_int8.llvm", args=(M, N, K), target="llvm")
    a, w = int8_inputs(rng, ((M, K), "u"), ((N, K), "s"))
    a[0, :2], w[0, :2] = 255, -128                # the pair that saturates a single vpmaddubsw
    want = a.astype(np.int64) @ w.astype(np.int64).T
    for cfg in configs(task, rng):
        s, (d, wt, C) = instantiate(task, cfg)
        check_llvm(s, [d, wt, C], {d: a, wt: w}, {C: want}, rtol=0, atol=0, passes=False)


@needs_fma
@pytest.mark.parametrize("shape", [(1, 8, 7, 9, 20, 3, 3, 1, 1), (1, 8, 9, 9, 12, 3, 3, 2, 1)],
                         ids=["pad1", "stride2"])
def test_conv2d_nchwc_tensorized(check_llvm, rand, rng, shape):
    N, CI, H, W, CO, KH, KW, stride, pad = shape
    task = autotune.task.create("topi/conv2d_nchwc_tensorized.llvm", args=shape + ("float32",), target="llvm")
    x, w = rand((N, CI, H, W)), rand((CO, CI, KH, KW))
    for cfg in configs(task, rng, 1):
        s, (data, kernel, out) = instantiate(task, cfg)
        check_llvm(s, [data, kernel, out], {data: x, kernel: w}, {out: conv_ref(x, w, stride, pad)},
                   rtol=1e-4, atol=1e-4, passes=False)


@needs_int8
def test_conv2d_nchwc_int8_is_exact(check_llvm, rng):
    shape = (1, 8, 6, 10, 20, 3, 3, 1, 1)
    N, CI, H, W, CO, KH, KW, stride, pad = shape
    task = autotune.task.create("topi/conv2d_nchwc_int8.llvm", args=shape, target="llvm")
    x, w = int8_inputs(rng, ((N, CI, H, W), "u"), ((CO, CI, KH, KW), "s"))
    want = conv_ref(x, w, stride, pad).astype(np.int64)
    for cfg in configs(task, rng, 1):
        s, (data, kernel, out) = instantiate(task, cfg)
        check_llvm(s, [data, kernel, out], {data: x, kernel: w}, {out: want}, rtol=0, atol=0, passes=False)


def test_the_interpreter_runs_a_tensorized_template_by_the_intrinsic_definition(check_llvm, rand):
    """Every pass of a small tensorized GEMM, checked by the lowered-IR interpreter (which runs
    the tensorized region by the intrinsic's TE definition), built for any x86 host."""
    if not ({"avx2", "fma"} <= HOST or "avx512f" in HOST):
        pytest.skip("this CPU has no FMA: the build would not run")
    M, N, K = 8, 2 * ISA.lanes, 64
    task = autotune.task.create("topi/matmul_tensorized.llvm", args=(M, N, K, "float32"), target="llvm")
    s, (A, B, C) = instantiate(task, None)
    a, b = rand((M, K)), rand((K, N))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b}, rtol=1e-4, atol=1e-4, passes=True)


def test_templates_refuse_shapes_they_cannot_tile():
    with pytest.raises(ValueError, match=r"topi/matmul_tensorized.llvm: N = 20 is not a multiple of the "
                                         r"target's \d+ lanes; use topi/matmul.llvm"):
        autotune.task.create("topi/matmul_tensorized.llvm", args=(8, 20, 32, "float32"), target="llvm")
    with pytest.raises(ValueError, match=r"computes float32 \(got dtype 'float64'\); int8 is topi/dense_int8.llvm"):
        autotune.task.create("topi/matmul_tensorized.llvm", args=(8, 16, 32, "float64"), target="llvm")
    with pytest.raises(ValueError, match=r"topi/conv2d_nchwc_int8.llvm: CI = 6 must be a multiple of 4"):
        autotune.task.create("topi/conv2d_nchwc_int8.llvm", args=(1, 6, 8, 8, 16, 3, 3, 1, 1), target="llvm")


def test_cli_lists_the_tensorized_templates(capsys):
    from tilecraft.cli import main

    assert main(["templates"]) == 0
    out = capsys.readouterr().out
    for name, short in [("topi/matmul_tensorized.llvm", "matmul_tensorized"), ("topi/dense_int8.llvm", "dense_int8"),
                        ("topi/conv2d_nchwc_tensorized.llvm", "conv2d_tensorized"),
                        ("topi/conv2d_nchwc_int8.llvm", "conv2d_int8")]:
        assert f"{name}   (tilecraft tune {short})" in out


def test_a_task_for_another_cpu_tiles_and_builds_for_it():
    """The ISA is the task's target's, in its config space and its schedules: AVX2 tiles (8
    lanes, 16 registers) and ymm code for znver3, whatever the host."""
    target = "llvm -mcpu=znver3"
    task = autotune.task.create("topi/matmul_tensorized.llvm", args=(16, 32, 64, "float32"), target=target)
    tiles = [e.val for e in task.config_space.space_map["tile"].entities]
    assert (8, 8) in tiles and all(nr % 8 == 0 and mr * nr // 8 + nr // 8 + 1 <= 16 for mr, nr in tiles)
    s, args = task.instantiate(task.config_space.get(task.config_space.valid_index(0)))
    asm = tc.build(s, args, target=target).get_source("asm")
    assert "vfmadd" in asm and "%ymm" in asm and "%zmm" not in asm


def test_the_untuned_gemm_follows_the_vendor():
    """Intel AVX-512: the Emerald Rapids default (8 × 32, C blocks in a block buffer over up to
    1024 of K) where it covers the shape; Zen (and shapes it does not cover) keep the generic
    fallback: half the registers in accumulators, rows of blocks outermost, A read in place."""
    from tilecraft.topi import cpu_intrinsics, matmul_microkernel as mm
    er, zen = cpu_intrinsics.vector_isa("llvm -mcpu=emeraldrapids"), cpu_intrinsics.vector_isa("llvm -mcpu=znver5")
    tiles = mm.register_tiles(er, 16, 1024, 1024, pad_m=True)
    assert mm.fallback_knobs(1024, 1024, 1024, tiles, er, "intel") == mm.INTEL_AVX512_FALLBACK
    generic = mm.fallback_knobs(1024, 1024, 1024, mm.register_tiles(zen, 16, 1024, 1024, pad_m=True), zen, "amd")
    assert generic == dict(tile=(8, 32), kc=256, mc_tiles=4, nc_tiles=4, order="mn", k_unroll=4, pack_a=0,
                           pack_b=1, c_block=0, a_prefetch=0)
    assert mm.INTEL_AVX512_FALLBACK["kc"] == 1024 and mm.INTEL_AVX512_FALLBACK["c_block"] == 1
    # a K that 1024 does not divide: the longest of 512 and 256 that does
    assert mm.fallback_knobs(1024, 1024, 768, tiles, er, "intel") == dict(mm.INTEL_AVX512_FALLBACK, kc=256)
    assert mm.fallback_knobs(1024, 1024, 1536, tiles, er, "intel") == dict(mm.INTEL_AVX512_FALLBACK, kc=512)
    # a shape the Intel blocks do not divide: the generic fallback there too
    small = mm.fallback_knobs(96, 64, 128, mm.register_tiles(er, 16, 96, 64, pad_m=True), er, "intel")
    assert small["mc_tiles"] != 32 and small["order"] == "mn"
    task = autotune.task.create("topi/matmul_tensorized.llvm", args=(512, 256, 256, "float32"),
                                target="llvm -mcpu=emeraldrapids")
    with tc.target.Target("llvm -mcpu=emeraldrapids"):
        with pytest.warns(UserWarning, match="fallback configuration"):
            s, args = task.func(*task.args)
    assert "packedA" in str(tc.lower(s, args, target="llvm -mcpu=emeraldrapids"))


def test_the_untuned_int8_dense_keeps_c_in_registers_over_the_whole_k():
    """``int8_fallback_knobs``: the longest slice of K whose packed weights (kc × nr bytes) fit
    in 32 KB, K itself where it can (then each C tile is computed from zeros in registers and
    stored once: the intrinsic's body, no reset); up to 16 × 4 tiles a block."""
    from tilecraft.topi.matmul_microkernel import int8_fallback_knobs, register_tiles
    zen5 = vector_isa("llvm -mcpu=znver5")
    f = int8_fallback_knobs(1024, 1024, 1024, register_tiles(zen5, 16, 1024, 1024, 1), zen5)
    assert f == dict(tile=(8, 32), kc=1024, mc_tiles=16, nc_tiles=4, order="nm", k_unroll=4)
    # 2048 × 32 bytes do not fit: the longest slice that does (a multiple of 64)
    assert int8_fallback_knobs(64, 64, 2048, register_tiles(zen5, 16, 64, 64, 1), zen5)["kc"] == 1024
    assert int8_fallback_knobs(16, 32, 320, register_tiles(zen5, 16, 16, 32, 1), zen5)["kc"] == 320
    avx2 = vector_isa("llvm -mcpu=znver3")
    f = int8_fallback_knobs(24, 40, 100, register_tiles(avx2, 8, 24, 40, 4), avx2)
    assert f["kc"] == 100 and 24 % (f["tile"][0] * f["mc_tiles"]) == 0 and 40 % (f["tile"][1] * f["nc_tiles"]) == 0


@needs_int8
@pytest.mark.parametrize("M, N, K", [(24, 64, 320), (16, 32, 2048)], ids=["whole-k", "k-slices"])
def test_the_untuned_int8_dense_is_exact(check_llvm, rng, M, N, K):
    """The fallback config on packed weights, K in one slice (body only) and in slices (reset and
    update), exact on the full uint8 / int8 ranges, poisoned output."""
    from tilecraft.topi.matmul_microkernel import dense_int8_pack_weight
    N = N if N % ISA.int8_lanes == 0 else 2 * ISA.int8_lanes
    task = autotune.task.create("topi/dense_int8.llvm", args=(M, N, K, "packed"), target="llvm")
    a, w = int8_inputs(rng, ((M, K), "u"), ((N, K), "s"))
    a[0, :4], w[0, :4] = 255, -128
    want = a.astype(np.int64) @ w.astype(np.int64).T
    s, (d, wt, C) = instantiate(task, None)
    text = str(tc.lower(s, [d, wt, C]))
    assert ("'reset'" in text) == (K == 2048)
    check_llvm(s, [d, wt, C], {d: a, wt: dense_int8_pack_weight(w, wt.shape[2].value)}, {C: want},
               rtol=0, atol=0, passes=False)


def requantized(acc, scale, zero_point):
    """PyTorch's quantized Linear's epilogue in numpy: float32, half to even, clipped to uint8."""
    return np.clip(np.rint(acc.astype(np.float32) * np.float32(scale)) + zero_point, 0, 255).astype("uint8")


@needs_int8
@pytest.mark.parametrize("layout", ["NK", "packed"])
def test_dense_int8_requantized_to_uint8_is_exact(check_llvm, rng, layout):
    """``requant_scale``: the uint8 output of PyTorch's quantized Linear, from int32 blocks of C
    computed in a block buffer, on the fallback and random configs; the inputs reach both clips
    and exact ties (multiples of half the step: rounded to even)."""
    from tilecraft.topi.matmul_microkernel import dense_int8_pack_weight
    M, N, K = 24, 3 * ISA.int8_lanes, 128
    scale, zp = 1 / 256, 100
    task = autotune.task.create("topi/dense_int8.llvm", args=(M, N, K, layout, "kept", "rows", "zeroed", scale, zp),
                                target="llvm")
    a, w = int8_inputs(rng, ((M, K), "u"), ((N, K), "s"))
    a[0], w[0], w[1] = 255, 127, -128               # row 0 clips high and low
    a[1], w[2] = 0, 0
    a[1, :3], w[2, :2] = (1, 1, 8), (64, 64)        # 128 / 256 = 0.5: a tie, to even (0), not away (1)
    w[3, :3] = 64                                   # 640 / 256 = 2.5: to 2, not 3
    acc = a.astype(np.int64) @ w.astype(np.int64).T
    want = requantized(acc, scale, zp)
    assert want[0, 0] == 255 and want[0, 1] == 0 and acc[1, 2] == 128 and acc[1, 3] == 640
    assert want[1, 2] == zp and want[1, 3] == zp + 2
    for cfg in configs(task, rng):
        s, (d, wt, C) = instantiate(task, cfg)
        assert C.dtype == "uint8" and "C.block" in str(tc.lower(s, [d, wt, C]))
        wv = dense_int8_pack_weight(w, wt.shape[2].value) if layout == "packed" else w
        check_llvm(s, [d, wt, C], {d: a, wt: wv}, {C: want}, rtol=0, atol=0, passes=False)


def test_dense_int8_requantization_errors():
    for scale, zp in ((-1.0, 0), (0.5, 256), (0.5, -1)):
        with pytest.raises(ValueError, match=r"topi/dense_int8.llvm: requant_scale must be > 0 \(0: int32 output\) "
                                             r"and requant_zero_point in \[0, 255\]"):
            task = autotune.task.create("topi/dense_int8.llvm", args=(16, 32, 64, "NK", "kept", "rows", "zeroed",
                                                                      scale, zp), target="llvm -mcpu=cascadelake")
            with tc.target.Target("llvm -mcpu=cascadelake"):
                task.instantiate(task.config_space.get(0))
