#!/bin/bash
# tc5 mid-session GPU run (issue 12, wgmma pipeline): run from the root of a copy of branch tc5 after
# `source .device/install.sh`; writes under $OUT/tc5/; at most 4 minutes (timeouts sum to 240 s); cores 2-15.
# Timings are indicative (other branches share the GPU).
set -o pipefail
D=$(realpath -m "$OUT/tc5"); mkdir -p "$D"
T="taskset -c 2-15"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$D/gpu.txt" 2>&1
{ which ncu cuobjdump nvdisasm; nvcc --version | tail -2; } > "$D/tools.txt" 2>&1
# 1. the wgmma tests on the GPU (lag 0 = cp.async.mbarrier.arrive.noinc producer; bf16)
#    (the GPU tests only, -v so that a partial log says which passed; the rest runs in CI)
timeout 45 $T python3 -m pytest -v -m cuda -k gpu -rs -p no:cacheprovider tests/cuda/test_tensorcore_wgmma.py \
    tests/cuda/test_tensorcore_wgmma_bf16.py > "$D/pytest_wgmma.log" 2>&1
cd bench
# 2. the protocol diagnostics, lag-0 cases included (a deadlock shows as a timeout)
timeout 25 $T python3 tensorcore_wgmma_diag.py --timeout 8 --out "$D/wgmma_diag" > "$D/wgmma_diag.log" 2>&1
# 3. the bench: baseline (lag 1) vs lag 0, raster, 3 stages, and the diagnostics (no store / no mma / no copy /
#    L2 prefetch hint; 16-byte epilogue stores, one empty-barrier arrival per warp, unrolled producer) beside cuBLAS and Triton at 4096^3; bf16 on wgmma and mma.sync; a subset at 8192^3 and 1024^3
V=wgmma_128x256_s4_h_r8,wgmma_128x256_s4_l0_h_r8,wgmma_128x256_s3_l0_h_r8,wgmma_128x256_s4_l0_h_r16
V=$V,wgmma_256x128_s4_l0_h_r8,wgmma_128x256_s4_h_r8_nostore,wgmma_128x256_s4_h_r8_nomma,wgmma_128x256_s4_h_r8_nocopy
V=$V,wgmma_128x256_s4_h_r8_l2pf,wgmma_128x256_s4_l0_h_r8_nostore,wgmma_128x256_s4_l0_h_r8_nomma
V=$V,wgmma_tf32_128x256_s4_r8,wgmma_tf32_128x256_s4_l0_r8
V=$V,wgmma_128x256_s4_h_r8_vecstore,wgmma_128x256_s4_h_r8_warparrive,wgmma_128x256_s4_h_r8_unroll
V=$V,wgmma_128x256_s4_l0_h_r8_all3
V=$V,wgmma_bf16_128x256_s4_b_r8,wgmma_bf16_128x256_s4_l0_b_r8,bf16_mma_256x128_w64_k64_s3_mb1_r8
timeout 80 $T python3 cuda_tensorcore.py --triton --sizes 4096 --repeat 5 --variants $V \
    --json "$D/bench_4096.json" > "$D/bench_4096.log" 2>&1
V8=wgmma_128x256_s4_h_r8,wgmma_128x256_s4_l0_h_r8,wgmma_128x256_s4_h_r8_nostore,wgmma_128x256_s4_h_r8_nomma
V8=$V8,wgmma_128x256_s4_l0_h_r8_all3,wgmma_bf16_128x256_s4_b_r8,wgmma_bf16_128x256_s4_l0_b_r8
timeout 35 $T python3 cuda_tensorcore.py --triton --sizes 8192 --repeat 5 --variants $V8 \
    --json "$D/bench_8192.json" > "$D/bench_8192.log" 2>&1
timeout 15 $T python3 cuda_tensorcore.py --sizes 1024 --repeat 5 \
    --variants wgmma_128x256_s4_h_r8,wgmma_64x128_s6_l3_h,wgmma_64x128_s6_l0_h,wgmma_128x128_s6_l3_h_r8 \
    --json "$D/bench_1024.json" > "$D/bench_1024.log" 2>&1
# 4. evidence: SASS (HGMMA, LDGSTS, no LDL/STL, registers) of the two main loops; one Nsight Compute profile if ncu runs
timeout 15 $T python3 tensorcore_profile.py --size 4096 --variants wgmma_128x256_s4_h_r8,wgmma_128x256_s4_l0_h_r8 \
    --cubin "$D/cubin" > "$D/profile_build.log" 2>&1
for f in "$D"/cubin/*.cubin; do
  [ -f "$f" ] || continue
  { echo "== $f"; cuobjdump -res-usage "$f" 2>&1 | grep -i "reg\|stack"
    cuobjdump -sass "$f" > "$f.sass" 2>&1
    for op in HGMMA LDGSTS LDL STL SYNCS WARPGROUP BAR.SYNC STG; do echo "$op $(grep -c "$op" "$f.sass")"; done
  } >> "$D/sass_summary.txt" 2>&1
done
if which ncu > /dev/null 2>&1; then
  timeout 17 $T ncu --clock-control none -k main_kernel -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section Occupancy \
      --metrics sm__pipe_tensor_op_hgmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum.per_second,l1tex__m_xbar2l1tex_read_bytes.sum.per_second \
      python3 tensorcore_profile.py --size 4096 --variants wgmma_128x256_s4_h_r8 > "$D/ncu_l1.txt" 2>&1
fi
ls -la "$D" > "$D/files.txt"
