#!/usr/bin/env bash
# session 23 final 4: shard 2's cuda tests again (it stopped at the 256x128 setmaxnreg TMA test, fixed since), then the TMA GEMM bench
source .device/install.sh || exit 1
mkdir -p $OUT/f4
( taskset -c 2-7 timeout 300 python3 -m pytest -m cuda -q -rs -p no:cacheprovider tests/cuda/test_tensorcore_wgmma_tma.py tests/cuda/test_cuda_ragged.py tests/cuda/test_tensorcore_nn.py > $OUT/f4/shardA.log 2>&1; echo "rc=$?" >> $OUT/f4/shardA.log ) &
( taskset -c 8-15 timeout 300 python3 -m pytest -m cuda -q -rs -p no:cacheprovider tests/cuda/test_cuda_sparse_pieces.py tests/cuda/test_tensorcore_bf16.py tests/cuda/test_tensorcore_wgmma_fallback.py tests/cuda/test_tensorcore_template.py tests/cuda/test_cuda_int_division.py tests/cuda/test_emulator_math.py tests/te/test_hybrid_module.py > $OUT/f4/shardB.log 2>&1; echo "rc=$?" >> $OUT/f4/shardB.log ) &
wait
TMA=wgmma_128x256_s4_h_r8,wgmma_128x256_s4_tma_h_r8,wgmma_128x256_s4_tma_r_h_r8,wgmma_256x128_s4_tma_r_h_r8
TMA=$TMA,wgmma_128x256_s4_tma_p_h_r8,wgmma_128x128_s6_tma_p_h_r8,wgmma_128x128_s6_tma_h_r8,wgmma_tf32_128x256_s4_tma_r_r8
TMA=$TMA,wgmma_bf16_128x256_s4_tma_r_b_r8
cd bench && taskset -c 2-15 timeout 200 python3 cuda_tensorcore.py --triton --sizes 4096,8192 --variants $TMA --json $OUT/f4/tma.json > $OUT/f4/tma_bench.log 2>&1; echo "rc=$?" >> $OUT/f4/tma_bench.log
cd .. && tail -3 $OUT/f4/shardA.log $OUT/f4/shardB.log; grep -h "^FAILED\|^ERROR" $OUT/f4/shard*.log | head; grep -E "cuBLAS|TFLOP|rc=" $OUT/f4/tma_bench.log
tar czf $OUT/f4.tgz -C $OUT f4 && rm -rf $OUT/f4
