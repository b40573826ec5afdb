"""Tensor-core GEMMs (fp16, bf16 and tf32 with fp32 accumulation, int8 with int32): tilecraft's tensorized
schedules beside cuBLAS.

    python bench/cuda_tensorcore.py                       # 4096^3, every variant
    python bench/cuda_tensorcore.py --sizes 1024,4096 --variants mma_128x128,tf32_128x128_w64_k32_s3
    python bench/cuda_tensorcore.py --peak                # mma.sync's own rate, registers only
    python bench/cuda_tensorcore.py --triton              # Triton's GEMM too (tensorcore_triton.py)

The schedule is ``topi/tensorcore.py: matmul_tensorcore``: a block of warps, each computing a
tile of 16 x 16 tensor-core tiles; A and B staged in shared memory (padded rows, double
buffering through registers or a cp.async ring); the wmma implementation (nvcuda::wmma) or the
PTX one (ldmatrix + mma.sync); the ``wgmma_*`` variants are ``topi/tensorcore_wgmma.py: matmul_wgmma``
(sm_90a: a producer warpgroup, consumer warpgroups on wgmma, mbarriers). Each variant is checked first (output poisoned with NaN, fresh
random inputs, rel. error against a float64 product; int8 exactly), then timed with CUDA events
(median), beside cuBLAS timed in the same run on the same inputs: ``torch.matmul`` on float16
(fp16 C) and bfloat16 (bf16 C), on float32 with ``allow_tf32`` (tf32), ``torch._int_mm`` (int8, B column-major as
ours). Prints TFLOP/s, the ratio to cuBLAS, the share of the dense peak (H100 SXM datasheet:
989 fp16 and bf16, 495 tf32, 1979 int8 TOPS) and the build time; with ``--json FILE`` writes every row.
``--peak`` times a kernel that only issues independent ``mma.sync`` (no memory): the most any
mma.sync GEMM can reach on the GPU.
"""
from __future__ import annotations

import argparse
import json

from cuda_common import build_breakdown, device_line, rel_err, tc_time, torch_time

PEAK = {"float16": 989e12, "bfloat16": 989e12, "float32": 494.7e12, "int8": 1979e12}   # H100 SXM, dense (datasheet)
PEAK_FP16 = PEAK["float16"]

