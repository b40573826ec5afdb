"""Tune the ready conv2d template (tilecraft.topi) for one ResNet layer, then use the result.

    python examples/tune_conv2d.py            # 1x64x56x56, 3x3, 64 filters; 64 trials

The same from the shell:
    tilecraft tune conv2d 1 64 56 56 64 3 3 1 1 float32 --trials 64 --log tuning_logs/conv2d.jsonl
"""
import numpy as np

import tilecraft as tc
import tilecraft.autotune as autotune
import tilecraft.topi.conv2d as topi_conv2d
from tilecraft.target import Target

if __name__ == "__main__":
    shape = (1, 64, 56, 56, 64, 3, 3, 1, 1, "float32")
    log = "tuning_logs/example_conv2d.jsonl"
    task = autotune.task.create("topi/conv2d_nchw.llvm", args=shape, target="llvm")
    print(task.config_space)
    tuner = autotune.tuner.XGBTuner(task, plan_size=32)
    tuner.tune(64, autotune.measure_option(builder=autotune.LocalBuilder(),
                                           runner=autotune.LocalRunner(number=3, max_timing_s=2.0)),
               callbacks=[autotune.callback.progress_bar(64), autotune.callback.log_to_file(log)])
    print("best config:", tuner.best_config, f"{tuner.best_flops / 1e9:.1f} GFLOP/s")

    with autotune.apply_history_best(log):
        with Target("llvm"):
            s, args = topi_conv2d.conv2d_nchw(*shape)
            f = tc.build(s, args)
    x = np.random.rand(1, 64, 56, 56).astype("float32")
    w = np.random.rand(64, 64, 3, 3).astype("float32")
    y = np.zeros((1, 64, 56, 56), "float32")
    f(x, w, y)
    print("ran the tuned conv2d:", y.shape)
