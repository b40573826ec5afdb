"""Export an operator as a C library, compile a C program against it with gcc, and run it,
including a call that fails (out of memory) and reports why.

    python examples/export_c_library.py [output-directory]

The operator: for each point x_i (n points of d coordinates) the squared distance to the
nearest of m points y_j. This schedule materialises the n x m distance matrix in a scratch
buffer, so a large problem needs a lot of memory: the C program's second call runs under a
1 GiB address-space limit and gets TILECRAFT_ERR_OUT_OF_MEMORY with a message.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import tilecraft as tc
from tilecraft import te

HERE = os.path.dirname(os.path.abspath(__file__))


def nearest_module():
    """nearest(X: float32[n, d], Y: float32[m, d], out: float32[n]) with a scratch D[n, m]."""
    n, m, d = te.var("n"), te.var("m"), te.var("d")
    X = te.placeholder((n, d), name="X")
    Y = te.placeholder((m, d), name="Y")
    k = te.reduce_axis((0, d), name="k")
    D = te.compute((n, m), lambda i, j: te.sum((X[i, k] - Y[j, k]) * (X[i, k] - Y[j, k]), axis=k), name="D")
    r = te.reduce_axis((0, m), name="r")
    out = te.compute((n,), lambda i: te.min(D[i, r], axis=r), name="out")
    s = te.create_schedule(out.op)
    s[D].parallel(D.op.axis[0])
    s[out].parallel(out.op.axis[0])
    return tc.build(s, [X, Y, out], target="llvm", name="nearest")


def main(out_dir):
    lib = nearest_module().export_library(os.path.join(out_dir, "libnearest.so"))
    header = os.path.join(out_dir, "nearest.h")
    link = next(line for line in open(header) if "gcc main.c" in line).split("gcc main.c", 1)[1].split("-o main")[0]
    print(f"wrote {lib} and {header}; link line from the header:\n    gcc main.c{link}-o main")
    if shutil.which("gcc") is None:
        print("no gcc here: not compiling the C program")
        return
    exe = os.path.join(out_dir, "nearest_demo")
    subprocess.run(["gcc", "-O2", os.path.join(HERE, "nearest.c"), *link.split(), "-o", exe], check=True)
    rng = np.random.default_rng()
    x, y = rng.standard_normal((5, 3)).astype("float32"), rng.standard_normal((7, 3)).astype("float32")
    stdin = "5 7 3\n" + " ".join(map(str, x.ravel())) + "\n" + " ".join(map(str, y.ravel())) + "\n"
    # run from another directory: the program finds the library through its rpath and SONAME
    run = subprocess.run([exe], input=stdin, capture_output=True, text=True, cwd=tempfile.gettempdir())
    print(run.stdout, end="")
    if run.returncode != 0:
        sys.exit(f"the C program failed ({run.returncode}): {run.stderr}")
    got = np.array(run.stdout.split("\n")[0].split(), "float32")
    want = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1).min(1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    print("the C program's results match numpy")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="tilecraft-c-"))
