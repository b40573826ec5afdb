"""ResNet-18 (batch 1, 224×224, random weights, built here with onnx.helper): import + optimise +
build time without tuning, and the time per inference against onnxruntime, both measured in
this run with the same thread count; the same build without AlterOpLayout (each convolution
packs its NCHW input and unpacks its output) measured in the same turns. Not a test; figures in
docs/relay.md.

    python3 bench/relay_resnet18.py [--threads 2] [--repeat 5]
"""
import argparse
import os
import time
import warnings

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def resnet18(rng):
    nodes, inits = [], []
    counter = [0]

    def name(p):
        counter[0] += 1
        return f"{p}{counter[0]}"

    def conv_bn(x, cin, cout, k, stride, pad, relu=True):
        w, c, b = name("w"), name("conv"), name("bn")
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2 / (cin * k * k))).astype("float32"), w))
        stats = [name(s) for s in ("g", "be", "mu", "var")]
        for s, v in zip(stats, (rng.uniform(0.5, 1.5, cout), rng.uniform(-0.1, 0.1, cout),
                                rng.uniform(-0.1, 0.1, cout), rng.uniform(0.5, 1.5, cout))):
            inits.append(numpy_helper.from_array(v.astype("float32"), s))
        nodes.append(helper.make_node("Conv", [x, w], [c], kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[pad] * 4))
        nodes.append(helper.make_node("BatchNormalization", [c] + stats, [b]))
        if not relu:
            return b
        r = name("relu")
        nodes.append(helper.make_node("Relu", [b], [r]))
        return r

    x = conv_bn("data", 3, 64, 7, 2, 3)
    p = name("pool")
    nodes.append(helper.make_node("MaxPool", [x], [p], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = p, 64
    for cout, stride in ((64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1)):
        y = conv_bn(x, cin, cout, 3, stride, 1)
        y = conv_bn(y, cout, cout, 3, 1, 1, relu=False)
        short = conv_bn(x, cin, cout, 1, stride, 0, relu=False) if (stride != 1 or cin != cout) else x
        a, r = name("add"), name("relu")
        nodes += [helper.make_node("Add", [y, short], [a]), helper.make_node("Relu", [a], [r])]
        x, cin = r, cout
    nodes += [helper.make_node("GlobalAveragePool", [x], ["gap"]), helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1)]
    inits += [numpy_helper.from_array((rng.standard_normal((1000, 512)) * 0.04).astype("float32"), "fc_w"),
              numpy_helper.from_array(np.zeros(1000, "float32"), "fc_b")]
    graph = helper.make_graph(nodes, "resnet18",
                              [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 9)   # onnx 1.23 writes 14, onnxruntime 1.30 reads <= 13 (as tests/relay/relay_helpers.py)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", type=int, default=0, help="list this many kernels, the slowest first, and onnxruntime's profile")
    ap.add_argument("--trials", type=int, default=0, help="tune the model's tasks first, this many trials in all")
    ap.add_argument("--log", default=None, help="the tuning log (default: tuning_logs/BENCH.jsonl; resumes)")
    ap.add_argument("--tune-only", action="store_true", help="tune (--trials), then stop: a later run measures")
    ap.add_argument("--no-torch", action="store_true", help="do not time PyTorch eager")
    args = ap.parse_args()
    os.environ.setdefault("TILECRAFT_NUM_THREADS", str(args.threads))

    import tilecraft as tc
    from tilecraft import autotune, relay
    from tilecraft.contrib import graph_executor
    tc.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    model = resnet18(rng)
    x = rng.uniform(-1, 1, (1, 3, 224, 224)).astype("float32")
    warnings.filterwarnings("ignore", message="no tuned configuration")
    t0 = time.perf_counter()
    mod, params = relay.frontend.from_onnx(model, shape={"data": x.shape})
    t1 = time.perf_counter()
    tuned, t_tune = "untuned", time.perf_counter()
    if args.trials or args.log:
        import relay_common
        log = args.log or os.path.join("tuning_logs", os.path.basename(__file__).replace(".py", ".jsonl"))
        if args.trials:
            print("tuning:", relay_common.tune(mod, params, args.trials, log), flush=True)
        tuned = f"tuned ({log})"
    if args.tune_only:
        return
    tune_s = time.perf_counter() - t_tune     # the build time below excludes it
    with autotune.apply_history_best(log if tuned != "untuned" else []), tc.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    m = graph_executor.GraphModule(lib["default"](tc.cpu(0)))
    m.set_input("data", x)
    m.run()                                # machine code is generated on the first run
    t2 = time.perf_counter()
    with tc.transform.PassContext(opt_level=3, disabled_pass=["AlterOpLayout"]):
        lib_nchw = relay.build(mod, target="llvm", params=params)
    m_nchw = graph_executor.GraphModule(lib_nchw["default"](tc.cpu(0)))
    m_nchw.set_input("data", x)
    m_nchw.run()
    t3 = time.perf_counter()
    kernels = sum(n["op"] == "kernel" for n in lib.graph["nodes"])
    transforms = sum(n["op"] == "kernel" and "layout_transform" in n["func"] for n in lib.graph["nodes"])
    kernels_nchw = sum(n["op"] == "kernel" for n in lib_nchw.graph["nodes"])
    import relay_common
    sess = relay_common.ort_session(model, args.threads)
    ref = sess.run(None, {"data": x})[0]
    out = m.get_output(0).numpy()
    err = np.abs(out - ref).max() / np.abs(ref).max()
    err_nchw = np.abs(m_nchw.get_output(0).numpy() - ref).max() / np.abs(ref).max()
    # in turns, so all see the same machine load, each after a warm-up (relay_common.in_turns)
    med = relay_common.in_turns({"ours": m.module.run, "nchw": m_nchw.module.run,
                                 "ort": lambda: sess.run(None, {"data": x})}, args.repeat, 3)
    a, an, b = med["ours"], med["nchw"], med["ort"]
    print(lib.memory_summary())
    if not args.no_torch:
        eager = relay_common.torch_eager(model, args.threads)
        terr = np.abs(eager({"data": x}) - ref).max()
        c = relay_common.in_turns({"eager": lambda: eager({"data": x})}, args.repeat, 3)["eager"]
        print(f"PyTorch eager (same graph, torch ops, {args.threads} threads): {c * 1e3:.1f} ms per inference "
              f"(max |difference| to onnxruntime {terr:.1e}): tilecraft is {c / a:.2f}x PyTorch eager")
    print(f"ResNet-18 batch 1 fp32, {args.threads} threads, load {os.getloadavg()[0]:.1f}, pool {relay_common.pool_policy()}: import {t1 - t0:.1f} s, "
          f"optimise + build + first run {t2 - t1 - tune_s:.1f} s ({kernels} kernels, {transforms} of them layout "
          f"transforms; {t3 - t2:.1f} s and {kernels_nchw} kernels without AlterOpLayout); max relative difference to onnxruntime "
          f"{err:.1e} ({err_nchw:.1e} without)")
    print(f"time per inference (median of {args.repeat} turns of 3 runs, each after 0.1 s of warm-up): tilecraft {tuned} {a * 1e3:.1f} ms "
          f"(without AlterOpLayout {an * 1e3:.1f} ms: {an / a:.2f}x), onnxruntime {b * 1e3:.1f} ms: "
          f"{b / a:.2f}x onnxruntime ({b / an:.2f}x without)")
    if args.profile:
        with autotune.apply_history_best(log if tuned != "untuned" else []), tc.transform.PassContext(opt_level=3):
            flops = relay_common.kernel_flops(mod, params)
        relay_common.print_profile(m, lib, flops, relay_common.ort_profile(model, {"data": x}, args.threads),
                                   top=args.profile)


if __name__ == "__main__":
    main()
