"""Pieces of the sm_90a wgmma GEMM checked one at a time on a GPU, to tell a layout bug from a
protocol bug when ``tests/cuda/test_tensorcore_wgmma.py::test_gpu_wgmma`` fails:

    python bench/tensorcore_wgmma_diag.py --out DIR

1. ``layout``: one warpgroup, one 128-byte k step: A (64 rows) and B (n rows) written into
   SWIZZLE_128B shared memory by plain stores (``swizzled_offset``), the step's wgmma
   instructions with ``codegen/cuda_wgmma.py``'s descriptors and helpers, the accumulator stored
   in the layout ``tc_wgmma_store`` assumes; against A @ B.T. No cp.async, no mbarrier.
2. ``gemm``: ``matmul_wgmma`` at small sizes (1 step, fewer steps than stages, many; lag 0-3; TMA loads)
   against numpy, each case under a time limit (a deadlocked mbarrier shows as a timeout, not a
   hang): the cases run in a child process, a new one after a case that errors, crashes or hangs.

0. ``tma``: one bulk tensor copy alone (``tc_tma_load_2d``: a box of rows x 128 bytes, swizzled by the
   copy engine, completing an mbarrier), the shared bytes written back and compared with the
   emulator's ``tma_copy`` of the same box; the tensor map passed as a ``__grid_constant__``
   parameter the way the launcher packs it (``param``), or from global memory (``global``), box
   inside the array or past its edge (zero fill): tells a tensor-map / parameter problem from a
   pipeline one.

Every result is printed; with ``--out`` the failing outputs are saved (``.npz``: got, want).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

LAYOUT_KERNEL = r"""
extern "C" __global__ void __launch_bounds__(128) wgmma_layout(const @T@* A, const @T@* B, float* D) {
  constexpr int N = @N@, EPR = 128 / sizeof(@T@), KSTEP = 32 / sizeof(@T@);
  __shared__ __align__(1024) unsigned char sm[(64 + N) * 128];
  const int t = threadIdx.x;
  for (int q = t; q < (64 + N) * 8; q += 128) {
    const int r = q >> 3, c = q & 7;
    const @T@* src = r < 64 ? A + r * EPR + c * (EPR / 8) : B + (r - 64) * EPR + c * (EPR / 8);
    *(uint4*)(sm + r * 128 + ((c ^ (r & 7)) << 4)) = *(const uint4*)src;
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.f;
  const unsigned sa = tc_smem_addr(sm), sb = sa + 64 * 128;
  tc_wgmma_fence_regs<N / 2>(acc);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int kk = 0; kk < EPR / KSTEP; ++kk) @MMA@(acc, tc_wgmma_desc(sa + 32 * kk), tc_wgmma_desc(sb + 32 * kk));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  tc_wgmma_fence_regs<N / 2>(acc);
  const int w = t >> 5, lane = t & 31, row = 16 * w + (lane >> 2), col = 2 * (lane & 3);
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    tc_store2(D + row * N + 8 * j + col, acc[4 * j], acc[4 * j + 1]);
    tc_store2(D + (row + 8) * N + 8 * j + col, acc[4 * j + 2], acc[4 * j + 3]);
  }
}
"""


TMA_KERNEL = r"""
#include <cuda.h>
__device__ __forceinline__ unsigned tc_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void tc_mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void tc_mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
@TMA_HELPERS@
__device__ void tma_probe_body(const CUtensorMap* m, unsigned char* out, int c0, int c1) {
  extern __shared__ __align__(16) unsigned char raw[];
  unsigned char* sm = (unsigned char*)(((unsigned long long)raw + 1023) & ~1023ull);
  const unsigned dst = tc_smem_addr(sm), bar = dst + ROWS * 128;
  if (threadIdx.x == 0) {
    tc_mbar_init(bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tc_mbar_arrive_expect_tx(bar, ROWS * 128);
    tc_tma_load_2d(dst, m, c0, c1, bar);
  }
  tc_mbar_wait(bar, 0);
  for (int i = threadIdx.x; i < ROWS * 128; i += blockDim.x) out[i] = sm[i];
}
extern "C" __global__ void tma_probe_param(const __grid_constant__ CUtensorMap m, unsigned char* out, int c0, int c1) {
  tma_probe_body(&m, out, c0, c1);
}
extern "C" __global__ void tma_probe_global(const CUtensorMap* m, unsigned char* out, int c0, int c1) {
  tma_probe_body(m, out, c0, c1);
}
"""
# param_pad: the parameter buffer with 112 bytes before the map: ptxas puts a 128-aligned first parameter at
# constant-bank offset 0x280 instead of 0x210 (cuobjdump of the session 23 mid run); were the buffer a launch
# passes (CU_LAUNCH_PARAM_BUFFER_POINTER) laid from 0x210, the map would land 112 bytes early
TMA_CASES = [("param", 64, 0, 0), ("param", 128, 64, 8), ("global", 128, 64, 8), ("param", 64, 96, 200),
             ("param_pad", 128, 64, 8)]


def tma_case(i: int, out: str | None) -> dict:
    """One bulk tensor copy of a (rows x 64 float16) box of a 256 x 160 array at (column c0, row c1)."""
    import numpy as np
    import torch
    from tilecraft.codegen.cuda_compile import compile_cuda
    from tilecraft.codegen.cuda_emulate_wgmma import tma_copy
    from tilecraft.codegen.cuda_wgmma import WGMMA_TMA_MAINLOOP
    from tilecraft.runtime.cuda_runtime import context, driver
    from tilecraft.runtime.cuda_tensor_map import TensorMapSpec, encode_tensor_map
    how, rows, c0, c1 = TMA_CASES[i]
    helpers = WGMMA_TMA_MAINLOOP.split("// acc (bn / 2 floats")[0]          # expect_tx and the 2-D copy
    src = TMA_KERNEL.replace("@TMA_HELPERS@", helpers).replace("ROWS", str(rows))
    cubin = compile_cuda(src, "sm_90a")
    context(0)
    mod = driver().module_from_buffer(cubin)
    rng = np.random.default_rng(i)
    a = rng.integers(1, 2**15, (256, 160)).astype(np.uint16)
    A = torch.from_numpy(a.view(np.float16)).cuda()
    words = encode_tensor_map(TensorMapSpec(0, "float16", (rows, 64)), A.data_ptr(), (256, 160))
    O = torch.full((rows * 128,), 0xAB, dtype=torch.uint8, device="cuda")
    smem = rows * 128 + 1024 + 16
    fn = mod.get_function(f"tma_probe_{how.removesuffix('_pad')}")
    fn.set_attribute(driver().function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
    if how.startswith("param"):
        pad = "112x" if how == "param_pad" else ""
        fn.prepare(pad + "Q" * 16 + "Pii")
        fn.prepared_call((1, 1, 1), (128, 1, 1), *words, O.data_ptr(), c0, c1, shared_size=smem)
    else:
        M = torch.tensor(np.array(words, np.uint64).view(np.int64), device="cuda")     # 128 bytes, 256-aligned
        fn.prepare("PPii")
        fn.prepared_call((1, 1, 1), (128, 1, 1), M.data_ptr(), O.data_ptr(), c0, c1, shared_size=smem)
    torch.cuda.synchronize()
    got = O.cpu().numpy()
    ring = np.zeros(rows * 128, np.uint8)
    tma_copy(ring, 0, a, c0, c1, rows, 64)
    ok = bool((got == ring).all())
    if not ok and out:
        np.savez(os.path.join(out, f"tma_{i}.npz"), got=got, want=ring)
    return dict(case=f"tma {how} box {rows}x64 at ({c0}, {c1})", ok=ok,
                wrong_bytes=int((got != ring).sum()))


def layout_case(dtype: str, n: int, out: str | None) -> dict:
    import numpy as np
    import torch
    from tilecraft.codegen.cuda_compile import compile_cuda
    from tilecraft.codegen.cuda_wgmma import wgmma_name, wgmma_prelude
    from tilecraft.runtime.cuda_runtime import context, driver
    ct = "half" if dtype == "float16" else "float"
    src = ("#include <cuda_fp16.h>\n" + wgmma_prelude({(dtype, n)})
           + LAYOUT_KERNEL.replace("@T@", ct).replace("@N@", str(n)).replace("@MMA@", wgmma_name(dtype, n)))
    cubin = compile_cuda(src, "sm_90a")
    context(0)
    fn = driver().module_from_buffer(cubin).get_function("wgmma_layout")
    epr = 128 // (2 if dtype == "float16" else 4)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (64, epr)).astype(dtype)
    b = rng.uniform(-1, 1, (n, epr)).astype(dtype)
    A, B = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    D = torch.full((64, n), float("nan"), device="cuda")
    fn(np.uintp(A.data_ptr()), np.uintp(B.data_ptr()), np.uintp(D.data_ptr()), block=(128, 1, 1), grid=(1, 1))
    torch.cuda.synchronize()
    got, want = D.cpu().numpy(), a.astype("float64") @ b.astype("float64").T
    err = float(np.abs(got - want).max() / np.abs(want).max())
    ok = err < 2e-2
    if not ok and out:
        np.savez(os.path.join(out, f"layout_{dtype}_{n}.npz"), got=got, want=want, a=a, b=b)
    return dict(case=f"layout {dtype} m64n{n}", ok=ok, max_rel_err=err, nan=int(np.isnan(got).sum()))


GEMMS = [("float16", "float32", (128, 256, 64), (128, 256), 4), ("float16", "float32", (128, 128, 128), (128, 128), 4),
         ("float16", "float32", (128, 128, 1024), (128, 128), 3), ("float16", "float16", (512, 512, 512), (128, 256), 4),
         ("float16", "float32", (256, 128, 256), (256, 128), 4), ("float16", "float32", (64, 64, 256), (64, 64), 3),
         ("float32", "float32", (128, 128, 256), (128, 128), 4),
         # lag 2 / 3 (copies in flight before a stage is handed over): 1 step, 2 steps, many
         ("float16", "float16", (256, 256, 1024), (128, 256), 4, 2),
         ("float16", "float32", (128, 128, 64), (128, 128), 5, 3),
         ("float16", "float32", (128, 128, 128), (128, 128), 5, 3),
         ("float32", "float32", (128, 256, 512), (128, 256), 4, 2),
         # lag 0 (copies arrive on the stage's mbarrier themselves: cp.async.mbarrier.arrive.noinc)
         ("float16", "float16", (256, 256, 1024), (128, 256), 4, 0),
         ("float16", "float32", (128, 128, 64), (128, 128), 3, 0),
         ("float16", "float32", (128, 128, 448), (64, 64), 3, 0),
         ("float32", "float32", (128, 256, 512), (128, 256), 4, 0),
         # TMA loads (one thread's bulk tensor copies complete the stage's mbarrier), with and without setmaxnreg
         ("float16", "float32", (128, 128, 64), (128, 128), 3, dict(load="tma")),
         ("float16", "float16", (256, 256, 1024), (128, 256), 4, dict(load="tma")),
         ("float16", "float16", (256, 256, 1024), (128, 256), 4, dict(load="tma", maxnreg=1)),
         ("float16", "float32", (256, 128, 512), (256, 128), 3, dict(load="tma", maxnreg=1)),
         ("float32", "float32", (128, 256, 512), (128, 256), 4, dict(load="tma", maxnreg=1)),
         # a persistent grid: 4 blocks of 3 tiles each (the ring's phases go on across a block's tiles)
         ("float16", "float16", (768, 512, 320), (128, 256), 4, dict(load="tma", persistent=4))]


def gemm_case(i: int, out: str | None) -> dict:
    import numpy as np
    import torch
    import tilecraft as tc
    from tilecraft.topi.tensorcore_wgmma import matmul_wgmma
    dtype, odt, (M, N, K), block, stages, *more = GEMMS[i]
    opts = (more[0] if isinstance(more[0], dict) else dict(lag=more[0])) if more else dict(lag=1)
    s, (A, B, C) = matmul_wgmma(M, N, K, dtype=dtype, out_dtype=odt, block=block, stages=stages, **opts)
    mod = tc.build(s, [A, B, C], target="cuda")
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, (M, K)).astype(dtype), rng.uniform(-1, 1, (N, K)).astype(dtype)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=getattr(torch, odt))
    mod(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c)
    torch.cuda.synchronize()
    got, want = c.float().cpu().numpy(), a.astype("float64") @ b.astype("float64").T
    err = float(np.abs(got - want).max() / np.abs(want).max())
    ok = err < 2e-2
    if not ok and out:
        np.savez(os.path.join(out, f"gemm_{i}.npz"), got=got, want=want)
    how = " ".join(f"{k} {v}" for k, v in opts.items())
    return dict(case=f"gemm {dtype}->{odt} {M}x{N}x{K} block {block} stages {stages} {how}", ok=ok, max_rel_err=err,
                nan=int(np.isnan(got).sum()))


def _child(cases, out):
    """Run ``cases`` in this process, one line per case: ``START case``, then ``RESULT {...}`` or
    ``ERROR {...}`` (after an error the CUDA context may be broken: the parent goes on in a new child)."""
    for c in cases:
        print("START " + c, flush=True)
        kind, *rest = c.split(":")
        try:
            r = (layout_case(rest[0], int(rest[1]), out) if kind == "layout" else
                 tma_case(int(rest[0]), out) if kind == "tma" else gemm_case(int(rest[0]), out))
        except Exception as e:                            # noqa: BLE001 (reported, the parent restarts)
            print("ERROR " + json.dumps(dict(case=c, error=f"{type(e).__name__}: {str(e)[-600:]}")), flush=True)
            return
        print("RESULT " + json.dumps(r), flush=True)


def _run_all(cases, timeout, out):
    """Cases in child processes, one child for as many as go through: a case that errors, crashes or
    runs past ``timeout`` seconds (a deadlocked mbarrier) is reported and the rest go on in a new child."""
    import queue
    import threading
    while cases:
        cmd = [sys.executable, "-u", __file__, "--cases", ",".join(cases)] + (["--out", out] if out else [])
        pr = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: queue.Queue = queue.Queue()

        def read(stream=pr.stdout, q=lines):               # bound now: an old child's reader keeps its own queue
            for x in stream:
                q.put(x)
            q.put(None)
        threading.Thread(target=read, daemon=True).start()
        last, running, tail = None, False, []
        while True:
            try:
                line = lines.get(timeout=timeout + (20 if last is None else 0))    # the first case imports torch
            except queue.Empty:
                pr.kill()
                print(json.dumps({"case": last, "timeout": timeout}), flush=True)
                break
            if line is None:                              # the child ended
                if running or last is None:               # crashed inside a case, or before the first
                    print(json.dumps({"case": last or cases[0], "exit": pr.wait(), "error": "".join(tail)[-800:]}),
                          flush=True)
                break
            if line.startswith("START "):
                last, running, tail = line[6:].strip(), True, []
            elif line.startswith(("RESULT ", "ERROR ")):
                print(line.split(" ", 1)[1].strip(), flush=True)
                running = False
            else:
                tail.append(line)
        pr.wait()
        if last is None:                                  # nothing started: the same would happen again
            return
        cases = cases[cases.index(last) + 1:]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None)
    p.add_argument("--cases", default=None, help=argparse.SUPPRESS)     # child: "layout:float16:64,gemm:3,..."
    p.add_argument("--timeout", type=float, default=20, help="seconds a case may take (a deadlock)")
    a = p.parse_args(argv)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    if a.cases:
        return _child(a.cases.split(","), a.out)
    cases = [f"tma:{i}" for i in range(len(TMA_CASES))]
    cases += [f"layout:{d}:{n}" for d in ("float16", "float32") for n in (64, 128, 256)]
    cases += [f"gemm:{i}" for i in range(len(GEMMS))]
    _run_all(cases, a.timeout, a.out)


if __name__ == "__main__":
    main()
