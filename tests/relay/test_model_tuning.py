"""Tuning a whole model: task extraction (the keys relay.build looks up), the trial budget split,
resumable logs, and TVM's tune_relay_x86.py steps with a tiny budget."""
import os
import pathlib
import subprocess
import sys
import types
import warnings

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import autotune, relay
from tilecraft.autotune.dispatch import DispatchContext

from relay_helpers import helper, make_model, run_lib, run_ort

REPO = str(pathlib.Path(__file__).resolve().parents[2])


def _env() -> dict:
    """The environment of a script run in a subprocess: this checkout first on the path (a script
    in a temporary folder would otherwise import whatever tilecraft is installed, or none)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))
    return env

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


def small_net(rng):
    """conv+relu, conv+add (the same conv workload twice), flatten, dense, softmax; three images
    (a dense layer of one or two rows is a matrix-vector product, without a tuning task)."""
    inputs = {"x": rng.uniform(-1, 1, (3, 8, 6, 6)).astype("float32")}
    inits = {"w1": rng.uniform(-1, 1, (8, 8, 3, 3)).astype("float32"),
             "w2": rng.uniform(-1, 1, (8, 8, 3, 3)).astype("float32"),
             # logits of a few units: unscaled, they reach ~100 and the softmax turns float32's
             # summation-order differences (a tuned config against onnxruntime) into 5e-5 relative
             "wd": (rng.uniform(-1, 1, (10, 288)) * 0.05).astype("float32")}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["a"]),
             helper.make_node("Flatten", ["a"], ["f"]),
             helper.make_node("Gemm", ["f", "wd"], ["z"], transB=1),
             helper.make_node("Softmax", ["z"], ["y"])]
    return make_model(nodes, inputs, ["y"], inits), inputs


# 8 output channels: the micro-kernel conv where a vector is 8 lanes (AVX2), the loop-level
# template where it is 16 (AVX-512: 8 channels are not a whole vector)
CONV = (("topi/conv2d_NCHWc_microkernel.llvm", 3, 8, 6, 6, 8, 3, 3, 1, 1, 8, 8, "float32")
        if tc.topi.conv2d.vector_registers()[0] == 8 else ("topi/conv2d_nchw.llvm", 3, 8, 6, 6, 8, 3, 3, 1, 1, "float32"))
DENSE = ("topi/matmul.llvm", 3, 10, 288, "float32")
SOFTMAX = ("topi/softmax.llvm", 3, 10, "float32")


def test_extract_one_task_per_distinct_workload(rng):
    model, _ = small_net(rng)
    mod, params = relay.frontend.from_onnx(model)
    tasks = autotune.task.extract_from_program(mod["main"], target="llvm", params=params)
    assert [t.workload for t in tasks] == [CONV, DENSE, SOFTMAX]
    assert [t.count for t in tasks] == [2, 1, 1]
    assert all(t.flop > 0 and len(t.config_space) > 1 for t in tasks)
    convs = autotune.task.extract_from_program(mod, target="llvm", params=params, ops=[relay.op.get("nn.conv2d")])
    assert [t.workload for t in convs] == [CONV]
    assert [t.workload for t in autotune.task.extract_from_program(mod["main"], "llvm", params, ops=["nn.dense"])] \
        == [DENSE]


def test_extract_errors(rng):
    with pytest.raises(TypeError, match="expects a relay Function"):
        autotune.task.extract_from_program("model.onnx", target="llvm")
    model, _ = small_net(rng)
    mod, params = relay.frontend.from_onnx(model)
    with pytest.raises(relay.RelayError, match="extract_from_program: target 'opencl' is not supported; the graph level"):
        autotune.task.extract_from_program(mod["main"], target="opencl", params=params)


def fake(flop, count, size):
    return types.SimpleNamespace(flop=flop, count=count, config_space=list(range(size)))


def test_split_budget_by_time_share():
    # weights 1e6*1, 1e6*3, 1e3: the floor (4 each) first, the other 88 by weight
    assert autotune.split_budget([fake(1e6, 1, 500), fake(1e6, 3, 500), fake(1e3, 1, 500)], 100, 4) == [26, 70, 4]
    # a small space is capped; what it frees goes to the others by weight
    assert autotune.split_budget([fake(1e6, 1, 10), fake(1e6, 1, 500), fake(2e6, 1, 500)], 100, 4) == [10, 31, 59]
    # the budget exceeds all spaces: each space whole
    assert autotune.split_budget([fake(1, 1, 3), fake(1, 1, 5)], 100) == [3, 5]
    # fewer trials than tasks times the floor: the floor shrinks, the sum stays the budget
    shares = autotune.split_budget([fake(5, 1, 50), fake(1, 1, 50), fake(1, 1, 50)], 5)
    assert sum(shares) == 5 and shares[0] >= shares[1] >= 1


def quick_option():
    return autotune.measure_option(builder=autotune.LocalBuilder(n_parallel=2),
                                   runner=autotune.LocalRunner(number=1, repeat=1))


class Spy(DispatchContext):
    """Records what each workload the build asks for is answered (by the contexts below)."""

    def __init__(self):
        super().__init__()
        self.answers = {}

    def _query_inside(self, target, workload):
        return None

    def query(self, target, workload):
        cfg = super().query(target, workload)
        if workload is not None:
            self.answers[workload] = cfg
        return cfg


def test_tune_resume_and_build_with_the_log(rng, tmp_path):
    model, inputs = small_net(rng)
    mod, params = relay.frontend.from_onnx(model)
    tasks = autotune.task.extract_from_program(mod["main"], target="llvm", params=params)
    log = tmp_path / "net.jsonl"
    report = autotune.tune_tasks(tasks, 12, log, measure_option=quick_option(), tuner="random", min_trials=3,
                                 progress=False)
    assert [r["share"] for r in report] == [6, 3, 3] and [r["measured"] for r in report] == [6, 3, 3]
    # the same call again measures nothing; with a log cut short, only what is missing
    again = autotune.tune_tasks(tasks, 12, log, measure_option=quick_option(), tuner="random", min_trials=3,
                                progress=False)
    assert [r["measured"] for r in again] == [0, 0, 0]
    lines = log.read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(line for line in lines if "softmax" not in line))
    resumed = autotune.tune_tasks(tasks, 12, cut, measure_option=quick_option(), tuner="random", min_trials=3,
                                  progress=False)
    assert [r["measured"] for r in resumed] == [0, 0, 3]

    best = autotune.apply_history_best(str(log))
    with best, tc.target.Target("llvm"):
        logged = {t.workload: DispatchContext.current().query(tc.target.Target.current(), t.workload) for t in tasks}
    assert all(cfg is not None and not cfg.is_fallback for cfg in logged.values())
    spy = Spy()
    with autotune.apply_history_best(str(log)), spy, tc.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    # the build asked for exactly the extracted workloads and got the logged best of each
    assert set(spy.answers) == set(logged)
    assert all(spy.answers[w].index == logged[w].index and not spy.answers[w].is_fallback for w in logged)
    np.testing.assert_allclose(run_lib(lib, inputs)[0], run_ort(model, inputs)[0], rtol=1e-5, atol=1e-6)


def test_tune_tasks_errors(rng, tmp_path):
    with pytest.raises(ValueError, match="n_trial_total must be at least 0"):
        autotune.tune_tasks([fake(1, 1, 3)], -1, tmp_path / "x.jsonl", progress=False)
    model, _ = small_net(rng)
    mod, params = relay.frontend.from_onnx(model)
    tasks = autotune.task.extract_from_program(mod["main"], "llvm", params, ops=["nn.softmax"])
    with pytest.raises(ValueError, match="unknown tuner 'annealing'; choose one of xgb, ga, random"):
        autotune.tune_tasks(tasks, 4, tmp_path / "x.jsonl", tuner="annealing", progress=False)



def test_tune_tasks_measures_on_cold_caches(rng, tmp_path, monkeypatch):
    """Without a measure_option, candidates are timed as they run in a model: one call per
    repeat after the caches are evicted (warm timings chose blockings that reread the weights,
    slower in the model)."""
    from tilecraft.autotune import model_tuning
    seen = []

    class Spy:
        best_flops, trials_since_best = 0.0, 0

        def load_history(self, records):
            return 0

        def tune(self, n, option, **kw):
            seen.append(option["runner"].timing)

    monkeypatch.setattr(model_tuning, "_make_tuner", lambda tuner, task: Spy())
    model, _ = small_net(rng)
    mod, params = relay.frontend.from_onnx(model)
    tasks = autotune.task.extract_from_program(mod["main"], "llvm", params, ops=["nn.softmax"])
    autotune.tune_tasks(tasks, 4, tmp_path / "x.jsonl", progress=False)
    assert [(t.enable_cpu_cache_flush, t.number, t.repeat) for t in seen] == [(True, 1, 6)]
    autotune.tune_tasks(tasks, 4, tmp_path / "y.jsonl", progress=False,
                        measure_option=autotune.measure_option(runner=autotune.LocalRunner(number=3)))
    assert seen[1].number == 3 and not seen[1].enable_cpu_cache_flush


@pytest.mark.parametrize("name, args, seeded", [
    ("topi/dense_pack.llvm", (16, 64, 32, "float32"), True),        # its fallback is a point of its space
    ("topi/batch_matmul.llvm", (2, 8, 16, 12, "float32"), True),
    ("topi/matmul.llvm", (8, 16, 12, "float32"), False),            # no fallback schedule: nothing to seed
])
def test_tune_tasks_measures_the_fallback_first(name, args, seeded, tmp_path):
    """A task without records starts with the config its template's fallback schedules (what the
    untuned build runs), so the best after tuning is never slower than no tuning by the tuner's
    own measurements; it counts towards the task's share and is logged like the rest."""
    import importlib
    from tilecraft.autotune import record
    from tilecraft.autotune.model_tuning import fallback_config
    from tilecraft.topi.cpu_intrinsics import vector_isa
    if name == "topi/dense_pack.llvm" and vector_isa("llvm").name == "sse":
        pytest.skip("no FMA micro-kernel on this CPU: topi/dense_pack.llvm has no space here")
    importlib.import_module("tilecraft.topi." + name.split("/")[1].split(".")[0])
    task = autotune.task.create(name, args=args, target="llvm")
    first = fallback_config(task)
    assert (first is not None) == seeded
    log = tmp_path / "t.jsonl"
    report = autotune.tune_tasks([task], 3, log, measure_option=quick_option(), tuner="random", min_trials=3,
                                 progress=False)
    got = [inp.config.index for inp, _ in record.load_from_file(str(log))]
    assert len(got) == len(set(got)) == 3 and report[0]["measured"] == 3
    if seeded:      # the point schedules exactly what the fallback does
        assert got[0] == first.index
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            texts = [str(tc.lower(*task.instantiate(c), simple_mode=True))
                     for c in (first, autotune.FallbackConfigEntity())]
        assert texts[0] == texts[1]
    # resumed: nothing measured again, the fallback not either
    again = autotune.tune_tasks([task], 3, log, measure_option=quick_option(), tuner="random", min_trials=3,
                                progress=False)
    assert again[0]["measured"] == 0 and len(record.load_from_file(str(log))) == 3

