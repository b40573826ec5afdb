"""Each supported ONNX operator, alone in a small model with odd extents, against onnxruntime
on fresh random inputs."""
import numpy as np
import pytest

from relay_helpers import check_model, helper, make_model

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


def f32(rng, *shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, shape).astype("float32")


def N(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


CASES = {
    "add_broadcast": lambda r: ([N("Add", ["a", "b"])], {"a": f32(r, 2, 3, 5), "b": f32(r, 3, 1)}, {}),
    "sub": lambda r: ([N("Sub", ["a", "b"])], {"a": f32(r, 4, 7), "b": f32(r, 7)}, {}),
    "mul": lambda r: ([N("Mul", ["a", "b"])], {"a": f32(r, 1, 7), "b": f32(r, 5, 1)}, {}),
    "div": lambda r: ([N("Div", ["a", "b"])], {"a": f32(r, 3, 5), "b": f32(r, 3, 5, low=0.5, high=2)}, {}),
    "pow": lambda r: ([N("Pow", ["a", "b"])], {"a": f32(r, 3, 5, low=0.5, high=2)}, {"b": np.float32(1.7)}),
    "relu": lambda r: ([N("Relu", ["a"])], {"a": f32(r, 3, 9)}, {}),
    "sigmoid": lambda r: ([N("Sigmoid", ["a"])], {"a": f32(r, 3, 9, low=-4, high=4)}, {}),
    "tanh": lambda r: ([N("Tanh", ["a"])], {"a": f32(r, 3, 9, low=-3, high=3)}, {}),
    "erf": lambda r: ([N("Erf", ["a"])], {"a": f32(r, 3, 9, low=-3, high=3)}, {}),
    "exp": lambda r: ([N("Exp", ["a"])], {"a": f32(r, 3, 9)}, {}),
    "sqrt": lambda r: ([N("Sqrt", ["a"])], {"a": f32(r, 3, 9, low=0.1, high=4)}, {}),
    "gelu_erf": lambda r: ([N("Gelu", ["a"])], {"a": f32(r, 2, 11, low=-3, high=3)}, {}),
    "gelu_tanh": lambda r: ([N("Gelu", ["a"], approximate="tanh")], {"a": f32(r, 2, 11, low=-3, high=3)}, {}),
    "softmax": lambda r: ([N("Softmax", ["a"])], {"a": f32(r, 2, 3, 13, low=-3, high=3)}, {}),
    "softmax_axis1": lambda r: ([N("Softmax", ["a"], axis=1)], {"a": f32(r, 2, 5, 3)}, {}),
    "layer_norm": lambda r: ([N("LayerNormalization", ["a", "g", "b"], epsilon=1e-5)], {"a": f32(r, 2, 3, 17)},
                             {"g": f32(r, 17), "b": f32(r, 17)}),
    "batch_norm": lambda r: ([N("BatchNormalization", ["a", "g", "b", "m", "v"], epsilon=1e-3)],
                             {"a": f32(r, 2, 3, 5, 4)},
                             {"g": f32(r, 3), "b": f32(r, 3), "m": f32(r, 3), "v": f32(r, 3, low=0.5, high=2)}),
    "conv_pads_stride": lambda r: ([N("Conv", ["a", "w", "bias"], pads=[1, 0, 2, 1], strides=[2, 1])],
                                   {"a": f32(r, 1, 3, 9, 7)}, {"w": f32(r, 5, 3, 3, 3), "bias": f32(r, 5)}),
    "conv_groups_dilation": lambda r: ([N("Conv", ["a", "w"], group=2, dilations=[2, 2], pads=[2, 2, 2, 2])],
                                       {"a": f32(r, 1, 4, 9, 9)}, {"w": f32(r, 6, 2, 3, 3)}),
    "conv_template": lambda r: ([N("Conv", ["a", "w"], pads=[1, 1, 1, 1]), N("Relu", ["y"], ["z"])],
                                {"a": f32(r, 1, 16, 10, 10)}, {"w": f32(r, 32, 16, 3, 3)}, ["z"]),
    "conv_same_upper": lambda r: ([N("Conv", ["a", "w"], auto_pad="SAME_UPPER", strides=[2, 2])],
                                  {"a": f32(r, 1, 2, 8, 8)}, {"w": f32(r, 3, 2, 4, 4)}),
    "gemm": lambda r: ([N("Gemm", ["a", "w", "c"], transB=1, alpha=0.5, beta=2.0)], {"a": f32(r, 3, 20)},
                       {"w": f32(r, 17, 20), "c": f32(r, 17)}),
    "gemm_transA": lambda r: ([N("Gemm", ["a", "w"], transA=1)], {"a": f32(r, 20, 3)}, {"w": f32(r, 20, 16)}),
    "matmul_2d": lambda r: ([N("MatMul", ["a", "w"])], {"a": f32(r, 5, 19)}, {"w": f32(r, 19, 32)}),
    "matmul_3d_2d": lambda r: ([N("MatMul", ["a", "w"])], {"a": f32(r, 2, 5, 19)}, {"w": f32(r, 19, 7)}),
    "matmul_batched": lambda r: ([N("MatMul", ["a", "b"])], {"a": f32(r, 2, 3, 5, 9), "b": f32(r, 2, 3, 9, 4)}, {}),
    "maxpool": lambda r: ([N("MaxPool", ["a"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
                          {"a": f32(r, 1, 3, 9, 8)}, {}),
    "avgpool_pads": lambda r: ([N("AveragePool", ["a"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1])],
                               {"a": f32(r, 1, 3, 9, 8)}, {}),
    "avgpool_count_pad": lambda r: ([N("AveragePool", ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                       count_include_pad=1)], {"a": f32(r, 1, 2, 5, 6)}, {}),
    "global_avgpool": lambda r: ([N("GlobalAveragePool", ["a"])], {"a": f32(r, 2, 3, 5, 7)}, {}),
    "global_maxpool": lambda r: ([N("GlobalMaxPool", ["a"])], {"a": f32(r, 2, 3, 5, 7)}, {}),
    "reshape": lambda r: ([N("Reshape", ["a", "s"])], {"a": f32(r, 2, 3, 10)}, {"s": np.array([0, -1, 5], "int64")}),
    "flatten": lambda r: ([N("Flatten", ["a"], axis=2)], {"a": f32(r, 2, 3, 5, 2)}, {}),
    "transpose": lambda r: ([N("Transpose", ["a"], perm=[2, 0, 1])], {"a": f32(r, 2, 3, 5)}, {}),
    "concat": lambda r: ([N("Concat", ["a", "b"], axis=1)], {"a": f32(r, 2, 3, 5), "b": f32(r, 2, 4, 5)}, {}),
    "split": lambda r: ([N("Split", ["a", "s"], ["y", "z"], axis=1)], {"a": f32(r, 2, 7)},
                        {"s": np.array([3, 4], "int64")}, ["y", "z"]),
    "slice": lambda r: ([N("Slice", ["a", "st", "en", "ax", "sp"])], {"a": f32(r, 5, 9)},
                        {"st": np.array([1, -8], "int64"), "en": np.array([100, 9], "int64"),
                         "ax": np.array([0, 1], "int64"), "sp": np.array([2, 3], "int64")}),
    "slice_negative_step": lambda r: ([N("Slice", ["a", "st", "en", "ax", "sp"])], {"a": f32(r, 3, 9)},
                                      {"st": np.array([-2], "int64"), "en": np.array([-100], "int64"),
                                       "ax": np.array([1], "int64"), "sp": np.array([-2], "int64")}),
    "gather": lambda r: ([N("Gather", ["emb", "ids"], axis=0)], {"ids": np.array([[1, 4, -1], [0, 2, 2]], "int64")},
                         {"emb": f32(r, 5, 6)}),
    "where": lambda r: ([N("Greater", ["a", "b"], ["c"]), N("Where", ["c", "a", "b"])],
                        {"a": f32(r, 3, 5), "b": f32(r, 5)}, {}),
    "where_bool_input": lambda r: ([N("Where", ["c", "a", "b"])], {"c": r.uniform(0, 1, (3, 5)) > 0.5,
                                                                  "a": f32(r, 3, 5), "b": f32(r, 1)}, {}),
    "less_equal": lambda r: ([N("Less", ["a", "b"], ["l"]), N("Equal", ["a", "c"], ["e"]), N("Where", ["l", "a", "b"], ["w"]),
                              N("Where", ["e", "b", "w"])],
                             {"a": np.array([[1, 2, 3], [4, 5, 6]], "float32") + f32(r, 2, 3).round(),
                              "b": np.full((3,), 3.0, "float32")}, {"c": np.float32(4.0)}),
    "reduce_sum": lambda r: ([N("ReduceSum", ["a", "ax"], keepdims=0)], {"a": f32(r, 3, 5, 7)},
                             {"ax": np.array([0, 2], "int64")}),
    "reduce_mean": lambda r: ([N("ReduceMean", ["a"], axes=[-1])], {"a": f32(r, 3, 5, 7)}, {}),
    "reduce_max": lambda r: ([N("ReduceMax", ["a"], axes=[1], keepdims=0)], {"a": f32(r, 3, 5, 7)}, {}),
    "cast": lambda r: ([N("Cast", ["a"], to=6)], {"a": f32(r, 3, 5, low=-50, high=50)}, {}),
    "constant_identity": lambda r: ([N("Constant", [], ["k"], value=helper.make_tensor("k", 1, [5], [1, 2, 3, 4, 5])),
                                     N("Identity", ["k"], ["ki"]), N("Mul", ["a", "ki"])], {"a": f32(r, 3, 5)}, {}),
    "unsqueeze_squeeze": lambda r: ([N("Unsqueeze", ["a", "ax"], ["u"]), N("Squeeze", ["u", "ax2"])],
                                    {"a": f32(r, 3, 5)}, {"ax": np.array([0, 3], "int64"),
                                                          "ax2": np.array([0], "int64")}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnx_op(name, rng):
    case = CASES[name](rng)
    nodes, inputs, inits = case[:3]
    outputs = case[3] if len(case) > 3 else ["y"]
    model = make_model(nodes, inputs, outputs, inits, out_dtype={"y": "int32"} if name == "cast" else None,
                       opset=20 if name.startswith("gelu") else 17)
    check_model(model, inputs, rtol=2e-5, atol=2e-5)


def test_unfused_build_matches(rng):
    """opt_level 0: every operator its own kernel, no folding; the same results."""
    nodes, inputs, inits = CASES["batch_norm"](rng)
    check_model(make_model(nodes, inputs, ["y"], inits), inputs, opt_level=0)


def test_freeze_params_gives_the_same_model(rng):
    """Weights as graph constants (freeze_params=True): no params, the same results."""
    import tilecraft as tc
    from tilecraft import relay
    from relay_helpers import run_lib, run_ort
    nodes, inputs, inits = CASES["gemm"](rng)
    model = make_model(nodes, inputs, ["y"], inits)
    mod, params = relay.frontend.from_onnx(model, freeze_params=True)
    assert params == {} and [p.name_hint for p in mod["main"].params] == ["a"]
    with tc.transform.PassContext(opt_level=3):
        lib = relay.build(mod, "llvm")
    np.testing.assert_allclose(run_lib(lib, inputs)[0], run_ort(model, inputs)[0], rtol=2e-5, atol=2e-5)


def test_repr_is_short():
    from tilecraft import relay
    x = relay.var("x", shape=(2, 3))
    y = relay.nn.relu(relay.add(x, relay.const(np.ones((2, 3), "float32"))))
    assert repr(y) == "<relay.Call nn.relu(...)>"
    assert repr(x) == "<relay.Var %x : Tensor[(2, 3), float32]>"
