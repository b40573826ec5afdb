"""The AMX int8 micro-kernel (``topi/cpu_amx.py``) and ``topi/dense_int8.llvm`` on it.

Everywhere: the kernel's LLVM IR compiles to tile instructions for Sapphire Rapids; the template
chooses it from the target's features (and not on targets without AMX); its schedules are right
by the lowered-IR interpreter after every pass (which runs the tensorized region by the
intrinsic's TE definition), exactly against int64 numpy. Where the CPU has AMX, the built code
runs, on poisoned outputs, exactly (``-m`` none: plain ``pytest tests/test_microkernel_amx.py``
on such a host).
"""
import re

import numpy as np
import pytest

import tilecraft as tc
import tilecraft.autotune as autotune
from tilecraft.codegen.llvm_features import cpu_features
from tilecraft.topi import cpu_amx
from tilecraft.topi import conv2d_microkernel, matmul_microkernel  # noqa: F401  (registers the templates)
from tilecraft.topi.cpu_intrinsics import vector_isa

from microkernel_asm import hot_loop
from test_microkernels import int8_inputs

SPR = "llvm -mcpu=sapphirerapids"
HOST_AMX = "amx-int8" in cpu_features("llvm")


def test_amx_is_a_feature_of_sapphire_rapids_and_not_of_zen():
    assert vector_isa(SPR).amx and str(vector_isa(SPR)) == "avx512+avx512vnni+amx"
    assert not vector_isa("llvm -mcpu=znver4").amx and not vector_isa("llvm -mcpu=cascadelake").amx


@pytest.mark.parametrize("tile", cpu_amx.AMX_TILES)
def test_the_kernel_keeps_its_c_tiles_in_tile_registers(tile):
    """One tileload per A and B tile and one tdpbusd per C tile each step; C loaded before the
    loop and stored after it; the tile configuration and the permission request outside it."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mr, nr = tile
    mod = llvm.parse_assembly(cpu_amx.amx_kernel_ir(mr, nr))
    mod.verify()
    tm = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(cpu="sapphirerapids", opt=2)
    asm = tm.emit_assembly(mod)
    loop = hot_loop(asm, "tdpbusd")
    ops = [x.split()[0] for x in loop]
    tiles_c, tiles_a, tiles_b = mr * nr // 256, mr // 16, nr // 16
    assert ops.count("tdpbusd") == tiles_c
    assert ops.count("tileloadd") == tiles_a + tiles_b
    assert "tilestored" not in ops and "ldtilecfg" not in ops and not any("call" in x for x in loop)
    assert asm.count("tilestored") == tiles_c and "ldtilecfg" in asm and "tilerelease" in asm


@pytest.mark.parametrize("prefetch", [1, 2])
def test_the_kernel_prefetches_the_next_rows_of_its_tiles(prefetch):
    """``prefetch=1``: one prefetcht0 per row of each A tile each step (16 per tile), 64 bytes
    further along K; ``2``: also per row of each B tile, 16 rows further down. The loop keeps
    its tiles in registers as without, and spills nothing."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mr, nr = 32, 32
    ir = cpu_amx.amx_kernel_ir(mr, nr, prefetch)
    assert cpu_amx.amx_kernel_name(mr, nr, prefetch) == f"tilecraft_amx_u8s8s32_32x32_pf{prefetch}"
    mod = llvm.parse_assembly(ir)
    mod.verify()
    tm = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(cpu="sapphirerapids", opt=2)
    loop = hot_loop(tm.emit_assembly(mod), "tdpbusd")
    ops = [x.split()[0] for x in loop]
    assert ops.count("tdpbusd") == 4 and ops.count("tileloadd") == 4 and "tilestored" not in ops
    assert ops.count("prefetcht0") == 16 * (2 if prefetch == 1 else 4)
    # nothing spilled in the loop (with both prefetches the loop bound is read from the stack)
    assert not any(re.search(r",\s*-?\d*\(%rsp", x) for x in loop)


