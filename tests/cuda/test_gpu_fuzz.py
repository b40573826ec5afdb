"""The GPU schedule fuzzer (``gpu_fuzz.py``) in CI: a fixed-seed slice of emulated cases per
family, nvcc compiles of a sample of them, and the fuzzer's own machinery (what counts as a
failure, reproducers, the worker pool with its time limit, the ``--gpu`` path with the launch
emulated). Large runs and real-GPU runs: ``python3 tests/cuda/gpu_fuzz.py --help``."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import tilecraft
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc

from . import gpu_fuzz
from .gpu_fuzz import Program, Result, case_seeds, check_program, make_program, run_case, run_many
from .gpu_fuzz_families import FAMILIES

pytestmark = pytest.mark.cuda

SEED = 8                    # the CI slice: fixed, so a failure here replays exactly
CASES_PER_FAMILY = 60
HERE = os.path.dirname(os.path.abspath(__file__))

# Failures the fuzzer finds that are reported and not fixed yet: (family, regex on the message,
# why). A slice whose only failures match one of these is an expected failure (xfail, shown as
# such); any other failure fails the test.
KNOWN_FAILURES: list = []


def _slice(family):
    return [t for t in case_seeds(SEED, CASES_PER_FAMILY * len(FAMILIES)) if t[0] == family]


def _passing(family, n):
    """The first ``n`` cases of the family's slice that pass in the emulator."""
    out = []
    for t in _slice(family):
        if len(out) == n:
            break
        if run_case(*t).status == "passed":
            out.append(t)
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fuzz_slice(family):
    results = run_many(_slice(family))
    failed = [r for r in results if r.status == "failed"]
    unknown = [r for r in failed if not any(f == family and re.search(rx, r.message) for f, rx, _ in KNOWN_FAILURES)]
    assert not unknown, f"{len(unknown)} of {len(results)} {family} cases failed:\n\n" + \
        "\n\n".join(r.reproducer() for r in unknown)
    passed = sum(r.status == "passed" for r in results)
    # the family exercises the compiler, not only its error messages
    assert passed >= 0.7 * len(results), gpu_fuzz.rejection_reasons(results)
    if failed:
        why = [w for f, rx, w in KNOWN_FAILURES if any(re.search(rx, r.message) for r in failed)]
        pytest.xfail(f"{len(failed)} known failure(s): {'; '.join(why)}\n" + "\n\n".join(r.reproducer() for r in failed))


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is absent: the slice was emulated, not compiled")
def test_nvcc_compiles_a_sample():
    funcs = []
    for family in FAMILIES:
        for fam, seed in _passing(family, 3):
            s, args, _ = gpu_fuzz.build_program(make_program(fam, seed))
            funcs.append(tilecraft.lower(s, args, target="cuda", name=f"{fam}_{seed}"))
    src = generate_cuda(funcs)
    assert src.count("__global__") >= len(funcs)
    assert len(compile_cuda(src, "sm_90")) > 0


# --- what the fuzzer reports ---------------------------------------------------------------

_MATMUL = Program(source="""s, args = cs.matmul(40, 24, 12, block=(16, 16), vthreads=(1, 1), threads=(4, 4), k_tile=4)
""", reference="def reference(A, B):\n    return [A @ B]\n", rtol=1e-5, atol=1e-4, must_build=True)


def test_correct_program_passes():
    r = check_program(_MATMUL, "test", 1)
    assert (r.status, r.stage, r.message) == ("passed", "", "")


def test_wrong_values_fail_with_a_reproducer():
    wrong = Program(_MATMUL.source, "def reference(A, B):\n    return [A @ B + 1e-3]\n", 1e-5, 1e-4)
    r = check_program(wrong, "test", 7)
    assert (r.status, r.stage) == ("failed", "emulator")
    assert re.match(r"emulator: 'C' differs from numpy at 960 of 960 elements", r.message)
    rep = r.reproducer()
    assert "case seed 7" in rep and "--replay test:7" in rep and "cs.matmul(40, 24, 12" in rep


