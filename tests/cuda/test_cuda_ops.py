"""GPU schedules of common operators, checked three ways:

* ``test_codegen``: lower for CUDA, run the kernels in the CPU emulator (lock-step threads, race
  and bounds checks) against numpy, and compile the CUDA C with ``nvcc -cubin -arch=sm_90``
  (skipped only when nvcc is absent). Needs no GPU.
* ``test_gpu``: build, run on the GPU through pycuda and compare with numpy (skipped without a
  GPU and pycuda).
"""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import emulate

from . import cuda_cases
from .cuda_cases import CASE_IDS, CASES, check_outputs, make_arrays

pytestmark = pytest.mark.cuda


def gpu_available() -> str | None:
    """None if kernels can run here, else why not."""
    try:
        import pycuda.driver as drv
    except ImportError:
        return "pycuda is not installed"
    try:
        drv.init()
        if drv.Device.count() == 0:
            return "no CUDA device"
    except Exception as e:            # no driver
        return f"no usable CUDA driver ({e})"
    return None


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_codegen(case, rng):
    s, args = case.make(**case.emu)
    func = tilecraft.lower(s, args, target="cuda")
    src = generate_cuda(func)
    assert "__global__" in src and "__launch_bounds__" in src
    ins, outs = make_arrays(case, rng, case.emu)
    emulate(func, ins + outs)
    check_outputs(case, ins, outs, case.emu, "emulator")
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and emulated but not compiled")
    cubin = compile_cuda(src, "sm_90")
    assert len(cubin) > 0
    # the device-size schedule must compile too
    s, args = case.make(**case.gpu)
    compile_cuda(generate_cuda(tilecraft.lower(s, args, target="cuda")), "sm_90")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gpu(case, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: the kernel was checked by test_codegen (emulator + nvcc) only")
    from tilecraft.runtime import cuda_ndarray
    s, args = case.make(**case.gpu)
    mod = tilecraft.build(s, args, target="cuda")
    dev = tilecraft.cuda(0)
    for trial in range(2):                 # fresh inputs each time
        ins, outs = make_arrays(case, rng, case.gpu)
        d_ins = [cuda_ndarray.array(a, dev) for a in ins]
        d_outs = [cuda_ndarray.array(a, dev) for a in outs]
        mod(*d_ins, *d_outs)
        check_outputs(case, ins, [d.numpy() for d in d_outs], case.gpu, "gpu")


def test_float64_to_float16_rounds_once_in_cuda_c():
    # through float the value would be rounded twice; the emulator runs the IR, so check the C
    s, args = cuda_cases._cast_f64_f16(64)
    src = generate_cuda(tilecraft.lower(s, args, target="cuda"))
    assert "__double2half(" in src and "(float)" not in src
