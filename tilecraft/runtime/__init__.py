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
    module's archive (``target="cuda"``; the GPU is touched on the first call).

    >>> # mod = tilecraft.runtime.load_module("ops.so"); mod(a, b, c)
    """
    import os
    from .cuda_runtime import is_cuda_library, load_cuda_module
    p = os.fspath(path)
    if os.path.isfile(p) and is_cuda_library(p):
        return load_cuda_module(p)
    return _load_shared_library(p)


def version() -> str:
    """tilecraft's version (the installed distribution's, else the source tree's)."""
    try:
        from importlib.metadata import version as _v
        return _v("tilecraft")
    except Exception:
        return "0.1.0"


__all__ = ["Device", "cpu", "cuda", "device", "nd", "NDArray", "Function", "Module", "load_module",
           "FuncSignature", "ParamSpec", "get_num_threads", "set_num_threads", "ProfileResult",
           "version"]
