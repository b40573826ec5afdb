#!/usr/bin/env bash
# session 23 final 3: relay on the CPU (ResNet-18 on cores 0,1; BERT on cores 2,3), relay on CUDA (cores 4-15, the GPU)
source .device/install.sh || exit 1
mkdir -p $OUT/f3
uptime > $OUT/f3/uptime_start.txt
( CORES=0,1 MODELS=resnet18 R18_TUNE_S=150 SPIN=1 timeout 330 bash bench/relay_cpu_quiet.sh $OUT/f3/rn18 > $OUT/f3/rn18.out 2>&1; echo "rn18 rc=$?" >> $OUT/f3/rn18.out ) &
( CORES=2,3 MODELS=bert BERT_TUNE_S=120 timeout 330 bash bench/relay_cpu_quiet.sh $OUT/f3/bert > $OUT/f3/bert.out 2>&1; echo "bert rc=$?" >> $OUT/f3/bert.out ) &
( cd bench && taskset -c 4-15 timeout 220 python3 relay_cuda.py --models bert:1:fp16,resnet50:1:fp16,resnet50:32:fp16 --compile --cuda-graph --profile 6 --repeat 3 --number 10 > $OUT/f3/relay_cuda_fp16.out 2>&1; echo "rc=$?" >> $OUT/f3/relay_cuda_fp16.out
  taskset -c 4-15 timeout 60 python3 relay_cuda.py --models resnet50:32:fp16 --nchw-pool --repeat 3 --number 10 > $OUT/f3/relay_cuda_nchwpool.out 2>&1; echo "rc=$?" >> $OUT/f3/relay_cuda_nchwpool.out
  taskset -c 4-15 timeout 60 python3 relay_cuda.py --models resnet50:32:tf32,resnet50:1,bert:1 --cuda-graph --repeat 3 --number 10 > $OUT/f3/relay_cuda_fp32.out 2>&1; echo "rc=$?" >> $OUT/f3/relay_cuda_fp32.out
  taskset -c 4-15 timeout 150 python3 relay_cuda.py --models resnet50:32:fp16 --trials 48 --min-trials 2 --log $OUT/f3/tune_r50_b32_fp16.jsonl --repeat 3 --number 10 > $OUT/f3/relay_cuda_tuned.out 2>&1; echo "rc=$?" >> $OUT/f3/relay_cuda_tuned.out ) &
( cd bench && sleep 5 && taskset -c 4-15 timeout 120 python3 relay_compile.py > $OUT/f3/relay_compile.out 2>&1; echo "rc=$?" >> $OUT/f3/relay_compile.out ) &
wait
uptime > $OUT/f3/uptime_end.txt
cat $OUT/f3/rn18/summary.txt $OUT/f3/bert/summary.txt 2>/dev/null | grep -i "time per\|rc=\|records" | tail -20
for f in $OUT/f3/relay_cuda_*.out; do echo "== $f"; grep -v "^ \{4,\}[0-9.]* us" $f | grep -i "x eager\|compile\|rc=\|Error\|untuned\|tuned" | tail -8; done
tail -12 $OUT/f3/relay_compile.out
tar czf $OUT/f3.tgz -C $OUT f3 && rm -rf $OUT/f3
