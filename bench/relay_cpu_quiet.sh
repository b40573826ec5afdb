#!/usr/bin/env bash
# Quiet CPU figures of the graph level: ResNet-18 (batch 1) and a BERT-base encoder layer (seq 128)
# against onnxruntime and PyTorch eager, 2 threads pinned to two physical cores, untuned and after
# a tuning run of a stated budget (cut at BERT_TUNE_S = 150 s for BERT, R18_TUNE_S = 75 s for
# ResNet-18: the records measured by then count; env.txt says how many). Each run prints its
# per-kernel profile (FLOPs, GFLOP/s, the ideal time at onnxruntime's GEMM rate) and
# onnxruntime's own. One command, at most 8.5 minutes:
#
#     bash bench/relay_cpu_quiet.sh [OUTDIR]          # default bench/results/relay_cpu_quiet_<date>
#
# Environment: CORES (or CPUS; default: two CPUs of this process's affinity, distinct physical
# cores: 0,1 on the device host), MODELS ("bert resnet18": the models to run), BERT_TRIALS (200),
# R18_TRIALS (150), BERT_TUNE_S (150), R18_TUNE_S (75; 0 skips tuning that model), REPEAT (7),
# VARIANTS (1: also the BERT layer without FuseAttention, untuned: the attention as batch
# matmuls, a softmax and per-head copies), SPIN (1: also the tuned BERT and ResNet-18 builds with
# GOMP_SPINCOUNT=10000). Needs onnx and onnxruntime (torch for the eager column; skipped without it).
# The BERT part alone (about 5 minutes): MODELS=bert bash bench/relay_cpu_quiet.sh OUTDIR
# Writes OUTDIR/{env.txt, bert_untuned.log, bert_nofuse.log, bert_tune.log, bert_tuned.log,
# bert_tuned_spin.log, resnet18_untuned.log, resnet18_tune.log, resnet18_tuned.log, resnet18_tuned_spin.log, summary.txt}
# and the tuning logs OUTDIR/{bert,resnet18}.jsonl (a second run resumes them: nothing is
# measured again).
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
OUT_DIR=${1:-bench/results/relay_cpu_quiet_$(date +%Y-%m-%d)}
mkdir -p "$OUT_DIR"
CPUS=${CORES:-$CPUS}
if [ -z "$CPUS" ]; then   # two CPUs of this process's affinity on different physical cores
    CPUS=$(python3 - <<'PY'
import os, subprocess
aff = sorted(os.sched_getaffinity(0))
core = {}
for line in subprocess.run(["lscpu", "-p=CPU,CORE"], capture_output=True, text=True).stdout.splitlines():
    if line and not line.startswith("#"):
        c, k = line.split(",")[:2]
        core[int(c)] = k
pick, seen = [], set()
for c in aff:
    if core.get(c, c) not in seen and len(pick) < 2:
        pick.append(c)
        seen.add(core.get(c, c))
print(",".join(map(str, (pick + aff)[:2])))
PY
)
fi
MODELS=${MODELS:-bert resnet18}
want() { [[ " $MODELS " == *" $1 "* ]]; }
BERT_TRIALS=${BERT_TRIALS:-200}
R18_TRIALS=${R18_TRIALS:-150}
REPEAT=${REPEAT:-7}
BERT_TUNE_S=${BERT_TUNE_S:-150}
R18_TUNE_S=${R18_TUNE_S:-75}
VARIANTS=${VARIANTS:-1}
SPIN=${SPIN:-1}
export TILECRAFT_NUM_THREADS=2 OMP_NUM_THREADS=2
{
    date -u; git rev-parse --short HEAD 2>/dev/null
    lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|Flags" | cut -c1-160
    echo "pinned to CPUs $CPUS; MODELS=$MODELS; BERT_TRIALS=$BERT_TRIALS (cut at ${BERT_TUNE_S} s) R18_TRIALS=$R18_TRIALS (cut at ${R18_TUNE_S} s) REPEAT=$REPEAT"; uptime
    python3 -m pip list 2>/dev/null | grep -i -E "^(onnx|onnxruntime|torch|numpy|llvmlite) "
} > "$OUT_DIR/env.txt" 2>&1
if ! python3 -c "import onnx, onnxruntime" 2>/dev/null; then
    echo "relay_cpu_quiet: onnx and onnxruntime are needed (pip install onnx onnxruntime)" | tee -a "$OUT_DIR/env.txt"
    exit 2
