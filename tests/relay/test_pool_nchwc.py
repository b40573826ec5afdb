"""Pooling in NCHW[x]c (``topi/layout.py`` ``pool2d_NCHWc``, ``global_pool_NCHWc``): after a
blocked convolution, AlterOpLayout keeps max / average / global pooling in the blocked layout
(no layout transform around them); each kind, with padding, strides, a padded average counting
or not counting the padding, against onnxruntime on poisoned buffers, and the layout errors."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import relay

from relay_helpers import build, check_model, helper, make_model, run_lib, run_ort

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")

POOLS = {
    "max3x3s2p1": ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "max2x2": ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2])),
    "avg3x3p1_exclude": ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    "avg3x3s2p1_include": ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                               count_include_pad=1)),
    "global_avg": ("GlobalAveragePool", {}),
    "global_max": ("GlobalMaxPool", {}),
}


def conv_pool(rng, kind):
    op, attrs = POOLS[kind]
    inputs = {"x": rng.uniform(-1, 1, (1, 16, 11, 9)).astype("float32")}
    inits = {"w": rng.uniform(-0.3, 0.3, (32, 16, 3, 3)).astype("float32"),
             "w2": rng.uniform(-0.3, 0.3, (32, 32, 1, 1)).astype("float32")}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node(op, ["r"], ["p"], **attrs),
             helper.make_node("Conv", ["p", "w2"], ["y"])]        # blocked again after the pool
    return make_model(nodes, inputs, ["y"], inits), inputs


@pytest.mark.parametrize("kind", sorted(POOLS))
def test_blocked_pool_matches_onnxruntime(rng, kind):
    model, inputs = conv_pool(rng, kind)
    check_model(model, inputs, rtol=1e-5, atol=1e-5)
    lib = build(model, inputs)
    kernels = [n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"]
    # one transform in, one out; none around the pool
    assert sum("layout_transform" in k for k in kernels) == 2, kernels
    pool = next(n for n in lib.graph["nodes"] if n["op"] == "kernel" and "pool" in n["func"])
    assert len(pool["shape"]) == 5


def test_pool_layout_errors():
    x = relay.var("x", shape=(1, 2, 4, 4, 16))
    with pytest.raises(relay.RelayError, match="layout must be NCHW, NHWC or NCHW<x>c, got 'NWHC'"):
        relay.transform.InferType()(relay.IRModule.from_expr(relay.Function(
            [x], relay.nn.max_pool2d(x, pool_size=(2, 2), layout="NWHC"))))
    with pytest.raises(relay.RelayError, match=r"expects NHWC data, got Tensor\[\(1, 2, 4, 4, 16\)"):
        relay.transform.InferType()(relay.IRModule.from_expr(relay.Function(
            [x], relay.nn.max_pool2d(x, pool_size=(2, 2), layout="NHWC"))))
    with pytest.raises(relay.RelayError, match=r"expects NCHW8c data, got Tensor\[\(1, 2, 4, 4, 16\)"):
        relay.transform.InferType()(relay.IRModule.from_expr(relay.Function(
            [x], relay.nn.global_avg_pool2d(x, layout="NCHW8c"))))


def test_blocked_pool_without_alter_op_layout_is_nchw(rng):
    """The pass disabled: the pools stay NCHW (4-d), the same values."""
    model, inputs = conv_pool(rng, "max3x3s2p1")
    mod, params = relay.frontend.from_onnx(model)
    with tc.transform.PassContext(opt_level=3, disabled_pass=["AlterOpLayout"]):
        lib = relay.build(mod, target="llvm", params=params)
    pool = next(n for n in lib.graph["nodes"] if n["op"] == "kernel" and "pool" in n["func"])
    assert len(pool["shape"]) == 4
    np.testing.assert_allclose(run_lib(lib, inputs)[0], run_ort(model, inputs)[0], rtol=1e-5, atol=1e-5)