VARIANTS = {
    "wmma_64x64": dict(impl="wmma", block=(2, 2), warp=(2, 2), chunk=2),
    "wmma_128x128": dict(impl="wmma", block=(2, 4), warp=(4, 2), chunk=2),
    "mma_64x64": dict(impl="mma", block=(2, 2), warp=(2, 2), chunk=2),
    "mma_128x128": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=2),
    "mma_128x128_nt": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=2, layout_b="col_major"),
    "mma_128x128_k64_nodb": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=4, double_buffer=False),
    "mma_128x128_nodb": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=2, double_buffer=False),
    # warp tiles of 64 x 64 (4 x 4 tensor-core tiles: 8 ldmatrix per 16 mma.sync instead of 6 per 8)
    "mma_128x128_w64_nodb": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, double_buffer=False),
    "mma_128x128_w64_k64_nodb": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=4, double_buffer=False),
    "mma_128x128_w64": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2),
    "mma_128x256_w64_nodb": dict(impl="mma", block=(2, 4), warp=(4, 4), chunk=2, double_buffer=False),
    "mma_256x128_w64_nodb": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=2, double_buffer=False),
    # cp.async pipelines (Stage.pipeline): ring of `stages` shared buffers, k step 16 or 32
    "mma_128x128_w64_s3": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=1, stages=3),
    "mma_128x128_w64_s4": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=1, stages=4),
    "mma_128x128_w64_k32_s2": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, stages=2),
    "mma_128x128_s4": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=1, stages=4),
    "mma_128x256_w64_s3": dict(impl="mma", block=(2, 4), warp=(4, 4), chunk=1, stages=3),
    # k step 32 or 64 with 3-4 stages: more than 48 KiB, dynamic shared memory
    "mma_128x128_w64_k32_s3": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, stages=3),
    "mma_128x128_w64_k32_s4": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, stages=4),
    "mma_128x128_k32_s4": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=2, stages=4),
    "mma_128x128_k64_s3": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=4, stages=3),
    "mma_128x256_w64_k32_s3": dict(impl="mma", block=(2, 4), warp=(4, 4), chunk=2, stages=3),
    "mma_256x128_w64_k32_s3": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=2, stages=3),
    # all fragments of a step loaded before its first mma (ldmatrix overlapping mma.sync)
    "mma_128x128_k64_nodb_pf": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=4, double_buffer=False,
                                    prefetch=True),
    "mma_128x128_k64_s3_pf": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=4, stages=3, prefetch=True),
    "mma_128x128_k32_s4_pf": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=2, stages=4, prefetch=True),
    "mma_128x128_w64_k32_s3_pf": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, stages=3, prefetch=True),
    "mma_128x256_w64_k32_s3_pf": dict(impl="mma", block=(2, 4), warp=(4, 4), chunk=2, stages=3, prefetch=True),
    # run 6: launch bounds with min blocks per SM (ptxas double-buffers the fragments in registers),
    # float16 C (h), rasterized blocks (r = block rows per group)
    "mma_128x128_w64_k32_s3_mb2": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, stages=3, min_blocks=2),
    "mma_128x128_w64_k32_s3_mb2_h": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, stages=3, min_blocks=2,
                                         out_dtype="float16"),
    "mma_128x128_w64_k32_s4_mb2_h_r8": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, stages=4, min_blocks=2,
                                            out_dtype="float16", raster=8),
    "mma_128x128_w64_k64_s3_mb2_h": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=4, stages=3, min_blocks=2,
                                         out_dtype="float16"),
    "mma_128x128_k64_s3_mb2_h": dict(impl="mma", block=(2, 4), warp=(4, 2), chunk=4, stages=3, min_blocks=2,
                                     out_dtype="float16"),
    "mma_256x128_w64_k32_s3_mb1_h": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=2, stages=3, min_blocks=1,
                                         out_dtype="float16"),
    "mma_256x128_w64_k32_s4_mb1_h_r8": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=2, stages=4,
                                            min_blocks=1, out_dtype="float16", raster=8),
    "mma_128x256_w64_k32_s4_mb1_h_r8": dict(impl="mma", block=(2, 4), warp=(4, 4), chunk=2, stages=4,
                                            min_blocks=1, out_dtype="float16", raster=8),
    "mma_256x128_w64_k64_s3_mb1_h_r8": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=4, stages=3,
                                            min_blocks=1, out_dtype="float16", raster=8),
    # tf32 (float32 A, B; B stored (N, K)) and int8 (int32 C, B stored (N, K))
    "tf32_128x128_w64_k32_s3": dict(impl="mma", dtype="float32", layout_b="col_major", block=(2, 2), warp=(4, 4),
                                    chunk=4, stages=3, min_blocks=2),
    "tf32_256x128_w64_k32_s3_r8": dict(impl="mma", dtype="float32", layout_b="col_major", block=(4, 2),
                                       warp=(4, 4), chunk=4, stages=3, min_blocks=1, raster=8),
    "int8_128x128_w64_k64_s3": dict(impl="mma", dtype="int8", layout_b="col_major", block=(2, 2), warp=(4, 4),
                                    chunk=2, stages=3, min_blocks=2),
    "int8_256x128_w64_k64_s4_r8": dict(impl="mma", dtype="int8", layout_b="col_major", block=(4, 2), warp=(4, 4),
                                       chunk=2, stages=4, min_blocks=1, raster=8),
    # sm_90a wgmma (topi/tensorcore_wgmma.py): a producer warpgroup (cp.async into 128-byte swizzled
    # stages, mbarriers) and bm / 64 consumer warpgroups (wgmma.m64nBNk16); B stored (N, K)
    "wgmma_128x256_s4_h_r8": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, raster=8,
                                  out_dtype="float16"),
    "wgmma_128x256_s3_h": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=3, out_dtype="float16"),
    "wgmma_128x128_s5_h_r8": dict(impl="wgmma", layout_b="col_major", block=(128, 128), stages=5, raster=8,
                                  out_dtype="float16"),
    "wgmma_256x128_s4_h_r8": dict(impl="wgmma", layout_b="col_major", block=(256, 128), stages=4, raster=8,
                                  out_dtype="float16"),
    # lag: steps of copies the producer keeps in flight before handing a stage over (1 to stages - 2)
    "wgmma_128x256_s4_l2_h_r8": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, lag=2, raster=8,
                                     out_dtype="float16"),
    "wgmma_256x128_s4_l2_h_r8": dict(impl="wgmma", layout_b="col_major", block=(256, 128), stages=4, lag=2, raster=8,
                                     out_dtype="float16"),
    "wgmma_128x128_s6_l3_h_r8": dict(impl="wgmma", layout_b="col_major", block=(128, 128), stages=6, lag=3, raster=8,
                                     out_dtype="float16"),
    "wgmma_tf32_128x256_s4_l2_r8": dict(impl="wgmma", dtype="float32", layout_b="col_major", block=(128, 256),
                                        stages=4, lag=2, raster=8),
    # small problems (1024^3: 128 x 256 blocks give 32 blocks for 132 SMs): one consumer warpgroup a block
    "wgmma_64x128_s6_l3_h": dict(impl="wgmma", layout_b="col_major", block=(64, 128), stages=6, lag=3,
                                 out_dtype="float16"),
    "wgmma_64x256_s4_l2_h": dict(impl="wgmma", layout_b="col_major", block=(64, 256), stages=4, lag=2,
                                 out_dtype="float16"),
    "wgmma_tf32_128x256_s4_r8": dict(impl="wgmma", dtype="float32", layout_b="col_major", block=(128, 256), stages=4,
                                     raster=8),
    "wgmma_tf32_128x128_s5_r8": dict(impl="wgmma", dtype="float32", layout_b="col_major", block=(128, 128), stages=5,
                                     raster=8),
    # lag 0: the producer never waits for its copies (cp.async.mbarrier.arrive.noinc: each copy arrives on its
    # stage's mbarrier when it lands)
    "wgmma_128x256_s4_l0_h_r8": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, lag=0, raster=8,
                                     out_dtype="float16"),
    "wgmma_128x256_s3_l0_h_r8": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=3, lag=0, raster=8,
                                     out_dtype="float16"),
    "wgmma_128x256_s4_l0_h_r16": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, lag=0, raster=16,
                                      out_dtype="float16"),
    "wgmma_256x128_s4_l0_h_r8": dict(impl="wgmma", layout_b="col_major", block=(256, 128), stages=4, lag=0, raster=8,
                                     out_dtype="float16"),
    "wgmma_64x128_s6_l0_h": dict(impl="wgmma", layout_b="col_major", block=(64, 128), stages=6, lag=0,
                                 out_dtype="float16"),
    "wgmma_tf32_128x256_s4_l0_r8": dict(impl="wgmma", dtype="float32", layout_b="col_major", block=(128, 256),
                                        stages=4, lag=0, raster=8),
    # bf16 (C bf16, as cuBLAS's): wgmma m64nNk16 .bf16 and, for comparison, the mma.sync path's best fp16 shape
    "wgmma_bf16_128x256_s4_b_r8": dict(impl="wgmma", dtype="bfloat16", layout_b="col_major", block=(128, 256),
                                       stages=4, raster=8, out_dtype="bfloat16"),
    "wgmma_bf16_128x256_s4_l0_b_r8": dict(impl="wgmma", dtype="bfloat16", layout_b="col_major", block=(128, 256),
                                          stages=4, lag=0, raster=8, out_dtype="bfloat16"),
    "bf16_mma_256x128_w64_k64_s3_mb1_r8": dict(impl="mma", dtype="bfloat16", block=(4, 2), warp=(4, 4), chunk=4,
                                               stages=3, min_blocks=1, raster=8, out_dtype="bfloat16"),
    # TMA loads (load="tma": one producer thread's cp.async.bulk.tensor per operand and step through tensor
    # maps, completing the stage's mbarrier); _r: setmaxnreg (producer 40 registers, consumers the rest)
    "wgmma_128x256_s4_tma_h_r8": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, raster=8,
                                      load="tma", out_dtype="float16"),
    "wgmma_128x256_s4_tma_r_h_r8": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, raster=8,
                                        load="tma", maxnreg=1, out_dtype="float16"),
    "wgmma_128x256_s3_tma_r_h_r8": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=3, raster=8,
                                        load="tma", maxnreg=1, out_dtype="float16"),
    "wgmma_256x128_s4_tma_r_h_r8": dict(impl="wgmma", layout_b="col_major", block=(256, 128), stages=4, raster=8,
                                        load="tma", maxnreg=1, out_dtype="float16"),
    # persistent grids (_p: up to 132 blocks, one an SM, each its tiles in turn; the producer fills the next
    # tile's stages while the consumers store: no setmaxnreg, whose producer exits after its first tile)
    "wgmma_128x256_s4_tma_p_h_r8": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, raster=8,
                                        load="tma", persistent=132, out_dtype="float16"),
    "wgmma_256x128_s4_tma_p_h_r8": dict(impl="wgmma", layout_b="col_major", block=(256, 128), stages=4, raster=8,
                                        load="tma", persistent=132, out_dtype="float16"),
    "wgmma_128x128_s6_tma_p_h_r8": dict(impl="wgmma", layout_b="col_major", block=(128, 128), stages=6, raster=8,
                                        load="tma", persistent=132, out_dtype="float16"),
    "wgmma_128x128_s6_tma_h_r8": dict(impl="wgmma", layout_b="col_major", block=(128, 128), stages=6, raster=8,
                                      load="tma", out_dtype="float16"),
    "wgmma_64x128_s6_tma_h": dict(impl="wgmma", layout_b="col_major", block=(64, 128), stages=6, load="tma",
                                  out_dtype="float16"),
    "wgmma_tf32_128x256_s4_tma_r_r8": dict(impl="wgmma", dtype="float32", layout_b="col_major", block=(128, 256),
                                           stages=4, raster=8, load="tma", maxnreg=1),
    "wgmma_bf16_128x256_s4_tma_r_b_r8": dict(impl="wgmma", dtype="bfloat16", layout_b="col_major", block=(128, 256),
                                             stages=4, raster=8, load="tma", maxnreg=1, out_dtype="bfloat16"),
    # session 23: fragment_prefetch (fp): the next step's first k slice loaded right after the barrier that lands
    # it, before this step's last slice's mma.sync (register double buffering across the steps' barriers)
    "mma_256x128_w64_k64_s3_mb1_h_r8_fp": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=4, stages=3,
                                               min_blocks=1, out_dtype="float16", raster=8, fragment_prefetch=True),
    "mma_256x128_w64_k64_s3_mb1_h_r8_pairstore16": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=4, stages=3,
                                                        min_blocks=1, out_dtype="float16", raster=8, diag="pairstore16"),
    "mma_256x128_w64_k64_s4_mb1_h_r8_fp": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=4, stages=4,
                                               min_blocks=1, out_dtype="float16", raster=8, fragment_prefetch=True),
    "mma_256x128_w64_k64_s4_mb1_h_r16_fp": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=4, stages=4,
                                                min_blocks=1, out_dtype="float16", raster=16, fragment_prefetch=True),
    "mma_256x128_w64_k128_s2_mb1_h_r8_fp": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=8, stages=2,
                                                min_blocks=1, out_dtype="float16", raster=8, fragment_prefetch=True),
    # sp: spread_copies, the step's cp.async copies dealt out before its k slices (one commit before the wait)
    "mma_256x128_w64_k64_s3_mb1_h_r8_fp_sp": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=4, stages=3,
                                                  min_blocks=1, out_dtype="float16", raster=8, fragment_prefetch=True,
                                                  spread_copies=True),
    "mma_256x128_w64_k64_s4_mb1_h_r8_fp_sp": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=4, stages=4,
                                                  min_blocks=1, out_dtype="float16", raster=8, fragment_prefetch=True,
                                                  spread_copies=True),
    # 16 warps of 64 x 32 (or 32 x 64) warp tiles: 4 warps per scheduler at <= 128 registers (no spills in ptxas -v)
    "mma_256x128_w64x32_k32_s4_mb1_h_r8": dict(impl="mma", block=(4, 4), warp=(4, 2), chunk=2, stages=4,
                                               min_blocks=1, out_dtype="float16", raster=8),
    "mma_256x128_w64x32_k32_s4_mb1_h_r8_fp": dict(impl="mma", block=(4, 4), warp=(4, 2), chunk=2, stages=4,
                                                  min_blocks=1, out_dtype="float16", raster=8, fragment_prefetch=True),
    "mma_256x128_w64x32_k64_s3_mb1_h_r8_fp": dict(impl="mma", block=(4, 4), warp=(4, 2), chunk=4, stages=3,
                                                  min_blocks=1, out_dtype="float16", raster=8, fragment_prefetch=True),
    "mma_128x256_w32x64_k32_s4_mb1_h_r8_fp": dict(impl="mma", block=(4, 4), warp=(2, 4), chunk=2, stages=4,
                                                  min_blocks=1, out_dtype="float16", raster=8, fragment_prefetch=True),
    "mma_256x128_w64_k32_s4_mb1_h_r8_fp": dict(impl="mma", block=(4, 2), warp=(4, 4), chunk=2, stages=4,
                                               min_blocks=1, out_dtype="float16", raster=8, fragment_prefetch=True),
    "mma_128x256_w64_k32_s4_mb1_h_r8_fp": dict(impl="mma", block=(2, 4), warp=(4, 4), chunk=2, stages=4,
                                               min_blocks=1, out_dtype="float16", raster=8, fragment_prefetch=True),
    "mma_128x128_w64_k64_s3_mb2_h_fp": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=4, stages=3, min_blocks=2,
                                            out_dtype="float16", fragment_prefetch=True),
    "mma_128x128_w64_k32_s4_mb2_h_r8_fp": dict(impl="mma", block=(2, 2), warp=(4, 4), chunk=2, stages=4,
                                               min_blocks=2, out_dtype="float16", raster=8, fragment_prefetch=True),
    "bf16_mma_256x128_w64_k64_s3_mb1_r8_fp": dict(impl="mma", dtype="bfloat16", block=(4, 2), warp=(4, 4), chunk=4,
                                                  stages=3, min_blocks=1, raster=8, out_dtype="bfloat16",
                                                  fragment_prefetch=True),
    "tf32_128x128_w64_k32_s3_fp": dict(impl="mma", dtype="float32", layout_b="col_major", block=(2, 2), warp=(4, 4),
                                       chunk=4, stages=3, min_blocks=2, fragment_prefetch=True),
    "int8_128x128_w64_k64_s3_fp": dict(impl="mma", dtype="int8", layout_b="col_major", block=(2, 2), warp=(4, 4),
                                       chunk=2, stages=3, min_blocks=2, fragment_prefetch=True),
    # diagnostics (not checked; `diag` names what is taken out of the kernel, by a patch of its CUDA C):
    # nostore: the epilogue's stores (the difference to the full kernel is the epilogue's share);
    # nomma: the consumers' wgmma (the producer's copy rate, the protocol kept); nocopy: the producer's
    # cp.async (the consumers' wgmma rate on whatever the ring holds); l2pf: the copies with an L2 prefetch
    # hint of 256 bytes (the row's next k step), checked as usual since C is still right
    "wgmma_128x256_s4_h_r8_nostore": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, raster=8,
                                          out_dtype="float16", diag="nostore"),
    "wgmma_128x256_s4_h_r8_nomma": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, raster=8,
                                        out_dtype="float16", diag="nomma"),
    "wgmma_128x256_s4_h_r8_nocopy": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, raster=8,
                                         out_dtype="float16", diag="nocopy"),
    "wgmma_128x256_s4_h_r8_l2pf": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, raster=8,
                                       out_dtype="float16", diag="l2pf"),
    "wgmma_128x256_s4_l0_h_r8_nostore": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, lag=0,
                                             raster=8, out_dtype="float16", diag="nostore"),
    "wgmma_128x256_s4_h_r8_pairstore": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, raster=8,
                                            out_dtype="float16", diag="pairstore"),
    "wgmma_128x256_s4_h_r8_warparrive": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4,
                                             raster=8, out_dtype="float16", diag="warparrive"),
    "wgmma_128x256_s4_h_r8_unroll": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, raster=8,
                                         out_dtype="float16", diag="unroll"),
    "wgmma_128x256_s4_tma_r_h_r8_nomma": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4,
                                              raster=8, load="tma", maxnreg=1, out_dtype="float16", diag="nomma"),
    "wgmma_128x256_s4_tma_r_h_r8_nostore": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4,
                                                raster=8, load="tma", maxnreg=1, out_dtype="float16", diag="nostore"),
    "wgmma_128x256_s4_l0_h_r8_nomma": dict(impl="wgmma", layout_b="col_major", block=(128, 256), stages=4, lag=0,
                                           raster=8, out_dtype="float16", diag="nomma"),
}

