"""TVM's ``tvm.contrib`` names: ``clang`` (C to LLVM IR for ``pragma import_llvm``), ``utils``
(``tempdir``) and ``nvcc`` (``have_tensorcore``)."""
