#!/usr/bin/env bash
# The CPU micro-kernel and reduction figures on 2 pinned physical cores, measured from tuning logs
# made beforehand (no tuning here: bench/tune_micro.sh makes them). On the device host, from the
# repository root:
#     source .device/install.sh && bash bench/verify_micro.sh
#     LOGS=bench/results/verify_micro/logs bash bench/verify_micro.sh     # logs of a tune_micro.sh run
# Writes its logs under $OUT (default bench/results/verify_micro). At most 7.7 minutes (the sum of
# its timeouts, 460 s); prints, in order:
#   0. the AMX tests (run for real where the CPU has AMX: kernels, templates, the kept tile
#      configuration);
#   1. bench/cpu_kernel_probe.py at 2 threads: the core clock (alone and inside zmm / ymm FMA
#      loops), the FMA peak loops, hand-written asm fp32 tiles (broadcast vs embedded, unrolled,
#      each with its clock), our codegen's kernels alone, the AMX kernel in C and ours (tile
#      configuration per call or kept);
#   2. bench/cpu_gemm_anatomy.py at 2 threads: the FMA peak, each micro-kernel alone on
#      L1-resident panels, the GEMM loop nest on panels packed beforehand, the packing, the whole
#      templates (fp32; int8 VNNI and AMX, tile configuration per call or kept; conv2d int8) as
#      shares of the peak, the fastest of each family in $OUT/anatomy_best_*.json;
#   3. bench/cpu_microkernels.py: the best configs of $LOGS (fp32 GEMM, int8 GEMM on packed
#      weights, conv2d fp32 and int8) beside numpy / PyTorch (MKL, quantized Linear / Conv2d on
#      x86 and onednn) / the FMA peak, each contestant in its own process, at 2 threads (the
#      GEMMs also at 1).
# (The reductions, bench/cpu_reductions.py, are no longer part of it: the AMX tests alone took
# more than 40 s on the device host in session 22.)
set -u
OUT=${OUT:-bench/results/verify_micro}
LOGS=${LOGS:-bench/results/h100_2026-11-24_s21/micro/logs}    # session 21's 48-trial tuning on the device host
mkdir -p "$OUT"
# two distinct physical cores (the first CPU of each of the first two cores)
CPUS=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -u | head -2 | cut -d, -f1 | paste -sd,)
echo "pinned to CPUs $CPUS; measuring the best configs of $LOGS (no tuning)"; uptime
grep -o -w 'amx_[a-z0-9]*\|avx512_vnni\|avx512f' /proc/cpuinfo | sort | uniq -c | tee "$OUT/cpu_flags.txt"
lscpu > "$OUT/lscpu.txt"
ls -l "$LOGS"/microkernel_*.jsonl 2>&1 | sed 's/^/  /'
python3 -c "import torch; print('torch', torch.__version__, torch.backends.quantized.supported_engines)"
export TILECRAFT_NUM_THREADS=2
# 0. the AMX micro-kernels run exactly where the CPU has AMX (skipped, with the reason, where not)
( timeout 90 taskset -c "$CPUS" python3 -m pytest -q -rs -p no:cacheprovider tests/test_microkernel_amx.py \
    tests/test_cpu_kernel_probe.py 2>&1 | tee "$OUT/test_microkernel_amx.log" | tail -5 )
# 1. the clock and the kernels in hand-written assembly beside ours
( timeout 60 taskset -c "$CPUS" python3 bench/cpu_kernel_probe.py --threads 2 --rounds 3 2>&1 \
    | tee "$OUT/cpu_kernel_probe.log" | tail -80 )
# 2. where the GEMMs lose to the FMA peak (kernel alone / loop nest / packing / whole), 2 threads;
#    in two parts (each prints at its end: a time-out loses one part, not both)
( timeout 80 taskset -c "$CPUS" python3 bench/cpu_gemm_anatomy.py --threads 2 --rounds 3 --asm --only fp32 \
    --best "$OUT/anatomy_best_fp32.json" 2>&1 | tee "$OUT/cpu_gemm_anatomy_fp32.log" | tail -40 )
( timeout 95 taskset -c "$CPUS" python3 bench/cpu_gemm_anatomy.py --threads 2 --rounds 3 --only int8,conv8 \
    --best "$OUT/anatomy_best_int8.json" 2>&1 | tee "$OUT/cpu_gemm_anatomy_int8.log" | tail -30 )
# 3. the tuned templates beside numpy / PyTorch / the FMA peak: 2 threads (all four), 1 thread (the GEMMs)
( timeout 100 taskset -c "$CPUS" python3 bench/cpu_microkernels.py --threads 2 --rounds 7 --logs "$LOGS" 2>&1 \
    | grep -v -e 'Warning' -e 'qweight = ' | tee "$OUT/cpu_microkernels.log" | tail -50 )
( timeout 35 taskset -c "$CPUS" python3 bench/cpu_microkernels.py --threads 1 --only gemm,int8 --rounds 5 \
    --logs "$LOGS" 2>&1 | grep -v -e 'Warning' -e 'qweight = ' | tee "$OUT/cpu_microkernels_1thread.log" | tail -20 )
uptime
