"""Ready operators and tuning templates: ``matmul``, ``attention``, ``batch_matmul``, ``conv2d``, ``softmax``,
``layer_norm``, ``pooling`` (``global_pool``), ``sparse`` (CSR SpMV/SpMM, SDDMM, segment sums,
embedding bags) (each registers its ``llvm`` template with ``tilecraft.autotune``; ``matmul``,
``conv2d_cuda`` and ``sparse_cuda`` register ``cuda`` ones); ``nn`` and ``transform``: the computes the
graph level (``tilecraft.relay``) fuses, with TVM's ``topi.nn.*`` / ``topi.*`` names."""
from . import (attention, batch_matmul, conv2d, conv2d_cuda, layer_norm, matmul, nn, pooling, softmax, sparse, sparse_cuda,
               transform)
from . import sparse_ops, sparse_ops_cuda        # SDDMM, segment sum / mean, embedding bag: schedules, templates
from . import conv2d_winograd_cuda              # Winograd F(m x m, 3x3) fp32 conv: topi/conv2d_nchw_winograd.cuda
from . import cuda, generic, testing, utils       # TVM's topi.cuda / topi.generic / topi.testing / topi.utils
from .transform import add, subtract, multiply, divide   # TVM's topi.add, ... (broadcasting)
from .transform import full, full_like                    # TVM's topi.full / topi.full_like
from .transform import elemwise_sum, max, mean, sum      # TVM's topi.elemwise_sum, topi.sum, ...  # noqa: A004

__all__ = ["matmul", "attention", "batch_matmul", "conv2d", "conv2d_cuda", "softmax", "layer_norm", "pooling", "sparse",
           "sparse_cuda", "sparse_ops", "sparse_ops_cuda", "nn", "transform"]
