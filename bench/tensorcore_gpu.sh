#!/bin/bash
# One device run for the tensor-core path (tests with the `cuda` marker, the wgmma diagnostics,
# mma.sync's own rate, the GEMM bench beside cuBLAS and Triton, then batch_matmul at attention shapes and dense + bias + GELU at BERT's), logs under
# $OUT (default bench/results/tc_run): from the repo root on a GPU machine,
#   bash bench/tensorcore_gpu.sh
# TC_SIZES / TC_VARIANTS override the GEMM bench's sizes and variants (TC_VARIANTS=all: every one);
# TC_PARTS picks parts (default tests,gemm,nn; e.g. TC_PARTS=nn for batch_matmul + dense alone);
# TC_NN_TUNE=N also tunes Q@K^T, P@V (seq 512) and the BERT dense + GELU for N trials each.
set -o pipefail
OUT=$(realpath -m "${OUT:-bench/results/tc_run}")     # absolute: the bench runs in bench/
PARTS=${TC_PARTS:-tests,gemm,nn}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
if [[ $PARTS == *tests* ]]; then
python3 -m pytest -q -m cuda -rs tests/cuda/test_tensorcore.py tests/cuda/test_tensorcore_errors.py \
    tests/cuda/test_tensorcore_template.py tests/cuda/test_tensorcore_nn.py tests/cuda/test_async_copy.py \
    tests/cuda/test_tensorcore_wgmma.py tests/cuda/test_tensorcore_wgmma_bf16.py tests/cuda/test_tensorcore_wgmma_fallback.py \
    tests/cuda/test_tensorcore_fragment_prefetch.py tests/cuda/test_tensorcore_bf16.py 2>&1 \
    | tee "$OUT/pytest_tensorcore.log"
# the TMA path in a process of its own (a faulting kernel takes its CUDA context down with it)
timeout 120 python3 -m pytest -q -m cuda -rs tests/cuda/test_tensorcore_wgmma_tma.py 2>&1 | tee "$OUT/pytest_tma.log"
fi
# mma.sync's best (reference), the wgmma variants (cp.async; 64 x 128 for 1024^3), bf16, tf32, int8, and
# diagnostics (no store; no wgmma: the copy rate); then, in a process of their own (a faulting kernel takes the
# CUDA context down), the TMA variants (_tma; _r setmaxnreg; _p a persistent grid) with their diagnostics
BEST=mma_256x128_w64_k64_s3_mb1_h_r8,mma_128x128_w64_k64_s3_mb2_h,tf32_128x128_w64_k32_s3,int8_128x128_w64_k64_s3
BEST=$BEST,wgmma_128x256_s4_h_r8,wgmma_128x256_s4_l0_h_r8,wgmma_128x128_s6_l3_h_r8,wgmma_64x128_s6_l3_h
BEST=$BEST,wgmma_tf32_128x256_s4_r8,wgmma_bf16_128x256_s4_b_r8,bf16_mma_256x128_w64_k64_s3_mb1_r8
BEST=$BEST,wgmma_128x256_s4_h_r8_nostore,wgmma_128x256_s4_h_r8_nomma
# mma.sync with fragment_prefetch (fp: the next step's first k slice loaded across the barrier), 16-byte fp16 epilogue
BEST=$BEST,mma_128x256_w64_k32_s4_mb1_h_r8_fp,mma_256x128_w64_k64_s3_mb1_h_r8_fp,mma_256x128_w64_k64_s4_mb1_h_r8_fp_sp
BEST=$BEST,mma_256x128_w64_k64_s3_mb1_h_r8_pairstore16
BEST=$BEST,bf16_mma_256x128_w64_k64_s3_mb1_r8_fp,tf32_128x128_w64_k32_s3_fp,int8_128x128_w64_k64_s3_fp
TMA=wgmma_128x256_s4_h_r8,wgmma_128x256_s4_tma_h_r8,wgmma_128x256_s4_tma_r_h_r8,wgmma_256x128_s4_tma_r_h_r8
TMA=$TMA,wgmma_128x256_s4_tma_p_h_r8,wgmma_128x128_s6_tma_p_h_r8,wgmma_64x128_s6_tma_h,wgmma_tf32_128x256_s4_tma_r_r8
TMA=$TMA,wgmma_bf16_128x256_s4_tma_r_b_r8,wgmma_128x256_s4_tma_r_h_r8_nostore,wgmma_128x256_s4_tma_r_h_r8_nomma
VARIANTS=${TC_VARIANTS:-$BEST}
cd bench
if [[ $PARTS == *gemm* ]]; then
timeout 90 python3 tensorcore_wgmma_diag.py --timeout 15 --out "$OUT/wgmma_diag" 2>&1 | tee "$OUT/wgmma_diag.log"
python3 cuda_tensorcore.py --peak 2>&1 | tee "$OUT/tensorcore_peak.log"
python3 cuda_tensorcore.py --triton --sizes "${TC_SIZES:-1024,4096,8192}" ${VARIANTS:+$([ "$VARIANTS" = all ] || echo --variants $VARIANTS)} \
    --json "$OUT/tensorcore.json" 2>&1 | tee "$OUT/tensorcore_bench.log"
[ -z "$TC_VARIANTS" ] && timeout 100 python3 cuda_tensorcore.py --sizes "${TC_SIZES:-4096,8192}" --variants $TMA \
    --json "$OUT/tensorcore_tma.json" 2>&1 | tee "$OUT/tensorcore_tma_bench.log"
fi
if [[ $PARTS == *nn* ]]; then
python3 cuda_tensorcore_nn.py --json "$OUT/tensorcore_nn.json" 2>&1 | tee "$OUT/tensorcore_nn_bench.log"
fi
if [[ $PARTS == *nn* && -n $TC_NN_TUNE ]]; then
cd .. && for t in "batch_matmul_tensorcore 12 512 512 64 float16 float16 col_major" \
                 "batch_matmul_tensorcore 12 512 64 512 float16 float16 row_major" \
                 "dense_tensorcore 1024 3072 768 float16 float16 erf"; do
    name=$(echo $t | tr ' ' '_')
    python3 -m tilecraft tune $t --target cuda --trials "$TC_NN_TUNE" --feature-type knob \
        --log "$OUT/tune_$name.jsonl" 2>&1 | tee "$OUT/tune_$name.log"
done
fi
