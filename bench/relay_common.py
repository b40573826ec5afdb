"""Shared parts of the graph-level benches: a short tuning run of a model's tasks, and the same
ONNX graph run by PyTorch in eager mode (one torch call per ONNX node, the weights as torch
tensors: what a ``torch.nn.Module.forward`` written for the model does). Not a test.
"""
import os
import time

import numpy as np


def tune(mod, params, trials: int, log: str, early_stopping=None) -> str:
    """Tune ``mod``'s tasks with ``trials`` in all into ``log`` (resumes; the XGBoost tuner, or
    the genetic one where xgboost is not installed); returns a one-line account (tasks, trials
    measured now, wall time)."""
    from tilecraft import autotune
    tasks = autotune.task.extract_from_program(mod["main"], target="llvm", params=params)
    start = time.perf_counter()
    try:
        import xgboost  # noqa: F401
        tuner = "xgb"
    except ImportError:     # the optional cost model: the genetic search needs none
        tuner = "ga"
    report = autotune.tune_tasks(tasks, trials, log, tuner=tuner, early_stopping=early_stopping, progress=False)
    wall = time.perf_counter() - start
    done = sum(r["done"] for r in report)
    return (f"{len(tasks)} tasks, {trials} trials budget, tuner {tuner} ({done} in {os.path.basename(log)}, "
            f"{sum(r['measured'] for r in report)} measured now in {wall:.0f} s)")


def pool_policy() -> str:
    """libgomp's wait policy in this process, for the benches' lines: tilecraft's default
    ``OMP_WAIT_POLICY=PASSIVE`` (idle pool threads sleep between kernels) or what the
    environment set, e.g. ``GOMP_SPINCOUNT=10000`` (they spin briefly, as onnxruntime's do)."""
    from tilecraft.runtime.threads import wait_policy
    return " ".join(f"{k}={v}" for k, v in wait_policy().items() if k != "source") or "libgomp default"


def torch_eager(model, threads: int):
    """A function ``inputs dict -> first output (numpy)`` running ``model``'s nodes with torch
    eager ops (the ops of bench/relay_resnet18.py and bench/relay_bert.py)."""
    import torch
    import torch.nn.functional as F
    from onnx import helper, numpy_helper
    torch.set_num_threads(threads)
    consts = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in model.graph.initializer}

    def attrs(node):
        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def run_node(node, v):
        a = attrs(node)
        x = [v[i] for i in node.input if i]
        op = node.op_type
        if op == "Conv":
            pads = a.get("pads", [0, 0, 0, 0])
            return F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, stride=a.get("strides", [1, 1]),
                            padding=pads[:2], groups=a.get("group", 1))
        if op == "BatchNormalization":
            return F.batch_norm(x[0], x[3], x[4], x[1], x[2], False, 0.0, a.get("epsilon", 1e-5))
        if op == "MaxPool":
            return F.max_pool2d(x[0], a["kernel_shape"], a.get("strides"), a.get("pads", [0, 0])[:2])
        if op == "GlobalAveragePool":
            return F.adaptive_avg_pool2d(x[0], 1)
        if op == "Flatten":
            return torch.flatten(x[0], 1)
        if op == "Gemm":
            return F.linear(x[0], x[1] if a.get("transB") else x[1].t(), x[2] if len(x) > 2 else None)
        if op == "Reshape":
            return x[0].reshape([int(d) for d in x[1]])
        if op == "Transpose":
            return x[0].permute(*a["perm"])
        if op == "Softmax":
            return torch.softmax(x[0], a.get("axis", -1))
        if op == "LayerNormalization":
            return F.layer_norm(x[0], x[0].shape[-1:], x[1], x[2], a.get("epsilon", 1e-5))
        if op == "Gelu":
            return F.gelu(x[0], approximate=a.get("approximate", b"none").decode()
                          if isinstance(a.get("approximate"), bytes) else a.get("approximate", "none"))
        simple = {"Relu": torch.relu, "Add": torch.add, "Mul": torch.mul, "MatMul": torch.matmul}
        return simple[op](*x)

    def forward(inputs: dict):
        with torch.inference_mode():
            v = dict(consts)
            v.update({k: torch.from_numpy(val) for k, val in inputs.items()})
            for node in model.graph.node:
                v[node.output[0]] = run_node(node, v)
            return v[model.graph.output[0].name].numpy()
    return forward


