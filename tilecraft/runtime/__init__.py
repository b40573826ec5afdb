"""tilecraft's runtime: devices, arrays, compiled modules, timing and the CPU thread pool.

>>> import numpy as np
>>> from tilecraft import runtime
>>> a = runtime.nd.array(np.ones(3, "float32"), runtime.cpu(0))
>>> a.shape
(3,)
"""
from . import nd
from .device import Device, cpu, cuda, device
from .module import Function, Module, load_module
from .ndarray import NDArray
from .signature import FuncSignature, ParamSpec
from .threads import get_num_threads, set_num_threads
from .timing import ProfileResult


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
