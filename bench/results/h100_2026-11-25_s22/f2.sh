#!/usr/bin/env bash
# session 22 final 2: tensor-core GEMM bench, then the conv bench (cores 2-15, GPU), while verify_micro runs on cores 0,1
source .device/install.sh || exit 1
mkdir -p $OUT/f2
( OUT=$OUT/f2/micro timeout 470 bash bench/verify_micro.sh > $OUT/f2/verify_micro.out 2>&1; echo "verify_micro rc=$?" >> $OUT/f2/verify_micro.out ) &
( TC_PARTS=gemm OUT=$OUT/f2/tc taskset -c 2-15 timeout 240 bash bench/tensorcore_gpu.sh > $OUT/f2/tc.out 2>&1; echo "tc rc=$?" >> $OUT/f2/tc.out
  OUT=$OUT/f2/conv taskset -c 2-15 timeout 310 bash bench/tensorcore_conv_gpu.sh > $OUT/f2/conv.out 2>&1; echo "conv rc=$?" >> $OUT/f2/conv.out )
wait
tail -25 $OUT/f2/tc.out; tail -30 $OUT/f2/conv.out; tail -25 $OUT/f2/verify_micro.out
tar czf $OUT/f2.tgz -C $OUT f2 && rm -rf $OUT/f2
