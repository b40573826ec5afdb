"""Whole models on the GPU: ResNet-50 (batch 1 and 32) and a BERT-base encoder layer (seq 128),
random weights, defined here as torch modules and imported with ``relay.frontend.from_torch``;
``relay.build(target="cuda")`` against PyTorch eager (and ``torch.compile`` with ``--compile``) in
the same run, same inputs, outputs compared. Times: CUDA events around ``number`` runs, median of
``repeat``. Not a test; figures in docs/relay.md.

    python3 bench/relay_cuda.py [--models resnet50:1,resnet50:32,bert:1,resnet50:32:fp16,bert:1:fp16]
                                [--compile] [--profile 15] [--cuda-graph] [--ort] [--trials N [--min-trials M]]
                                [--log FILE ...] [--nchw-pool]

A model's third field is its precision: ``fp32`` (the default), ``fp16`` (tilecraft: the fp32
import through ``relay.transform.ToMixedPrecision("float16")``, float32 input and output; torch:
``model.half()`` on the input in float16) or ``tf32`` (fp32 with
``PassContext(config={"cuda.allow_tf32": True})``: convolutions on tensor cores with TF32 operands).
fp32 and tf32 rows time torch eager twice, with ``torch.backends.cudnn.allow_tf32`` off and on
(torch's default is on: its convolutions use TF32 unless told not to).

``--ort`` also times onnxruntime's CUDA execution provider where it is installed.
``--cuda-graph`` also times the same build replaying a captured CUDA graph (``cuda_graph=True``).
``--profile K`` also times every kernel of each tilecraft model alone and prints the K slowest.
``--trials N`` tunes the model's CUDA tasks first (``tune_tasks``, N trials in all, into ``--log``),
after timing the untuned build (the line gives both, and the tuning wall time);
``--log`` alone builds with existing logs (a tuned conv2d config where they have the workload).
``--nchw-pool`` keeps pooling in NCHW under ``TensorCoreLayout`` (a transpose on each side: the
layout before NHWC pooling, to compare).
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np


def resnet50(torch, nn, classes=1000):
    class Bottleneck(nn.Module):
        def __init__(self, cin, mid, stride):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid)
            self.conv2, self.bn2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid)
            self.conv3, self.bn3 = nn.Conv2d(mid, mid * 4, 1, bias=False), nn.BatchNorm2d(mid * 4)
            self.down = None
            if stride != 1 or cin != mid * 4:
                self.down = nn.Sequential(nn.Conv2d(cin, mid * 4, 1, stride, bias=False), nn.BatchNorm2d(mid * 4))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = torch.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet50(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], 64
            for mid, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                for i in range(n):
                    blocks.append(Bottleneck(cin, mid, stride if i == 0 else 1))
                    cin = mid * 4
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(2048, classes)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    return ResNet50()


def resnet18(torch, nn, classes=1000, width=64):
    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], width
            for cout, stride in ((width, 1), (width, 1), (2 * width, 2), (2 * width, 1), (4 * width, 2),
                                 (4 * width, 1), (8 * width, 2), (8 * width, 1)):
                blocks.append(Basic(cin, cout, stride))
                cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    return ResNet18()


def bert_layer(torch, nn, H=768, heads=12, F=3072):
    class BertLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(H, H) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(H), nn.LayerNorm(H)
            self.f1, self.f2 = nn.Linear(H, F), nn.Linear(F, H)

        def forward(self, x):
            B, S, _ = x.shape
            def heads_of(t):
                return t.view(B, S, heads, H // heads).transpose(1, 2)
            q, k, v = heads_of(self.q(x)), heads_of(self.k(x)), heads_of(self.v(x))
            p = torch.softmax(q @ k.transpose(-1, -2) / (H // heads) ** 0.5, dim=-1)
            ctx = (p @ v).transpose(1, 2).reshape(B, S, H)
            x = self.ln1(x + self.o(ctx))
            return self.ln2(x + self.f2(nn.functional.gelu(self.f1(x))))

    return BertLayer()


def randomize(torch, model, seed=0):
    """Random weights and batch-norm statistics (not the identity), eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1, generator=g)
                m.running_var.uniform_(0.5, 1.5, generator=g)
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.uniform_(-0.1, 0.1, generator=g)
    return model.eval()


