"""The fp32 CUDA conv2d template's register tile at large batches (topi/conv2d_cuda.py): up to 64
accumulators a thread (channels × pixels × images) where the block's registers allow it.

A 64-accumulator configuration (8 channels × 2 pixels × 4 images a thread) chosen from the
template's space runs in the emulator on fresh inputs with the output poisoned, against numpy,
and compiles for sm_90; the filter refuses tiles whose block would spill (threads × (accumulators
+ 24) over 65536 registers) and more than 64 accumulators.
"""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
import tilecraft.autotune as autotune
import tilecraft.topi  # noqa: F401  (registers the templates)
from tilecraft.topi.conv2d_cuda import MAX_ACCUMULATORS, conv_tiles_ok

from .test_cuda_export import _check_emulated_conv, needs_nvcc

pytestmark = pytest.mark.cuda


def test_filter_admits_64_accumulators_within_the_register_file():
    # ResNet-50's 256@14 at batch 32: 8 channels x 2 pixels x 4 images a thread
    layer = (256, 14, 14, 256, 3, 3)
    kw = dict(cpt=8, ci_tile=8, xpt=2, n_per_block=4, N=32)
    assert conv_tiles_ok(*layer, tile_co=64, tile_y=7, tile_x=14, **kw)        # 392 threads x 88 registers
    assert conv_tiles_ok(*layer, tile_co=32, tile_y=7, tile_x=14, **kw)        # 196 threads
    assert not conv_tiles_ok(*layer, tile_co=64, tile_y=14, tile_x=14, **kw)   # 784 threads x 88: spills
    assert not conv_tiles_ok(*layer, tile_co=32, tile_y=7, tile_x=14, cpt=8, ci_tile=8, xpt=2, n_per_block=8,
                             N=32)                                             # 128 accumulators
    # what the filter admitted before (at most 32 accumulators, up to 1024 threads) it still admits
    assert conv_tiles_ok(256, 16, 16, 256, 3, 3, tile_co=32, tile_y=16, tile_x=16, cpt=8, ci_tile=4, xpt=4,
                         n_per_block=1, N=1)                                   # 256 threads x 32
    assert conv_tiles_ok(64, 32, 32, 64, 3, 3, tile_co=4, tile_y=16, tile_x=32, cpt=2, ci_tile=4, xpt=1,
                         n_per_block=2, N=2)                                   # 1024 threads x 4


@needs_nvcc
def test_template_config_of_64_accumulators(rng):
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.cuda_compile import compile_cuda
    task = autotune.task.create("topi/conv2d_nchw.cuda", args=(4, 8, 6, 6, 16, 3, 3, 1, 1, "float32"),
                                target="cuda")
    space = task.config_space
    big = []
    for i in range(len(space)):
        cfg = space.get(space.valid_index(i))
        v = {k: cfg[k].val for k in ("co_per_thread", "x_per_thread", "n_per_block")}
        if v["co_per_thread"] * v["x_per_thread"] * v["n_per_block"] == MAX_ACCUMULATORS:
            big.append(cfg)
    assert big, "the space has no configuration of 64 accumulators a thread"
    cfg = big[int(rng.integers(len(big)))]
    sch, args = task.instantiate(cfg)
    f = tilecraft.lower(sch, args, target="cuda")
    _check_emulated_conv(f, rng, 8, 16, 6, err_msg=str(cfg), n=4)
    assert compile_cuda(generate_cuda(f), "sm_90")
