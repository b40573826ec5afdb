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

>>> # mod.export_library("libops.so")      # writes libops.so and ops.h (ops_last_error())
>>> # m2 = tilecraft.runtime.load_module("libops.so"); m2(a, b, c)
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess

from ..runtime.module import MANIFEST_SYMBOL, THREADS_SYMBOL, manifest
from ..runtime.signature import shape_str
from ..runtime.status import STATUS_CODES
from ..runtime.tempdirs import owned_temp_dir
from .llvm_status import getter_name

C_TYPES = {
    "bool": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
    "float16": "uint16_t", "float32": "float", "float64": "double",
}
C_SCALAR_TYPES = dict(C_TYPES, bool="bool")


class ExportError(RuntimeError):
    """The library could not be written (the message says which step failed)."""


def _check_destination(path: str) -> str:
    if not isinstance(path, str) or not path:
        raise ExportError(f"export_library needs a file path like 'libops.so', got {path!r}")
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"export_library: the folder {folder!r} does not exist")
    if os.path.isdir(path):
        raise IsADirectoryError(f"export_library: {path!r} is a directory; give a file name like 'libops.so'")
    stem = os.path.splitext(os.path.basename(path))[0]
    if "." in stem or not stem:
        fixed = re.sub(r"\.+", "_", stem) or "ops"
        raise ExportError(f"export_library: {os.path.basename(path)!r} has dots before its suffix; the "
                          f"dynamic linker reads dots in a library's name as version numbers: name it "
                          f"like '{fixed}{os.path.splitext(path)[1]}'")
    return path


def library_stem(library_path: str) -> str:
    """``/x/libops.so`` and ``/x/ops.so`` → ``ops``: the name of the header and the error getter."""
    stem = os.path.splitext(os.path.basename(library_path))[0]
    return stem[3:] if stem.startswith("lib") and len(stem) > 3 else stem


def header_path(library_path: str) -> str:
    """``libops.so`` or ``ops.so`` → ``ops.h`` in the same folder."""
    return os.path.join(os.path.dirname(library_path), library_stem(library_path) + ".h")


def link_flags(library_path: str) -> str:
    """The compiler flags that link a C program with the library where it is now, e.g.
    ``-I/x -L/x -lops -Wl,-rpath,/x`` for ``/x/libops.so`` (``-l:ops.so`` without the prefix)."""
    folder, name = os.path.dirname(os.path.abspath(library_path)), os.path.basename(library_path)
    stem, suffix = os.path.splitext(name)
    lib = f"-l{stem[3:]}" if stem.startswith("lib") and len(stem) > 3 and suffix == ".so" else f"-l:{name}"
    q = shlex.quote(folder)
    return f"-I{q} -L{q} {lib} -Wl,-rpath,{q}"


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


def export_llvm(artifact, module, path: str) -> str:
    """Write ``path`` (a shared library) and its header from an LLVM module's artifact."""
    path = _check_destination(path)
    cc = shlex.split(os.environ.get("CC", "gcc"))
    if shutil.which(cc[0]) is None:
        raise ExportError(f"export_library links with a C compiler, but {cc[0]!r} was not found; "
                          "install gcc or set CC")
    info = dict(manifest(module), error_getter=getter_name(library_stem(path)),
                soname=os.path.basename(path))
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
        out_tmp = os.path.join(tmp, "lib.so")
        # the SONAME is what a program linked against the library records (DT_NEEDED), so it
        # finds it through its rpath or LD_LIBRARY_PATH however it was linked
        cmd = cc + ["-shared", "-fPIC", f"-Wl,-soname,{info['soname']}", "-o", out_tmp, *paths, "-lm"]
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


