#!/usr/bin/env bash
# One device run for issue 16's figures, GPU and CPU, about 4 minutes on an H100 host:
#  * the CUDA sparse tests (emulated, nvcc, and on the GPU; torch / CuPy CSR inputs), the ragged fuzz
#    family on the GPU (30 s);
#  * bench/sparse_cuda.py against cuSPARSE (torch.sparse, same process) at scale 0.1 (100k-row uniform and
#    power-law, 400k-row banded) and at the full size (1M-row uniform and power-law, 4M-row banded),
#    SpMV and SpMM widths 32 and 128, every knob variant (kernels compiled first by --jobs processes);
#  * meanwhile, on two cores of their own (SPARSE_CPU_CORES, default 0,1; the GPU part runs on the
#    others), bench/sparse_cpu.py --full: the CPU case (uniform 100k x 100k at 1%, 2 threads)
#    and the power-law (200k rows) and banded (2M rows) matrices, against scipy and torch.sparse; then
#    bench/sparse_ops_cpu.py: SDDMM, segment sum/mean, embedding bag against torch and numpy (2 threads);
#  * bench/sparse_ops_cuda.py: SDDMM (100k x 100k at 0.1%, depth 64), segment sum/mean (1M x 64 rows in 10k
#    power-law segments), embedding bag (1M x 64 table, 16k power-law bags) against torch on CUDA (~1 min;
#    SPARSE_OPS=0 skips both ops benches).
# Logs under $OUT (default bench/results/sparse_gpu_run); from the repo root on a GPU machine:
#     bash bench/sparse_gpu.sh
#     SPARSE_SCALES="1" SPARSE_WIDTHS="32" SPARSE_CPU=0 bash bench/sparse_gpu.sh      # fewer runs
# On the device machine of this workplace: source .device/install.sh && bash bench/sparse_gpu.sh
set -o pipefail
OUT=${OUT:-bench/results/sparse_gpu_run}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T=$(date +%s)
CPU_CORES=${SPARSE_CPU_CORES:-0,1}
NCPU=$(nproc)
GPU_CORES="2-$((NCPU - 1))"
[ "$NCPU" -lt 6 ] && GPU_CORES="0-$((NCPU - 1))"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv 2>&1 | tee "$OUT/gpu.txt"
CPU_PID=
if [ "${SPARSE_CPU:-1}" = 1 ]; then
    (taskset -c "$CPU_CORES" python3 bench/sparse_cpu.py --full --matrices uniform powerlaw banded --repeat 5 \
        > "$OUT/sparse_cpu_full.log" 2>&1
     [ "${SPARSE_OPS:-1}" = 1 ] && taskset -c "$CPU_CORES" python3 bench/sparse_ops_cpu.py --threads 2 --repeat 5 \
        > "$OUT/sparse_ops_cpu.log" 2>&1) &
    CPU_PID=$!
fi
G="taskset -c $GPU_CORES"
$G python3 -m pytest -m cuda -q -rs -p no:cacheprovider tests/cuda/test_cuda_ragged.py \
    tests/cuda/test_cuda_sparse_pieces.py tests/cuda/test_cuda_sparse_torch.py tests/cuda/test_cuda_sparse_ops.py 2>&1 | tee "$OUT/pytest_sparse.log" | tail -15
# the ragged family of the GPU schedule fuzzer, on the GPU (a short run)
$G timeout 60 python3 tests/cuda/gpu_fuzz.py --cases 300 --seed 16 --families ragged --gpu --jobs 8 --max-seconds 30 \
    2>&1 | tail -4 | tee "$OUT/fuzz_ragged_gpu.log"
for scale in ${SPARSE_SCALES:-0.1 1}; do
    $G python3 bench/sparse_cuda.py --scale "$scale" --widths ${SPARSE_WIDTHS:-32 128} --jobs 12 2>&1 \
        | grep -v -e "UserWarning" -e "tA = torch.sparse_csr_tensor" | tee "$OUT/sparse_cuda_scale$scale.log"
done
if [ "${SPARSE_OPS:-1}" = 1 ]; then
    $G python3 bench/sparse_ops_cuda.py --jobs 12 2>&1 | tee "$OUT/sparse_ops_cuda.log"
fi
[ -n "$CPU_PID" ] && wait "$CPU_PID"
echo "==== summary ($(( $(date +%s) - T )) s) ===="
tail -1 "$OUT/pytest_sparse.log"
tail -1 "$OUT/fuzz_ragged_gpu.log"
grep -H RESULT "$OUT"/sparse_cuda_scale*.log "$OUT"/sparse_ops_cuda.log
[ -n "$CPU_PID" ] && grep -H -e "^== " -e "best tilecraft / best reference" "$OUT/sparse_cpu_full.log"
[ -n "$CPU_PID" ] && grep -H RESULT "$OUT/sparse_ops_cpu.log"
true
