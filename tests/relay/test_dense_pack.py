"""Dense layers of a model through the micro-kernel GEMM on weights packed at build time
(``topi/dense_pack.llvm``, ``nn.contrib_dense_pack`` made by AlterOpLayout) and SinkReshape,
which lets a 3-d ``x @ W + b`` keep its bias, GELU and residual add in the dense kernel:

* the template, fallback and random configs, with and without an epilogue, against numpy on
  poisoned outputs;
* SinkReshape: golden text on a small graph, the cases it leaves alone;
* an encoder-style ONNX graph (3-d MatMul + Add, erf GELU, residual, LayerNormalization,
  attention) against onnxruntime: untuned, and after tuning its dense tasks for a few trials;
  its kernels are the fused ones;
* the lowering error for a weight packed for another configuration.
"""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import autotune, relay, te
from tilecraft.codegen.llvm_features import cpu_features
from tilecraft.relay.transform import InferType, SinkReshape
from tilecraft.topi import dense_pack as dp
from tilecraft.topi.cpu_intrinsics import vector_isa

from relay_helpers import check_model, helper, make_model, run_lib, run_ort

HOST = cpu_features("llvm")
ISA = vector_isa("llvm")
needs_fma = pytest.mark.skipif(not {"avx2", "fma"} <= HOST and "avx512f" not in HOST,
                               reason="this CPU has no FMA (AVX2 + FMA or AVX-512): no micro-kernel; "
                                      "the dense layers keep the generic template")
pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


def _configs(task, rng, n=3):
    return [None] + [task.config_space.get(i) for i in task.config_space.sample_ints(n, rng)]


@needs_fma
def test_template_matches_numpy(check_llvm, rand, rng):
    M, N, K = 24, 6 * ISA.lanes, 128
    task = autotune.task.create("topi/dense_pack.llvm", args=(M, N, K, "float32"), target="llvm")
    a, w = rand((M, K)), rand((N, K))
    for cfg in _configs(task, rng):
        with tc.target.Target("llvm"):
            if cfg is None:
                with pytest.warns(UserWarning, match="fallback configuration"):
                    s, (data, packed, C) = task.func(*task.args)
            else:
                s, (data, packed, C) = task.instantiate(cfg)
        nr = packed.shape[2].value
        check_llvm(s, [data, packed, C], {data: a, packed: dp.pack_weight(w, nr)}, {C: a @ w.T},
                   rtol=1e-4, atol=1e-4, passes=False)


