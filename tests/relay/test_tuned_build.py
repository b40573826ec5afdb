"""relay.build inside autotune.apply_history_best: the conv2d group is scheduled with the
logged configuration of its workload (not the fallback), and still computes the same values."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import autotune, relay
from tilecraft.relay.backend import te_compiler
from tilecraft.topi.conv2d import conv2d_nchwc_config

from relay_helpers import check_model, helper, make_model, run_lib, run_ort

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")
ARGS = (1, 16, 10, 10, 32, 3, 3, 1, 1, "float32")


def conv_relu_model(rng):
    inputs = {"x": rng.uniform(-1, 1, (1, 16, 10, 10)).astype("float32")}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    return make_model(nodes, inputs, ["y"], {"w": rng.uniform(-1, 1, (32, 16, 3, 3)).astype("float32")}), inputs


def _template(layout: bool):
    """The workload and ``(ic, oc, reg_n)`` of a config of the fused convolution: the blocked
    micro-kernel template with AlterOpLayout (blocks fixed by the graph: two vectors out, the
    16 input channels in), the loop-level NCHW[x]c template without."""
    if layout:
        from tilecraft.topi.conv2d_microkernel import WORKLOAD, blocked_config, graph_blocks
        ic, oc = graph_blocks(ARGS[1], ARGS[4], None)
        return (WORKLOAD, ARGS[:-1] + (ic, oc, "float32"),
                lambda cfg: (ic, oc) + blocked_config(cfg, *ARGS[:-1], ic, oc)[:1])
    import tilecraft.topi.conv2d  # noqa: F401  (registers the template)
    return "topi/conv2d_nchw.llvm", ARGS, lambda cfg: conv2d_nchwc_config(cfg, *ARGS[:-1])[:3]


def a_config_unlike_the_fallback(layout: bool):
    name, args, blocks = _template(layout)
    task = autotune.task.create(name, args=args, target="llvm")
    fallback = blocks(autotune.FallbackConfigEntity())
    for cfg in task.config_space:            # the valid configurations
        chosen = blocks(cfg)
        if chosen != fallback and (layout or ARGS[4] % chosen[1] == 0):
            return task, cfg, chosen
    pytest.fail("every configuration of the space has the fallback's blocks")


def _conv_group(fused):
    groups = [n.op for n in relay.ir.post_order(fused["main"].body) if isinstance(n, relay.Call)
              and "conv2d" in n.op.attrs["Name"]]
    assert len(groups) == 1
    return groups[0]


def _blocks(anchor):
    """(input block, output block, reg_n) the convolution's kernel was computed with."""
    p = anchor.parts
    if anchor.kind == "conv2d":
        return p["data_vec"].shape[-1].value, p["conv"].shape[-1].value, p["reg_n"]
    assert anchor.kind in ("conv2d_NCHWc", "conv2d_NCHWc_mk")
    return p["data_pad"].shape[-1].value, p["out"].shape[-1].value, p["reg_n"]


@pytest.mark.parametrize("layout", [False, True], ids=["nchw", "alter_op_layout"])
def test_tuned_config_schedules_the_fused_conv(rng, layout):
    """The tuned config's blocks and register tile; with AlterOpLayout its output block is the
    layout's and the input block that of the (NCHW) input: the output block when it divides the
    input channels."""
    task, cfg, chosen = a_config_unlike_the_fallback(layout)
    records = [(autotune.MeasureInput(task.target, task, cfg), autotune.MeasureResult((1e-3,), 0))]
    model, inputs = conv_relu_model(rng)
    mod, params = relay.frontend.from_onnx(model)
    disabled = [] if layout else ["AlterOpLayout"]
    with autotune.apply_history_best(records), tc.target.Target("llvm"):
        with tc.transform.PassContext(opt_level=3, disabled_pass=disabled):
            fused, _ = relay.optimize(mod, "llvm", params)
            lib = relay.build(mod, target="llvm", params=params)
        _, _, anchor = te_compiler.compute_group(_conv_group(fused))
    ic, oc, reg_n = chosen[:3]
    if layout:
        ic = oc if ARGS[1] % oc == 0 else ic
    assert _blocks(anchor) == (ic, oc, reg_n)
    np.testing.assert_allclose(run_lib(lib, inputs)[0], run_ort(model, inputs)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", [False, True], ids=["nchw", "alter_op_layout"])
def test_fallback_without_a_log(rng, layout):
    model, inputs = conv_relu_model(rng)
    mod, params = relay.frontend.from_onnx(model)
    with tc.transform.PassContext(opt_level=3, disabled_pass=[] if layout else ["AlterOpLayout"]):
        fused, _ = relay.optimize(mod, "llvm", params)
    with tc.target.Target("llvm"):
        _, _, anchor = te_compiler.compute_group(_conv_group(fused))
    fallback = _template(layout)[2](autotune.FallbackConfigEntity())
    assert anchor.parts["reg_n"] == fallback[2] and _blocks(anchor)[1] == fallback[1]
    check_model(model, inputs, rtol=1e-4, atol=1e-4)
