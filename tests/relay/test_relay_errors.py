"""One test per documented graph-level error: each names the operator, node, tensor or input."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import relay
from tilecraft.relay import RelayError

from relay_helpers import helper, make_model


def test_unsupported_onnx_op_names_op_and_node():
    model = make_model([helper.make_node("Hardmax", ["a"], ["y"], name="head/hardmax")],
                       {"a": np.ones((2, 3), "float32")}, ["y"])
    with pytest.raises(RelayError, match=r"operator 'Hardmax' \(node 'head/hardmax'\) is not supported"):
        relay.frontend.from_onnx(model)


def test_converter_error_names_node():
    model = make_model([helper.make_node("Reshape", ["a", "s"], ["y"], name="r1")],
                       {"a": np.ones((2, 3), "float32"), "s": np.array([3, 2], "int64")}, ["y"])
    with pytest.raises(RelayError, match=r"Reshape \(node 'r1'\): the shape of Reshape \('s'\) must be a constant"):
        relay.frontend.from_onnx(model)


def test_dynamic_input_needs_shape():
    model = make_model([helper.make_node("Relu", ["a"], ["y"])], {"a": np.ones((2, 3), "float32")}, ["y"])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(RelayError, match=r"input 'a' has a dynamic shape .* shape=\{'a': \(\.\.\.\)\}"):
        relay.frontend.from_onnx(model)
    mod, _ = relay.frontend.from_onnx(model, shape={"a": (4, 3)})
    assert mod["main"].params[0].checked_type.shape == (4, 3)


def test_shape_for_unknown_input():
    model = make_model([helper.make_node("Relu", ["a"], ["y"])], {"a": np.ones((2, 3), "float32")}, ["y"])
    with pytest.raises(RelayError, match=r"shape= names data, which is not an input of the model \(its inputs: a\)"):
        relay.frontend.from_onnx(model, shape={"data": (1, 3)})


def test_unknown_and_missing_attributes():
    x = relay.var("x", shape=(2, 3))
    with pytest.raises(RelayError, match=r"nn.softmax: unknown attribute axes; it takes: axis"):
        relay.op.make_call("nn.softmax", [x], axes=1)
    with pytest.raises(RelayError, match=r"reshape: the attribute 'newshape' is required"):
        relay.op.make_call("reshape", [x])
    with pytest.raises(RelayError, match=r"add: takes 2 arguments, got 1"):
        relay.op.make_call("add", [x])


def test_type_errors_name_the_operator():
    x = relay.var("x", shape=(2, 3))
    y = relay.var("y", shape=(4, 3))
    with pytest.raises(RelayError, match=r"add: shapes \(2, 3\) and \(4, 3\) do not broadcast"):
        relay.transform.InferType()(relay.IRModule.from_expr(relay.add(x, y)))
    with pytest.raises(RelayError, match=r"reshape: cannot reshape Tensor\[\(2, 3\), float32\] \(6 elements\) to \(4,\)"):
        relay.transform.InferType()(relay.IRModule.from_expr(relay.reshape(x, (4,))))
    w = relay.var("w", shape=(4, 2, 3, 3))
    d = relay.var("d", shape=(1, 3, 8, 8))
    with pytest.raises(RelayError, match=r"nn.conv2d: 3 input channels in 1 groups need a kernel of shape \(4, 3, KH, KW\)"):
        relay.transform.InferType()(relay.IRModule.from_expr(relay.nn.conv2d(d, w)))


def test_untyped_checked_type_and_var_without_shape():
    with pytest.raises(RelayError, match=r"relay.var\('x'\): give its shape"):
        relay.var("x")
    e = relay.exp(relay.var("x", shape=(2,)))
    with pytest.raises(RelayError, match=r"run relay.transform.InferType\(\) on the module first"):
        e.checked_type


def test_bind_unknown_param():
    x = relay.var("x", shape=(2,))
    mod = relay.IRModule.from_expr(relay.Function([x], relay.exp(x)))
    with pytest.raises(RelayError, match=r"bind_params_by_name: w is not a parameter of the function \(its parameters: x\)"):
        relay.build(mod, "llvm", params={"w": np.ones(2, "float32")})


def test_build_for_an_unknown_target_is_refused():
    x = relay.var("x", shape=(2,))
    with pytest.raises(RelayError, match=r"relay.build: unknown target kind 'vulkan'"):
        relay.build(relay.IRModule.from_expr(relay.Function([x], relay.exp(x))), "vulkan")
    # opencl is a kernel-level target (source only): the graph level refuses it
    with pytest.raises(RelayError, match=r"relay.build: target 'opencl' is not supported; the graph level builds "
                                         r"for 'llvm' \(the CPU\) and 'cuda'"):
        relay.build(relay.IRModule.from_expr(relay.Function([x], relay.exp(x))), "opencl")


def test_set_input_errors():
    from tilecraft.runtime.graph_executor import GraphExecutorError
    x = relay.var("x", shape=(2,))
    lib = relay.build(relay.IRModule.from_expr(relay.Function([x], relay.exp(x))), "llvm")
    m = tc.contrib.graph_executor.GraphModule(lib["default"](tc.cpu(0)))
    with pytest.raises(GraphExecutorError, match=r"the model has no input 'y'; its inputs: x"):
        m.set_input("y", np.ones(2, "float32"))
    with pytest.raises(GraphExecutorError, match=r"input 'x' has shape \[2\], got \[3\]"):
        m.set_input("x", np.ones(3, "float32"))
    with pytest.raises(GraphExecutorError, match=r"input 'x' has dtype float32, got float64"):
        m.set_input("x", np.ones(2))
    with pytest.raises(GraphExecutorError, match=r"output 1 does not exist; the model has 1 output"):
        m.get_output(1)


def test_relay_works_without_onnx():
    """onnx is imported by from_onnx only: without it the graph level still builds and runs,
    and from_onnx says what to install."""
    import subprocess
    import sys
    code = """
import sys; sys.modules["onnx"] = None
import numpy as np, tilecraft as tc
from tilecraft import relay
x = relay.var("x", shape=(3,))
lib = relay.build(relay.IRModule.from_expr(relay.Function([x], relay.exp(x))), "llvm")
m = tc.contrib.graph_executor.GraphModule(lib["default"](tc.cpu(0)))
m.set_input("x", np.ones(3, "float32")); m.run()
assert np.allclose(m.get_output(0).numpy(), np.e)
try:
    relay.frontend.from_onnx(object())
except ImportError as e:
    print("ImportError:", e)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "ImportError: relay.frontend.from_onnx needs the onnx package: pip install onnx" in r.stdout, r.stdout
