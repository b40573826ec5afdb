"""TVM's ``tvm.contrib.clang``: compile C or C++ to LLVM IR text, for ``pragma import_llvm``.

The LLVM inside llvmlite (LLVM 22 with llvmlite 0.50) reads the IR of its own version and older
ones (the typed pointers that clang 14 and older write are read as opaque pointers; IR of clang
13, 14 and 19 was checked), but not necessarily IR of a newer LLVM: :func:`find_clang` accepts
clang 13 up to llvmlite's LLVM version, preferring the newest. On Debian or Ubuntu ``apt-get
install clang-19`` provides one.

>>> ll = clang.create_llvm('extern "C" int add1(int x) { return x + 1; }', options=["-O3"])
>>> s[C].pragma(x, "import_llvm", ll)
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess

from .utils import tempdir

MIN_VERSION = 13          # the oldest clang whose IR was checked with llvmlite's LLVM


def _llvm_major() -> int:
    import llvmlite.binding as llvm
    return llvm.llvm_version_info[0]


def clang_version(cc: str) -> int | None:
    """The major version of the clang at ``cc`` (None when it does not answer like clang)."""
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"clang version (\d+)", out)
    return int(m.group(1)) if m else None


def find_clang(required: bool = True) -> list:
    """The paths of usable clang compilers, best first: ``clang-N`` for N from llvmlite's LLVM
    version down to 13, then ``clang``, each kept only if its version is in that range.
    ``required=True`` raises ``RuntimeError`` when there is none."""
    top = _llvm_major()
    names = [f"clang-{v}" for v in range(top, MIN_VERSION - 1, -1)] + ["clang"]
    found = []
    for name in names:
        path = shutil.which(name)
        if path and path not in found:
            v = clang_version(path)
            if v is not None and MIN_VERSION <= v <= top:
                found.append(path)
    if not found and required:
        raise RuntimeError(f"no usable clang: need clang {MIN_VERSION}..{top} (llvmlite's LLVM is {top} and "
                           f"may not read the IR of a newer one). Install one, e.g. `apt-get install "
                           f"clang-19` on Debian or Ubuntu")
    return found


def create_llvm(inputs, output: str | None = None, options=None, cc: str | None = None) -> str:
    """Compile C++ source (a string of code, a path to a source file, or a list of them) to LLVM
    IR text with clang (``-S -emit-llvm`` plus ``options``, e.g. ``["-O3"]``); returns the text
    and writes it to ``output`` if given. Code given as a string is compiled as C++ (as TVM
    does), so functions called with ``call_extern`` need ``extern "C"``.

    >>> ll_code = clang.create_llvm(cc_code, output=temp.relpath("temp.ll"))
    """
    cc = cc or find_clang()[0]
    temp = tempdir()
    output = output or temp.relpath("output.ll")
    files = []
    for k, code in enumerate([inputs] if isinstance(inputs, str) else list(inputs)):
        if "\n" not in code and os.path.isfile(code):
            files.append(code)
        else:
            path = temp.relpath(f"input{k}.cc")
            with open(path, "w") as f:
                f.write(code)
            files.append(path)
    cmd = [cc, "-S", "-emit-llvm"] + list(options or []) + ["-o", output] + files
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"clang failed ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}")
    with open(output) as f:
        return f.read()
