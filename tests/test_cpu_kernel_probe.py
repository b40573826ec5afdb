"""bench/cpu_kernel_probe.py's hand-written kernels compute what they are timed as computing: each
fp32 register tile (broadcast in a register or embedded, unrolled, with the clock chain, with the
A prefetch) against numpy on random panels, its output poisoned first; the AMX kernel's C
source compiles for Sapphire Rapids (it runs only on the device host, by the probe itself)."""
import ctypes
import importlib.util
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tilecraft.codegen.llvm_features import cpu_features
from tilecraft.testing import poison

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
HAS_GCC = shutil.which("gcc") is not None
HOST_AVX512 = "avx512f" in cpu_features("llvm")


def load_probe():
    spec = importlib.util.spec_from_file_location("bench_cpu_kernel_probe", BENCH / "cpu_kernel_probe.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def probe_lib(tmp_path_factory):
    if not HAS_GCC:
        pytest.skip("gcc is not installed: the probe's kernels are gcc inline assembly")
    probe = load_probe()
    lib, march, amx = probe.build(amx=True, workdir=str(tmp_path_factory.mktemp("probe")))
    probe.gcc_amx = amx     # False only where gcc is older than 11 (no -mamx-tile)
    return probe, lib


def test_the_kernels_and_the_amx_source_compile(probe_lib):
    probe, lib = probe_lib
    for mr, nv, u, e in probe.FP32_TILES:
        for suffix in ("", "_clk", "_pf"):
            assert hasattr(lib, probe.fp32_name(mr, nv, u, e, suffix))
    assert hasattr(lib, "peak_zmm") and hasattr(lib, "chain16")
    gcc_major = int(subprocess.run(["gcc", "-dumpversion"], capture_output=True, text=True).stdout.split(".")[0])
    assert probe.gcc_amx == (gcc_major >= 11) and hasattr(lib, "amx_kernel") == probe.gcc_amx


@pytest.mark.skipif(not HOST_AVX512, reason="the probe's fp32 kernels are AVX-512 code; this host has no avx512f")
@pytest.mark.parametrize("suffix", ["", "_clk", "_pf"])
def test_every_fp32_tile_computes_a_panel_product(probe_lib, suffix):
    probe, lib = probe_lib
    rng = np.random.default_rng(7)
    kc = 36          # a multiple of every unroll, not of 16 or 32
    for mr, nv, u, e in probe.FP32_TILES:
        nr = 16 * nv
        a = rng.uniform(-1, 1, (kc, mr)).astype("float32")
        # B (and A) followed by 1 KB more: the prefetch reads ahead of the panel
        b = np.concatenate([rng.uniform(-1, 1, kc * nr), np.ones(256)]).astype("float32")
        a_buf = np.concatenate([a.ravel(), np.ones(256, "float32")])
        c = poison((mr, nr), "float32")
        f = getattr(lib, probe.fp32_name(mr, nv, u, e, suffix))
        f.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 2
        f(a_buf.ctypes.data, b.ctypes.data, c.ctypes.data, kc, 2)
        want = a.T.astype(np.float64) @ b[:kc * nr].reshape(kc, nr).astype(np.float64)
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5, err_msg=f"{mr}x{nr} u{u} emb={e}{suffix}")


@pytest.mark.skipif(not HOST_AVX512, reason="the probe's FMA loops are AVX-512 code; this host has no avx512f")
def test_the_clock_and_peak_loops_run(probe_lib):
    probe, lib = probe_lib
    for name in ("chain16", "peak_zmm", "peak_ymm", "zmm_clock", "ymm_clock"):
        f = getattr(lib, name)
        f.argtypes = [ctypes.c_long]
        f(1000)