def test_reproducer_is_a_runnable_script():
    fam, seed = _slice("matmul_shared")[0]
    r = run_case(fam, seed)
    ns: dict = {}
    exec(r.reproducer().replace("print(tc.lower(", "func = (tc.lower("), ns)
    assert "main_kernel" in generate_cuda(ns["func"])


def test_unwritten_outputs_fail():
    prog = Program("", "def reference(A):\n    return [A * 2]\n")
    from tilecraft import te
    A = te.placeholder((4,), name="A")
    C = te.compute((4,), lambda i: A[i] * 2, name="C")
    data = gpu_fuzz.make_arrays(prog, [A, C], np.random.default_rng(1))
    out = data.arrays[0] * 2
    out[2] = np.nan
    with pytest.raises(gpu_fuzz._Stop, match=r"'C' has 1 of 4 elements never written \(still poisoned\), the first at \(2,\)"):
        gpu_fuzz.compare(prog, data, [data.arrays[0], out], "gpu")
    B = te.placeholder((3,), "int32", name="B")
    D = te.compute((3,), lambda i: B[i] + 1, name="D")
    data = gpu_fuzz.make_arrays(prog, [B, D], np.random.default_rng(1))
    assert (data.arrays[1] == np.iinfo("int32").min).all()          # poisoned with INT_MIN
    got = data.arrays[0] + 1
    got[1] = np.iinfo("int32").min
    with pytest.raises(gpu_fuzz._Stop, match=r"'D' has 1 of 3 elements never written"):
        gpu_fuzz.compare(Program("", "def reference(B):\n    return [B + 1]\n"), data, [data.arrays[0], got], "emulator")


def test_emulator_errors_fail(monkeypatch):
    import tilecraft.schedule.passes.gpu_lower as gl
    monkeypatch.setattr(gl, "insert_barriers", lambda stmt, info: stmt)     # a seeded compiler bug
    r = check_program(_MATMUL, "test", 1)
    assert (r.status, r.stage) == ("failed", "emulate")
    assert "EmulationError" in r.message and "race on shared" in r.message


def test_clear_refusal_is_rejected_unless_a_library_schedule():
    src = """A = te.placeholder((64, 64), name='A')
C = te.compute((64, 64), lambda i, j: A[i, j] * 2, name='C')
s = te.create_schedule(C.op)
args = [A, C]
"""
    r = check_program(Program(src, "def reference(A):\n    return [A * 2]\n"), "test", 1)
    assert (r.status, r.stage) == ("rejected", "lower")
    assert r.message.startswith("GPULoweringError: stage 'C' is not bound to the GPU grid")
    r = check_program(Program(src, "def reference(A):\n    return [A * 2]\n", must_build=True), "test", 1)
    assert (r.status, r.stage) == ("failed", "lower")
    assert r.message.startswith("a library schedule was refused at these sizes: GPULoweringError")


def test_internal_errors_fail(monkeypatch):
    from tilecraft.schedule.passes.gpu_kernels import GPULoweringError
    stop = gpu_fuzz._classify(GPULoweringError("kernel main_kernel uses the variable(s) j.inner.outer, "
                                               "which are not parameters"), "lower", False)
    assert (stop.status, stop.stage) == ("failed", "lower") and stop.message.startswith("internal error")

    def broken(*a, **k):
        raise KeyError("j.inner")
    monkeypatch.setattr(tilecraft, "lower", broken)
    r = check_program(_MATMUL, "test", 1)
    assert (r.status, r.stage) == ("failed", "lower")
    assert r.message.startswith("internal error: KeyError: 'j.inner'")


def test_device_limit_messages_are_recognised():
    assert gpu_fuzz._is_limit_error(RuntimeError("kernel k needs 128 registers per thread × 1024 threads per block"))
    assert not gpu_fuzz._is_limit_error(RuntimeError("cuLaunchKernel failed: an illegal memory access"))


def test_every_family_is_deterministic():
    for family in FAMILIES:
        assert make_program(family, 12345).source == make_program(family, 12345).source


# --- the machinery of large runs -----------------------------------------------------------

