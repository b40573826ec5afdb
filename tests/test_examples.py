"""The CPU examples run to completion (each checks its own results against numpy). GPU, RPC
and tuning examples have their own tests."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = [ROOT / "examples" / name for name in
            ("vector_add.py", "matmul_cpu.py", "softmax_cpu.py", "conv2d_cpu.py", "export_library.py",
                         "export_c_library.py", "tensorize_cpu.py", "csr_spmv.py", "onnx_model.py",
                         "microkernels_cpu.py", "autodiff_mlp.py", "hybrid_script.py")]
ARGS = {"matmul_cpu.py": ["256"], "microkernels_cpu.py": ["--n", "128"]}


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    args = ARGS.get(script.name, [str(tmp_path)] if script.name.startswith("export_") or
                    script.name == "onnx_model.py" else [])
    r = subprocess.run([sys.executable, str(script), *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"{script.name} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert r.stdout.strip(), f"{script.name} printed nothing"


def test_tune_matmul_example_prints_the_figure_the_tuner_measured(tmp_path):
    """One GFLOP/s figure, the log's best (it printed 9.3 in its bar and 2.5 on its last line)."""
    import json
    log = tmp_path / "mm.jsonl"
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "tune_matmul.py"), "64", "8", str(log)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    last = r.stdout.strip().splitlines()[-1]
    best = max(2 * 64 ** 3 / (sum(rec["costs"]) / len(rec["costs"])) / 1e9
               for rec in map(json.loads, log.read_text().splitlines()) if rec["error"] == "NO_ERROR")
    assert last.startswith(f"best: {best:.1f} GFLOP/s = 2*64^3 FLOP / "), (last, best)
    assert last.count("GFLOP/s") == 1
