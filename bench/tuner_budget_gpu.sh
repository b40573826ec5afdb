#!/usr/bin/env bash
# Issue 13, item 5 on the GPU: tuners at fixed budgets in spaces too large to enumerate, on the
# real machine. One device call of at most 9 minutes (about 8.3 with the defaults), nothing else
# running; run from the repository root:
#
#     source .device/install.sh && bash bench/tuner_budget_gpu.sh
#
# Spaces: the CUDA SGEMM template at 2048^3 (sgemm2048_cuda, 2030 configs; its 1024^3 table is
# enumerated in bench/ground_truth/h100/) and the mma.sync tensor-core GEMM template, fp16 in,
# fp32 out, 4096^3 (tc_gemm4096_cuda, 2844 configs). Per space: Random to 512 trials, XGB (the
# default XGBTuner) and then GA to 256, 5 seeds each; the best so far at 64 / 128 / 256 / 512 is
# read off one run per seed and tuner. Runs go PARALLEL at a time, all on CPUs $CPUS (default
# 2-15): they build in parallel (BUILDERS nvcc processes each) and time one at a time on the GPU
# (a lock around the runner), each config timed as the ground-truth tables were (calibrated, then
# 3 repeats of at least 5 ms). One measurement per config is shared by every run of a space
# (--measure-cache: a config drawn again is looked up, which also makes it a build cache), and
# Random's seeds draw from one uniform pool of POOL configs (each seed's draws uniform over the
# space; the seeds overlap). Order: Random and XGB of the SGEMM, then of the tensor-core GEMM
# (deadline MAIN_S), then GA of both (deadline GA_S); a run cut off at a deadline counts at the
# budgets it reached (every run writes its log as it goes). The nvcc cache comes back as
# $OUT/cubins.tar.xz; with CUBINS=that file a later call builds those configs in the lowering's
# time, and with RESUME=an earlier call's $OUT/logs it goes on from its logs and measurements.
# Then each run's REMEASURE fastest configs within each budget are built once and timed again in
# ROUNDS interleaved rounds, the GPU to themselves (--remeasure; at most REMEASURE_S seconds a
# space): the report gives every tuner's re-measured choice (what tune(verify_top=) and
# apply_history_best would pick) beside its tuning figure. GA_S=0 leaves GA out.
# Results: $OUT/budget_<space>.{json,png}, logs under $OUT/logs, the whole output in $OUT/run.log.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
CPUS=${CPUS:-2-15}
MAIN_S=${MAIN_S:-330}
GA_S=${GA_S:-120}
SEEDS=${SEEDS:-5}
BUDGETS=${BUDGETS:-64,128,256}
RANDOM_BUDGET=${RANDOM_BUDGET:-512}
POOL=${POOL:-640}
PARALLEL=${PARALLEL:-10}
BUILDERS=${BUILDERS:-4}
SPACES=${SPACES:-sgemm2048_cuda tc_gemm4096_cuda}
REMEASURE=${REMEASURE:-3}
ROUNDS=${ROUNDS:-3}
REMEASURE_S=${REMEASURE_S:-60}
# XGB lowers each proposal for its loop-nest features (0.1-0.4 s a config for these templates):
# two processes per run for that
export TILECRAFT_FEATURE_WORKERS=${TILECRAFT_FEATURE_WORKERS:-2}
CACHE=$(mktemp -d /tmp/tuner_budget_gpu.XXXXXX)
export XDG_CACHE_HOME=$CACHE/xdg          # nvcc's cubin cache (keyed by the source's hash) for this call
mkdir -p "$XDG_CACHE_HOME/tilecraft/cuda"
if [ -n "${CUBINS:-}" ] && [ -f "$CUBINS" ]; then tar -C "$XDG_CACHE_HOME/tilecraft" -xJf "$CUBINS"; fi
if [ -n "${RESUME:-}" ] && [ -d "$RESUME" ]; then cp -n "$RESUME"/*.jsonl "$OUT/logs/" 2>/dev/null; fi
TB="taskset -c $CPUS python3 bench/tuner_budget.py $SPACES --gpu --seeds $SEEDS --budgets $BUDGETS
    --random-budget $RANDOM_BUDGET --measure-cache --random-pool $POOL --parallel $PARALLEL --builders $BUILDERS
    --order space --log-dir $OUT/logs"
{
    echo "== $(date -u '+%F %T') $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
    echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); runs on CPUs $CPUS"
    nvcc --version | tail -1; uptime; git log --oneline -1
    echo "== Random and XGB (deadline ${MAIN_S} s)"
    $TB --tuners random,xgb --deadline "$MAIN_S" --out "$OUT/part_random_xgb"
    tuners=random,xgb
    if [ "$GA_S" != 0 ]; then
        echo "== GA (deadline ${GA_S} s)"
        $TB --tuners ga --deadline "$GA_S" --out "$OUT/part_ga"
        tuners=random,ga,xgb
    fi
    echo "== the re-measurement (top $REMEASURE of each run within each budget, $ROUNDS rounds) and the report"
    $TB --tuners $tuners --no-run --remeasure "$REMEASURE" --rounds "$ROUNDS" --remeasure-s "$REMEASURE_S" --out "$OUT"
    echo "== $(date -u '+%F %T') done; $(find "$XDG_CACHE_HOME" -name '*.cubin' | wc -l) cubins"; uptime
} > "$OUT/run.log" 2>&1
tar -C "$XDG_CACHE_HOME/tilecraft" -cJf "$OUT/cubins.tar.xz" cuda 2>/dev/null
rm -rf "$CACHE"
grep -E '^\||XGB.s median|uniform pool|timing one at a time|re-measure|== ' "$OUT/run.log"
ls "$OUT"
