#!/usr/bin/env bash
# One device call for the H100 ground truth (issue 13): the conv2d CUDA layer's table
# (conv2d_128_cuda_sub: 1x128x28x28, 3x3, 938 configs, built and timed in 2 passes) and the
# second timing pass of the SGEMM 1024^3 table (pass 1 taken from bench/ground_truth/h100/),
# within 8 minutes (TOTAL=440 s of runs; unpacking and the tarball take the rest), builders and timers on CPUs 2-15. Writes the tables, logs and a tarball of
# every cubin built ($OUT/cubins_h100.tar.xz, nvcc's cache keyed by source hash) to $OUT.
#
#     source .device/install.sh && bash bench/ground_truth_h100.sh
#
# While the GPU times the conv2d configs, the SGEMM configs are built beside it (`--build-only`,
# nice 19); then the SGEMM run times pass 2 as its libraries appear. A cubin tarball found at
# $CUBINS (default bench/ground_truth/h100/cubins_h100.tar.xz) is unpacked into the nvcc cache
# first: its configs then build in about 0.5 s (lowering only) instead of 2-4 s, so a later call
# can finish what this one did not. The same code must build them (the source hash is the key).
# A conv2d table at $CONV_TABLE (default bench/ground_truth/h100/$CONV.jsonl.gz) is resumed; the
# final call times it a third time for up to CONV_LIMIT (75) s, then gives the rest to the SGEMM.
# Tables are exported with `--figure min` (a config's fastest pass): other work on the same GPU
# time-slices with the kernel timed and doubles its time, never halves it (the mid-session run,
# with other jobs on the GPU: pass 2 / pass 1 ratios at 1.0 or 2.0, little between). The status counts the cubins this call's nvcc built (misses of
# the tarball: another nvcc version or other source gives other keys).
# MODE=mid: the same in about 3.5 minutes (a rehearsal: partial tables). CONV, SGEMM, SGEMM_TABLE,
# CONV_TABLE, CACHE (the cache folder) change what it runs (the tests run it on the 4-config smoke space).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
MODE=${MODE:-final}
CPUS=${CPUS:-2-15}
CUBINS=${CUBINS:-bench/ground_truth/h100/cubins_h100.tar.xz}
CONV=${CONV:-conv2d_128_cuda_sub}
SGEMM=${SGEMM:-sgemm1024_cuda}
SGEMM_TABLE=${SGEMM_TABLE:-bench/ground_truth/h100/sgemm1024_cuda.jsonl.gz}
CONV_TABLE=${CONV_TABLE-bench/ground_truth/h100/$CONV.jsonl.gz}   # resumed where it exists ('' : start afresh)
CACHE=${CACHE:-bench/ground_truth/.cache}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
START=$(date +%s)
if [ "$MODE" = mid ]; then TOTAL=${TOTAL:-195}; CONV_LIMIT=${CONV_LIMIT:-120}; CONV_PASSES=${CONV_PASSES:-2}
else TOTAL=${TOTAL:-440}; CONV_LIMIT=${CONV_LIMIT:-75}; CONV_PASSES=${CONV_PASSES:-3}; fi
left() { echo $(( TOTAL - ($(date +%s) - START) )); }
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
GT="python3 bench/ground_truth.py --root $CACHE"
export XDG_CACHE_HOME=$CACHE/xdg      # nvcc's cubin cache for this run only
mkdir -p "$XDG_CACHE_HOME/tilecraft/cuda"
if [ -f "$CUBINS" ]; then
    tar -C "$XDG_CACHE_HOME/tilecraft" -xJf "$CUBINS" && echo "unpacked $(find "$XDG_CACHE_HOME/tilecraft/cuda" -name '*.cubin' | wc -l) cubins from $CUBINS"
fi
touch "$CACHE/unpacked_marker"       # cubins newer than this were built by this call's nvcc (cache misses)
CONV_RESUME=()
if [ -n "$CONV_TABLE" ] && [ -f "$CONV_TABLE" ]; then CONV_RESUME=(--resume "$CONV_TABLE"); fi
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv; nvcc --version | tail -2;
  nproc; uptime; git log --oneline -1; } > "$OUT/host_before.txt" 2>&1

# SGEMM configs built beside the conv2d run (lower priority), killed when the conv2d run ends
$GT run --gpu "$SGEMM" --build-only --passes 2 --cpus "$CPUS" --jobs 14 --time-limit "$(left)" \
    > "$OUT/prebuild_$SGEMM.log" 2>&1 &
PREBUILD=$!
$GT run --gpu "$CONV" --passes "$CONV_PASSES" "${CONV_RESUME[@]}" --cpus "$CPUS" --jobs 13 --time-limit "$CONV_LIMIT" \
    --export --figure min --out "$OUT" 2>&1 | tee "$OUT/ground_truth_$CONV.log"
kill -TERM "$PREBUILD" 2>/dev/null; wait "$PREBUILD"
$GT run --gpu "$SGEMM" --passes 2 --resume "$SGEMM_TABLE" \
    --cpus "$CPUS" --jobs 13 --time-limit "$(left)" --export --figure min --out "$OUT" 2>&1 | tee "$OUT/ground_truth_$SGEMM.log"
for s in "$CONV" "$SGEMM"; do
    $GT status "$s" >> "$OUT/status.txt" 2>&1
    mkdir -p "$OUT/cache_$s"
    cp "$CACHE/$s"/{meta.json,built.jsonl,timed.jsonl,resumed.jsonl} "$OUT/cache_$s/" 2>/dev/null
    gzip -f "$OUT/cache_$s/"*.jsonl 2>/dev/null
done
tar -C "$XDG_CACHE_HOME/tilecraft" -cf - cuda | xz -T14 -6 > "$OUT/cubins_h100.tar.xz"
echo "cubins: $(find "$XDG_CACHE_HOME/tilecraft/cuda" -name '*.cubin' | wc -l) in $(du -h "$OUT/cubins_h100.tar.xz" | cut -f1)," \
     "$(find "$XDG_CACHE_HOME/tilecraft/cuda" -name '*.cubin' -newer "$CACHE/unpacked_marker" | wc -l) of them built by this call's nvcc" | tee -a "$OUT/status.txt"
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv; uptime; } > "$OUT/host_after.txt" 2>&1
echo "total $(( $(date +%s) - START )) s" | tee -a "$OUT/status.txt"
exit 0