@pytest.mark.parametrize("tile", cpu_amx.AMX_TILES)
def test_the_kept_config_kernel_loads_the_configuration_only_where_it_differs(tile):
    """``keep_config``: the loop as LLVM's own (one tileload per A and B tile, one tdpbusd per C
    tile, C in tiles 0-3, A 4-5, B 6-7); no tilerelease; ``ldtilecfg`` only in the configure
    routine, behind a ``sttilecfg`` of the thread's current configuration and a compare with the
    kernel's (palette 1, tiles 0-7 of 16 rows × 64 bytes)."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mr, nr = tile
    assert cpu_amx.amx_kernel_name(mr, nr, 0, True) == f"tilecraft_amx_u8s8s32_{mr}x{nr}_kc"
    mod = llvm.parse_assembly(cpu_amx.amx_kernel_ir(mr, nr, keep_config=True))
    mod.verify()
    tm = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(cpu="sapphirerapids", opt=2)
    asm = tm.emit_assembly(mod)
    loop = hot_loop(asm, "tdpbusd")
    ops = [x.split()[0] for x in loop]
    tiles_c, tiles_a, tiles_b = mr * nr // 256, mr // 16, nr // 16
    assert ops.count("tdpbusd") == tiles_c and ops.count("tileloadd") == tiles_a + tiles_b
    assert "tilestored" not in ops and "ldtilecfg" not in ops and not any("call" in x for x in loop)
    used = set(re.findall(r"%tmm(\d)", "\n".join(loop)))
    assert used == {str(t) for t in [2 * i + j for i in range(tiles_a) for j in range(tiles_b)]
                    + [4 + i for i in range(tiles_a)] + [6 + j for j in range(tiles_b)]}
    assert "tilerelease" not in asm and asm.count("tilestored") == tiles_c
    configure = asm[asm.index("tilecraft_amx_configure:"):]
    assert asm.count("ldtilecfg") == 1 and configure.index("sttilecfg") < configure.index("ldtilecfg")
    cfg = cpu_amx._CONFIG_BYTES
    assert len(cfg) == 64 and cfg[0] == 1 and not any(cfg[1:16])
    assert [int.from_bytes(cfg[16 + 2 * t:18 + 2 * t], "little") for t in range(16)] == [64] * 8 + [0] * 8
    assert list(cfg[48:64]) == [16] * 8 + [0] * 8


def _amx_kernel_module(mr, nr, kc, keep_config, target):
    """``C[mr, nr] = a · b`` over ``kc`` by one call of the AMX kernel (tensorized, linked)."""
    from tilecraft import te
    a = te.placeholder((mr, kc), "uint8", name="a")
    b = te.placeholder((kc // 4, nr, 4), "int8", name="b")
    k4 = te.reduce_axis((0, kc // 4), name="k4")
    kb = te.reduce_axis((0, 4), name="kb")
    C = te.compute((mr, nr), lambda i, j: te.sum(a[i, k4 * 4 + kb].astype("int32") * b[k4, j, kb].astype("int32"),
                                                 axis=[k4, kb]), name="C")
    s = te.create_schedule(C.op)
    s[C].tensorize(s[C].op.axis[0], cpu_amx.gemm_u8s8s32_amx(mr, nr, kc, keep_config=keep_config))
    s[C].pragma(s[C].op.axis[0], "import_llvm", cpu_amx.amx_kernel_ir(mr, nr, 0, keep_config))
    return tc.build(s, [a, b, C], target=target)


def test_the_kept_config_kernel_builds_for_sapphire_rapids():
    asm = _amx_kernel_module(32, 32, 128, True, SPR).get_source("asm")
    assert "tilecraft_amx_u8s8s32_32x32_kc" in asm and "sttilecfg" in asm and "tilerelease" not in asm


@pytest.mark.skipif(not HOST_AMX, reason="this CPU has no AMX (amx-int8): the tile code cannot run here")
def test_the_kept_config_kernel_runs_exactly_after_the_released_one(rng):
    """Kept, released (LLVM's kernel: the tiles back to their initial state), kept again: each
    call exact on poisoned outputs (the second kept call must load the configuration again)."""
    mr, nr, kc = 32, 32, 192
    a = rng.integers(0, 256, (mr, kc)).astype("uint8")
    b = rng.integers(-128, 128, (kc // 4, nr, 4)).astype("int8")
    a[0, :4], b[0, 0, :] = 255, -128
    want = np.einsum("ik,kj->ij", a.astype(np.int64), b.transpose(0, 2, 1).reshape(kc, nr).astype(np.int64))
    kept, released = (_amx_kernel_module(mr, nr, kc, keep, "llvm") for keep in (True, False))
    for mod in (kept, released, kept):
        c = np.full((mr, nr), -12345, "int32")
        mod(a, b, c)
        np.testing.assert_array_equal(c, want)


def test_the_kernel_refuses_other_blocks():
    with pytest.raises(ValueError, match=r"gemm_u8s8s32_amx\(48, 16, 64\): the C block is one of 32 × 32"):
        cpu_amx.gemm_u8s8s32_amx(48, 16, 64)
    with pytest.raises(ValueError, match=r"gemm_u8s8s32_amx\(32, 32, 96\): kc must be a positive multiple of 64"):
        cpu_amx.gemm_u8s8s32_amx(32, 32, 96)
    with pytest.raises(ValueError, match=r"gemm_u8s8s32_amx\(32, 32, 64\): prefetch is one of \(0, 1, 2\), got 3"):
        cpu_amx.gemm_u8s8s32_amx(32, 32, 64, prefetch=3)
    with pytest.raises(ValueError, match=r"the AMX micro-kernel's prefetch is one of \(0, 1, 2\), got 4"):
        cpu_amx.amx_kernel_ir(32, 32, 4)


def check_passes(s, args, inputs, reference):
    """The lowered-IR interpreter after every pass, exactly (conftest's ``check_passes``, which
    the test modules cannot import by name); nothing is built or run."""
    from tilecraft.interp_lowered import PassChecker

    arrays = [inputs.get(t) for t in args]
    expected = {k: reference[t] for k, t in enumerate(args) if t not in inputs}
    checker = PassChecker(arrays, expected, rtol=0, atol=0, budget=None)
    tc.lower(s, args, name="f", target=SPR, after_pass=checker)
    return checker


def _amx_config(task, rng, kc=None):
    space = task.config_space
    for i in rng.permutation(len(space)):
        c = space.get(space.valid_index(int(i)))
        if c["amx_tile"].val[0] and (kc is None or c["kc"].val == kc):
            return c
    raise AssertionError("no AMX config in the space")


def test_dense_int8_chooses_amx_from_the_target():
    task = autotune.task.create("topi/dense_int8.llvm", args=(64, 64, 256), target=SPR)
    assert set(task.config_space.space_map["amx_tile"].entities[i].val
               for i in range(len(task.config_space.space_map["amx_tile"].entities))) == set(cpu_amx.AMX_TILES) | {(0, 0)}
    with tc.target.Target(SPR):
        with pytest.warns(UserWarning, match="fallback configuration"):
            s, args = task.func(*task.args)
    asm = tc.build(s, args, target=SPR).get_source("asm")
    assert "tdpbusd" in asm and "tileloadd" in asm and "ldtilecfg" in asm
    # the untuned AMX config: the kept configuration, C zeroed, the next A and B rows prefetched
    assert "tilecraft_amx_u8s8s32_32x32_pf2_kc_z" in asm and "tilezero" in asm and "prefetcht0" in asm
    other = autotune.task.create("topi/dense_int8.llvm", args=(64, 64, 256), target="llvm -mcpu=znver4")
    assert "amx_tile" not in other.config_space.space_map and "amx_prefetch" not in other.config_space.space_map


def test_dense_int8_links_the_prefetching_kernel_its_config_names():
    task = autotune.task.create("topi/dense_int8.llvm", args=(64, 64, 256), target=SPR)
    space = task.config_space
    configs = [c for c in space if c["amx_tile"].val[0]]
    assert {c["amx_prefetch"].val for c in configs} == {0, 1, 2}
    assert all(c["amx_prefetch"].val == 0 for c in space if not c["amx_tile"].val[0])
    cfg = next(c for c in configs if c["amx_prefetch"].val == 2)
    with tc.target.Target(SPR):
        s, args = task.instantiate(cfg)
    asm = tc.build(s, args, target=SPR).get_source("asm")
    assert "tdpbusd" in asm and "prefetcht0" in asm and "tilecraft_amx_u8s8s32_" in asm and "_pf2" in asm


def test_dense_int8_keeps_the_tile_configuration_where_asked():
    task = autotune.task.create("topi/dense_int8.llvm", args=(64, 64, 256, "NK", "kept"), target=SPR)
    cfg = next(c for c in task.config_space if c["amx_tile"].val[0] and c["amx_prefetch"].val == 1)
    with tc.target.Target(SPR):
        s, args = task.instantiate(cfg)
    asm = tc.build(s, args, target=SPR).get_source("asm")
    assert "tilecraft_amx_u8s8s32_" in asm and "_pf1_kc" in asm and "sttilecfg" in asm and "tilerelease" not in asm
    with pytest.raises(ValueError, match=r"topi/dense_int8.llvm: amx_config is 'call' or 'kept', got 'once'"):
        with tc.target.Target(SPR):
            task = autotune.task.create("topi/dense_int8.llvm", args=(64, 64, 256, "NK", "once"), target=SPR)
            task.instantiate(task.config_space.get(0))


@pytest.mark.parametrize("amx_config, amx_a", [("call", "rows"), ("kept", "rows"), ("kept", "panels"),
                                               ("call", "panels")])
def test_dense_int8_kept_or_not_is_exact_by_the_interpreter(rng, amx_config, amx_a):
    M, N, K = 32, 32, 128
    task = autotune.task.create("topi/dense_int8.llvm", args=(M, N, K, "NK", amx_config, amx_a), target=SPR)
    a, w = int8_inputs(rng, ((M, K), "u"), ((N, K), "s"))
    want = a.astype(np.int64) @ w.astype(np.int64).T
    with tc.target.Target(SPR):
        s, (d, wt, C) = task.instantiate(_amx_config(task, rng, 64))
    assert check_passes(s, [d, wt, C], {d: a, wt: w}, {C: want}).checked


def test_the_panel_kernel_loads_each_a_tile_as_one_contiguous_kb():
    """``a_panels``: A tiles 64 bytes a row, the second 1 KB after the first, the step's panel
    ``lda`` bytes after the last; the same loop otherwise (4 tile loads, 4 tdpbusd, no stores)."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    ir = cpu_amx.amx_kernel_ir(32, 32, 1, keep_config=True, a_panels=True)
    assert cpu_amx.amx_kernel_name(32, 32, 1, True, True) == "tilecraft_amx_u8s8s32_32x32_pf1_kc_pa"
    assert ir.count("@llvm.x86.tileloadd64(i8 4, ptr %ap0, i64 64)") == 1
    assert "%aoff1 = add i64 %abase, 1024" in ir and "%abase = mul i64 %apanel, %ldab" in ir
    assert "%pa0_0 = getelementptr i8, ptr %ap0, i64 %ldab" in ir      # the next panel's rows
    mod = llvm.parse_assembly(ir)
    mod.verify()
    tm = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(cpu="sapphirerapids", opt=2)
    ops = [x.split()[0] for x in hot_loop(tm.emit_assembly(mod), "tdpbusd")]
    assert ops.count("tdpbusd") == 4 and ops.count("tileloadd") == 4 and "tilestored" not in ops
    assert ops.count("prefetcht0") == 32


def test_dense_int8_packs_a_in_panels_where_asked():
    task = autotune.task.create("topi/dense_int8.llvm", args=(64, 64, 256, "NK", "kept", "panels"), target=SPR)
    cfg = next(c for c in task.config_space if c["amx_tile"].val == (32, 32) and c["kc"].val == 128)
    with tc.target.Target(SPR):
        s, args = task.instantiate(cfg)
    ir = str(tc.lower(s, args, target=SPR))
    assert "packedA" in ir and "_kc_pa" in ir
    with pytest.raises(ValueError, match=r"topi/dense_int8.llvm: amx_a is 'rows' or 'panels', got 'cols'"):
        with tc.target.Target(SPR):
            task = autotune.task.create("topi/dense_int8.llvm", args=(64, 64, 256, "NK", "kept", "cols"), target=SPR)
            task.instantiate(task.config_space.get(0))


@pytest.mark.skipif(not HOST_AMX, reason="this CPU has no AMX (amx-int8): the tile code cannot run here")
@pytest.mark.parametrize("amx_a", ["rows", "panels"])
def test_dense_int8_with_the_kept_configuration_runs_exactly(check_llvm, rng, amx_a):
    M, N, K = 96, 64, 320
    task = autotune.task.create("topi/dense_int8.llvm", args=(M, N, K, "NK", "kept", amx_a), target="llvm")
    a, w = int8_inputs(rng, ((M, K), "u"), ((N, K), "s"))
    a[0, :4], w[0, :4] = 255, -128
    want = a.astype(np.int64) @ w.astype(np.int64).T
    for _ in range(3):
        with tc.target.Target("llvm"):
            s, (d, wt, C) = task.instantiate(_amx_config(task, rng))
        check_llvm(s, [d, wt, C], {d: a, wt: w}, {C: want}, rtol=0, atol=0, passes=False)


@pytest.mark.parametrize("kc", [64, 128])       # the reduction split (reset + update) and whole (body)
def test_dense_int8_on_amx_is_exact_by_the_interpreter(rng, kc):
    M, N, K = 64, 32, 128
    task = autotune.task.create("topi/dense_int8.llvm", args=(M, N, K), target=SPR)
    a, w = int8_inputs(rng, ((M, K), "u"), ((N, K), "s"))
    want = a.astype(np.int64) @ w.astype(np.int64).T
    with tc.target.Target(SPR):
        s, (d, wt, C) = task.instantiate(_amx_config(task, rng, kc))
    assert check_passes(s, [d, wt, C], {d: a, wt: w}, {C: want}).checked


@pytest.mark.skipif(not HOST_AMX, reason="this CPU has no AMX (amx-int8): the tile code cannot run here")
def test_dense_int8_on_amx_runs_exactly(check_llvm, rng):
    M, N, K = 96, 64, 320
    task = autotune.task.create("topi/dense_int8.llvm", args=(M, N, K), target="llvm")
    a, w = int8_inputs(rng, ((M, K), "u"), ((N, K), "s"))
    a[0, :4], w[0, :4] = 255, -128
    want = a.astype(np.int64) @ w.astype(np.int64).T
    for _ in range(3):
        with tc.target.Target("llvm"):
            s, (d, wt, C) = task.instantiate(_amx_config(task, rng))
        check_llvm(s, [d, wt, C], {d: a, wt: w}, {C: want}, rtol=0, atol=0, passes=False)


# ------------------------------------------------------------------------------------------------
# conv2d NCHW[x]c on AMX

@pytest.mark.parametrize("reg_n, oc_bn, ic_bn, stride", [(28, 16, 64, 1), (14, 32, 128, 1), (8, 32, 64, 2)])
def test_the_conv_kernel_keeps_its_c_tiles_over_the_window(reg_n, oc_bn, ic_bn, stride):
    """One step per window position and 64 channels: A tiles of ``rows`` columns, B tiles of 16
    channels, one tdpbusd per C tile (the tile shapes in the configuration), nothing stored in
    the loop; C loaded before and stored after."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    rows, tm, tn = cpu_amx.amx_conv_tiles(reg_n, oc_bn)
    ir = cpu_amx.amx_conv_kernel_ir(reg_n, oc_bn, 3, 3, ic_bn, stride)
    assert f"tdpbusd.internal(i16 {rows}, i16 64, i16 64" in ir
    mod = llvm.parse_assembly(ir)
    mod.verify()
    tm_ = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(cpu="sapphirerapids", opt=2)
    asm = tm_.emit_assembly(mod)
    loop = hot_loop(asm, "tdpbusd")
    ops = [x.split()[0] for x in loop]
    assert ops.count("tdpbusd") == tm * tn and ops.count("tileloadd") == tm + tn
    assert "tilestored" not in ops and not any(re.search(r",\s*-?\d*\(%rsp", x) for x in loop)
    assert asm.count("tilestored") == tm * tn and "ldtilecfg" in asm and "tilerelease" in asm


def test_the_conv_kernel_refuses_other_tiles():
    assert cpu_amx.amx_conv_tiles(17, 16) is None and cpu_amx.amx_conv_tiles(8, 48) is None
    with pytest.raises(ValueError, match=r"conv_u8s8s32_amx\(17, 16, 3, 3, 64, 1\): the tile is 17 columns × 16 "
                                         r"channels; AMX takes 16 or 32 channels"):
        cpu_amx.conv_u8s8s32_amx(17, 16, 3, 3, 64)
    with pytest.raises(ValueError, match=r"conv_u8s8s32_amx\(16, 16, 3, 3, 32, 1\): ic_bn must be a positive "
                                         r"multiple of 64"):
        cpu_amx.conv_u8s8s32_amx(16, 16, 3, 3, 32)
    with pytest.raises(ValueError, match=r"the AMX conv micro-kernel needs oc_bn 16 or 32"):
        cpu_amx.amx_conv_kernel_ir(16, 48, 3, 3, 64)


def _amx_conv_config(task, rng, ic_bn=None):
    space = task.config_space
    for i in rng.permutation(len(space)):
        c = space.get(space.valid_index(int(i)))
        if c["amx"].val and (ic_bn is None or c["tile_ic"].size[-1] == ic_bn):
            return c
    raise AssertionError("no AMX config in the space")


CONV_AMX = (1, 64, 5, 14, 32, 3, 3, 1, 1)      # CI = 64: one 64-channel block; OW = 14


def test_conv2d_int8_chooses_amx_from_the_target(rng):
    task = autotune.task.create("topi/conv2d_nchwc_int8.llvm", args=CONV_AMX, target=SPR)
    amx = [c for c in task.config_space if c["amx"].val]
    assert amx and all(c["tile_ic"].size[-1] % 64 == 0 and c["tile_oc"].size[-1] in (16, 32) for c in amx)
    assert {c["tile_ow"].size[-1] for c in amx} == {1, 2, 7, 14}
    with tc.target.Target(SPR):
        s, args = task.instantiate(_amx_conv_config(task, rng))
    asm = tc.build(s, args, target=SPR).get_source("asm")
    assert "tdpbusd" in asm and "tilecraft_amx_conv_u8s8s32_" in asm
    other = autotune.task.create("topi/conv2d_nchwc_int8.llvm", args=CONV_AMX, target="llvm -mcpu=znver4")
    assert "amx" not in other.config_space.space_map
    few = autotune.task.create("topi/conv2d_nchwc_int8.llvm", args=(1, 32, 5, 14, 32, 3, 3, 1, 1), target=SPR)
    assert "amx" not in few.config_space.space_map          # CI = 32: no 64-channel block


@pytest.mark.parametrize("shape", [CONV_AMX, (1, 128, 4, 7, 20, 3, 3, 1, 1)], ids=["body", "reset_update"])
def test_conv2d_int8_on_amx_is_exact_by_the_interpreter(rng, shape):
    """One 64-channel block (the intrinsic's body), and two (reset, then update per block; 20
    filters: the last channel block padded with zero filters)."""
    from test_microkernels import conv_ref
    N, CI, H, W, CO, KH, KW, stride, pad = shape
    task = autotune.task.create("topi/conv2d_nchwc_int8.llvm", args=shape, target=SPR)
    x, w = int8_inputs(rng, ((N, CI, H, W), "u"), ((CO, CI, KH, KW), "s"))
    want = conv_ref(x, w, stride, pad).astype(np.int64)
    with tc.target.Target(SPR):
        s, (data, kernel, out) = task.instantiate(_amx_conv_config(task, rng, ic_bn=64))
    assert check_passes(s, [data, kernel, out], {data: x, kernel: w}, {out: want}).checked


@pytest.mark.parametrize("reg_n, oc_bn, ic_bn, stride", [(28, 16, 64, 1), (14, 32, 128, 1), (8, 32, 64, 2)])
def test_the_kept_config_conv_kernel_configures_its_row_counts(reg_n, oc_bn, ic_bn, stride):
    """``keep_config``: the conv kernel's loop on named tiles as LLVM's; its configuration gives
    the C and A tiles the tile's ``rows`` (B 16); no tilerelease; ldtilecfg behind the compare."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    rows, tm, tn = cpu_amx.amx_conv_tiles(reg_n, oc_bn)
    ir = cpu_amx.amx_conv_kernel_ir(reg_n, oc_bn, 3, 3, ic_bn, stride, keep_config=True)
    assert cpu_amx.amx_conv_kernel_name(reg_n, oc_bn, 3, 3, ic_bn, stride, True).endswith("_kc")
    cfg = cpu_amx.config_bytes(rows)
    assert list(cfg[48:56]) == [rows] * 6 + [16, 16] and "".join(f"\\{b:02X}" for b in cfg) in ir
    mod = llvm.parse_assembly(ir)
    mod.verify()
    tm_ = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(cpu="sapphirerapids", opt=2)
    asm = tm_.emit_assembly(mod)
    ops = [x.split()[0] for x in hot_loop(asm, "tdpbusd")]
    assert ops.count("tdpbusd") == tm * tn and ops.count("tileloadd") == tm + tn and "tilestored" not in ops
    assert "tilerelease" not in asm and asm.count("ldtilecfg") == 1 and asm.count("tilestored") == tm * tn


@pytest.mark.parametrize("amx_config", ["call", "kept"])
def test_conv2d_int8_kept_or_not_is_exact_by_the_interpreter(rng, amx_config):
    from test_microkernels import conv_ref
    shape = (1, 128, 4, 7, 20, 3, 3, 1, 1)
    N, CI, H, W, CO, KH, KW, stride, pad = shape
    task = autotune.task.create("topi/conv2d_nchwc_int8.llvm", args=shape + (amx_config,), target=SPR)
    x, w = int8_inputs(rng, ((N, CI, H, W), "u"), ((CO, CI, KH, KW), "s"))
    want = conv_ref(x, w, stride, pad).astype(np.int64)
    with tc.target.Target(SPR):
        s, (data, kernel, out) = task.instantiate(_amx_conv_config(task, rng, ic_bn=64))
        asm = tc.build(s, [data, kernel, out], target=SPR).get_source("asm")
    assert ("sttilecfg" in asm) == (amx_config == "kept")
    assert check_passes(s, [data, kernel, out], {data: x, kernel: w}, {out: want}).checked
    with pytest.raises(ValueError, match=r"topi/conv2d_nchwc_int8.llvm: amx_config is 'call' or 'kept', got 'x'"):
        with tc.target.Target(SPR):
            bad = autotune.task.create("topi/conv2d_nchwc_int8.llvm", args=shape + ("x",), target=SPR)
            bad.instantiate(bad.config_space.get(0))


@pytest.mark.skipif(not HOST_AMX, reason="this CPU has no AMX (amx-int8): the tile code cannot run here")
@pytest.mark.parametrize("amx_config", ["call", "kept"])
def test_conv2d_int8_on_amx_runs_exactly(check_llvm, rng, amx_config):
    from test_microkernels import conv_ref
    for shape in (CONV_AMX, (1, 128, 6, 9, 48, 3, 3, 2, 1)):
        N, CI, H, W, CO, KH, KW, stride, pad = shape
        task = autotune.task.create("topi/conv2d_nchwc_int8.llvm", args=shape + (amx_config,), target="llvm")
        x, w = int8_inputs(rng, ((N, CI, H, W), "u"), ((CO, CI, KH, KW), "s"))
        x[0, :4, 1, 1], w[0, :4, 1, 1] = 255, -128
        want = conv_ref(x, w, stride, pad).astype(np.int64)
        for _ in range(3):
            with tc.target.Target("llvm"):
                s, (data, kernel, out) = task.instantiate(_amx_conv_config(task, rng))
            check_llvm(s, [data, kernel, out], {data: x, kernel: w}, {out: want}, rtol=0, atol=0, passes=False)


# ------------------------------------------------------------------------------------------------
# C tiles zeroed in the tile registers (zero_c / amx_c="zeroed")

@pytest.mark.parametrize("keep_config", [False, True])
@pytest.mark.parametrize("tile", cpu_amx.AMX_TILES)
def test_the_zeroing_twin_starts_from_tilezero_and_never_reads_c(tile, keep_config):
    """``amx_kernel_ir(..., zero_c=True)`` defines the kernel and its ``_z`` twin: the twin
    zeroes its C tiles (one ``tilezero`` each, before the loop) instead of loading them, and
    stores them once after the loop; the loop is the kernel's."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mr, nr = tile
    tiles_c, tiles_a, tiles_b = mr * nr // 256, mr // 16, nr // 16
    ir = cpu_amx.amx_kernel_ir(mr, nr, 0, keep_config, zero_c=True)
    name = cpu_amx.amx_kernel_name(mr, nr, 0, keep_config)
    assert cpu_amx.amx_kernel_name(mr, nr, 0, keep_config, zeroed=True) == name + "_z"
    assert f"define void @{name}(" in ir and f"define void @{name}_z(" in ir
    assert f"@{name}_z(" not in cpu_amx.amx_kernel_ir(mr, nr, 0, keep_config)
    mod = llvm.parse_assembly(ir)
    mod.verify()
    tm = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(cpu="sapphirerapids", opt=2)
    asm = tm.emit_assembly(mod)
    twin = asm[asm.index(f"{name}_z:"):]
    twin = twin[:twin.index(".Lfunc_end")]
    ops = [x.split()[0] for x in twin.splitlines() if x.startswith("\t") and not x.startswith("\t.")]
    assert ops.count("tilezero") == tiles_c and ops.count("tilestored") == tiles_c
    assert ops.count("tileloadd") == tiles_a + tiles_b          # the loop's A and B tiles only
    loop = [x.split()[0] for x in hot_loop(twin, "tdpbusd")]
    assert loop.count("tdpbusd") == tiles_c and "tilezero" not in loop and "tilestored" not in loop


def test_the_zeroing_intrinsic_has_no_reset():
    mk = cpu_amx.gemm_u8s8s32_amx(32, 32, 128, keep_config=True, zero_c=True)
    assert mk.name == "gemm_u8s8s32_amx_32x32x128_kc_z" and mk.reduce_init is None
    assert '"tilecraft_amx_u8s8s32_32x32_kc_z"' in str(mk.body) and 'C.access_ptr("w"' in str(mk.body)
    assert '"tilecraft_amx_u8s8s32_32x32_kc"' in str(mk.reduce_update)


@pytest.mark.parametrize("amx_config", ["call", "kept"])
@pytest.mark.parametrize("kc", [64, 128])       # K in slices (body at the first, update after) and whole
def test_dense_int8_with_zeroed_c_is_exact_by_the_interpreter(rng, amx_config, kc):
    """The default ``amx_c="zeroed"``: no reset in the lowered IR, the zeroing kernel called at
    the first K slice of each C block and the accumulating one after; exact after every pass."""
    M, N, K = 64, 32, 128
    task = autotune.task.create("topi/dense_int8.llvm", args=(M, N, K, "NK", amx_config), target=SPR)
    a, w = int8_inputs(rng, ((M, K), "u"), ((N, K), "s"))
    a[0, :4], w[0, :4] = 255, -128
    want = a.astype(np.int64) @ w.astype(np.int64).T
    with tc.target.Target(SPR):
        s, (d, wt, C) = task.instantiate(_amx_config(task, rng, kc))
    text = str(tc.lower(s, [d, wt, C], target=SPR))
    assert "'reset'" not in text and '_z"' in text and ('_kc_z"' in text) == (amx_config == "kept")
    assert ("'update'" in text) == (kc < K)
    assert check_passes(s, [d, wt, C], {d: a, wt: w}, {C: want}).checked
    asm = tc.build(s, [d, wt, C], target=SPR).get_source("asm")
    assert "tilezero" in asm


def test_dense_int8_loads_zeroed_c_where_asked():
    task = autotune.task.create("topi/dense_int8.llvm", args=(64, 32, 128, "NK", "kept", "rows", "loaded"),
                                target=SPR)
    cfg = next(c for c in task.config_space if c["amx_tile"].val == (32, 32) and c["kc"].val == 64)
    with tc.target.Target(SPR):
        s, args = task.instantiate(cfg)
    text = str(tc.lower(s, args, target=SPR))
    assert "'reset'" in text and "_z" not in text
    with pytest.raises(ValueError, match=r"topi/dense_int8.llvm: amx_c is 'zeroed' or 'loaded', got 'zero'"):
        with tc.target.Target(SPR):
            task = autotune.task.create("topi/dense_int8.llvm", args=(64, 32, 128, "NK", "kept", "rows", "zero"),
                                        target=SPR)
            task.instantiate(task.config_space.get(0))


@pytest.mark.skipif(not HOST_AMX, reason="this CPU has no AMX (amx-int8): the tile code cannot run here")
@pytest.mark.parametrize("amx_config", ["call", "kept"])
@pytest.mark.parametrize("kc", [64, 256])       # K in slices (the twin, then the kernel) and whole (the twin)
def test_dense_int8_with_zeroed_c_runs_exactly(check_llvm, rng, amx_config, kc):
    M, N, K = 96, 64, 256
    task = autotune.task.create("topi/dense_int8.llvm", args=(M, N, K, "NK", amx_config), target="llvm")
    a, w = int8_inputs(rng, ((M, K), "u"), ((N, K), "s"))
    a[0, :4], w[0, :4] = 255, -128
    want = a.astype(np.int64) @ w.astype(np.int64).T
    with tc.target.Target("llvm"):
        s, (d, wt, C) = task.instantiate(_amx_config(task, rng, kc))
    check_llvm(s, [d, wt, C], {d: a, wt: w}, {C: want}, rtol=0, atol=0, passes=False)


@pytest.mark.parametrize("kc", [64, 128])
def test_dense_int8_on_amx_requantized_is_exact_by_the_interpreter(rng, kc):
    """AMX tiles into the int32 block buffer, then PyTorch's requantization to uint8."""
    M, N, K = 64, 64, 128
    task = autotune.task.create("topi/dense_int8.llvm", args=(M, N, K, "NK", "kept", "rows", "zeroed", 1 / 512, 7),
                                target=SPR)
    a, w = int8_inputs(rng, ((M, K), "u"), ((N, K), "s"))
    acc = a.astype(np.int64) @ w.astype(np.int64).T
    want = np.clip(np.rint(acc.astype(np.float32) * np.float32(1 / 512)) + 7, 0, 255).astype("uint8")
    with tc.target.Target(SPR):
        s, (d, wt, C) = task.instantiate(_amx_config(task, rng, kc))
    assert check_passes(s, [d, wt, C], {d: a, wt: w}, {C: want}).checked
    assert "tilezero" in tc.build(s, [d, wt, C], target=SPR).get_source("asm")
