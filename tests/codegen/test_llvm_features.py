"""cpu_features: the x86 vector features of an LLVM target, from the host or from -mcpu/-mattr
(asked of LLVM in a child process), which the CPU micro-kernels are chosen by."""
import pytest

from tilecraft.codegen.llvm_features import FEATURES, cpu_features
from tilecraft.target import TargetError


def test_host_features_are_llvmlites():
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    host = llvm.get_host_cpu_features()
    got = cpu_features("llvm")
    assert got <= set(FEATURES)
    for name in ("avx2", "fma", "avx512f", "avx512bw", "avx512vnni"):
        assert (name in got) == bool(host.get(name)), name


@pytest.mark.parametrize("cpu,present,absent", [
    ("znver3", {"avx2", "fma"}, {"avx512f", "avx512bw", "avx512vnni", "avxvnni"}),
    ("haswell", {"avx2", "fma"}, {"avx512f", "avxvnni"}),
    ("skylake-avx512", {"avx2", "fma", "avx512f", "avx512bw"}, {"avx512vnni"}),
    ("cascadelake", {"avx512f", "avx512bw", "avx512vnni", "avxvnni"}, set()),
    ("alderlake", {"avx2", "fma", "avxvnni"}, {"avx512f", "avx512vnni"}),
    ("znver4", {"avx512f", "avx512bw", "avx512vnni"}, set()),
    ("x86-64", set(), {"avx2", "fma", "avx512f"}),
], ids=lambda x: x if isinstance(x, str) else None)
def test_cpu_name_decides_the_features_on_any_host(cpu, present, absent):
    """What LLVM compiles for -mcpu=NAME, whatever this machine is (the probes only compile)."""
    got = cpu_features(f"llvm -mcpu={cpu}")
    assert present <= got, (cpu, sorted(got))
    assert not (absent & got), (cpu, sorted(got))


def test_mattr_brings_the_features_it_implies():
    """+avx512vnni implies AVX-512 (LLVM's feature graph), on a CPU that has neither."""
    got = cpu_features("llvm -mcpu=znver3 -mattr=+avx512vnni")
    assert {"avx512vnni", "avx512f", "avx2"} <= got
    assert "avx512f" not in cpu_features("llvm -mcpu=cascadelake -mattr=-avx512f")


def test_unknown_cpu_is_refused_before_llvm_sees_it():
    with pytest.raises(TargetError, match="no CPU 'skylakex'.*did you mean"):
        cpu_features("llvm -mcpu=skylakex")
