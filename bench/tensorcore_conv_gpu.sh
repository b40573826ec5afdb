#!/bin/bash
# One device run for issue 12's conv / bf16 pieces (<= 5 min): the `cuda`-marked tests of the implicit-GEMM
# conv2d, bf16 and the cp.async pipeline, then the conv bench at ResNet-50's batch-32 layers beside cuDNN
# (channels_last fp16, benchmark mode), bf16 GEMM beside cuBLAS, and fp32 batch-32 conv beside cuDNN
# (TF32 off); logs under $OUT (default bench/results/tc_conv_run). From the repo root on a GPU machine:
#   bash bench/tensorcore_conv_gpu.sh
# TCC_PARTS picks parts (default tests,conv,bf16,fp32); TCC_CONV_VARIANTS the conv bench's variants (default all);
# TCC_TUNE=N also tunes the 3x3 64@56 and 256@14 layers for N trials each.
set -o pipefail
OUT=$(realpath -m "${OUT:-bench/results/tc_conv_run}")     # absolute: the benches run in bench/
PARTS=${TCC_PARTS:-tests,conv,bf16,fp32}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
git log --oneline -1 > "$OUT/commit.txt" 2>/dev/null
if [[ $PARTS == *tests* ]]; then
timeout 150 python3 -m pytest -q -m cuda -rs -p no:cacheprovider tests/cuda/test_conv2d_nhwc_tensorcore.py \
    tests/cuda/test_tensorcore_bf16.py tests/cuda/test_async_copy.py 2>&1 | tee "$OUT/pytest_conv_bf16.log" | tail -3
fi
cd bench
if [[ $PARTS == *conv* ]]; then
timeout 120 python3 cuda_conv2d_tensorcore.py --repeat 7 ${TCC_CONV_VARIANTS:+--variants $TCC_CONV_VARIANTS} \
    --json "$OUT/conv_tc.json" 2>&1 | tee "$OUT/conv_tc.log" | grep RESULT
fi
if [[ $PARTS == *bf16* ]]; then
timeout 40 python3 cuda_tensorcore_bf16.py --json "$OUT/bf16.json" 2>&1 | tee "$OUT/bf16.log" | grep RESULT
fi
if [[ $PARTS == *fp32* ]]; then
timeout 30 python3 cuda_conv2d.py --batch 32 --layer 256@14 --repeat 7 \
    --variants tuned256_b32,co64_t8_x2_n4,co64_t8_x2_n2_ci16,co32_t8_y7_x2_n4,co64_t16_x1_n4,co32_t8_x2_n4,co128_t8_y7_x2_n2 \
    2>&1 | tee "$OUT/conv_fp32_256.log" | tail -2
fi
if [[ -n $TCC_TUNE ]]; then
cd .. && for t in "32 56 56 64 64 3 3 1 1 float16" "32 14 14 256 256 3 3 1 1 float16"; do
    name=$(echo $t | tr ' ' '_')
    python3 -m tilecraft tune conv2d_nhwc_tensorcore $t --target cuda --trials "$TCC_TUNE" --feature-type knob \
        --log "$OUT/tune_conv_$name.jsonl" 2>&1 | tee "$OUT/tune_conv_$name.log" | tail -3
done
fi
