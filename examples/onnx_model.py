"""Import a small ONNX model, compile it, run it, export it, compare with onnxruntime.

The model (built here with onnx.helper, random weights) is a ResNet-style block and a
classifier: conv → batch norm → ReLU → max pool → conv + residual → ReLU → global average pool
→ flatten → dense. Needs ``pip install -e ".[relay]"`` (onnx) and, for the comparison,
onnxruntime (in the ``test`` extra).

    python3 examples/onnx_model.py [OUT_DIR]
"""
import sys
import tempfile
import time
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import tilecraft as tc
from tilecraft import relay
from tilecraft.contrib import graph_executor

rng = np.random.default_rng(0)


def weight(name, *shape, low=-0.3, high=0.3):
    return numpy_helper.from_array(rng.uniform(low, high, shape).astype("float32"), name)


# 1. a model, as an exporter would write it
nodes = [
    helper.make_node("Conv", ["data", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
    helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["bn"], name="bn1"),
    helper.make_node("Relu", ["bn"], ["r1"], name="relu1"),
    helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
    helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
    helper.make_node("Add", ["c2", "p1"], ["res"], name="residual"),
    helper.make_node("Relu", ["res"], ["r2"], name="relu2"),
    helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
    helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
    helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1, name="fc"),
]
inits = [weight("w1", 32, 3, 3, 3), weight("b1", 32), weight("gamma", 32, low=0.5, high=1.5), weight("beta", 32),
         weight("mean", 32), weight("var", 32, low=0.5, high=1.5), weight("w2", 32, 32, 3, 3),
         weight("fc_w", 10, 32), weight("fc_b", 10)]
graph = helper.make_graph(nodes, "tiny_resnet",
                          [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = min(model.ir_version, 9)   # what older onnxruntime releases read
onnx.checker.check_model(model)

# 2. import: a graph module and its weights
mod, params = relay.frontend.from_onnx(model, shape={"data": (1, 3, 32, 32)})
print(mod)

# 3. build: passes (batch norm folded into conv1, epilogues fused), one kernel per fused group
warnings.filterwarnings("ignore", message="no tuned configuration")   # nothing is tuned here
start = time.perf_counter()
with tc.transform.PassContext(opt_level=3):
    lib = relay.build(mod, target="llvm", params=params)
print(f"built {sum(n['op'] == 'kernel' for n in lib.graph['nodes'])} kernels in {time.perf_counter() - start:.1f} s")

# 4. run
x = rng.uniform(-1, 1, (1, 3, 32, 32)).astype("float32")
m = graph_executor.GraphModule(lib["default"](tc.cpu(0)))
m.set_input("data", x)
m.run()
out = m.get_output(0).numpy()

# 5. export one library (kernels + graph + weights) and load it back
out_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
path = lib.export_library(f"{out_dir}/tiny_resnet.so")
m2 = graph_executor.GraphModule(tc.runtime.load_module(path)["default"](tc.cpu(0)))
m2.set_input("data", x)
m2.run()
np.testing.assert_array_equal(m2.get_output(0).numpy(), out)
print(f"exported {path}; reloaded, same output")

# 6. compare with onnxruntime
try:
    import onnxruntime as ort
except ImportError:
    print("onnxruntime is not installed: comparison skipped")
else:
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"data": x})[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    print(f"matches onnxruntime: max |difference| {np.abs(out - ref).max():.2e}")
print("time per run:", m.benchmark(tc.cpu(0), repeat=3, number=10))
