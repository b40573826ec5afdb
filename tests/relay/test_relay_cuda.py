"""relay.build(target="cuda"): every fused group lowered with the GPU schedules, the model run by
the GPU graph executor. Without a GPU the whole flow runs in the CUDA emulator
(``relay.backend.cuda_executor``: numpy memory that starts as NaN, every kernel emulated with race
checks) at small shapes against onnxruntime / numpy / PyTorch on fresh random inputs, and nvcc
compiles every kernel of ResNet-18; the ``cuda``-marked tests run ResNet-18 and a BERT layer on
the GPU against PyTorch."""
import importlib.util
import json
import pathlib
import sys
import zipfile

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import autotune, relay
from tilecraft.contrib import graph_executor
from tilecraft.relay.backend import te_compiler_cuda
from tilecraft.relay.backend.cuda_executor import emulated_executor
from tilecraft.runtime.graph_executor import GraphExecutorError

from relay_helpers import helper, make_model, run_ort

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")
BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def needs_nvcc():
    from tilecraft.codegen.cuda_compile import find_nvcc
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: relay.build(target='cuda') compiles its kernels with nvcc")


def bench_module(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def build_cuda(mod, params, **ctx):
    with tc.transform.PassContext(opt_level=3, **ctx):
        return relay.build(mod, target="cuda", params=params)


def run_emulated(lib, inputs: dict) -> list:
    m = graph_executor.GraphModule(emulated_executor(lib))
    m.set_input(**inputs)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def tiny_cnn(rng, batch=1):
    """conv+bias+relu, conv + residual add + relu, max pool, global pool, dense, softmax."""
    x = rng.standard_normal((batch, 3, 10, 10)).astype("float32")
    inits = {"w1": rng.standard_normal((8, 3, 3, 3)).astype("float32") * 0.3,
             "b1": rng.standard_normal(8).astype("float32"),
             "w2": rng.standard_normal((8, 8, 3, 3)).astype("float32") * 0.2,
             "w3": rng.standard_normal((16, 8, 1, 1)).astype("float32") * 0.3,
             "fc": rng.standard_normal((10, 16)).astype("float32"), "fcb": rng.standard_normal(10).astype("float32")}
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


def test_tiny_cnn_in_the_emulator_matches_onnxruntime(rng):
    needs_nvcc()
    model, inputs = tiny_cnn(rng)
    mod, params = relay.frontend.from_onnx(model, shape={"x": inputs["x"].shape})
    lib = build_cuda(mod, params)
    kernels = [n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"]
    assert "fused_nn_conv2d_add_nn_relu" in kernels        # the residual add is the conv's epilogue
    assert "storage" in lib.graph                             # planned memory
    for _ in range(2):                                        # fresh inputs, the same executor's memory
        inputs = {"x": rng.standard_normal(inputs["x"].shape).astype("float32")}
        got = run_emulated(lib, inputs)[0]
        np.testing.assert_allclose(got, run_ort(model, inputs)[0], rtol=1e-4, atol=1e-5)


def test_cuda_graph_replay_is_captured_once_and_sees_new_inputs(rng, monkeypatch):
    """``cuda_graph=True``: the first run captures the launches, later runs replay them; an input
    set between runs reaches the kernels (the graph holds addresses, not values)."""
    from tilecraft.relay.backend.cuda_executor import EmulatedDevice
    needs_nvcc()
    model, inputs = tiny_cnn(rng)
    mod, params = relay.frontend.from_onnx(model, shape={"x": inputs["x"].shape})
    lib = build_cuda(mod, params)
    captured = []
    capture = EmulatedDevice.capture
    monkeypatch.setattr(EmulatedDevice, "capture", lambda self, steps: captured.append(steps) or capture(self, steps))
    m = graph_executor.GraphModule(emulated_executor(lib, cuda_graph=True))
    for _ in range(2):
        inputs = {"x": rng.standard_normal(inputs["x"].shape).astype("float32")}
        m.set_input(**inputs)
        m.run()
        np.testing.assert_allclose(m.get_output(0).numpy(), run_ort(model, inputs)[0], rtol=1e-4, atol=1e-5)
    assert len(captured) == 1 and len(captured[0]) == sum(n["op"] == "kernel" for n in lib.graph["nodes"])


def transformer_layer(rng, S=8, H=32, heads=2, F=64):
    """A BERT-style encoder layer in ONNX (q/k/v projections, attention with softmax, output
    projection, residual + layer norm, GELU MLP, residual + layer norm)."""
    d = H // heads
    inits = {}

    def w(name, *shape, scale=0.3):
        inits[name] = (rng.standard_normal(shape) * scale).astype("float32")
        return name
    inits["heads_shape"] = np.array([1, S, heads, d], "int64")
    inits["merge_shape"] = np.array([1, S, H], "int64")
    inits["scale"] = np.float32(1 / np.sqrt(d))
    nodes = []

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out
    proj = {}
    for p in "qkv":
        t = node("Add", [node("MatMul", ["x", w(f"w{p}", H, H)], f"{p}0"), w(f"b{p}", H)], f"{p}1")
        t = node("Reshape", [t, "heads_shape"], f"{p}2")
        proj[p] = node("Transpose", [t], f"{p}3", perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])
    s = node("Mul", [node("MatMul", [proj["q"], proj["k"]], "scores"), "scale"], "scaled")
    c = node("MatMul", [node("Softmax", [s], "probs", axis=-1), proj["v"]], "ctx")
    c = node("Reshape", [node("Transpose", [c], "ctx_t", perm=[0, 2, 1, 3]), "merge_shape"], "ctx_m")
    r = node("Add", [node("Add", [node("MatMul", [c, w("wo", H, H)], "o0"), w("bo", H)], "o1"), "x"], "res1")
    ln1 = node("LayerNormalization", [r, w("g1", H, scale=1.0), w("be1", H)], "ln1", epsilon=1e-5)
    h = node("Gelu", [node("Add", [node("MatMul", [ln1, w("w1", H, F)], "h0"), w("b1", F)], "h1")], "h2")
    r2 = node("Add", [node("Add", [node("MatMul", [h, w("w2", F, H)], "f0"), w("b2", H)], "f1"), ln1], "res2")
    node("LayerNormalization", [r2, w("g2", H, scale=1.0), w("be2", H)], "y", epsilon=1e-5)
    x = rng.standard_normal((1, S, H)).astype("float32")
    return make_model(nodes, {"x": x}, ["y"], inits, opset=20), {"x": x}


def test_tiny_transformer_layer_in_the_emulator_matches_onnxruntime(rng):
    needs_nvcc()
    model, inputs = transformer_layer(rng, S=18, H=16, F=24)   # 18 rows: the tiled GEMM, tails of rows and k
    mod, params = relay.frontend.from_onnx(model)
    lib = build_cuda(mod, params)
    got = run_emulated(lib, inputs)[0]
    np.testing.assert_allclose(got, run_ort(model, inputs)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("M,N,K,min_blocks", [(2, 37, 70, 256), (18, 70, 24, 256), (18, 70, 24, 0)],
                         ids=["gemv", "gemm32", "gemm64"])
def test_dense_bias_relu_gemm_and_gemv(rng, monkeypatch, M, N, K, min_blocks):
    """Dense + bias + ReLU in one kernel: a block per output below 16 rows (the reduction over
    its threads), shared-memory tiles with tails of rows, columns and k above (32 x 32 on a
    small GEMM; 64 x 64 when the GEMM gives blocks enough, here forced by ``MIN_BLOCKS=0``)."""
    needs_nvcc()
    monkeypatch.setattr(te_compiler_cuda, "MIN_BLOCKS", min_blocks)
    x = relay.var("x", shape=(M, K))
    w = relay.var("w", shape=(N, K))
    b = relay.var("b", shape=(N,))
    mod = relay.IRModule.from_expr(relay.Function([x, w, b], relay.nn.relu(relay.add(relay.nn.dense(x, w), b))))
    params = {"w": rng.standard_normal((N, K)).astype("float32"), "b": rng.standard_normal(N).astype("float32")}
    lib = build_cuda(mod, params)
    assert [n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"] == ["fused_nn_dense_add_nn_relu"]
    # each thread's accumulators: 4 x 4, 2 x 2, or one (a register tile that spans other threads'
    # rows would be far bigger)
    import re
    tile = re.search(r"float dense\[(\d+)\];", lib.module.get_source())
    assert tile and int(tile.group(1)) == {"gemm64": 16, "gemm32": 4, "gemv": 1}[
        {0: "gemm64"}.get(min_blocks, "gemm32" if M >= 16 else "gemv")], tile
    xv = rng.standard_normal((M, K)).astype("float32")
    want = np.maximum(xv @ params["w"].T + params["b"], 0)
    np.testing.assert_allclose(run_emulated(lib, {"x": xv})[0], want, rtol=1e-4, atol=1e-4)


def test_batch_matmul_with_a_broadcast_batch(rng):
    needs_nvcc()
    a = relay.var("a", shape=(3, 18, 24))
    b = relay.var("b", shape=(1, 20, 24))
    mod = relay.IRModule.from_expr(relay.Function([a, b], relay.exp(relay.nn.batch_matmul(a, b))))
    lib = build_cuda(mod, {})
    av = rng.uniform(-0.5, 0.5, (3, 18, 24)).astype("float32")
    bv = rng.uniform(-0.5, 0.5, (1, 20, 24)).astype("float32")
    np.testing.assert_allclose(run_emulated(lib, {"a": av, "b": bv})[0], np.exp(av @ bv[0].T), rtol=1e-5)


def _conv_records(args, want):
    """A log record for the CUDA conv2d template's workload ``args`` with the first valid
    configuration whose knobs include ``want``."""
    import tilecraft.topi.conv2d_cuda  # noqa: F401  (registers the template)
    task = autotune.task.create("topi/conv2d_nchw.cuda", args=args, target="cuda")
    for cfg in task.config_space:
        if all(cfg[k].val == v for k, v in want.items()):
            return [(autotune.MeasureInput(task.target, task, cfg), autotune.MeasureResult((1e-3,), 0))], cfg
    pytest.fail(f"no configuration of the space has {want}")


@pytest.mark.parametrize("batch,want", [(1, {"k_split": 2, "co_per_thread": 2}),
                                        (2, {"n_per_block": 2, "x_per_thread": 2})],
                         ids=["k_split", "n_per_block"])
def test_tuned_conv_config_schedules_the_fused_conv(rng, batch, want):
    """Inside apply_history_best the conv group takes the logged tiles (split reductions, several
    images per block, several pixels per thread) and still computes conv + bias + ReLU."""
    needs_nvcc()
    x = relay.var("x", shape=(batch, 8, 8, 8))
    w = relay.var("w", shape=(16, 8, 3, 3))
    b = relay.var("b", shape=(16, 1, 1))
    body = relay.nn.relu(relay.add(relay.nn.conv2d(x, w, padding=(1, 1)), b))
    mod = relay.IRModule.from_expr(relay.Function([x, w, b], body))
    params = {"w": rng.standard_normal((16, 8, 3, 3)).astype("float32"),
              "b": rng.standard_normal((16, 1, 1)).astype("float32")}
    records, cfg = _conv_records((batch, 8, 8, 8, 16, 3, 3, 1, 1, "float32"), want)
    with autotune.apply_history_best(records):
        lib = build_cuda(mod, params)
        with tc.target.Target("cuda"):
            fused, _ = relay.optimize(mod, "cuda", params)
            group = next(n.op for n in relay.ir.post_order(fused["main"].body)
                         if isinstance(n, relay.Call) and isinstance(n.op, relay.Function))
            _, _, anchor = te_compiler_cuda.compute_group(group, te_compiler_cuda.cuda_anchor)
    for k, v in want.items():
        assert anchor.parts["tiles"][k] == v
    xv = rng.standard_normal((batch, 8, 8, 8)).astype("float32")
    torch = pytest.importorskip("torch")
    want_out = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(xv), torch.from_numpy(params["w"]),
                                                     padding=1) + torch.from_numpy(params["b"])).numpy()
    np.testing.assert_allclose(run_emulated(lib, {"x": xv})[0], want_out, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride,pad", [(2, 0), (2, 1), (3, 0), (1, 1)])
def test_strided_1x1_conv_stages_only_the_pixels_it_reads(rng, stride, pad):
    """A 1x1 convolution with a stride (ResNet's down-sampling shortcuts) or padding gathers just
    the pixels it reads into the shared patch: tile_y x tile_x of them per channel, not the
    strided span (4x as many at stride 2; these shortcuts were ResNet-50's slowest kernels on an
    H100, 85-119 us at batch 1); the result is the convolution's, padding included."""
    import re
    needs_nvcc()
    H, W = 9, 11
    x = relay.var("x", shape=(1, 8, H, W))
    w = relay.var("w", shape=(16, 8, 1, 1))
    b = relay.var("b", shape=(16, 1, 1))
    body = relay.nn.relu(relay.add(relay.nn.conv2d(x, w, strides=(stride, stride), padding=(pad, pad)), b))
    mod = relay.IRModule.from_expr(relay.Function([x, w, b], body))
    params = {"w": rng.standard_normal((16, 8, 1, 1)).astype("float32"),
              "b": rng.standard_normal((16, 1, 1)).astype("float32")}
    lib = build_cuda(mod, params)
    with tc.target.Target("cuda"):
        fused, _ = relay.optimize(mod, "cuda", params)
        group = next(n.op for n in relay.ir.post_order(fused["main"].body)
                     if isinstance(n, relay.Call) and isinstance(n.op, relay.Function))
        _, _, anchor = te_compiler_cuda.compute_group(group, te_compiler_cuda.cuda_anchor)
    t = anchor.parts["tiles"]
    (size,) = re.findall(r"float Pad_shared\[(\d+)\]", lib.module.get_source())
    assert int(size) == t["ci_tile"] * t["tile_y"] * t["tile_x"]
    xv = rng.standard_normal((1, 8, H, W)).astype("float32")
    xp = np.pad(xv, ((0, 0), (0, 0), (pad, pad), (pad, pad)))[:, :, ::stride, ::stride]
    want = np.maximum(np.einsum("nchw,oc->nohw", xp, params["w"][:, :, 0, 0]) + params["b"], 0)
    np.testing.assert_allclose(run_emulated(lib, {"x": xv})[0], want, rtol=1e-5, atol=1e-5)


def test_untuned_conv_on_a_batch_takes_the_batch_tiles(rng):
    """Without a tuned config, a conv2d on BATCH_TILES_MIN_N images or more takes the larger
    register tiles (2 images x 2 pixels x 4 channels per thread, 32 channels per block); fewer
    images keep the template's fallback; both compute conv + bias + ReLU."""
    needs_nvcc()
    torch = pytest.importorskip("torch")
    for batch, want in ((te_compiler_cuda.BATCH_TILES_MIN_N, {"n_per_block": 2, "x_per_thread": 2, "tile_co": 32}),
                        (2, {"n_per_block": 1, "x_per_thread": 1, "tile_co": 16})):
        x = relay.var("x", shape=(batch, 8, 6, 6))
        w = relay.var("w", shape=(32, 8, 3, 3))
        b = relay.var("b", shape=(32, 1, 1))
        body = relay.nn.relu(relay.add(relay.nn.conv2d(x, w, padding=(1, 1)), b))
        mod = relay.IRModule.from_expr(relay.Function([x, w, b], body))
        params = {"w": rng.standard_normal((32, 8, 3, 3)).astype("float32"),
                  "b": rng.standard_normal((32, 1, 1)).astype("float32")}
        lib = build_cuda(mod, params)
        with tc.target.Target("cuda"):
            fused, _ = relay.optimize(mod, "cuda", params)
            group = next(n.op for n in relay.ir.post_order(fused["main"].body)
                         if isinstance(n, relay.Call) and isinstance(n.op, relay.Function))
            _, _, anchor = te_compiler_cuda.compute_group(group, te_compiler_cuda.cuda_anchor)
        assert {k: anchor.parts["tiles"][k] for k in want} == want
        xv = rng.standard_normal((batch, 8, 6, 6)).astype("float32")
        want_out = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(xv), torch.from_numpy(params["w"]),
                                                         padding=1) + torch.from_numpy(params["b"])).numpy()
        np.testing.assert_allclose(run_emulated(lib, {"x": xv})[0], want_out, rtol=1e-4, atol=1e-4)


