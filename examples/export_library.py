"""Export compiled operators as a shared library with a C header, then load it back in a fresh
Python process (no compiler needed there) and call it.

    python examples/export_library.py [output-directory]
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

import tilecraft as tc
from tilecraft import te

out_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="tilecraft-")

n = te.var("n")
A = te.placeholder((n,), name="A")
B = te.placeholder((n,), name="B")
C = te.compute((n,), lambda i: A[i] * 2.0 + B[i], name="C")
s = te.create_schedule(C.op)
xo, xi = s[C].split(C.op.axis[0], factor=16)
s[C].vectorize(xi)
mod = tc.build(s, [A, B, C], target="llvm", name="axpy")

lib = os.path.join(out_dir, "axpy.so")
mod.export_library(lib)
header = lib[:-3] + ".h"
print(f"wrote {lib} and {header}; the C signature:")
print("   ", next(line for line in open(header) if "axpy(" in line).strip())

# A new process loads the library: nothing is compiled there.
child = f"""
import numpy as np, tilecraft as tc
m = tc.runtime.load_module({lib!r})
a = np.arange(10, dtype="float32"); b = np.ones(10, "float32"); c = np.empty(10, "float32")
m["axpy"](a, b, c)
print("loaded in a new process:", m, "->", c)
assert np.allclose(c, a * 2 + b)
"""
subprocess.run([sys.executable, "-c", child], check=True)
