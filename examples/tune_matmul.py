"""Tune a matmul template on this CPU, then build the best schedule found.

    python examples/tune_matmul.py            # 256^3, 32 trials: well under a minute
    python examples/tune_matmul.py 512 64 tuning_logs/mm512.jsonl    # N, trials, log

Run it twice: the second run resumes from the log and measures only new configurations.

The one figure it prints (GFLOP/s, the same as the progress bar's "best") is 2·N³ floating-point
operations divided by the mean time of one call of the best configuration, as the tuner measured
it: in a separate process, 5 calls per timing, 3 timings. `tilecraft tune` also compares such a
result with numpy, measured in the same run.
"""
import os
import sys

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
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    log = sys.argv[3] if len(sys.argv) > 3 else f"tuning_logs/example_matmul_{n}.jsonl"
    task = autotune.task.create("example/matmul", args=(n, n, n, "float32"), target="llvm")
    print(task.config_space)
    tuner = autotune.tuner.XGBTuner(task, plan_size=16)
    done = tuner.load_history(autotune.record.load_from_file(log)) if os.path.exists(log) else 0
    tuner.tune(n_trial=max(0, trials - done),
               measure_option=autotune.measure_option(builder=autotune.LocalBuilder(),
                                                      runner=autotune.LocalRunner(number=5, repeat=3)),
               callbacks=[autotune.callback.progress_bar(max(0, trials - done)),
                          autotune.callback.log_to_file(log)])

    with autotune.apply_history_best(log):
        with Target("llvm"):
            s, args = matmul(n, n, n, "float32")
            f = tc.build(s, args)
    a, b = np.random.rand(n, n).astype("float32"), np.random.rand(n, n).astype("float32")
    c = np.full((n, n), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)     # the tuned schedule computes the right thing
    inp, res = tuner.best_measure_pair
    print(f"best: {tuner.best_flops / 1e9:.1f} GFLOP/s = 2*{n}^3 FLOP / {res.mean_cost * 1e3:.3f} ms, the mean "
          f"time of one call of the best config (index {inp.config.index}) as the tuner measured it; log: {log}")
