"""The CUDA tests. pytest imports this folder as the package ``cuda`` (``tests/`` is on sys.path),
which hides NVIDIA's ``cuda`` namespace package (``cuda.pathfinder``, ``cuda.bindings``: CuPy
imports them, so ``import cupy`` failed in these tests while it worked outside pytest). The other
``cuda`` folders on sys.path join this package's path, so both resolve."""
import os
import sys

_here = os.path.abspath(os.path.dirname(__file__))
__path__ += [d for d in (os.path.abspath(os.path.join(p or ".", "cuda")) for p in sys.path)
             if os.path.isdir(d) and d != _here and d not in __path__]
