"""The C API of an exported CUDA model (``tilecraft/runtime/model_capi_cuda.py``):
``lib.export_library("libnet.so")`` of a ``relay.build(target="cuda")`` compiled by gcc against
cuda.h, and the example C program (``examples/cuda_model_main.c``) linked with it.

Without a GPU the program runs against a stand-in driver (``fake_libcuda.c``: host memory, every
launch logged), and its launches must be the Python executor's (kernel, grid, block, shared
memory, which buffer each argument is: the same memory plan), the weights uploaded must be the
packed weights, the input the program's; the driver's errors reach ``tilecraft_model_error()``
in words; a machine without libcuda gets a message, not a loader failure. The ``cuda``-marked
test runs the program on the GPU: its output equals the Python executor's bit for bit and
onnxruntime's within tolerance."""
import ctypes.util
import os
import pathlib
import shutil
import subprocess
import types

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import relay
from tilecraft.contrib import graph_executor
from tilecraft.runtime.cuda_graph_executor import CUDAGraphExecutor, DeviceView
from tilecraft.runtime.cuda_runtime import CUDAFunction
from tilecraft.runtime.graph_executor import pack_params
from tilecraft.runtime.model_capi import ModelAPIError
from tilecraft.runtime.model_capi_cuda import cuda_include_dir, launch_table

from relay_helpers import run_ort
from test_relay_cuda import _gpu_reason, build_cuda, needs_nvcc, tiny_cnn

pytestmark = [pytest.mark.filterwarnings("ignore:no tuned configuration"),
              pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to compile the C program"),
              pytest.mark.skipif(cuda_include_dir() is None, reason="needs the CUDA toolkit's cuda.h")]
HERE = pathlib.Path(__file__).resolve().parent
MAIN = HERE.parents[1] / "examples" / "cuda_model_main.c"


