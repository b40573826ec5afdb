"""Session 23: why do TMA GEMMs hang? One config per child process with a timeout; the parameter layout printed."""
import json, subprocess, sys, time
CONFIGS = [
    ((256, 512, 1024), dict(block=(128, 256), stages=4, raster=2, load="tma")),
    ((128, 128, 64), dict(block=(128, 128), stages=4, load="tma")),
    ((128, 128, 448), dict(block=(64, 64), stages=5, load="tma")),
    ((256, 256, 1024), dict(block=(128, 256), stages=4, load="tma", maxnreg=1)),
    ((768, 512, 320), dict(block=(128, 256), stages=4, load="tma", persistent=4)),
]
CHILD = r'''
import sys, json, numpy as np, torch, tilecraft as tc
from tilecraft.topi.tensorcore_wgmma import matmul_wgmma
from tilecraft.runtime import cuda_runtime as R, cuda_tensor_map as TM
(M, N, K), opts = json.loads(sys.argv[1])
opts["block"] = tuple(opts["block"])
s, (A, B, C) = matmul_wgmma(M, N, K, dtype="float16", out_dtype="float16", **opts)
mod = tc.build(s, [A, B, C], target="cuda")
f = mod.get_function(mod.entry_name)
print("fmt", [k.fn.arg_format if hasattr(k.fn, "arg_format") else "?" for k in f.kernels], flush=True)
for name, plan in mod.plans.items():
    for kp in plan.kernels:
        print("kernel", kp.name, "types", kp.types[:40], "maps", len(kp.tensor_maps), flush=True)
        try:
            print("layout", TM.param_layout(mod.cubin, kp.name), flush=True)
        except Exception as e:
            print("layout error", e, flush=True)
a = torch.randn(M, K, dtype=torch.float16, device="cuda"); b = torch.randn(N, K, dtype=torch.float16, device="cuda")
c = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
print("launching", flush=True)
mod(a, b, c); torch.cuda.synchronize()
ref = (a.float() @ b.float().T)
err = float((c.float() - ref).norm() / ref.norm())
print("rel err", err, "nan", bool(torch.isnan(c).any()), flush=True)
'''
for size, opts in CONFIGS:
    t0 = time.time()
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, json.dumps([size, opts])], capture_output=True, text=True, timeout=25)
        out = p.stdout + p.stderr[-1500:]
        status = f"rc={p.returncode}"
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        status = "TIMEOUT (hang)"
    print(f"=== {size} {opts}: {status} in {time.time() - t0:.1f} s\n{out}", flush=True)
