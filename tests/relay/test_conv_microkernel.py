"""The graph level's CPU convolutions on the fp32 micro-kernel (``nn.contrib_conv2d_NCHWc`` with
an output block of whole vectors, ``conv2d_microkernel.schedule_blocked``): small CNNs against
onnxruntime (stride 1 and 2, 1x1, 3x3, 7x7 with 3 input channels, padding, odd sizes, a residual
block), the loop-level template where the output channels are not whole vectors, the blocked
micro-kernel conv against numpy and the reference interpreter, and the configuration it takes
(fallback per layer class, a tuned one brought within the graph's blocks)."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import autotune, relay, te
from tilecraft.relay.backend import te_compiler
from tilecraft.topi import conv2d_microkernel as mk
from tilecraft.topi.cpu_intrinsics import vector_isa
from tilecraft.topi.layout import conv2d_NCHWc

from relay_helpers import build, check_model, helper, make_model

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")
LANES = vector_isa().lanes


def conv_bn_relu_model(rng, CI, H, W, CO, K, stride, pad, relu=True):
    inputs = {"x": rng.uniform(-1, 1, (1, CI, H, W)).astype("float32")}
    inits = {"w": (rng.standard_normal((CO, CI, K, K)) / np.sqrt(CI * K * K)).astype("float32"),
             "g": rng.uniform(0.5, 1.5, CO).astype("float32"), "b": rng.uniform(-0.2, 0.2, CO).astype("float32"),
             "m": rng.uniform(-0.2, 0.2, CO).astype("float32"), "v": rng.uniform(0.5, 1.5, CO).astype("float32")}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[K, K], strides=[stride, stride], pads=[pad] * 4),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y" if not relu else "n"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["n"], ["y"]))
    return make_model(nodes, inputs, ["y"], inits), inputs


def conv_kinds(model, inputs) -> list:
    """The anchor kind of each convolution group of the optimised model."""
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in inputs.items()})
    with tc.transform.PassContext(opt_level=3):
        fused, _ = relay.optimize(mod, "llvm", params)
    kinds = []
    with tc.target.Target("llvm"):
        for n in relay.ir.post_order(fused["main"].body):
            if isinstance(n, relay.Call) and isinstance(n.op, relay.Function) and "conv2d" in n.op.attrs["Name"]:
                kinds.append(te_compiler.compute_group(n.op)[2].kind)
    return kinds


# (CI, H, W, CO, K, stride, pad): ResNet's layer classes at small sizes, with odd rows and columns
LAYERS = [(3, 23, 21, 32, 7, 2, 3),       # the stem: 3 input channels, 7x7, stride 2
          (32, 9, 11, 32, 3, 1, 1),       # 3x3
          (32, 10, 9, 64, 3, 2, 1),       # 3x3 stride 2, an odd column count out
          (32, 9, 9, 64, 1, 2, 0),        # the 1x1 downsample
          (64, 5, 5, 64, 3, 1, 1),        # small spatial (ResNet's 512@7)
          (16, 17, 17, 32, 3, 1, 0),      # 15 columns out, no padding
          (8, 6, 13, 48, 3, 1, 2)]        # 48 channels (3 vectors with AVX2, 16-channel blocks with AVX-512)


@pytest.mark.parametrize("layer", LAYERS, ids=lambda s: "x".join(map(str, s)))
def test_conv_layer_matches_onnxruntime(rng, layer):
    model, inputs = conv_bn_relu_model(rng, *layer)
    assert conv_kinds(model, inputs) == ["conv2d_NCHWc_mk"]
    check_model(model, inputs, rtol=1e-4, atol=1e-4)


def test_channels_not_whole_vectors_take_the_loop_template(rng):
    """CO = 24: not a multiple of AVX-512's 16 lanes (the loop-level template, 8-channel
    blocks), 3 vectors with AVX2's 8 (the micro-kernel); either way the values are right."""
    model, inputs = conv_bn_relu_model(rng, 16, 8, 7, 24, 3, 1, 1)
    assert conv_kinds(model, inputs) == ["conv2d_NCHWc_mk" if 24 % LANES == 0 else "conv2d_NCHWc"]
    check_model(model, inputs, rtol=1e-4, atol=1e-4)


