#!/usr/bin/env bash
# Tune the four tensorized CPU templates of bench/cpu_microkernels.py (fp32 GEMM 1024³, int8 GEMM
# 1024³ on packed weights, conv2d 1×64×56×56 3×3 fp32 and int8) on 2 pinned physical cores,
# TUNE trials each (default 48: the anatomy's named variants first, then the XGB tuner; a log
# that exists is resumed), writing $OUT/logs/microkernel_*.jsonl; nothing is timed beside the
# references here: bench/verify_micro.sh measures the logs afterwards. On the device host:
#     source .device/install.sh && bash bench/tune_micro.sh && LOGS=bench/results/verify_micro/logs bash bench/verify_micro.sh
# About 5 minutes with TUNE=48 on a 16-core Emerald Rapids host (session 21: 287 s for the four);
# at most 6.7 (the sum of its timeouts).
set -u
OUT=${OUT:-bench/results/verify_micro}
TUNE=${TUNE:-48}
mkdir -p "$OUT/logs"
CPUS=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -u | head -2 | cut -d, -f1 | paste -sd,)
echo "pinned to CPUs $CPUS; TUNE=$TUNE trials per template, logs in $OUT/logs"; uptime
export TILECRAFT_NUM_THREADS=2
for key in gemm int8 conv conv8; do
    # --tune then measuring nothing: --rounds 0 skips the comparison
    ( timeout 100 taskset -c "$CPUS" python3 bench/cpu_microkernels.py --tune "$TUNE" --threads 2 --only $key \
        --rounds 0 --logs "$OUT/logs" 2>&1 | grep -v -e 'trial/s' -e 'Warning' | tee -a "$OUT/tune_micro.log" | tail -3 )
done
uptime