def test_fallback_splits_the_channels_of_a_small_deep_conv(rng):
    """Without a log, a convolution whose output gives few blocks (a deep layer at batch 1) sums
    its input channels in parts (k_split) and still computes conv + residual add + ReLU."""
    needs_nvcc()
    x = relay.var("x", shape=(1, 128, 4, 4))
    w = relay.var("w", shape=(16, 128, 3, 3))
    r = relay.var("r", shape=(1, 16, 4, 4))
    mod = relay.IRModule.from_expr(relay.Function([x, w, r], relay.nn.relu(relay.add(
        relay.nn.conv2d(x, w, padding=(1, 1)), r))))
    params = {"w": rng.standard_normal((16, 128, 3, 3)).astype("float32")}
    lib = build_cuda(mod, params)
    with tc.target.Target("cuda"):
        fused, _ = relay.optimize(mod, "cuda", params)
        group = next(n.op for n in relay.ir.post_order(fused["main"].body)
                     if isinstance(n, relay.Call) and isinstance(n.op, relay.Function))
        _, _, anchor = te_compiler_cuda.compute_group(group, te_compiler_cuda.cuda_anchor)
    assert anchor.parts["tiles"]["k_split"] == 2
    xv, rv = rng.standard_normal((1, 128, 4, 4)).astype("float32"), rng.standard_normal((1, 16, 4, 4)).astype("float32")
    torch = pytest.importorskip("torch")
    want = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(xv), torch.from_numpy(params["w"]), padding=1)
                      + torch.from_numpy(rv)).numpy()
    np.testing.assert_allclose(run_emulated(lib, {"x": xv, "r": rv})[0], want, rtol=1e-4, atol=1e-4)


