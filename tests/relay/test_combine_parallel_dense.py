"""CombineParallelDense: sibling dense layers on one input become one dense on the concatenated
weights, sliced. Each case runs the model built with and without the pass against onnxruntime
(kernel outputs poisoned first) and checks the graph's shape after it."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import relay
from tilecraft.relay import transform as T
from tilecraft.relay.ir import Call, Function, post_order

from relay_helpers import build, helper, make_model, run_lib, run_ort

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


def _ops(lib_or_mod) -> list:
    """The operator names inside the fused groups of an optimised module."""
    names = []
    for n in post_order(lib_or_mod["main"].body):
        if type(n) is Call and isinstance(n.op, Function):
            names += [c.op.name for c in post_order(n.op.body) if type(c) is Call and not isinstance(c.op, Function)]
    return names


def _optimized(model, inputs, disabled=()):
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in inputs.items()})
    with tc.transform.PassContext(opt_level=3, disabled_pass=list(disabled)):
        return relay.build_module.optimize(mod, "llvm", params)[0]


def qkv_model(rng, S, K, widths, shared=True, bias=None, extra_out=()):
    """Three (or more) MatMul + bias on the same input ``x`` (or one input each), the results
    mixed so that every branch reaches the output. ``bias[i]`` False: branch i has none;
    ``extra_out``: MatMul results (``m<i>``) that are graph outputs too."""
    names = [f"x{i}" for i in range(len(widths))] if not shared else ["x"] * len(widths)
    inputs = {n: rng.uniform(-1, 1, (1, S, K)).astype("float32") for n in dict.fromkeys(names)}
    nodes, inits = [], {}
    outs = []
    for i, (n, w) in enumerate(zip(names, widths)):
        inits[f"w{i}"] = rng.uniform(-1, 1, (K, w)).astype("float32")
        nodes.append(helper.make_node("MatMul", [n, f"w{i}"], [f"m{i}"]))
        if bias is None or bias[i]:
            inits[f"b{i}"] = rng.uniform(-1, 1, (w,)).astype("float32")
            nodes.append(helper.make_node("Add", [f"m{i}", f"b{i}"], [f"y{i}"]))
            outs.append(f"y{i}")
        else:
            outs.append(f"m{i}")
    return make_model(nodes, inputs, outs + [f"m{i}" for i in extra_out], inits), inputs


def _groups(mod) -> list:
    """The operator names of each fused group of an optimised module."""
    return [[c.op.name for c in post_order(n.op.body) if type(c) is Call and not isinstance(c.op, Function)]
            for n in post_order(mod["main"].body) if type(n) is Call and isinstance(n.op, Function)]


@pytest.mark.parametrize("widths", [(16, 16, 32), (5, 7, 9)])
def test_biases_fold_into_the_combined_dense(rng, widths):
    """Every branch adds a bias after its MatMul (through the importer's reshape): one add of the
    concatenated biases in the combined dense layer's kernel, the slices carry no add; the
    outputs (kernel outputs poisoned) match onnxruntime."""
    model, inputs = qkv_model(rng, 12, 20, widths)
    groups = _groups(_optimized(model, inputs))
    dense = [g for g in groups if "nn.dense" in g or "nn.contrib_dense_pack" in g]
    assert len(dense) == 1 and dense[0].count("add") == 1
    assert not any("add" in g for g in groups if g not in dense)
    for g, e in zip(run_lib(build(model, inputs), inputs), run_ort(model, inputs)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["a branch without bias", "a MatMul result read twice"])
def test_biases_left_where_not_every_branch_has_one(rng, case):
    """The layers still combine; their biases stay separate adds (one per biased branch)."""
    if case == "a branch without bias":
        model, inputs = qkv_model(rng, 12, 20, (16, 16, 32), bias=(True, False, True))
    else:
        model, inputs = qkv_model(rng, 12, 20, (16, 16, 32), extra_out=(1,))
    groups = _groups(_optimized(model, inputs))
    dense = [g for g in groups if "nn.dense" in g or "nn.contrib_dense_pack" in g]
    assert len(dense) == 1 and "add" not in dense[0]
    assert sum(g.count("add") for g in groups) == (2 if case == "a branch without bias" else 3)
    for g, e in zip(run_lib(build(model, inputs), inputs), run_ort(model, inputs)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("widths", [(16, 16, 32), (5, 7, 9), (32, 32, 32, 16)])
def test_combined_dense_matches_onnxruntime(rng, widths):
    """Widths that the micro-kernel GEMM takes (multiples of the vector lanes) and ones it does
    not (the generic dense with tails); S = 12 rows, K = 20 (not a multiple of a block)."""
    model, inputs = qkv_model(rng, 12, 20, widths)
    expected = run_ort(model, inputs)
    with_pass = _optimized(model, inputs)
    without = _optimized(model, inputs, ["CombineParallelDense"])
    dense = ("nn.dense", "nn.contrib_dense_pack")
    assert sum(op in dense for op in _ops(with_pass)) == 1
    assert sum(op in dense for op in _ops(without)) == len(widths)
    assert _ops(with_pass).count("strided_slice") == len(widths)
    got = run_lib(build(model, inputs), inputs)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    with tc.transform.PassContext(opt_level=3, disabled_pass=["CombineParallelDense"]):
        mod, params = relay.frontend.from_onnx(model)
        lib = relay.build(mod, target="llvm", params=params)
    for g, e in zip(run_lib(lib, inputs), expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_dense_on_different_inputs_left_alone(rng):
    model, inputs = qkv_model(rng, 12, 20, (16, 16, 32), shared=False)
    mod, params = relay.frontend.from_onnx(model)
    with tc.transform.PassContext(opt_level=3):
        before = T.Sequential([T.InferType(), T.FoldConstant(), T.EliminateCommonSubexpr()])(
            relay.IRModule.from_expr(relay.build_module.bind_params_by_name(mod["main"], params)))
        after = T.CombineParallelDense()(before)
    assert after["main"] is before["main"]
    assert sum(op in ("nn.dense", "nn.contrib_dense_pack") for op in _ops(_optimized(model, inputs))) == 3
    for g, e in zip(run_lib(build(model, inputs), inputs), run_ort(model, inputs)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_min_num_branches_golden(golden, rng):
    """Two siblings: left alone at the default (3), combined with min_num_branches=2; a dense
    with a non-constant weight is never a sibling."""
    x = relay.var("x", shape=(4, 8))
    wv = relay.var("wv", shape=(6, 8))
    w = [relay.const(rng.uniform(-1, 1, (n, 8)).astype("float32")) for n in (3, 5)]
    a, b = (relay.nn.dense(x, wi) for wi in w)
    c = relay.nn.dense(x, wv)
    mod = T.InferType()(relay.IRModule.from_expr(relay.Function([x, wv], relay.Tuple([a, b, c]))))
    assert T.CombineParallelDense()(mod)["main"] is mod["main"]
    out = T.CombineParallelDense(min_num_branches=2)(mod)
    golden("relay_combine_parallel_dense", str(out))
    with tc.transform.PassContext(opt_level=3):
        lib = relay.build(out, "llvm")
    ex = lib["default"](tc.cpu(0))
    m = tc.contrib.graph_executor.GraphModule(ex)
    xv = rng.uniform(-1, 1, (4, 8)).astype("float32")
    wvv = rng.uniform(-1, 1, (6, 8)).astype("float32")
    m.run(x=xv, wv=wvv)
    for i, ref in enumerate((xv @ w[0].data.T, xv @ w[1].data.T, xv @ wvv.T)):
        np.testing.assert_allclose(m.get_output(i).numpy(), ref, rtol=1e-5, atol=1e-6)


def test_min_num_branches_error():
    with pytest.raises(relay.RelayError, match="min_num_branches must be an integer >= 2, got 1"):
        T.CombineParallelDense(min_num_branches=1)
