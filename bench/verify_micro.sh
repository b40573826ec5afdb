#!/usr/bin/env bash
# The CPU micro-kernel and reduction figures on 2 pinned physical cores, measured from tuning logs
# made beforehand (no tuning here: bench/tune_micro.sh makes them). On the device host, from the
# repository root:
#     source .device/install.sh && bash bench/verify_micro.sh
#     LOGS=bench/results/verify_micro/logs bash bench/verify_micro.sh     # logs of a tune_micro.sh run
# Writes its logs under $OUT (default bench/results/verify_micro). At most 7 minutes (the sum of
# its timeouts, 420 s); prints, in order:
#   0. the AMX tests (run for real where the CPU has AMX: kernels, templates, the kept tile
#      configuration, C tiles zeroed in the tile registers, the requantized uint8 output);
#   1. bench/cpu_kernel_probe.py --only freq: the core clock (a dependent add chain alone and
#      inside zmm / ymm FMA loops) and the FMA peak loops at 1 and 2 threads: whether the 2-core
#      FMA loop runs at a lower clock (its hand-written kernels: `python3 bench/cpu_kernel_probe.py
#      --threads 2`, session 22's logs);
#   2. bench/cpu_gemm_anatomy.py at 2 threads: the FMA peak, micro-kernels alone on L1-resident
#      panels, the GEMM loop nest on panels packed beforehand, the whole templates (fp32: a
#      selection of variants; int8 VNNI and AMX: C zeroed or loaded, the tile configuration per
#      call or kept, C blocks over the whole K; conv2d int8) as shares of the peak, the fastest
#      of each family in $OUT/anatomy_best_*.json;
#   3. bench/cpu_microkernels.py: the fp32 GEMM and int8 GEMM with the fastest anatomy variant of
#      step 2 (--knobs-from $OUT/anatomy_best.json: chosen among the named variants on this
#      host in this run; where step 2 timed out, the best configs of $LOGS), the conv2d fp32 and
#      int8 with the best configs of $LOGS, beside numpy / PyTorch (MKL, quantized Linear /
#      Conv2d on x86 and onednn) / the FMA peak, each contestant in its own process, at 2
#      threads (the GEMMs also at 1); int8 as int8q: requantized to uint8 as PyTorch's Linear's
#      output is (like with like; the int32-output GEMM is the anatomy's rows).
# (The reductions, bench/cpu_reductions.py, are no longer part of it: the AMX tests alone took
# more than 40 s on the device host in session 22.)
set -u
OUT=${OUT:-bench/results/verify_micro}
LOGS=${LOGS:-bench/results/h100_2026-11-24_s21/micro/logs}    # session 21's 48-trial tuning on the device host
mkdir -p "$OUT"
# two distinct physical cores (the first CPU of each of the first two cores)
CPUS=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -u | head -2 | cut -d, -f1 | paste -sd,)
echo "pinned to CPUs $CPUS; measuring the anatomy's fastest GEMM variants and the best configs of $LOGS (no tuning)"; uptime
grep -o -w 'amx_[a-z0-9]*\|avx512_vnni\|avx512f' /proc/cpuinfo | sort | uniq -c | tee "$OUT/cpu_flags.txt"
lscpu > "$OUT/lscpu.txt"
ls -l "$LOGS"/microkernel_*.jsonl 2>&1 | sed 's/^/  /'
python3 -c "import torch; print('torch', torch.__version__, torch.backends.quantized.supported_engines)"
export TILECRAFT_NUM_THREADS=2
# 0. the AMX micro-kernels run exactly where the CPU has AMX (skipped, with the reason, where not)
( timeout 85 taskset -c "$CPUS" python3 -m pytest -q -rs -p no:cacheprovider tests/test_microkernel_amx.py \
    tests/test_cpu_kernel_probe.py -k "runs or zero or requant or probe" 2>&1 | tee "$OUT/test_microkernel_amx.log" | tail -5 )
# 1. the clock and the FMA loops at 1 and 2 threads
( timeout 30 taskset -c "$CPUS" python3 bench/cpu_kernel_probe.py --threads 1,2 --only freq --rounds 5 2>&1 \
    | tee "$OUT/cpu_kernel_probe_freq.log" | tail -20 )
# 2. where the GEMMs lose to the FMA peak (kernel alone / loop nest / packing / whole), 2 threads;
#    in two parts (each prints at its end: a time-out loses one part, not both)
( timeout 70 taskset -c "$CPUS" python3 bench/cpu_gemm_anatomy.py --threads 2 --rounds 3 --asm --only fp32 \
    --match '^kernel (8x32|6x64|12x32|14x32) u.$|er-tuned|s21-tuned|kc512|kc1024|padded kc128$|c_block$|14x32 padded$' \
    --best "$OUT/anatomy_best_fp32.json" 2>&1 | tee "$OUT/cpu_gemm_anatomy_fp32.log" | tail -40 )
( timeout 100 taskset -c "$CPUS" python3 bench/cpu_gemm_anatomy.py --threads 2 --rounds 3 --only int8,conv8 \
    --match 'kernel|vnni|kept|conv' --best "$OUT/anatomy_best_int8.json" 2>&1 | tee "$OUT/cpu_gemm_anatomy_int8.log" | tail -45 )
python3 - "$OUT" <<'PY'
import json, os, sys
out, best = sys.argv[1], {}
for f in ("anatomy_best_fp32.json", "anatomy_best_int8.json"):
    if os.path.exists(os.path.join(out, f)):
        best.update({k: v for k, v in json.load(open(os.path.join(out, f))).items() if k in ("gemm", "int8")})
json.dump(best, open(os.path.join(out, "anatomy_best.json"), "w"))
print("step 3 measures the GEMMs with the anatomy's fastest variants:", best or "none (step 2 timed out): the logs'")
PY
# 3. the templates beside numpy / PyTorch / the FMA peak: 2 threads (all), 1 thread (the GEMMs)
( timeout 100 taskset -c "$CPUS" python3 bench/cpu_microkernels.py --threads 2 --rounds 5 --logs "$LOGS" \
    --only gemm,int8q,conv,conv8 \
    --knobs-from "$OUT/anatomy_best.json" 2>&1 | grep -v -e 'Warning' -e 'qweight = ' | tee "$OUT/cpu_microkernels.log" | tail -50 )
( timeout 35 taskset -c "$CPUS" python3 bench/cpu_microkernels.py --threads 1 --only gemm,int8q --rounds 3 \
    --logs "$LOGS" --knobs-from "$OUT/anatomy_best.json" 2>&1 | grep -v -e 'Warning' -e 'qweight = ' \
    | tee "$OUT/cpu_microkernels_1thread.log" | tail -25 )
uptime
