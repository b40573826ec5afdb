"""FuseAttention and ``nn.contrib_attention`` (``topi/attention.py``): the fused kernel against
numpy and the interpreter (sequence lengths that are not a multiple of the row blocks, head
widths that are not a multiple of the vector lanes, operands at column offsets); attention
blocks built with onnx.helper, with and without the pass, against onnxruntime (kernel outputs
poisoned); blocks the pass must leave alone; the op's error message; golden text."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import relay, te
from tilecraft.relay import transform as T
from tilecraft.relay.ir import Call, Function, post_order
from tilecraft.topi.attention import attention_compute, attention_tiles, schedule_attention
from tilecraft.topi.cpu_intrinsics import vector_isa

from relay_helpers import helper, make_model, run_lib, run_ort

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


def np_attention(q, k, v, scale):
    """``softmax(scale · q kᵀ) v`` per head; q, k, v ``[H, S, d]``."""
    s = scale * q @ k.transpose(0, 2, 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("S,H,d,tiles", [(37, 3, 20, None), (128, 2, 64, None), (5, 1, 16, None),
                                         (37, 2, 24, (6, 3, 8)), (50, 1, 16, (12, 1, 1))])
def test_attention_kernel_matches_numpy_and_interpreter(rng, check_llvm, S, H, d, tiles):
    """One [S, W] tensor holding Q, K, V (at column offsets, with spare columns around them),
    scheduled with the fallback (``tiles`` None) or other knob values ``(qk_rows, qk_vectors,
    o_rows)`` whose tiles leave tails; the interpreter and numpy agree with the kernel."""
    from tilecraft.autotune.space import FallbackConfigEntity
    from tilecraft.topi.attention import attention_config
    W = 3 * H * d + 7
    offsets = (3, 3 + H * d, 5 + 2 * H * d)
    x = te.placeholder((S, W), name="qkv")
    out, stages = attention_compute(x, x, x, H, d, 0.3, offsets)
    s = te.create_schedule(out.op)
    lanes = vector_isa().lanes
    params = attention_config(FallbackConfigEntity(), S, H, d)
    if tiles is not None:
        params = (tiles[0], tiles[1] * lanes, tiles[2], lanes)
    schedule_attention(s, out, stages, params)
    xv = rng.uniform(-2, 2, (S, W)).astype("float32")
    q, k, v = (xv[:, o:o + H * d].reshape(S, H, d).transpose(1, 0, 2) for o in offsets)
    want = np_attention(q, k, v, 0.3).transpose(1, 0, 2)
    check_llvm(s, [x, out], {x: xv}, expected={out: want}, rtol=1e-5, atol=1e-5, passes=False)


def test_attention_tiles():
    assert attention_tiles(64, 16, 32) == (8, 4)
    assert attention_tiles(64, 8, 16) == (4, 1)
    assert attention_tiles(20, 16, 32) == (8, 8)


def test_attention_template_tuned_build(rng, tmp_path):
    """The template as a tuning task: a few trials into a log, then the graph's attention built
    with the log's best config (inside apply_history_best) still matches onnxruntime."""
    from tilecraft import autotune
    model, inputs = attention_model(rng, S=20, H=2, d=16)
    mod, params = relay.frontend.from_onnx(model)
    tasks = [t for t in autotune.task.extract_from_program(mod["main"], target="llvm", params=params)
             if t.name == "topi/attention.llvm"]
    assert [t.args for t in tasks] == [(20, 2, 16, "float32")]
    log = str(tmp_path / "att.jsonl")
    autotune.tune_tasks(tasks, 4, log, progress=False, min_trials=4)
    with autotune.apply_history_best(log), tc.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    np.testing.assert_allclose(run_lib(lib, inputs)[0], run_ort(model, inputs)[0], rtol=1e-4, atol=1e-5)


