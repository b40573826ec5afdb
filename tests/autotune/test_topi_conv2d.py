"""topi/conv2d_nchw.llvm (the NCHW[x]c schedule): differential tests against numpy on random
inputs with NaN-poisoned outputs, through the fallback and explicit configurations; the config
space keeps only register tiles that fit; the hot loop is broadcast + FMA on vector registers."""
import re
import warnings

import numpy as np
import pytest

import tilecraft
import tilecraft.autotune as autotune
import tilecraft.topi.conv2d as topi_conv2d
from tilecraft.target import Target
from test_autotune_topi import _np_conv2d

NAME = "topi/conv2d_nchw.llvm"

# (N, CI, H, W, CO, KH, KW, stride, padding)
SHAPES = [
    (1, 16, 14, 14, 32, 3, 3, 1, 1),     # channels divisible by the blocks
    (1, 8, 15, 13, 16, 3, 3, 2, 0),      # stride 2, no padding, odd sizes
    (2, 3, 11, 9, 12, 3, 3, 1, 1),       # CI = 3 (one block of 3), CO = 12 (padded to a block), batch 2
    (1, 24, 9, 10, 20, 1, 1, 1, 0),      # 1x1 kernel, channels not divisible by 16
    (1, 6, 10, 12, 5, 5, 3, 2, 2),       # rectangular kernel, stride 2 with padding, CO < one vector
]


def _ids(shapes):
    return ["x".join(map(str, s)) for s in shapes]


def _inputs(shape, seed=0):
    N, CI, H, W, CO, KH, KW, stride, pad = shape
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (N, CI, H, W)).astype("float32")
    w = rng.uniform(-1, 1, (CO, CI, KH, KW)).astype("float32")
    return x, w, _np_conv2d(x, w, stride, pad)


def _run(sch, args, x, w, ref):
    mod = tilecraft.build(sch, args, target="llvm")
    out = np.full(ref.shape, np.nan, "float32")          # poisoned: every element must be written
    mod(x, w, out)
    tilecraft.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    return mod


def _knobs(cfg):
    return (cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1], cfg["tile_ow"].size[-1], cfg["unroll_kw"].val,
            cfg["ic_outer"].val)


def _fallback_schedule(shape):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                   # "no tuned configuration: fallback"
        with Target("llvm"):
            return topi_conv2d.conv2d_nchw(*shape, "float32")


@pytest.mark.parametrize("shape", SHAPES, ids=_ids(SHAPES))
def test_fallback_matches_numpy(shape):
    x, w, ref = _inputs(shape)
    sch, args = _fallback_schedule(shape)
    assert [t.name for t in args] == ["data", "kernel", "conv"]
    stages = {st.op.name for st in sch.stages}
    assert {"data_vec", "kernel_vec", "conv_NCHWc"} <= stages     # the fallback is the packed schedule too
    _run(sch, args, x, w, ref)


def _some_configs(space):
    """Per tile_oc, the widest register tile with unroll_kw, ic_outer alternating; the widest
    without unroll_kw (both ic_outer); the smallest input-channel block."""
    configs = [space.get(space.valid_index(i)) for i in range(len(space))]
    ocs = sorted({_knobs(c)[1] for c in configs})
    widest = {}
    for cfg in configs:
        ic, oc, ow, unroll, ic_outer = _knobs(cfg)
        if unroll and ic_outer == (ocs.index(oc) % 2 == 1) and (oc not in widest or ow > _knobs(widest[oc])[2]):
            widest[oc] = cfg
    picked = list(widest.values())
    for ic_outer in (False, True):
        picked.append(max((c for c in configs if not _knobs(c)[3] and _knobs(c)[4] == ic_outer),
                          key=lambda c: _knobs(c)[2]))
    picked.append(min(configs, key=lambda c: _knobs(c)[0]))
    return list({c.index: c for c in picked}.values())


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=_ids(SHAPES))
def test_explicit_configs_match_numpy(shape):
    x, w, ref = _inputs(shape, seed=1)
    task = autotune.task.create(NAME, args=shape + ("float32",), target="llvm")
    for cfg in _some_configs(task.config_space):
        sch, args = task.instantiate(cfg)
        _run(sch, args, x, w, ref)


