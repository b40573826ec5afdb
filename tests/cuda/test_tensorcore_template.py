"""The tensor-core GEMM template (``topi/tensorcore_template.py``, ``topi/matmul_tensorcore.cuda``):
its fallback and random configurations of its space, each lowered for CUDA, run in the emulator
on fresh random inputs with the output poisoned, compared with float64 numpy (int8 exactly) and
compiled by nvcc for sm_90; the space's filter against the GPU's limits; the CLI lists it.
"""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
import tilecraft.autotune as autotune
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.topi import tensorcore_template as TT

from .test_tensorcore import _kind_inputs, _nvcc, _poisoned, _rel_err

pytestmark = pytest.mark.cuda

CASES = [
    # template arguments (M, N, K, dtype, out_dtype, layout_b), configs sampled
    ((128, 64, 96, "float16", "float16", "row_major"), 3),
    ((64, 128, 128, "int8", "int32", "col_major"), 2),
    ((64, 64, 64, "float32", "float32", "col_major"), 1),
]


def _configs(task, rng, n):
    return [None] + [task.config_space.get(i) for i in task.config_space.sample_ints(n, rng)]


@pytest.mark.parametrize("args,n", CASES, ids=[f"{a[3]}-{a[4]}-{a[5]}" for a, _ in CASES])
def test_template_configs_emulated_and_compiled(args, n, rng):
    M, N, K, dtype, out_dtype, layout_b = args
    task = autotune.task.create("topi/matmul_tensorcore.cuda", args=args, target="cuda")
    assert len(task.config_space) > 1
    for cfg in _configs(task, rng, n):
        with tc.target.Target("cuda"):
            if cfg is None:
                with pytest.warns(UserWarning, match="fallback configuration"):
                    s, (A, B, C) = task.func(*task.args)
            else:
                s, (A, B, C) = task.instantiate(cfg)
        func = tc.lower(s, [A, B, C], target="cuda")
        a, bt, ref = _kind_inputs(rng, dtype, M, N, K)          # B as (N, K)
        b = bt if layout_b == "col_major" else np.ascontiguousarray(bt.T)
        c = _poisoned(M, N, C.dtype)
        emulate(func, [a, b, c])
        what = f"config {cfg}"
        if dtype == "int8":
            np.testing.assert_array_equal(c, ref.astype("int64"), err_msg=what)
        else:
            assert not np.isnan(c).any(), f"{what}: elements of C were not written"
            assert _rel_err(c, ref) < (1e-3 if out_dtype == "float16" else 1e-6), what
        _nvcc(generate_cuda(func))


def test_space_respects_the_gpu_limits():
    task = autotune.task.create("topi/matmul_tensorcore.cuda", args=(4096, 4096, 4096, "float32", "float32",
                                                                     "col_major"), target="cuda")
    space = task.config_space
    seen_big = False
    for i in range(0, len(space), 7):
        c = space.get(space.valid_index(i))
        block, warp, chunk, stages = c["block"].val, c["warp"].val, c["chunk"].val, c["stages"].val
        assert TT.shared_bytes("float32", "col_major", block, warp, chunk, stages) <= TT.SHARED_LIMIT
        seen_big |= block == (4, 2) and warp == (4, 4)
    assert seen_big
    # 256 x 128 float32 tiles 32 deep in 4 stages: (256 + 128) x 36 x 4 x 4 bytes = 216 KiB fits; 64 deep does not
    assert TT.fits(4096, 4096, 4096, "float32", "col_major", (4, 2), (4, 4), 4, 4)
    assert not TT.fits(4096, 4096, 4096, "float32", "col_major", (4, 2), (4, 4), 8, 4)
    assert not TT.fits(4096, 4096, 4096, "float16", "row_major", (4, 2), (4, 4), 4, 3, raster=3)
    assert not TT.fits(4000, 4096, 4096, "float16", "row_major", (2, 2), (4, 4), 2, 3)


def test_cli_lists_the_template(capsys):
    from tilecraft.cli import main
    main(["templates"])
    assert "topi/matmul_tensorcore.cuda" in capsys.readouterr().out


def test_fragment_prefetch_knob(rng):
    """The knob is offered only where there is a pipeline of two or more k slices a step, and a
    configuration with it computes the GEMM (emulated on poisoned output, compiled)."""
    args = (128, 64, 96, "float16", "float16", "row_major")
    task = autotune.task.create("topi/matmul_tensorcore.cuda", args=args, target="cuda")
    space = task.config_space
    cfgs = [space.get(space.valid_index(i)) for i in range(len(space))]
    on = [c for c in cfgs if c["fragment_prefetch"].val]
    assert on and len(on) < len(cfgs)
    assert all(c["stages"].val > 0 and c["chunk"].val >= 2 for c in on)
    assert not TT.fits(4096, 4096, 4096, "float16", "row_major", (2, 2), (4, 4), 2, 0, fragment_prefetch=True)
    assert not TT.fits(4096, 4096, 4096, "float16", "row_major", (2, 2), (4, 4), 1, 3, fragment_prefetch=True)
    cfg = on[int(rng.integers(len(on)))]
    with tc.target.Target("cuda"):
        s, (A, B, C) = task.instantiate(cfg)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    assert "_next[" in src, f"config {cfg}: the pipeline was not rotated"
    a, bt, ref = _kind_inputs(rng, "float16", 128, 64, 96)
    c = _poisoned(128, 64, "float16")
    emulate(func, [a, np.ascontiguousarray(bt.T), c])
    assert not np.isnan(c).any() and _rel_err(c, ref) < 1e-3, f"config {cfg}"
    _nvcc(src)
