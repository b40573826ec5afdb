"""TVM's ``tvm._ffi`` path, for scripts that catch ``tvm._ffi.base.TVMError`` (TVM's tests do):
tilecraft has no FFI; ``base.TVMError`` is ``tilecraft.error.TVMError``, the base of its errors.

    >>> import tilecraft as tvm
    >>> tvm._ffi.base.TVMError is tvm.error.TVMError
    True
"""
from . import base  # noqa: F401
