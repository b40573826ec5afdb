"""A dense layer of one or two rows (a batch-1 classifier) is a matrix-vector product on the
weight as it is: no weight panels packed inside the kernel on every run (ResNet-18's 1 x 512 x
1000 classifier took 0.42 ms doing that, onnxruntime 0.07 ms). Differential tests against
onnxruntime and numpy with column and depth tails, outputs poisoned first."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import relay
from tilecraft.relay.backend import te_compiler
from tilecraft.relay.ir import Call, Function, post_order

from relay_helpers import check_model, helper, make_model

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


@pytest.mark.parametrize("M,K,N", [(1, 512, 1000), (2, 64, 17), (1, 48, 5), (1, 40, 33)])
def test_gemm_few_rows_matches_onnxruntime(rng, M, K, N):
    """Gemm with a bias (epilogue) then Relu; K = 40 is not a multiple of the vector lanes (the
    packed-panel path), N = 17, 5, 33 leave a tail of the 16-column output blocks."""
    x = rng.uniform(-1, 1, (M, K)).astype("float32")
    inits = {"w": rng.uniform(-1, 1, (N, K)).astype("float32"), "b": rng.uniform(-1, 1, (N,)).astype("float32")}
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1), helper.make_node("Relu", ["g"], ["y"])]
    check_model(make_model(nodes, {"x": x}, ["y"], inits), {"x": x}, rtol=1e-5, atol=1e-5)


def _dense_group(M, K, N, rng):
    x = relay.var("x", shape=(M, K))
    w = relay.const(rng.uniform(-1, 1, (N, K)).astype("float32"))
    mod = relay.IRModule.from_expr(relay.Function([x], relay.nn.dense(x, w)))
    with tc.transform.PassContext(opt_level=3):
        fused, _ = relay.build_module.optimize(mod, "llvm")
    return next(n.op for n in post_order(fused["main"].body) if type(n) is Call and isinstance(n.op, Function))


def test_gemv_reads_the_weight_unpacked(rng):
    """The one-row kernel has no packing stage; a 16-row one keeps the packed panels (or the
    micro-kernel GEMM), so the limit is where it says."""
    lanes, _ = te_compiler.vector_registers()
    one = te_compiler.compute_group(_dense_group(1, 4 * lanes, 40, rng))
    assert one[2].kind == "dense_gemv"
    assert "packed" not in str(tc.lower(te_compiler.schedule_group(one[1], one[2]), one[0] + [one[1]]))
    many = te_compiler.compute_group(_dense_group(te_compiler.GEMV_MAX_ROWS + 1, 4 * lanes, 40, rng))
    assert many[2] is None or many[2].kind != "dense_gemv"
