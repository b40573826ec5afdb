"""Tune a matmul template on this CPU, then build the best schedule found.

    python examples/tune_matmul.py            # 256^3, 32 trials: about a minute

Run it twice: the second run resumes from the log and measures only new configurations.
"""
import os

import numpy as np

import tilecraft as tc
import tilecraft.autotune as autotune
from tilecraft import te
from tilecraft.target import Target


@autotune.template("example/matmul")
def matmul(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis

    cfg = autotune.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2, filter=lambda e: e.size[-1] <= 64)
    cfg.define_knob("unroll", [0, 1])
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, k, yi, xi)
    if cfg["unroll"].val:
        s[C].unroll(yi)
    s[C].vectorize(xi)
    s[C].parallel(yo)
    return s, [A, B, C]


if __name__ == "__main__":   # good practice; the workers do not import this file, so it is not required
    n, log = 256, "tuning_logs/example_matmul.jsonl"
    task = autotune.task.create("example/matmul", args=(n, n, n, "float32"), target="llvm")
    print(task.config_space)
    tuner = autotune.tuner.XGBTuner(task, plan_size=16)
    if os.path.exists(log):
        tuner.load_history(autotune.record.load_from_file(log))
    tuner.tune(n_trial=32,
               measure_option=autotune.measure_option(builder=autotune.LocalBuilder(),
                                                      runner=autotune.LocalRunner(number=5)),
               callbacks=[autotune.callback.progress_bar(32), autotune.callback.log_to_file(log)])

    with autotune.apply_history_best(log):
        with Target("llvm"):
            s, args = matmul(n, n, n, "float32")
            f = tc.build(s, args)
    a, b = np.random.rand(n, n).astype("float32"), np.random.rand(n, n).astype("float32")
    c = np.zeros((n, n), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    t = f.time_evaluator(f.entry_name, tc.cpu(0), number=10)(a, b, c).mean
    print(f"best: {2 * n**3 / t / 1e9:.1f} GFLOP/s  (numpy: see bench/tune_cpu_gemm.py)")