def test_task_extraction_for_cuda_gives_the_conv_template(rng):
    model, inputs = tiny_cnn(rng)
    mod, params = relay.frontend.from_onnx(model, shape={"x": inputs["x"].shape})
    tasks = autotune.task.extract_from_program(mod["main"], target="cuda", params=params)
    assert [t.name for t in tasks] == ["topi/conv2d_nchw.cuda"] * 3
    assert [t.args[:5] for t in tasks] == [(1, 3, 10, 10, 8), (1, 8, 10, 10, 8), (1, 8, 5, 5, 16)]
    assert all(t.target.kind == "cuda" for t in tasks)


def test_export_and_load_a_cuda_model(rng, tmp_path):
    needs_nvcc()
    model, inputs = tiny_cnn(rng)
    mod, params = relay.frontend.from_onnx(model, shape={"x": inputs["x"].shape})
    lib = build_cuda(mod, params)
    path = lib.export_library(tmp_path / "model.tcuda")
    with zipfile.ZipFile(path) as z:
        assert {"manifest.json", "kernels.cubin", "kernels.cu", "graph.json", "params.json",
                "params.bin"} <= set(z.namelist())
        assert json.loads(z.read("graph.json")) == lib.graph
    loaded = tc.runtime.load_module(path)
    assert loaded.graph == lib.graph
    assert loaded.module.cubin == lib.module.cubin
    assert set(loaded.params) == set(lib.params)
    for k, v in lib.params.items():
        np.testing.assert_array_equal(loaded.params[k], v)


