#!/usr/bin/env bash
# session 23 final 6: the final tree's tensor-core fallback/TMA tests, then `tilecraft tune` of the tensor-core
# GEMM with the fallback measured first (16 trials)
source .device/install.sh || exit 1
mkdir -p $OUT/f6
taskset -c 2-15 timeout 200 python3 -m pytest -m cuda -q -rs -p no:cacheprovider tests/cuda/test_tensorcore_wgmma_fallback.py tests/cuda/test_tensorcore_template.py tests/cuda/test_tensorcore_wgmma_tma.py > $OUT/f6/pytest.log 2>&1; echo "rc=$?" >> $OUT/f6/pytest.log
cd $OUT/f6 && taskset -c 2-15 timeout 200 python3 -m tilecraft tune matmul_tensorcore 4096 4096 4096 float16 float16 col_major --target cuda --trials 16 --tuner random --quiet > $OUT/f6/tune.log 2>&1; echo "rc=$?" >> $OUT/f6/tune.log
head -3 $OUT/f6/tuning_logs/*.jsonl | cut -c1-400 > $OUT/f6/first_records.txt 2>&1
tail -3 $OUT/f6/pytest.log; tail -12 $OUT/f6/tune.log
cd $OUT && tar czf f6.tgz f6 && rm -rf f6