# diag -> (text of codegen/cuda_wgmma.py's prelude, its replacement, count); a test on the accumulator or
# an argument that never holds keeps what it guards compiled and the rest of the kernel live
DIAG_PATCHES = {
    "nostore": ("  if (wg == 0) return;\n", "  if (wg == 0 || acc[0] != -1234.5f) return;\n", 1),
    "nomma": ("++kk) MMA(acc,", "++kk) if (acc[0] == -1234.5f) MMA(acc,", 1),
    "nocopy": ('asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n"',
               'if (lda == -1) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n"', 2),
    "l2pf": ("cp.async.cg.shared.global [%0], [%1], 16;", "cp.async.cg.shared.global.L2::256B [%0], [%1], 16;", 2),
    # the epilogue's stores as the accumulator pairs are held (tc_wgmma_store's VEC 0: 4 bytes a lane,
    # before the 16-byte stores became the default)
    "pairstore": ("template <int BM, int BN, typename O, int VEC = 1>", "template <int BM, int BN, typename O, int VEC = 0>",
                  1),
    # one arrival per consumer warp on `empty` (lane 0, after the warp's wgmma.wait_group) instead of one per thread
    "warparrive": ("tc_mbar_init(empty + 8 * s, 128 * (BM / 64));", "tc_mbar_init(empty + 8 * s, 4 * (BM / 64));", 1),
    # the producer's copy loops unrolled fully (24 cp.async per thread and step at 128 x 256)
    "unroll": ("#pragma unroll 4\n      for (int q = t;", "#pragma unroll\n      for (int q = t;", 2),
}
WARP_ARRIVE = ("if (kt > 0) tc_mbar_arrive(empty", "if (kt > 0 && (tid & 31) == 0) tc_mbar_arrive(empty")


