#!/usr/bin/env bash
# session 21 final C: the rest of the cuda-marked tests (callB stopped at 63%, in test_hybrid_cuda) + bench/sparse_gpu.sh
source .device/install.sh || exit 1
set -o pipefail
timeout 250 python3 -m pytest -m cuda -q -p no:cacheprovider -rs tests/cuda/test_hybrid_cuda.py tests/cuda/test_tensorcore.py \
  tests/cuda/test_tensorcore_bf16.py tests/cuda/test_tensorcore_nn.py tests/cuda/test_tensorcore_template.py \
  tests/cuda/test_tensorcore_wgmma.py tests/relay/test_relay_cuda.py tests/schedule/test_loop_partition.py \
  tests/test_intrinsics_table.py tests/test_tvm_scripts.py 2>&1 | tee $OUT/pytest_cuda_rest.log | tail -8
OUT=$OUT/sparse timeout 280 bash bench/sparse_gpu.sh > $OUT/sparse_gpu.out 2>&1; echo "sparse rc=$?"
tail -40 $OUT/sparse_gpu.out
tar czf $OUT/sparse.tgz -C $OUT sparse 2>/dev/null; rm -rf $OUT/sparse
