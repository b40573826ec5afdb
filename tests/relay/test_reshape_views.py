"""Fused groups that only reshape run no kernel: the executor passes views (the producer writes
in the reshaped shape, or the readers get views of the source). Each graph against onnxruntime
with every kernel output poisoned first, run again after export and reload."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft.relay.backend.reshape_views import elide_reshape_kernels

from relay_helpers import build, helper, make_model, run_lib, run_ort

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


def _kernels(lib):
    return [n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"]


def _check(model, inputs, tmp_path):
    expected = run_ort(model, inputs)
    lib = build(model, inputs)
    for g, e in zip(run_lib(lib, inputs), expected):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    so = tmp_path / "m.so"
    lib.export_library(str(so))
    for g, e in zip(run_lib(tc.runtime.load_module(str(so)), inputs), expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    return lib


def test_encoder_like_graph_has_no_reshape_kernel(rng, tmp_path):
    """[1, S, H] input -> (reshape) dense + bias -> layer norm -> [1, S, H] output: the input's
    reshape becomes a view, the output's is written by the layer norm in its shape."""
    S, H = 6, 32
    x = rng.uniform(-1, 1, (1, S, H)).astype("float32")
    inits = {"w": rng.uniform(-1, 1, (H, H)).astype("float32"), "b": rng.uniform(-1, 1, (H,)).astype("float32"),
             "g": rng.uniform(0.5, 1.5, (H,)).astype("float32"), "be": rng.uniform(-1, 1, (H,)).astype("float32")}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Add", ["a", "x"], ["r"]),
             helper.make_node("LayerNormalization", ["r", "g", "be"], ["y"], epsilon=1e-5)]
    lib = _check(make_model(nodes, {"x": x}, ["y"], inits), {"x": x}, tmp_path)
    assert not any(k.startswith("fused_reshape") and "transpose" not in k for k in _kernels(lib)), _kernels(lib)


def test_reshape_of_an_input_as_the_output_keeps_its_kernel(rng, tmp_path):
    x = rng.uniform(-1, 1, (2, 3, 4)).astype("float32")
    inits = {"s": np.array([6, 4], "int64")}
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"])], {"x": x}, ["y"], inits)
    lib = _check(model, {"x": x}, tmp_path)
    assert len(_kernels(lib)) == 1


def test_reshape_of_a_value_read_twice(rng, tmp_path):
    """exp(x) is read by a reshape (then a softmax on rows) and by an add in its own shape:
    the softmax kernel gets a view of exp's output."""
    x = rng.uniform(-1, 1, (2, 3, 8)).astype("float32")
    inits = {"s": np.array([6, 8], "int64"), "s2": np.array([2, 3, 8], "int64")}
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Reshape", ["e", "s"], ["r"]),
             helper.make_node("Softmax", ["r"], ["p"], axis=-1), helper.make_node("Reshape", ["p", "s2"], ["q"]),
             helper.make_node("Add", ["q", "e"], ["y"])]
    _check(make_model(nodes, {"x": x}, ["y"], inits), {"x": x}, tmp_path)


def test_elide_on_a_hand_written_graph():
    """A chain of two reshapes of a kernel read elsewhere too: both become views of it, its
    other reader keeps its shape, the final reader gets views (arg_shapes)."""
    graph = {"format": 1, "outputs": [4], "nodes": [
        {"op": "input", "name": "x", "shape": [2, 6], "dtype": "float32"},
        {"op": "kernel", "name": "k", "func": "k", "inputs": [0], "shape": [2, 6], "dtype": "float32"},
        {"op": "kernel", "name": "r1", "func": "r1", "inputs": [1], "shape": [12], "dtype": "float32"},
        {"op": "kernel", "name": "r2", "func": "r2", "inputs": [2], "shape": [3, 4], "dtype": "float32"},
        {"op": "kernel", "name": "z", "func": "z", "inputs": [3, 1], "shape": [3, 4], "dtype": "float32"}]}
    out = elide_reshape_kernels(graph, {"r1", "r2"})
    assert [n["name"] for n in out["nodes"]] == ["x", "k", "z"]
    assert out["nodes"][1]["shape"] == [2, 6] and "arg_shapes" not in out["nodes"][1]
    assert out["nodes"][2]["inputs"] == [1, 1] and out["nodes"][2]["arg_shapes"] == [[3, 4], [2, 6], [3, 4]]
    assert out["outputs"] == [2]