# mma.sync diagnostics: pairstore16 stores a 16-bit C as the pairs are held (session 22's epilogue), not 16 bytes a lane
MMA_DIAG_PATCHES = {"pairstore16": ("if (((size_t)out & 15) != 0 ||", "if (true ||", 1)}


def _patched(diag):
    """A context in which the wgmma kernels are generated with ``DIAG_PATCHES[diag]`` applied."""
    import contextlib
    from tilecraft.codegen import cuda_wgmma as W

    from tilecraft.codegen import cuda as R

    @contextlib.contextmanager
    def ctx():
        old, mma_old = W.WGMMA_PRELUDE, R.MMA_PRELUDE
        text = old
        for d in (diag or "").split("+"):
            if d in MMA_DIAG_PATCHES:            # the mma.sync helpers (codegen/cuda.py's copy of the prelude)
                a, b, n = MMA_DIAG_PATCHES[d]
                assert R.MMA_PRELUDE.count(a) == n, (d, a)
                R.MMA_PRELUDE = R.MMA_PRELUDE.replace(a, b)
                continue
            if not d:
                continue
            for a, b, n in [DIAG_PATCHES[d]] + ([WARP_ARRIVE + (1,)] if d == "warparrive" else []):
                assert text.count(a) == n, (d, a, text.count(a))
                text = text.replace(a, b)
        W.WGMMA_PRELUDE = text
        try:
            yield
        finally:
            W.WGMMA_PRELUDE, R.MMA_PRELUDE = old, mma_old
    return ctx()


