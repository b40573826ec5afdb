#!/usr/bin/env bash
# One device call: a CUDA space's ground truth (2 passes, built while timed) on CPUs 0-13 and the
# GPU, and beside it a CPU space's fixed-budget tuner comparison on cores 14 and 15; both stop
# in time for a 9-minute call, and everything they write goes to $OUT (default ./out).
#
#     source .device/install.sh && bash bench/ground_truth_gpu.sh sgemm1024_cuda conv2d_64
#     source .device/install.sh && bash bench/ground_truth_gpu.sh conv2d_128_cuda gemm1024
#
# GPU_CPUS, BUDGET_CORES, GT_LIMIT (480 s), BUDGET_LIMIT (360 s: no tuning run starts later) and
# BUDGET_ARGS (extra tuner_budget.py options) change the defaults.
set -u
SPACE=${1:?name a CUDA space of bench/ground_truth.py}
BUDGET_SPACE=${2:-}
OUT=${OUT:-out}
GPU_CPUS=${GPU_CPUS:-0-13}
BUDGET_CORES=${BUDGET_CORES:-14,15}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
if [ -n "$BUDGET_SPACE" ]; then
    python3 bench/tuner_budget.py "$BUDGET_SPACE" --cores "$BUDGET_CORES" --time-limit "${BUDGET_LIMIT:-360}" \
        --log-dir "$OUT/budget_logs" --out "$OUT/budget" ${BUDGET_ARGS:-} > "$OUT/tuner_budget_$BUDGET_SPACE.log" 2>&1 &
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$OUT/gpu_before.csv" 2>&1
python3 bench/ground_truth.py run --gpu "$SPACE" --passes 2 --cpus "$GPU_CPUS" --time-limit "${GT_LIMIT:-480}" \
    --export --out "$OUT" 2>&1 | tee "$OUT/ground_truth_$SPACE.log"
mkdir -p "$OUT/cache_$SPACE"
cp bench/ground_truth/.cache/"$SPACE"/{meta.json,built.jsonl,timed.jsonl} "$OUT/cache_$SPACE/" 2>/dev/null
wait
tail -n 8 "$OUT"/tuner_budget_*.log 2>/dev/null
exit 0
