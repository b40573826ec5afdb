"""The OpenCL target: golden OpenCL C for TVM's intrin_math exp kernel and for a kernel with shared
memory, barriers and a reduction; every generated source checked by clang's OpenCL front end
(``clang-14``/``clang-19 -x cl -cl-std=CL1.2 -fsyntax-only``); the errors of a module that cannot run.

clang: when neither clang-14 nor clang-19 is on the PATH the syntax checks skip, unless
``TILECRAFT_REQUIRE_CLANG=1`` (CI), where they fail saying clang is missing. Refresh the golden
files with ``pytest tests/codegen/test_opencl.py --update-golden`` and read the diff."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

import tilecraft as tvm
from tilecraft import te
from tilecraft.target import Target, TargetError
from tilecraft.topi import cuda_schedules as cs

HERE = pathlib.Path(__file__).parent / "golden"


def clang_check(src: str, tmp_path) -> None:
    """Fail unless clang's OpenCL C 1.2 front end accepts ``src``."""
    clang = shutil.which("clang-14") or shutil.which("clang-19") or shutil.which("clang")
    if clang is None:
        if os.environ.get("TILECRAFT_REQUIRE_CLANG") == "1":
            pytest.fail("clang (clang-14 or clang-19) is not on the PATH: cannot check the OpenCL C")
        pytest.skip("no clang on the PATH to check the OpenCL C (TILECRAFT_REQUIRE_CLANG=1 makes this a failure)")
    path = tmp_path / "kernel.cl"
    path.write_text(src)
    r = subprocess.run([clang, "-x", "cl", "-cl-std=CL1.2", "-fsyntax-only", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"clang rejects the OpenCL C:\n{r.stderr}\n---\n{src}"


@pytest.fixture
def golden(request):
    update = request.config.getoption("--update-golden")

    def check(name: str, text: str):
        path = HERE / f"{name}.cl.txt"
        if update:
            path.write_text(text)
            return
        if not path.exists():
            pytest.fail(f"no golden file {path}; create it with --update-golden")
        assert text == path.read_text(), f"output differs from {path} (refresh with --update-golden)"
    return check


def exp_schedule(fn=te.exp):
    """TVM's intrin_math tutorial: B = exp(A) over n, 64 threads per block."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: fn(A[i]), name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B]


def shared_rowsum_schedule():
    """C[i] = sum_k 2 A[i, k] (100 x 70: tails), A's tiles staged in shared memory between barriers."""
    A = te.placeholder((100, 70), name="A")
    k = te.reduce_axis((0, 70), name="k")
    C = te.compute((100,), lambda i: te.sum(A[i, k] * 2.0, axis=k), name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    bx, tx = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    ko, _ = s[C].split(k, factor=8)
    s[AS].compute_at(s[C], ko)
    _, t = s[AS].split(s[AS].fuse(*s[AS].op.axis), factor=32)
    s[AS].bind(t, te.thread_axis("threadIdx.x"))
    return s, [A, C]


def source(s, args, name):
    return tvm.build(s, args, "opencl", name=name).imported_modules[0].get_source()


def test_exp_kernel_golden(golden, tmp_path):
    src = source(*exp_schedule(), "myexp")
    assert "__kernel void myexp_kernel(__global const float* restrict A, __global float* restrict B, int n)" in src
    assert "get_group_id(0)" in src and "get_local_id(0)" in src and "= exp(A[" in src
    golden("opencl_myexp", src)
    clang_check(src, tmp_path)


def test_shared_barrier_reduction_golden(golden, tmp_path):
    src = source(*shared_rowsum_schedule(), "rowsum")
    assert "__local float A_shared[" in src and src.count("barrier(CLK_LOCAL_MEM_FENCE);") == 2
    assert "2.0f" in src and "__syncthreads" not in src and "__shared__" not in src
    golden("opencl_rowsum_shared", src)
    clang_check(src, tmp_path)


@pytest.mark.parametrize("fn, name", [(te.exp, "exp("), (te.exp2, "exp2("), (te.log, "log("), (te.sqrt, "sqrt("),
                                      (te.abs, "fabs("), (lambda x: te.power(x, x), "pow("), (te.tanh, "tanh("),
                                      (te.floor, "floor("), (te.round, "rint(")])
def test_math_names(fn, name, tmp_path):
    src = source(*exp_schedule(fn), "f")
    assert f" = {name}" in src
    assert "expf" not in src and "powf" not in src and "__" not in src.split("__kernel", 1)[1].replace(
        "__global", "").replace("__local", "")
    clang_check(src, tmp_path)


def test_cuda_fast_math_extern_does_not_leak(tmp_path):
    """The tutorial's call_pure_extern("float32", "__expf", x) becomes OpenCL's exp."""
    s, args = exp_schedule(lambda x: tvm.tir.call_pure_extern("float32", "__expf", x))
    src = source(s, args, "myexp")
    assert "__expf" not in src and " = exp(A[" in src
    clang_check(src, tmp_path)


def test_int64_uint_and_double_types(tmp_path):
    n = 1000
    A = te.placeholder((n,), name="A", dtype="int64")
    U = te.placeholder((n,), name="U", dtype="uint32")
    D = te.placeholder((n,), name="D", dtype="float64")
    B = te.compute((n,), lambda i: (A[i] * tvm.tir.const(3, "int64")).astype("float64")
                   + U[i].astype("float64") + te.exp(D[i]) * 0.5, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    src = source(s, [A, U, D, B], "mixed")
    assert "__global const long* restrict A" in src and "__global const uint* restrict U" in src
    assert "3L" in src and "long long" not in src and "cl_khr_fp64" in src and "(exp(D[" in src
    clang_check(src, tmp_path)


@pytest.mark.parametrize("case", ["elementwise_vec4", "matmul_vthread_db", "transpose_padded"])
def test_cuda_golden_schedules_are_valid_opencl(case, tmp_path):
    """The CUDA golden cases (vectorized, virtual threads, double buffering, padded shared tiles)."""
    s, args = {"elementwise_vec4": lambda: cs.elementwise(4096),
               "matmul_vthread_db": lambda: cs.matmul(256, 256, 64, block=(64, 64), threads=(8, 8)),
               "transpose_padded": lambda: cs.transpose(64, 64)}[case]()
    src = source(s, args, case)
    assert "__align__" not in src and "__restrict__" not in src
    clang_check(src, tmp_path)


def test_calling_the_module_raises():
    f = tvm.build(*exp_schedule(), "opencl", name="myexp")
    with pytest.raises(TargetError, match=r"no OpenCL runtime in tilecraft: the source is available via "
                                          r"imported_modules\[0\]\.get_source\(\)"):
        f(None, None)
    assert not tvm.runtime.enabled("opencl")


def test_cross_thread_reduction_is_refused():
    s, args = cs.softmax(64, 1024, threads=128)
    with pytest.raises(TargetError, match=r"kernel '.*': a cross-thread reduction .* has no OpenCL translation"):
        tvm.build(s, args, "opencl", name="softmax")


def test_target_kind_and_device_option():
    t = Target("opencl -device=mali")
    assert t.kind == "opencl" and t.attrs["device"] == "mali" and "gpu" in t.keys
    with pytest.raises(TargetError, match="unknown target kind 'vulkan'.*llvm, cuda, opencl"):
        Target("vulkan")
