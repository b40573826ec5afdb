#!/bin/bash
# One device run for issue 12's conv / bf16 pieces (<= 5 min): the `cuda`-marked tests of the implicit-GEMM
# conv2d, bf16 and the cp.async pipeline (while the conv variants are nvcc-built into a fresh disk cache, one
# process a layer: their BUILD lines are cache misses), then the conv bench at ResNet-50's batch-32 layers
# beside cuDNN (channels_last, benchmark mode; fp16, then bf16 at three layers, then four layers beside the
# plain GEMM of their size and tile: what the gather costs), the wgmma conv (sm_90a) at the six layers (fp16, then
# beside the wgmma GEMM of each size and tile, then bf16 at three layers), bf16 GEMM 4096^3 (mma.sync and wgmma)
# beside cuBLAS, and fp32 batch-32 conv beside cuDNN (TF32 off); logs under $OUT (default bench/results/tc_conv_run).
# From the repo root on a GPU machine:
#   bash bench/tensorcore_conv_gpu.sh
# TCC_PARTS picks parts (default tests,conv,wgmma,bf16,fp32); TCC_CONV_VARIANTS the fp16 mma.sync conv bench's
# variants (default: the fallback and the three best of session 21); TCC_TUNE=N also tunes the tensor-core template at 3x3 64@56 and 256@14 and the fp32 template at
# batch-32 256@14 for N trials each.
set -o pipefail
OUT=$(realpath -m "${OUT:-bench/results/tc_conv_run}")     # absolute: the benches run in bench/
PARTS=${TCC_PARTS:-tests,conv,wgmma,bf16,fp32}
CONV_VARIANTS=${TCC_CONV_VARIANTS:-fallback,128x64_w64x32_k32_s3_mb2,256x64_w64x32_k32_s3_mb1,128x128_w64_k32_s3_mb2}
WG_TWIN=128x128_s4,256x128_s4,256x64_s4
mkdir -p "$OUT"
export XDG_CACHE_HOME=$(mktemp -d)                         # fresh nvcc cache: builders -> benches
LAYERS="3x3_64@56 3x3_128@28 3x3_256@14 1x1_256-64@56 1x1_1024-256@14 3x3_128_s2@56"
BF_LAYERS="3x3_64@56,3x3_256@14,1x1_1024-256@14"
BF_VARIANTS=fallback,128x64_w64x32_k32_s3_mb2,64x64_w32_k32_s3_mb4,128x128_w64_k32_s3_mb2,64x128_w32x64_k32_s3_mb2
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
git log --oneline -1 > "$OUT/commit.txt" 2>/dev/null
if [[ $PARTS == *conv* ]]; then
    cd bench
    for L in $LAYERS; do
        timeout 150 python3 cuda_conv2d_tensorcore.py --build-only --layers "$L" \
            --variants $CONV_VARIANTS > "$OUT/build_fp16_$L.log" 2>&1 &
    done
    timeout 150 python3 cuda_conv2d_tensorcore.py --build-only --dtype bfloat16 --layers "$BF_LAYERS" \
        --variants "$BF_VARIANTS" > "$OUT/build_bf16.log" 2>&1 &
    cd ..
fi
if [[ $PARTS == *wgmma* ]]; then
    (cd bench && timeout 150 python3 cuda_conv2d_wgmma.py --build-only --jobs 6 > "$OUT/build_wgmma.log" 2>&1 &&
     timeout 100 python3 cuda_conv2d_wgmma.py --build-only --jobs 4 --dtype bfloat16 \
        --layers "$BF_LAYERS" --variants "$WG_TWIN" > "$OUT/build_wgmma_bf16.log" 2>&1) &
fi
if [[ $PARTS == *tests* ]]; then
timeout 150 python3 -m pytest -q -m cuda -rs -p no:cacheprovider tests/cuda/test_conv2d_nhwc_tensorcore.py \
    tests/cuda/test_tensorcore_bf16.py tests/cuda/test_async_copy.py tests/cuda/test_conv2d_nhwc_wgmma.py \
    tests/cuda/test_wgmma_bf16.py 2>&1 | tee "$OUT/pytest_conv_bf16.log" | tail -3
