"""export_library → a shared library + C header + manifest; load it in a new process and from C."""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tilecraft.runtime as rt
from tilecraft.runtime.library import ExportError
from tilecraft.codegen.llvm import build_llvm
from tilecraft.ir import ForKind, Var, cast, const, seq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "codegen"))
from llvm_ir_helpers import buf, func, ld, loop, poisoned, rand, st  # noqa: E402

pytestmark = pytest.mark.usefixtures("seeded_ir_helpers")   # rand() replays with the seed

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="export links with gcc")


def ops_module():
    """vadd (symbolic n, parallel + vector), scale (float64 and a float16 output), idiv (int32)."""
    n = Var("n")
    A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
    i = Var("i")
    vadd = func("vadd", (A, B, C, n), loop(i, n, st(C, i, ld(A, i) + ld(B, i)), ForKind.PARALLEL))
    X, Y, H = buf("X", (4, 8), "float64"), buf("Y", (4, 8), "float64"), buf("H", (4, 8), "float16")
    j = Var("j")
    scale = func("scale", (X, Y, H), loop(j, 8, seq(st(Y, j * 4, ld(X, j * 4, 4) * 2.5, 4),
                                                    st(H, j * 4, cast("float16x4", ld(X, j * 4, 4)), 4))))
    P, Q, R = buf("P", (64,), "int32"), buf("Q", (64,), "int32"), buf("R", (64,), "int32")
    k = Var("k")
    idiv = func("idiv", (P, Q, R), loop(k, 64, st(R, k, ld(P, k) // ld(Q, k))))
    return build_llvm([vadd, scale, idiv])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    mod = ops_module()
    path = mod.export_library(str(d / "ops.so"))
    return mod, path


@needs_gcc
def test_export_writes_library_and_header(exported):
    mod, path = exported
    assert os.path.exists(path) and path.endswith("ops.so")
    header = open(path[:-3] + ".h").read()
    assert "int32_t vadd(const float* A, const float* B, float* C, int32_t n);" in header
    assert "int32_t scale(const double* X, double* Y, uint16_t* H);" in header
    assert "float16 values are passed as their IEEE-754 half-precision bits" in header
    assert "extern int32_t tilecraft_num_threads;" in header
    assert "#ifndef TILECRAFT_OPS_H" in header
    nm = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True).stdout
    for sym in ("vadd", "scale", "idiv", "tilecraft_manifest", "tilecraft_num_threads"):
        assert re.search(rf"\b{sym}\b", nm), sym


@needs_gcc
def test_load_in_a_new_process(exported):
    """A fresh interpreter loads ops.so and computes on fresh random inputs; we check its numbers."""
    _, path = exported
    script = textwrap.dedent(f"""
        import json, sys, numpy as np
        import tilecraft.runtime as rt
        mod = rt.load_module({path!r})
        rng = np.random.default_rng()
        a, b = rng.standard_normal(777).astype("float32"), rng.standard_normal(777).astype("float32")
        c = np.full(777, np.nan, "float32")
        mod(a, b, c)
        x = rng.standard_normal((4, 8))
        y, h = np.full((4, 8), np.nan), np.full((4, 8), np.nan, "float16")
        mod["scale"](x, y, h)
        p = rng.integers(-100, 100, 64).astype("int32"); q = rng.integers(1, 9, 64).astype("int32") * rng.choice([-1, 1], 64).astype("int32")
        r = np.full(64, 0x5A, "int32")
        mod["idiv"](p, q, r)
        try:
            mod(a, b, np.zeros(776, "float32"))
        except ValueError as e:
            err = str(e)
        ok = [bool(np.allclose(c, a + b)), bool(np.array_equal(y, x * 2.5)),
              bool(np.array_equal(h, x.astype("float16"))), bool(np.array_equal(r, p // q))]
        print(json.dumps({{"ok": ok, "entry": mod.entry_name, "err": err, "names": mod.function_names}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=REPO), timeout=120)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["ok"] == [True, True, True, True]
    assert res["entry"] == "vadd" and res["names"] == ["vadd", "scale", "idiv"]
    assert res["err"].startswith("argument 2 'C': expected shape (777,)")


@needs_gcc
def test_c_program_against_the_header(exported, tmp_path):
    _, path = exported
    libdir, so = os.path.dirname(path), os.path.basename(path)
    rng = np.random.default_rng()
    a, b = rng.uniform(-8, 8, 100).astype("float32"), rng.uniform(-8, 8, 100).astype("float32")
    p = rng.integers(-50, 50, 64).astype("int32")
    q = (rng.integers(1, 7, 64) * rng.choice([-1, 1], 64)).astype("int32")
    src = textwrap.dedent("""
        #include <stdio.h>
        #include "ops.h"
        int main(void) {
            float a[100], b[100], c[100];
            int32_t p[64], q[64], r[64];
            for (int i = 0; i < 100; i++) if (scanf("%f %f", &a[i], &b[i]) != 2) return 2;
            for (int i = 0; i < 64; i++) if (scanf("%d %d", &p[i], &q[i]) != 2) return 2;
            tilecraft_num_threads = 2;
            if (vadd(a, b, c, 100) != 0) return 3;
            if (idiv(p, q, r) != 0) return 3;
            for (int i = 0; i < 100; i++) printf("%.9g\\n", c[i]);
            for (int i = 0; i < 64; i++) printf("%d\\n", r[i]);
            return 0;
        }
    """)
    (tmp_path / "main.c").write_text(src)
    exe = str(tmp_path / "main")
    subprocess.run(["gcc", "-O1", "-I", libdir, str(tmp_path / "main.c"), "-o", exe, "-L", libdir,
                    f"-l:{so}", f"-Wl,-rpath,{libdir}"], check=True, capture_output=True, text=True)
    stdin = "\n".join(f"{x:.9g} {y:.9g}" for x, y in zip(a, b)) + "\n" + "\n".join(f"{x} {y}" for x, y in zip(p, q))
    out = subprocess.run([exe], input=stdin, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    vals = out.stdout.split()
    np.testing.assert_allclose(np.array(vals[:100], "float32"), a + b, rtol=1e-6)
    np.testing.assert_array_equal(np.array(vals[100:], "int32"), p // q)


@needs_gcc
def test_reexport_of_a_loaded_module(exported, tmp_path):
    _, path = exported
    mod = rt.load_module(path)
    with pytest.warns(RuntimeWarning, match="'copy.so' is a copy of 'ops.so' and keeps that SONAME"):
        again = mod.export_library(str(tmp_path / "copy.so"))
    assert os.path.exists(again) and os.path.exists(str(tmp_path / "copy.h"))
    with pytest.raises(ValueError, match="has no 'll' source"):
        mod.get_source("ll")
    assert json.loads(mod.get_source("manifest"))["functions"][0]["name"] == "vadd"


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="load_module: no such file '/nonexistent/ops.so'"):
        rt.load_module("/nonexistent/ops.so")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        rt.load_module(str(tmp_path))
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not an ELF file")
    with pytest.raises(ValueError, match="is not a loadable shared library"):
        rt.load_module(str(junk))


@needs_gcc
def test_load_error_library_without_manifest(tmp_path):
    (tmp_path / "plain.c").write_text("int f(void) { return 1; }\n")
    so = str(tmp_path / "plain.so")
    subprocess.run(["gcc", "-shared", "-fPIC", str(tmp_path / "plain.c"), "-o", so], check=True)
    with pytest.raises(ValueError, match="has no 'tilecraft_manifest' symbol; it was not written by tilecraft"):
        rt.load_module(so)


def test_export_errors(tmp_path):
    n = Var("n")
    A = buf("A", (n,))
    i = Var("i")
    mod = build_llvm(func("inc", (A, n), loop(i, n, st(A, i, ld(A, i) + 1.0))))
    with pytest.raises(FileNotFoundError, match="export_library: the folder '/nonexistent/dir' does not exist"):
        mod.export_library("/nonexistent/dir/ops.so")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        mod.export_library(str(tmp_path))
    old = os.environ.get("CC")
    os.environ["CC"] = "no-such-compiler-xyz"
    try:
        with pytest.raises(ExportError, match="'no-such-compiler-xyz' was not found"):
            mod.export_library(str(tmp_path / "x.so"))
    finally:
        if old is None:
            del os.environ["CC"]
        else:
            os.environ["CC"] = old


def test_load_error_library_for_another_cpu(tmp_path, monkeypatch):
    """A library whose manifest asks for instructions this CPU lacks is refused, not run."""
    from tilecraft.runtime import module as rt_module
    n = Var("n")
    A = buf("A", (n,))
    i = Var("i")
    mod = build_llvm(func("inc", (A, n), loop(i, n, st(A, i, ld(A, i) + 1.0))))
    monkeypatch.setattr(mod.artifact, "machine", {"cpu": "future", "features": "+avx2,+frobnicate-isa"})
    if shutil.which("gcc") is None:
        pytest.skip("export links with gcc")
    path = mod.export_library(str(tmp_path / "future.so"))
    with pytest.raises(ValueError, match="compiled for cpu 'future' and uses frobnicate-isa, which this CPU lacks"):
        rt_module.load_module(path)