def time_torch(torch, fn, number, repeat):
    with torch.no_grad():
        fn()
        torch.cuda.synchronize()
        out = []
        for _ in range(repeat):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(number):
                fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3 / number)
    return float(np.median(out))


def time_ort(torch, model_gpu, xg, want, number, repeat, ours) -> str:
    """onnxruntime's CUDA execution provider on the model exported from torch, input and output
    bound on the GPU (no copies timed); a phrase for the report line."""
    import tempfile
    try:
        import onnxruntime as ort
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            return f"onnxruntime {ort.__version__} has no CUDA provider"
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.onnx")
            with torch.no_grad():
                try:
                    torch.onnx.export(model_gpu, (xg,), path, opset_version=17, dynamo=False)
                except TypeError:           # a torch before the dynamo exporter: the TorchScript one
                    torch.onnx.export(model_gpu, (xg,), path, opset_version=17)
            sess = ort.InferenceSession(path, providers=["CUDAExecutionProvider"])
        io = sess.io_binding()
        io.bind_ortvalue_input(sess.get_inputs()[0].name,
                               ort.OrtValue.ortvalue_from_numpy(xg.cpu().numpy(), "cuda", 0))
        io.bind_output(sess.get_outputs()[0].name, "cuda")
        sess.run_with_iobinding(io)
        err = np.abs(io.copy_outputs_to_cpu()[0] - want).max() / max(np.abs(want).max(), 1e-30)
        t = time_torch(torch, lambda: sess.run_with_iobinding(io), number, repeat)
        return f"onnxruntime-CUDA {t * 1e3:.3f} ms ({t / ours:.2f}x; difference {err:.1e})"
    except Exception as e:                      # noqa: BLE001 -- report, keep going
        return f"onnxruntime-CUDA failed ({type(e).__name__}: {str(e)[:120]})"


