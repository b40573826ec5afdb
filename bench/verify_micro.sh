#!/usr/bin/env bash
# The CPU micro-kernel and reduction figures on 2 pinned physical cores, each contestant timed in
# its own process (bench/process_timing.py). On the device host, from the repository root:
#     source .device/install.sh && bash bench/verify_micro.sh
# Writes its logs under $OUT (default bench/results/verify_micro). About 7-8 minutes with TUNE=48
# on a 16-core Emerald Rapids host (at most 9.3: the sum of its timeouts); prints, in order:
#   0. the AMX tests (run for real where the CPU has AMX: kernels, templates, prefetching kernels);
#   1. bench/cpu_gemm_anatomy.py at 2 threads: the FMA peak, each micro-kernel alone on
#      L1-resident panels, the GEMM loop nest on panels packed beforehand, the packing alone, the
#      whole templates (fp32 and int8, VNNI and AMX variants) as shares of the peak, and the
#      fastest variant of each family (written to $OUT/anatomy_best.json);
#   2. bench/cpu_microkernels.py: the four templates tuned here (TUNE trials each, 2 threads; a new
#      log starts with the anatomy's named variants, so the tuned best is at least the best of them),
#      then beside numpy / PyTorch / the FMA peak at 2 threads (int8 with its weights packed
#      beforehand, as PyTorch's quantized Linear keeps them);
#   3. bench/cpu_reductions.py: softmax / layer norm / pooling beside PyTorch and the copy bandwidth.
set -u
OUT=${OUT:-bench/results/verify_micro}
TUNE=${TUNE:-48}
mkdir -p "$OUT/logs"
# two distinct physical cores (the first CPU of each of the first two cores)
CPUS=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -u | head -2 | cut -d, -f1 | paste -sd,)
echo "pinned to CPUs $CPUS; TUNE=$TUNE trials per template"; uptime
grep -o -w 'amx_[a-z0-9]*\|avx512_vnni\|avx512f' /proc/cpuinfo | sort | uniq -c | tee "$OUT/cpu_flags.txt"
lscpu > "$OUT/lscpu.txt"
python3 -c "import torch; print('torch', torch.__version__, torch.backends.quantized.supported_engines)"
export TILECRAFT_NUM_THREADS=2
# 0. the AMX micro-kernels run exactly where the CPU has AMX (skipped, with the reason, where not)
( timeout 60 python3 -m pytest -q -rs tests/test_microkernel_amx.py 2>&1 | tee "$OUT/test_microkernel_amx.log" | tail -5 )
# 1. where the GEMMs lose to the FMA peak (kernel alone / loop nest / packing / whole), 2 threads
( timeout 120 taskset -c "$CPUS" python3 bench/cpu_gemm_anatomy.py --threads 2 --rounds 3 --asm \
    --best "$OUT/anatomy_best.json" 2>&1 \
    | tee "$OUT/cpu_gemm_anatomy.log" | tail -40 )
# 2. the tensorized templates: tuned here (resuming $OUT/logs), then beside numpy / PyTorch / the FMA peak
( timeout 300 taskset -c "$CPUS" python3 bench/cpu_microkernels.py --tune "$TUNE" --threads 2 --logs "$OUT/logs" 2>&1 \
    | grep -v -e 'trial/s' -e 'Warning' -e 'qweight = ' | tee "$OUT/cpu_microkernels.log" | tail -45 )
# 3. softmax / layer norm / pooling beside PyTorch and the copy bandwidth
( timeout 80 taskset -c "$CPUS" python3 bench/cpu_reductions.py --repeat 7 2>&1 | tee "$OUT/cpu_reductions.log" | tail -20 )
uptime
