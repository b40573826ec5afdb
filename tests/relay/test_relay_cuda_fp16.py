"""relay on the GPU in float16 and TF32: ``ToMixedPrecision``, ``TensorCoreLayout`` (conv2d to NHWC
for the tensor-core implicit GEMM), the tensor-core groups of ``relay/backend/cuda_tensorcore.py``
(conv / dense / batch_matmul with the epilogue fused) and the float16 row kernels.

Without a GPU every model runs in the CUDA emulator (memory poisoned with NaN, race checks) at
tiny shapes against onnxruntime in float32, with float16 tolerances; nvcc compiles every kernel of
ResNet-50 in float16; the GPU's tensor-core tasks are extracted and tuned (nvcc builds, a
synthetic runner) and the build takes the log's configuration. The ``cuda``-marked tests run the
float16 models on a GPU against torch's ``model.half()``."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import autotune, relay
from tilecraft.contrib import graph_executor
from tilecraft.relay.backend import cuda_tensorcore
from tilecraft.relay.ir import RelayError

from relay_helpers import helper, make_model, run_ort
from test_relay_cuda import _gpu_or_skip, bench_module, build_cuda, needs_nvcc, run_emulated, transformer_layer

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


def cnn16(rng, batch=2):
    """conv(3->16, RGB padded to 16 channels)+bias+relu, conv + residual add + relu (tensor
    cores), max pool, a strided 1x1 conv of 8 pixels (too few: the direct conv in float16),
    global pool, dense of 2 rows (the GEMV), softmax (the float16 row kernel)."""
    x = rng.standard_normal((batch, 3, 8, 8)).astype("float32")
    inits = {"w1": rng.standard_normal((16, 3, 3, 3)).astype("float32") * 0.3,
             "b1": rng.standard_normal(16).astype("float32"),
             "w2": rng.standard_normal((16, 16, 3, 3)).astype("float32") * 0.15,
             "w3": rng.standard_normal((32, 16, 1, 1)).astype("float32") * 0.3,
             "fc": rng.standard_normal((16, 32)).astype("float32") * 0.3,
             "fcb": rng.standard_normal(16).astype("float32")}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["a2"]),
             helper.make_node("Relu", ["a2"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "w3"], ["c3"], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["c3"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["y0"], transB=1),
             helper.make_node("Softmax", ["y0"], ["y"])]
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


def _kernels(lib):
    return {n["func"]: n for n in lib.graph["nodes"] if n["op"] == "kernel"}


def _fp16(model, inputs):
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in inputs.items()})
    return relay.transform.ToMixedPrecision("float16")(mod), params


# --- the passes ----------------------------------------------------------------------------------

GOLDEN_MIXED = """def @main(%x: Tensor[(1, 4), float32], %i: Tensor[(1, 4), int32]) -> Tensor[(1, 2), float32] {
  %0 = cast(%x, dtype="float16") /* ty=Tensor[(1, 4), float16] */;
  %1 = cast(%i, dtype="float16") /* ty=Tensor[(1, 4), float16] */;
  %2 = add(%0, %1) /* ty=Tensor[(1, 4), float16] */;
  %3 = nn.dense(%2, meta[relay.Constant][0] /* Tensor[(2, 4), float16] */) /* ty=Tensor[(1, 2), float16] */;
  %4 = nn.relu(%3) /* ty=Tensor[(1, 2), float16] */;
  cast(%4, dtype="float32") /* ty=Tensor[(1, 2), float32] */
}"""


def test_to_mixed_precision_text():
    x = relay.var("x", shape=(1, 4), dtype="float32")
    i = relay.var("i", shape=(1, 4), dtype="int32")
    w = relay.const(np.arange(8, dtype="float32").reshape(2, 4) / 3)
    y = relay.nn.relu(relay.nn.dense(relay.add(x, relay.cast(i, "float32")), w))
    mod = relay.transform.InferType()(tc.relay.IRModule.from_expr(relay.Function([x, i], y)))
    out = relay.transform.ToMixedPrecision("float16")(mod)
    assert str(out) == GOLDEN_MIXED
    assert out["main"].params == mod["main"].params                           # float32 at the boundary
    w16 = [n for n in tc.relay.ir.post_order(out["main"].body) if type(n) is tc.relay.ir.Constant]
    assert w16[0].data.dtype == np.float16 and np.array_equal(w16[0].data, w.data.astype("float16"))


def test_to_mixed_precision_refuses_other_types():
    with pytest.raises(RelayError, match="ToMixedPrecision: mixed_precision_type must be 'float16', got 'bfloat16'"):
        relay.transform.ToMixedPrecision("bfloat16")


def _conv_model(dtype="float16", C=3, K=16, HW=8, N=2):
    x = relay.var("x", shape=(N, C, HW, HW), dtype=dtype)
    w = relay.const((np.arange(K * C * 9).reshape(K, C, 3, 3) % 7 - 3).astype(dtype))
    b = relay.const(np.arange(K).reshape(K, 1, 1).astype(dtype))
    y = relay.nn.relu(relay.add(relay.nn.conv2d(x, w, padding=(1, 1, 1, 1)), b))
    return relay.transform.InferType()(tc.relay.IRModule.from_expr(relay.Function([x], y))), w, b


def test_tensorcore_layout_nhwc_with_padded_channels():
    mod, w, b = _conv_model()
    with tc.target.Target("cuda"), tc.transform.PassContext(opt_level=3):
        out = relay.transform.TensorCoreLayout()(mod)
    text = str(out)
    assert 'transpose(%x, axes=[0, 2, 3, 1])' in text
    assert "nn.pad(%0, pad_width=[[0, 0], [0, 0], [0, 0], [0, 13]])" in text          # 3 channels -> 16
    assert 'data_layout="NHWC", kernel_layout="OHWI"' in text and "ty=Tensor[(2, 8, 8, 16), float16]" in text
    assert text.rstrip().endswith("transpose(%4, axes=[0, 3, 1, 2]) /* ty=Tensor[(2, 16, 8, 8), float16] */\n}".rstrip())
    consts = [n.data for n in tc.relay.ir.post_order(out["main"].body) if type(n) is tc.relay.ir.Constant]
    kernel = next(c for c in consts if c.ndim == 4 and c.shape[0] == 16)
    assert kernel.shape == (16, 3, 3, 16)
    np.testing.assert_array_equal(kernel[..., :3], w.data.transpose(0, 2, 3, 1))
    assert not kernel[..., 3:].any()
    assert any(c.shape == (1, 1, 1, 16) and np.array_equal(c.reshape(-1), b.data.reshape(-1)) for c in consts)
    # the same convolution under a CPU target, in float32 without TF32, or with 8 output channels: unchanged
    with tc.target.Target("llvm"), tc.transform.PassContext(opt_level=3):
        assert relay.transform.TensorCoreLayout()(mod) is mod
    f32, _, _ = _conv_model("float32")
    with tc.target.Target("cuda"), tc.transform.PassContext(opt_level=3):
        assert relay.transform.TensorCoreLayout()(f32) is f32
    with tc.target.Target("cuda"), tc.transform.PassContext(opt_level=3, config={"cuda.allow_tf32": True}):
        assert 'data_layout="NHWC"' in str(relay.transform.TensorCoreLayout()(f32))
    k8, _, _ = _conv_model(K=8)
    with tc.target.Target("cuda"), tc.transform.PassContext(opt_level=3):
        assert relay.transform.TensorCoreLayout()(k8) is k8


def test_conv_fits_needs_whole_tiles():
    assert cuda_tensorcore.conv_fits(32 * 56 * 56, 64, 64, 3, 3, "float16")
    assert not cuda_tensorcore.conv_fits(7 * 7, 512, 512, 3, 3, "float16")       # 49 pixels: no 16-row tile
    assert not cuda_tensorcore.conv_fits(32 * 7 * 7, 40, 64, 3, 3, "float16")    # 40 channels
    assert cuda_tensorcore.conv_fits(256, 64, 16, 1, 1, "float16")               # one 16-deep mma


# --- whole models in the emulator -----------------------------------------------------------------

def test_fp16_cnn_in_the_emulator_matches_onnxruntime(rng):
    needs_nvcc()
    model, inputs = cnn16(rng)
    mod, params = _fp16(model, inputs)
    lib = build_cuda(mod, params)
    ks = _kernels(lib)
    # both 3x3 convolutions on tensor cores, written as the (N·OH·OW, K) view; bias / residual fused
    assert ks["fused_nn_conv2d_nn_bias_add_nn_relu"]["arg_shapes"][-1] == [128, 16]
    assert ks["fused_nn_conv2d_add_nn_relu"]["arg_shapes"][-1] == [128, 16]
    assert "fused_nn_conv2d" in ks and "arg_shapes" not in ks["fused_nn_conv2d"]     # 8 pixels: direct
    assert ks["fused_nn_softmax"]["dtype"] == "float16"
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in lib.module.get_source()
    for _ in range(2):
        inputs = {"x": rng.standard_normal(inputs["x"].shape).astype("float32")}
        got = run_emulated(lib, inputs)[0]
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, run_ort(model, inputs)[0], rtol=2e-2, atol=5e-3)


@pytest.mark.parametrize("S,H,F,on_tc", [(32, 64, 128, True), (18, 16, 24, False)], ids=["tensorcores", "simt"])
def test_fp16_transformer_layer_in_the_emulator_matches_onnxruntime(rng, monkeypatch, S, H, F, on_tc):
    """Dense layers (B col-major: the weight as stored) and both attention batch_matmuls (B
    row-major: the ONNX graph transposes K itself) on tensor cores at 32 rows (2 heads of 32); at 18 rows (no
    16-row tile) the SIMT GEMM on a float32 accumulator; layer norm and softmax rows in float16
    summed in float32."""
    needs_nvcc()
    on = []
    gemm = cuda_tensorcore._gemm
    monkeypatch.setattr(cuda_tensorcore, "_gemm", lambda call, *a: on.append((call.op.name, a[2])) or gemm(call, *a))
    model, inputs = transformer_layer(rng, S=S, H=H, F=F)
    mod, params = _fp16(model, inputs)
    lib = build_cuda(mod, params)
    assert ("mma.sync" in lib.module.get_source()) == on_tc
    assert sorted(set(on)) == ([("nn.batch_matmul", "row_major"), ("nn.dense", "col_major")] if on_tc else [])
    ks = _kernels(lib)
    assert {k["dtype"] for n, k in ks.items() if "layer_norm" in n} == {"float16"}
    got = run_emulated(lib, inputs)[0]
    want = run_ort(model, inputs)[0]
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


def test_large_tiles_with_a_pipeline_in_the_emulator(rng, monkeypatch):
    """With ``MIN_BLOCKS=0`` the fallback takes the largest tiles that fit: a conv + residual + ReLU
    on 128 x 64 blocks of 4 warps (4 x 2 tiles each, a 3-stage cp.async ring) and a dense + bias +
    ReLU on 64 x 128 blocks (2 stages: its k is two steps), against onnxruntime."""
    needs_nvcc()
    monkeypatch.setattr(cuda_tensorcore, "MIN_BLOCKS", 0)
    chosen = {}
    pick = cuda_tensorcore.fallback_options
    monkeypatch.setattr(cuda_tensorcore, "fallback_options",
                        lambda M, N, ok: chosen.setdefault((M, N), pick(M, N, ok)))
    x = rng.standard_normal((2, 32, 8, 8)).astype("float32")
    inits = {"w": (rng.standard_normal((32, 32, 3, 3)) * 0.1).astype("float32"),
             "fc": (rng.standard_normal((64, 128)) * 0.2).astype("float32"),
             "fcb": rng.standard_normal(128).astype("float32")}
    inits["w"] = np.concatenate([inits["w"], inits["w"][::-1]])           # 64 output channels
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Slice", ["c", "s0", "s1", "s2"], ["c32"]),
             helper.make_node("Add", ["c32", "x"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["flat"]),
             helper.make_node("Gemm", ["flat", "fc", "fcb"], ["y0"]),
             helper.make_node("Relu", ["y0"], ["y"])]
    inits.update(s0=np.array([0], "int64"), s1=np.array([32], "int64"), s2=np.array([1], "int64"),
                 shape=np.array([64, 64], "int64"))
    model = make_model(nodes, {"x": x}, ["y"], inits)
    mod, params = _fp16(model, {"x": x})
    lib = build_cuda(mod, params)
    ks = _kernels(lib)
    assert any(k.get("arg_shapes", [[]])[-1] == [128, 64] for n, k in ks.items() if "conv2d" in n)
    assert {k: (o["block"], o["warp"], o["stages"]) for k, o in chosen.items()} == {
        (128, 64): ((2, 2), (4, 2), 3), (64, 128): ((2, 2), (2, 4), 2)}
    got = run_emulated(lib, {"x": x})[0]
    want = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


def test_tf32_cnn_in_the_emulator_matches_onnxruntime(rng):
    """float32 with ``cuda.allow_tf32``: the tensor-core convolutions take TF32 operands (the
    emulator multiplies in float32, so the comparison is tight)."""
    needs_nvcc()
    model, inputs = cnn16(rng)
    mod, params = relay.frontend.from_onnx(model, shape={"x": inputs["x"].shape})
    lib = build_cuda(mod, params, config={"cuda.allow_tf32": True})
    assert _kernels(lib)["fused_nn_conv2d_add_nn_relu"]["arg_shapes"][-1] == [128, 16]
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in lib.module.get_source()
    got = run_emulated(lib, inputs)[0]
    np.testing.assert_allclose(got, run_ort(model, inputs)[0], rtol=1e-4, atol=1e-5)


def test_fp16_direct_conv_with_split_channels(rng):
    """A float16 convolution of 25 pixels (no 16-row tile: it stays NCHW) takes the direct
    convolution, its 128 input channels split over 2 blocks (the fallback on a small deep layer),
    the partial sums in float32, bias and ReLU fused; against a float64 convolution."""
    needs_nvcc()
    torch = pytest.importorskip("torch")
    from tilecraft.relay.backend.te_compiler_cuda import conv2d_tiles
    w = (rng.standard_normal((32, 128, 3, 3)) * 0.1).astype("float16")
    b = rng.standard_normal((32, 1, 1)).astype("float16")
    x = relay.var("x", shape=(1, 128, 5, 5), dtype="float16")
    conv = relay.nn.conv2d(x, relay.const(w), padding=(1, 1, 1, 1))
    mod = relay.transform.InferType()(tc.relay.IRModule.from_expr(relay.Function([x], relay.nn.relu(
        relay.add(conv, relay.const(b))))))
    with tc.target.Target("cuda"):
        assert conv2d_tiles(mod["main"].body.args[0].args[0])["k_split"] == 2
    lib = build_cuda(mod, {})
    assert [n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"] == ["fused_nn_conv2d_add_nn_relu"]
    xv = rng.standard_normal((1, 128, 5, 5)).astype("float16")
    got = run_emulated(lib, {"x": xv})[0]
    want = torch.relu(torch.nn.functional.conv2d(torch.tensor(xv, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                                                 padding=1) + torch.tensor(b, dtype=torch.float64)).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)


def test_gemm_of_one_mma_on_tensor_cores(rng):
    """A float16 dense layer whose whole reduction is one 16-deep mma (K=16): one tensorized
    region fills the accumulator, then multiplies; the emulator's check of the mma took the
    accumulator from before the fill (NaN) and refused it (fails before the fix)."""
    needs_nvcc()
    x = rng.standard_normal((32, 16)).astype("float32")
    inits = {"w": rng.standard_normal((16, 32)).astype("float32")}
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x}, ["y"], inits)
    mod, params = _fp16(model, {"x": x})
    lib = build_cuda(mod, params)
    assert "mma.sync" in lib.module.get_source()
    np.testing.assert_allclose(run_emulated(lib, {"x": x})[0], run_ort(model, {"x": x})[0], rtol=1e-2, atol=1e-2)


def test_classifier_columns_padded_to_tensor_core_tiles(rng):
    """A float16 dense layer of 40 output columns (a classifier's) gets 8 zero weight rows and a
    slice of its result: on tensor cores, against onnxruntime; TensorCoreLayout's text."""
    needs_nvcc()
    x = rng.standard_normal((32, 64)).astype("float32")
    inits = {"w": rng.standard_normal((64, 40)).astype("float32") * 0.3, "b": rng.standard_normal(40).astype("float32")}
    model = make_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"])], {"x": x}, ["y"], inits)
    mod, params = _fp16(model, {"x": x})
    with tc.target.Target("cuda"), tc.transform.PassContext(opt_level=3):
        text = str(relay.build_module.optimize(mod, "cuda", params)[0])
    assert "Tensor[(48, 64), float16]" in text and "strided_slice" in text and "end=[32, 40]" in text
    lib = build_cuda(mod, params)
    assert "mma.sync" in lib.module.get_source()
    np.testing.assert_allclose(run_emulated(lib, {"x": x})[0], run_ort(model, {"x": x})[0], rtol=1e-2, atol=2e-2)


def test_template_with_one_mma_in_the_emulator(rng):
    """``matmul_tensorcore`` with K = 16 (fill and mma in one tensorized region) against numpy
    (fails before the emulator fix)."""
    from tilecraft.codegen.cuda_emulate import emulate
    from tilecraft.topi.tensorcore import matmul_tensorcore
    s, (A, B, C) = matmul_tensorcore(32, 32, 16, impl="mma", layout_b="col_major", block=(1, 1), warp=(1, 1),
                                     chunk=1, stages=0)
    f = tc.lower(s, [A, B, C], target="cuda")
    a = rng.standard_normal((32, 16)).astype("float16")
    b = rng.standard_normal((32, 16)).astype("float16")
    c = np.full((32, 32), np.nan, "float32")
    emulate(f, [a, b, c])
    np.testing.assert_allclose(c, a.astype("float32") @ b.T.astype("float32"), rtol=1e-3, atol=1e-3)


def test_conv_epilogue_of_another_shape_is_refused():
    """A tensor-core conv group whose epilogue reads a value that is neither the output's shape
    nor per channel (here per image and channel; TensorCoreLayout leaves such an add in NCHW, so
    only a hand-made group has it) is refused naming the shapes."""
    from tilecraft.relay.backend.te_compiler_cuda import lower_primitive_cuda
    x = relay.var("x", shape=(2, 8, 8, 16), dtype="float16")
    w = relay.var("w", shape=(16, 3, 3, 16), dtype="float16")
    s = relay.var("s", shape=(2, 1, 1, 16), dtype="float16")
    conv = relay.nn.conv2d(x, w, padding=(1, 1, 1, 1), data_layout="NHWC", kernel_layout="OHWI")
    fn = relay.transform.InferType()(tc.relay.IRModule.from_expr(relay.Function([x, w, s], relay.add(conv, s))))
    with tc.target.Target("cuda"), pytest.raises(
            RelayError, match=r"the convolution's epilogue reads a \[2, 1, 1, 16\] value, neither the output's "
                              r"shape \[2, 8, 8, 16\] nor per channel"):
        lower_primitive_cuda(fn["main"], "k")


def test_resnet50_fp16_kernels_compile_with_nvcc(rng):
    """Every kernel of ResNet-50 in float16 (batch 32, 224x224) compiled for sm_90 by nvcc, every
    convolution on tensor cores (the 7x7 stem with its 3 channels padded to 16)."""
    needs_nvcc()
    torch = pytest.importorskip("torch")
    rc = bench_module("relay_cuda")
    torch.manual_seed(0)
    model = rc.randomize(torch, rc.resnet50(torch, torch.nn))
    mod, params = relay.frontend.from_torch(model, (torch.rand(32, 3, 224, 224),))
    lib = build_cuda(relay.transform.ToMixedPrecision("float16")(mod), params)
    ks = _kernels(lib)
    convs = [k for n, k in ks.items() if "conv2d" in n]
    assert len(convs) >= 20 and all(len(k.get("arg_shapes", [[]])[-1]) == 2 for k in convs)
    source = lib.module.get_source()
    assert len(lib.module.cubin) > 0
    for name in ks:
        assert f"void {name}" in source or f" {name}(" in source or f" {name}_" in source, name


# --- tuning tasks ----------------------------------------------------------------------------------

def test_task_extraction_gives_the_tensor_core_templates(rng):
    model, inputs = cnn16(rng)
    mod, params = _fp16(model, inputs)
    tasks = autotune.task.extract_from_program(mod["main"], target="cuda", params=params)
    # the two 3x3 convolutions are one workload (the stem's 3 channels padded to 16); the strided
    # 1x1 convolution of 8 pixels is the direct one
    assert [(t.name, t.args, t.count) for t in tasks] == [
        ("topi/conv2d_nhwc_tensorcore.cuda", (2, 8, 8, 16, 16, 3, 3, 1, 1, "float16", "float16"), 2),
        ("topi/conv2d_nchw.cuda", (2, 16, 4, 4, 32, 1, 1, 2, 0, "float16"), 1)]
    model, inputs = transformer_layer(rng, S=32, H=64, F=128)
    mod, params = _fp16(model, inputs)
    tasks = autotune.task.extract_from_program(mod["main"], target="cuda", params=params)
    got = {(t.name, t.args): t.count for t in tasks}
    # Q, K, V: one dense on the concatenated weights (CombineParallelDense), then the output projection
    assert got == {("topi/dense_tensorcore.cuda", (32, 192, 64, "float16", "float16", "none")): 1,
                   ("topi/dense_tensorcore.cuda", (32, 64, 64, "float16", "float16", "none")): 1,
                   # Q K^T (K transposed by the ONNX graph, so B as stored) and P V
                   ("topi/batch_matmul_tensorcore.cuda", (2, 32, 32, 32, "float16", "float16", "row_major")): 2,
                   ("topi/dense_tensorcore.cuda", (32, 128, 64, "float16", "float16", "none")): 1,
                   ("topi/dense_tensorcore.cuda", (32, 64, 128, "float16", "float16", "none")): 1}


class _SyntheticRunner:
    """Times nothing (no GPU here): a made-up cost per configuration, lowest for the later ones."""
    n_parallel = 1

    def set_task(self, task):
        self.task = task

    def run(self, inputs, build_results):
        import time

        from tilecraft.autotune.measure import MeasureErrorNo, MeasureResult
        out = []
        for inp, b in zip(inputs, build_results):
            if b.error_no:
                out.append(MeasureResult((1e9,), b.error_no, b.error_msg, 0.0, time.time()))
                continue
            c = 1e-3 - 1e-6 * inp.config.index
            out.append(MeasureResult((c,), MeasureErrorNo.NO_ERROR, "", 0.0, time.time()))
        return out


def test_tune_tasks_on_cuda_and_build_with_the_log(rng, tmp_path, capsys):
    """tune_relay for a CUDA target in CI: the tensor-core tasks tuned under a small budget (each
    candidate compiled by nvcc, timed by a synthetic runner), the log's best configurations then
    schedule the model's kernels, whose result still matches onnxruntime; ``tilecraft compile
    --target cuda --mixed-precision --tuning-log`` builds the same model with the same log."""
    needs_nvcc()
    model, inputs = transformer_layer(rng, S=32, H=64, F=128)
    mod, params = _fp16(model, inputs)
    tasks = autotune.task.extract_from_program(mod["main"], target="cuda", params=params)
    log = tmp_path / "tc.jsonl"
    option = autotune.measure_option(builder=autotune.LocalBuilder(n_parallel=1), runner=_SyntheticRunner())
    report = autotune.tune_tasks(tasks[:1], 4, log, measure_option=option, tuner="gridsearch", min_trials=4,
                                 progress=False)
    assert report[0]["measured"] == 4 and report[0]["best_gflops"] > 0
    records = autotune.record.load_from_file(str(log))
    assert len(records) == 4 and all(r.error_no == 0 for _, r in records)      # every candidate built by nvcc
    best = min(records, key=lambda ir: ir[1].costs[0])[0].config
    seen = []
    with autotune.apply_history_best(str(log)):
        cfg = autotune.DispatchContext.current().query(tc.target.Target("cuda"), tasks[0].workload)
        opts = cuda_tensorcore._opts
        with pytest.MonkeyPatch.context() as mp:          # the options the dense kernels are scheduled with
            mp.setattr(cuda_tensorcore, "_opts", lambda c, *a: seen.append((c, opts(c, *a))) or seen[-1][1])
            lib = build_cuda(mod, params)
    assert not cfg.is_fallback and cfg.index == best.index
    tuned = [o for c, o in seen if c is not None and not c.is_fallback]
    assert tuned and all(o == {k: best[k].val for k in cuda_tensorcore._KNOBS} for o in tuned)
    got = run_emulated(lib, inputs)[0]
    want = run_ort(model, inputs)[0]
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())
    # the same in one command: float16, built with the log, the CUDA archive written
    from tilecraft.cli import main
    path, out = tmp_path / "layer.onnx", tmp_path / "layer.tcuda"
    path.write_bytes(model.SerializeToString())
    assert main(["compile", str(path), "--target", "cuda", "--mixed-precision", "--tuning-log", str(log),
                 "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"tuned configs for 1 of {len(tasks)} tunable workloads (from {log})" in text, text
    loaded = tc.runtime.load_module(out)
    assert loaded.module.type_key == "cuda" and loaded.graph == lib.graph


# --- on a GPU --------------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("name", ["resnet50", "bert"])
def test_fp16_model_on_the_gpu_matches_torch_half(rng, name):
    """ResNet-50 (batch 2) and a BERT-base layer (seq 128) through ToMixedPrecision on the GPU
    against torch's ``model.half()`` on fresh inputs."""
    _gpu_or_skip()
    torch = pytest.importorskip("torch")
    rc = bench_module("relay_cuda")
    torch.manual_seed(int(rng.integers(1 << 30)))
    model = rc.randomize(torch, rc.resnet50(torch, torch.nn) if name == "resnet50" else rc.bert_layer(torch, torch.nn))
    shape = (2, 3, 224, 224) if name == "resnet50" else (1, 128, 768)
    mod, params = relay.frontend.from_torch(model, (torch.randn(*shape),))
    lib = build_cuda(relay.transform.ToMixedPrecision("float16")(mod), params)
    m = graph_executor.GraphModule(lib["default"](tc.cuda(0)))
    half = model.cuda().half()
    for _ in range(2):
        x = torch.randn(*shape)
        with torch.no_grad():
            want = half(x.cuda().half()).float().cpu().numpy()
        m.set_input(0, x.numpy())
        m.run()
        got = m.get_output(0).numpy()
        np.testing.assert_allclose(got, want, rtol=3e-2, atol=3e-2 * np.abs(want).max())
