#!/bin/bash
# One device run for the tensor-core path (tests with the `cuda` marker, then the GEMM bench),
# logs under $OUT (default bench/results/tc_run): from the repo root on a GPU machine,
#   bash bench/tensorcore_gpu.sh
set -o pipefail
OUT=${OUT:-bench/results/tc_run}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
python3 -m pytest -q -m cuda -rs tests/cuda/test_tensorcore.py tests/cuda/test_async_copy.py 2>&1 | tee "$OUT/pytest_tensorcore.log"
cd bench && python3 cuda_tensorcore.py --sizes "${TC_SIZES:-1024,4096,8192}" \
    ${TC_VARIANTS:+--variants $TC_VARIANTS} --json "$OUT/tensorcore.json" 2>&1 | tee "$OUT/tensorcore_bench.log"