def fnv(data: bytes) -> int:
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & (2**64 - 1)
    return h


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The tiny CNN built for cuda, exported as libnet.so, the example program linked with it,
    and the stand-in driver."""
    needs_nvcc()
    rng = np.random.default_rng(1234)
    model, inputs = tiny_cnn(rng, batch=2)
    mod, params = relay.frontend.from_onnx(model, shape={"x": inputs["x"].shape})
    lib = build_cuda(mod, params)
    d = tmp_path_factory.mktemp("capi_cuda")
    path = lib.export_library(d / "libnet.so")
    assert path == str(d / "libnet.so") and (d / "net.h").exists()
    subprocess.run(["gcc", "-O1", str(MAIN), "-DMODEL_HEADER=\"net.h\"", f"-I{d}", f"-L{d}", "-lnet",
                    f"-Wl,-rpath,{d}", "-o", str(d / "main")], check=True)
    fake = d / "fake"
    fake.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", f"-I{cuda_include_dir()}", str(HERE / "fake_libcuda.c"),
                    "-o", str(fake / "libcuda.so.1")], check=True)
    (d / "nargs.txt").write_text("".join(f"{k.name} {len(k.params)}\n" for p in lib.module.plans.values()
                                         for k in p.kernels))
    return types.SimpleNamespace(lib=lib, dir=d, model=model, fake=fake)


def run_main(ex, x: np.ndarray, fake: bool = True, **env):
    (ex.dir / "x.bin").write_bytes(np.ascontiguousarray(x).tobytes())
    out = ex.dir / "y.bin"
    if out.exists():
        out.unlink()
    e = dict(os.environ, TC_FAKE_CUDA_LOG=str(ex.dir / "log.txt"), TC_FAKE_CUDA_ARGS=str(ex.dir / "nargs.txt"), **env)
    if fake:
        e["LD_LIBRARY_PATH"] = str(ex.fake)
    proc = subprocess.run([str(ex.dir / "main"), str(ex.dir / "x.bin"), str(out)], capture_output=True, text=True,
                          env=e, timeout=120)
    log = (ex.dir / "log.txt").read_text().splitlines() if fake and (ex.dir / "log.txt").exists() else []
    return proc, log


class RecordingDevice:
    """The Python executor's device, recording instead of launching: memory is numbered
    allocations; ``prepare`` is ``CUDAFunction.prepare`` (the pycuda path's argument checks,
    grids and workspaces) over kernels that are only their plans."""

    def __init__(self, module):
        self.module, self.bases = module, []

    def alloc(self, nbytes):
        self.bases.append((len(self.bases) + 1) << 40)
        return self.bases[-1]

    def view(self, base, offset, shape, dtype):
        return DeviceView(base + offset, shape, dtype)

    def upload(self, dst, src):
        pass

    def prepare(self, func, args):
        plan = self.module.plans[func]
        kernels = [types.SimpleNamespace(plan=k, fn=k.name, block=k.block, smem=k.dynamic_shared_bytes,
                                         static_grid=tuple(k.grid)) for k in plan.kernels]
        f = CUDAFunction(self.module, plan, kernels)
        f._workspace = lambda j, size: self.alloc(size)
        return f.prepare(args)


def canonical(launches, weights_of):
    """Launches with each argument as ("w", offset) inside the weights, else the order in which
    its address first appears (the aliasing pattern of the memory plan)."""
    seen, out = {}, []
    for name, grid, block, smem, ptrs in launches:
        args = []
        for p in ptrs:
            w = weights_of(p)
            args.append(("w", w) if w is not None else seen.setdefault(p, len(seen)))
        out.append((name, tuple(grid), tuple(block), smem, tuple(args)))
    return out


def test_c_program_launches_what_the_python_executor_launches(exported):
    lib = exported.lib
    x = np.random.default_rng(7).standard_normal((2, 3, 10, 10)).astype("float32")
    proc, log = run_main(exported, x)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "input 'x' float32, 2400 bytes" in proc.stdout and proc.stdout.rstrip().endswith("ok")
    blob, table = pack_params(lib.params)
    assert log[:2] == ["retain", "load elf"]
    allocs = {ln.split()[1]: int(ln.split()[2]) for ln in log if ln.startswith("alloc")}
    htod = [ln.split()[1:] for ln in log if ln.startswith("htod")]
    assert htod[0] == ["A1+0", str(len(blob)), str(fnv(blob))]              # the weights, once, at create
    assert htod[1][1:] == [str(x.nbytes), str(fnv(x.tobytes()))]            # the input
    assert len(htod) == 2 and allocs["A1"] == len(blob)
    c_launches = []
    for ln in log:
        if ln.startswith("launch"):
            f = ln.split()
            ptrs = [(int(a[1:a.index("+")]), int(a[a.index("+") + 1:])) for a in f[9:]]
            c_launches.append((f[1], tuple(map(int, f[2:5])), tuple(map(int, f[5:8])), int(f[8]), ptrs))
    assert len(c_launches) % 2 == 0                     # the program runs the model twice
    runs = len(c_launches) // 2
    assert c_launches[:runs] == c_launches[runs:]
    rec = RecordingDevice(lib.module)
    ex = CUDAGraphExecutor(lib.graph, lib.module, lib.params, device=rec)
    py = [(fn, grid, block, smem, kargs) for calls in ex._steps for fn, grid, block, kargs, smem in calls
          if grid is not None]
    weights_base = rec.bases[0]                          # the executor allocates the weights first
    want = canonical(py, lambda p: p - weights_base if 0 <= p - weights_base < len(blob) else None)
    got = canonical(c_launches[:runs], lambda p: p[1] if p[0] == 1 else None)
    assert got == want
    # each weight argument is at its packed offset, in both
    assert {a[1] for *_, args in got for a in args if isinstance(a, tuple)} <= {t["offset"] for t in table}
    assert [ln for ln in log if ln.startswith(("free", "unload", "release"))] == ["free A0", "free A1", "unload",
                                                                                 "release"]


def test_the_driver_errors_reach_the_caller(exported):
    x = np.ones((2, 3, 10, 10), "float32")
    proc, _ = run_main(exported, x, TC_FAKE_CUDA_INIT="100")
    assert proc.returncode == 1
    assert proc.stdout.strip() == "error: create: cuInit failed (100: CUDA_ERROR_NO_DEVICE)"
    proc, _ = run_main(exported, x, TC_FAKE_CUDA_CC="80")
    assert proc.stdout.strip() == (f"error: create: the kernels were compiled for {exported.lib.module.arch} but GPU 0 "
                                   "is sm_80: build the model with target='cuda -arch=sm_80'")
    proc, _ = run_main(exported, x[:1])
    assert "error: set_input: input 'x' has 2400 bytes, got 1200" in proc.stdout


def test_without_libcuda_create_says_so(exported, tmp_path):
    if ctypes.util.find_library("cuda"):
        pytest.skip("a libcuda is installed on this machine: its absence cannot be simulated")
    proc, _ = run_main(exported, np.ones((2, 3, 10, 10), "float32"), fake=False, LD_LIBRARY_PATH=str(tmp_path))
    assert proc.returncode == 1
    assert proc.stdout.startswith("error: create: the CUDA driver library libcuda.so.1 could not be loaded (")
    assert proc.stdout.rstrip().endswith("): this model needs an NVIDIA GPU and its driver")


def test_a_kernel_with_more_than_48k_of_shared_memory_opts_in(exported, tmp_path):
    """A kernel whose tiles need dynamic shared memory above 48 KiB is given it at create
    (``cuFuncSetAttribute``) and launched with it, as the Python runtime does."""
    from tilecraft.runtime.model_capi_cuda import export_cuda_c_library
    lib = exported.lib
    plans = dict(lib.module.plans)
    name = next(n["func"] for n in lib.graph["nodes"] if n["op"] == "kernel")
    k0 = plans[name].kernels[0]
    big = type(k0)(k0.name, k0.grid, k0.block, k0.params, k0.types, k0.bindings, (("AS", 16384, "float32"),))
    assert big.dynamic_shared_bytes == 65536
    plans[name] = type(plans[name])(plans[name].signature, plans[name].workspace, (big,) + plans[name].kernels[1:])
    module = types.SimpleNamespace(plans=plans, cubin=lib.module.cubin, arch=lib.module.arch, image_kind="cubin")
    d = tmp_path
    export_cuda_c_library(lib.graph, module, lib.params, d / "libnet.so")
    subprocess.run(["gcc", str(MAIN), "-DMODEL_HEADER=\"net.h\"", f"-I{d}", f"-L{d}", "-lnet", f"-Wl,-rpath,{d}",
                    "-o", str(d / "main")], check=True)
    ex = types.SimpleNamespace(dir=d, fake=exported.fake)
    (d / "nargs.txt").write_text((exported.dir / "nargs.txt").read_text())
    proc, log = run_main(ex, np.ones((2, 3, 10, 10), "float32"))
    assert proc.returncode == 0, proc.stdout
    assert [ln for ln in log if ln.startswith("attribute")] == [f"attribute {k0.name} 8 65536"]
    assert all(ln.split()[8] == "65536" for ln in log if ln.startswith(f"launch {k0.name} "))


def test_kernels_with_scalar_arguments_are_refused(exported):
    lib = exported.lib
    plans = dict(lib.module.plans)
    name = next(iter(plans))
    k0 = plans[name].kernels[0]
    bad = type(k0)(k0.name, k0.grid, k0.block, k0.params, "P" * (len(k0.params) - 1) + "i")
    plans[name] = type(plans[name])(plans[name].signature, plans[name].workspace, (bad,) + plans[name].kernels[1:])
    node = next(i for i, n in enumerate(lib.graph["nodes"]) if n.get("func") == name)
    with pytest.raises(ModelAPIError, match=f"kernel {k0.name} of {name} \\(node {node}\\) takes scalar arguments"):
        launch_table(lib.graph, plans)
    tmap = type(k0)(k0.name, k0.grid, k0.block, (("tmap", 0),) + k0.params[1:], "Q" + k0.types[1:])
    plans[name] = type(plans[name])(plans[name].signature, plans[name].workspace, (tmap,) + plans[name].kernels[1:])
    with pytest.raises(ModelAPIError, match=r"takes tensor maps \(TMA\) \(Q"):
        launch_table(lib.graph, plans)


@pytest.mark.cuda
def test_resnet50_fp16_from_c_equals_the_python_executor(tmp_path):
    """ResNet-50 in float16 (batch 2; tensor-core kernels, NHWC pooling, large shared tiles)
    exported as a C library: the C program's output equals the Python executor's bit for bit."""
    why = _gpu_reason()
    if why:
        pytest.skip(f"{why}: the C program's launches are checked against a stand-in driver above")
    torch = pytest.importorskip("torch")
    from test_relay_cuda import bench_module
    rc = bench_module("relay_cuda")
    torch.manual_seed(0)
    model = rc.randomize(torch, rc.resnet50(torch, torch.nn))
    mod, params = relay.frontend.from_torch(model, (torch.rand(2, 3, 224, 224),))
    lib = build_cuda(relay.transform.ToMixedPrecision("float16")(mod), params)
    lib.export_library(tmp_path / "libnet.so")
    subprocess.run(["gcc", str(MAIN), "-DMODEL_HEADER=\"net.h\"", f"-I{tmp_path}", f"-L{tmp_path}", "-lnet",
                    f"-Wl,-rpath,{tmp_path}", "-o", str(tmp_path / "main")], check=True)
    x = np.random.default_rng(5).uniform(-1, 1, (2, 3, 224, 224)).astype("float32")
    ex = types.SimpleNamespace(dir=tmp_path, fake=None)
    proc, _ = run_main(ex, x, fake=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = np.frombuffer((tmp_path / "y.bin").read_bytes(), "float32").reshape(2, 1000)
    m = graph_executor.GraphModule(lib["default"](tc.cuda(0)))
    m.set_input(0, x)
    m.run()
    np.testing.assert_array_equal(got, m.get_output(0).numpy())
    with torch.no_grad():
        want = model.cuda().half()(torch.from_numpy(x).cuda().half()).float().cpu().numpy()
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


@pytest.mark.cuda
def test_c_program_on_the_gpu_matches_python_and_onnxruntime(exported):
    why = _gpu_reason()
    if why:
        pytest.skip(f"{why}: the C program's launches are checked against a stand-in driver above")
    x = np.random.default_rng(11).standard_normal((2, 3, 10, 10)).astype("float32")
    proc, _ = run_main(exported, x, fake=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = np.frombuffer((exported.dir / "y.bin").read_bytes(), "float32").reshape(2, 10)
    m = graph_executor.GraphModule(exported.lib["default"](tc.cuda(0)))
    m.set_input("x", x)
    m.run()
    np.testing.assert_array_equal(got, m.get_output(0).numpy())
    np.testing.assert_allclose(got, run_ort(exported.model, {"x": x})[0], rtol=1e-4, atol=1e-5)