def copy_library(src_path: str, module, path: str) -> str:
    """Re-export a module loaded from a library: copy the file and rewrite the header. The copy
    keeps the original's SONAME and error getter (re-export from the built module to rename)."""
    path = _check_destination(path)
    info = manifest(module)
    soname = getattr(module.artifact, "soname", None)
    if soname and soname != os.path.basename(path):
        import warnings
        warnings.warn(f"export_library: {os.path.basename(path)!r} is a copy of {soname!r} and keeps "
                      f"that SONAME: a C program linked with it looks for {soname!r} when it starts",
                      RuntimeWarning, stacklevel=4)
    if os.path.abspath(src_path) != path:
        shutil.copyfile(src_path, path)
    write_header(header_path(path), info, path)
    return path


def header_text(info: dict, guard: str = "TILECRAFT_OPS_H", library_path: str | None = None) -> str:
    """The C header declaring every function of a manifest (and, given the library's path, the
    command line that links a program with it)."""
    cpu = f" (cpu {info['cpu']}, {info.get('triple', '')})" if info.get("cpu") else ""
    link = ([" * Link a program with it:", f" *     gcc main.c {link_flags(library_path)} -o main",
             " * (the rpath lets the program find the library wherever it runs from; or set LD_LIBRARY_PATH)."]
            if library_path else [])
    lines = [f"/* Generated by tilecraft {info['tilecraft_version']} for target \"{info['target']}\"{cpu}.",
             *link,
             " * The code uses that CPU's instruction set: load it on a machine that has it.",
             " * Buffers are C-contiguous (row-major) arrays; outputs must not overlap other arguments.",
             " * Every function returns 0 on success, else a TILECRAFT_ERR_* status below"
             + (f" after writing\n * a message that {info['error_getter']}() returns." if info.get("error_getter")
                else "."), " */",
             f"#ifndef {guard}", f"#define {guard}", "", "#include <stdbool.h>", "#include <stdint.h>", "",
             "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    lines += [f"#define {macro} {code}  /* {meaning} */" for code, (macro, meaning) in sorted(STATUS_CODES.items())]
    if info.get("error_getter"):
        lines += ["", "/* What the last failing call in this thread wrote (\"out of memory: could not allocate ... bytes",
                  " * for buffer 'B' in function 'f'\"); valid until that thread's next failure. */",
                  f"const char *{info['error_getter']}(void);"]
    lines += ["", "/* JSON description of the functions below (what tilecraft.runtime.load_module reads). */",
              f"extern const char {MANIFEST_SYMBOL}[];"]
    if info.get("parallel"):
        lines += ["/* Threads used by parallel loops; 0 (the default) means OpenMP's default. */",
                  f"extern int32_t {THREADS_SYMBOL};"]
    for f in info["functions"]:
        lines.append("")
        params, args = [], []
        for p in f["params"]:
            if p["kind"] == "buffer":
                from ..runtime.signature import ParamSpec
                spec = ParamSpec.from_json(p)
                note = " (written)" if spec.written else ""
                params.append(f"{p['name']}: {p['dtype']}{shape_str(spec.shape)}{note}")
                const = "" if spec.written else "const "
                args.append(f"{const}{C_TYPES[p['dtype']]}* {_c_name(p['name'])}")
            else:
                params.append(f"{p['name']}: {p['dtype']}")
                args.append(f"{C_SCALAR_TYPES[p['dtype']]} {_c_name(p['name'])}")
        lines.append(f"/* {f['name']}({', '.join(params)}) */")
        if any(p["dtype"] == "float16" for p in f["params"]):
            lines.append("/* float16 values are passed as their IEEE-754 half-precision bits (uint16_t). */")
        lines.append(f"int32_t {f['name']}({', '.join(args) or 'void'});")
    lines += ["", "#ifdef __cplusplus", "}", "#endif", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def _c_name(name: str) -> str:
    n = re.sub(r"\W", "_", name)
    return n if not n[:1].isdigit() else "_" + n


def write_header(path: str, info: dict, library_path: str | None = None) -> str:
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0]).upper()
    with open(path, "w") as f:
        f.write(header_text(info, f"TILECRAFT_{stem}_H", library_path))
    return path
