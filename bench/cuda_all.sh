#!/usr/bin/env bash
# The CUDA suite and the three CUDA benches in one go, for a machine with an NVIDIA GPU.
#     bash bench/cuda_all.sh                 # logs under $OUT (default /tmp/tilecraft_cuda)
# On the device machine of this workplace: source .device/install.sh && bash bench/cuda_all.sh
set -o pipefail
OUT=${OUT:-/tmp/tilecraft_cuda}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv 2>&1 | tee "$OUT/gpu.txt"
python3 -m pytest -m cuda -q tests/cuda -p no:cacheprovider -n 4 2>&1 | tee "$OUT/pytest.log" | tail -25
python3 bench/cuda_gemm.py "$@" 2>&1 | tee "$OUT/gemm.log"
python3 bench/cuda_softmax.py 2>&1 | tee "$OUT/softmax.log"
python3 bench/cuda_conv2d.py 2>&1 | tee "$OUT/conv2d.log"
echo "==== summary ===="
tail -1 "$OUT/pytest.log"
grep -h RESULT "$OUT"/gemm.log "$OUT"/softmax.log "$OUT"/conv2d.log
