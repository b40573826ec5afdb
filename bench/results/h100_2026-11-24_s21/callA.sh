#!/usr/bin/env bash
# session 21 final A: tensor-core GEMM bench (wgmma timings) on cores 2-15 + quiet relay CPU figures on cores 0,1
source .device/install.sh || exit 1
python3 -c "import xgboost; print('xgboost', xgboost.__version__)" 2>&1 | tail -1
nproc; uptime
( taskset -c 0,1 timeout 500 bash bench/relay_cpu_quiet.sh $OUT/relay_cpu_quiet > $OUT/relay_cpu_quiet.out 2>&1; echo "relay_cpu_quiet rc=$?" >> $OUT/relay_cpu_quiet.out ) &
TC_PARTS=gemm OUT=$OUT/tc taskset -c 2-15 timeout 500 bash bench/tensorcore_gpu.sh > $OUT/tc.out 2>&1; echo "tc rc=$?"
wait
echo "==== TC"; grep -v "^\s*$" $OUT/tc/tensorcore_bench.log | tail -45; tail -3 $OUT/tc/wgmma_diag.log
echo "==== RELAY CPU"; cat $OUT/relay_cpu_quiet/summary.txt; tail -3 $OUT/relay_cpu_quiet.out
tar czf $OUT/callA.tgz -C $OUT relay_cpu_quiet tc relay_cpu_quiet.out tc.out && rm -rf $OUT/relay_cpu_quiet $OUT/tc
