"""``tilecraft compile`` / ``tilecraft run``: a model compiled to one library, run from an .npz,
outputs equal to onnxruntime's; --tune writes a log the build uses; every bad input is one line
and exit status 2."""
import subprocess
import sys

import numpy as np
import pytest

from tilecraft.cli import main

from relay_helpers import helper, make_model, run_ort

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration")


def dynamic_model(rng):
    """conv+relu -> global average pool -> flatten -> dense; the batch dimension is dynamic."""
    w = rng.uniform(-1, 1, (8, 3, 3, 3)).astype("float32")
    wd = rng.uniform(-1, 1, (5, 8)).astype("float32")
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]), helper.make_node("Gemm", ["f", "wd"], ["logits"], transB=1)]
    model = make_model(nodes, {"input": np.zeros((1, 3, 8, 8), "float32")}, ["logits"], {"w": w, "wd": wd})
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    return model


@pytest.fixture
def files(rng, tmp_path):
    model = dynamic_model(rng)
    path = tmp_path / "net.onnx"
    path.write_bytes(model.SerializeToString())
    x = rng.uniform(-1, 1, (2, 3, 8, 8)).astype("float32")
    np.savez(tmp_path / "in.npz", input=x)
    return model, path, x, tmp_path


def test_compile_and_run(files, capsys):
    model, path, x, tmp = files
    so = tmp / "net.so"
    assert main(["compile", str(path), "--shape", "input=2,3,8,8", "-o", str(so)]) == 0
    out = capsys.readouterr().out
    assert "tuned configs for 0 of 2 tunable workloads (no --tuning-log: fallback schedules)" in out
    assert "memory:" in out and f"wrote {so}" in out
    assert main(["run", str(so), "--inputs", str(tmp / "in.npz"), "--output", str(tmp / "out.npz"),
                 "--benchmark", "--repeat", "2", "--number", "1", "--profile", "2"]) == 0
    out = capsys.readouterr().out
    assert "per run: mean" in out
    assert "kernels (median of 2 runs, " in out and len([ln for ln in out.splitlines() if " ms " in ln
                                                          and "x  fused_" in ln]) == 2
    with np.load(tmp / "out.npz") as got:
        assert got.files == ["output_0"]
        np.testing.assert_allclose(got["output_0"], run_ort(model, {"input": x})[0], rtol=1e-5, atol=1e-5)
    # printed outputs and random inputs
    assert main(["run", str(so), "--fill", "random"]) == 0
    assert "output_0: float32[2, 5]" in capsys.readouterr().out


def test_compile_tune_then_build_with_the_log(files, capsys):
    model, path, x, tmp = files
    so = tmp / "tuned.so"
    argv = ["compile", str(path), "--shape", "input=2,3,8,8", "-o", str(so), "--tune", "--trials", "6",
            "--tuner", "random"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "2 tuning tasks; 6 trials in all, log: " + str(tmp / "tuned.jsonl") in out
    assert "tuned configs for 2 of 2 tunable workloads (from " in out
    assert len((tmp / "tuned.jsonl").read_text().splitlines()) == 6
    assert main(argv) == 0            # again: resumes, measures nothing more
    assert len((tmp / "tuned.jsonl").read_text().splitlines()) == 6
    run = subprocess.run([sys.executable, "-m", "tilecraft", "run", str(so), "--inputs", str(tmp / "in.npz"),
                          "--output", str(tmp / "o.npz")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    with np.load(tmp / "o.npz") as got:
        np.testing.assert_allclose(got["output_0"], run_ort(model, {"input": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("argv, message", [
    (["compile", "missing.onnx", "-o", "m.so"], "tilecraft compile: error: missing.onnx: no such file"),
    (["compile", "{onnx}", "--shape", "input=2,x", "-o", "m.so"],
     "tilecraft compile: error: --shape 'input=2,x': expected NAME=D0,D1,... with positive integers"),
    (["compile", "{onnx}", "--shape", "input=2,3,8,8", "--shape", "data=2,3,8,8", "-o", "m.so"],
     "tilecraft compile: error: {onnx}: from_onnx: shape= names data, which is not an input of the model"),
    (["compile", "{onnx}", "-o", "m.so"],
     "tilecraft compile: error: {onnx}: from_onnx: input 'input' has a dynamic shape [None, 3, 8, 8]"),
    (["compile", "{onnx}", "--tuning-log", "none.jsonl", "-o", "m.so"],
     "tilecraft compile: error: --tuning-log none.jsonl: no such file (add --tune to write it)"),
    (["compile", "{onnx}", "--target", "tpu", "-o", "m.so"], "tilecraft compile: error: --target: unknown target kind"),
    (["compile", "{npz}", "-o", "m.so"], "tilecraft compile: error: {npz}: not an ONNX model"),
    (["compile", "{onnx}", "-o", "nodir/m.so"], "tilecraft compile: error: -o nodir/m.so: the directory"),
    (["run", "{npz}"], "tilecraft run: error: load_module: "),
    (["run", "missing.so"], "tilecraft run: error: missing.so: no such file"),
])
def test_errors_are_one_line(files, capsys, monkeypatch, argv, message):
    _, path, _, tmp = files
    monkeypatch.chdir(tmp)
    subs = {"onnx": str(path), "npz": str(tmp / "in.npz")}
    argv = [a.format(**subs) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message.format(**subs)), err
    assert err.count("\n") == 1


def test_run_input_errors(files, capsys):
    _, path, _, tmp = files
    so = tmp / "net.so"
    assert main(["compile", str(path), "--shape", "input=2,3,8,8", "-o", str(so)]) == 0
    capsys.readouterr()
    np.savez(tmp / "bad.npz", input=np.zeros((1, 3, 8, 8), "float32"))
    np.savez(tmp / "other.npz", image=np.zeros((2, 3, 8, 8), "float32"))
    for argv, message in [
        (["run", str(so)], "no value for input 'input' (give it in --inputs, or --fill random|zeros|ones)"),
        (["run", str(so), "--inputs", str(tmp / "bad.npz")],
         f"--inputs {tmp / 'bad.npz'}: set_input: input 'input' has shape [2, 3, 8, 8], got [1, 3, 8, 8]"),
        (["run", str(so), "--inputs", str(tmp / "other.npz")],
         f"--inputs {tmp / 'other.npz'}: the model has no input 'image'; its inputs: input"),
        (["run", str(so), "--inputs", str(path)], f"--inputs {path}: not a numpy .npz file")]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("tilecraft run: error: " + message), err
        assert err.count("\n") == 1


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit):
        main(["compile", "--help"])
    out = capsys.readouterr().out
    assert "--shape NAME=D0,D1,..." in out and "--tuning-log LOG" in out and "--tune" in out
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "--benchmark" in capsys.readouterr().out
