"""Model importers: ``from_onnx`` (ONNX). The ``torch.export`` path is a later part."""
from .onnx import from_onnx

__all__ = ["from_onnx"]
