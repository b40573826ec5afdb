"""Ready operators and tuning templates: ``matmul``, ``batch_matmul``, ``conv2d``, ``softmax``
(each registers its ``llvm`` template with ``tilecraft.autotune``; ``matmul`` and ``conv2d_cuda``
register ``cuda`` ones)."""
from . import batch_matmul, conv2d, conv2d_cuda, matmul, softmax

__all__ = ["matmul", "batch_matmul", "conv2d", "conv2d_cuda", "softmax"]