fi
wait
cd bench
if [[ $PARTS == *conv* ]]; then
cat "$OUT"/build_*.log > "$OUT/builds.log"
timeout 100 python3 cuda_conv2d_tensorcore.py --cached --repeat 7 --variants $CONV_VARIANTS \
    --json "$OUT/conv_tc.json" 2>&1 | tee "$OUT/conv_tc.log" | grep RESULT
timeout 40 python3 cuda_conv2d_tensorcore.py --cached --repeat 7 --dtype bfloat16 --layers "$BF_LAYERS" \
    --variants "$BF_VARIANTS" --json "$OUT/conv_tc_bf16.json" 2>&1 | tee "$OUT/conv_tc_bf16.log" | grep RESULT
# the gather's cost: each conv beside the plain GEMM of its size with the same tile
timeout 60 python3 cuda_conv2d_tensorcore.py --cached --repeat 7 --gemm-twin --layers "$BF_LAYERS,3x3_128@28" \
    --variants fallback,128x64_w64x32_k32_s3_mb2 --json "$OUT/conv_tc_twin.json" 2>&1 | tee "$OUT/conv_tc_twin.log" \
    | grep twin
fi
if [[ $PARTS == *wgmma* ]]; then
timeout 60 python3 cuda_conv2d_wgmma.py --repeat 7 --json "$OUT/conv_wgmma.json" 2>&1 | tee "$OUT/conv_wgmma.log" \
    | grep RESULT
timeout 60 python3 cuda_conv2d_wgmma.py --repeat 5 --gemm-twin --variants "$WG_TWIN" --json "$OUT/conv_wgmma_twin.json" \
    2>&1 | tee "$OUT/conv_wgmma_twin.log" | grep twin
timeout 30 python3 cuda_conv2d_wgmma.py --repeat 7 --dtype bfloat16 --layers "$BF_LAYERS" --variants "$WG_TWIN" \
    --json "$OUT/conv_wgmma_bf16.json" 2>&1 | tee "$OUT/conv_wgmma_bf16.log" | grep RESULT
fi
if [[ $PARTS == *bf16* ]]; then
timeout 60 python3 cuda_tensorcore_bf16.py --json "$OUT/bf16.json" 2>&1 | tee "$OUT/bf16.log" | grep RESULT
fi
if [[ $PARTS == *fp32* ]]; then
timeout 30 python3 cuda_conv2d.py --batch 32 --layer 256@14 --repeat 7 \
    --variants tuned256_b32,co64_t8_x2_n4,co64_t8_x2_n2_ci16,co32_t8_y7_x2_n4,co64_t16_x1_n4,co32_t8_x2_n4,co128_t8_y7_x2_n2,co64_t8_y7_x2_n4,co32_t8_y7_x2_n2_ci16 \
    2>&1 | tee "$OUT/conv_fp32_256.log" | tail -2
fi
if [[ -n $TCC_TUNE ]]; then
cd .. && for t in "32 56 56 64 64 3 3 1 1 float16" "32 14 14 256 256 3 3 1 1 float16"; do
    name=$(echo $t | tr ' ' '_')
    python3 -m tilecraft tune conv2d_nhwc_tensorcore $t --target cuda --trials "$TCC_TUNE" --no-verdict \
        --log "$OUT/tune_conv_$name.jsonl" 2>&1 | tee "$OUT/tune_conv_$name.log" | tail -3
done
# the fp32 template (register tiles up to 64 accumulators) at batch-32 256@14
python3 -m tilecraft tune conv2d 32 256 14 14 256 3 3 1 1 float32 --target cuda --trials "$TCC_TUNE" --no-verdict \
    --log "$OUT/tune_fp32_256_14_b32.jsonl" 2>&1 | tee "$OUT/tune_fp32_256_14_b32.log" | tail -3
fi