def test_residual_block_matches_onnxruntime(rng):
    """conv-bn-relu, conv-bn + a 1x1 stride-2 downsample of the block's input, add, relu, max
    and global pooling: every convolution on the micro-kernel, no transform between them."""
    x = {"x": rng.uniform(-1, 1, (1, 32, 13, 13)).astype("float32")}
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype("float32")   # noqa: E731
    inits = {"w1": w(64, 32, 3, 3), "w2": w(64, 64, 3, 3), "wd": w(64, 32, 1, 1),
             "b1": rng.uniform(-0.2, 0.2, 64).astype("float32"), "b2": rng.uniform(-0.2, 0.2, 64).astype("float32")}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "wd"], ["d"], strides=[2, 2]),
             helper.make_node("Add", ["c2", "d"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["p"], ["y"])]
    model = make_model(nodes, x, ["y"], inits)
    assert conv_kinds(model, x) == ["conv2d_NCHWc_mk"] * 3
    lib = build(model, x)
    kernels = [n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"]
    assert sum("layout_transform" in k for k in kernels) == 2          # the input and the pooled result
    check_model(model, x, rtol=1e-4, atol=1e-4)


def blocked(a, c):
    """An NCHW array in NCHW[c]c."""
    return np.ascontiguousarray(a.reshape(a.shape[0], -1, c, *a.shape[2:]).transpose(0, 1, 3, 4, 2))


def conv_ref(d, k, stride, pad):
    K = k.shape[-1]
    dp = np.pad(d, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    OH, OW = (d.shape[2] + 2 * pad - K) // stride + 1, (d.shape[3] + 2 * pad - K) // stride + 1
    win = np.lib.stride_tricks.sliding_window_view(dp, (K, K), axis=(2, 3))[:, :, ::stride, ::stride][:, :, :OH, :OW]
    return np.einsum("nchwij,ocij->nohw", win, k).astype("float32")


def packed(k, ic, oc):
    """OIHW → OIHW[ic]i[oc]o, as AlterOpLayout packs a constant kernel."""
    CO, CI, K, _ = k.shape
    return np.ascontiguousarray(k.reshape(CO // oc, oc, CI // ic, ic, K, K).transpose(0, 2, 4, 5, 3, 1))


@pytest.mark.parametrize("shape", [(3, 11, 13, 2 * LANES, 7, 2, 3, 3), (2 * LANES, 7, 17, LANES, 3, 1, 1, 8),
                                   (12, 9, 9, 2 * LANES, 1, 2, 0, 4)],
                         ids=["stem_ic3", "ow17_prime", "1x1_s2_ic4"])
def test_blocked_microkernel_conv_matches_numpy(check_llvm, rand, shape):
    """``conv2d_NCHWc`` scheduled by ``schedule_blocked`` (the fallback's register tile: one
    17-column tile of one vector) with a bias + ReLU epilogue, against numpy and the
    interpreter; blocked input of ``ic`` channels, two channel blocks (or one)."""
    CI, H, W, CO, K, stride, pad, ic = shape
    oc = CO if CO <= 2 * LANES else 2 * LANES
    data = te.placeholder((1, CI // ic, H, W, ic), name="data")
    kernel = te.placeholder((CO // oc, CI // ic, K, K, ic, oc), name="kernel")
    bias = te.placeholder((1, CO // oc, 1, 1, oc), name="bias")
    conv, data_pad = conv2d_NCHWc(data, kernel, (stride, stride), (pad,) * 4)
    out = te.compute(conv.shape, lambda n, O, y, x, c: te.max(conv[n, O, y, x, c] + bias[0, O, 0, 0, c], 0.0),
                     name="out")
    reg_n, ic_outer, k_unroll = mk.blocked_config(autotune.FallbackConfigEntity(), 1, CI, H, W, CO, K, K,
                                                  stride, pad, ic, oc)
    s = te.create_schedule(out.op)
    mk.schedule_blocked(s, data_pad, conv, out, stride, reg_n, ic_outer, k_unroll)
    d, k, b = rand((1, CI, H, W)), rand((CO, CI, K, K)), rand((CO,))
    ref = np.maximum(conv_ref(d, k, stride, pad) + b[:, None, None], 0)
    inputs = {data: blocked(d, ic), kernel: packed(k, ic, oc), bias: blocked(b.reshape(1, CO, 1, 1), oc)}
    check_llvm(s, [data, kernel, bias, out], inputs, expected={out: blocked(ref, oc)}, rtol=1e-4, atol=1e-4,
               passes=False)


def test_blocked_template_configs_match_numpy(check_llvm, rand, rng):
    """``topi/conv2d_NCHWc_microkernel.llvm`` (what a model's tasks tune) under its fallback and
    three random configurations of its space (register tiles, ic_outer, k_unroll)."""
    args = (1, 2 * LANES, 9, 14, 2 * LANES, 3, 3, 1, 1, LANES, LANES, "float32")
    task = autotune.task.create(mk.WORKLOAD, args=args, target="llvm")
    assert len(task.config_space) > 4
    d, k = rand((1, 2 * LANES, 9, 14)), rand((2 * LANES, 2 * LANES, 3, 3))
    expected = blocked(conv_ref(d, k, 1, 1), LANES)
    picks = [None] + [task.config_space.get(int(i)) for i in rng.choice(len(task.config_space), 3, replace=False)]
    for cfg in picks:
        with autotune.ApplyConfig(cfg) if cfg is not None else autotune.apply_history_best([]):
            with tc.target.Target("llvm"):
                s, (data, kernel, out) = mk.conv2d_NCHWc_microkernel(*args)
        check_llvm(s, [data, kernel, out], {data: blocked(d, LANES), kernel: packed(k, LANES, LANES)},
                   expected={out: expected}, rtol=1e-4, atol=1e-4, passes=False)


def test_blocked_template_errors():
    with pytest.raises(ValueError, match=r"topi/conv2d_NCHWc_microkernel.llvm: float32 with blocks dividing the "
                                         r"channels \(CI 24 by ic 16, CO 32 by oc 32\)"):
        mk.conv2d_NCHWc_microkernel(1, 24, 8, 8, 32, 3, 3, 1, 1, 16, 32)


@pytest.mark.parametrize("target", ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"])
def test_blocks_and_fallback_by_layer_class(target):
    """Two vectors of output channels with AVX-512 (one where two do not divide), one with
    AVX2; the input's own block (or the output block, or the largest divisor up to 64 for an
    NCHW input); the widest register tile that fits (14 columns on 56-wide rows, 7 on
    7-wide), k_unroll 4 where it divides, the channel blocks inside the column tiles."""
    isa = vector_isa(target)
    L = isa.lanes
    oc = 2 * L if L == 16 else L
    assert mk.graph_blocks(3, 64, None, isa) == (3, oc)
    assert mk.graph_blocks(64, 64, None, isa) == (oc, oc)
    assert mk.graph_blocks(64, 128, 2 * L, isa) == (2 * L, oc)
    assert mk.graph_blocks(96, 3 * L, None, isa) == (L if 96 % L == 0 else 48, L)
    assert mk.graph_blocks(16, 4, None, isa) is None
    if L == 16:
        assert mk.blocked_fallback(isa, 56, 32, 32) == (14, False, 4)
        assert mk.blocked_fallback(isa, 7, 32, 32) == (7, False, 4)
        assert mk.blocked_fallback(isa, 112, 3, 32) == (14, False, 1)
        assert mk.blocked_fallback(isa, 17, 32, 32) == (1, False, 4)     # 17 columns do not fit: 1-column tiles
    else:
        assert mk.blocked_fallback(isa, 56, 8, 8) == (14, False, 4)          # 16 registers: 14 x 1 vector
        assert mk.blocked_fallback(isa, 7, 6, 8) == (7, False, 2)
