"""The LLVM JIT: IR text → optimised module → machine code, made on first use.

:func:`compile_llvm` ``(source, lazy=False) -> Module`` parses and optimises the text of an
:class:`LLVMSource` (what :func:`~tilecraft.codegen.llvm.codegen_llvm` emits) once;
:class:`LLVMArtifact` keeps the optimised module and makes machine code from it when it is
needed: MCJIT on the first call, ``get_function`` or timing, an object file for
``export_library``.

>>> mod = compile_llvm(codegen_llvm([func]))      # mod(a, b, c)
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from .llvm_calls import check_externs, link_imports
from .llvm_parallel import THREADS_GLOBAL
from .llvm_status import jit_error_message, jit_error_support
from .llvm_target import LLVMOptions, _cached_target_machine, _llvm, optimize, target_machine
from .llvm_types import CodegenError


@dataclass(frozen=True)
class LLVMSource:
    """The output of :func:`codegen_llvm`: module text plus what the runtime needs to call it."""
    text: str
    signatures: tuple
    options: LLVMOptions
    entry_name: str
    has_parallel: bool
    can_fail: bool = False         # some function has a failure point (see llvm_status.py)
    imports: tuple = ()            # LLVM IR texts to link in (pragma import_llvm; llvm_calls.py)
    externs: tuple = ()            # C symbols called (call_extern), resolved at JIT time


class LLVMArtifact:
    """The optimised LLVM module behind a :class:`~tilecraft.runtime.Module` built by this
    backend, and the machine code made from it on demand.

    The IR is parsed and optimised once, when the module is built, with the position-independent
    target machine that exported libraries need. Code generation waits until it is needed and
    starts from that optimised module: MCJIT compiles it on the first call, ``get_function``
    lookup or timing (with the JIT's own target machine: default relocations, large code model,
    so the code may be loaded anywhere), and ``export_library`` emits the object file from it.
    A module that is only exported, as the tuner's builder does, is optimised and compiled once.
    """

    def __init__(self, source: LLVMSource, optimized):
        self.source = source
        # Code generation rewrites the module it is given, and a copy (clone, bitcode or text)
        # loses LLVM's use-list order, which shifts register allocation a little. So the first
        # code generation gets the module as optimised (the code is then exactly what one
        # optimise-and-compile gives) and a copy is kept for a second one (JIT after export).
        self._fresh = optimized
        self._copy = None
        self._object: bytes | None = None
        self._engine = None
        self._ir_text: str | None = None
        self.has_parallel = source.has_parallel
        opts = source.options
        self.machine = {"triple": opts.triple, "cpu": opts.cpu, "features": opts.features}

    def _take_module(self):
        """An optimised module that code generation may consume (call with the lock held)."""
        if self._fresh is None:
            return self._copy.clone()
        mod, self._fresh = self._fresh, None
        self._copy = mod.clone()
        return mod

    def _unconsumed(self):
        return self._fresh if self._fresh is not None else self._copy

    def object_code(self) -> bytes:
        """The module as a position-independent object file (generated once, then kept)."""
        with _compile_lock:
            if self._object is None:
                tm = _cached_target_machine(self.source.options, "pic")
                self._object = tm.emit_object(self._take_module())
            return self._object

    @property
    def engine(self):
        """The MCJIT engine holding the JIT-compiled code; compiled on first use."""
        if self._engine is None:
            self._jit()
        return self._engine

    def function_address(self, name: str) -> int:
        return self.engine.get_function_address(name)

    def _jit(self) -> None:
        llvm = _llvm()
        with _compile_lock:
            if self._engine is not None:
                return
            if self.source.can_fail:        # its failure points call tilecraft_error_buffer()
                jit_error_support(llvm, target_machine(self.source.options))
            check_externs(self._unconsumed(), self.source.externs, self.source.entry_name)
            engine = llvm.create_mcjit_compiler(self._take_module(), target_machine(self.source.options))
            engine.finalize_object()
            if self.has_parallel:
                from ..runtime.threads import register_thread_count_cell
                register_thread_count_cell(self, engine.get_global_value_address(THREADS_GLOBAL))
            self._engine = engine

    def get_source(self, fmt: str = "ll") -> str:
        if fmt == "ll":
            with _compile_lock:
                if self._ir_text is None:
                    self._ir_text = str(self._unconsumed())
                return self._ir_text
        if fmt in ("ll-raw", "ll_raw"):
            return self.source.text
        if fmt in ("asm", "s"):      # for the JIT's target machine, from a copy of the module
            with _compile_lock:
                tm = _cached_target_machine(self.source.options, "default")
                return tm.emit_assembly(self._unconsumed().clone())
        raise ValueError(f"unknown source format {fmt!r}: expected 'll', 'll-raw', 'asm' or 'manifest'")

    def export_library(self, module, path: str) -> str:
        from .export import export_llvm
        return export_llvm(self, module, path)

    def save(self, module, path: str, fmt: str) -> str:
        """``mod.save``: an object file (``.o``, linkable by ``contrib.cc.create_shared``), the
        optimised LLVM IR (``.ll``) or assembly (``.s``)."""
        if fmt == "o":
            from .export import save_object
            return save_object(self, module, path)
        with open(path, "w") as f:
            f.write(self.get_source("ll" if fmt == "ll" else "asm"))
        return path


def parse_and_optimize(source: LLVMSource, tm):
    llvm = _llvm()
    try:
        mod = llvm.parse_assembly(source.text)
        mod.verify()
    except RuntimeError as e:
        raise CodegenError(f"LLVM rejected the generated IR: {e}\n--- IR ---\n{source.text}") from None
    mod.triple = source.options.triple
    mod.data_layout = str(tm.target_data)
    link_imports(llvm, mod, source.imports)
    optimize(mod, tm, source.options.opt_level)
    return mod


_compile_lock = threading.Lock()   # llvmlite parses into LLVM's global context: one build at a time


def compile_llvm(source: LLVMSource, lazy: bool = False):
    """Optimise and JIT-compile; returns a :class:`tilecraft.runtime.Module`. With ``lazy=True``
    (what :func:`build_llvm` does) only the optimisation happens now, and machine code is made
    when the module is first called or exported."""
    from functools import partial

    from ..runtime.module import Function, Module
    if source.has_parallel:
        from ..runtime.threads import libgomp_path
        libgomp_path()         # fail at build, not at the first call, when OpenMP is missing
    with _compile_lock:
        optimized = parse_and_optimize(source, _cached_target_machine(source.options, "pic"))
    artifact = LLVMArtifact(source, optimized)
    functions = {sig.name: Function(sig, partial(artifact.function_address, sig.name), keepalive=artifact,
                                    parallel=source.has_parallel, error_message=jit_error_message)
                 for sig in source.signatures}
    if not lazy:
        for f in functions.values():
            f.resolve()
    return Module(functions, source.entry_name, source.options.target, artifact)
