"""TVM's ``tvm.contrib`` names: ``clang`` (C to LLVM IR for ``pragma import_llvm``),
``utils`` (``tempdir``), ``cblas`` (matrix products as extern stages calling packed functions)
and ``nvcc`` (``have_tensorcore``)."""
