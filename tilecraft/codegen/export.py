"""``Module.export_library(path)``: a shared library with one C entry point per function, a C
header next to it, and an embedded JSON manifest so ``tilecraft.runtime.load_module`` can rebuild
the checked Python callables in another process.

The module's object file (position-independent, generated once from the IR optimised at build
time, and shared with the JIT: see ``LLVMArtifact``) is linked with a one-symbol object holding the
manifest by ``$CC -shared`` (default ``gcc``), adding ``-lgomp`` when it has parallel loops. The
manifest is the NUL-terminated string ``const char tilecraft_manifest[]``; libraries with parallel
loops also export ``int32_t tilecraft_num_threads`` (0: OpenMP's default team size).

The library's SONAME is its file name, so a C program linked against it (``gcc main.c -I. -L.
-lops -Wl,-rpath,$PWD``, the line the header shows) finds it from any directory. Names have no
dots before the suffix; ``libNAME.so`` links with ``-lNAME`` (others with ``-l:file.so``).

The header, the destination checks and the re-export of a loaded library (no compiler needed)
are in ``tilecraft/runtime/library.py``.

>>> # mod.export_library("libops.so")      # writes libops.so and ops.h (ops_last_error())
>>> # m2 = tilecraft.runtime.load_module("libops.so"); m2(a, b, c)
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess

from ..runtime.library import ExportError, check_destination, header_path, library_stem, write_header
from ..runtime.module import MANIFEST_SYMBOL, manifest
from ..runtime.tempdirs import owned_temp_dir
from .llvm_status import getter_name


def _llvm_string(data: bytes) -> str:
    return "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}" for b in data)


def manifest_object(info: dict, options) -> bytes:
    """An object file defining ``const char tilecraft_manifest[]`` (the JSON of ``info``) and
    the error buffer with its getter ``info["error_getter"]`` (see ``llvm_status.py``)."""
    from .llvm_jit import _compile_lock
    from .llvm_target import _cached_target_machine, _llvm
    from .llvm_status import export_error_support_ir
    data = json.dumps(info, separators=(",", ":")).encode("utf-8") + b"\0"
    text = (f'target triple = "{options.triple}"\n'
            f'@{MANIFEST_SYMBOL} = constant [{len(data)} x i8] c"{_llvm_string(data)}", align 1\n'
            + export_error_support_ir(info["error_getter"]))
    with _compile_lock:
        tm = _cached_target_machine(options, "pic")
        mod = _llvm().parse_assembly(text)
        mod.data_layout = str(tm.target_data)
        return tm.emit_object(mod)


def blob_object(symbol: str, data: bytes, folder: str, cc: list) -> str:
    """An object file (assembled by ``cc``) defining ``const char symbol[]`` with ``data``,
    64-byte aligned: ``.incbin`` copies the bytes, so large weights cost no text."""
    raw = os.path.join(folder, f"{symbol}.bin")
    with open(raw, "wb") as f:
        f.write(data)
    asm = os.path.join(folder, f"{symbol}.S")
    with open(asm, "w") as f:
        f.write(f'.section .rodata\n.global {symbol}\n.balign 64\n{symbol}:\n.incbin "{raw}"\n'
                '.section .note.GNU-stack,"",@progbits\n')
    obj = os.path.join(folder, f"{symbol}.o")
    proc = subprocess.run(cc + ["-c", asm, "-o", obj], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ExportError(f"assembling the data of {symbol!r} failed: {proc.stderr}")
    return obj


def export_llvm(artifact, module, path: str, extra_info: dict | None = None, blobs: dict | None = None,
                c_sources: dict | None = None) -> str:
    """Write ``path`` (a shared library) and its header from an LLVM module's artifact.
    ``extra_info`` joins the manifest (the graph level puts its graph there), ``blobs``
    (symbol → bytes) become read-only data symbols (its weights) and ``c_sources`` (file name →
    C text) are compiled by ``$CC`` and linked in (a model's C API)."""
    path = check_destination(path)
    cc = shlex.split(os.environ.get("CC", "gcc"))
    if shutil.which(cc[0]) is None:
        raise ExportError(f"export_library links with a C compiler, but {cc[0]!r} was not found; "
                          "install gcc or set CC")
    from ..runtime.packed import SYMBOL as PACKED_SYMBOL
    if PACKED_SYMBOL in artifact.source.text:
        raise ExportError("export_library: the module calls packed Python functions (te.extern with "
                          "tir.call_packed), which run only in the Python process that built it; a "
                          "library cannot call them: keep the module in this process, or call a C "
                          "function (tir.call_extern) instead")
    info = dict(manifest(module), error_getter=getter_name(library_stem(path)),
                soname=os.path.basename(path), **(extra_info or {}))
    if info["error_getter"] in module.function_names:
        raise ExportError(f"export_library: the library's error getter {info['error_getter']!r} would "
                          "have the name of one of its functions; choose another file name")
    objects = {"module.o": artifact.object_code(),
               "manifest.o": manifest_object(info, artifact.source.options)}
    tmp = owned_temp_dir("tilecraft-export-")      # a killed run's folder goes at the next start
    try:
        paths = []
        for name, data in objects.items():
            paths.append(os.path.join(tmp, name))
            with open(paths[-1], "wb") as f:
                f.write(data)
        for symbol, data in (blobs or {}).items():
            paths.append(blob_object(symbol, data, tmp, cc))
        for name, text in (c_sources or {}).items():
            src, obj = os.path.join(tmp, name), os.path.join(tmp, name + ".o")
            with open(src, "w") as f:
                f.write(text)
            proc = subprocess.run(cc + ["-c", "-O2", "-fPIC", "-std=gnu11", "-o", obj, src], capture_output=True,
                                  text=True)
            if proc.returncode != 0:
                raise ExportError(f"compiling {name} for {path!r} failed: {proc.stderr}")
            paths.append(obj)
        out_tmp = os.path.join(tmp, "lib.so")
        # the SONAME is what a program linked against the library records (DT_NEEDED), so it
        # finds it through its rpath or LD_LIBRARY_PATH however it was linked
        # -Bsymbolic: the library's own symbols (its weights, its manifest) bind inside it, so
        # two model libraries in one program never read each other's tilecraft_params
        cmd = cc + ["-shared", "-fPIC", f"-Wl,-soname,{info['soname']}", "-Wl,-Bsymbolic", "-o", out_tmp, *paths,
                    "-lm"]
        if artifact.has_parallel:
            cmd.append("-lgomp")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ExportError(f"linking {path!r} failed: {' '.join(cmd)}\n{proc.stderr}")
        shutil.move(out_tmp, path)   # whole file at once: a loaded old copy is never half-written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_header(header_path(path), info, path)
    return path


def save_object(artifact, module, path: str) -> str:
    """Write ``path``: one relocatable object file holding the module's code, its manifest and its
    error getter (named after the object's stem, ``myadd.o`` → ``myadd_last_error``), which
    ``tilecraft.contrib.cc.create_shared`` (or ``gcc -shared``) links into a library that
    ``load_module`` loads (TVM's ``mod.save("myadd.o")``).

    >>> # mod.save("myadd.o"); cc.create_shared("myadd.so", ["myadd.o"])
    """
    path = os.path.abspath(os.fspath(path))
    if not os.path.isdir(os.path.dirname(path)):
        raise FileNotFoundError(f"save: the folder {os.path.dirname(path)!r} does not exist")
    cc = shlex.split(os.environ.get("CC", "gcc"))
    if shutil.which(cc[0]) is None:
        raise ExportError(f"save links the object file with a C compiler, but {cc[0]!r} was not found; "
                          "install gcc or set CC")
    from ..runtime.packed import SYMBOL as PACKED_SYMBOL
    if PACKED_SYMBOL in artifact.source.text:
        raise ExportError("save: the module calls packed Python functions (te.extern with tir.call_packed), "
                          "which run only in the Python process that built it")
    info = dict(manifest(module), error_getter=getter_name(library_stem(path)))
    tmp = owned_temp_dir("tilecraft-save-")
    try:
        parts = []
        for name, data in (("module.o", artifact.object_code()),
                           ("manifest.o", manifest_object(info, artifact.source.options))):
            parts.append(os.path.join(tmp, name))
            with open(parts[-1], "wb") as f:
                f.write(data)
        out_tmp = os.path.join(tmp, "out.o")
        cmd = cc + ["-r", "-nostdlib", "-o", out_tmp, *parts]      # a relocatable link: one .o
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ExportError(f"writing {path!r} failed: {' '.join(cmd)}\n{proc.stderr}")
        shutil.move(out_tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path
