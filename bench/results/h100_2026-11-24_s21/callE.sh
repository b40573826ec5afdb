#!/usr/bin/env bash
# session 21 final E: search3's H100 ground truth (SGEMM 1024^3 pass 2 from the shipped table, conv2d third pass)
source .device/install.sh || exit 1
taskset -c 2-15 timeout 560 bash bench/ground_truth_h100.sh > $OUT/gt.out 2>&1; echo "gt rc=$?"
tail -30 $OUT/gt.out; ls $OUT
