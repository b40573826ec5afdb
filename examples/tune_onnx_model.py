"""Tune a whole ONNX model, build it with the tuned log, compare with onnxruntime.

The model (built here with onnx.helper, random weights) is a small ResNet: a stem conv, two
residual stages of two 3x3 convs each (batch norm, ReLU, the second stage with a stride-2
shortcut), global average pooling and a dense classifier. The steps are TVM's
``tune_relay_x86.py``: import, extract the tasks, tune them under one trial budget (split by
estimated time share; the log resumes), build inside ``apply_history_best``, run, compare.
Needs ``pip install -e ".[relay]"`` (onnx) and onnxruntime.

    python3 examples/tune_onnx_model.py [TRIALS] [LOG]     # default: 40 trials, a temporary log
"""
import os
import sys
import tempfile
import time
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import tilecraft as tc
from tilecraft import autotune as autotvm, relay
from tilecraft.contrib import graph_executor

rng = np.random.default_rng(0)
trials = int(sys.argv[1]) if len(sys.argv) > 1 else 40
log_file = sys.argv[2] if len(sys.argv) > 2 else os.path.join(tempfile.mkdtemp(), "small_resnet.jsonl")
inits, nodes = [], []


def weight(name, *shape, low=-0.3, high=0.3):
    inits.append(numpy_helper.from_array(rng.uniform(low, high, shape).astype("float32"), name))
    return name


def conv_bn(x, out, cin, cout, stride=1, relu=True, k=3):
    w = weight(f"{out}_w", cout, cin, k, k)
    bn = [weight(f"{out}_g", cout, low=0.5, high=1.5), weight(f"{out}_b", cout), weight(f"{out}_m", cout),
          weight(f"{out}_v", cout, low=0.5, high=1.5)]
    nodes.append(helper.make_node("Conv", [x, w], [f"{out}_c"], pads=[k // 2] * 4, strides=[stride, stride]))
    nodes.append(helper.make_node("BatchNormalization", [f"{out}_c"] + bn, [out if not relu else f"{out}_n"]))
    if relu:
        nodes.append(helper.make_node("Relu", [f"{out}_n"], [out]))
    return out


def block(x, name, cin, cout, stride):
    h = conv_bn(x, f"{name}a", cin, cout, stride)
    h = conv_bn(h, f"{name}b", cout, cout, relu=False)
    short = x if stride == 1 and cin == cout else conv_bn(x, f"{name}s", cin, cout, stride, relu=False, k=1)
    nodes.append(helper.make_node("Add", [h, short], [f"{name}_sum"]))
    nodes.append(helper.make_node("Relu", [f"{name}_sum"], [name]))
    return name


# 1. the model, as an exporter would write it
x = conv_bn("data", "stem", 3, 16)
x = block(x, "s1", 16, 16, 1)
x = block(x, "s2", 16, 32, 2)
nodes += [helper.make_node("GlobalAveragePool", [x], ["gap"]), helper.make_node("Flatten", ["gap"], ["flat"]),
          helper.make_node("Gemm", ["flat", weight("fc_w", 10, 32), weight("fc_b", 10)], ["logits"], transB=1)]
graph = helper.make_graph(nodes, "small_resnet",
                          [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = min(model.ir_version, 9)   # what older onnxruntime releases read
onnx.checker.check_model(model)

# 2. import, and extract the tasks: one per distinct tunable workload of the fused graph
mod, params = relay.frontend.from_onnx(model, shape={"data": (1, 3, 32, 32)})
tasks = autotvm.task.extract_from_program(mod["main"], target="llvm", params=params)
for t in tasks:
    print(f"  {t.name}{list(t.args)}: {t.flop / 1e6:.2f} MFLOP x {t.count}, {len(t.config_space)} configs")

# 3. tune all of them under one budget (a progress bar per task; run again: it resumes)
measure_option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                        runner=autotvm.LocalRunner(number=5, repeat=3))
start = time.perf_counter()
report = autotvm.tune_tasks(tasks, trials, log_file, measure_option=measure_option, tuner="xgb",
                            early_stopping=max(trials // 2, 10))
print(f"tuned {sum(r['measured'] for r in report)} new configs in {time.perf_counter() - start:.0f} s; log: {log_file}")

# 4. build with the log, and without it
with autotvm.apply_history_best(log_file):
    with tc.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")        # every workload is on its fallback here, on purpose
    with tc.transform.PassContext(opt_level=3):
        untuned = relay.build(mod, target="llvm", params=params)
print(lib.memory_summary())

# 5. run both and compare with onnxruntime
data = rng.uniform(-1, 1, (1, 3, 32, 32)).astype("float32")
dev = tc.cpu(0)
results = {}
for name, built in (("tuned", lib), ("fallback", untuned)):
    m = graph_executor.GraphModule(built["default"](dev))
    m.set_input("data", data)
    m.run()
    results[name] = (m.get_output(0).numpy(), m.benchmark(dev, repeat=5, number=20).median)
import onnxruntime as ort  # noqa: E402

sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
ref = sess.run(None, {"data": data})[0]
np.testing.assert_allclose(results["tuned"][0], ref, rtol=1e-4, atol=1e-4)
t0 = time.perf_counter()
for _ in range(20):
    sess.run(None, {"data": data})
ort_time = (time.perf_counter() - t0) / 20
print(f"matches onnxruntime (max |difference| {np.abs(results['tuned'][0] - ref).max():.1e}); per run: "
      f"tuned {results['tuned'][1] * 1e3:.3f} ms, fallback {results['fallback'][1] * 1e3:.3f} ms, "
      f"onnxruntime {ort_time * 1e3:.3f} ms")
