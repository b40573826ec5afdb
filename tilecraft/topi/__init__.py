"""Ready operators and tuning templates: ``matmul``, ``batch_matmul``, ``conv2d``, ``softmax``
(each registers its ``llvm`` template, and ``matmul`` a ``cuda`` one, with ``tilecraft.autotune``)."""
from . import batch_matmul, conv2d, matmul, softmax

__all__ = ["matmul", "batch_matmul", "conv2d", "softmax"]
