#!/usr/bin/env bash
# session 21 final B: every cuda-marked test + the GPU fuzzer (1200 cases)
source .device/install.sh || exit 1
set -o pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee $OUT/gpu.txt
timeout 330 python3 -m pytest -m cuda -q -p no:cacheprovider -rs tests 2>&1 | tee $OUT/pytest_cuda.log | tail -25
timeout 230 python3 tests/cuda/gpu_fuzz.py --cases 1200 --seed 21 --gpu --jobs 14 --timeout 60 --max-seconds 190 --reasons --out $OUT/gpu_fuzz.txt 2>&1 | tail -12
