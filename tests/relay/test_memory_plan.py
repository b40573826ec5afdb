"""Static memory planning: no two tensors whose lifetimes overlap share storage (a property over
random graphs), and planned models compute what onnxruntime does on graphs with many live
tensors (every storage poisoned first); the summary against one buffer per tensor."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilecraft as tc
from tilecraft import relay
from tilecraft.relay.backend.memory_plan import plan_memory, tensor_bytes
from tilecraft.runtime.graph_executor import GraphExecutorError, memory_use

from relay_helpers import build, check_model, helper, make_model, run_lib, run_ort

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


@st.composite
def graphs(draw):
    """A random executor graph: inputs, then kernels reading earlier nodes, some outputs."""
    n_in = draw(st.integers(1, 3))
    nodes = [{"op": "input", "name": f"x{i}", "shape": [4], "dtype": "float32"} for i in range(n_in)]
    for k in range(draw(st.integers(1, 14))):
        inputs = draw(st.lists(st.integers(0, len(nodes) - 1), min_size=1, max_size=3))
        shape = [draw(st.sampled_from([1, 3, 8, 50, 64]))]
        dtype = draw(st.sampled_from(["float32", "float64", "int8", "bool"]))
        nodes.append({"op": "kernel", "name": f"k{k}", "func": f"k{k}", "inputs": inputs, "shape": shape,
                      "dtype": dtype})
    kernels = [i for i, n in enumerate(nodes) if n["op"] == "kernel"]
    outputs = sorted(set(draw(st.lists(st.sampled_from(kernels), min_size=1, max_size=3))))
    return {"format": 1, "nodes": nodes, "outputs": outputs}


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_no_overlapping_lifetimes_share_storage(graph):
    planned = plan_memory(graph)
    nodes = planned["nodes"]
    assert graph["nodes"] is not nodes and "storage_id" not in graph["nodes"][-1]   # the input is untouched
    end = len(nodes)
    last = {}
    for nid, node in enumerate(nodes):
        for i in node.get("inputs", ()):
            last[i] = nid
    live = {}
    for nid, node in enumerate(nodes):
        if node["op"] == "kernel":
            # written at its step, read up to its last reader (the end for an output)
            live[nid] = (nid, end if nid in planned["outputs"] else last.get(nid, nid))
            assert planned["storage"][node["storage_id"]] >= tensor_bytes(node)
    for a in live:
        for b in live:
            if a < b and nodes[a]["storage_id"] == nodes[b]["storage_id"]:
                # b is written after a's last read (b's own step reading a counts as overlap)
                assert live[a][1] < live[b][0], (a, b, live[a], live[b])
    use = memory_use(planned)
    assert use["planned_bytes"] <= use["per_tensor_bytes"] or use["storages"] < use["tensors"]


def test_a_chain_reuses_two_storages():
    nodes = [{"op": "input", "name": "x", "shape": [256], "dtype": "float32"}]
    for k in range(6):
        nodes.append({"op": "kernel", "name": f"k{k}", "func": f"k{k}", "inputs": [k], "shape": [256],
                      "dtype": "float32"})
    planned = plan_memory({"format": 1, "nodes": nodes, "outputs": [6]})
    # each kernel's output beside its input's; the output (never freed) takes a dead one's storage
    assert [n.get("storage_id") for n in planned["nodes"]] == [None, 0, 1, 0, 1, 0, 1]
    assert planned["storage"] == [1024, 1024]


def many_live_tensors(rng):
    """Eight branches of the input alive at once (each a different conv or element-wise op),
    added pairwise in a tree and concatenated with the input: every intermediate is read late."""
    x = rng.uniform(-1, 1, (1, 4, 6, 6)).astype("float32")
    inits, nodes, branches = {}, [], []
    for b in range(8):
        w = f"w{b}"
        inits[w] = rng.uniform(-1, 1, (4, 4, 3, 3)).astype("float32")
        nodes.append(helper.make_node("Conv", ["x", w], [f"c{b}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node(["Relu", "Sigmoid", "Tanh", "Neg"][b % 4], [f"c{b}"], [f"b{b}"]))
        branches.append(f"b{b}")
    level = 0
    while len(branches) > 1:
        nxt = []
        for i in range(0, len(branches), 2):
            out = f"s{level}_{i}"
            nodes.append(helper.make_node("Mul" if level % 2 else "Add", [branches[i], branches[i + 1]], [out]))
            nxt.append(out)
        branches, level = nxt, level + 1
    nodes.append(helper.make_node("Concat", ["x", branches[0], "b3"], ["y"], axis=1))
    nodes.append(helper.make_node("Relu", ["b5"], ["z"]))
    return make_model(nodes, {"x": x}, ["y", "z"], inits), {"x": x}


def test_planned_model_matches_onnxruntime(rng):
    model, inputs = many_live_tensors(rng)
    lib = build(model, inputs)
    use = memory_use(lib.graph)
    assert use["storages"] < use["tensors"]           # storage is shared...
    got = check_model(model, inputs, rtol=1e-5, atol=1e-5)   # ...and every output is right (poisoned first)
    with tc.transform.PassContext(opt_level=3, disabled_pass=["PlanMemory"]):
        mod, params = relay.frontend.from_onnx(model)
        unplanned = relay.build(mod, target="llvm", params=params)
    assert "storage" not in unplanned.graph
    assert memory_use(unplanned.graph)["planned_bytes"] == use["per_tensor_bytes"]
    for g, u in zip(got, run_lib(unplanned, inputs)):
        np.testing.assert_array_equal(g, u)


def test_repeated_runs_and_exported_plan(rng, tmp_path):
    """Storage reused within a run must not leak into the next run's results, in process or
    from an exported library."""
    model, inputs = many_live_tensors(rng)
    expected = run_ort(model, inputs)
    lib = build(model, inputs)
    ex = lib["default"](tc.cpu(0))
    second = {"x": rng.uniform(-1, 1, inputs["x"].shape).astype("float32")}
    for feed in (inputs, second, inputs):
        ex.set_input(**feed)
        ex.run()
        for k, e in enumerate(run_ort(model, feed)):
            np.testing.assert_allclose(ex.get_output(k).numpy(), e, rtol=1e-5, atol=1e-5)
    path = lib.export_library(str(tmp_path / "m.so"))
    loaded = tc.runtime.load_module(path)
    assert loaded.graph["storage"] == lib.graph["storage"]
    assert loaded.memory_summary() == lib.memory_summary()
    np.testing.assert_allclose(run_lib(loaded, inputs)[0], expected[0], rtol=1e-5, atol=1e-5)


def test_memory_summary_of_a_resnet_like_chain(rng):
    x = rng.uniform(-1, 1, (1, 8, 16, 16)).astype("float32")
    inits, nodes, prev = {}, [], "x"
    for k in range(6):
        inits[f"w{k}"] = rng.uniform(-0.3, 0.3, (8, 8, 3, 3)).astype("float32")
        nodes.append(helper.make_node("Conv", [prev, f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"]))
        if k % 2:
            nodes.append(helper.make_node("Add", [f"r{k}", f"r{k - 1}"], [f"a{k}"]))
            prev = f"a{k}"
        else:
            prev = f"r{k}"
    model = make_model(nodes, {"x": x}, [prev], inits)
    lib = build(model, {"x": x})
    use = memory_use(lib.graph)
    assert use["planned_bytes"] <= 0.5 * use["per_tensor_bytes"]
    assert lib.memory_summary() == (f"memory: {use['tensors']} intermediate tensors, "
                                    f"{use['per_tensor_bytes'] / 1e6:.2f} MB one buffer each, "
                                    f"{use['planned_bytes'] / 1e6:.2f} MB planned in {use['storages']} storages "
                                    f"({use['planned_bytes'] / use['per_tensor_bytes']:.2f}x)")
    np.testing.assert_allclose(run_lib(lib, {"x": x})[0], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_mod_name_and_target_host(rng):
    model, inputs = many_live_tensors(rng)
    mod, params = relay.frontend.from_onnx(model)
    with tc.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", target_host="llvm", params=params, mod_name="net")
    kernels = [n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"]
    assert kernels and all(k.startswith("net_fused_") for k in kernels)
    ex = lib["net"](tc.cpu(0))
    ex.set_input(**inputs)
    ex.run()
    np.testing.assert_allclose(ex.get_output(0).numpy(), run_ort(model, inputs)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(GraphExecutorError, match=r"built with mod_name='net': make its executor with lib\['net'\]"):
        lib["default"]
    with pytest.raises(relay.RelayError, match="target_host must be an llvm target .* got 'cuda'"):
        relay.build(mod, target="llvm", target_host="cuda", params=params)
    with pytest.raises(relay.RelayError, match="mod_name must be a name made of letters, digits and '_'"):
        relay.build(mod, target="llvm", params=params, mod_name="my-net")
    with pytest.raises(relay.RelayError, match="relay.build: unknown target kind 'tpu'"):
        relay.build(mod, target="llvm", target_host="tpu", params=params)
