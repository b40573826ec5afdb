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