def attention_model(rng, S=37, H=3, d=16, scale="mul", combined=True, mask=False, batch=1, softmax_axis=-1):
    """A BERT-style self-attention block (batch ``batch``): Q, K, V projections of ``x`` (three
    MatMul + bias: combined by CombineParallelDense when ``combined``, else Q, K, V are inputs),
    per-head reshapes and transposes (K to [.., d, S]), scores scaled by a Mul or a Div
    (``scale``), an optional additive mask, softmax, · V, the heads merged back, an output
    projection."""
    C = H * d
    nodes, inits = [], {"heads": np.array([batch, S, H, d], "int64"), "merge": np.array([batch, S, C], "int64")}
    inputs = {"x": rng.uniform(-1, 1, (batch, S, C)).astype("float32")}

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out
    proj = {}
    for p in "qkv":
        if combined:
            inits[f"w{p}"] = rng.uniform(-0.5, 0.5, (C, C)).astype("float32")
            inits[f"b{p}"] = rng.uniform(-0.5, 0.5, (C,)).astype("float32")
            t = node("Add", [node("MatMul", ["x", f"w{p}"], f"{p}0"), f"b{p}"], f"{p}1")
        else:
            inputs[p] = rng.uniform(-1, 1, (batch, S, C)).astype("float32")
            t = p
        t = node("Reshape", [t, "heads"], f"{p}2")
        proj[p] = node("Transpose", [t], f"{p}3", perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])
    s = node("MatMul", [proj["q"], proj["k"]], "scores")
    inits["scale"] = np.array(1 / np.sqrt(d) if scale == "mul" else np.sqrt(d), "float32")
    s = node("Mul" if scale == "mul" else "Div", [s, "scale"], "scaled")
    if mask:
        inits["mask"] = rng.uniform(-3, 0, (1, 1, 1, S)).astype("float32")
        s = node("Add", [s, "mask"], "masked")
    pr = node("Softmax", [s], "probs", axis=softmax_axis)
    c = node("MatMul", [pr, proj["v"]], "ctx")
    c = node("Transpose", [c], "ctx_t", perm=[0, 2, 1, 3])
    c = node("Reshape", [c, "merge"], "ctx_m")
    inits["wo"] = rng.uniform(-0.5, 0.5, (C, C)).astype("float32")
    node("MatMul", [c, "wo"], "y")
    return make_model(nodes, inputs, ["y"], inits), inputs


def _ops(mod) -> list:
    return [c.op.name for n in post_order(mod["main"].body) if type(n) is Call and isinstance(n.op, Function)
            for c in post_order(n.op.body) if type(c) is Call and not isinstance(c.op, Function)]


def _build(model, inputs, disabled=()):
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in inputs.items()})
    with tc.transform.PassContext(opt_level=3, disabled_pass=list(disabled)):
        opt = relay.build_module.optimize(mod, "llvm", params)[0]
        lib = relay.build(mod, target="llvm", params=params)
    return opt, lib


@pytest.mark.parametrize("case", [dict(), dict(scale="div"), dict(combined=False), dict(S=128, H=2, d=64)])
def test_fused_attention_matches_onnxruntime(rng, case):
    """The block becomes one attention kernel (no batch_matmul, transpose or softmax left; with
    the combined projection it reads the GEMM's output at three offsets), with and without the
    pass the same result as onnxruntime."""
    model, inputs = attention_model(rng, **case)
    expected = run_ort(model, inputs)[0]
    opt, lib = _build(model, inputs)
    ops = _ops(opt)
    assert ops.count("nn.contrib_attention") == 1
    assert not {"nn.batch_matmul", "transpose", "nn.softmax"} & set(ops)
    if case.get("combined", True):
        att = [n for n in post_order(opt["main"].body) if type(n) is Call and isinstance(n.op, Function)
               and "nn.contrib_attention" in _ops_of(n.op)]
        assert len(att) == 1 and len(att[0].op.params) == 1         # Q, K, V: one tensor read in place
    np.testing.assert_allclose(run_lib(lib, inputs)[0], expected, rtol=1e-4, atol=1e-5)
    opt0, lib0 = _build(model, inputs, ["FuseAttention"])
    assert "nn.contrib_attention" not in _ops(opt0) and "nn.batch_matmul" in _ops(opt0)
    np.testing.assert_allclose(run_lib(lib0, inputs)[0], expected, rtol=1e-4, atol=1e-5)


def _ops_of(fn) -> list:
    return [c.op.name for c in post_order(fn.body) if type(c) is Call and not isinstance(c.op, Function)]


