#!/usr/bin/env bash
# session 22 final 3: sparse GPU bench (GPU part cores 2-15, no CPU part), then relay on CUDA; relay CPU quiet on cores 0,1 meanwhile
source .device/install.sh || exit 1
mkdir -p $OUT/f3
( CORES=0,1 timeout 470 bash bench/relay_cpu_quiet.sh $OUT/f3/relay_cpu_quiet > $OUT/f3/relay_cpu_quiet.out 2>&1; echo "relay_cpu_quiet rc=$?" >> $OUT/f3/relay_cpu_quiet.out ) &
( SPARSE_CPU=0 OUT=$OUT/f3/sparse taskset -c 2-15 timeout 285 bash bench/sparse_gpu.sh > $OUT/f3/sparse.out 2>&1; echo "sparse rc=$?" >> $OUT/f3/sparse.out
  cd bench && taskset -c 2-15 timeout 250 bash -c "python3 relay_cuda.py --models bert:1:fp16,resnet50:1:fp16,resnet50:32:fp16 --compile --cuda-graph --profile 6 --repeat 3 --number 10 && python3 relay_cuda.py --models resnet50:32:tf32,resnet50:1,bert:1 --cuda-graph --repeat 3 --number 10" > $OUT/f3/relay_cuda.out 2>&1; echo "relay_cuda rc=$?" >> $OUT/f3/relay_cuda.out )
wait
tail -22 $OUT/f3/sparse.out; grep -v "^ \{4,\}[0-9.]* us" $OUT/f3/relay_cuda.out | grep -i "x eager\|compile\|rc=\|Error" | tail -14; cat $OUT/f3/relay_cpu_quiet/summary.txt 2>/dev/null | tail -20; tail -3 $OUT/f3/relay_cpu_quiet.out
tar czf $OUT/f3.tgz -C $OUT f3 && rm -rf $OUT/f3