def test_cuda_executor_errors(rng):
    needs_nvcc()
    model, inputs = tiny_cnn(rng)
    mod, params = relay.frontend.from_onnx(model, shape={"x": inputs["x"].shape})
    m = graph_executor.GraphModule(emulated_executor(build_cuda(mod, params)))
    with pytest.raises(GraphExecutorError, match=r"input 'x' has shape \[1, 3, 10, 10\], got \[1, 3, 10, 9\]"):
        m.set_input("x", np.zeros((1, 3, 10, 9), "float32"))
    with pytest.raises(GraphExecutorError, match="the model has no input 'y'; its inputs: x"):
        m.set_input("y", inputs["x"])
    with pytest.raises(GraphExecutorError, match="input 'x' has dtype float32, got float64"):
        m.set_input("x", inputs["x"].astype("float64"))
    with pytest.raises(GraphExecutorError, match="output 1 does not exist; the model has 1 output"):
        m.get_output(1)


def test_a_model_without_kernels_is_refused():
    needs_nvcc()
    x = relay.var("x", shape=(2, 3))
    with pytest.raises(relay.RelayError, match="the model has no kernels"):
        relay.build(relay.IRModule.from_expr(relay.Function([x], x)), target="cuda")


def test_cli_compile_for_cuda(rng, tmp_path, capsys):
    """``tilecraft compile --target cuda`` writes the CUDA archive of the model; without a GPU
    ``tilecraft run`` of it is one line and exit status 2."""
    from tilecraft.cli import main
    needs_nvcc()
    model, inputs = tiny_cnn(rng)
    path, out = tmp_path / "net.onnx", tmp_path / "net.tcuda"
    path.write_bytes(model.SerializeToString())
    assert main(["compile", str(path), "--target", "cuda", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tuned configs for 0 of 3 tunable workloads (no --tuning-log" in text and f"wrote {out}" in text
    loaded = tc.runtime.load_module(out)
    assert loaded.module.type_key == "cuda" and loaded.graph["nodes"][0]["name"] == "x"
    if _gpu_reason() is not None:
        assert main(["run", str(out), "--fill", "random"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"tilecraft run: error: {out}: a CUDA model, which cannot run here: "), err
        assert err.count("\n") == 1


def test_resnet18_kernels_compile_with_nvcc(rng):
    """Every kernel of ResNet-18 (224x224, batch 1) lowered with the GPU schedules and compiled
    for sm_90 by nvcc (the cubin has each kernel)."""
    needs_nvcc()
    pytest.importorskip("onnx")
    model = bench_module("relay_resnet18").resnet18(rng)
    mod, params = relay.frontend.from_onnx(model, shape={"data": (1, 3, 224, 224)})
    lib = build_cuda(mod, params)
    kernels = {n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"}
    assert len(kernels) >= 15
    assert lib.module.arch.startswith("sm_") and len(lib.module.cubin) > 0
    source = lib.module.get_source()
    for k in kernels:
        assert f"void {k}" in source or f" {k}(" in source or f" {k}_" in source, k


# --- on a GPU ----------------------------------------------------------------------------------

def _gpu_reason():
    """None when models can run on a GPU here, else why not."""
    from tilecraft.codegen.cuda_compile import find_nvcc
    why = None
    try:
        import pycuda.driver as drv
        drv.init()
        if drv.Device.count() == 0:
            why = "no CUDA device"
    except Exception as e:          # noqa: BLE001 -- no pycuda, no driver
        why = f"no usable GPU ({type(e).__name__}: {e})"
    if why is None and find_nvcc() is None:
        why = "nvcc is absent"
    return why


def _gpu_or_skip():
    why = _gpu_reason()
    if why:
        pytest.skip(f"{why}: the GPU flow is checked in the emulator (tests above)")


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["resnet18", "bert"])
def test_model_on_the_gpu_matches_pytorch(rng, name, tmp_path):
    """ResNet-18 (batch 2) and a BERT-base layer (seq 128) built for the GPU against PyTorch on
    fresh inputs, run twice; the exported archive, loaded back, gives the same output."""
    _gpu_or_skip()
    torch = pytest.importorskip("torch")
    rc = bench_module("relay_cuda")
    torch.manual_seed(int(rng.integers(1 << 30)))
    if name == "resnet18":
        model = rc.randomize(torch, rc.resnet18(torch, torch.nn))
        shape, tol = (2, 3, 224, 224), 2e-3
    else:
        model = rc.randomize(torch, rc.bert_layer(torch, torch.nn))
        shape, tol = (1, 128, 768), 2e-3
    x = torch.randn(*shape)
    mod, params = relay.frontend.from_torch(model, (x,))
    lib = build_cuda(mod, params)
    m = graph_executor.GraphModule(lib["default"](tc.cuda(0)))
    for _ in range(2):
        x = torch.randn(*shape)
        with torch.no_grad():
            want = model(x).numpy()
        m.set_input(0, x.numpy())
        m.run()
        got = m.get_output(0).numpy()
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    loaded = tc.runtime.load_module(lib.export_library(tmp_path / "model.tcuda"))
    m2 = graph_executor.GraphModule(loaded["default"](tc.cuda(0)))
    m2.set_input(0, x.numpy())
    m2.run()
    np.testing.assert_array_equal(m2.get_output(0).numpy(), got)
    m3 = graph_executor.GraphModule(lib["default"](tc.cuda(0), cuda_graph=True))
    for _ in range(2):                    # a captured CUDA graph, replayed with a new input
        x = torch.randn(*shape)
        m.set_input(0, x.numpy())
        m.run()
        m3.set_input(0, x.numpy())
        m3.run()
        np.testing.assert_array_equal(m3.get_output(0).numpy(), m.get_output(0).numpy())
    assert m3.benchmark(tc.cuda(0), repeat=1, number=2).mean > 0
    assert m.benchmark(tc.cuda(0), repeat=1, number=2).mean > 0


@pytest.mark.cuda
def test_tune_relay_flow_on_the_gpu(rng, tmp_path):
    """TVM's tune_relay flow with a CUDA target: extract the conv task, tune it a few trials on
    the GPU, build inside apply_history_best(log): the conv kernel takes the log's best config and
    the model matches onnxruntime."""
    _gpu_or_skip()
    inputs = {"x": rng.standard_normal((1, 16, 14, 14)).astype("float32")}
    inits = {"w": (rng.standard_normal((32, 16, 3, 3)) * 0.2).astype("float32"),
             "fc": (rng.standard_normal((10, 32)) * 0.3).astype("float32")}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1)]
    model = make_model(nodes, inputs, ["y"], inits)
    mod, params = relay.frontend.from_onnx(model, shape={"x": inputs["x"].shape})
    tasks = autotune.task.extract_from_program(mod["main"], target="cuda", params=params)
    assert [t.workload for t in tasks] == [("topi/conv2d_nchw.cuda", 1, 16, 14, 14, 32, 3, 3, 1, 1, "float32")]
    log = tmp_path / "net.jsonl"
    option = autotune.measure_option(builder=autotune.LocalBuilder(timeout=60),
                                     runner=autotune.LocalRunner(timeout=30, number=2, repeat=1))
    report = autotune.tune_tasks(tasks, 8, log, measure_option=option, min_trials=8, progress=False)
    assert report[0]["done"] == 8 and report[0]["best_gflops"] > 0
    (inp, _), = autotune.record.best_by_workload(str(log)).values()
    with autotune.apply_history_best(str(log)):
        lib = build_cuda(mod, params)
        with tc.target.Target("cuda"):
            fused, _ = relay.optimize(mod, "cuda", params)
            group = next(n.op for n in relay.ir.post_order(fused["main"].body)
                         if isinstance(n, relay.Call) and isinstance(n.op, relay.Function))
            _, _, anchor = te_compiler_cuda.compute_group(group, te_compiler_cuda.cuda_anchor)
    for k in ("tile_co", "tile_y", "tile_x", "co_per_thread", "ci_tile", "x_per_thread"):
        assert anchor.parts["tiles"][k] == inp.config[k].val, k
    m = graph_executor.GraphModule(lib["default"](tc.cuda(0)))
    m.set_input(**inputs)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), run_ort(model, inputs)[0], rtol=1e-4, atol=1e-4)
