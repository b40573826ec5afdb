"""Each graph pass on a small graph: the printed module after it (golden files under
tests/golden/relay_*.txt; refresh with --update-golden), and its result run against numpy."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import relay
from tilecraft.relay import transform as T

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


def conv_bn_relu(rng):
    x = relay.var("x", shape=(1, 3, 6, 6))
    w = relay.const(rng.uniform(-1, 1, (4, 3, 3, 3)).astype("float32"))
    g, b, m = (relay.const(rng.uniform(-1, 1, 4).astype("float32")) for _ in range(3))
    v = relay.const(rng.uniform(0.5, 1.5, 4).astype("float32"))
    y = relay.nn.conv2d(x, w, padding=(1, 1))
    y = relay.nn.batch_norm(y, g, b, m, v, epsilon=1e-3)[0]
    y = relay.nn.relu(y)
    return relay.IRModule.from_expr(relay.Function([x], y)), (w, g, b, m, v)


def run_passes(mod, passes, opt_level=3):
    with tc.transform.PassContext(opt_level=opt_level):
        return T.Sequential(passes)(mod)


def test_infer_type_golden(golden):
    x = relay.var("x", shape=(2, 3))
    y = relay.nn.softmax(relay.add(x, relay.const(1.0)), axis=1)
    z = relay.Tuple([y, relay.sum(y, axis=1, keepdims=True)])
    golden("relay_infer_type", str(T.InferType()(relay.IRModule.from_expr(z))))


def test_simplify_inference_and_fold_constant_golden(golden):
    rng = np.random.default_rng(0)
    mod, _ = conv_bn_relu(rng)
    after_simplify = run_passes(mod, [T.InferType(), T.SimplifyInference()])
    golden("relay_simplify_inference", str(after_simplify))
    golden("relay_fold_constant", str(run_passes(after_simplify, [T.FoldConstant()])))


def test_fold_scale_axis_golden_and_value(golden, rng):
    mod, (w, g, b, m, v) = conv_bn_relu(rng)
    folded = run_passes(mod, [T.InferType(), T.SimplifyInference(), T.FoldConstant(), T.FoldScaleAxis(),
                              T.FoldConstant()])
    golden("relay_fold_scale_axis", str(folded))
    conv = folded["main"].body.args[0].args[0]
    assert conv.op.name == "nn.conv2d"
    scale = g.data / np.sqrt(v.data + 1e-3)
    np.testing.assert_allclose(conv.args[1].data, w.data * scale[:, None, None, None], rtol=1e-6)




def test_fuse_ops_golden(golden, rng):
    mod, _ = conv_bn_relu(rng)
    x = relay.var("x", shape=(4, 8))
    y = relay.nn.softmax(relay.reshape(relay.transpose(relay.exp(x), (1, 0)), (2, 16)))
    z = relay.mean(relay.add(y, relay.const(1.0)), axis=1)
    mod2 = relay.IRModule.from_expr(relay.Function([x], z))
    golden("relay_fuse_ops", str(run_passes(mod2, [T.InferType(), T.FuseOps(), T.InferType()])))
    fused = run_passes(mod, [T.InferType(), T.SimplifyInference(), T.FoldConstant(), T.FoldScaleAxis(),
                             T.FoldConstant(), T.FuseOps(), T.InferType()])
    calls = [n for n in relay.ir.post_order(fused["main"].body) if isinstance(n, relay.Call)]
    assert len(calls) == 1 and calls[0].op.attrs["Name"] == "nn_conv2d_add_nn_relu"


def test_fuse_ops_rules():
    """An injective op after a conv starts a new group; a reduction takes its injective inputs
    and ends its group; a value read twice is its own group; opt_level 0 fuses nothing."""
    x = relay.var("x", shape=(1, 2, 4, 4))
    w = relay.var("w", shape=(2, 2, 1, 1))
    c = relay.nn.relu(relay.nn.conv2d(x, w))
    r = relay.reshape(c, (2, 16))
    s = relay.sum(relay.exp(r), axis=1)
    out = relay.Tuple([relay.sqrt(s), relay.negative(r)])
    mod = relay.IRModule.from_expr(relay.Function([x, w], out))
    names = lambda m: [n.op.attrs["Name"] for n in relay.ir.post_order(m["main"].body)   # noqa: E731
                       if isinstance(n, relay.Call)]
    fused = run_passes(mod, [T.InferType(), T.FuseOps()])
    assert names(fused) == ["nn_conv2d_nn_relu", "reshape", "exp_sum", "sqrt", "negative"]
    assert len(names(run_passes(mod, [T.InferType(), T.FuseOps()], opt_level=0))) == 7


def test_dead_code_elimination():
    x = relay.var("x", shape=(3,))
    t = relay.Tuple([relay.exp(x), relay.sqrt(x)])
    mod = relay.IRModule.from_expr(relay.Function([x], relay.TupleGetItem(t, 1)))
    out = run_passes(mod, [T.DeadCodeElimination(), T.InferType()])
    assert out["main"].body.op.name == "sqrt"
    assert "exp" not in str(out)


def test_pass_levels_and_print_after_all(capsys):
    """A pass above the context's opt_level is skipped unless required; disabled passes never
    run; PrintAfterAll prints the module after each pass that ran."""
    x = relay.var("x", shape=(2,))
    mod = relay.IRModule.from_expr(relay.Function([x], relay.add(x, relay.exp(relay.const(np.ones(2, "float32"))))))
    seq = [T.InferType(), T.FoldConstant()]
    with tc.transform.PassContext(opt_level=1):
        assert "exp" in str(T.Sequential(seq)(mod))
    with tc.transform.PassContext(opt_level=1, required_pass=["FoldConstant"], instruments=[T.PrintAfterAll()]):
        assert "exp" not in str(T.Sequential(seq)(mod))
    printed = capsys.readouterr().out
    assert "# after InferType" in printed and "# after FoldConstant" in printed
    with tc.transform.PassContext(opt_level=3, disabled_pass=["FoldConstant"]):
        assert "exp" in str(T.Sequential(seq)(mod))


def test_fold_constant_value(rng):
    a = rng.uniform(-1, 1, (3, 4)).astype("float32")
    x = relay.var("x", shape=(4, 3))
    y = relay.add(x, relay.transpose(relay.multiply(relay.const(a), relay.const(2.0))))
    out = run_passes(relay.IRModule.from_expr(relay.Function([x], y)), [T.InferType(), T.FoldConstant()])
    np.testing.assert_allclose(out["main"].body.args[1].data, (a * 2).T)


def test_dead_code_drops_uncalled_functions():
    x = relay.var("x", shape=(3,))
    y = relay.var("y", shape=(3,))
    mod = relay.IRModule({"main": relay.Function([x], relay.exp(x)), "helper": relay.Function([y], relay.sqrt(y))})
    out = run_passes(mod, [T.DeadCodeElimination()])
    assert list(out.functions()) == ["main"] and out["main"] is mod["main"]


def test_eliminate_common_subexpr_golden_and_value(golden, rng):
    """Two equal chains (and equal small constants) computed once; the result unchanged."""
    x = relay.var("x", shape=(2, 5))
    a = relay.nn.relu(relay.multiply(x, relay.const(2.0)))
    b = relay.nn.relu(relay.multiply(x, relay.const(2.0)))
    c = relay.add(a, b)
    mod = relay.IRModule.from_expr(relay.Function([x], relay.Tuple([c, relay.exp(b)])))
    out = run_passes(mod, [T.InferType(), T.EliminateCommonSubexpr()])
    golden("relay_eliminate_common_subexpr", str(out))
    with tc.transform.PassContext(opt_level=3):
        lib = relay.build(mod, "llvm")
    m = tc.contrib.graph_executor.GraphModule(lib["default"](tc.cpu(0)))
    xv = rng.uniform(-1, 1, (2, 5)).astype("float32")
    m.run(x=xv)
    np.testing.assert_allclose(m.get_output(0).numpy(), 2 * np.maximum(2 * xv, 0), rtol=1e-6)
    np.testing.assert_allclose(m.get_output(1).numpy(), np.exp(np.maximum(2 * xv, 0)), rtol=1e-6)


def test_fuse_ops_diamonds(rng):
    """A value read twice joins its readers' group when both are in one group (GELU's input);
    not when they are in different groups, nor when both groups have an anchor."""
    x = relay.var("x", shape=(2, 8))
    h = relay.add(x, relay.const(1.0))
    gelu = relay.multiply(relay.multiply(h, relay.const(0.5)),
                          relay.add(relay.const(1.0), relay.erf(relay.multiply(h, relay.const(0.7)))))
    split = relay.Tuple([relay.exp(h), relay.nn.softmax(h)])
    names = lambda m: [n.op.attrs["Name"] for n in relay.ir.post_order(m["main"].body)   # noqa: E731
                       if isinstance(n, relay.Call)]
    one = run_passes(relay.IRModule.from_expr(relay.Function([x], gelu)), [T.InferType(), T.FuseOps()])
    assert names(one) == ["add_multiply_multiply_erf_add_multiply"]
    two = run_passes(relay.IRModule.from_expr(relay.Function([x], split)), [T.InferType(), T.FuseOps()])
    assert names(two) == ["add", "exp", "nn_softmax"]
    with tc.transform.PassContext(opt_level=3):
        lib = relay.build(relay.IRModule.from_expr(relay.Function([x], gelu)), "llvm")
    m = tc.contrib.graph_executor.GraphModule(lib["default"](tc.cpu(0)))
    xv = rng.uniform(-2, 2, (2, 8)).astype("float32")
    m.run(x=xv)
    from scipy.special import erf
    hv = xv + 1
    np.testing.assert_allclose(m.get_output(0).numpy(), hv * 0.5 * (1 + erf(hv * 0.7)), rtol=2e-6, atol=1e-6)
