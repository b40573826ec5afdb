"""AlterOpLayout: convolutions in NCHW[x]c with the values between them kept blocked, layout
transforms only at the graph's input and output and around layout-sensitive operators; golden
text (blocks of an AVX-512 target, the same on AVX2 and AVX-512 hosts), builds
against numpy on random inputs, layout_transform against numpy, and its errors."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import autotune, relay
from tilecraft.relay import transform as T
from tilecraft.relay.ir import Call, post_order

from relay_helpers import run_lib

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


def conv_chain(rng):
    """conv-bias-relu, max pool, conv + per-channel shift + residual add of the pool's output,
    relu, a scalar scale, global pool: 3 -> 32 -> 32 channels."""
    x = relay.var("x", shape=(1, 3, 10, 9))
    c = lambda *s: relay.const(rng.uniform(-0.5, 0.5, s).astype("float32"))   # noqa: E731
    a = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, c(32, 3, 3, 3), padding=1), c(32)))
    p = relay.nn.max_pool2d(a, (2, 2), (2, 2))
    b = relay.add(relay.add(relay.nn.conv2d(p, c(32, 32, 3, 3), padding=1), c(32, 1, 1)), p)
    out = relay.nn.global_avg_pool2d(relay.multiply(relay.nn.relu(b), relay.const(0.5)))
    return relay.IRModule.from_expr(relay.Function([x], out))


def reference(rng_seed):
    """The same graph computed by numpy."""
    rng = np.random.default_rng(rng_seed)
    u = lambda *s: rng.uniform(-0.5, 0.5, s).astype("float32")   # noqa: E731
    w1, b1, w2, s2 = u(32, 3, 3, 3), u(32), u(32, 32, 3, 3), u(32, 1, 1)

    def conv(x, w):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        H, W = x.shape[2:]
        return np.einsum("nchwij,ocij->nohw", np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
                         [:, :, :H, :W], w)

    def run(x):
        a = np.maximum(conv(x, w1) + b1[:, None, None], 0)
        p = a[:, :, :10, :8].reshape(1, 32, 5, 2, 4, 2).max(axis=(3, 5))
        b = np.maximum(conv(p, w2) + s2 + p, 0) * 0.5
        return b.mean(axis=(2, 3), keepdims=True)
    return run


def altered(mod, target="llvm -mcpu=skylake-avx512"):
    """AlterOpLayout for an AVX-512 target (16 lanes: blocks of 32 channels), on any host."""
    with tc.target.Target(target):
        with tc.transform.PassContext(opt_level=3):
            return T.Sequential([T.InferType(), T.AlterOpLayout(), T.FoldConstant()])(mod)


def test_golden_conv_chain(golden):
    mod = conv_chain(np.random.default_rng(0))
    out = altered(mod)
    golden("relay_alter_op_layout", str(out))
    ops = [n.op.name for n in post_order(out["main"].body) if isinstance(n, Call)]
    # the input and the (pooled, 1x1) result only: the max pool and the global pool run blocked
    assert ops.count("layout_transform") == 2 and ops.count("nn.contrib_conv2d_NCHWc") == 2
    pools = [n for n in post_order(out["main"].body) if isinstance(n, Call) and "pool" in n.op.name]
    assert [p.attrs.layout for p in pools] == ["NCHW32c"] * 2
    assert "nn.conv2d" not in ops and "nn.bias_add" not in ops


@pytest.mark.parametrize("layout", [True, False], ids=["alter_op_layout", "nchw"])
def test_build_matches_numpy(layout, rng):
    mod = conv_chain(np.random.default_rng(7))
    x = rng.uniform(-1, 1, (1, 3, 10, 9)).astype("float32")
    with tc.transform.PassContext(opt_level=3, disabled_pass=[] if layout else ["AlterOpLayout"]):
        lib = relay.build(mod, "llvm")
    kernels = [n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"]
    assert any("NCHWc" in k for k in kernels) == layout
    (got,) = run_lib(lib, {"x": x})
    np.testing.assert_allclose(got, reference(7)(x), rtol=1e-4, atol=1e-5)


def test_consecutive_convs_need_no_transform(rng):
    """conv-relu-conv-relu-conv: one transform in, one out, none between."""
    x = relay.var("x", shape=(1, 16, 6, 6))
    y = x
    for cin in (16, 32, 32):
        w = relay.const(rng.uniform(-0.3, 0.3, (32, cin, 3, 3)).astype("float32"))
        y = relay.nn.relu(relay.nn.conv2d(y, w, padding=1))
    mod = relay.IRModule.from_expr(relay.Function([x], y))
    with tc.transform.PassContext(opt_level=3):
        out = T.Sequential([T.InferType(), T.AlterOpLayout()])(mod)
    ops = [n.op.name for n in post_order(out["main"].body) if isinstance(n, Call)]
    assert ops.count("layout_transform") == 2 and ops.count("nn.contrib_conv2d_NCHWc") == 3
    xv = rng.uniform(-1, 1, (1, 16, 6, 6)).astype("float32")
    results = []
    for disabled in ([], ["AlterOpLayout"]):
        with tc.transform.PassContext(opt_level=3, disabled_pass=disabled):
            results.append(run_lib(relay.build(mod, "llvm"), {"x": xv})[0])
    np.testing.assert_allclose(results[0], results[1], rtol=1e-4, atol=1e-5)   # summation orders differ


def test_convs_the_template_does_not_fit_stay_nchw(rng):
    """Grouped, dilated and 6-channel (no block divides it) convolutions are left alone; a
    graph without a convolution comes back as the same module."""
    x = relay.var("x", shape=(1, 8, 7, 7))
    w = lambda *s: relay.const(rng.uniform(-1, 1, s).astype("float32"))   # noqa: E731
    g = relay.nn.conv2d(x, w(8, 2, 3, 3), groups=4, padding=1)
    d = relay.nn.conv2d(g, w(8, 8, 3, 3), dilation=2, padding=2)
    s = relay.nn.conv2d(d, w(6, 8, 1, 1))
    mod = relay.IRModule.from_expr(relay.Function([x], s))
    with tc.transform.PassContext(opt_level=3):
        typed = T.InferType()(mod)
        assert T.AlterOpLayout()(typed)["main"] is typed["main"]
        plain = relay.IRModule.from_expr(relay.Function([x], relay.nn.relu(x)))
        typed = T.InferType()(plain)
        assert T.AlterOpLayout()(typed)["main"] is typed["main"]


def test_other_targets_keep_nchw():
    mod = T.InferType()(conv_chain(np.random.default_rng(0)))
    with tc.transform.PassContext(opt_level=3):
        with tc.target.Target("cuda"):
            assert T.AlterOpLayout()(mod)["main"] is mod["main"]
        with tc.target.Target("llvm"):
            assert T.AlterOpLayout()(mod)["main"] is not mod["main"]


@pytest.mark.parametrize("src,dst", [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW"), ("NCHW32c", "NCHW8c"),
                                     ("NCHW8c", "NCHW32c"), ("OIHW", "OIHW16i32o")])
def test_layout_transform_matches_numpy(src, dst, rng):
    from tilecraft.relay.transform.fold_constant import fold_expr
    from tilecraft.relay.transform.infer_type import infer_expr
    logical = rng.uniform(-1, 1, (2, 64, 3, 5)).astype("float32")

    def packed(layout):
        if layout == "NCHW" or layout == "OIHW":
            return logical
        b = int(layout[4:-1])
        return logical.reshape(2, 64 // b, b, 3, 5).transpose(0, 1, 3, 4, 2)
    if dst.startswith("OIHW"):
        logical = rng.uniform(-1, 1, (64, 32, 3, 5)).astype("float32")
        expected = logical.reshape(2, 32, 2, 16, 3, 5).transpose(0, 2, 4, 5, 3, 1)
        src_value = logical
    else:
        expected, src_value = packed(dst), packed(src)
    got = fold_expr(infer_expr(relay.op.layout_transform(relay.const(src_value), src, dst))).data
    np.testing.assert_array_equal(got, expected)


def test_layout_transform_errors():
    x = relay.var("x", shape=(1, 30, 4, 4))
    with pytest.raises(relay.RelayError, match=r"layout_transform: Tensor\[\(1, 30, 4, 4\), float32\] from NCHW "
                                               r"to NCHW16c: 30 channels do not split into blocks of 16"):
        T.InferType()(relay.IRModule.from_expr(relay.Function([x], relay.op.layout_transform(x, "NCHW", "NCHW16c"))))
    with pytest.raises(relay.RelayError, match=r"layout 'NHWC' is not NCHW or NCHW<x>c"):
        T.InferType()(relay.IRModule.from_expr(relay.Function([x], relay.op.layout_transform(x, "NCHW", "NHWC"))))


def test_a_missing_tuned_config_is_reported_once_per_workload():
    """The layout pass looks configs up under the build's target, as the kernels are built: a
    workload without a tuned config gives one warning, not one from each (twice before)."""
    import warnings
    from tilecraft.autotune.dispatch import FallbackContext
    mod = conv_chain(np.random.default_rng(7))
    # a fresh fallback context: the process's own warns once per workload and process, and
    # earlier tests may have asked it already
    with warnings.catch_warnings(record=True) as ws, FallbackContext():
        warnings.simplefilter("always")
        with tc.transform.PassContext(opt_level=3):
            relay.build(mod, "llvm")
    missing = [str(w.message).split(" on target")[0] for w in ws if "no tuned configuration" in str(w.message)]
    assert missing and len(missing) == len(set(missing)), missing