def test_worker_pool_survives_hangs_crashes_and_gpu_faults():
    tasks = [("ok", 1), ("sleep", 60), ("crash", 0), ("ok", 2), ("fatal", 0), ("ok", 3)]
    seen = []
    results = run_many(tasks, jobs=2, timeout=4, check=gpu_fuzz.selftest_check, on_result=seen.append)
    assert [(r.family, r.status, r.stage) for r in results] == [
        ("ok", "passed", ""), ("sleep", "failed", "timeout"), ("crash", "failed", "worker"),
        ("ok", "passed", ""), ("fatal", "failed", "gpu"), ("ok", "passed", "")]
    assert results[1].message == "the case took more than 4 s"
    assert results[2].message == "the worker process died (exit code 3)"
    assert len(seen) == len(tasks)
    # after max_seconds no case starts: the ones under way finish, the rest are left out
    some = run_many([("ok", 1), ("ok", 2), ("ok", 3), ("ok", 4)], jobs=2, timeout=30,
                    check=gpu_fuzz.selftest_check, max_seconds=0.01)
    assert [(r.seed, r.status) for r in some] == [(1, "passed"), (2, "passed")]


def test_summary_counts_by_family():
    results = [Result("a", 1, "passed"), Result("a", 2, "rejected", "lower", "ScheduleError: x"),
               Result("b", 3, "failed", "emulate", "EmulationError: race", "s, args = cs.softmax(2, 3)\n")]
    text = gpu_fuzz.summary(results, 1.5, "seed 0, emulator")
    assert re.search(r"^a\s+1\s+1\s+0$", text, re.M) and re.search(r"^b\s+0\s+0\s+1$", text, re.M)
    assert "--replay b:3" in text and "cs.softmax(2, 3)" in text
    assert text.index("cs.softmax(2, 3)") < text.index("family")         # the table comes last
    assert text.endswith("gpu_fuzz: 3 cases (seed 0, emulator): 1 passed, 1 rejected, 1 failed in 1.5 s")
    assert gpu_fuzz.summary(results[:1], 2, "x", not_run=4).endswith(
        "1 passed, 0 rejected, 0 failed in 2.0 s; 4 not run (--max-seconds)")


def test_command_line():
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(HERE))}
    p = subprocess.run([sys.executable, os.path.join(HERE, "gpu_fuzz.py"), "--cases", "8", "--seed", "3",
                        "--jobs", "2", "--families", "elementwise,stencil"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^elementwise\s+\d+\s+\d+\s+0$", p.stdout, re.M)
    assert "gpu_fuzz: 8 cases (seed 3, emulator, 2 jobs): " in p.stdout
    bad = subprocess.run([sys.executable, os.path.join(HERE, "gpu_fuzz.py"), "--families", "nope"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2 and "unknown family 'nope'" in bad.stderr


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is absent: the --gpu path builds with nvcc")
def test_gpu_path_with_the_launch_emulated():
    # everything --gpu does (tilecraft.build with nvcc, the module's launch plan, arrays in and
    # out, a second comparison) except the launch, which runs the module's function emulated
    tasks = [_passing(f, 1)[0] for f in ("matmul_shared", "row_reduce", "library")]
    results = run_many(tasks, device="emulated-gpu")
    assert [r.status for r in results] == ["passed"] * 3, [r.reproducer() for r in results]
    wrong = Program(_MATMUL.source, "def reference(A, B):\n    return [A @ B]\n", 1e-5, 1e-4)

    class Corrupting(gpu_fuzz.EmulatedDevice):
        def execute(self, mod, arrays, scalars):
            out = super().execute(mod, arrays, scalars)
            out[-1][0, 0] += 1.0
            return out
    r = check_program(wrong, "test", 1, device=Corrupting())
    assert (r.status, r.stage) == ("failed", "emulated-gpu")
    assert r.message.startswith("emulated-gpu: 'C' differs from numpy at 1 of 960 elements")


def test_on_the_gpu():
    from .test_cuda_ops import gpu_available
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: the fuzz slice ran in the emulator only")
    tasks = [t for f in FAMILIES for t in _slice(f)[:6]]
    results = run_many(tasks, device="gpu")
    failed = [r for r in results if r.status == "failed"
              and not any(f == r.family and re.search(rx, r.message) for f, rx, _ in KNOWN_FAILURES)]
    assert not failed, "\n\n".join(r.reproducer() for r in failed)
