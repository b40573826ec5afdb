"""Model importers: ``from_onnx`` (ONNX) and ``from_torch`` (PyTorch, through ``torch.export``).
``from_pytorch`` (TVM's TorchScript importer) only says to call ``from_torch``."""
from .onnx import from_onnx
from .pytorch import from_pytorch, from_torch

__all__ = ["from_onnx", "from_pytorch", "from_torch"]
