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


def conv_layers(mod, params) -> dict:
    """``{kernel name: (layer key, what computes it)}`` for the convolution kernels of
    ``relay.build(mod, "llvm", params)`` (call inside the build's ``apply_history_best`` /
    ``PassContext``): the key ``(CI, H, W, CO, K, stride)``, and the template with its
    parameters (the micro-kernel's register tile ``reg_n × oc``, input block, ``ic_outer``,
    ``k_unroll``; or the loop-level template's), tuned or the fallback."""
    from tilecraft.autotune.dispatch import DispatchContext
    from tilecraft.relay import build_module
    from tilecraft.relay.backend import te_compiler
    from tilecraft.relay.ir import Call, Function, post_order
    from tilecraft.relay.printer import astext
    from tilecraft.target import Target
    fused, _ = build_module.optimize(mod, "llvm", params)
    out, seen, taken = {}, set(), {}
    with Target("llvm"):
        for n in post_order(fused["main"].body):
            if type(n) is not Call or not isinstance(n.op, Function) or astext(n.op) in seen:
                continue
            seen.add(astext(n.op))
            name = build_module._kernel_name(n.op, taken)
            conv = next((c for c in post_order(n.op.body) if type(c) is Call and not isinstance(c.op, Function)
                         and c.op.name in ("nn.conv2d", "nn.contrib_conv2d_NCHWc")), None)
            if conv is None:
                continue
            d, w = conv.args[0].ty.shape, conv.args[1].ty.shape
            CI = d[1] * (d[4] if len(d) == 5 else 1)
            CO = conv.ty.shape[1] * (conv.ty.shape[4] if len(conv.ty.shape) == 5 else 1)
            key = (CI, d[2], d[3], CO, w[2], conv.attrs.strides[0])
            _, _, anchor = te_compiler.compute_group(n.op)
            p = anchor.parts if anchor is not None else {}
            wl = None
            if anchor is not None:
                wl = (1,) + key[:4] + (w[2], w[3], key[5], conv.attrs.padding[0])
                wl = (("topi/conv2d_NCHWc_microkernel.llvm",) + wl + (d[-1], conv.ty.shape[-1], "float32")
                      if anchor.kind.endswith("_mk") else ("topi/conv2d_nchw.llvm",) + wl + ("float32",))
            cfg = DispatchContext.current().query(Target.current(), wl) if wl else None
            state = "fallback" if cfg is None or cfg.is_fallback else "tuned"
            if anchor is None:
                how = "generic schedule"
            elif anchor.kind == "conv2d_NCHWc_mk":
                how = (f"micro-kernel {p['reg_n']}x{conv.ty.shape[-1]} ic {d[-1]} ic_outer {int(p['ic_outer'])} "
                       f"k_unroll {p['k_unroll']} ({state})")
            else:
                how = f"loop template {anchor.kind} reg_n {p.get('reg_n')} ({state})"
            out[name] = (key, how)
    return out


def ort_convs(model, inputs: dict, threads: int, runs: int = 10) -> dict:
    """onnxruntime's own profile of its convolutions: ``{(CI, H, W, CO, K, stride): [median ms
    per run of each node]}`` (its NCHWc convolutions report NCHW shapes)."""
    import json
    import relay_common
    sess = relay_common.ort_session(model, threads, profile=True)
    for _ in range(runs + 1):
        sess.run(None, inputs)
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    per_node: dict = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["args"].get("op_name") in ("Conv", "FusedConv"):
            try:
                x = list(e["args"]["input_type_shape"][0].values())[0]
                w = list(e["args"]["input_type_shape"][1].values())[0]
                y = list(e["args"]["output_type_shape"][0].values())[0]
            except (KeyError, IndexError):
                continue
            key = (w[1], x[2], x[3], y[1], w[2], max(1, round(x[2] / y[2])))
            per_node.setdefault((key, e["name"]), []).append(e["dur"])
    out: dict = {}
    for (key, _), durs in per_node.items():
        out.setdefault(key, []).append(float(np.median(durs[-runs:])) / 1e3)
    return out


def print_conv_table(m, lib, layers: dict, flops: dict, ort: dict, runs: int = 10) -> None:
    """Each fused convolution kernel against onnxruntime's nodes of the same layer (time per run,
    GFLOP/s, what computed it), then the rest (pooling, dense, layout transforms)."""
    rows = m.profile(runs)
    by_key: dict = {}
    rest = []
    for name, calls, ms in rows:
        if name in layers:
            key, how = layers[name]
            by_key.setdefault(key, []).append((name, calls, ms, how))
        else:
            rest.append((name, calls, ms))
    print(f"per layer (median of {runs} runs; ours: each fused conv kernel with its epilogue; onnxruntime: its Conv nodes):")
    print(f"  {'CI':>4} {'HxW':>7} {'CO':>4} {'K':>2} {'s':>1}  {'ours ms':>8} {'GFLOP/s':>7}  {'ort ms':>7} {'GFLOP/s':>7}  {'ort/ours':>8}  computed by")
    tot_ours = tot_ort = 0.0
    for key in sorted(by_key, key=lambda k: -sum(r[2] for r in by_key[k])):
        CI, H, W, CO, K, st = key
        ours = sum(r[2] for r in by_key[key])
        calls = sum(r[1] for r in by_key[key])
        f = sum(flops.get(r[0], 0.0) * r[1] for r in by_key[key])
        o = ort.get(key, [])
        o_ms = sum(o)
        tot_ours += ours
        tot_ort += o_ms
        ratio = f"{o_ms / ours:8.2f}" if o and ours else "       -"
        o_rate = f"{f / (o_ms * 1e-3) / 1e9:7.0f}" if o and len(o) == calls else "      -"
        print(f"  {CI:4d} {H:3d}x{W:<3d} {CO:4d} {K:2d} {st:1d}  {ours:8.2f} {f / (ours * 1e-3) / 1e9:7.0f}  {o_ms:7.2f} "
              f"{o_rate}  {ratio}  {calls}x {by_key[key][0][3]}")
    print(f"  convolutions: ours {tot_ours:.2f} ms, onnxruntime {tot_ort:.2f} ms ({tot_ort / tot_ours:.2f}x)")
    for name, calls, ms in rest:
        print(f"  {ms:8.2f} ms  {calls}x  {name}")


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
            layers = conv_layers(mod, params)
        print_conv_table(m, lib, layers, flops, ort_convs(model, {"data": x}, args.threads))
        relay_common.print_profile(m, lib, flops, relay_common.ort_profile(model, {"data": x}, args.threads),
                                   top=args.profile)


if __name__ == "__main__":
    main()
