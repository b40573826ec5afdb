#!/usr/bin/env bash
# relaygpu2 mid-session GPU run (issue 14: fp16 relay on the GPU). From the root of a copy of branch
# relaygpu2 (committed HEAD), after `source .device/install.sh`. <= 4 min wall, cores 2-15.
# Other branches share the GPU: timings are indicative.
mkdir -p $OUT/relaygpu2
R=$OUT/relaygpu2
T="taskset -c 2-15"
git log --oneline -1 > $R/head.txt 2>&1
# 1) the cuda-marked fp16 tests: ResNet-50 (b2) and a BERT-base layer in fp16 vs torch .half() (~40 s)
$T timeout 50 python3 -m pytest -m cuda -q -rs -p no:cacheprovider tests/relay/test_relay_cuda_fp16.py > $R/tests.txt 2>&1
echo "tests rc=$?" >> $R/tests.txt
cd bench
# 2) fp16 ResNet-50 b32 and BERT-base fp16 vs eager and torch.compile, 6 slowest kernels (~110 s)
$T timeout 120 python3 relay_cuda.py --models bert:1:fp16,resnet50:32:fp16 --compile --cuda-graph --profile 6 --repeat 3 --number 10 > $R/fp16_compile.txt 2>&1
echo "rc=$?" >> $R/fp16_compile.txt
# 3) fp16 ResNet-50 b1 (no torch.compile) and fp32 b32 through TF32 tensor cores (eager with cudnn TF32 on and off) (~50 s)
$T timeout 60 python3 relay_cuda.py --models resnet50:1:fp16,resnet50:32:tf32 --cuda-graph --profile 6 --repeat 3 --number 10 > $R/b1_tf32.txt 2>&1
echo "rc=$?" >> $R/b1_tf32.txt
cd ..
tail -5 $R/tests.txt; grep -v "^ \{4,\}[0-9.]* us" $R/fp16_compile.txt | tail -8; grep -v "^ \{4,\}[0-9.]* us" $R/b1_tf32.txt | tail -8
