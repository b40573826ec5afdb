"""How many of TVM's own TE / AutoTVM unit tests and tutorials run on tilecraft with only their
imports changed (issue 15's measure of the TVM surface).

Reads TVM's files from a TVM git repository at a revision (default v0.14.0; nothing of TVM is
copied into this repository), rewrites only their import statements (``import tvm`` ->
``import tilecraft as tvm``, ``from tvm.x import y`` -> ``from tilecraft.x import y``, with
``autotvm`` -> ``autotune`` in module paths, as a TVM user porting a script would), and runs
them in a scratch folder:

* unit tests: ``tests/python/unittest/test_te_*.py`` and ``test_autotvm_*.py``, each file under
  pytest with a time limit; a test case counts when pytest reports it passed (skips count as not
  run; a file that fails to import counts all its ``def test_`` functions as failed);
* tutorials: TVM's TE / AutoTVM gallery scripts (``TUTORIALS``), each run as ``python
  script.py``; it counts when it exits with 0 within the limit.

    python bench/tvm_surface_count.py --tvm /path/to/tvm [--rev v0.14.0] [--timeout 300] [--json out.json]
                                      [--only tests|tutorials] [--match opt_gemm]

The result depends on the machine (no GPU: CUDA tutorials that launch kernels fail) and on the
time limit. This is a count of what TVM's own files do here, not a test: tilecraft's ports of
them (``tests/tvm_api``, ``tests/tvm_scripts``, ``tests/te/test_hybrid.py``) are the tests.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

TUTORIALS = [
    "gallery/tutorial/tensor_expr_get_started.py",
    "gallery/tutorial/autotvm_matmul_x86.py",
    "gallery/tutorial/intro_topi.py",
    "gallery/how_to/work_with_schedules/schedule_primitives.py",
    "gallery/how_to/work_with_schedules/reduction.py",
    "gallery/how_to/work_with_schedules/scan.py",
    "gallery/how_to/work_with_schedules/extern_op.py",
    "gallery/how_to/work_with_schedules/intrin_math.py",
    "gallery/how_to/work_with_schedules/tedd.py",
    "gallery/how_to/work_with_schedules/tensorize.py",
    "gallery/how_to/work_with_schedules/tuple_inputs.py",
    "gallery/how_to/optimize_operators/opt_gemm.py",
    "gallery/how_to/optimize_operators/opt_conv_cuda.py",
    "gallery/how_to/optimize_operators/opt_conv_tensorcore.py",
    "gallery/how_to/tune_with_autotvm/tune_conv2d_cuda.py",
]
TEST_GLOB = re.compile(r"^tests/python/unittest/test_(te|autotvm)_\w+\.py$")


def _module_path(path: str) -> str:
    path = re.sub(r"^tvm\b", "tilecraft", path)
    return re.sub(r"\bautotvm\b", "autotune", path)


def rewrite_imports(src: str) -> str:
    """TVM's import statements as tilecraft's; every other line as it is."""
    out = []
    for line in src.splitlines():
        m = re.match(r"^(\s*)import tvm, (.*)$", line)          # import tvm, numpy, ...
        if m:
            out.append(f"{m.group(1)}import tilecraft as tvm; import {m.group(2)}")
            continue
        m = re.match(r"^(\s*)import (tvm(?:\.[\w.]+)?)(?: as (\w+))?\s*$", line)
        if m:
            indent, mod, alias = m.groups()
            if mod == "tvm":
                line = f"{indent}import tilecraft as {alias or 'tvm'}"
            elif alias:
                line = f"{indent}import {_module_path(mod)} as {alias}"
            else:
                line = f"{indent}import {_module_path(mod)}; import tilecraft as tvm"
        else:
            m = re.match(r"^(\s*)from (tvm(?:\.[\w.]+)?) import (.*)$", line)
            if m:
                line = f"{m.group(1)}from {_module_path(m.group(2))} import {m.group(3)}"
        out.append(line)
    return "\n".join(out) + "\n"


def _git(repo: str, *args) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def run_tests(repo, rev, files, folder, timeout, env) -> list:
    results = []
    for path in files:
        src = _git(repo, "show", f"{rev}:{path}")
        local = os.path.join(folder, os.path.basename(path))
        with open(local, "w") as f:
            f.write(rewrite_imports(src))
        n_defs = len(re.findall(r"^def test_", src, flags=re.M))
        t0 = time.time()
        try:
            p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", local],
                               cwd=folder, capture_output=True, text=True, timeout=timeout, env=env)
            text = p.stdout
        except subprocess.TimeoutExpired as e:
            text = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            text += "\nTIMEOUT"
        passed = len(re.findall(r"^PASSED \S*::", text, flags=re.M))
        failed = len(re.findall(r"^(?:FAILED|ERROR) \S*::", text, flags=re.M))     # not a collection error
        skipped = len(re.findall(r"^SKIPPED ", text, flags=re.M))
        errors = re.findall(r"^E   (.*)$", text, flags=re.M)
        cases = passed + failed + skipped
        if cases == 0 or "TIMEOUT" in text:           # did not import, or ran out of time
            cases = max(cases, n_defs)
            failed = cases - passed - skipped
        results.append({"file": path, "cases": cases, "passed": passed, "failed": failed, "skipped": skipped,
                        "seconds": round(time.time() - t0, 1), "timeout": "TIMEOUT" in text,
                        "first_error": errors[0][:200] if errors else ""})
        print(f"{passed:3d}/{cases:3d}  {path}  {results[-1]['first_error'][:110]}", flush=True)
    return results


def run_tutorials(repo, rev, paths, folder, timeout, env) -> list:
    results = []
    for path in paths:
        src = _git(repo, "show", f"{rev}:{path}")
        local = os.path.join(folder, "tutorial_" + os.path.basename(path))
        with open(local, "w") as f:
            f.write(rewrite_imports(src))
        t0 = time.time()
        try:
            p = subprocess.run([sys.executable, local], cwd=folder, capture_output=True, text=True,
                               timeout=timeout, env=env)
            ok, why = p.returncode == 0, (p.stderr.strip().splitlines() or [""])[-1][:200]
        except subprocess.TimeoutExpired:
            ok, why = False, f"timeout after {timeout} s"
        results.append({"tutorial": path, "ok": ok, "why": "" if ok else why,
                        "seconds": round(time.time() - t0, 1)})
        print(f"{'ok  ' if ok else 'FAIL'}  {path}  {'' if ok else why}", flush=True)
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tvm", required=True, help="a TVM git repository (a bare mirror works)")
    ap.add_argument("--rev", default="v0.14.0")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per test file / tutorial")
    ap.add_argument("--only", choices=("tests", "tutorials"), default=None)
    ap.add_argument("--json", default=None, help="write the per-file results here")
    ap.add_argument("--match", default="", help="only the files whose path contains this")
    args = ap.parse_args(argv)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    files = sorted(p for p in _git(args.tvm, "ls-tree", "-r", "--name-only", args.rev, "tests/python/unittest")
                   .splitlines() if TEST_GLOB.match(p))
    files = [p for p in files if args.match in p]
    tutorials = [p for p in TUTORIALS if args.match in p]
    out = {"rev": args.rev}
    with tempfile.TemporaryDirectory(prefix="tvm_surface_") as folder:
        if args.only != "tutorials":
            out["tests"] = run_tests(args.tvm, args.rev, files, folder, args.timeout, env)
        if args.only != "tests":
            out["tutorials"] = run_tutorials(args.tvm, args.rev, tutorials, folder, args.timeout, env)
    if "tests" in out:
        t = out["tests"]
        print(f"unit tests: {sum(r['passed'] for r in t)} of {sum(r['cases'] for r in t)} cases pass "
              f"({sum(r['skipped'] for r in t)} skipped) in {len(t)} files")
    if "tutorials" in out:
        print(f"tutorials: {sum(r['ok'] for r in out['tutorials'])} of {len(out['tutorials'])} run")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
