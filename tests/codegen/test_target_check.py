"""-mcpu / -mattr are checked before LLVM sees them: LLVM aborts the whole process on an unknown
x86-64 CPU ("LLVM ERROR: 64-bit code requested...") and on an -mattr entry without +/-."""
import subprocess
import sys

import pytest

import tilecraft
import tilecraft.autotune as autotune
from tilecraft import te
from tilecraft.codegen.llvm_target import _llvm, check_target, known_cpus_and_features
from tilecraft.target import TargetError

from llvm_ir_helpers import poisoned


@autotune.template("test/target_check_vadd")
def vadd(n: int):
    cfg = autotune.get_config()
    cfg.define_knob("unroll", [0, 1])
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i] + 1.0, name="C")
    return te.create_schedule(C.op), [A, C]


class CountingBuilder:
    n_parallel = 1

    def __init__(self):
        self.built = []

    def set_task(self, task):
        pass

    def build(self, inputs):
        self.built.extend(inputs)
        raise AssertionError("nothing may be built for a bad target")


class NoRunner:
    n_parallel = 1

    def set_task(self, task):
        pass

    def run(self, inputs, build_results):
        raise AssertionError("nothing may run for a bad target")


def test_the_names_llvm_knows_are_listed():
    cpus, features = known_cpus_and_features(_llvm().get_process_triple())
    assert _llvm().get_host_cpu_name() in cpus
    assert "generic" in cpus and "avx2" in features and "64bit" in features


def test_unknown_cpu_lists_valid_names_and_the_closest():
    with pytest.raises(TargetError) as e:
        check_target("llvm -mcpu=skylakex")
    msg = str(e.value)
    assert "target 'llvm -mcpu=skylakex': LLVM knows no CPU 'skylakex'" in msg
    assert "did you mean 'skylake'" in msg and "skylake-avx512" in msg
    assert f"This machine's CPU is {_llvm().get_host_cpu_name()!r}" in msg
    assert "Valid CPUs: " in msg and "znver3" in msg and "x86-64-v3" in msg


@pytest.mark.parametrize("target, expected", [
    ("llvm -mattr=avx2", "each -mattr entry must be +feature or -feature (e.g. -mattr=+avx2,+fma), got 'avx2'"),
    ("llvm -mattr=+avx2,fma", "got 'fma'"),
    ("llvm -mattr=+avx3", "LLVM knows no feature 'avx3'"),
    ("llvm -mcpu=znver3 -mattr=+", "got '+'"),
])
def test_bad_features_are_named(target, expected):
    with pytest.raises(TargetError, match="Valid features: |must be \\+feature") as e:
        check_target(target)
    assert expected in str(e.value)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=skylake-avx512", "llvm -mcpu=x86-64-v3 -mattr=+avx2,-fma",
                                    "llvm -mcpu=generic", "llvm -mattr=+sse4.2", "cuda"])
def test_valid_targets_pass(target):
    check_target(target)


def test_a_bad_cpu_is_a_python_error_not_an_abort():
    """Before, this process died of SIGABRT inside LLVM."""
    code = ("import tilecraft\nfrom tilecraft import te\n"
            "A = te.placeholder((8,), name='A')\nC = te.compute((8,), lambda i: A[i] + 1.0, name='C')\n"
            "tilecraft.build(te.create_schedule(C.op), [A, C], target='llvm -mcpu=skylakex')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "TargetError: target 'llvm -mcpu=skylakex': LLVM knows no CPU" in p.stderr
    assert "LLVM ERROR" not in p.stderr


def test_a_bad_cpu_fails_task_creation_and_tuning_once():
    with pytest.raises(TargetError, match="no CPU 'skylakex'"):
        autotune.task.create("test/target_check_vadd", args=(64,), target="llvm -mcpu=skylakex")
    task = autotune.task.create("test/target_check_vadd", args=(64,), target="llvm")
    task.target = tilecraft.target.Target("llvm -mcpu=skylakex")     # made by hand, past create()
    builder = CountingBuilder()
    with pytest.raises(TargetError, match="no CPU 'skylakex'"):
        autotune.tuner.RandomTuner(task).tune(2, autotune.measure_option(builder=builder, runner=NoRunner()))
    assert builder.built == []


def test_build_with_a_valid_cpu_still_works(rand):
    A = te.placeholder((100,), name="A")
    C = te.compute((100,), lambda i: A[i] * 2.0, name="C")
    f = tilecraft.build(te.create_schedule(C.op), [A, C], target="llvm -mcpu=x86-64-v2")
    a = rand((100,))
    c = poisoned((100,))
    f(a, c)
    assert (c == a * 2.0).all()
