"""Launch tensor-core GEMM variants once each, for a profiler (Nsight Compute) to read:

    ncu --clock-control none -k default_function_kernel --section SpeedOfLight --section WarpStateStats \\
        python bench/tensorcore_profile.py --size 4096 --variants mma_128x128_k64_nodb

The variants are those of ``cuda_tensorcore.py``; each is built, run once, and checked against
a float64 product (so a profile is of a kernel that computes the right thing; the diagnostic
variants, ``diag``, are not checked). ``--cubin DIR`` also writes each variant's cubin there (for
``cuobjdump -sass`` / ``-res-usage``).
"""
from __future__ import annotations

import argparse

from cuda_common import rel_err
from cuda_tensorcore import VARIANTS, _make, _patched


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--variants", default="mma_128x128_k64_nodb")
    p.add_argument("--cubin", default=None, help="a folder to write each variant's cubin to")
    a = p.parse_args(argv)
    import torch
    import tilecraft as tc
    from tilecraft.topi.tensorcore import matmul_tensorcore
    n = a.size
    A = torch.randn(n, n, device="cuda").half()
    B = torch.randn(n, n, device="cuda").half()
    ref = A.double() @ B.double()
    for name in a.variants.split(","):
        kw = dict(VARIANTS[name])
        lay = kw.pop("layout_b", "row_major")
        diag = kw.pop("diag", None)
        with _patched(diag):
            s, args = _make(matmul_tensorcore, n, lay, kw)
            mod = tc.build(s, args, target="cuda")
        if a.cubin:
            import os
            os.makedirs(a.cubin, exist_ok=True)
            with open(os.path.join(a.cubin, name + ".cubin"), "wb") as f:
                f.write(mod.cubin)
        C = torch.full((n, n), float("nan"), device="cuda",
                       dtype=torch.float16 if kw.get("out_dtype") == "float16" else torch.float32)
        mod(A, B if lay == "row_major" else B.t().contiguous(), C)
        torch.cuda.synchronize()
        print(f"{name}: rel.err {rel_err(C, ref):.1e}" + (f" (diagnostic {diag}: not checked)" if diag else ""))


if __name__ == "__main__":
    main()
