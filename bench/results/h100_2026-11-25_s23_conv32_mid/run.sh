#!/bin/bash
# conv32 mid-session run, second batch (H100, <= 4 min wall, cores 2-15; branch conv32 HEAD 726fc15 or later):
# the Winograd conv's GPU tests, its GEMM-tile variants (F(2x2), F(4x4)) beside the tuned direct kernel and
# cuDNN (TF32 off) at ResNet-50's 3x3 layers at batch 32, and three 40-trial tuning runs of
# topi/conv2d_nchw_winograd.cuda (256@14 F(2x2) and F(4x4), 128@28 F(4x4): the layers below 0.8x).
# Other branches share the GPU: timings are indicative. PYTHONPATH is left as mid.sh sets it.
# Run from the root of a copy of branch conv32 after `source .device/install.sh`.
O=$OUT/conv32; mkdir -p $O/logs
T="taskset -c 2-15"
nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv > $O/gpu.txt 2>&1
python3 -c 'import tilecraft, pycuda, xgboost; print(tilecraft.__file__)' > $O/env.txt 2>&1
timeout 25 $T python3 -u -m pytest -q -p no:cacheprovider -m cuda tests/cuda/test_conv2d_winograd.py -k gpu > $O/pytest.log 2>&1
timeout 30 $T python3 -u bench/cuda_conv2d.py --batch 32 --layer 256@14 --repeat 5 \
  --variants tuned256_b32,wino_b64,wino_b128x64,wino_b64x128,wino4_b64,wino4_b128x64 > $O/b32_256.log 2>&1
timeout 55 $T python3 -u bench/tune_cuda.py --only conv --batch 32 --layers c256 --winograd 2 --conv-trials 40 \
  --parallel 14 --repeat 5 --log-dir $O/logs > $O/tune_wino2_c256.log 2>&1
timeout 55 $T python3 -u bench/tune_cuda.py --only conv --batch 32 --layers c256 --winograd 4 --conv-trials 40 \
  --parallel 14 --repeat 5 --log-dir $O/logs > $O/tune_wino4_c256.log 2>&1
timeout 55 $T python3 -u bench/tune_cuda.py --only conv --batch 32 --layers c128 --winograd 4 --conv-trials 40 \
  --parallel 14 --repeat 5 --log-dir $O/logs > $O/tune_wino4_c128.log 2>&1
timeout 15 $T python3 -u bench/cuda_conv2d.py --batch 32 --layer 512@7 --repeat 5 \
  --variants wino_b64,wino_b128x64,wino4_b64 > $O/b32_512.log 2>&1
ls -la $O $O/logs > $O/files.txt
