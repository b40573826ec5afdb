"""An AutoTVM-style script, as TVM users write them: tuning at the top level (no __main__ guard),
`builder="local"`, then apply_history_best + Target + build. Run by tests/test_tvm_scripts.py
as `python autotvm_matmul.py LOG`."""
import sys

import numpy as np
import tilecraft as tvm
from tilecraft import te, autotune as autotvm

@autotvm.template("tut/matmul")
def matmul(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    k = s[C].op.reduce_axis[0]
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, k, yi, xi)
    return s, [A, B, C]

N, L, M = 128, 128, 128
task = autotvm.task.create("tut/matmul", args=(N, L, M, "float32"), target="llvm")
print(task.config_space)
measure_option = autotvm.measure_option(builder="local", runner=autotvm.LocalRunner(number=5))
tuner = autotvm.tuner.RandomTuner(task)
tuner.tune(n_trial=10, measure_option=measure_option, callbacks=[autotvm.callback.log_to_file(sys.argv[1])])
with autotvm.apply_history_best(sys.argv[1]):
    with tvm.target.Target("llvm"):
        s, arg_bufs = matmul(N, L, M, "float32")
        func = tvm.build(s, arg_bufs)
a_np = np.random.uniform(size=(N, L)).astype(np.float32)
b_np = np.random.uniform(size=(L, M)).astype(np.float32)
c_np = a_np.dot(b_np)
c_tvm = tvm.nd.empty(c_np.shape)
func(tvm.nd.array(a_np), tvm.nd.array(b_np), c_tvm)
tvm.testing.assert_allclose(c_np, c_tvm.numpy(), rtol=1e-4)
print("OK")
