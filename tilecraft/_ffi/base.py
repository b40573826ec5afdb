"""TVM's ``tvm._ffi.base.TVMError``: ``tilecraft.error.TVMError`` (the same class)."""
from tilecraft.error import TVMError  # noqa: F401
