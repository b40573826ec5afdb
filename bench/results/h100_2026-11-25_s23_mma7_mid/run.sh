#!/usr/bin/env bash
# mma7 mid-session: fragment_prefetch (fp) variants beside the current best mma.sync and cuBLAS at 4096^3,
# the new tests on the GPU, SASS/register evidence of the baseline and fp kernels. Indicative (shared GPU).
O=$OUT/mma7; mkdir -p $O
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $O/gpu.txt 2>&1
timeout 100 taskset -c 2-15 python3 -m pytest -q -m cuda -rs tests/cuda/test_tensorcore_fragment_prefetch.py tests/cuda/test_tensorcore_bf16.py tests/cuda/test_tensorcore_nn.py \
    tests/cuda/test_tensorcore.py -k "gpu" > $O/pytest.log 2>&1
cd bench
V=mma_256x128_w64_k64_s3_mb1_h_r8_pairstore16,mma_256x128_w64_k64_s3_mb1_h_r8,mma_256x128_w64_k64_s3_mb1_h_r8_fp,mma_256x128_w64_k64_s4_mb1_h_r8_fp,mma_256x128_w64_k32_s4_mb1_h_r8_fp
V=$V,mma_256x128_w64_k64_s3_mb1_h_r8_fp_sp,mma_256x128_w64_k64_s4_mb1_h_r8_fp_sp,mma_256x128_w64_k64_s4_mb1_h_r16_fp,mma_256x128_w64_k128_s2_mb1_h_r8_fp,mma_128x256_w64_k32_s4_mb1_h_r8_fp,mma_128x128_w64_k64_s3_mb2_h_fp,mma_128x128_w64_k32_s4_mb2_h_r8_fp
V=$V,mma_256x128_w64x32_k32_s4_mb1_h_r8,mma_256x128_w64x32_k32_s4_mb1_h_r8_fp,mma_256x128_w64x32_k64_s3_mb1_h_r8_fp,mma_128x256_w32x64_k32_s4_mb1_h_r8_fp
V=$V,bf16_mma_256x128_w64_k64_s3_mb1_r8,bf16_mma_256x128_w64_k64_s3_mb1_r8_fp
V=$V,tf32_128x128_w64_k32_s3,tf32_128x128_w64_k32_s3_fp,int8_128x128_w64_k64_s3,int8_128x128_w64_k64_s3_fp
timeout 120 taskset -c 2-15 python3 cuda_tensorcore.py --sizes 4096 --variants $V --json $O/bench.json > $O/bench.log 2>&1
timeout 40 taskset -c 2-15 python3 tensorcore_profile.py --size 4096 --cubin $O/cubin \
    --variants mma_256x128_w64_k64_s3_mb1_h_r8,mma_256x128_w64_k64_s3_mb1_h_r8_fp,mma_256x128_w64_k64_s3_mb1_h_r8_fp_sp > $O/profile.log 2>&1
CU=$(python3 -c "import triton,os;print(os.path.join(os.path.dirname(triton.__file__),'backends/nvidia/bin/cuobjdump'))" 2>/dev/null)
for f in $O/cubin/*.cubin; do
  [ -x "$CU" ] || break
  $CU -sass $f > ${f%.cubin}.sass 2>&1; $CU -res-usage $f > ${f%.cubin}.res 2>&1
  echo "$(basename $f): $(for op in HMMA LDSM LDGSTS BAR.SYNC LDL STL; do printf '%s=%s ' $op $(grep -c "\b$op\b" ${f%.cubin}.sass); done)" >> $O/sass_counts.txt
done
tar czf $O/cubin.tgz -C $O cubin && rm -rf $O/cubin
