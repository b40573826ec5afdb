#!/usr/bin/env bash
# search5 (issue 13) GPU run, a call of its own: the mma.sync tensor-core GEMM fp16 4096^3
# (tc_gemm4096_cuda, 2844 configs) at fixed budgets with the new re-measurement. Run from the root
# of a copy of branch search5's HEAD on the GPU machine, after `source .device/install.sh`:
#
#     bash /work/notes/s23/mid_search5_gpu.sh        # (or a copy of it)
#
# CPUs 2-15. Random to 512 (one pool of 640) and XGB (the default XGBTuner) to 256, 5 seeds, 10
# runs at once building in parallel and timing one at a time on the GPU (a lock), one measurement
# per config shared; tuning stops at 285 s (a run cut off counts at the budgets it reached; GA is
# left out); then every run's 3 fastest configs within each budget are built once and re-timed in
# 3 interleaved rounds, the GPU to themselves (at most 60 s). At most ~6.8 min wall. If other
# branches share the GPU at the time, the timings are indicative (say so).
# Output: $OUT/search5/gpu/{run.log,budget_tc_gemm4096_cuda.{json,png},logs.tar.xz,cubins.tar.xz}.
set -u
D=$OUT/search5/gpu
mkdir -p "$D"
OUT=$D SPACES=tc_gemm4096_cuda SEEDS=5 BUDGETS=64,128,256 RANDOM_BUDGET=512 POOL=640 CPUS=2-15 \
    MAIN_S=285 GA_S=0 REMEASURE=3 ROUNDS=3 REMEASURE_S=60 \
    timeout 410 bash bench/tuner_budget_gpu.sh
tar -C "$D" -cJf "$D/logs.tar.xz" logs && rm -rf "$D/logs"
ls -la "$D"