def profile_kernels(ex, top: int, number: int = 20) -> list:
    """(seconds per launch, kernel name) of every kernel of a GPU executor, slowest first."""
    import pycuda.driver as drv
    names = [n["func"] for n in ex.nodes if n["op"] == "kernel"]
    rows = []
    ex.run()
    ex.device.sync()
    for name, step in zip(names, ex._steps):
        a, b = drv.Event(), drv.Event()
        a.record()
        for _ in range(number):
            ex.device.launch([step])
        b.record()
        b.synchronize()
        rows.append((a.time_till(b) / 1e3 / number, name))
    rows.sort(reverse=True)
    return rows[:top]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet50:1,resnet50:32,bert:1",
                    help="comma-separated model:batch[:precision] (resnet50, resnet18, bert; fp32, fp16, tf32)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--number", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile (slow to compile)")
    ap.add_argument("--profile", type=int, default=0, metavar="K", help="print the K slowest kernels")
    ap.add_argument("--trials", type=int, default=0, help="tune the CUDA tasks first, this many trials in all")
    ap.add_argument("--log", nargs="+", default=None,
                    help="tuning logs to build with (with --trials the first is written; resumes), e.g. "
                         "bench/results/cuda_tuning/cuda_conv2d_*.jsonl (ResNet's 3x3 layers tuned on an H100)")
    ap.add_argument("--ort", action="store_true",
                    help="also time onnxruntime's CUDA execution provider (when installed; IO bound on the GPU)")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="also time the executor replaying a captured CUDA graph (cuda_graph=True)")
    ap.add_argument("--min-blocks", type=int, default=None,
                    help="conv2d fallback: split input channels below this many blocks (0: never)")
    ap.add_argument("--batch-tiles-min-n", type=int, default=None,
                    help="untuned conv2d: the larger batch tiles from this many images on (0: never)")
    ap.add_argument("--min-trials", type=int, default=8, help="with --trials: the least trials of a task")
    ap.add_argument("--nchw-pool", action="store_true",
                    help="pool NHWC values in NCHW between transposes (the layout before NHWC pooling)")
    args = ap.parse_args()
    from tilecraft.relay.backend import te_compiler_cuda
    from tilecraft.relay.transform import tensorcore_layout
    tensorcore_layout.NHWC_POOLING = not args.nchw_pool
    if args.min_blocks is not None:
        te_compiler_cuda.MIN_BLOCKS = args.min_blocks
    if args.batch_tiles_min_n is not None:
        te_compiler_cuda.BATCH_TILES_MIN_N = args.batch_tiles_min_n or 1 << 30
    import torch
    import torch.nn as nn

    import tilecraft as tc
    from tilecraft import autotune, relay
    from tilecraft.contrib import graph_executor
    warnings.filterwarnings("ignore", message="no tuned configuration")
    print(f"GPU {torch.cuda.get_device_name(0)}, torch {torch.__version__}, load {os.getloadavg()[0]:.1f}")
    for spec in args.models.split(","):
        name, batch, *prec = spec.split(":")
        batch, prec = int(batch), (prec or ["fp32"])[0]
        if prec not in ("fp32", "fp16", "tf32"):
            sys.exit(f"unknown precision {prec!r} in {spec!r} (fp32, fp16, tf32)")
        torch.manual_seed(0)
        if name in ("resnet50", "resnet18"):
            model = randomize(torch, (resnet50 if name == "resnet50" else resnet18)(torch, nn))
            x = torch.rand(batch, 3, 224, 224) * 2 - 1
        elif name == "bert":
            model = randomize(torch, bert_layer(torch, nn))
            x = torch.randn(batch, 128, 768)
        else:
            sys.exit(f"unknown model {name!r}")
        t0 = time.perf_counter()
        mod, params = relay.frontend.from_torch(model, (x,))
        if prec == "fp16":
            mod = relay.transform.ToMixedPrecision("float16")(mod)
        config = {"cuda.allow_tf32": True} if prec == "tf32" else {}
        t1 = time.perf_counter()
        logs = list(args.log or [])
        t_plain = None
        if args.trials:
            logs = logs or [f"relay_cuda_{name}_{batch}.jsonl"]
            with tc.transform.PassContext(opt_level=3, config=config):
                plain = relay.build(mod, target="cuda", params=params)
            mp = graph_executor.GraphModule(plain["default"](tc.cuda(0)))
            mp.set_input(0, x.numpy())
            t_plain = float(np.median([mp.benchmark(tc.cuda(0), repeat=1, number=args.number).mean
                                       for _ in range(args.repeat)]))
            print(f"  {name} batch {batch} {prec}: untuned {t_plain * 1e3:.3f} ms ({plain.module.build_times.get('nvcc', 0):.1f} s "
                  f"nvcc); {plain.memory_summary()}", flush=True)
            del mp, plain
            tasks = autotune.task.extract_from_program(mod["main"], target="cuda", params=params)
            tt = time.perf_counter()
            autotune.tune_tasks(tasks, args.trials, logs[0], min_trials=args.min_trials)
            print(f"  tuned {len(tasks)} tasks, {args.trials} trials in {time.perf_counter() - tt:.0f} s into {logs[0]}")
        records = [r for f in logs if os.path.isfile(f) for r in autotune.record.load_from_file(f)]
        log = f"{len(records)} records from {len(logs)} logs" if logs else None
        t2 = time.perf_counter()
        with autotune.apply_history_best(records), tc.transform.PassContext(opt_level=3, config=config):
            lib = relay.build(mod, target="cuda", params=params)
        t3 = time.perf_counter()
        ex = lib["default"](tc.cuda(0))
        m = graph_executor.GraphModule(ex)
        m.set_input(0, x.numpy())
        m.run()
        got = m.get_output(0).numpy()
        model_gpu = model.cuda()
        xg = x.cuda()
        if prec == "fp16":
            model_gpu, xg = model_gpu.half(), xg.half()
        with torch.no_grad():
            want = model_gpu(xg).float().cpu().numpy()
        err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
        ours = [m.benchmark(tc.cuda(0), repeat=1, number=args.number).mean for _ in range(args.repeat)]
        ours = float(np.median(ours))
        eager = time_torch(torch, lambda: model_gpu(xg), args.number, args.repeat)
        eager_note = ""
        if prec != "fp16":            # torch's convolutions with and without TF32 (its default: with)
            default = torch.backends.cudnn.allow_tf32
            torch.backends.cudnn.allow_tf32 = not default
            other = time_torch(torch, lambda: model_gpu(xg), args.number, args.repeat)
            torch.backends.cudnn.allow_tf32 = default
            on, off = (eager, other) if default else (other, eager)
            eager_note = (f" (cudnn TF32 {'on' if default else 'off'}, torch's default; with TF32 "
                          f"{'off' if default else 'on'} {other * 1e3:.3f} ms: {other / ours:.2f}x; "
                          f"TF32 on {on / ours:.2f}x, off {off / ours:.2f}x)")
        untuned = "" if t_plain is None else f" (untuned {t_plain * 1e3:.3f} ms: tuning gives {t_plain / ours:.2f}x)"
        kernels = sum(n["op"] == "kernel" for n in lib.graph["nodes"])
        variant = "".join(f" {k}={v}" for k, v in (("min_blocks", args.min_blocks),
                                                     ("batch_tiles_min_n", args.batch_tiles_min_n)) if v is not None)
        variant += " nchw_pool" if args.nchw_pool else ""
        line = (f"{name} batch {batch} {prec}{variant}: import {t1 - t0:.1f} s, build {t3 - t2:.1f} s "
                f"({kernels} kernels, {lib.module.build_times.get('nvcc', 0):.1f} s nvcc); max relative "
                f"difference to torch {err:.1e}; tilecraft {f'tuned ({log})' if log else 'untuned'} {ours * 1e3:.3f} ms{untuned}, "
                f"torch eager {eager * 1e3:.3f} ms: {eager / ours:.2f}x eager{eager_note}")
        if args.cuda_graph:
            try:
                mg = graph_executor.GraphModule(lib["default"](tc.cuda(0), cuda_graph=True))
                mg.set_input(0, x.numpy())
                mg.run()
                same = np.array_equal(mg.get_output(0).numpy(), got)
                tg = float(np.median([mg.benchmark(tc.cuda(0), repeat=1, number=args.number).mean
                                      for _ in range(args.repeat)]))
                line += (f"; with a CUDA graph {tg * 1e3:.3f} ms: {eager / tg:.2f}x eager"
                         f"{'' if same else ' (OUTPUT DIFFERS)'}")
                del mg
            except Exception as e:                      # noqa: BLE001 -- report, keep going
                line += f"; CUDA graph failed ({type(e).__name__}: {str(e)[:160]})"
        if args.ort:
            line += "; " + time_ort(torch, model_gpu, xg, want, args.number, args.repeat, ours)
        if args.compile:
            try:
                tc0 = time.perf_counter()
                comp = torch.compile(model_gpu)
                with torch.no_grad():
                    comp(xg)
                ct = time_torch(torch, lambda: comp(xg), args.number, args.repeat)
                line += f"; torch.compile {ct * 1e3:.3f} ms ({time.perf_counter() - tc0:.0f} s): {ct / ours:.2f}x"
            except Exception as e:                      # noqa: BLE001 -- report, keep going
                line += f"; torch.compile failed ({type(e).__name__}: {str(e)[:100]})"
        print(line, flush=True)
        print("  " + lib.memory_summary())
        if args.profile:
            total = sum(t for t, _ in profile_kernels(ex, 10**6))
            print(f"  kernels alone, sum {total * 1e3:.3f} ms; slowest:")
            for t, k in profile_kernels(ex, args.profile):
                print(f"    {t * 1e6:9.1f} us  {k}")
        del ex, m, lib, model_gpu
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
