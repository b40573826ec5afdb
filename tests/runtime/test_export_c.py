"""The exported C library as a C programmer meets it: the SONAME and file name, the link line the
header documents, the status codes and the message getter, and examples/nearest.c compiled with
gcc and run (from another directory) against a library exported here."""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tilecraft.runtime.library import ExportError

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "examples"))
sys.path.insert(0, os.path.join(REPO, "tests", "autotune"))
from export_c_library import nearest_module  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("readelf") is None,
                                reason="linking a C program needs gcc (and readelf to read it)")


def dynamic_section(path):
    return subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def nearest_lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("clib")
    return nearest_module().export_library(str(d / "libnearest.so"))


def header_link_flags(header):
    line = next(ln for ln in open(header) if "gcc main.c" in ln)
    return line.split("gcc main.c", 1)[1].split("-o main")[0].split()


def test_the_c_example_runs_against_an_exported_library(nearest_lib, tmp_path, rng):
    """examples/nearest.c, linked with the header's own link line, run from another directory on
    fresh random points (sizes that are no multiple of anything): numpy's answer, then an
    out-of-memory status with the message."""
    header = os.path.join(os.path.dirname(nearest_lib), "nearest.h")
    exe = str(tmp_path / "nearest_demo")
    build = subprocess.run(["gcc", "-O2", "-Wall", "-Werror", os.path.join(REPO, "examples", "nearest.c"),
                            *header_link_flags(header), "-o", exe], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    n, m, d = (int(v) for v in rng.integers(3, 40, size=3))
    x, y = rng.uniform(-3, 3, (n, d)).astype("float32"), rng.uniform(-3, 3, (m, d)).astype("float32")
    stdin = f"{n} {m} {d}\n" + " ".join(f"{v:.9g}" for v in x.ravel()) + "\n" + \
        " ".join(f"{v:.9g}" for v in y.ravel()) + "\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run([exe], input=stdin, capture_output=True, text=True, cwd=elsewhere, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"})
    assert run.returncode == 0, run.stdout + run.stderr
    first, second = run.stdout.splitlines()
    want = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1).min(1)
    np.testing.assert_allclose(np.array(first.split(), "float32"), want, rtol=1e-5, atol=1e-5)
    assert second == ("status 1: out of memory: could not allocate 4294967296 bytes for buffer 'D' "
                      "in function 'nearest'")


