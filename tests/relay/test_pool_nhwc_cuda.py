"""Pooling in NHWC on the GPU (``topi/pooling_cuda.py``) and ``TensorCoreLayout`` keeping a
float16 ResNet-style graph in NHWC through its pools (no ``transpose`` around them).

The kernels run in the CUDA emulator (outputs poisoned with NaN, race checks) against numpy on
fresh random inputs, with channel counts that give every vector width (16 bytes of channels, 8,
4, 2, 1) and windows that hang over the padding; nvcc compiles them; the graph is checked as
printed text (golden) and run whole in the emulator against onnxruntime."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import relay, te
from tilecraft.codegen.cuda_emulate import emulate
from tilecraft.schedule import create_schedule, lower
from tilecraft.topi import pooling_cuda

from relay_helpers import helper, make_model, run_ort
from test_relay_cuda import build_cuda, needs_nvcc, run_emulated
from test_relay_cuda_fp16 import _fp16, _kernels

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


def np_pool(x, kind, k, stride, pad, count_include_pad=False):
    """numpy reference of NHWC pooling (float64)."""
    N, H, W, C = x.shape
    pt, pl, pb, pr = pad
    OH, OW = (H + pt + pb - k) // stride + 1, (W + pl + pr - k) // stride + 1
    xp = np.full((N, H + pt + pb, W + pl + pr, C), -np.inf if kind == "max" else 0.0)
    xp[:, pt:pt + H, pl:pl + W] = x
    ones = np.zeros(xp.shape[1:3])
    ones[pt:pt + H, pl:pl + W] = 1
    out = np.empty((N, OH, OW, C))
    for y in range(OH):
        for v in range(OW):
            win = xp[:, y * stride:y * stride + k, v * stride:v * stride + k]
            if kind == "max":
                out[:, y, v] = win.max(axis=(1, 2))
            else:
                count = k * k if count_include_pad else ones[y * stride:y * stride + k, v * stride:v * stride + k].sum()
                out[:, y, v] = win.sum(axis=(1, 2)) / count
    return out


def lowered(out, red, x):
    s = create_schedule(out.op)
    for st in s.stages:
        if type(st.op).__name__ == "ComputeOp" and not st.is_output and not st.op.reduce_axis:
            st.compute_inline()
    pooling_cuda.schedule_pool_nhwc(s, out, red)
    return s, lower(s, [x, out], name="pool", target="cuda")


@pytest.mark.parametrize("dtype,C,vec", [("float16", 24, 8), ("float16", 12, 4), ("float32", 6, 2),
                                         ("float32", 20, 4), ("float16", 3, 1)])
@pytest.mark.parametrize("kind,k,stride,pad,cip", [("max", 3, 2, (1, 1, 1, 1), False),
                                                   ("avg", 3, 2, (1, 1, 1, 1), False),
                                                   ("avg", 3, 1, (1, 0, 1, 0), True), ("avg", 2, 2, (0, 0, 0, 0), False),
                                                   ("global_max", 0, 0, None, False),
                                                   ("global_avg", 0, 0, None, False)])
def test_nhwc_pool_kernel_matches_numpy(rng, dtype, C, vec, kind, k, stride, pad, cip):
    shape = (2, 7, 9, C)
    x = te.placeholder(shape, name="x", dtype=dtype)
    if kind.startswith("global"):
        out, red = pooling_cuda.global_pool_nhwc(x, kind[7:])
    else:
        out, red = pooling_cuda.pool2d_nhwc(x, kind, (k, k), (stride, stride), pad, (1, 1), cip)
    assert pooling_cuda.channel_vector(C, dtype) == vec
    s, f = lowered(out, red, x)
    text = str(f)
    assert text.count("cuda_kernel(") == 1                    # one kernel: the window reduced in registers
    assert ('"local"' in text) and (("ramp(" in text) == (vec > 1))
    xn = rng.standard_normal(shape).astype(dtype)
    got = np.full(tuple(int(d.value) for d in out.shape), np.nan, dtype)
    emulate(f, [xn, got])
    if kind.startswith("global"):
        want = (xn.astype("float64").max(axis=(1, 2), keepdims=True) if kind == "global_max"
                else xn.astype("float64").mean(axis=(1, 2), keepdims=True))
    else:
        want = np_pool(xn.astype("float64"), kind, k, stride, pad, cip)
    tol = 2e-3 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(got.astype("float64"), want, rtol=tol, atol=tol)


def test_nhwc_pool_kernels_compile_with_nvcc():
    needs_nvcc()
    for dtype in ("float16", "float32"):
        x = te.placeholder((32, 112, 112, 64), name="x", dtype=dtype)
        for out, red in (pooling_cuda.pool2d_nhwc(x, "max", (3, 3), (2, 2), (1, 1, 1, 1)),
                         pooling_cuda.global_pool_nhwc(x, "avg")):
            s, _ = lowered(out, red, x)
            mod = tc.build(s, [x, out], target="cuda -arch=sm_90", name="pool")
            src = mod.imported_modules[0].get_source() if hasattr(mod, "imported_modules") else mod.get_source()
            assert "pool" in src and len(mod.imported_modules[0].cubin) > 0


def resnet_tail(rng, batch=2):
    """A float32 ONNX model whose convolutions all take tensor cores once in float16: conv+bias+relu,
    max pool 3x3/2, conv + residual-free relu, average pool 2x2/2, global max pool, flatten, dense."""
    x = rng.standard_normal((batch, 16, 8, 8)).astype("float32")
    inits = {"w1": rng.standard_normal((16, 16, 3, 3)).astype("float32") * 0.2,
             "b1": rng.standard_normal(16).astype("float32"),
             "w2": rng.standard_normal((32, 16, 3, 3)).astype("float32") * 0.2,
             "fc": rng.standard_normal((16, 32)).astype("float32") * 0.3}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("AveragePool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalMaxPool", ["p2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1)]
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


GOLDEN = """\
def @main(%x: Tensor[(2, 16, 8, 8), float32]) -> Tensor[(2, 16), float32] {
  %0 = cast(%x, dtype="float16") /* ty=Tensor[(2, 16, 8, 8), float16] */;
  %1 = transpose(%0, axes=[0, 2, 3, 1]) /* ty=Tensor[(2, 8, 8, 16), float16] */;
  %2 = nn.conv2d(%1, meta[relay.Constant][0] /* Tensor[(16, 3, 3, 16), float16] */, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3], data_layout="NHWC", kernel_layout="OHWI") /* ty=Tensor[(2, 8, 8, 16), float16] */;
  %3 = nn.bias_add(%2, meta[relay.Constant][1] /* Tensor[(16,), float16] */, axis=3) /* ty=Tensor[(2, 8, 8, 16), float16] */;
  %4 = nn.relu(%3) /* ty=Tensor[(2, 8, 8, 16), float16] */;
  %5 = nn.max_pool2d(%4, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1], layout="NHWC") /* ty=Tensor[(2, 4, 4, 16), float16] */;
  %6 = nn.conv2d(%5, meta[relay.Constant][2] /* Tensor[(32, 3, 3, 16), float16] */, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3], data_layout="NHWC", kernel_layout="OHWI") /* ty=Tensor[(2, 4, 4, 32), float16] */;
  %7 = nn.relu(%6) /* ty=Tensor[(2, 4, 4, 32), float16] */;
  %8 = nn.avg_pool2d(%7, pool_size=[2, 2], strides=[2, 2], layout="NHWC") /* ty=Tensor[(2, 2, 2, 32), float16] */;
  %9 = nn.global_max_pool2d(%8, layout="NHWC") /* ty=Tensor[(2, 1, 1, 32), float16] */;
  %10 = reshape(%9, newshape=[2, 32, 1, 1]) /* ty=Tensor[(2, 32, 1, 1), float16] */;
  %11 = reshape(%10, newshape=[2, 32]) /* ty=Tensor[(2, 32), float16] */;
  %12 = nn.dense(%11, meta[relay.Constant][3] /* Tensor[(16, 32), float16] */) /* ty=Tensor[(2, 16), float16] */;
  cast(%12, dtype="float32") /* ty=Tensor[(2, 16), float32] */
}"""


def test_tensorcore_layout_keeps_the_pools_nhwc(rng):
    model, inputs = resnet_tail(rng)
    mod, params = _fp16(model, inputs)
    with tc.transform.PassContext(opt_level=3, disabled_pass=["FuseOps"]):
        text = str(relay.optimize(mod, "cuda", params)[0])            # the build's passes but fusion
    assert text == GOLDEN, text


def test_resnet_tail_in_nhwc_in_the_emulator_matches_onnxruntime(rng):
    needs_nvcc()
    model, inputs = resnet_tail(rng)
    mod, params = _fp16(model, inputs)
    lib = build_cuda(mod, params)
    ks = _kernels(lib)
    assert [k for k in ks if "transpose" in k] == ["fused_cast_transpose"]          # the input's, only
    pools = [n for k, n in ks.items() if "pool" in k]
    outs = [n["arg_shapes"][-1] if "arg_shapes" in n else n["shape"] for n in pools]     # NHWC: channels last
    assert outs == [[2, 4, 4, 16], [2, 2, 2, 32], [2, 1, 1, 32]], outs
    src = lib.module.get_source()
    for _ in range(2):
        inputs = {"x": rng.standard_normal(inputs["x"].shape).astype("float32")}
        got = run_emulated(lib, inputs)[0]
        np.testing.assert_allclose(got, run_ort(model, inputs)[0], rtol=2e-2, atol=1e-2)
    assert "fused_nn_max_pool2d_kernel" in src
