"""TVM's ``tvm.contrib.cc``: link object files into a shared library with the system's C compiler.

>>> fadd.save(temp.relpath("myadd.o"))
>>> cc.create_shared(temp.relpath("myadd.so"), [temp.relpath("myadd.o")])
>>> fadd1 = tilecraft.runtime.load_module(temp.relpath("myadd.so"))
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess


def create_shared(output, objects, options=None, cc: str | None = None) -> str:
    """Link ``objects`` (paths of ``.o`` files, e.g. written by ``Module.save``) into the shared
    library ``output`` with ``cc`` (default: ``$CC``, else ``gcc``) and extra ``options``;
    libgomp and libm are linked when the objects need them. Returns ``output``.

    >>> # create_shared("myadd.so", ["myadd.o"])
    """
    objects = [os.fspath(o) for o in ([objects] if isinstance(objects, (str, os.PathLike)) else objects)]
    for o in objects:
        if not os.path.isfile(o):
            raise FileNotFoundError(f"create_shared: no such object file {o!r}")
    compiler = shlex.split(cc or os.environ.get("CC", "gcc"))
    if shutil.which(compiler[0]) is None:
        raise RuntimeError(f"create_shared links with a C compiler, but {compiler[0]!r} was not found; "
                           "install gcc or set CC")
    output = os.fspath(output)
    # parallel loops call libgomp: linked only if an object needs it
    cmd = compiler + ["-shared", "-fPIC", "-o", output, *objects, *(options or []),
                      "-Wl,--push-state,--as-needed", "-lgomp", "-lm", "-Wl,--pop-state"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"create_shared: linking {output!r} failed: {' '.join(cmd)}\n{proc.stderr}")
    return output