def test_config_space_keeps_register_tiles_that_fit():
    lanes, nregs = topi_conv2d.vector_registers()
    task = autotune.task.create(NAME, args=(1, 64, 56, 56, 64, 3, 3, 1, 1, "float32"), target="llvm")
    space = task.config_space
    # small enough to tune in a few hundred trials: 160 configs on AVX2 (16 registers), 260 on
    # AVX-512, whose 32 registers admit wider register tiles
    assert 16 <= len(space) <= (256 if nregs == 16 else 320)
    seen = set()
    for i in range(len(space)):
        ic, oc, ow, unroll, ic_outer = _knobs(space.get(space.valid_index(i)))
        seen.add((ic, oc, ow, unroll, ic_outer))
        vecs = oc // lanes
        assert oc % lanes == 0 and 64 % ic == 0 and 56 % ow == 0
        assert ow * vecs + vecs + 1 <= nregs                      # accumulators + a kernel row + a broadcast
        assert ow * vecs >= 4                                     # enough independent FMA chains
    assert (16, 2 * lanes, max(ow for _, o, ow, _, _ in seen if o == 2 * lanes), True, True) in seen   # the fallback


def test_explicit_config_on_the_resnet_layer_matches_numpy():
    """The benchmark's layer with a tile the tuner is expected to like."""
    shape = (1, 64, 56, 56, 64, 3, 3, 1, 1)
    x, w, ref = _inputs(shape, seed=2)
    task = autotune.task.create(NAME, args=shape + ("float32",), target="llvm")
    space = task.config_space
    lanes, _ = topi_conv2d.vector_registers()
    cfg = next(c for c in (space.get(space.valid_index(i)) for i in range(len(space)))
               if _knobs(c)[:2] == (16, 2 * lanes))
    sch, args = task.instantiate(cfg)
    _run(sch, args, x, w, ref)


def _hot_block(asm: str) -> list[str]:
    """The instructions of the basic block (between labels and jumps) with the most FMAs."""
    blocks, cur = [], []
    for line in asm.splitlines():
        if re.match(r"^\.?[A-Za-z_$.][\w$.]*:", line):
            blocks.append(cur)
            cur = []
        elif line.startswith("\t") and not line.startswith("\t."):
            cur.append(line.strip())
            if cur[-1].startswith("j"):
                blocks.append(cur)
                cur = []
    blocks.append(cur)
    return max(blocks, key=lambda b: sum("vfmadd" in i for i in b))


def test_inner_loop_is_broadcast_fma_on_full_vector_registers_without_spills():
    """On AVX-512 the FMAs use zmm registers, on AVX2 + FMA ymm registers (the template's
    register tile follows the host, see ``vector_registers``)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    feats = llvm.get_host_cpu_features()
    if feats.get("avx512f"):
        reg = "%zmm"
    elif feats.get("avx2") and feats.get("fma"):
        reg = "%ymm"
    else:
        pytest.skip("checks x86 AVX2 + FMA or AVX-512 code")
    sch, args = _fallback_schedule((1, 64, 56, 56, 64, 3, 3, 1, 1))
    asm = tilecraft.build(sch, args, target="llvm").get_source("asm")
    hot = _hot_block(asm)
    fmas = [i for i in hot if i.startswith("vfmadd")]
    assert len(fmas) >= 8
    assert all(reg in i and "%xmm" not in i for i in fmas)               # full-width vectors, no scalar FMAs
    assert any(i.startswith("vbroadcastss") for i in hot)
    assert not [i for i in hot if reg in i and ("(%rsp)" in i or "(%rbp)" in i)]     # no vector spills
    assert not [i for i in hot if re.match(r"v(insert|extract)ps|vpextr|vmovss", i)]   # no per-lane code
