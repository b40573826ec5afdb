"""The CPU examples run to completion (each checks its own results against numpy). GPU, RPC
and tuning examples have their own tests."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = [ROOT / "examples" / name for name in
            ("vector_add.py", "matmul_cpu.py", "softmax_cpu.py", "conv2d_cpu.py", "export_library.py",
                         "export_c_library.py")]
ARGS = {"matmul_cpu.py": ["256"]}


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    args = ARGS.get(script.name, [str(tmp_path)] if script.name.startswith("export_") else [])
    r = subprocess.run([sys.executable, str(script), *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"{script.name} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert r.stdout.strip(), f"{script.name} printed nothing"
