#!/usr/bin/env bash
# One device run for the GPU sparse kernels: the CUDA sparse tests (emulated, nvcc, and on the
# GPU; torch / CuPy CSR inputs), the ragged fuzz family on the GPU, then bench/sparse_cuda.py
# against cuSPARSE (torch.sparse, same process) at scale 0.1 (100k-row uniform and power-law,
# 400k-row banded) and at the full size (1M-row uniform and power-law, 4M-row banded).
# Logs under $OUT (default bench/results/sparse_gpu_run); from the repo root on a GPU machine:
#     bash bench/sparse_gpu.sh
#     SPARSE_SCALES="1" SPARSE_WIDTHS="32" bash bench/sparse_gpu.sh       # fewer runs
# On the device machine of this workplace: source .device/install.sh && bash bench/sparse_gpu.sh
set -o pipefail
OUT=${OUT:-bench/results/sparse_gpu_run}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv 2>&1 | tee "$OUT/gpu.txt"
python3 -m pytest -m cuda -q -rs -p no:cacheprovider tests/cuda/test_cuda_ragged.py \
    tests/cuda/test_cuda_sparse_pieces.py tests/cuda/test_cuda_sparse_torch.py 2>&1 | tee "$OUT/pytest_sparse.log" | tail -15
# the ragged family of the GPU schedule fuzzer, on the GPU (a short run)
timeout 60 python3 tests/cuda/gpu_fuzz.py --cases 200 --seed 16 --families ragged --gpu --jobs 8 2>&1 \
    | tail -4 | tee "$OUT/fuzz_ragged_gpu.log"
for scale in ${SPARSE_SCALES:-0.1 1}; do
    python3 bench/sparse_cuda.py --scale "$scale" --widths ${SPARSE_WIDTHS:-32 128} 2>&1 \
        | grep -v -e "UserWarning" -e "tA = torch.sparse_csr_tensor" | tee "$OUT/sparse_cuda_scale$scale.log"
done
echo "==== summary ===="
tail -1 "$OUT/pytest_sparse.log"
tail -1 "$OUT/fuzz_ragged_gpu.log"
grep -H RESULT "$OUT"/sparse_cuda_scale*.log
