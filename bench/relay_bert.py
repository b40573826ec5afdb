"""A BERT-base encoder layer (batch 1, sequence 128, hidden 768, 12 heads, FFN 3072, random
weights, built here with onnx.helper): build time without tuning and time per inference against
onnxruntime, measured in this run with the same thread count. Not a test.

    python3 bench/relay_bert.py [--threads 2] [--seq 128] [--repeat 5] [--alone]

``--alone`` also times each tunable kernel of the layer alone (its template with the config the
build used, warm caches, minimum of 7 × 20 calls): the rate the micro-kernel reaches on the
workload, to compare with the same kernel's rate inside the model (profile).
"""
import argparse
import os
import time
import warnings

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def encoder_layer(rng, S, H=768, heads=12, F=3072):
    d = H // heads
    nodes, inits = [], []

    def w(name, *shape, scale=0.02):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype("float32"), name))
        return name

    def const(name, values):
        inits.append(numpy_helper.from_array(np.asarray(values, "int64"), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    const("heads_shape", [1, S, heads, d])
    const("merge_shape", [1, S, H])
    proj = {}
    for p in "qkv":
        t = node("MatMul", ["x", w(f"w{p}", H, H)], f"{p}0")
        t = node("Add", [t, w(f"b{p}", H)], f"{p}1")
        t = node("Reshape", [t, "heads_shape"], f"{p}2")
        proj[p] = node("Transpose", [t], f"{p}3", perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])
    s = node("MatMul", [proj["q"], proj["k"]], "scores")
    inits.append(numpy_helper.from_array(np.float32(1 / np.sqrt(d)), "scale"))
    s = node("Mul", [s, "scale"], "scaled")
    p = node("Softmax", [s], "probs", axis=-1)
    c = node("MatMul", [p, proj["v"]], "ctx")
    c = node("Transpose", [c], "ctx_t", perm=[0, 2, 1, 3])
    c = node("Reshape", [c, "merge_shape"], "ctx_m")
    o = node("Add", [node("MatMul", [c, w("wo", H, H)], "o0"), w("bo", H)], "o1")
    r = node("Add", [o, "x"], "res1")
    ln1 = node("LayerNormalization", [r, w("g1", H, scale=1.0), w("be1", H)], "ln1", epsilon=1e-5)
    h = node("Add", [node("MatMul", [ln1, w("w1", H, F)], "h0"), w("b1", F)], "h1")
    h = node("Gelu", [h], "h2")
    h = node("Add", [node("MatMul", [h, w("w2", F, H)], "f0"), w("b2", H)], "f1")
    r2 = node("Add", [h, ln1], "res2")
    node("LayerNormalization", [r2, w("g2", H, scale=1.0), w("be2", H)], "y", epsilon=1e-5)
    graph = helper.make_graph(nodes, "bert_layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, H])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, H])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = min(model.ir_version, 9)   # onnx 1.23 writes 14, onnxruntime 1.30 reads <= 13 (as tests/relay/relay_helpers.py)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--trials", type=int, default=0, help="tune the model's tasks first, this many trials in all")
    ap.add_argument("--log", default=None, help="the tuning log (default: tuning_logs/BENCH.jsonl; resumes)")
    ap.add_argument("--tune-only", action="store_true", help="tune (--trials), then stop: a later run measures")
    ap.add_argument("--profile", type=int, default=8, help="list this many kernels, the slowest first")
    ap.add_argument("--no-torch", action="store_true", help="do not time PyTorch eager")
    ap.add_argument("--alone", action="store_true", help="also time each tunable kernel alone (warm)")
    ap.add_argument("--disable-pass", action="append", default=[], help="build without this graph pass "
                    "(repeatable; e.g. CombineParallelDense): a variant to compare")
    args = ap.parse_args()

    import tilecraft as tc
    from tilecraft import autotune, relay
    from tilecraft.contrib import graph_executor
    tc.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    model = encoder_layer(rng, args.seq)
    x = rng.standard_normal((1, args.seq, 768)).astype("float32")
    warnings.filterwarnings("ignore", message="no tuned configuration")
    t0 = time.perf_counter()
    mod, params = relay.frontend.from_onnx(model)
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
    with autotune.apply_history_best(log if tuned != "untuned" else []), tc.transform.PassContext(opt_level=3, disabled_pass=args.disable_pass):
        lib = relay.build(mod, target="llvm", params=params)
    m = graph_executor.GraphModule(lib["default"](tc.cpu(0)))
    m.set_input("x", x)
    m.run()
    t1 = time.perf_counter()
    import relay_common
    sess = relay_common.ort_session(model, args.threads)
    ref = sess.run(None, {"x": x})[0]
    err = np.abs(m.get_output(0).numpy() - ref).max()
    med = relay_common.in_turns({"ours": m.module.run, "ort": lambda: sess.run(None, {"x": x})}, args.repeat, 5)
    a, b = med["ours"], med["ort"]
    print(lib.memory_summary())
    if not args.no_torch:
        eager = relay_common.torch_eager(model, args.threads)
        terr = np.abs(eager({"x": x}) - ref).max()
        c = relay_common.in_turns({"eager": lambda: eager({"x": x})}, args.repeat, 2)["eager"]
        print(f"PyTorch eager (same graph, torch ops, {args.threads} threads): {c * 1e3:.1f} ms per inference "
              f"(max |difference| to onnxruntime {terr:.1e}): tilecraft is {c / a:.2f}x PyTorch eager")
    kernels = [n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel"]
    without = f" without {', '.join(args.disable_pass)}" if args.disable_pass else ""
    print(f"BERT-base encoder layer{without}, seq {args.seq}, {args.threads} threads, load {os.getloadavg()[0]:.1f}, pool {relay_common.pool_policy()}: "
          f"import + optimise + build + first run {t1 - t0 - tune_s:.1f} s ({len(kernels)} kernels); max |difference| "
          f"to onnxruntime {err:.1e}")
    print(f"time per inference (median of {args.repeat} turns of 5 runs, each after 0.1 s of warm-up): tilecraft {tuned} {a * 1e3:.1f} ms, onnxruntime "
          f"{b * 1e3:.1f} ms: {b / a:.2f}x onnxruntime")
    with autotune.apply_history_best(log if tuned != "untuned" else []), tc.transform.PassContext(opt_level=3, disabled_pass=args.disable_pass):
        flops = relay_common.kernel_flops(mod, params)
    relay_common.print_profile(m, lib, flops, relay_common.ort_profile(model, {"x": x}, args.threads),
                               top=args.profile)
    if args.alone:
        with autotune.apply_history_best(log if tuned != "untuned" else []):
            time_alone(mod, params)


def time_alone(mod, params):
    """Each tunable workload of the layer built alone from its template with the config the
    graph's build uses (tuned or fallback), timed on warm caches with random inputs."""
    import tilecraft as tc
    from tilecraft import autotune
    from tilecraft.target import Target
    print("each tunable kernel alone (its template, the build's config, warm caches, min of 7 x 20 calls):")
    for task in autotune.task.extract_from_program(mod["main"], target="llvm", params=params):
        with Target("llvm"):
            s, bufs = task.func(*task.args)
            f = tc.build(s, bufs, target="llvm")
        rng = np.random.default_rng(1)
        arrays = [rng.uniform(-1, 1, [int(getattr(d, "value", d)) for d in b.shape]).astype(b.dtype) for b in bufs]
        t = min(f.time_evaluator(f.entry_name, tc.cpu(0), number=20, repeat=7)(*arrays).results)
        flop = task.flop if getattr(task, "flop", 0) else 0
        rate = f"{flop / t / 1e9:6.0f} GFLOP/s" if flop else ""
        print(f"  {t * 1e3:7.3f} ms  {task.name} {task.args}  {rate}")


if __name__ == "__main__":
    main()
