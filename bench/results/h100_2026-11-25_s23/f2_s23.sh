#!/usr/bin/env bash
# session 23 final 2: tensor-core GEMM bench (mma.sync, wgmma cp.async, TMA in a process of its own) then the
# Winograd fp32 conv bench (cores 2-15, GPU), while verify_micro runs on cores 0,1
source .device/install.sh || exit 1
mkdir -p $OUT/f2
( OUT=$OUT/f2/micro timeout 450 bash bench/verify_micro.sh > $OUT/f2/verify_micro.out 2>&1; echo "verify_micro rc=$?" >> $OUT/f2/verify_micro.out ) &
( taskset -c 2-15 timeout 125 python3 .device/tma_check.py > $OUT/f2/tma_check.out 2>&1; echo "tma_check rc=$?" >> $OUT/f2/tma_check.out
  TC_PARTS=gemm TC_SIZES=4096,8192 OUT=$OUT/f2/tc taskset -c 2-15 timeout 285 bash bench/tensorcore_gpu.sh > $OUT/f2/tc.out 2>&1; echo "tc rc=$?" >> $OUT/f2/tc.out
  taskset -c 2-15 timeout 140 python3 -u bench/cuda_conv2d.py --batch 32 --layer 64@56,128@28,256@14,512@7 --variants wino_b64,wino2_b64 --tuned bench/results/cuda_tuning --repeat 9 > $OUT/f2/winograd.out 2>&1; echo "wino rc=$?" >> $OUT/f2/winograd.out )
wait
grep -E "===|layout|rel err|fmt" $OUT/f2/tma_check.out | cut -c1-250; grep -E "cuBLAS|TFLOP|rc=" $OUT/f2/tc.out | tail -45; grep -h "passed\|failed" $OUT/f2/tc/pytest_tma.log 2>/dev/null | tail -2; head -12 $OUT/f2/tc/wgmma_diag.log 2>/dev/null | cut -c1-160
grep -E "RESULT|cuDNN|rc=" $OUT/f2/winograd.out | tail -14; tail -25 $OUT/f2/verify_micro.out
tar czf $OUT/f2.tgz -C $OUT f2 && rm -rf $OUT/f2
