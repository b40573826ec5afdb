"""Build a small model for the GPU and run it from C: ``lib.export_library("libnet.so")`` writes
the kernels (a cubin), the weights and the model's C API (``net.h``: create, set_input, run,
get_output, free; docs/relay.md "The C API of a CUDA model"), and ``examples/cuda_model_main.c``
is compiled against it with gcc. Needs nvcc and the CUDA headers to build; the program runs where
there is an NVIDIA GPU of the architecture it was built for (elsewhere it prints why not).

    python3 examples/cuda_model_capi.py [OUT_DIR] [--arch sm_90]
"""
import pathlib
import subprocess
import sys
import tempfile
import warnings

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import tilecraft as tc
from tilecraft import relay

rng = np.random.default_rng(0)
args = [a for a in sys.argv[1:] if not a.startswith("--")]
arch = sys.argv[sys.argv.index("--arch") + 1] if "--arch" in sys.argv else None
if arch:
    args.remove(arch)
out = pathlib.Path(args[0] if args else tempfile.mkdtemp(prefix="tilecraft-capi-"))
out.mkdir(parents=True, exist_ok=True)

# 1. a model: conv + bias + ReLU, max pool, global average pool, a classifier
inits = {"w": rng.uniform(-0.3, 0.3, (16, 3, 3, 3)), "b": rng.uniform(-0.3, 0.3, 16),
         "fc": rng.uniform(-0.3, 0.3, (10, 16)), "fcb": rng.uniform(-0.3, 0.3, 10)}
nodes = [helper.make_node("Conv", ["data", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("GlobalAveragePool", ["p"], ["g"]),
         helper.make_node("Flatten", ["g"], ["f"]),
         helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1)]
graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v.astype("float32"), k) for k, v in inits.items()])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
mod, params = relay.frontend.from_onnx(model, shape={"data": (1, 3, 32, 32)})

# 2. build for the GPU (without a GPU here: name its architecture) and export the C library
with warnings.catch_warnings(), tc.transform.PassContext(opt_level=3):
    warnings.simplefilter("ignore")          # "no tuned configuration": the fallback schedules
    lib = relay.build(mod, target=f"cuda -arch={arch}" if arch else "cuda", params=params)
so = lib.export_library(out / "libnet.so")
print(f"wrote {so} and {out / 'net.h'}")

# 3. the C program, linked with it (the CUDA driver is opened when the model is created)
main = pathlib.Path(__file__).with_name("cuda_model_main.c")
subprocess.run(["gcc", str(main), '-DMODEL_HEADER="net.h"', f"-I{out}", f"-L{out}", "-lnet",
                f"-Wl,-rpath,{out}", "-o", str(out / "main")], check=True)
x = rng.standard_normal((1, 3, 32, 32)).astype("float32")
(out / "x.bin").write_bytes(x.tobytes())
run = subprocess.run([str(out / "main"), str(out / "x.bin"), str(out / "y.bin")], capture_output=True, text=True)
print(run.stdout.strip())
if run.returncode == 0:
    print("y =", np.frombuffer((out / "y.bin").read_bytes(), "float32").round(4))
