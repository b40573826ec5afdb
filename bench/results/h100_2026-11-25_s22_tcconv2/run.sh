#!/bin/bash
# tcconv2 mid-session GPU run (<= 4 min wall, cores 2-15): from the root of a copy of branch tcconv2's HEAD,
# after `source .device/install.sh`. Writes under $OUT/tcconv2/.
set -o pipefail
R=$(realpath -m "${OUT:-/tmp/out}/tcconv2"); mkdir -p "$R"
export XDG_CACHE_HOME=$(mktemp -d)
T="taskset -c 2-15"
git log --oneline -1 > "$R/commit.txt" 2>/dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,utilization.gpu --format=csv > "$R/gpu.txt" 2>&1
# 1. build every wgmma conv variant at the six ResNet-50 layers (parallel nvcc, fills the disk cache)
(cd bench && timeout 30 $T python3 cuda_conv2d_wgmma.py --build-only --jobs 14) > "$R/build.log" 2>&1
# 2. tests on the GPU: the wgmma conv (kernel and the template's TE fallback) against float64, bf16 wgmma GEMM
timeout 60 $T python3 -m pytest -q -m cuda -rs -p no:cacheprovider tests/cuda/test_conv2d_nhwc_wgmma.py \
    tests/cuda/test_wgmma_bf16.py -k "gpu" > "$R/pytest.log" 2>&1
tail -3 "$R/pytest.log"
# 3. the wgmma conv at the six layers, every fitting variant, beside cuDNN (channels_last, benchmark mode)
(cd bench && timeout 35 $T python3 cuda_conv2d_wgmma.py --repeat 7 --json "$R/conv_wgmma.json") > "$R/conv_wgmma.log" 2>&1
grep RESULT "$R/conv_wgmma.log"
# 4. the gap split: wgmma conv vs the wgmma GEMM of the same size and tile (three variants)
(cd bench && timeout 35 $T python3 cuda_conv2d_wgmma.py --repeat 5 --gemm-twin --variants 128x64_s4,128x128_s4,128x256_s4_l2 \
    --json "$R/conv_wgmma_twin.json") > "$R/conv_wgmma_twin.log" 2>&1
# 5. the same split for an mma.sync conv variant, and the template's fallback (on sm_90 now the TE wgmma conv)
(cd bench && timeout 25 $T python3 cuda_conv2d_tensorcore.py --repeat 5 --gemm-twin --layers 3x3_64@56,3x3_256@14 \
    --variants fallback,128x64_w64x32_k32_s3_mb2 --json "$R/conv_mma_twin.json") > "$R/conv_mma_twin.log" 2>&1
# 6. bf16: the wgmma conv at three layers, and the GEMM 4096^3 (wgmma and mma.sync) beside cuBLAS bf16
(cd bench && timeout 20 $T python3 cuda_conv2d_wgmma.py --repeat 5 --dtype bfloat16 --layers 3x3_64@56,3x3_256@14,1x1_1024-256@14 \
    --variants 128x64_s4,128x128_s4,128x256_s4_l2 --json "$R/conv_wgmma_bf16.json") > "$R/conv_wgmma_bf16.log" 2>&1
(cd bench && timeout 25 $T python3 cuda_tensorcore_bf16.py --repeat 7 \
    --variants wgmma_128x256_s4,wgmma_128x256_s4_l2,wgmma_128x128_s5_l2,128x256_w64_k64_s4_mb1 --json "$R/bf16_gemm.json") > "$R/bf16_gemm.log" 2>&1
grep RESULT "$R/bf16_gemm.log"
# 7. SASS evidence for one kernel: HGMMA present, no local memory
timeout 10 python3 - > "$R/sass.txt" 2>&1 <<'PY'
import subprocess, tempfile, os
from tilecraft.topi.conv2d_nhwc_wgmma import conv2d_nhwc_wgmma
for shape, block in (((32, 14, 14, 256, 256, 3, 3, 1, 1), (128, 256)), ((32, 56, 56, 64, 64, 3, 3, 1, 1), (128, 64))):
    c = conv2d_nhwc_wgmma(*shape, block=block, stages=4)
    p = os.path.join(tempfile.mkdtemp(), "k.cubin"); open(p, "wb").write(c.build())
    try:
        sass = subprocess.run(["cuobjdump", "-sass", p], capture_output=True, text=True).stdout
        print(shape, block, {k: sass.count(k) for k in ("HGMMA", "LDL", "STL", "LDGSTS", "SYNCS")})
    except FileNotFoundError:
        print("no cuobjdump")
PY
ls -la "$R"
