#!/usr/bin/env bash
# session 22 final: pytest -m cuda over the files holding cuda-marked tests, in $SHARDS parallel shards
# (greedy by test count), each shard on its own cores of 2-15.
source .device/install.sh || exit 1
SHARDS=${SHARDS:-4}; LIMIT=${LIMIT:-450}
mkdir -p $OUT/cuda
python3 -m pytest -m cuda --collect-only -q -p no:cacheprovider tests 2>/dev/null | grep '::' | cut -d: -f1 | sort | uniq -c | sort -rn > $OUT/cuda/files.txt
python3 - $SHARDS $OUT/cuda/files.txt > $OUT/cuda/shards.txt <<'PY'
import sys
n = int(sys.argv[1]); load = [0] * n; groups = [[] for _ in range(n)]
for line in open(sys.argv[2]):
    c, f = line.split(); k = load.index(min(load)); load[k] += int(c); groups[k].append(f)
for g in groups: print(" ".join(g))
PY
cores=(2-4 5-8 9-12 13-15)
s=0; pids=""
while read -r files; do
  ( taskset -c ${cores[$s]} timeout $LIMIT python3 -m pytest -m cuda -q -rs -p no:cacheprovider $files > $OUT/cuda/shard$s.log 2>&1; echo "rc=$?" >> $OUT/cuda/shard$s.log ) &
  pids="$pids $!"; s=$((s+1))
done < $OUT/cuda/shards.txt
wait $pids
echo "collected: $(awk '{s+=$1} END {print s}' $OUT/cuda/files.txt) tests in $(wc -l < $OUT/cuda/files.txt) files"
for s in $(seq 0 $((SHARDS-1))); do echo "shard $s: $(grep -E '(passed|failed|error)' $OUT/cuda/shard$s.log | tail -1) $(tail -1 $OUT/cuda/shard$s.log)"; done
grep -h "^FAILED\|^ERROR" $OUT/cuda/shard*.log | head -40
