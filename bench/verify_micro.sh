#!/usr/bin/env bash
# The CPU micro-kernel and reduction figures on 2 pinned physical cores, each contestant timed in
# its own process (bench/process_timing.py). On the device host, from the repository root:
#     source .device/install.sh && bash bench/verify_micro.sh
# Writes its logs under $OUT (default bench/results/verify_micro). At most 9.6 minutes (its timeouts) with TUNE=64.
set -u
OUT=${OUT:-bench/results/verify_micro}
TUNE=${TUNE:-64}
mkdir -p "$OUT/logs"
# two distinct physical cores (the first CPU of each of the first two cores)
CPUS=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -u | head -2 | cut -d, -f1 | paste -sd,)
echo "pinned to CPUs $CPUS"; uptime
grep -o -w 'amx_[a-z0-9]*\|avx512_vnni\|avx512f' /proc/cpuinfo | sort | uniq -c | tee "$OUT/cpu_flags.txt"
lscpu > "$OUT/lscpu.txt"
python3 -c "import torch; print('torch', torch.__version__, torch.backends.quantized.supported_engines)"
export TILECRAFT_NUM_THREADS=2
# 0. the AMX micro-kernel run exactly where the CPU has AMX (skipped, with the reason, where not)
( timeout 60 python3 -m pytest -q -rs tests/test_microkernel_amx.py 2>&1 | tee "$OUT/test_microkernel_amx.log" | tail -5 )
# 1. the tensorized templates: tuned here (resuming $OUT/logs), then beside numpy / PyTorch / the FMA peak
( timeout 320 taskset -c "$CPUS" python3 bench/cpu_microkernels.py --tune "$TUNE" --logs "$OUT/logs" 2>&1 \
    | grep -v -e 'trial/s' -e 'Warning' -e 'qweight = ' | tee "$OUT/cpu_microkernels.log" | tail -45 )
# 2. softmax / layer norm / pooling beside PyTorch and the copy bandwidth
( timeout 150 taskset -c "$CPUS" python3 bench/cpu_reductions.py --repeat 9 2>&1 | tee "$OUT/cpu_reductions.log" | tail -20 )
# 3. the hand-scheduled GEMM of the README beside numpy
( timeout 45 taskset -c "$CPUS" python3 bench/cpu_gemm.py --skip-naive 2>&1 | tee "$OUT/cpu_gemm.log" )
uptime