fi
TORCH=""; python3 -c "import torch" 2>/dev/null || TORCH="--no-torch"
run() {   # name, seconds, bench arguments...
    local name=$1 limit=$2; shift 2
    [[ " $MODELS " == *" ${name%%_*} "* ]] || return 0
    ( cd bench && timeout "$limit" taskset -c "$CPUS" python3 "$@" --threads 2 --repeat "$REPEAT" $TORCH ) \
        > "$OUT_DIR/$name.log" 2>&1
    echo "$name: rc=$? ($(uptime | sed 's/.*load/load/'))" >> "$OUT_DIR/env.txt"
}
ABS=$(cd "$OUT_DIR" && pwd)
if want bert; then
run bert_untuned 50 relay_bert.py --profile 16 --alone
[ "$VARIANTS" = 1 ] && run bert_nofuse 30 relay_bert.py --profile 12 --no-torch --disable-pass FuseAttention
# tuning is cut by its time limit (the log keeps every measurement); the tuned run measures what it holds
if [ "$BERT_TUNE_S" -gt 0 ]; then
    run bert_tune "$BERT_TUNE_S" relay_bert.py --tune-only --trials "$BERT_TRIALS" --log "$ABS/bert.jsonl"
    echo "bert.jsonl: $(wc -l < "$ABS/bert.jsonl" 2>/dev/null) records" >> "$OUT_DIR/env.txt"
    run bert_tuned 40 relay_bert.py --profile 16 --no-torch --log "$ABS/bert.jsonl"
    # the tuned build again with libgomp's idle threads spinning briefly between kernels (tilecraft's
    # default lets them sleep, for shared machines; onnxruntime's pool spins during a run)
    [ "$SPIN" = 1 ] && GOMP_SPINCOUNT=10000 run bert_tuned_spin 25 relay_bert.py --profile 4 --no-torch --log "$ABS/bert.jsonl"
fi
fi
if want resnet18; then
run resnet18_untuned 50 relay_resnet18.py --profile 12
if [ "$R18_TUNE_S" -gt 0 ]; then
    run resnet18_tune "$R18_TUNE_S" relay_resnet18.py --tune-only --trials "$R18_TRIALS" --log "$ABS/resnet18.jsonl"
    echo "resnet18.jsonl: $(wc -l < "$ABS/resnet18.jsonl" 2>/dev/null) records" >> "$OUT_DIR/env.txt"
    run resnet18_tuned 45 relay_resnet18.py --no-torch --profile 12 --log "$ABS/resnet18.jsonl"
    [ "$SPIN" = 1 ] && GOMP_SPINCOUNT=10000 run resnet18_tuned_spin 35 relay_resnet18.py --profile 4 --no-torch --log "$ABS/resnet18.jsonl"
fi
fi
for f in bert_untuned bert_nofuse bert_tune bert_tuned bert_tuned_spin resnet18_untuned resnet18_tune resnet18_tuned resnet18_tuned_spin; do
    [ -f "$OUT_DIR/$f.log" ] && grep -h -E "^(tuning|time per inference|PyTorch eager|BERT|ResNet)" "$OUT_DIR/$f.log"
done > "$OUT_DIR/summary.txt"
grep -h -E "rc=|records" "$OUT_DIR/env.txt" >> "$OUT_DIR/summary.txt"
cat "$OUT_DIR/summary.txt"