TUNE_RELAY_X86 = r'''
# TVM's tune_relay_x86.py, steps unchanged but the imports and the model (ONNX, built locally)
import sys, numpy as np
import tilecraft as tvm
from tilecraft import relay, autotune as autotvm
from tilecraft.autotune.tuner import XGBTuner, GATuner, RandomTuner, GridSearchTuner
from tilecraft.contrib import graph_executor
import onnx

model = onnx.load(sys.argv[1]); log_file = sys.argv[2]; so = sys.argv[3]
x = np.load(sys.argv[4])
target = "llvm"
mod, params = relay.frontend.from_onnx(model, shape={"x": x.shape})
tasks = autotvm.task.extract_from_program(mod["main"], target=target, params=params,
                                          ops=(relay.op.get("nn.conv2d"),))
measure_option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                        runner=autotvm.LocalRunner(number=1, repeat=1, min_repeat_ms=0,
                                                                   enable_cpu_cache_flush=True))
for i, tsk in enumerate(reversed(tasks)):
    prefix = "[Task %2d/%2d] " % (i + 1, len(tasks))
    tuner_obj = GridSearchTuner(tsk)
    n_trial = min(4, len(tsk.config_space))
    tuner_obj.tune(n_trial=n_trial, early_stopping=None, measure_option=measure_option,
                   callbacks=[autotvm.callback.progress_bar(n_trial, prefix=prefix),
                              autotvm.callback.log_to_file(log_file)])
with autotvm.apply_history_best(log_file):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
dev = tvm.cpu()
module = graph_executor.GraphModule(lib["default"](dev))
module.set_input("x", tvm.nd.array(x))
module.run()
np.save(so + ".out.npy", module.get_output(0).numpy())
print("Mean inference time: %.2f ms" % (module.benchmark(dev, number=1, repeat=2).mean * 1e3))
lib.export_library(so)
'''


