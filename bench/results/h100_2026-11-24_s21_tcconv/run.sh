#!/bin/bash
# tcconv mid-session GPU run, session 21 (<= 4 min wall, cores 2-15; other branches share the GPU: timings
# indicative). First GPU run of branch tcconv's conv2d NHWC implicit GEMM (fp16, bf16) and bf16 GEMM:
#  1. the `cuda`-marked tests of the conv / bf16 files (GPU tests: ResNet-50 layers at batch 32 vs torch),
#     while the conv variants are nvcc-built in the background (one process a layer, fresh nvcc cache:
#     the BUILD lines are cache misses);
#  2. the conv bench (every variant, 6 ResNet-50 layers, batch 32) beside cuDNN channels_last fp16, then
#     bf16 at 3 layers beside cuDNN bf16;
#  3. bf16 GEMM 4096^3 beside cuBLAS; 4. fp32 conv batch 32 256ch@14 register-tile variants vs cuDNN (TF32 off);
#  5. with the time left, short tuning runs: the fp32 conv template (register tiles now up to 64
#     accumulators) at batch-32 256@14, then the fp16 tensor-core conv template at 3x3 256@14.
# Run from the root of a copy of branch tcconv after `source .device/install.sh`; writes $OUT/tcconv/.
set -o pipefail
O=$(realpath -m "$OUT/tcconv"); mkdir -p "$O"
S0=$SECONDS
left() { echo $(( 232 - (SECONDS - S0) )); }
cap() { local l; l=$(left); (( l < $1 )) && echo $(( l > 5 ? l : 5 )) || echo "$1"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,utilization.gpu --format=csv > "$O/gpu.txt" 2>&1
git log --oneline -1 > "$O/commit.txt" 2>&1
export XDG_CACHE_HOME=$(mktemp -d)            # fresh nvcc cache, shared by the builders and the benches
T="taskset -c 2-15"
LAYERS="3x3_64@56 3x3_128@28 3x3_256@14 1x1_256-64@56 1x1_1024-256@14 3x3_128_s2@56"
BF_LAYERS="3x3_64@56,3x3_256@14,1x1_1024-256@14"
BF_VARIANTS=fallback,128x64_w64x32_k32_s3_mb2,64x64_w32_k32_s3_mb4,128x128_w64_k32_s3_mb2,64x128_w32x64_k32_s3_mb2
cd bench
for L in $LAYERS; do
    $T timeout 100 python3 cuda_conv2d_tensorcore.py --build-only --layers "$L" > "$O/build_fp16_$L.log" 2>&1 &
done
$T timeout 100 python3 cuda_conv2d_tensorcore.py --build-only --dtype bfloat16 --layers "$BF_LAYERS" \
    --variants "$BF_VARIANTS" > "$O/build_bf16.log" 2>&1 &
cd ..
$T timeout 100 python3 -m pytest -q -m cuda -rs -p no:cacheprovider tests/cuda/test_conv2d_nhwc_tensorcore.py \
    tests/cuda/test_tensorcore_bf16.py 2>&1 | tee "$O/pytest_gpu.log" | tail -3
wait
cat "$O"/build_*.log > "$O/builds.log"
echo "after tests + builds: $((SECONDS - S0)) s" | tee "$O/clock.txt"
cd bench
$T timeout $(cap 75) python3 cuda_conv2d_tensorcore.py --cached --repeat 5 --json "$O/conv_tc.json" \
    2>&1 | tee "$O/conv_tc.log" | grep RESULT
$T timeout $(cap 30) python3 cuda_conv2d_tensorcore.py --cached --repeat 5 --dtype bfloat16 --layers "$BF_LAYERS" \
    --variants "$BF_VARIANTS" --json "$O/conv_tc_bf16.json" 2>&1 | tee "$O/conv_tc_bf16.log" | grep RESULT
$T timeout $(cap 35) python3 cuda_tensorcore_bf16.py --repeat 5 --json "$O/bf16.json" 2>&1 | tee "$O/bf16.log" | grep RESULT
$T timeout $(cap 40) python3 cuda_conv2d.py --batch 32 --layer 256@14 --repeat 5 \
    --variants tuned256_b32,co64_t8_x2_n4,co64_t8_x2_n2_ci16,co32_t8_y7_x2_n4,co64_t16_x1_n4,co32_t8_x2_n4,co128_t8_y7_x2_n2,co64_t8_y7_x2_n4,co32_t8_y7_x2_n2_ci16 \
    2>&1 | tee "$O/conv_fp32_256.log" | tail -2
echo "after benches: $((SECONDS - S0)) s" | tee -a "$O/clock.txt"
cd ..
if (( $(left) > 60 )); then      # the fp32 template's widened register tiles (<= 64 accumulators) at 256@14
    $T timeout $(( $(left) / 2 )) python3 -m tilecraft tune conv2d 32 256 14 14 256 3 3 1 1 float32 --target cuda \
        --trials 64 --no-verdict --log "$O/tune_fp32_256_14_b32.jsonl" 2>&1 | tail -15 > "$O/tune_fp32_256_14_b32.log"
fi
if (( $(left) > 25 )); then
    $T timeout $(( $(left) - 3 )) python3 -m tilecraft tune conv2d_nhwc_tensorcore 32 14 14 256 256 3 3 1 1 float16 \
        --target cuda --trials 40 --no-verdict --log "$O/tune_conv_256_14.jsonl" 2>&1 | tail -15 > "$O/tune_conv_256_14.log"
fi
echo "end: $((SECONDS - S0)) s" | tee -a "$O/clock.txt"
exit 0
