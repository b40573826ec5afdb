"""tests/cuda is imported as the package ``cuda`` under pytest; NVIDIA's ``cuda`` namespace
package (``cuda.pathfinder``, which CuPy imports) must still resolve beside it."""
import os
import subprocess
import sys


def test_nvidia_cuda_namespace_resolves_beside_the_test_package(tmp_path):
    (tmp_path / "cuda" / "pathfinder").mkdir(parents=True)
    (tmp_path / "cuda" / "pathfinder" / "__init__.py").write_text("FOUND = 'pathfinder'\n")
    tests = os.path.dirname(os.path.abspath(__file__))
    code = (f"import sys; sys.path.insert(0, {tests!r}); import cuda, cuda.pathfinder; "
            "print(cuda.__file__, cuda.pathfinder.FOUND)")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [os.path.join(tests, "cuda", "__init__.py"), "pathfinder"]
