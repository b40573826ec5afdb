"""Compile time and planned memory of whole models, no GPU needed: ResNet-18 and ResNet-50 (the
torch modules of ``bench/relay_cuda.py``, random weights) imported with ``relay.frontend.from_torch``,
optimized (``relay.optimize``: the build's passes) and built (``relay.build``, untuned: fallback
configurations) for ``llvm`` and for ``cuda`` (nvcc compiles the kernels; a cold cache unless
``--warm``), and ``lib.memory_summary()`` (intermediate tensors planned by liveness against one
buffer per tensor). Not a test; figures in docs/relay.md and the README.

    python3 bench/relay_compile.py [--models resnet18:1,resnet50:1] [--targets llvm,cuda] [--fp16]
"""
import argparse
import os
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18:1,resnet50:1", help="model:batch, comma-separated")
    ap.add_argument("--targets", default="llvm,cuda")
    ap.add_argument("--fp16", action="store_true", help="cuda: through ToMixedPrecision('float16')")
    ap.add_argument("--warm", action="store_true", help="keep nvcc's kernel cache (default: a fresh one)")
    args = ap.parse_args()
    if not args.warm:               # the CUDA backend caches cubins on disk: time a cold build
        os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="tilecraft-compile-bench-")
    import torch

    import relay_cuda
    import tilecraft as tc
    from tilecraft import relay
    warnings.filterwarnings("ignore", message="no tuned configuration")
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; torch {torch.__version__}")
    for spec in args.models.split(","):
        name, batch = spec.split(":")
        torch.manual_seed(0)
        model = relay_cuda.randomize(torch, getattr(relay_cuda, name)(torch, torch.nn))
        x = torch.rand(int(batch), 3, 224, 224)
        for target in args.targets.split(","):
            t0 = time.perf_counter()
            mod, params = relay.frontend.from_torch(model, (x,))
            if target == "cuda" and args.fp16:
                mod = relay.transform.ToMixedPrecision("float16")(mod)
            t1 = time.perf_counter()
            with tc.transform.PassContext(opt_level=3):
                relay.optimize(mod, target, params)
                t2 = time.perf_counter()
                lib = relay.build(mod, target=target, params=params)
            t3 = time.perf_counter()
            kernels = sum(n["op"] == "kernel" for n in lib.graph["nodes"])
            prec = " fp16" if target == "cuda" and args.fp16 else ""
            print(f"{name} batch {batch} {target}{prec}: import {t1 - t0:.1f} s, optimize {t2 - t1:.1f} s, build "
                  f"(optimize + codegen) {t3 - t2:.1f} s: import + build {t3 - t2 + t1 - t0:.1f} s, {kernels} kernels; "
                  f"{lib.memory_summary()}", flush=True)


if __name__ == "__main__":
    main()
