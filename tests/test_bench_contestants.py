"""The benches' contestants (bench/cpu_microkernels.py, cpu_reductions.py, cpu_gemm.py): each one
names a set-up function its file has, with arguments it takes; the reductions' input shapes are
their templates'; a real contestant (a tilecraft copy, built in its worker) runs through
``process_timing`` beside numpy's."""
import importlib.util
import inspect
import json
import pathlib
import sys
import warnings

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"


def load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _binds(c):
    module = load(pathlib.Path(c.path).stem)
    inspect.signature(getattr(module, c.function)).bind(**c.kwargs)


@pytest.mark.parametrize("key", ["gemm", "int8", "int8q", "conv", "conv8"])
def test_micro_kernel_contestants_name_their_set_ups(key, monkeypatch):
    cm = load("cpu_microkernels")
    monkeypatch.setattr(cm, "torch_engines", lambda: ["x86"])
    monkeypatch.setattr(cm, "has_torch", lambda: True)
    cs = cm.contestants(key, 2, "/logs")
    assert "tilecraft" in cs and len(cs) >= 2
    for c in cs.values():
        _binds(c)


@pytest.mark.parametrize("name", list(load("cpu_reductions").WORKLOADS))
def test_reduction_inputs_are_the_templates(name):
    import tilecraft as tc
    import tilecraft.topi  # noqa: F401
    from tilecraft import autotune
    cr = load("cpu_reductions")
    template, targs = cr.WORKLOADS[name]
    task = autotune.task.create(template, args=targs, target="llvm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tc.target.Target("llvm"):
            _, tensors = task.func(*targs)
    assert [tuple(int(d.value) for d in t.shape) for t in tensors[:-1]] == [tuple(s) for s in cr.input_shapes(name)]


def test_a_tilecraft_contestant_runs_in_its_worker():
    pt, cr = load("process_timing"), load("cpu_reductions")
    path = str(BENCH / "cpu_reductions.py")
    t = pt.time_apart({"tc copy": pt.Contestant(path, "setup_copy", {"n": 4096, "which": "tilecraft"}),
                       "np.copyto": pt.Contestant(path, "setup_copy", {"n": 4096, "which": "numpy"})},
                      threads=1, rounds=2, seconds=0.001, pause=0)
    assert set(t) == {"tc copy", "np.copyto"} and all(v.median > 0 for v in t.values())
    # the softmax template (fallback config: no logs in /nonexistent), checked in its worker
    t = pt.time_apart({"tilecraft": pt.Contestant(path, "setup_tilecraft", {"name": "softmax 4096x1024",
                                                                            "log_dir": "/nonexistent"})},
                      threads=1, rounds=1, seconds=0.001, pause=0)
    info = json.loads(t["tilecraft"].info)
    assert info["origin"].startswith("fallback configuration") and info["err"] < 1e-5
    _binds(pt.Contestant(path, "setup_reference", {"name": "softmax 4096x1024", "which": "numpy"}))
    cg = str(BENCH / "cpu_gemm.py")
    for c in (pt.Contestant(cg, "setup_hand", {"n": 64}), pt.Contestant(cg, "setup_numpy", {"n": 64})):
        _binds(c)


def test_the_gemm_anatomy_names_configs_of_the_templates_spaces():
    """bench/cpu_gemm_anatomy.py's named variants are valid configs of the templates (for the
    targets that have their ISA: AVX-512 + AMX for the AMX rows), so the device-host run
    (bench/verify_micro.sh) does not stop at a knob that changed."""
    from tilecraft import autotune
    import tilecraft.topi.conv2d_microkernel  # noqa: F401
    import tilecraft.topi.matmul_microkernel  # noqa: F401
    an = load("cpu_gemm_anatomy")
    spr = "llvm -mcpu=sapphirerapids"
    n = an.N
    tasks = {"fp32": autotune.task.create("topi/matmul_tensorized.llvm", args=(n, n, n, "float32"), target=spr),
             "int8": autotune.task.create("topi/dense_int8.llvm", args=(n, n, n, "packed"), target=spr),
             "conv8": autotune.task.create("topi/conv2d_nchwc_int8.llvm", args=an.CONV8, target=spr)}
    named = [("fp32", an.FP32_GEMMS), ("int8", an.INT8_DENSES), ("int8", an.AMX_DENSES),
             ("conv8", an.CONV8_CONFIGS), ("conv8", an.CONV8_AMX_CONFIGS)]
    for key, configs in named:
        for name, knobs in configs.items():
            cfg = an.config(tasks[key], **knobs)
            for knob, value in knobs.items():
                if knob not in cfg.space_map:
                    continue
                entity = cfg[knob]
                assert (entity.size[-1] if hasattr(entity, "size") else entity.val) == value, (name, knob)


def test_knobs_from_the_command_line_and_the_anatomys_best(tmp_path):
    """``cpu_microkernels.py --knobs KEY=JSON`` / ``--knobs-from FILE`` (what ``cpu_gemm_anatomy.py
    --best`` writes): JSON lists become the templates' tuples; bad input says which argument."""
    cm, an = load("cpu_microkernels"), load("cpu_gemm_anatomy")
    assert cm.parse_knobs(['int8={"amx_tile": [32, 32], "kc": 1024}']) == \
        {"int8": {"amx_tile": (32, 32), "kc": 1024}}
    for bad, says in [("gemm", "expected KEY=JSON"), ("nope={}", "expected KEY=JSON"),
                      ("gemm={tile", "is not JSON"), ("gemm=[1, 2]", "expected a JSON object")]:
        with pytest.raises(SystemExit, match=says):
            cm.parse_knobs([bad])
    times = {"gemm a": 3.0, "gemm b": 2.0, "dense x": 1.0, "conv int8 y": 5.0}
    variants = {"gemm a": ("gemm", {"kc": 256}), "gemm b": ("gemm", {"kc": 512}),
                "dense x": ("int8", {"tile": (8, 32)}), "conv int8 z": ("conv8", {"amx": True})}
    best = an.best_variants(times, variants)
    assert best == {"gemm": {"kc": 512}, "int8": {"tile": (8, 32)}}       # z was not timed
    path = tmp_path / "best.json"
    path.write_text(json.dumps(best))
    args = cm.parse_args(["--knobs-from", str(path)])
    assert args.knobs_from == str(path)
    assert cm.parse_knobs([f"{k}={json.dumps(v)}" for k, v in json.loads(path.read_text()).items()]) == best


def test_the_anatomy_config_names_a_knob_value_the_space_lacks():
    from tilecraft import autotune
    import tilecraft.topi.matmul_microkernel  # noqa: F401
    an = load("cpu_gemm_anatomy")
    task = autotune.task.create("topi/matmul_tensorized.llvm", args=(64, 64, 64, "float32"),
                                target="llvm -mcpu=skylake-avx512")
    with pytest.raises(ValueError, match=r"knob kc has no value 100 here; its values: \[64\]"):
        an.config(task, kc=100)


def test_tuning_starts_from_the_anatomys_named_variants():
    """``cpu_microkernels.py --tune`` measures ``seed_configs`` first: the anatomy's named variants
    that the target's space has (the AMX ones only where the target has AMX)."""
    from tilecraft import autotune
    import tilecraft.topi.conv2d_microkernel  # noqa: F401
    import tilecraft.topi.matmul_microkernel  # noqa: F401
    cm, an = load("cpu_microkernels"), load("cpu_gemm_anatomy")
    sys.modules.setdefault("cpu_gemm_anatomy", an)
    counts = {}
    for target in ("llvm -mcpu=sapphirerapids", "llvm -mcpu=znver5"):
        for key in ("gemm", "int8", "conv8", "conv"):
            name, args, _ = cm.WORKLOADS[key]
            task = autotune.task.create(name, args=args, target=target)
            seeds = cm.seed_configs(key, task)
            assert len({c.index for c in seeds}) == len(seeds)
            counts[target.split("=")[1], key] = len(seeds)
            if key == "int8" and "sapphire" in target:
                assert {c["amx_tile"].val for c in seeds} == {(0, 0), (32, 32), (32, 16)}
    # (the AMX rows timed with the tile configuration kept repeat knobs: one seed each)
    knob_sets = {tuple(sorted(k.items())) for k in {**an.INT8_DENSES, **an.AMX_DENSES}.values()}
    assert counts == {("sapphirerapids", "gemm"): len(an.FP32_GEMMS), ("znver5", "gemm"): len(an.FP32_GEMMS),
                      ("sapphirerapids", "int8"): len(knob_sets),
                      ("znver5", "int8"): len(an.INT8_DENSES),
                      ("sapphirerapids", "conv8"): len({tuple(sorted(k.items())) for k in
                                                        {**an.CONV8_CONFIGS, **an.CONV8_AMX_CONFIGS}.values()}),
                      ("znver5", "conv8"): len(an.CONV8_CONFIGS),
                      ("sapphirerapids", "conv"): 0, ("znver5", "conv"): 0}
