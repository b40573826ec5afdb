"""Helpers of the graph-level tests: small ONNX models built with onnx.helper, run by
onnxruntime (the reference) and by tilecraft (relay.build + the graph executor, intermediate
and output buffers poisoned with NaN before the run)."""
from __future__ import annotations

import numpy as np

import tilecraft as tc
from tilecraft import relay
from tilecraft.contrib import graph_executor

onnx = __import__("pytest").importorskip("onnx")
ort = __import__("pytest").importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ELEM = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64, "bool": TensorProto.BOOL,
        "int32": TensorProto.INT32}


def make_model(nodes, inputs: dict, outputs, inits: dict | None = None, opset: int = 17, out_dtype=None):
    """An ONNX model: ``inputs`` {name: array} (their shapes and dtypes), ``outputs`` names
    (float32 unless ``out_dtype`` says), ``inits`` {name: array} initializers."""
    out_dtype = out_dtype or {}
    ins = [helper.make_tensor_value_info(k, ELEM[v.dtype.name], list(v.shape)) for k, v in inputs.items()]
    outs = [helper.make_tensor_value_info(o, ELEM[out_dtype.get(o, "float32")], None) for o in outputs]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(nodes, "test", ins, outs, init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 9)
    return model


def run_ort(model, inputs: dict) -> list:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def build(model, inputs: dict, opt_level: int = 3):
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in inputs.items()})
    with tc.transform.PassContext(opt_level=opt_level):
        return relay.build(mod, target="llvm", params=params)


def poison(executor) -> None:
    """NaN (or the dtype's max) in every kernel output, so a kernel that skips an element fails."""
    for node, arr in zip(executor.nodes, executor.arrays):
        if node["op"] == "kernel":
            arr[...] = np.nan if arr.dtype.kind == "f" else np.iinfo(arr.dtype).max if arr.dtype.kind in "iu" else True


def run_lib(lib, inputs: dict) -> list:
    ex = lib["default"](tc.cpu(0))
    poison(ex)
    m = graph_executor.GraphModule(ex)
    m.set_input(**inputs)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def check_model(model, inputs: dict, rtol=1e-5, atol=1e-5, opt_level: int = 3):
    """Build and run ``model`` and compare every output with onnxruntime's."""
    expected = run_ort(model, inputs)
    got = run_lib(build(model, inputs, opt_level), inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return got