@needs_fma
def test_epilogue_in_the_blocks(check_llvm, rand, rng):
    """bias + erf GELU computed per block after the accumulation (C a per-block buffer)."""
    M, N, K = 16, 4 * ISA.lanes, 96
    a, w, b = rand((M, K)), rand((N, K)), rand((N,))
    with tc.target.Target("llvm"):
        params = dp.dense_pack_config(autotune.FallbackConfigEntity(), M, N, K)
        data = te.placeholder((M, K), name="data")
        packed = te.placeholder((N // params[1], K, params[1]), name="packed")
        bias = te.placeholder((N,), name="bias")
        C = dp.dense_pack_compute(data, packed)
        h = te.compute((M, N), lambda i, j: C[i, j] + bias[i * 0 + j], name="h")
        out = te.compute((M, N), lambda i, j: h[i, j] * 0.5 * (1.0 + te.erf(h[i, j] * 0.7071067811865476)),
                         name="gelu")
        s = te.create_schedule(out.op)
        s[h].compute_inline()
        dp.schedule_dense_pack(s, C, out, params)
    from math import erf
    hv = a @ w.T + b
    want = hv * 0.5 * (1 + np.vectorize(erf)(hv / np.sqrt(2)))
    check_llvm(s, [data, packed, bias, out], {data: a, packed: dp.pack_weight(w, params[1]), bias: b},
               {out: want.astype("float32")}, rtol=1e-4, atol=1e-4, passes=False)


@needs_fma
@pytest.mark.parametrize("M, N, K", [(128, 3072, 768), (128, 768, 3072), (256, 768, 768), (64, 96, 64), (512, 64, 64)])
def test_fallback_streams_each_panel_once(M, N, K):
    """Untuned, a dense layer of up to 128 rows is one block of rows, the blocks of columns
    outermost: each weight panel is read from memory once per run (in a model the weights are
    cold; four blocks of rows reread them and were 20-30% slower); taller ones use blocks of
    128 to 256 rows (the template's largest ``mc_tiles``, 16)."""
    mr, nr, kc, mc, nc, order, _ = dp.dense_pack_config(autotune.FallbackConfigEntity(), M, N, K)
    rows = mr * mc
    assert M % rows == 0 and nc == 1 and order == "nm" and mc <= 16
    assert rows == M if M <= 128 else 128 <= rows <= 256


@needs_fma
@pytest.mark.parametrize("M, N, K", [(128, 3072, 768), (128, 2304, 768), (128, 768, 3072), (64, 64, 64)])
def test_fallback_tile_follows_the_host(M, N, K):
    """On AVX-512 (32 registers) the fallback's register tile is 8 x 3 vectors where three
    vectors divide N (faster on Emerald Rapids: bench/relay_dense_variants.py), else two
    vectors; on AVX2 two vectors and at most half the registers as accumulators."""
    from tilecraft.topi.cpu_intrinsics import vector_isa
    isa = vector_isa()
    mr, nr, *_ = dp.dense_pack_config(autotune.FallbackConfigEntity(), M, N, K)
    if isa.registers >= 32 and N % (3 * isa.lanes) == 0:
        assert (mr, nr) == (8, 3 * isa.lanes)
    else:
        assert nr == 2 * isa.lanes and mr * 2 <= isa.registers // 2


def test_pack_weight_layout(rng):
    w = rng.standard_normal((48, 5)).astype("float32")
    p = dp.pack_weight(w, 16)
    assert p.shape == (3, 5, 16)
    for j in range(48):
        np.testing.assert_array_equal(p[j // 16, :, j % 16], w[j])


def test_packed_panels_recipe_is_one_weight():
    """Arguments of two panel widths get the same data and the same weight, packed."""
    from tilecraft.autotune.inputs import RecipeError, make_inputs
    a = make_inputs(("packed_panels", ()), [((4, 6), "float32", False), ((2, 6, 16), "float32", False),
                                            ((4, 32), "float32", True)], seed=3)
    b = make_inputs(("packed_panels", ()), [((4, 6), "float32", False), ((4, 6, 8), "float32", False),
                                            ((4, 32), "float32", True)], seed=3)
    np.testing.assert_array_equal(a[0], b[0])
    unpack = [p.transpose(0, 2, 1).reshape(32, 6) for p in (a[1], b[1])]
    np.testing.assert_array_equal(unpack[0], unpack[1])
    assert np.count_nonzero(unpack[0]) == unpack[0].size
    with pytest.raises(RecipeError, match="packed_panels: the arguments must be"):
        make_inputs(("packed_panels", ()), [((4, 6), "float32", False), ((4, 32), "float32", True)], seed=3)


def _sink(body, *params):
    mod = relay.IRModule.from_expr(relay.Function(list(params), body))
    with tc.transform.PassContext(opt_level=3):
        return SinkReshape()(InferType()(mod))


def test_sink_reshape_golden(golden):
    """dense → reshape → +bias → erf-GELU-like ops → +residual → layer norm → reshape back:
    everything before the reshape, the reshape back cancels, the residual reshaped once."""
    x = relay.var("x", shape=(6, 8))
    r = relay.var("r", shape=(1, 6, 4))
    w = relay.const(np.ones((4, 8), "float32"))
    h = relay.reshape(relay.nn.dense(x, w), (1, 6, 4))
    h = relay.add(h, relay.const(np.arange(4, dtype="float32").reshape(1, 1, 4)))
    h = relay.multiply(h, relay.erf(relay.multiply(h, relay.const(0.5))))
    h = relay.add(h, r)
    g, b = relay.const(np.ones(4, "float32")), relay.const(np.zeros(4, "float32"))
    y = relay.reshape(relay.nn.layer_norm(h, g, b), (6, 4))
    mod = _sink(y, x, r)
    golden("relay_sink_reshape", str(mod))
    names = [n.op.name for n in relay.ir.post_order(mod["main"].body) if isinstance(n, relay.Call)]
    assert names.count("reshape") == 1          # the residual's, to the dense layer's 2-d shape


def test_sink_reshape_leaves_other_reshapes():
    """A reshape that changes the last axis, and a broadcast along a leading axis, stay."""
    x = relay.var("x", shape=(6, 8))
    y = relay.exp(relay.reshape(x, (1, 6, 2, 4)))                      # last axis 8 -> 4
    mod = _sink(y, x)
    assert [n.op.name for n in relay.ir.post_order(mod["main"].body) if isinstance(n, relay.Call)] == \
        ["reshape", "exp"]
    col = relay.const(np.ones((1, 6, 1), "float32"))                   # varies along rows
    z = relay.add(relay.reshape(x, (1, 6, 8)), col)
    mod = _sink(z, x)
    assert [n.op.name for n in relay.ir.post_order(mod["main"].body) if isinstance(n, relay.Call)] == \
        ["reshape", "add"]


def encoder_block(rng, S=16, H=2 * 16, heads=2, F=4 * 16):
    """A small BERT-style layer in ONNX: q/k/v projections, attention, output projection with a
    residual, layer norm, erf-GELU FFN with a residual, layer norm."""
    d = H // heads
    inits, nodes = {}, []

    def w(name, *shape, scale=0.2):
        inits[name] = (rng.standard_normal(shape) * scale).astype("float32")
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out
    inits["heads"] = np.array([1, S, heads, d], "int64")
    inits["merge"] = np.array([1, S, H], "int64")
    proj = {}
    for p in "qkv":
        t = node("Add", [node("MatMul", ["x", w(f"w{p}", H, H)], f"{p}0"), w(f"b{p}", H)], f"{p}1")
        t = node("Reshape", [t, "heads"], f"{p}2")
        proj[p] = node("Transpose", [t], f"{p}3", perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])
    inits["scale"] = np.float32(1 / np.sqrt(d))
    s = node("Mul", [node("MatMul", [proj["q"], proj["k"]], "s0"), "scale"], "s1")
    c = node("MatMul", [node("Softmax", [s], "pr", axis=-1), proj["v"]], "c0")
    c = node("Reshape", [node("Transpose", [c], "c1", perm=[0, 2, 1, 3]), "merge"], "c2")
    o = node("Add", [node("Add", [node("MatMul", [c, w("wo", H, H)], "o0"), w("bo", H)], "o1"), "x"], "o2")
    ln1 = node("LayerNormalization", [o, w("g1", H, scale=1.0), w("be1", H)], "ln1", epsilon=1e-5)
    h = node("Add", [node("MatMul", [ln1, w("w1", H, F)], "h0"), w("b1", F)], "h1")
    h = node("Mul", [node("Mul", [h, node("Add", [node("Erf", [node("Div", [h, "sqrt2"], "h2")], "h3"), "one"],
                                          "h4")], "h5"), "half"], "h6")
    inits.update(sqrt2=np.float32(np.sqrt(2)), one=np.float32(1), half=np.float32(0.5))
    f = node("Add", [node("Add", [node("MatMul", [h, w("w2", F, H)], "f0"), w("b2", H)], "f1"), ln1], "f2")
    node("LayerNormalization", [f, w("g2", H, scale=1.0), w("be2", H)], "y", epsilon=1e-5)
    x = rng.standard_normal((1, S, H)).astype("float32")
    return make_model(nodes, {"x": x}, ["y"], inits, opset=17), {"x": x}


def _kernels(lib):
    return [n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"]


@needs_fma
def test_encoder_block_untuned(rng):
    model, inputs = encoder_block(rng)
    check_model(model, inputs, rtol=1e-4, atol=1e-4)
    mod, params = relay.frontend.from_onnx(model)
    with tc.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    kernels = _kernels(lib)
    # bias + GELU and bias + residual add in the dense kernels, no add left on its own
    assert "fused_nn_contrib_dense_pack_add_divide_erf_add_multiply_multiply" in kernels
    assert sum(k.startswith("fused_nn_contrib_dense_pack_add_add") for k in kernels) == 2
    assert not any(k.startswith("fused_nn_dense") or "reshape_add" in k for k in kernels)


@needs_fma
@pytest.mark.filterwarnings("error:running the reference failed")     # every candidate is checked
def test_encoder_block_tuned(rng, tmp_path):
    """Its dense and attention tasks (batch_matmul without FuseAttention) tuned for a few trials
    (candidates of other panel widths checked against the reference: the packed_panels recipe);
    the build inside apply_history_best packs the weights for the tuned panels and still
    matches onnxruntime."""
    model, inputs = encoder_block(rng)
    mod, params = relay.frontend.from_onnx(model)
    tasks = autotune.task.extract_from_program(mod["main"], target="llvm", params=params)
    names = {t.name for t in tasks}
    assert {"topi/dense_pack.llvm", "topi/attention.llvm"} <= names and "topi/batch_matmul.llvm" not in names
    with tc.transform.PassContext(opt_level=3, disabled_pass=["FuseAttention"]):
        unfused = autotune.task.extract_from_program(mod["main"], target="llvm", params=params)
    assert "topi/batch_matmul.llvm" in {t.name for t in unfused}
    log = tmp_path / "enc.jsonl"
    chosen = [t for t in tasks if t.name in ("topi/dense_pack.llvm", "topi/attention.llvm")]
    autotune.tune_tasks(chosen, 4 * len(chosen), str(log), progress=False, min_trials=4)
    with autotune.apply_history_best(str(log)), tc.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    np.testing.assert_allclose(run_lib(lib, inputs)[0], run_ort(model, inputs)[0], rtol=1e-4, atol=1e-4)


@needs_fma
def test_weight_packed_for_another_config_is_refused():
    from tilecraft.relay.backend.te_compiler import lower_primitive
    from tilecraft.relay.transform import FuseOps
    M, N, K = 8, 4 * ISA.lanes, 32
    with tc.target.Target("llvm"):
        nr = dp.dense_pack_config(autotune.FallbackConfigEntity(), M, N, K)[1]
    other = ISA.lanes if nr != ISA.lanes else 2 * ISA.lanes
    x = relay.var("x", shape=(M, K))
    w = relay.const(np.zeros((N // other, K, other), "float32"))
    mod = relay.IRModule.from_expr(relay.Function([x], relay.nn.contrib_dense_pack(x, w, f"NK{other}n")))
    with tc.transform.PassContext(opt_level=3):
        fused = FuseOps()(InferType()(mod))
    group = next(n.op for n in relay.ir.post_order(fused["main"].body) if isinstance(n, relay.Call))
    with tc.target.Target("llvm"), pytest.raises(relay.RelayError,
                                                 match=rf"packed in panels of {other}.*wants {nr}"):
        lower_primitive(group, "k", "llvm")


def test_tuned_batch_matmul_with_its_epilogue(rng):
    """A logged topi/batch_matmul.llvm config schedules the fused batch_matmul + scale (the
    template's tiles on the epilogue), and the result is numpy's."""
    import tilecraft.topi.batch_matmul  # noqa: F401  (registers the template)
    from tilecraft.relay.backend.te_compiler import compute_group
    from tilecraft.relay.transform import FuseOps
    from relay_helpers import poison
    from tilecraft.contrib import graph_executor
    args = (3, 8, 16, 12, "float32")
    task = autotune.task.create("topi/batch_matmul.llvm", args=args, target="llvm")
    cfg = task.config_space.get(int(rng.integers(len(task.config_space))))
    records = [(autotune.MeasureInput(task.target, task, cfg), autotune.MeasureResult((1e-3,), 0))]
    a, b = (relay.var(n, shape=s) for n, s in (("a", (3, 8, 12)), ("b", (3, 12, 16))))
    body = relay.multiply(relay.nn.batch_matmul(a, b, transpose_b=False), relay.const(np.float32(0.25)))
    mod = relay.IRModule.from_expr(relay.Function([a, b], body))
    with autotune.apply_history_best(records), tc.transform.PassContext(opt_level=3):
        with tc.target.Target("llvm"):
            fused = FuseOps()(InferType()(mod))
            group = next(n.op for n in relay.ir.post_order(fused["main"].body) if isinstance(n, relay.Call))
            _, _, anchor = compute_group(group)
            assert anchor.kind == "batch_matmul" and not anchor.parts["cfg"].is_fallback
        lib = relay.build(mod, target="llvm")
    av, bv = rng.standard_normal((3, 8, 12)).astype("float32"), rng.standard_normal((3, 12, 16)).astype("float32")
    ex = lib["default"](tc.cpu(0))
    poison(ex)
    m = graph_executor.GraphModule(ex)
    m.set_input(a=av, b=bv)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), 0.25 * (av @ bv), rtol=1e-5, atol=1e-5)


def test_untuned_batch_matmul_takes_the_templates_fallback(rng, monkeypatch):
    """Without a log the fused batch_matmul + scale is scheduled by topi/batch_matmul.llvm's
    fallback (register tiles; 2.7-4x the fixed schedule on BERT's attention), also on shapes
    that tile with tails of nothing but odd factors, and the result is numpy's."""
    import tilecraft.topi.batch_matmul as bm
    from relay_helpers import poison
    from tilecraft.contrib import graph_executor
    calls = []
    real = bm.schedule_batch_matmul
    monkeypatch.setattr(bm, "schedule_batch_matmul", lambda cfg, *a: calls.append(cfg.is_fallback) or real(cfg, *a))
    a, b = (relay.var(n, shape=s) for n, s in (("a", (3, 13, 9)), ("b", (3, 9, 40))))
    body = relay.multiply(relay.nn.batch_matmul(a, b, transpose_b=False), relay.const(np.float32(0.25)))
    with tc.transform.PassContext(opt_level=3):
        lib = relay.build(relay.IRModule.from_expr(relay.Function([a, b], body)), target="llvm")
    assert calls == [True]
    av, bv = rng.standard_normal((3, 13, 9)).astype("float32"), rng.standard_normal((3, 9, 40)).astype("float32")
    ex = lib["default"](tc.cpu(0))
    poison(ex)
    m = graph_executor.GraphModule(ex)
    m.set_input(a=av, b=bv)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), 0.25 * (av @ bv), rtol=1e-5, atol=1e-5)