@pytest.mark.parametrize("case", [dict(mask=True), dict(batch=2), dict(softmax_axis=2)])
def test_attention_left_alone(rng, case):
    """A mask added to the scores, a batch of 2, a softmax over another axis: no fused op, the
    build still matches onnxruntime."""
    model, inputs = attention_model(rng, S=12, H=2, d=8, **case)
    opt, lib = _build(model, inputs)
    assert "nn.contrib_attention" not in _ops(opt)
    np.testing.assert_allclose(run_lib(lib, inputs)[0], run_ort(model, inputs)[0], rtol=1e-4, atol=1e-5)


def _typed_main(model, inputs):
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in inputs.items()})
    with tc.transform.PassContext(opt_level=3):
        return T.Sequential([T.InferType(), T.FoldConstant(), T.EliminateCommonSubexpr(), T.CombineParallelDense()])(
            relay.IRModule.from_expr(relay.build_module.bind_params_by_name(mod["main"], params)))


def test_no_rewrite_under_a_cuda_target(rng):
    from tilecraft.target import Target
    model, inputs = attention_model(rng, S=12, H=2, d=8)
    mod = _typed_main(model, inputs)
    with tc.transform.PassContext(opt_level=3), Target("cuda"):
        assert T.FuseAttention()(mod)["main"] is mod["main"]
    with tc.transform.PassContext(opt_level=3):
        assert T.FuseAttention()(mod)["main"] is not mod["main"]


def test_fuse_attention_golden(golden, rng):
    model, inputs = attention_model(rng, S=6, H=2, d=4)
    with tc.transform.PassContext(opt_level=3):
        out = T.FuseAttention()(_typed_main(model, inputs))
    golden("relay_fuse_attention", str(out))


def test_attention_op_error():
    q = relay.var("q", shape=(8, 20))
    with pytest.raises(relay.RelayError, match=r"nn.contrib_attention: k must be \[S, W\] with 2 heads x 8 "
                                               r"columns from column 10, got .*\(S = 8\)"):
        call = relay.nn.contrib_attention(q, q, q, heads=2, head_dim=8, scale=0.5, offsets=(0, 10, 4))
        T.InferType()(relay.IRModule.from_expr(relay.Function([q], call)))


def test_transposed_key_form_and_scale_on_the_left(rng):
    """K per head as [H, S, d] with ``batch_matmul(Q, K, transpose_b=True)`` (TVM's default
    form) and the scale as ``multiply(scale, scores)``, Q, K, V three separate [S, H·d] inputs:
    fused (offsets 0), the same result as the unfused build and numpy."""
    S, H, d = 19, 3, 8
    names = ("q", "k", "v")
    xs = {n: relay.var(n, shape=(S, H * d)) for n in names}

    def heads(x):
        return relay.reshape(relay.transpose(relay.reshape(x, (1, S, H, d)), (0, 2, 1, 3)), (H, S, d))
    scores = relay.nn.batch_matmul(heads(xs["q"]), heads(xs["k"]), transpose_b=True)
    probs = relay.nn.softmax(relay.multiply(relay.const(np.float32(0.4)), scores), axis=-1)
    ctx = relay.transpose(relay.reshape(relay.nn.batch_matmul(probs, heads(xs["v"]), transpose_b=False),
                                        (1, H, S, d)), (0, 2, 1, 3))
    mod = relay.IRModule.from_expr(relay.Function([xs[n] for n in names], relay.reshape(ctx, (S, H * d))))
    vals = {n: rng.uniform(-1.5, 1.5, (S, H * d)).astype("float32") for n in names}
    q, k, v = (vals[n].reshape(S, H, d).transpose(1, 0, 2) for n in names)
    want = np_attention(q, k, v, 0.4).transpose(1, 0, 2).reshape(S, H * d)
    for disabled in ([], ["FuseAttention"]):
        with tc.transform.PassContext(opt_level=3, disabled_pass=disabled):
            opt = relay.build_module.optimize(mod, "llvm")[0]
            lib = relay.build(mod, target="llvm")
        assert ("nn.contrib_attention" in _ops(opt)) == (not disabled)
        np.testing.assert_allclose(run_lib(lib, vals)[0], want, rtol=1e-5, atol=1e-5)
