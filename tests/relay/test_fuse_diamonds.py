"""FuseOps through diamonds (TVM's post-dominator rule): golden text on small graphs (a residual
connection, a softmax written out as max/subtract/exp/sum/divide inside attention), the
groups' invariants on random graphs, and fused builds against unfused ones on random inputs."""
import random

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import relay
from tilecraft.relay import transform as T
from tilecraft.relay.ir import Call, Function, Tuple, children, post_order
from tilecraft.relay.op import OpPattern

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


def fuse(expr, opt_level=3):
    mod = relay.IRModule.from_expr(relay.Function(relay.ir.free_vars(expr), expr))
    with tc.transform.PassContext(opt_level=opt_level):
        return T.Sequential([T.InferType(), T.FuseOps(), T.InferType()])(mod)


def kernel_names(mod):
    return [n.op.attrs["Name"] for n in post_order(mod["main"].body)
            if isinstance(n, Call) and isinstance(n.op, Function)]


def residual_diamond():
    """conv-relu read by a second conv (through a scale) and by a SiLU branch that meets it in the
    residual add: the first conv's result stays its group's result (one path to the add goes
    through the second conv, whose input no op enters); the SiLU branch, itself a diamond (h read
    by sigmoid and multiply), joins the second conv's epilogue where it meets it."""
    x = relay.var("x", shape=(1, 4, 5, 5))
    w1, w2 = relay.var("w1", shape=(4, 4, 3, 3)), relay.var("w2", shape=(4, 4, 3, 3))
    a = relay.nn.relu(relay.nn.conv2d(x, w1, padding=1))
    b = relay.nn.conv2d(relay.multiply(a, relay.const(0.5)), w2, padding=1)
    h = relay.add(a, relay.const(1.0))
    return relay.nn.relu(relay.add(b, relay.multiply(h, relay.sigmoid(h))))


def attention_softmax_diamond():
    """Scores read by the row max and by the subtraction, exp read by the row sum and by the
    division: both diamonds pass through a reduction, which ends a group, so neither closes."""
    q, k, v = (relay.var(n, shape=(2, 5, 8)) for n in "qkv")
    s = relay.multiply(relay.nn.batch_matmul(q, k), relay.const(0.35))
    e = relay.exp(relay.subtract(s, relay.max(s, axis=-1, keepdims=True)))
    p = relay.divide(e, relay.sum(e, axis=-1, keepdims=True))
    return relay.nn.batch_matmul(p, v, transpose_b=False)


def test_residual_diamond_golden(golden):
    mod = fuse(residual_diamond())
    golden("relay_fuse_residual_diamond", str(mod))
    assert kernel_names(mod) == ["nn_conv2d_nn_relu", "multiply", "nn_conv2d_add_sigmoid_multiply_add_nn_relu"]


def test_attention_softmax_diamond_golden(golden):
    mod = fuse(attention_softmax_diamond())
    golden("relay_fuse_softmax_diamond", str(mod))
    assert kernel_names(mod) == ["nn_batch_matmul_multiply", "max", "subtract_exp", "sum", "divide",
                                 "nn_batch_matmul"]


def test_elementwise_value_joins_an_anchor_epilogue():
    """exp(x) meets dense(x) in the add: exp joins the dense kernel as an input of its epilogue
    (it does not enter the dense's own inputs)."""
    x, w = relay.var("x", shape=(4, 8)), relay.var("w", shape=(8, 8))
    out = relay.add(relay.nn.dense(x, w), relay.exp(x))
    assert kernel_names(fuse(out)) == ["nn_dense_exp_add"]
    into_input = relay.nn.dense(relay.exp(x), w)
    assert kernel_names(fuse(into_input)) == ["exp", "nn_dense"]


def test_injective_after_an_anchor_read_twice_ends_the_group():
    """dense read twice by one add, then transposes: the transposes start a new group (before,
    the diamond merge carried them into the dense kernel)."""
    x, w = relay.var("x", shape=(4, 8)), relay.var("w", shape=(8, 8))
    d = relay.nn.dense(x, w)
    out = relay.transpose(relay.transpose(relay.add(d, d), (1, 0)), (1, 0))
    assert kernel_names(fuse(out)) == ["nn_dense_add", "transpose_transpose"]


def random_graph(rnd, n):
    """A random dataflow graph of element-wise, broadcast, injective, reduction and dense ops,
    values read several times (diamonds), sometimes two outputs."""
    x = relay.var("x", shape=(4, 8))
    w = relay.var("w", shape=(8, 8))
    vals = [x]
    for _ in range(n):
        a = rnd.choice(vals[-4:] if rnd.random() < 0.7 else vals)
        b = rnd.choice(vals)
        k = rnd.random()
        if k < 0.3:
            v = relay.tanh(a) if rnd.random() < 0.5 else relay.sigmoid(a)
        elif k < 0.55:
            v = relay.add(a, b)
        elif k < 0.65:
            v = relay.transpose(relay.transpose(a, (1, 0)), (1, 0))
        elif k < 0.75:
            v = relay.subtract(a, relay.sum(b, axis=1, keepdims=True))
        elif k < 0.85:
            v = relay.nn.dense(a, w)
        else:
            v = relay.multiply(a, b)
        vals.append(v)
    outs = [vals[-1]] + ([rnd.choice(vals[1:])] if rnd.random() < 0.3 else [])
    return outs[0] if len(outs) == 1 else Tuple(outs)


def _check_groups(mod):
    """Each primitive function: at most one anchor, no conv/dense reading a value of its own
    group, nothing but element-wise/broadcast ops after an anchor."""
    for call in post_order(mod["main"].body):
        if not (isinstance(call, Call) and isinstance(call.op, Function)):
            continue
        fn = call.op
        ops = [n for n in post_order(fn.body) if isinstance(n, Call)]
        anchors = [n for n in ops if n.op.pattern in (OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.COMM_REDUCE)]
        assert len(anchors) <= 1, fn.attrs["Name"]
        for a in anchors:
            if a.op.pattern == OpPattern.OUT_ELEMWISE_FUSABLE:
                assert all(not isinstance(c, Call) for c in a.args), f"{fn.attrs['Name']}: an op fused into its input"
            after = [n for n in ops if a in post_order(n) and n is not a]
            limit = OpPattern.BROADCAST
            assert all(n.op.pattern <= limit for n in after), f"{fn.attrs['Name']}: {[n.op.name for n in after]}"


def test_random_graphs_fuse_into_valid_groups():
    for seed in range(200):
        rnd = random.Random(seed)
        _check_groups(fuse(random_graph(rnd, rnd.randint(3, 14))))


@pytest.mark.parametrize("seed", [3, 25, 35, 118])
def test_random_graphs_fused_build_matches_unfused(seed, rng):
    rnd = random.Random(seed)
    body = random_graph(rnd, rnd.randint(3, 14))
    mod = relay.IRModule.from_expr(relay.Function(relay.ir.free_vars(body), body))
    inputs = {"x": rng.uniform(-1, 1, (4, 8)).astype("float32"), "w": rng.uniform(-0.5, 0.5, (8, 8)).astype("float32")}
    from relay_helpers import run_lib
    results = []
    for level in (0, 3):
        with tc.transform.PassContext(opt_level=level):
            lib = relay.build(mod, "llvm")
        results.append(run_lib(lib, {k: v for k, v in inputs.items()
                                     if k in [p.name_hint for p in mod["main"].params]}))
    for a, b in zip(*results):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
