#!/usr/bin/env bash
# session 21 final D: relay cuda (tests + ResNet-50/BERT benches) on cores 2-15, CPU micro-kernels (verify_micro.sh) on cores 0,1
source .device/install.sh || exit 1
mkdir -p $OUT/relay_gpu $OUT/micro
( OUT=$OUT/micro timeout 545 bash bench/verify_micro.sh > $OUT/micro/verify_micro.out 2>&1; echo "micro rc=$?" >> $OUT/micro/verify_micro.out ) &
( cd bench && export T="taskset -c 2-15"
  $T timeout 60 python3 -m pytest -m cuda -q -rs -p no:cacheprovider ../tests/relay/test_relay_cuda.py 2>&1 | tail -3
  $T timeout 120 python3 relay_cuda.py --models resnet50:1,bert:1,resnet18:1 --cuda-graph --profile 4
  $T timeout 90 python3 relay_cuda.py --models resnet50:32 --cuda-graph --profile 4
  $T timeout 70 python3 relay_cuda.py --models resnet50:32 --batch-tiles-min-n 0 --profile 4
  $T timeout 90 python3 relay_cuda.py --models resnet50:1,resnet50:32 --cuda-graph --log results/cuda_tuning/cuda_conv2d_*.jsonl
  $T timeout 100 python3 relay_cuda.py --models resnet50:1 --compile ) > $OUT/relay_gpu/relay_gpu.out 2>&1
wait
grep -v "^ \{6,\}[0-9.]* us" $OUT/relay_gpu/relay_gpu.out | tail -40
echo "==== MICRO"; tail -45 $OUT/micro/verify_micro.out
tar czf $OUT/callD.tgz -C $OUT relay_gpu micro && rm -rf $OUT/relay_gpu $OUT/micro
