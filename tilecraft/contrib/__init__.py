"""TVM's ``tvm.contrib`` names: ``cc`` (``create_shared``), ``clang`` (C to LLVM IR for ``pragma import_llvm``), ``utils``
(``tempdir``), ``cblas`` (matrix products as extern stages calling packed functions),
``graph_executor`` (run a model built by ``relay.build``), ``nvcc`` (``have_tensorcore``) and ``tedd``
(DOT views of a schedule);
each loads on first use (``from tilecraft.contrib import graph_executor`` or
``tc.contrib.graph_executor``)."""

_LAZY = ("cc", "clang", "utils", "cblas", "graph_executor", "nvcc", "tedd")


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'tilecraft.contrib' has no attribute {name!r}")
