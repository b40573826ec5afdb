"""CUDA modules written by ``export_library`` and read by ``load_module``; the tuner's builder and
runner on CUDA tasks (reference = the naive GPU schedule); the CUDA tuning templates.

Writing and reading the archive needs nvcc only; running the loaded kernels needs a GPU (those
tests skip without one, and run on the device machine).
"""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest

import tilecraft
import tilecraft.autotune as autotune
import tilecraft.topi  # noqa: F401  (registers the templates)
from tilecraft.topi import cuda_schedules as cs
from tilecraft.codegen.cuda_compile import find_nvcc
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.runtime.cuda_runtime import CUDAModule, plan_of

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is absent")


def _needs_gpu():
    why = gpu_available()
    if why:
        pytest.skip(why)


def _conv_ref(d, w, stride=1):
    """NCHW convolution, 3×3, pad 1, in numpy (float64 sums)."""
    h = d.shape[2]
    pad = np.pad(d, ((0, 0), (0, 0), (1, 1), (1, 1)))
    return sum(np.einsum("nchw,oc->nohw", pad[:, :, ry:ry + h:stride, rx:rx + h:stride], w[:, :, ry, rx])
               for ry in range(3) for rx in range(3))


def _check_emulated_conv(f, rng, ci, co, hw, stride=1, err_msg="", n=1):
    """Run the lowered 3×3 pad-1 conv ``f`` in the emulator on fresh random data (output poisoned
    with NaN) and compare it with numpy."""
    d = rng.uniform(-1, 1, (n, ci, hw, hw)).astype("float32")
    w = rng.uniform(-1, 1, (co, ci, 3, 3)).astype("float32")
    o = (hw - 1) // stride + 1
    out = np.full((n, co, o, o), np.nan, "float32")
    emulate(f, [d, w, out])
    np.testing.assert_allclose(out, _conv_ref(d, w, stride), rtol=1e-4, atol=1e-4, err_msg=err_msg)


def _build(make, target="cuda -arch=sm_90"):
    s, args = make()
    return tilecraft.build(s, args, target=target), args


@needs_nvcc
def test_export_then_load_keeps_everything(tmp_path):
    mod, _ = _build(lambda: cs.elementwise())             # symbolic n: grid and shapes are expressions
    path = mod.export_library(str(tmp_path / "ew.tcuda"))
    assert path == str(tmp_path / "ew.tcuda")
    with zipfile.ZipFile(path) as z:
        assert sorted(z.namelist()) == ["kernels.cu", "kernels.cubin", "manifest.json"]
        info = json.loads(z.read("manifest.json"))
    assert info["format"] == "tilecraft-cuda" and info["arch"] == "sm_90"
    assert info["entry"] == mod.entry_name
    grid = info["functions"][0]["kernels"][0]["grid"]
    assert any(isinstance(g, (list, str)) for g in grid)    # depends on n
    loaded = tilecraft.runtime.load_module(path)
    assert isinstance(loaded, CUDAModule) and loaded.funcs == {}
    assert loaded.plans == mod.plans
    assert loaded.cubin == mod.cubin and loaded.get_source() == mod.get_source()
    assert loaded.entry_name == mod.entry_name and loaded.arch == "sm_90"
    # exporting a loaded module writes the same archive content
    again = loaded.export_library(str(tmp_path / "again.tcuda"))
    assert tilecraft.runtime.load_module(again).plans == mod.plans


def test_plan_names_workspace_and_kernel_arguments():
    s, args = cs.conv2d_nchw(1, 8, 10, 10, 8, 3, 3, 1)
    plan = plan_of(tilecraft.lower(cs.naive(args[-1], 64), args, target="cuda"))
    assert [p.name for p in plan.signature.params] == ["Data", "W", "Out"]
    assert [w[0] for w in plan.workspace] == ["Pad", "WT"]
    assert [k.params for k in plan.kernels] == [(("arg", 0), ("ws", 0)), (("arg", 1), ("ws", 1)),
                                                (("arg", 2), ("ws", 0), ("ws", 1))]
    assert all(k.block == (64, 1, 1) for k in plan.kernels)


def test_load_module_rejects_foreign_archives(tmp_path):
    bad = tmp_path / "no_manifest.tcuda"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("kernels.cubin", b"\x7fELF")
    with pytest.raises(ValueError, match=r"lacks manifest.json"):
        tilecraft.runtime.load_module(str(bad))
    other = tmp_path / "other.tcuda"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("manifest.json", json.dumps({"format": "tilecraft-cuda", "version": 99}))
        z.writestr("kernels.cubin", b"\x7fELF")
    with pytest.raises(ValueError, match=r"version 99.*reads 'tilecraft-cuda' version 1"):
        tilecraft.runtime.load_module(str(other))
    broken = tmp_path / "broken.tcuda"
    with zipfile.ZipFile(broken, "w") as z:
        z.writestr("manifest.json", json.dumps({"format": "tilecraft-cuda", "version": 1, "arch": "sm_90",
                                                "target": "cuda", "functions": [{"kernels": []}]}))
        z.writestr("kernels.cubin", b"\x7fELF")
    with pytest.raises(ValueError, match=r"manifest in .* is malformed"):
        tilecraft.runtime.load_module(str(broken))


