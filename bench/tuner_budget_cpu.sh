#!/usr/bin/env bash
# Issue 13, item 5 on the CPU: tuners at fixed budgets in spaces too large to enumerate, on the
# real machine. One device call of at most 9 minutes (about 8.5 with the defaults) on the 16-CPU
# host, nothing else running; run from the repository root:
#
#     source .device/install.sh && bash bench/tuner_budget_cpu.sh
#
# Spaces: the direct conv2d template on ResNet's 64-channel 3x3 layer (conv2d_direct_64, 4200
# configs; the NCHW[x]c template's spaces have at most 260 and are enumerated in
# bench/ground_truth/), then GEMM 1024^3 (49248 configs). Per space: Random to 512 trials, GA
# and XGB (the default XGBTuner) to 256, 5 seeds each; the best so far at 64 / 128 / 256 / 512
# is read off one run per seed and tuner. Seeds run in parallel, each run pinned to its own pair
# of CPUs (the conv2d: it builds two at a time) or its own CPU (the GEMM: mostly timing), timed
# at one thread as the ground-truth tables were; the host is therefore not fully quiet (caches
# and memory bandwidth shared), which the report says. One measurement per config is shared by
# the runs of a space (--measure-cache), and Random's seeds draw from one uniform pool of 640
# configs (--random-pool: each seed's draws are uniform over the space, but the seeds overlap).
# Every run writes its log as it goes: a run cut off at the deadline counts at the budgets it
# reached. After a space's runs, each run's REMEASURE fastest configs within each budget are
# built once and timed again in ROUNDS interleaved rounds on one pair of CPUs (--remeasure; at
# most REMEASURE_S seconds): the report gives every tuner's re-measured choice (what
# tune(verify_top=) and apply_history_best would pick) beside its tuning figure. Results:
# $OUT/budget_<space>.{json,png}, logs under $OUT/logs, the whole output in $OUT/run.log.
# SPACES (default "conv2d_direct_64 gemm1024"), CONV_S / GEMM_S: each space's deadline in seconds
# (default 200 each); TUNERS, SEEDS, BUDGETS, RANDOM_BUDGET, POOL, CONV_CORES / GEMM_CORES
# (--cores), REMEASURE (0: none), ROUNDS, REMEASURE_S, CPUS (taskset; default: all) change the
# protocol (the tests run it at toy budgets).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
SPACES=${SPACES:-conv2d_direct_64 gemm1024}
CONV_S=${CONV_S:-200}
GEMM_S=${GEMM_S:-200}
TUNERS=${TUNERS:-random,ga,xgb}
SEEDS=${SEEDS:-5}
BUDGETS=${BUDGETS:-64,128,256}
RANDOM_BUDGET=${RANDOM_BUDGET:-512}
POOL=${POOL:-640}
CONV_CORES=${CONV_CORES:-pairs}
GEMM_CORES=${GEMM_CORES:-pairs}
REMEASURE=${REMEASURE:-3}
ROUNDS=${ROUNDS:-3}
REMEASURE_S=${REMEASURE_S:-45}
CPUS=${CPUS:-$(python3 -c 'import os; print(",".join(map(str, sorted(os.sched_getaffinity(0)))))')}
MAX_BUSY=${MAX_BUSY:-0.5}      # a run starts on CPUs that other work kept below this busy
TB="taskset -c $CPUS python3 bench/tuner_budget.py --tuners $TUNERS --seeds $SEEDS --budgets $BUDGETS
    --random-budget $RANDOM_BUDGET --measure-cache --random-pool $POOL --longest-first
    --remeasure $REMEASURE --rounds $ROUNDS --remeasure-s $REMEASURE_S --log-dir $OUT/logs --out $OUT"
{
    echo "== $(date -u '+%F %T') host: $(nproc --all) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); this call on CPUs $CPUS"
    lscpu | grep -E 'Thread|Core|Socket|MHz' ; uptime; git log --oneline -1
    for space in $SPACES; do
        case $space in
            conv2d*) deadline=$CONV_S; cores=$CONV_CORES ;;
            *) deadline=$GEMM_S; cores=$GEMM_CORES ;;
        esac
        echo "== $space (deadline ${deadline} s, cores $cores of $CPUS; re-measure: top $REMEASURE, $ROUNDS rounds)"
        $TB "$space" --cores "$cores" --max-busy "$MAX_BUSY" --deadline "$deadline"
    done
    echo "== $(date -u '+%F %T') done"; uptime
} > "$OUT/run.log" 2>&1
grep -E '^\||XGB.s median|not fully quiet|uniform pool|re-measure|== ' "$OUT/run.log"
ls "$OUT"
