#!/usr/bin/env bash
# session 23 final 1: every cuda-marked test (4 shards on cores 2-15), then the GPU schedule fuzzer
T0=$(date +%s)
LIMIT=${LIMIT:-390} bash .device/cuda_shards.sh
source .device/install.sh >/dev/null 2>&1
left=$(( 560 - ($(date +%s) - T0) ))
echo "fuzzer gets ${left} s"
taskset -c 2-15 timeout $left python3 tests/cuda/gpu_fuzz.py --cases ${FUZZ:-800} --seed 23 --gpu --jobs 14 > $OUT/cuda/gpu_fuzz.log 2>&1; echo "fuzz rc=$?" >> $OUT/cuda/gpu_fuzz.log
tail -4 $OUT/cuda/gpu_fuzz.log
tar czf $OUT/f1.tgz -C $OUT cuda && rm -rf $OUT/cuda
