"""A ResNet-like block (conv-bn-relu-pool-conv-add-dense) and a BERT-like block
(matmul-add-layernorm-gelu-softmax) against onnxruntime; export_library reloaded in a fresh
process."""
import json
import subprocess
import sys

import numpy as np
import pytest

from relay_helpers import build, check_model, helper, make_model, run_ort

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


def N(op, ins, outs, **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


def resnet_block(rng):
    f = lambda *s: rng.uniform(-0.5, 0.5, s).astype("float32")       # noqa: E731
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             N("BatchNormalization", ["c1", "g", "be", "mu", "var"], ["bn"]),
             N("Relu", ["bn"], ["r"]),
             N("MaxPool", ["r"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
             N("Conv", ["mp", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             N("Add", ["c2", "mp"], ["res"]),
             N("Relu", ["res"], ["r2"]),
             N("GlobalAveragePool", ["r2"], ["gp"]),
             N("Flatten", ["gp"], ["fl"]),
             N("Gemm", ["fl", "wd", "bd"], ["y"], transB=1)]
    inits = {"w1": f(16, 3, 3, 3), "b1": f(16), "g": rng.uniform(0.5, 1.5, 16).astype("float32"), "be": f(16),
             "mu": f(16), "var": rng.uniform(0.5, 1.5, 16).astype("float32"), "w2": f(16, 16, 3, 3),
             "wd": f(10, 16), "bd": f(10)}
    inputs = {"x": rng.uniform(-1, 1, (1, 3, 14, 14)).astype("float32")}
    return make_model(nodes, inputs, ["y"], inits), inputs


def bert_block(rng):
    f = lambda *s: rng.uniform(-0.5, 0.5, s).astype("float32")       # noqa: E731
    S, H = 9, 24
    nodes = [N("MatMul", ["x", "wq"], ["q"]), N("Add", ["q", "bq"], ["qb"]),
             N("MatMul", ["x", "wk"], ["k"]), N("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             N("MatMul", ["qb", "kt"], ["s"]), N("Mul", ["s", "scale"], ["ss"]),
             N("Softmax", ["ss"], ["p"], axis=-1),
             N("MatMul", ["p", "x"], ["ctx"]), N("Add", ["ctx", "x"], ["res"]),
             N("LayerNormalization", ["res", "ln_g", "ln_b"], ["ln"], epsilon=1e-5),
             N("MatMul", ["ln", "w1"], ["h"]), N("Add", ["h", "b1"], ["hb"]), N("Gelu", ["hb"], ["y"])]
    inits = {"wq": f(H, H), "bq": f(H), "wk": f(H, H), "scale": np.float32(1 / np.sqrt(H)),
             "ln_g": f(H) + 1, "ln_b": f(H), "w1": f(H, 40), "b1": f(40)}
    inputs = {"x": rng.uniform(-1, 1, (2, S, H)).astype("float32")}
    return make_model(nodes, inputs, ["y"], inits, opset=20), inputs


def test_resnet_block(rng):
    model, inputs = resnet_block(rng)
    check_model(model, inputs, rtol=1e-4, atol=1e-4)


def test_bert_block(rng):
    model, inputs = bert_block(rng)
    check_model(model, inputs, rtol=1e-4, atol=1e-4)


def test_resnet_block_fuses_epilogues(rng):
    """Batch norm folded into the conv, bias/shift/ReLU its epilogue, the residual add and
    ReLU in the second conv's kernel: five kernels for ten ONNX nodes (the flatten is a view of
    the pooled result, no kernel: backend/reshape_views.py); with AlterOpLayout (the
    default at opt_level 3) the convolutions, the residual add, the max pool and the global pool
    are NCHW[x]c and two layout transforms remain: the input, and the pooled 1x1 result (fused
    with the flatten)."""
    import tilecraft as tc
    from tilecraft import relay
    model, inputs = resnet_block(rng)
    lib = build(model, inputs)
    kernels = [n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"]
    assert kernels == ["fused_layout_transform", "fused_nn_contrib_conv2d_NCHWc_add_add_nn_relu",
                       "fused_nn_max_pool2d", "fused_nn_contrib_conv2d_NCHWc_add_nn_relu",
                       "fused_nn_global_avg_pool2d", "fused_layout_transform_reshape", "fused_nn_dense_add"]
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in inputs.items()})
    with tc.transform.PassContext(opt_level=3, disabled_pass=["AlterOpLayout"]):
        lib = relay.build(mod, target="llvm", params=params)
    kernels = [n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"]
    assert kernels == ["fused_nn_conv2d_nn_bias_add_add_nn_relu", "fused_nn_max_pool2d",
                       "fused_nn_conv2d_add_nn_relu", "fused_nn_global_avg_pool2d", "fused_nn_dense_add"]


RELOAD = """
import sys, numpy as np, tilecraft as tc
from tilecraft.contrib import graph_executor
lib = tc.runtime.load_module(sys.argv[1])
m = graph_executor.GraphModule(lib["default"](tc.cpu(0)))
m.set_input("x", np.load(sys.argv[2])); m.run()
np.save(sys.argv[3], m.get_output(0).numpy())
"""


def test_export_library_reloads_in_a_fresh_process(rng, tmp_path):
    model, inputs = resnet_block(rng)
    lib = build(model, inputs)
    path = lib.export_library(tmp_path / "model.so")
    np.save(tmp_path / "x.npy", inputs["x"])
    proc = subprocess.run([sys.executable, "-c", RELOAD, path, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), run_ort(model, inputs)[0], rtol=1e-4, atol=1e-4)
    # one file: the graph and the weights' table are in its manifest
    import tilecraft as tc
    info = json.loads(tc.runtime.load_module(path).module.artifact.manifest_text)
    assert info["graph"] == lib.graph and len(info["params"]) == len(lib.params)


def test_bert_block_kernels_use_the_row_reduction_templates(rng):
    """Softmax and layer norm are computed by their templates on 2-d views ([rows, N])."""
    model, inputs = bert_block(rng)
    lib = build(model, inputs)
    views = {n["func"]: n.get("arg_shapes") for n in lib.graph["nodes"] if n["op"] == "kernel"}
    assert views["fused_nn_softmax"] == [[18, 9], [18, 9]]
    assert views["fused_nn_layer_norm"] == [[18, 24], [24], [24], [18, 24]]


@pytest.mark.parametrize("transpose_b", [False, True])
def test_batch_matmul_with_epilogue(rng, transpose_b):
    """batch_matmul's schedule (columns vectorized, 16 wide here, and a tail-free 4-wide batch)
    with a broadcast epilogue fused, against numpy."""
    import tilecraft as tc
    from tilecraft import relay
    from tilecraft.contrib import graph_executor
    x = relay.var("x", shape=(3, 5, 7))
    y = relay.var("y", shape=(3, 32, 7) if transpose_b else (3, 7, 32))
    b = relay.var("b", shape=(32,))
    out = relay.nn.relu(relay.add(relay.nn.batch_matmul(x, y, transpose_b=transpose_b), b))
    with tc.transform.PassContext(opt_level=3):
        lib = relay.build(relay.IRModule.from_expr(relay.Function([x, y, b], out)), "llvm")
    assert [n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"] == ["fused_nn_batch_matmul_add_nn_relu"]
    xv, yv, bv = (rng.uniform(-1, 1, v.checked_type.shape).astype("float32") for v in (x, y, b))
    m = graph_executor.GraphModule(lib["default"](tc.cpu(0)))
    m.run(x=xv, y=yv, b=bv)
    yt = yv.transpose(0, 2, 1) if transpose_b else yv
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(xv @ yt + bv, 0), rtol=1e-5, atol=1e-5)
