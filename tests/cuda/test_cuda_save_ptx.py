"""TVM's way of saving a CUDA module and loading it back (its CUDA tutorials): ``mod.save("x.ptx")``
/ ``"x.cubin"`` / ``"x.cu"`` writes the kernels with ``x.tvm_meta.json`` beside them;
``tilecraft.runtime.load_module("x.ptx")`` reads them back; ``host.import_module(dev)`` makes a
device module's functions reachable through a host module. Writing and reading needs nvcc only
(checked here on every machine with nvcc); running the loaded PTX needs a GPU (cuda-marked run
tests, skipped without one)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tilecraft as tvm
from tilecraft import te
from tilecraft.codegen.cuda_compile import find_nvcc
from tilecraft.runtime.cuda_runtime import CUDAModule

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is absent")


def _vadd(name="myadd"):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return tvm.build(s, [A, B, C], target=tvm.target.Target("cuda -arch=sm_80", host="llvm"), name=name)


def _run(mod, n=1000):
    why = gpu_available()
    if why:
        pytest.skip(why)
    rng = np.random.default_rng()
    dev = tvm.cuda(0)
    a_np, b_np = rng.uniform(-1, 1, n).astype("float32"), rng.uniform(-1, 1, n).astype("float32")
    c = tvm.nd.array(np.full(n, np.nan, "float32"), dev)
    mod(tvm.nd.array(a_np, dev), tvm.nd.array(b_np, dev), c)
    np.testing.assert_allclose(c.numpy(), a_np + b_np, rtol=1e-6)


@needs_nvcc
def test_save_ptx_writes_ptx_and_metadata(tmp_path):
    fadd = _vadd()
    dev_module = fadd.imported_modules[0]
    assert "__global__" in dev_module.get_source()
    path = dev_module.save(str(tmp_path / "myadd.ptx"))
    text = open(path).read()
    assert ".entry myadd_kernel(" in text and ".target sm_80" in text
    assert dev_module.get_source("ptx") == text
    meta = json.load(open(tmp_path / "myadd.tvm_meta.json"))
    assert meta["image"] == "ptx" and meta["entry"] == "myadd" and meta["arch"] == "sm_80"
    loaded = tvm.runtime.load_module(path)
    assert isinstance(loaded, CUDAModule) and loaded.image_kind == "ptx"
    assert loaded.plans == fadd.plans and loaded.entry_name == "myadd" and loaded.get_source() == text
    # saved again from the loaded module: the same PTX
    again = loaded.save(str(tmp_path / "again.ptx"))
    assert open(again).read() == text


@needs_nvcc
def test_save_cubin_and_cu(tmp_path):
    fadd = _vadd()
    cubin = fadd.save(str(tmp_path / "myadd.cubin"))
    assert open(cubin, "rb").read() == fadd.cubin
    loaded = tvm.runtime.load_module(cubin)
    assert loaded.image_kind == "cubin" and loaded.cubin == fadd.cubin and loaded.plans == fadd.plans
    cu = fadd.save(str(tmp_path / "myadd.cu"))
    assert open(cu).read() == fadd.get_source()
    with pytest.raises(ValueError, match=r"this module was loaded from PTX; it has no cubin \(save it as '.ptx'\)"):
        tvm.runtime.load_module(fadd.save(str(tmp_path / "p.ptx"))).save(str(tmp_path / "p.cubin"))


@needs_nvcc
def test_save_and_load_errors(tmp_path):
    fadd = _vadd()
    with pytest.raises(ValueError, match=r"a CUDA module saves as PTX \('.ptx'\), a cubin \('.cubin'\) or CUDA C "
                                         r"\('.cu'\), not 'o'"):
        fadd.save(str(tmp_path / "myadd.o"))
    path = fadd.save(str(tmp_path / "myadd.ptx"))
    (tmp_path / "myadd.tvm_meta.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"needs its metadata file .*myadd.tvm_meta.json.* \(CUDAModule.save "
                                                r"writes it next to the ptx"):
        tvm.runtime.load_module(path)
    (tmp_path / "bad.ptx").write_text("not ptx")
    fadd.save(str(tmp_path / "ok.ptx"))
    (tmp_path / "bad.tvm_meta.json").write_text((tmp_path / "ok.tvm_meta.json").read_text())
    with pytest.raises(ValueError, match=r"is not PTX \(no '.entry' kernel in it\)"):
        tvm.runtime.load_module(str(tmp_path / "bad.ptx"))


@needs_nvcc
def test_import_module_makes_device_functions_reachable(tmp_path):
    """The tutorial's host + device pair: a CPU module with the loaded PTX module imported."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: A[i] * 2.0, name="B")
    host = tvm.build(te.create_schedule(B.op), [A, B], target="llvm", name="host_double")
    assert host.imported_modules == []
    dev = tvm.runtime.load_module(_vadd().save(str(tmp_path / "myadd.ptx")))
    host.import_module(dev)
    assert host.imported_modules == [dev]
    with pytest.raises(KeyError, match=r"the module has no function 'nope'; it has: host_double, myadd"):
        host["nope"]
    if gpu_available():
        pytest.skip(gpu_available())
    _run(host["myadd"])          # on a GPU: the device function, found through the host module


@needs_nvcc
def test_loaded_ptx_runs_on_the_gpu(tmp_path):
    """TVM's tutorial flow on a GPU: save the device module as PTX, load it back, run it."""
    _run(tvm.runtime.load_module(_vadd().imported_modules[0].save(str(tmp_path / "myadd.ptx"))))


@needs_nvcc
def test_loaded_cubin_runs_on_the_gpu(tmp_path):
    why = gpu_available()
    if why:
        pytest.skip(why)
    from tilecraft.runtime.cuda_runtime import device_arch
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    fadd = tvm.build(s, [A, B, C], target=f"cuda -arch={device_arch()}", name="myadd")
    _run(tvm.runtime.load_module(fadd.save(str(tmp_path / "myadd.cubin"))))
