"""The ONNX operators MobileNetV2 and GPT-2 exports need beyond the first list, each in a small
model with odd extents, against onnxruntime on fresh random inputs: Clip (ReLU6), Pad, Expand,
Shape and shapes computed from it (folded while converting), Not/And/Or and the other
comparisons, MatMul with 1-d and batched operands, pooling with ceil_mode, LayerNormalization
over several axes."""
import numpy as np
import pytest

from relay_helpers import check_model, helper, make_model
from test_onnx_ops import N, f32

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")

I64 = lambda *v: np.array(v, "int64")   # noqa: E731

CASES = {
    "clip_relu6": lambda r: ([N("Clip", ["a", "lo", "hi"])], {"a": f32(r, 2, 3, 7, low=-3, high=9)},
                             {"lo": np.float32(0), "hi": np.float32(6)}),
    "clip_max_only": lambda r: ([N("Clip", ["a", "", "hi"])], {"a": f32(r, 3, 7, low=-3, high=3)},
                                {"hi": np.float32(0.5)}),
    "pad_constant": lambda r: ([N("Pad", ["a", "p", "v"])], {"a": f32(r, 1, 2, 5, 3)},
                               {"p": I64(0, 0, 1, 2, 0, 1, 3, 0), "v": np.float32(-1.5)}),
    "pad_axes": lambda r: ([N("Pad", ["a", "p", "", "ax"])], {"a": f32(r, 2, 5, 3)},
                           {"p": I64(2, 1, 0, 3), "ax": I64(-1, 1)}, ["y"], 18),
    "expand": lambda r: ([N("Expand", ["a", "s"])], {"a": f32(r, 3, 1)}, {"s": I64(2, 1, 5)}),
    "expand_smaller_shape": lambda r: ([N("Expand", ["a", "s"])], {"a": f32(r, 2, 1, 4)}, {"s": I64(3, 1)}),
    # GPT-2's exported attention: the head shape computed from the input's shape
    "shape_computed_reshape": lambda r: (
        [N("Shape", ["a"], ["s"]), N("Gather", ["s", "i0"], ["b"], axis=0), N("Gather", ["s", "i1"], ["t"], axis=0),
         N("Unsqueeze", ["b", "z"], ["bu"]), N("Unsqueeze", ["t", "z"], ["tu"]),
         N("Concat", ["bu", "tu", "heads", "m1"], ["ns"], axis=0), N("Reshape", ["a", "ns"], ["y"])],
        {"a": f32(r, 2, 3, 12)}, {"i0": np.array(0, "int64"), "i1": np.array(1, "int64"), "z": I64(0), "heads": I64(4), "m1": I64(-1)}),
    "shape_slice_constant_of_shape": lambda r: (
        [N("Shape", ["a"], ["s"], start=1), N("ConstantOfShape", ["s"], ["k"],
                                               value=helper.make_tensor("v", 1, [1], [0.25])),
         N("Add", ["a", "k"])], {"a": f32(r, 2, 3, 4)}, {}),
    "not_and_or": lambda r: ([N("Less", ["a", "b"], ["l"]), N("GreaterOrEqual", ["a", "c"], ["g"]),
                              N("Not", ["l"], ["nl"]), N("And", ["nl", "g"], ["ng"]), N("Or", ["ng", "m"], ["o"]),
                              N("LessOrEqual", ["b", "a"], ["le"]), N("And", ["o", "le"], ["w"]),
                              N("Where", ["w", "a", "b"])],
                             {"a": f32(r, 4, 6).round(1), "b": f32(r, 6).round(1), "m": r.uniform(0, 1, (4, 1)) > 0.7},
                             {"c": np.float32(-0.3)}),
    "max_min_abs_log": lambda r: ([N("Max", ["a", "b", "c"], ["m"]), N("Min", ["m", "b"], ["n"]), N("Abs", ["n"], ["ab"]),
                                   N("Log", ["ab"])], {"a": f32(r, 3, 5), "b": f32(r, 5) + 2, "c": f32(r, 3, 1)}, {}),
    "matmul_1d_2d": lambda r: ([N("MatMul", ["a", "w"])], {"a": f32(r, 9)}, {"w": f32(r, 9, 5)}),
    "matmul_2d_1d": lambda r: ([N("MatMul", ["a", "w"])], {"a": f32(r, 4, 9)}, {"w": f32(r, 9)}),
    "matmul_1d_batched": lambda r: ([N("MatMul", ["a", "b"])], {"a": f32(r, 7), "b": f32(r, 2, 3, 7, 5)}, {}),
    "matmul_batched_1d": lambda r: ([N("MatMul", ["a", "b"])], {"a": f32(r, 2, 3, 5, 7), "b": f32(r, 7)}, {}),
    "matmul_broadcast_batch": lambda r: ([N("MatMul", ["a", "b"])], {"a": f32(r, 2, 1, 5, 6), "b": f32(r, 3, 6, 4)}, {}),
    "maxpool_ceil": lambda r: ([N("MaxPool", ["a"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
                               {"a": f32(r, 1, 3, 10, 9)}, {}),
    "maxpool_ceil_pads": lambda r: ([N("MaxPool", ["a"], kernel_shape=[2, 3], strides=[2, 2], pads=[1, 0, 1, 1],
                                       ceil_mode=1)], {"a": f32(r, 1, 2, 8, 10)}, {}),
    "avgpool_ceil": lambda r: ([N("AveragePool", ["a"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
                               {"a": f32(r, 1, 3, 10, 8)}, {}),
    "layer_norm_two_axes": lambda r: ([N("LayerNormalization", ["a", "g", "b"], axis=-2, epsilon=1e-5)],
                                      {"a": f32(r, 2, 3, 5, 7)}, {"g": f32(r, 5, 7), "b": f32(r, 5, 7)}),
    "trilu_lower": lambda r: ([N("Trilu", ["a", "k"], upper=0)], {"a": f32(r, 2, 5, 6)}, {"k": np.array(1, "int64")}),
    "trilu_upper": lambda r: ([N("Trilu", ["a"])], {"a": f32(r, 3, 4)}, {}),
    "layer_norm_axis1_no_bias": lambda r: ([N("LayerNormalization", ["a", "g"], axis=1)], {"a": f32(r, 2, 3, 5)},
                                           {"g": f32(r, 3, 5)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnx_op(name, rng):
    case = CASES[name](rng)
    nodes, inputs, inits = case[:3]
    outputs = case[3] if len(case) > 3 else ["y"]
    opset = case[4] if len(case) > 4 else 17
    check_model(make_model(nodes, inputs, outputs, inits, opset=opset), inputs, rtol=2e-5, atol=2e-5)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("block", ["InvertedResidual", "GPT2Block", "ResBlock"])
def test_pytorch_onnx_exports(block, rng):
    """The test modules of test_torch_frontend.py (MobileNetV2's inverted residual, a GPT-2 block
    with causal attention, a ResNet-style block) exported by torch.onnx (the TorchScript-based
    exporter: no onnxscript needed), against onnxruntime."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: no exports to test")
    import io
    import onnx
    import test_torch_frontend as mods
    torch.manual_seed(int(rng.integers(1 << 30)))
    m = mods._randomize_bn(getattr(mods, block)())
    x = {"InvertedResidual": lambda: torch.randn(1, 8, 11, 9), "GPT2Block": lambda: torch.randint(0, 50, (2, 7)),
         "ResBlock": lambda: torch.randn(1, 3, 19, 17)}[block]()
    f = io.BytesIO()
    torch.onnx.export(m, (x,), f, dynamo=False, opset_version=17, input_names=["x"])
    check_model(onnx.load_from_string(f.getvalue()), {"x": x.numpy()}, rtol=1e-4, atol=1e-5)


def test_shape_computed_reshape_folds_away(rng):
    """The Shape -> Gather -> Concat chain is folded while converting: main reshapes the input
    directly and reads nothing else."""
    from tilecraft import relay
    nodes, inputs, inits = CASES["shape_computed_reshape"](rng)
    mod, _ = relay.frontend.from_onnx(make_model(nodes, inputs, ["y"], inits))
    text = str(mod)
    assert "reshape(%a, newshape=[2, 3, 4, 3])" in text and text.count("%") == 2, text


def test_value_read_from_an_input_is_refused(rng):
    from tilecraft import relay
    model = make_model([N("Reshape", ["a", "s"])], {"a": f32(rng, 2, 6), "s": np.array([3, 4], "int64")}, ["y"])
    with pytest.raises(relay.RelayError, match=r"Reshape \(the node with output 'y'\): the shape of Reshape \('s'\) "
                                               r"must be a constant, an initializer or computed from them"):
        relay.frontend.from_onnx(model)


def test_pad_reflect_is_refused(rng):
    from tilecraft import relay
    model = make_model([N("Pad", ["a", "p"], mode="reflect")], {"a": f32(rng, 2, 6)}, ["y"],
                       {"p": np.array([0, 1, 0, 1], "int64")})
    with pytest.raises(relay.RelayError, match=r"Pad with mode 'reflect' is not supported"):
        relay.frontend.from_onnx(model)
