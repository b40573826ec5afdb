"""``build``: lower a schedule and generate code for a target, returning a runnable module.

>>> f = tilecraft.build(s, [A, B, C], target="llvm", name="vadd")
>>> f(a, b, c)
"""
from __future__ import annotations

from ..ir.stmt import PrimFunc
from ..schedule import Schedule, lower
from ..target import Target, TargetError
from ..error import TVMError


class BuildError(TVMError):
    """Code generation or compilation failed; the message says where."""


def build(inputs, args=None, target=None, target_host=None, name: str = "default_function", binds=None,
          print_ir: bool = False):
    """Compile a schedule (with its argument tensors) or an already lowered ``PrimFunc``.

    ``target`` is ``"llvm"`` (the host CPU with all its features; ``"llvm -mcpu=..."`` to
    choose), ``"cuda"``, ``"opencl"`` (OpenCL C source only: the module's ``get_source()``; calling
    it raises ``TargetError``, tilecraft has no OpenCL runtime), a :class:`Target`, or None for the current target (default ``llvm``).
    ``target_host`` (TVM's) must be None or an ``llvm`` target: tilecraft's host code is the CPU
    code itself (``llvm``) or Python (``cuda``, which launches the kernels through pycuda), so
    nothing else is compiled for it. ``binds`` is passed to :func:`~tilecraft.lower` (only None).
    A lowered function or module (``build(tilecraft.lower(s, args))``) keeps its name unless
    ``name`` is given, except ``"main"`` (``lower``'s default), which becomes ``name``'s default
    ``"default_function"``: the entry point of a C program cannot be a library's function.

    >>> f = tilecraft.build(s, [A, B, C], target="llvm", name="vadd")
    """
    if target is None:
        target = Target.current() or Target("llvm")
    tgt = Target(target)
    if target_host is not None:
        try:
            host = Target(target_host)
        except TargetError as e:
            raise BuildError(f"build: target_host: {e}") from None
        if host.kind != "llvm":
            raise BuildError(f"build: target_host must be an llvm target (the host is the CPU), got {str(host)!r}")
    if isinstance(inputs, Schedule):
        if args is None:
            raise BuildError("build(s, args): give the argument tensors, e.g. build(s, [A, B, C])")
        # OpenCL lowers as CUDA does (the same kernels); only the printed dialect differs
        kind = "cuda" if tgt.kind == "opencl" else tgt.kind
        func = lower(inputs, args, name=name, binds=binds, print_ir=print_ir, target=kind)
    elif isinstance(inputs, PrimFunc):        # an IRModule from lower() is one too
        if binds is not None:
            raise BuildError("build: binds applies to lowering a schedule; this function is lowered already")
        func = inputs
        # an explicit name renames it; so does build's default name a function lowered under
        # lower's default name, "main" (a library's "main" would be a C program's entry point)
        if name != func.name and (name != "default_function" or func.name == "main"):
            func = PrimFunc(name, func.params, func.body, func.attrs)
    else:
        raise BuildError(f"build expects a schedule or a lowered function, got {type(inputs).__name__}")
    if tgt.kind == "llvm":
        from .llvm import build_llvm
        return build_llvm([func], str(tgt))
    if tgt.kind == "cuda":
        from .cuda import build_cuda
        return build_cuda([func], tgt)
    if tgt.kind == "opencl":
        from .opencl import build_opencl
        return build_opencl([func], tgt)
    raise BuildError(f"no code generator for target {tgt}")
