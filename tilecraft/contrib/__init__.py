"""TVM's ``tvm.contrib`` names: ``clang`` (C to LLVM IR for ``pragma import_llvm``) and
``utils`` (``tempdir``)."""