def test_soname_lets_a_program_linked_by_path_run_anywhere(nearest_lib, tmp_path):
    """Linked by a relative path (gcc main.c build/libnearest.so), a library without SONAME is
    recorded as 'build/libnearest.so' and not found from any other directory."""
    assert re.search(r"\(SONAME\)\s+Library soname: \[libnearest\.so\]", dynamic_section(nearest_lib))
    build = tmp_path / "build"
    build.mkdir()
    shutil.copy(nearest_lib, build / "libnearest.so")
    shutil.copy(os.path.join(os.path.dirname(nearest_lib), "nearest.h"), build / "nearest.h")
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include "nearest.h"\n'
        "int main(void) {\n"
        "    float x[2] = {0, 4}, y[3] = {1, 5, 9}, out[2];\n"
        "    int32_t s = nearest(x, y, out, 2, 1, 3);\n"
        '    printf("%d %g %g\\n", s, out[0], out[1]);\n'
        "    return s;\n}\n")
    subprocess.run(["gcc", "main.c", "-Ibuild", "build/libnearest.so", "-Wl,-rpath,$ORIGIN/build", "-o", "main"],
                   cwd=tmp_path, check=True, capture_output=True)
    assert "Shared library: [libnearest.so]" in dynamic_section(str(tmp_path / "main"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run([str(tmp_path / "main")], cwd=elsewhere, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["0", "1", "1"]


def test_header_declares_status_codes_getter_and_link_line(nearest_lib):
    folder = os.path.dirname(nearest_lib)
    header = open(os.path.join(folder, "nearest.h")).read()
    assert f"gcc main.c -I{folder} -L{folder} -lnearest -Wl,-rpath,{folder} -o main" in header
    assert "#define TILECRAFT_ERR_OUT_OF_MEMORY 1" in header and "#define TILECRAFT_OK 0" in header
    assert "const char *nearest_last_error(void);" in header
    nm = subprocess.run(["nm", "-D", "--defined-only", nearest_lib], capture_output=True, text=True).stdout
    assert re.search(r"\bnearest_last_error\b", nm)
    assert "tilecraft_error_buffer" not in nm          # hidden: two libraries never share it


def test_a_library_name_without_the_lib_prefix_links_with_l_colon(tmp_path):
    from tilecraft.runtime.library import link_flags
    path = str(tmp_path / "ops.so")
    assert link_flags(path) == f"-I{tmp_path} -L{tmp_path} -l:ops.so -Wl,-rpath,{tmp_path}"
    assert link_flags(str(tmp_path / "libops.so")).split()[2] == "-lops"


def test_error_dotted_library_name(tmp_path):
    mod = nearest_module()
    with pytest.raises(ExportError, match=re.escape(
            "export_library: 'topi_matmul.llvm_16.so' has dots before its suffix; the dynamic linker "
            "reads dots in a library's name as version numbers: name it like 'topi_matmul_llvm_16.so'")):
        mod.export_library(str(tmp_path / "topi_matmul.llvm_16.so"))


def test_reexport_under_another_name_warns_about_the_soname(nearest_lib, tmp_path):
    from tilecraft.runtime import load_module
    mod = load_module(nearest_lib)
    with pytest.warns(RuntimeWarning, match="'libother.so' is a copy of 'libnearest.so' and keeps that SONAME"):
        mod.export_library(str(tmp_path / "libother.so"))
    assert os.path.exists(tmp_path / "other.h")


def test_cli_export_names_libraries_without_dots(tmp_path, rng):
    """`tilecraft export` of a topi template (task 'topi/softmax.llvm') writes lib<name>.so that
    links with -l<name>, loads, and computes softmax."""
    import tilecraft.autotune as autotune
    from tilecraft.autotune.tuner import RandomTuner
    import autotune_fakes as fk
    import tilecraft.topi.softmax  # noqa: F401  (registers the template)
    task = autotune.task.create("topi/softmax.llvm", args=(8, 24, "float32"), target="llvm")
    log = tmp_path / "softmax.jsonl"
    option = autotune.measure_option(builder=fk.FakeBuilder(), runner=fk.FakeRunner(lambda c: 1e-3))
    RandomTuner(task, seed=0).tune(2, option, callbacks=[autotune.callback.log_to_file(log)])
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "tilecraft.cli", "export", str(log), "--out-dir", str(out)],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=REPO))
    assert run.returncode == 0, run.stderr
    names = sorted(os.listdir(out))
    assert names == ["libtopi_softmax_llvm_8_24_float32.so", "manifest.json", "topi_softmax_llvm_8_24_float32.h"]
    lib = str(out / names[0])
    assert "Library soname: [libtopi_softmax_llvm_8_24_float32.so]" in dynamic_section(lib)
    from tilecraft.runtime import load_module
    mod = load_module(lib)
    x = rng.standard_normal((8, 24)).astype("float32")
    y = np.full((8, 24), np.nan, "float32")
    mod(x, y)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_error_getter_name_taken_by_a_function(tmp_path):
    from tilecraft.codegen.llvm import build_llvm
    from tilecraft.ir import Var
    sys.path.insert(0, os.path.join(REPO, "tests", "codegen"))
    from llvm_ir_helpers import buf, func, ld, loop, st
    n, i = Var("n"), Var("i")
    A = buf("A", (n,))
    mod = build_llvm(func("ops_last_error", (A, n), loop(i, n, st(A, i, ld(A, i) + 1.0))))
    with pytest.raises(ExportError, match=re.escape("export_library: the library's error getter 'ops_last_error' "
                                                    "would have the name of one of its functions; choose another "
                                                    "file name")):
        mod.export_library(str(tmp_path / "libops.so"))
    assert load_ok(mod.export_library(str(tmp_path / "libother.so")))


def load_ok(path):
    from tilecraft.runtime import load_module
    m = load_module(path)
    a = np.random.default_rng().standard_normal(9).astype("float32")
    b = a.copy()
    m(b)
    return bool(np.array_equal(b, a + 1))
