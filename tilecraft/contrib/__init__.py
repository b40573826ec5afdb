"""TVM's ``tvm.contrib`` names: ``clang`` (C to LLVM IR for ``pragma import_llvm``),
``utils`` (``tempdir``) and ``cblas`` (matrix products as extern stages calling packed functions)."""