def _inputs(torch, dtype, n):
    """A (n, n); B (n, n) and its (N, K) copy; the float64 product; cuBLAS's call on them."""
    if dtype == "int8":
        A = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8)
        Bt = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8)       # (N, K)
        B = Bt.t().contiguous()
        return A, B, Bt, A.double() @ Bt.double().t(), lambda: torch._int_mm(A, Bt.t())
    A = torch.randn(n, n, device="cuda", dtype=getattr(torch, dtype))
    B = torch.randn(n, n, device="cuda", dtype=getattr(torch, dtype))
    return A, B, B.t().contiguous(), A.double() @ B.double(), lambda: torch.matmul(A, B)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="4096")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--json", default=None)
    p.add_argument("--peak", action="store_true", help="time mma.sync alone (registers only) and stop")
    p.add_argument("--triton", action="store_true", help="also time Triton's GEMM (tensorcore_triton.py), if installed")
    a = p.parse_args(argv)
    if a.peak:
        return mma_peak()
    import torch
    from tilecraft.topi.tensorcore import matmul_tensorcore
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_tf32 = True          # cuBLAS's tf32 GEMM for the float32 variants
    rows = []
    names = a.variants.split(",")
    print(f"tensor-core GEMMs on {device_line()}")
    for n in (int(x) for x in a.sizes.split(",")):
        flops = 2.0 * n * n * n
        for dtype in PEAK:
            group = [m for m in names if VARIANTS[m].get("dtype", "float16") == dtype]
            if not group:
                continue
            A, B, Bt, ref, cublas = _inputs(torch, dtype, n)
            t_ref = torch_time(cublas, repeat=a.repeat, number=10)
            print(f"{n}^3 {dtype}: cuBLAS {flops / t_ref / 1e12:.1f} TFLOP/s ({t_ref * 1e3:.3f} ms), "
                  f"{flops / t_ref / PEAK[dtype]:.0%} of peak")
            for name in group:
                kw = dict(VARIANTS[name])
                lay = kw.pop("layout_b", "row_major")
                diag = kw.pop("diag", None)
                try:
                    with _patched(diag):
                        build, mod = build_breakdown(lambda: _make(matmul_tensorcore, n, lay, kw), runs=1)
                except Exception as e:                    # a variant that does not fit this size
                    print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                    continue
                C = _poisoned(torch, n, mod, kw)
                Bx = B if lay == "row_major" else Bt
                try:
                    mod(A, Bx, C)
                    torch.cuda.synchronize()
                    err = float((C.long() != ref.long()).sum()) if dtype == "int8" else rel_err(C, ref)
                    if {"nostore", "nomma", "nocopy"} & set((diag or "").split("+")):
                        err = float("nan")                # C is not written or not right: a timing diagnostic
                    t = tc_time(mod, (A, Bx, C), repeat=a.repeat, number=10)
                except Exception as e:                    # a launch the GPU refuses (the log says which)
                    print(f"  {name}: {type(e).__name__} at run time: {str(e).splitlines()[0][:200] if str(e) else ''}")
                    continue
                row = dict(size=n, variant=name, dtype=dtype, tflops=flops / t / 1e12, ratio=t_ref / t,
                           peak=flops / t / PEAK[dtype], rel_err=err, build_s=build["total"], nvcc_s=build["nvcc"],
                           cublas_tflops=flops / t_ref / 1e12)
                rows.append(row)
                what = f"{int(err)} wrong" if dtype == "int8" else f"rel.err {err:.1e}"
                print(f"  {name:34s} {row['tflops']:6.1f} TFLOP/s  {row['ratio']:6.1%} of cuBLAS  "
                      f"{row['peak']:5.1%} of peak  {what}  build {build['total'] * 1e3:.0f} ms "
                      f"(nvcc {build['nvcc'] * 1e3:.0f})")
            if a.triton and dtype != "int8":
                try:                                      # after ours: a Triton failure costs nothing else
                    rows += _triton_rows(torch, A, Bt.t() if dtype == "float32" else B, ref, n, dtype, flops, t_ref,
                                        a.repeat)
                except Exception as e:
                    print(f"  triton: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


def _triton_rows(torch, A, B, ref, n, dtype, flops, t_ref, repeat):
    """Triton's GEMM (``tensorcore_triton.py``) on the same inputs, each fixed configuration checked on a
    poisoned C, then timed; C in A's dtype. For float32, B is passed as the (K, N) view of the (N, K)
    copy (k contiguous): tf32 wgmma reads only K-major operands, and with B's rows N-contiguous Triton
    ran at 81-88 TFLOP/s on the H100 (0.2x cuBLAS)."""
    from tensorcore_triton import CONFIGS, triton_gemm
    rows = []
    for cfg in CONFIGS[dtype]:
        C = torch.full((n, n), float("nan"), device="cuda", dtype=A.dtype)
        try:
            fn = triton_gemm(A, B, C, cfg)
            if fn is None:
                print("  triton: not installed")
                return rows
            fn()
            torch.cuda.synchronize()
        except Exception as e:                            # a configuration this GPU/Triton refuses
            print(f"  triton {cfg}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
            continue
        err = rel_err(C, ref)
        t = torch_time(fn, repeat=repeat, number=10)
        rows.append(dict(size=n, variant=f"triton_{cfg[0]}x{cfg[1]}x{cfg[2]}_s{cfg[3]}_w{cfg[4]}", dtype=dtype,
                         tflops=flops / t / 1e12, ratio=t_ref / t, peak=flops / t / PEAK[dtype], rel_err=err,
                         cublas_tflops=flops / t_ref / 1e12))
        print(f"  {rows[-1]['variant']:34s} {flops / t / 1e12:6.1f} TFLOP/s  {t_ref / t:6.1%} of cuBLAS  "
              f"{flops / t / PEAK[dtype]:5.1%} of peak  rel.err {err:.1e}")
    return rows


def _poisoned(torch, n, mod, kw):
    out = kw.get("out_dtype") or {"float16": "float32", "float32": "float32", "int8": "int32"}[kw.get("dtype",
                                                                                                       "float16")]
    if out == "int32":
        return torch.full((n, n), 0x5A5A5A5A, device="cuda", dtype=torch.int32)
    return torch.full((n, n), float("nan"), device="cuda", dtype=getattr(torch, out))


def _make(fn, n, lay, kw):
    if kw.get("impl") == "wgmma":
        from tilecraft.topi.tensorcore_wgmma import matmul_wgmma
        s, (A, B, C) = matmul_wgmma(n, n, n, **{k: v for k, v in kw.items() if k != "impl"})
        return s, [A, B, C]
    s, (A, B, C) = fn(n, n, n, layout_b=lay, **kw)
    return s, [A, B, C]


PEAK_KERNEL = r"""
extern "C" __global__ void __launch_bounds__(128) mma_peak(float* out, int iters) {
  // ACC independent m16n8k16 accumulators per warp, operands in registers: the tensor pipe's rate
  unsigned a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = 0x3c003c00u ^ (threadIdx.x * 2654435761u & 0x00ff00ffu);
  for (int i = 0; i < 2; ++i) b[i] = 0x3c003c00u ^ (threadIdx.x * 40503u & 0x00ff00ffu);
  float d[ACC][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < ACC; ++j)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                   "{%8, %9}, {%0, %1, %2, %3};\n"
                   : "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  float s = 0.f;
  for (int j = 0; j < ACC; ++j) s += d[j][0] + d[j][1] + d[j][2] + d[j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""


def mma_peak():
    """TFLOP/s of mma.sync m16n8k16 (f16 -> f32) alone: 4 warps a block, 2-8 blocks per SM, 4-16
    independent accumulators per warp (cupy compiles the kernel)."""
    import cupy
    import torch
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"mma.sync m16n8k16 f16->f32 alone on {device_line()}")
    for acc in (4, 8, 16):
        k = cupy.RawKernel(PEAK_KERNEL.replace("ACC", str(acc)), "mma_peak", options=("-arch=sm_90",))
        for blocks_per_sm in (2, 4, 8):
            grid, iters = sms * blocks_per_sm, 4096
            out = cupy.zeros(grid * 128, cupy.float32)
            k((grid,), (128,), (out, cupy.int32(iters)))
            cupy.cuda.Device().synchronize()
            s, e = cupy.cuda.Event(), cupy.cuda.Event()
            s.record()
            for _ in range(5):
                k((grid,), (128,), (out, cupy.int32(iters)))
            e.record()
            e.synchronize()
            t = cupy.cuda.get_elapsed_time(s, e) / 1e3 / 5
            flops = grid * 4 * iters * acc * 2 * 16 * 8 * 16
            print(f"  {acc:2d} accumulators/warp, {blocks_per_sm * 4:2d} warps/SM: {flops / t / 1e12:6.1f} TFLOP/s "
                  f"({flops / t / PEAK_FP16:.0%} of the 989 TFLOP/s dense peak)")


if __name__ == "__main__":
    main()
