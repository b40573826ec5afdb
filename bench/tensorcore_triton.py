"""Triton's GEMM as a second reference beside cuBLAS in ``bench/cuda_tensorcore.py --triton``
(Triton compiles ``tl.dot`` to ``wgmma`` on sm_90): the textbook blocked kernel (grouped block
order) at a few fixed configurations, each reported.

    from tensorcore_triton import triton_gemm
    fn = triton_gemm(A, B, C)          # None where triton is not installed; else a no-argument launch
"""
from __future__ import annotations

# (BM, BN, BK, stages, warps) per operand dtype: Triton's tutorial configurations for large GEMMs on
# sm_90 (float32 operands run as tf32, tl.dot's default precision)
CONFIGS = {"float16": [(128, 256, 64, 3, 8), (128, 128, 64, 4, 4)],
           "bfloat16": [(128, 256, 64, 3, 8), (128, 128, 64, 4, 4)],
           "float32": [(128, 128, 32, 3, 4), (128, 256, 32, 3, 8)]}
_KERNEL = None


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit
        def gemm(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
                 BK: tl.constexpr, GROUP: tl.constexpr):
            pid = tl.program_id(0)
            nm, nn = tl.cdiv(M, BM), tl.cdiv(N, BN)
            group = pid // (GROUP * nn)
            first = group * GROUP
            size = min(nm - first, GROUP)
            pm = first + (pid % (GROUP * nn)) % size
            pn = (pid % (GROUP * nn)) // size
            rm = pm * BM + tl.arange(0, BM)
            rn = pn * BN + tl.arange(0, BN)
            rk = tl.arange(0, BK)
            pa = a + rm[:, None] * sam + rk[None, :] * sak
            pb = b + rk[:, None] * sbk + rn[None, :] * sbn
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for _ in range(0, K, BK):
                acc += tl.dot(tl.load(pa), tl.load(pb))
                pa += BK * sak
                pb += BK * sbk
            tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty))

        _KERNEL = gemm
    return _KERNEL


def triton_gemm(A, B, C, config=CONFIGS["float16"][0]):
    """A no-argument launch of ``C = A @ B`` (torch tensors on the GPU, sizes multiples of the
    tiles), or None without triton."""
    try:
        import triton
    except ImportError:
        return None
    bm, bn, bk, stages, warps = config
    M, K = A.shape
    N = B.shape[1]
    kern = _kernel()
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)

    def run():
        kern[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1),
                   BM=bm, BN=bn, BK=bk, GROUP=8, num_stages=stages, num_warps=warps)
    return run
