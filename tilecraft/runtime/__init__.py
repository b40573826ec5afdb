"""tilecraft's runtime: devices, arrays, compiled modules, timing and the CPU thread pool.

>>> import numpy as np
>>> from tilecraft import runtime
>>> a = runtime.nd.array(np.ones(3, "float32"), runtime.cpu(0))
>>> a.shape
(3,)
"""
from . import nd
from .device import Device, cpu, cuda, device
from .module import Function, Module
from .module import load_module as _load_shared_library
from .ndarray import NDArray
from .signature import FuncSignature, ParamSpec
from .threads import get_num_threads, set_num_threads
from .timing import ProfileResult


def load_module(path):
    """Load a library written by ``export_library``: a shared library (CPU targets) or a CUDA
    module's archive (``target="cuda"``; the GPU is touched on the first call); or a CUDA module's
    ``.ptx`` / ``.cubin`` written by its ``save`` (TVM's way, with the ``.tvm_meta.json`` beside it).

    >>> # mod = tilecraft.runtime.load_module("ops.so"); mod(a, b, c)
    """
    import os
    from .cuda_runtime import is_cuda_library, load_cuda_module
    p = os.fspath(path)
    if os.path.isfile(p) and is_cuda_library(p):
        return load_cuda_module(p)
    if os.path.isfile(p) and os.path.splitext(p)[1].lower() in (".ptx", ".cubin"):
        from .cuda_files import load_cuda_image
        return load_cuda_image(p)
    return _load_shared_library(p)


def convert(value):
    """TVM's ``tvm.runtime.convert``: a Python value as IR: a number as a constant (``int`` →
    int32, ``float`` → float32, ``bool`` → bool), a string as a ``StringImm``, a list or tuple
    element by element (a tuple), an expression or a tensor as it is.

    >>> n = tilecraft.runtime.convert(1024)        # a constant extent: A = te.placeholder((n,))
    """
    from ..ir.expr import Expr, StringImm
    from ..ir.expr import convert as to_expr
    from ..te.tensor import Tensor
    if isinstance(value, (list, tuple)):
        return tuple(convert(v) for v in value)
    if isinstance(value, str):
        return StringImm(value)
    if isinstance(value, (Expr, Tensor)):       # a list of tensors: TVM's Array of them
        return value
    return to_expr(value)


def enabled(target) -> bool:
    """TVM's ``tvm.runtime.enabled``: whether this installation can run code for ``target``
    (``"llvm"``/``"cpu"``: always; ``"cuda"``/``"gpu"``: when pycuda is installed; whether a GPU
    is present is ``tilecraft.cuda(0).exist``); any other kind (``"opencl"``, ``"vulkan"``, ...)
    is False: tilecraft has no runtime for it (``"opencl"`` generates source only).

    >>> tilecraft.runtime.enabled("llvm")
    True
    """
    kind = str(target).split()[0] if str(target).strip() else ""
    if kind in ("llvm", "cpu"):
        return True
    if kind in ("cuda", "gpu"):
        import importlib.util
        return importlib.util.find_spec("pycuda") is not None
    return False


def version() -> str:
    """tilecraft's version (the installed distribution's, else the source tree's)."""
    try:
        from importlib.metadata import version as _v
        return _v("tilecraft")
    except Exception:
        return "0.1.0"


__all__ = ["Device", "cpu", "cuda", "device", "nd", "NDArray", "Function", "Module", "load_module",
           "FuncSignature", "ParamSpec", "get_num_threads", "set_num_threads", "ProfileResult",
           "version", "convert", "enabled"]
