"""ResNet-18's convolution layer classes built by the graph level (conv + bias + ReLU, blocked by
AlterOpLayout, on the micro-kernel) with each ``topi/conv2d_NCHWc_microkernel.llvm``
configuration (register tile, ``ic_outer``, ``k_unroll``) forced through a one-record log, each kernel timed in the model
(``GraphModule.profile``: the input and output as a graph run leaves them), in turns: to choose
the untuned configuration per layer class on a new CPU (``conv2d_microkernel.blocked_fallback``).
Not a test; figures in docs/relay.md.

    python3 bench/relay_conv_variants.py [--threads 2] [--rounds 5] [--layers stem,64@56,...]
"""
import argparse
import os
import time
import warnings

import numpy as np

# (name, CI, H, CO, K, stride, pad): one of each class ResNet-18 has
LAYERS = [("stem", 3, 224, 64, 7, 2, 3), ("64@56", 64, 56, 64, 3, 1, 1), ("128@28", 128, 28, 128, 3, 1, 1),
          ("256@14", 256, 14, 256, 3, 1, 1), ("512@7", 512, 7, 512, 3, 1, 1), ("s2 64>128", 64, 56, 128, 3, 2, 1),
          ("1x1 s2 128>256", 128, 28, 256, 1, 2, 0)]


def variants(task, fallback_reg_n: int):
    """``(label, config or None)``: the fallback, then configurations of the task's space: every
    register tile of 4 columns or more (``ic_outer`` off, the widest ``k_unroll``), and the
    fallback's tile with ``ic_outer`` on, and with ``k_unroll`` 1."""
    top_u = max(c["k_unroll"].val for c in task.config_space)
    out = [("fallback", None)]
    for cfg in task.config_space:
        reg_n, outer, u = cfg["tile_ow"].size[-1], cfg["ic_outer"].val, cfg["k_unroll"].val
        if (reg_n >= 4 and not outer and u == top_u) or (reg_n == fallback_reg_n and (outer, u) in ((True, top_u), (False, 1))):
            out.append((f"{reg_n} cols ic_outer={int(outer)} u{u}", cfg))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", default=",".join(n for n, *_ in LAYERS))
    args = ap.parse_args()
    os.environ.setdefault("TILECRAFT_NUM_THREADS", str(args.threads))
    import tilecraft as tc
    from tilecraft import autotune, relay
    from tilecraft.contrib import graph_executor
    from tilecraft.topi.conv2d_microkernel import WORKLOAD, blocked_fallback, graph_blocks
    from tilecraft.topi.cpu_intrinsics import vector_isa
    tc.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="no tuned configuration")
    rng = np.random.default_rng(0)
    wanted = args.layers.split(",")
    print(f"{vector_isa()}, {args.threads} threads, load {os.getloadavg()[0]:.1f}; median of {args.rounds} rounds of 10 runs", flush=True)
    for name, CI, H, CO, K, st, pad in LAYERS:
        if name not in wanted:
            continue
        OW = (H + 2 * pad - K) // st + 1
        x = relay.var("x", shape=(1, CI, H, H))
        w = relay.const((rng.standard_normal((CO, CI, K, K)) * 0.1).astype("float32"))
        b = relay.const(rng.uniform(-0.1, 0.1, CO).astype("float32"))
        y = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w, strides=(st, st), padding=pad), b))
        mod = relay.IRModule.from_expr(relay.Function([x], y))
        ic, oc = graph_blocks(CI, CO, None)
        task = autotune.task.create(WORKLOAD, args=(1, CI, H, H, CO, K, K, st, pad, ic, oc, "float32"), target="llvm")
        flop = 2.0 * CO * OW * OW * CI * K * K
        mods = {}
        for label, cfg in variants(task, blocked_fallback(vector_isa(), OW, ic, oc)[0]):
            records = []
            if cfg is not None:
                records = [(autotune.MeasureInput(task.target, task, cfg), autotune.MeasureResult((1e-3,), 0))]
            with autotune.apply_history_best(records), tc.transform.PassContext(opt_level=3):
                lib = relay.build(mod, target="llvm")
            m = graph_executor.GraphModule(lib["default"](tc.cpu(0)))
            m.set_input("x", rng.uniform(-1, 1, (1, CI, H, H)).astype("float32"))
            m.run()
            mods[label] = m
        samples = {label: [] for label in mods}
        for _ in range(args.rounds):
            for label, m in mods.items():
                rows = m.profile(10)
                samples[label].append(sum(ms for n, _, ms in rows if "conv2d" in n))
        print(f"{name} (CI {CI}, {H}x{H}, CO {CO}, {K}x{K}, stride {st}; blocks {ic} in, {oc} out):", flush=True)
        for label in sorted(samples, key=lambda k: np.median(samples[k])):
            ms = float(np.median(samples[label]))
            print(f"  {ms:7.3f} ms {flop / ms / 1e6:6.0f} GFLOP/s  {label}", flush=True)
        time.sleep(0.1)


if __name__ == "__main__":
    main()