def test_export_to_a_missing_folder_says_so(tmp_path):
    mod = CUDAModule([tilecraft.lower(*cs.elementwise(1024), target="cuda")], "// src", b"cubin", "sm_90", "cuda")
    with pytest.raises(FileNotFoundError, match=r"does not exist"):
        mod.export_library(str(tmp_path / "nope" / "x.tcuda"))
    with pytest.raises(IsADirectoryError):
        mod.export_library(str(tmp_path))
    assert os.listdir(tmp_path) == []                     # no temporary file left behind


def test_naive_gpu_schedule_is_correct_in_the_emulator(rng):
    s, args = cs.conv2d_nchw(1, 8, 10, 10, 8, 3, 3, 1)
    f = tilecraft.lower(cs.naive(args[-1], 64), args, target="cuda")
    _check_emulated_conv(f, rng, 8, 8, 10)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_conv2d_cuda_template_configs_in_the_emulator(seed):
    """Random valid configs of topi/conv2d_nchw.cuda compute the convolution (emulated)."""
    rng = np.random.default_rng(seed)
    task = autotune.task.create("topi/conv2d_nchw.cuda", args=(1, 8, 8, 8, 16, 3, 3, 1, 1, "float32"),
                                target="cuda")
    space = task.config_space
    assert 0 < len(space) < space.range_length
    cfg = space.get(space.valid_index(int(rng.integers(len(space)))))
    sch, args = task.instantiate(cfg)
    f = tilecraft.lower(sch, args, target="cuda")
    _check_emulated_conv(f, rng, 8, 16, 8, err_msg=str(cfg))


@pytest.mark.parametrize("xpt,cpt", [(2, 4), (4, 1)])
def test_conv2d_schedule_with_several_pixels_per_thread(xpt, cpt, rng):
    s, args = cs.conv2d_nchw(1, 8, 8, 8, 16, 3, 3, 1, tile_co=8, tile_y=4, tile_x=8, co_per_thread=cpt,
                             ci_tile=4, x_per_thread=xpt)
    f = tilecraft.lower(s, args, target="cuda")
    _check_emulated_conv(f, rng, 8, 16, 8)
    if find_nvcc() is not None:
        from tilecraft.codegen.cuda import generate_cuda
        from tilecraft.codegen.cuda_compile import compile_cuda
        assert compile_cuda(generate_cuda(f), "sm_90")