def time_per_call(fn, number: int) -> float:
    t = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t) / number


def median_ms(samples) -> float:
    return float(np.median(samples)) * 1e3


def in_turns(fns: dict, repeat: int, number: int, warm_s: float = 0.1) -> dict:
    """``{name: median seconds per call}`` of the functions in ``fns``, timed in turns (so all
    see the same machine load): ``repeat`` rounds, in each every function runs ``number`` times,
    after running for ``warm_s`` seconds untimed. The warm-up is not optional: right after the
    other engine ran, the first runs are slow (its threads and working set are still in the
    way: measured on the shared EPYC, 2 threads, the BERT layer took 8.5 ms for seven runs after
    onnxruntime's, then 5.0 ms), so a block of 2 runs straight after the other engine's timed
    the switch, not the engine."""
    samples = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            end = time.perf_counter() + warm_s
            while time.perf_counter() < end:
                fn()
            samples[name].append(time_per_call(fn, number))
    return {name: float(np.median(s)) for name, s in samples.items()}


def ort_session(model, threads: int, profile: bool = False):
    """An onnxruntime CPU session of ``model`` with ``threads`` intra-op threads (its default
    spinning pool), profiling each node when ``profile``."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(os.environ.get("TMPDIR", "/tmp"), "relay_bench_ort")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def ort_profile(model, inputs: dict, threads: int, runs: int = 10) -> dict:
    """onnxruntime's own per-node profile (``SessionOptions.enable_profiling``) of its optimised
    graph (its fused nodes: Gemm with the bias, SkipLayerNormalization, ...):
    ``{node name: (op type, median ms per run, FLOPs)}`` over ``runs`` runs after one warm-up;
    FLOPs (2 per multiply-add) for the GEMM-like nodes, from the shapes the profile records."""
    import json
    sess = ort_session(model, threads, profile=True)
    for _ in range(runs + 1):
        sess.run(None, inputs)
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    per_node: dict = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            op = e["args"].get("op_name", "?")
            flops = 0.0
            if op in ("MatMul", "FusedMatMul", "Gemm", "Conv", "FusedConv"):
                try:
                    a = list(e["args"]["input_type_shape"][0].values())[0]
                    w = list(e["args"]["input_type_shape"][1].values())[0]
                    out = list(e["args"]["output_type_shape"][0].values())[0]
                    inner = float(np.prod(w[1:])) if op.endswith("Conv") else float(np.prod(a)) * out[-1] / float(np.prod(out))
                    flops = 2.0 * float(np.prod(out)) * inner
                except (KeyError, IndexError, ZeroDivisionError):
                    pass
            per_node.setdefault(e["name"][:-len("_kernel_time")], (op, [], flops))[1].append(e["dur"])
    return {name: (op, float(np.median(durs[-runs:])) / 1e3, flops) for name, (op, durs, flops) in per_node.items()}


def kernel_flops(mod, params) -> dict:
    """``{kernel name: FLOPs per call}`` of ``relay.build(mod, "llvm", params)``'s kernels (named
    as the build names them): convolutions, dense layers, batch matmuls and the fused
    attention's two products count 2 per multiply-add, the rest 0. Call inside the same ``apply_history_best`` / ``PassContext`` as
    the build."""
    from tilecraft.relay import build_module
    from tilecraft.relay.ir import Call, Function, post_order
    from tilecraft.relay.printer import astext
    fused, _ = build_module.optimize(mod, "llvm", params)
    out, by_text, taken = {}, {}, {}
    for n in post_order(fused["main"].body):
        if type(n) is Call and isinstance(n.op, Function):
            key = astext(n.op)
            if key in by_text:
                continue
            by_text[key] = name = build_module._kernel_name(n.op, taken)
            f = 0.0
            for c in post_order(n.op.body):
                if type(c) is Call and not isinstance(c.op, Function):
                    if c.op.name in ("nn.dense", "nn.contrib_dense_pack"):
                        f += 2.0 * float(np.prod(c.ty.shape)) * c.args[0].ty.shape[-1]
                    elif c.op.name == "nn.conv2d":
                        f += 2.0 * float(np.prod(c.ty.shape)) * float(np.prod(c.args[1].ty.shape[1:]))
                    elif c.op.name == "nn.contrib_conv2d_NCHWc":     # kernel [COc, CIc, KH, KW, ic, oc]
                        f += 2.0 * float(np.prod(c.ty.shape)) * float(np.prod(c.args[1].ty.shape[1:5]))
                    elif c.op.name == "nn.batch_matmul":
                        k = c.args[0].ty.shape[-2 if c.attrs.transpose_a else -1]
                        f += 2.0 * float(np.prod(c.ty.shape)) * k
                    elif c.op.name == "nn.contrib_attention":      # Q K^T and P V: [S, S, d] per head each
                        f += 4.0 * c.ty.shape[0] ** 2 * c.attrs.heads * c.attrs.head_dim
            out[name] = f
    return out


def print_profile(m, lib, flops: dict, ort_nodes: dict, runs: int = 10, top: int = 12) -> None:
    """Where the time goes: tilecraft's kernels (``GraphModule.profile``) with their FLOPs,
    GFLOP/s and the ideal time at the machine's GEMM rate (onnxruntime's fastest MatMul / Gemm /
    Conv node in its own profile: MLAS on this machine), then onnxruntime's profile by op type."""
    rows = m.profile(runs)
    calls = {}
    for n in lib.graph["nodes"]:
        if n["op"] == "kernel":
            calls[n["func"]] = calls.get(n["func"], 0) + 1
    per_name = {name: flops.get(name, 0.0) * c for name, c in calls.items()}
    rates = [f / (ms * 1e-3) for op, ms, f in ort_nodes.values() if f and ms > 0]
    peak = max(rates) if rates else 0.0
    total = sum(ms for _, _, ms in rows)
    ideal_total = sum(per_name.values()) / peak * 1e3 if peak else 0.0
    print(f"per kernel (median of {runs} runs, {total:.2f} ms in all; the GEMM rate: onnxruntime's fastest "
          f"GEMM node, {peak / 1e9:.0f} GFLOP/s; all FLOPs at it: {ideal_total:.2f} ms):")
    for name, calls, ms in rows[:top]:
        f = per_name.get(name, 0.0)
        extra = (f"  {f / 1e6:7.1f} MFLOP {f / (ms * 1e-3) / 1e9:6.0f} GFLOP/s, ideal {f / peak * 1e3:.2f} ms"
                 if f and peak else "")
        print(f"  {ms:8.2f} ms {100 * ms / total:5.1f}%  {calls}x  {name}{extra}")
    by_op: dict = {}
    for op, ms, flop in ort_nodes.values():
        t, f, c = by_op.get(op, (0.0, 0.0, 0))
        by_op[op] = (t + ms, f + flop, c + 1)
    ort_total = sum(t for t, _, _ in by_op.values())
    print(f"onnxruntime's own profile (median of {runs} runs per node, {ort_total:.2f} ms in all), by op type:")
    for op, (t, f, c) in sorted(by_op.items(), key=lambda kv: -kv[1][0]):
        rate = f"  {f / (t * 1e-3) / 1e9:6.0f} GFLOP/s" if f else ""
        print(f"  {t:8.2f} ms {100 * t / ort_total:5.1f}%  {c}x  {op}{rate}")
