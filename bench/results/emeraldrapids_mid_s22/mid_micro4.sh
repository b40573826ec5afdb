#!/usr/bin/env bash
# micro4 (issue 11) mid-session run on the device host's CPU (Emerald Rapids, AMX), from the repo root of
# branch micro4's committed HEAD after `source .device/install.sh`. No GPU used. Pinned to cores 0,1
# (`taskset -c 0,1`; relaycpu2 on 2,3, search4 on 4-15). At most ~8 minutes (timeouts sum to 465 s) (every step under `timeout`).
# Writes under $OUT/micro4/ (text only):
#   cpu.txt            uptime before/after, lscpu, flags, gcc version
#   pytest_amx.log     the AMX kernels' tests run for real (exact against numpy int64)
#   probe.log          bench/cpu_kernel_probe.py at 2 threads, kc 256 (probe_1thread.log: 1 thread, no AMX / codegen rows): the core clock by a dependent-add
#                      chain (alone, inside a zmm FMA loop, inside a ymm one), the zmm / ymm FMA peak loops,
#                      hand-written asm fp32 kernels (14x32 12x32 8x32 8x48 6x64 28x16 24x16; vbroadcastss vs
#                      embedded {1to16}; unroll 1/4; each also with the clock chain inside: the GHz it ran at;
#                      B 4K-aliased / misaligned / A prefetch), our codegen's kernels alone, the AMX kernel in C
#                      (cfg per call vs once, A in place vs packed, interleaved, C zeroed; kc 256/1024) and ours
#                      (LLVM's per-call config vs kept; A in place vs 64-K panels)
#   probe_kc128.log    the fp32 rows at kc 128 (L1 capacity), 2 threads
#   micro.log          bench/cpu_microkernels.py at 2 threads, each contestant in its own process, from session
#                      21's device-host tuning logs (no tuning here): fp32 GEMM 1024^3 vs OpenBLAS / MKL / the
#                      FMA peak, int8 GEMM vs torch quantized Linear (x86, onednn), conv2d int8 vs quantized Conv2d
#   anatomy_fp32.log   bench/cpu_gemm_anatomy.py --only fp32 at 2 threads: kernels alone, loop nest on packed
#                      panels, packing, whole GEMM variants incl. the new 48 KB L1 / 2 MB L2 blockings (--asm)
#   anatomy_int8.log   bench/cpu_gemm_anatomy.py --only int8,conv8 at 2 threads: VNNI / AMX kernels alone, whole dense_int8
#                      variants, AMX with the tile configuration per call (LLVM's) or kept across calls (new),
#                      A read in place or packed in the call into 64-K panels (new); conv2d int8 vector / AMX,
#                      AMX with the configuration per call or kept (new)
set -u
OUT=${OUT:-out}/micro4
mkdir -p "$OUT"
T="taskset -c 0,1"
export TILECRAFT_NUM_THREADS=2
git log --oneline -1 > "$OUT/commit.txt" 2>&1
{ uptime; lscpu; grep -o -w 'amx_[a-z0-9]*\|avx512_vnni\|avx512f' /proc/cpuinfo | sort | uniq -c; gcc --version | head -1; } > "$OUT/cpu.txt" 2>&1
timeout 40 $T python3 -m pytest -q -rs -p no:cacheprovider tests/test_microkernel_amx.py > "$OUT/pytest_amx.log" 2>&1
echo "rc=$?" >> "$OUT/pytest_amx.log"
timeout 90 $T python3 bench/cpu_kernel_probe.py --threads 2 --rounds 5 > "$OUT/probe.log" 2>&1
echo "rc=$?" >> "$OUT/probe.log"
timeout 30 $T python3 bench/cpu_kernel_probe.py --threads 1 --rounds 3 --only freq,fp32 --no-codegen > "$OUT/probe_1thread.log" 2>&1
echo "rc=$?" >> "$OUT/probe_1thread.log"
timeout 25 $T python3 bench/cpu_kernel_probe.py --threads 2 --only fp32 --kc 128 --rounds 2 --no-codegen > "$OUT/probe_kc128.log" 2>&1
echo "rc=$?" >> "$OUT/probe_kc128.log"
timeout 80 $T python3 bench/cpu_microkernels.py --threads 2 --only gemm,int8,conv8 --rounds 7 \
    --logs bench/results/h100_2026-11-24_s21/micro/logs 2>&1 | grep -v -e 'Warning' -e 'qweight = ' > "$OUT/micro.log"
echo "rc=${PIPESTATUS[0]}" >> "$OUT/micro.log"
timeout 90 $T python3 bench/cpu_gemm_anatomy.py --threads 2 --rounds 3 --asm --only fp32 > "$OUT/anatomy_fp32.log" 2>&1
echo "rc=$?" >> "$OUT/anatomy_fp32.log"
timeout 110 $T python3 bench/cpu_gemm_anatomy.py --threads 2 --rounds 3 --only int8,conv8 > "$OUT/anatomy_int8.log" 2>&1
echo "rc=$?" >> "$OUT/anatomy_int8.log"
uptime >> "$OUT/cpu.txt"
tail -n 8 "$OUT/pytest_amx.log"; cat "$OUT/probe.log" "$OUT/probe_1thread.log"; tail -n 30 "$OUT/probe_kc128.log" "$OUT/micro.log" "$OUT/anatomy_fp32.log" "$OUT/anatomy_int8.log"
