"""The C API of an exported model (``tilecraft/runtime/model_capi.py``): a C program compiled by
gcc against ``libnet.so`` and its header creates the model, sets its input, runs it and writes
its output, which must equal the Python run's (and onnxruntime's); the API's errors from C; two
models (``mod_name``) linked into one program, each with its own weights."""
import shutil
import subprocess

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import relay

from relay_helpers import helper, make_model, run_lib, run_ort

pytestmark = [pytest.mark.filterwarnings("ignore:no tuned configuration"),
              pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to compile the C program")]

MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "net.h"

static void *read_file(const char *path, long *n) {
    FILE *f = fopen(path, "rb"); fseek(f, 0, SEEK_END); *n = ftell(f); rewind(f);
    void *p = malloc(*n); if (fread(p, 1, *n, f) != (size_t)*n) exit(3); fclose(f); return p;
}

int main(int argc, char **argv) {
    long n;
    float *x = read_file(argv[1], &n);
    tilecraft_model *m = tilecraft_model_create();
    if (!m) { printf("create: %s\n", tilecraft_model_error()); return 1; }
    int32_t i = tilecraft_model_input_index("x");
    printf("inputs %d outputs %d x=%d ndim %d shape0 %lld dtype %s nope=%d\n", tilecraft_model_num_inputs(),
           tilecraft_model_num_outputs(), i, tilecraft_model_input_ndim(i),
           (long long)tilecraft_model_input_shape(i)[0], tilecraft_model_input_dtype(i),
           tilecraft_model_input_index("nope"));
    if (tilecraft_model_set_input(m, i, x, n - 4) == 0) return 4;
    printf("error: %s\n", tilecraft_model_error());
    if (tilecraft_model_set_input(m, i, x, n) != 0) { printf("%s\n", tilecraft_model_error()); return 1; }
    for (int rep = 0; rep < 2; rep++)
        if (tilecraft_model_run(m) != 0) { printf("%s\n", tilecraft_model_error()); return 1; }
    int64_t nb = tilecraft_model_output_nbytes(0);
    float *y = malloc(nb);
    if (tilecraft_model_get_output(m, 0, y, nb) != 0) { printf("%s\n", tilecraft_model_error()); return 1; }
    FILE *f = fopen(argv[2], "wb"); fwrite(y, 1, nb, f); fclose(f);
    tilecraft_model_free(m);
    printf("ok\n");
    return 0;
}
"""


def conv_net(rng):
    """Conv + bias + ReLU, max pool, conv + residual, global pool, dense, softmax."""
    inputs = {"x": rng.uniform(-1, 1, (1, 8, 12, 12)).astype("float32")}
    inits = {"w1": rng.uniform(-0.5, 0.5, (16, 8, 3, 3)).astype("float32"),
             "b1": rng.uniform(-0.5, 0.5, (16,)).astype("float32"),
             "w2": rng.uniform(-0.3, 0.3, (16, 16, 3, 3)).astype("float32"),
             "fc": rng.uniform(-0.5, 0.5, (10, 16)).astype("float32")}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "p1"], ["a2"]),
             helper.make_node("GlobalAveragePool", ["a2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["z"], transB=1),
             helper.make_node("Softmax", ["z"], ["y"], axis=-1)]
    return make_model(nodes, inputs, ["y"], inits), inputs


def _build(model, mod_name="default"):
    mod, params = relay.frontend.from_onnx(model)
    with tc.transform.PassContext(opt_level=3):
        return relay.build(mod, target="llvm", params=params, mod_name=mod_name)


def _compile(tmp_path, source: str, *libs):
    src = tmp_path / "main.c"
    src.write_text(source)
    cmd = ["gcc", "-O1", "-std=gnu11", str(src), f"-I{tmp_path}", f"-L{tmp_path}", *[f"-l{lb}" for lb in libs],
           f"-Wl,-rpath,{tmp_path}", "-o", str(tmp_path / "main")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "main"


def _run(exe, *args):
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=60,
                          env={"OMP_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_c_program_runs_the_exported_model(rng, tmp_path):
    model, inputs = conv_net(rng)
    lib = _build(model)
    lib.export_library(str(tmp_path / "libnet.so"))
    header = (tmp_path / "net.h").read_text()
    assert "tilecraft_model *tilecraft_model_create(void);" in header
    exe = _compile(tmp_path, MAIN, "net")
    (tmp_path / "x.bin").write_bytes(inputs["x"].tobytes())
    out = _run(exe, tmp_path / "x.bin", tmp_path / "y.bin")
    assert "inputs 1 outputs 1 x=0 ndim 4 shape0 1 dtype float32 nope=-1" in out
    assert "error: set_input: input 'x' has 4608 bytes, got 4604" in out and out.endswith("ok\n")
    y_c = np.frombuffer((tmp_path / "y.bin").read_bytes(), "float32").reshape(1, 10)
    y_py = run_lib(lib, inputs)[0]
    np.testing.assert_array_equal(y_c, y_py)            # the same kernels on the same data
    np.testing.assert_allclose(y_c, run_ort(model, inputs)[0], rtol=1e-5, atol=1e-6)


TWO = r"""
#include <stdio.h>
#include "a.h"
#include "b.h"
int main(void) {
    float x[8 * 12 * 12], ya[10], yb[10];
    for (int i = 0; i < 8 * 12 * 12; i++) x[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    tilecraft_model *a = tilecraft_model_create();
    modelb *b = modelb_create();
    if (tilecraft_model_set_input(a, 0, x, sizeof x) || modelb_set_input(b, 0, x, sizeof x) ||
        tilecraft_model_run(a) || modelb_run(b) || tilecraft_model_get_output(a, 0, ya, sizeof ya) ||
        modelb_get_output(b, 0, yb, sizeof yb)) return 1;
    for (int i = 0; i < 10; i++) printf("%.9g %.9g\n", ya[i], yb[i]);
    tilecraft_model_free(a); modelb_free(b);
    return 0;
}
"""


def test_two_models_in_one_program(rng, tmp_path):
    """Different weights, the same names in both libraries (tilecraft_params): each model reads
    its own (the libraries bind their symbols inside themselves)."""
    model_a, inputs = conv_net(rng)
    model_b, _ = conv_net(rng)
    _build(model_a).export_library(str(tmp_path / "liba.so"))
    _build(model_b, mod_name="modelb").export_library(str(tmp_path / "libb.so"))
    out = _run(_compile(tmp_path, TWO, "a", "b"))
    got = np.array([[float(v) for v in line.split()] for line in out.strip().splitlines()], "float32")
    x = {"x": ((np.arange(8 * 12 * 12) * 37 % 101) / np.float32(101) - np.float32(0.5)).astype("float32")
         .reshape(1, 8, 12, 12)}
    np.testing.assert_allclose(got[:, 0], run_ort(model_a, x)[0][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:, 1], run_ort(model_b, x)[0][0], rtol=1e-5, atol=1e-6)