@pytest.mark.parametrize("npb,xpt,cpt,k_split", [(2, 1, 2, 1), (4, 2, 2, 1), (3, 1, 4, 2)])
def test_conv2d_schedule_with_several_images_per_block(npb, xpt, cpt, k_split, rng):
    """n_per_block: a block computes its pixels and channels for several images (one weight tile
    in shared memory for all of them), with k_split and several pixels per thread too."""
    s, args = cs.conv2d_nchw(6 if npb == 3 else 4, 8, 6, 6, 8, 3, 3, 1, tile_co=4, tile_y=3, tile_x=6,
                             co_per_thread=cpt, ci_tile=2, x_per_thread=xpt, k_split=k_split, n_per_block=npb)
    f = tilecraft.lower(s, args, target="cuda")
    _check_emulated_conv(f, rng, 8, 8, 6, n=6 if npb == 3 else 4)
    with pytest.raises(ValueError, match=r"n_per_block=4 does not divide the batch of 6 images"):
        cs.conv2d_nchw(6, 8, 6, 6, 8, 3, 3, 1, n_per_block=4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_conv2d_cuda_template_on_a_batch(seed):
    """At batch > 1 the template has an n_per_block knob; random valid configs (several images
    per block among them) compute the convolution in the emulator."""
    rng = np.random.default_rng(seed)
    task = autotune.task.create("topi/conv2d_nchw.cuda", args=(4, 8, 6, 6, 8, 3, 3, 1, 1, "float32"),
                                target="cuda")
    space = task.config_space
    assert [e.val for e in space.space_map["n_per_block"].entities] == [1, 2, 4]
    npb = [space.get(space.valid_index(i))["n_per_block"].val for i in range(len(space))]
    assert {1, 2, 4} <= set(npb)
    i = int(rng.choice([i for i, v in enumerate(npb) if v > 1]))
    cfg = space.get(space.valid_index(i))
    sch, args = task.instantiate(cfg)
    _check_emulated_conv(tilecraft.lower(sch, args, target="cuda"), rng, 8, 8, 6, err_msg=str(cfg), n=4)


@needs_nvcc
def test_conv2d_cuda_template_admits_tiles_beyond_static_shared_memory(rng):
    """The filter admits tiles above the 48 KB of static shared memory (dynamic shared memory):
    one such config lowers, runs in the emulator and compiles for sm_90."""
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.cuda_compile import compile_cuda
    from tilecraft.topi.conv2d_cuda import SHARED_LIMIT, conv_tiles_ok
    kw = dict(tile_co=32, tile_y=4, tile_x=8, cpt=4, ci_tile=32, xpt=1, n_per_block=2, N=2)
    shared = 32 * (2 * 6 * 10 + 9 * 32) * 4
    assert 48 * 1024 < shared <= SHARED_LIMIT and conv_tiles_ok(32, 8, 8, 32, 3, 3, **kw)
    s, args = cs.conv2d_nchw(2, 32, 8, 8, 32, 3, 3, 1, tile_co=32, tile_y=4, tile_x=8, co_per_thread=4,
                             ci_tile=32, n_per_block=2)
    f = tilecraft.lower(s, args, target="cuda")
    src = generate_cuda(f)
    assert "extern __shared__" in src
    _check_emulated_conv(f, rng, 32, 32, 8, n=2)
    assert compile_cuda(src, "sm_90")


@pytest.mark.parametrize("seed", [0, 1])
def test_conv2d_cuda_template_stride_2(seed):
    """Stride 2 with more output than input channels (ResNet's downsampling 3×3 layers), in the
    emulator: a random valid config and the fallback."""
    rng = np.random.default_rng(seed)
    targs = (1, 8, 12, 12, 16, 3, 3, 2, 1, "float32")
    task = autotune.task.create("topi/conv2d_nchw.cuda", args=targs, target="cuda")
    space = task.config_space
    d = rng.uniform(-1, 1, (1, 8, 12, 12)).astype("float32")
    w = rng.uniform(-1, 1, (16, 8, 3, 3)).astype("float32")
    want = _conv_ref(d, w, 2)
    assert want.shape == (1, 16, 6, 6)
    from tilecraft.autotune.space import FallbackConfigEntity
    for cfg in (space.get(space.valid_index(int(rng.integers(len(space))))), FallbackConfigEntity()):
        sch, args = task.instantiate(cfg)
        out = np.full((1, 16, 6, 6), np.nan, "float32")
        emulate(tilecraft.lower(sch, args, target="cuda"), [d, w, out])
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


def test_conv2d_schedule_split_over_input_channels(rng):
    """k_split: partial sums over input-channel parts in separate blocks, then a sum kernel."""
    s, args = cs.conv2d_nchw(1, 8, 12, 12, 16, 3, 3, 1, tile_co=8, tile_y=3, tile_x=6, co_per_thread=2,
                             ci_tile=2, stride=2, k_split=2)
    f = tilecraft.lower(s, args, target="cuda")
    plan = plan_of(f)
    assert len(plan.kernels) == 2 and [w[0] for w in plan.workspace] == ["Partial"]
    _check_emulated_conv(f, rng, 8, 16, 12, stride=2)
    with pytest.raises(ValueError, match=r"k_split=3 does not divide the 8 input channels"):
        cs.conv2d_nchw(1, 8, 12, 12, 16, 3, 3, 1, k_split=3)


@pytest.mark.slow
@needs_nvcc
def test_builder_writes_loadable_cuda_candidates(tmp_path):
    task = autotune.task.create("topi/matmul.cuda", args=(128, 128, 128, "float32"), target="cuda -arch=sm_90")
    space = task.config_space
    cfgs = [space.get(space.valid_index(i)) for i in (0, len(space) // 2)]
    builder = autotune.LocalBuilder(timeout=120, n_parallel=2, tmp_dir=str(tmp_path))
    builder.set_task(task)
    try:
        results = builder.build([autotune.MeasureInput(task.target, task, c) for c in cfgs])
        assert builder.reference and builder.reference.endswith(".tcuda")
        for br in results:
            assert br.error_no == autotune.MeasureErrorNo.NO_ERROR, br.error_msg
            assert br.filename.endswith(".tcuda")
            mod = tilecraft.runtime.load_module(br.filename)
            assert isinstance(mod, CUDAModule) and mod.arch == "sm_90"
            assert [p.name for p in mod.plans[mod.entry_name].signature.params] == ["A", "B", "C"]
            assert dict(br.phases).keys() >= {"lower", "compile", "export"}
    finally:
        builder.close()


@needs_nvcc
def test_cli_exports_the_best_cuda_configs_as_archives(tmp_path, capsys):
    """`tilecraft export` on a GPU tuning log (the one bench/tune_cuda.py wrote on the device
    machine) writes one loadable .tcuda archive per workload."""
    from tilecraft import cli
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    log = os.path.join(root, "bench", "results", "cuda_tuning", "cuda_conv2d_c256.jsonl")
    assert cli.main(["export", log, "--out-dir", str(tmp_path)]) == 0
    info = json.loads((tmp_path / "manifest.json").read_text())
    assert len(info) == 1 and info[0]["library"].endswith(".tcuda")
    mod = tilecraft.runtime.load_module(str(tmp_path / info[0]["library"]))
    assert isinstance(mod, CUDAModule) and mod.entry_name == info[0]["entry"]
    assert "__shared__" in mod.get_source()
    assert "topi/conv2d_nchw.cuda[1, 256, 14, 14, 256" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# on a GPU

def test_gpu_loaded_module_runs(tmp_path, rng):
    _needs_gpu()
    from tilecraft.runtime import cuda_ndarray
    dev = tilecraft.cuda(0)
    mod, _ = _build(lambda: cs.elementwise(), target="cuda")
    loaded = tilecraft.runtime.load_module(mod.export_library(str(tmp_path / "ew.tcuda")))
    for n in (1000, 4096 + 3):
        a = rng.uniform(-1, 1, n).astype("float32")
        b = rng.uniform(-1, 1, n).astype("float32")
        c = cuda_ndarray.array(np.full(n, np.nan, "float32"), dev)
        loaded(cuda_ndarray.array(a, dev), cuda_ndarray.array(b, dev), c)
        np.testing.assert_allclose(c.numpy(), np.exp(a) * b + 1, rtol=1e-5, atol=1e-6)
    t = loaded.time_evaluator(loaded.entry_name, dev, number=10)(
        cuda_ndarray.array(a, dev), cuda_ndarray.array(b, dev), c)
    assert t.mean > 0
    # a module with workspace (Pad, WT) and several kernels
    s, args = cs.conv2d_nchw(1, 16, 12, 12, 16, 3, 3, 1, tile_co=16, tile_y=4, tile_x=4, co_per_thread=4, ci_tile=8)
    conv = tilecraft.runtime.load_module(tilecraft.build(s, args, target="cuda").export_library(
        str(tmp_path / "conv.tcuda")))
    d = rng.uniform(-1, 1, (1, 16, 12, 12)).astype("float32")
    w = rng.uniform(-1, 1, (16, 16, 3, 3)).astype("float32")
    out = cuda_ndarray.array(np.full((1, 16, 12, 12), np.nan, "float32"), dev)
    conv(cuda_ndarray.array(d, dev), cuda_ndarray.array(w, dev), out)
    want = _conv_ref(d, w)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def test_gpu_tuning_records_and_applies_the_best(tmp_path, rng):
    """A short XGBTuner run of topi/matmul.cuda on the GPU: candidates are built in workers,
    measured in a separate process, checked against the naive GPU schedule; the best config
    then builds through apply_history_best and computes the product."""
    _needs_gpu()
    from tilecraft.runtime import cuda_ndarray
    task = autotune.task.create("topi/matmul.cuda", args=(256, 256, 256, "float32"), target="cuda")
    log = str(tmp_path / "mm.jsonl")
    tuner = autotune.tuner.XGBTuner(task, seed=0)
    option = autotune.measure_option(builder=autotune.LocalBuilder(timeout=60),
                                     runner=autotune.LocalRunner(timeout=30, number=5, repeat=3))
    tuner.tune(24, option, callbacks=[autotune.callback.log_to_file(log)])
    records = list(autotune.record.load_from_file(log))
    assert len(records) == 24
    ok = [r for r in records if r[1].error_no == autotune.MeasureErrorNo.NO_ERROR]
    assert ok, [r[1].error_msg for r in records][:3]
    assert not [r for r in records if r[1].error_no == autotune.MeasureErrorNo.WRONG_ANSWER]
    with autotune.apply_history_best(log):
        with tilecraft.target.Target("cuda"):
            s, args = tilecraft.topi.matmul.matmul_cuda(256, 256, 256, "float32")
    mod = tilecraft.build(s, args, target="cuda")
    a = rng.uniform(-1, 1, (256, 256)).astype("float32")
    b = rng.uniform(-1, 1, (256, 256)).astype("float32")
    dev = tilecraft.cuda(0)
    c = cuda_ndarray.array(np.full((256, 256), np.nan, "float32"), dev)
    mod(cuda_ndarray.array(a, dev), cuda_ndarray.array(b, dev), c)
    np.testing.assert_allclose(c.numpy(), a.astype("float64") @ b, rtol=1e-4, atol=1e-4)
