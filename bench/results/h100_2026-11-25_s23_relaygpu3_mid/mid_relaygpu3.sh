#!/usr/bin/env bash
# relaygpu3 mid-session GPU run (issue 14: C API of exported CUDA models, NHWC pooling, tuning a
# model on the GPU). From the root of a copy of branch relaygpu3 (committed HEAD), after
# `source .device/install.sh`. <= 4 min wall, cores 2-15; the GPU is shared: timings indicative.
mkdir -p $OUT/relaygpu3
R=$OUT/relaygpu3
T="taskset -c 2-15"
git log --oneline -1 > $R/head.txt 2>&1
nvidia-smi --query-gpu=name,utilization.gpu --format=csv >> $R/head.txt 2>&1
# 1) the C API of an exported CUDA model: the C program on the GPU (a small CNN and ResNet-50 fp16
#    b2, bit for bit vs the Python executor, vs onnxruntime / torch) and the stand-in-driver tests (~45 s)
$T timeout 52 python3 -m pytest -q -rs -p no:cacheprovider tests/relay/test_model_capi_cuda.py > $R/tests.txt 2>&1
echo "tests rc=$?" >> $R/tests.txt
$T timeout 12 python3 examples/cuda_model_capi.py /tmp/capi_example >> $R/tests.txt 2>&1
echo "example rc=$?" >> $R/tests.txt
cd bench
# 2) ResNet-50 b32 fp16 with the pools in NCHW between transposes (the layout before this branch) (~35 s)
$T timeout 42 python3 relay_cuda.py --models resnet50:32:fp16 --nchw-pool --profile 6 --repeat 3 --number 10 > $R/r50_nchw_pool.txt 2>&1
echo "rc=$?" >> $R/r50_nchw_pool.txt
# 3) the same with NHWC pooling: timed untuned, then extract_from_program + tune_tasks (72 trials,
#    3 for each of the 24 tasks, builds in parallel on cores 2-15), built with the log, timed (<= 130 s)
$T timeout 130 python3 relay_cuda.py --models resnet50:32:fp16 --trials 72 --min-trials 3 --log $R/tune_r50_b32_fp16.jsonl --profile 6 --repeat 3 --number 10 > $R/r50_nhwc_tuned.txt 2>&1
echo "rc=$?" >> $R/r50_nhwc_tuned.txt
cd ..
tail -4 $R/tests.txt; grep -v "^ \{4,\}[0-9.]* us" $R/r50_nchw_pool.txt | tail -4; grep -v "^ \{4,\}[0-9.]* us" $R/r50_nhwc_tuned.txt | grep -v "^\[Task" | tail -6
