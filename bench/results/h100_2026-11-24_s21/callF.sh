#!/usr/bin/env bash
# session 21 final F: callE again for its SGEMM table (left out of callE's return by the file count); cubins now all shipped
source .device/install.sh || exit 1
mkdir -p /tmp/gt; OUT=/tmp/gt taskset -c 2-15 timeout 500 bash bench/ground_truth_h100.sh > $OUT/gtF.out 2>&1; echo "gt rc=$?"
cp /tmp/gt/sgemm1024_cuda.jsonl.gz /tmp/gt/ground_truth_sgemm1024_cuda.log $OUT/; tail -12 $OUT/gtF.out