def test_tune_relay_x86_steps(rng, tmp_path):
    model, inputs = small_net(rng)
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    np.save(tmp_path / "x.npy", inputs["x"])
    script = tmp_path / "tune_relay_x86.py"
    script.write_text(TUNE_RELAY_X86)
    so, log = tmp_path / "net.so", tmp_path / "net.jsonl"
    run = subprocess.run([sys.executable, str(script), str(tmp_path / "m.onnx"), str(log), str(so),
                          str(tmp_path / "x.npy")], capture_output=True, text=True, timeout=300, env=_env())
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Mean inference time" in run.stdout
    assert len(log.read_text().splitlines()) == 4
    expected = run_ort(model, inputs)[0]
    np.testing.assert_allclose(np.load(str(so) + ".out.npy"), expected, rtol=1e-5, atol=1e-6)
    # the exported library in a fresh process: no compiler, same result
    check = ("import sys, numpy as np, tilecraft as tc\nfrom tilecraft.contrib import graph_executor\n"
             "m = graph_executor.GraphModule(tc.runtime.load_module(sys.argv[1])['default'](tc.cpu(0)))\n"
             "m.set_input('x', np.load(sys.argv[2])); m.run(); np.save(sys.argv[3], m.get_output(0).numpy())\n")
    out = tmp_path / "reloaded.npy"
    run = subprocess.run([sys.executable, "-c", check, str(so), str(tmp_path / "x.npy"), str(out)],
                         capture_output=True, text=True, timeout=120, env=_env())
    assert run.returncode == 0, run.stderr[-3000:]
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-5, atol=1e-6)


def test_tune_onnx_model_example(tmp_path):
    script = pathlib.Path(REPO) / "examples" / "tune_onnx_model.py"
    log = tmp_path / "ex.jsonl"
    run = subprocess.run([sys.executable, str(script), "8", str(log)], capture_output=True, text=True, timeout=300,
                         env=_env())
    assert run.returncode == 0, run.stderr[-3000:]
    assert "matches onnxruntime" in run.stdout and len(log.read_text().splitlines()) == 8
