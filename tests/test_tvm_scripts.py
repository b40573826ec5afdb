"""TVM TE scripts run unchanged after ``import tilecraft as tvm``: fragments of TVM's tutorials
(get started, matmul on CPU, reductions), checked against numpy."""
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tilecraft as tvm
from tilecraft import te


def test_get_started_vector_add(rng):
    tgt = tvm.target.Target(target="llvm", host="llvm")
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    outer, inner = s[C].split(C.op.axis[0], factor=4)
    s[C].parallel(outer)
    s[C].vectorize(inner)
    fadd = tvm.build(s, [A, B, C], tgt, name="myadd")
    dev = tvm.device(tgt.kind.name, 0)
    a = tvm.nd.array(rng.uniform(size=1023).astype(A.dtype), dev)
    b = tvm.nd.array(rng.uniform(size=1023).astype(B.dtype), dev)
    c = tvm.nd.array(np.full(1023, np.nan, dtype=C.dtype), dev)
    fadd(a, b, c)
    tvm.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy())
    assert fadd.time_evaluator(fadd.entry_name, dev, number=3)(a, b, c).mean > 0
    assert "vectorized" in str(tvm.lower(s, [A, B, C], simple_mode=True))


def test_matmul_tutorial(rng):
    M = K = N = 128
    bn = 32
    k = te.reduce_axis((0, K), "k")
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    packedB = te.compute((N // bn, K, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute((M, N), lambda m, n: te.sum(A[m, k] * packedB[tvm.tir.indexdiv(n, bn), k,
                                                                   tvm.tir.indexmod(n, bn)], axis=k), name="C")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "global")
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    s[CC].compute_at(s[C], no)
    mc, nc = s[CC].op.axis
    (kaxis,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kaxis, factor=4)
    s[CC].reorder(ko, mc, ki, nc)
    s[CC].vectorize(nc)
    s[CC].unroll(ki)
    x, y, z = s[packedB].op.axis
    s[packedB].vectorize(z)
    s[packedB].parallel(x)
    s[C].parallel(mo)
    func = tvm.build(s, [A, B, C], target="llvm", name="mmult")
    dev = tvm.cpu()
    a = tvm.nd.array(rng.random((M, K)).astype("float32"), dev)
    b = tvm.nd.array(rng.random((K, N)).astype("float32"), dev)
    c = tvm.nd.array(np.full((M, N), np.nan, dtype="float32"), dev)
    func(a, b, c)
    tvm.testing.assert_allclose(c.numpy(), a.numpy() @ b.numpy(), rtol=1e-5)


def test_reduction_tutorial(rng):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    f = tvm.build(s, [A, B], "llvm")
    a = rng.random((9, 45)).astype("float32")
    b = np.full(9, np.nan, "float32")
    f(a, b)
    tvm.testing.assert_allclose(b, a.sum(1), rtol=1e-5)


def test_commutative_reducer_tutorial(rng):
    n, m = te.var("n"), te.var("m")
    product = te.comm_reducer(lambda x, y: x * y, lambda t: tvm.tir.const(1, dtype=t), name="product")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: product(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    f = tvm.build(s, [A, B], "llvm")
    a = rng.uniform(0.5, 1.5, (5, 7)).astype("float32")
    b = np.full(5, np.nan, "float32")
    f(a, b)
    tvm.testing.assert_allclose(b, a.prod(1), rtol=1e-5)


def test_from_tilecraft_import_autotune():
    r = subprocess.run([sys.executable, "-c", "from tilecraft import autotune as autotvm, interp"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-500:]


@pytest.mark.slow
def test_autotvm_style_script_tunes_at_top_level(tmp_path):
    script = pathlib.Path(__file__).parent / "tvm_scripts" / "autotvm_matmul.py"
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "mm.log")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("ConfigSpace") == 1 and r.stdout.strip().endswith("OK"), r.stdout[-2000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]


@pytest.mark.slow
def test_tensorize_tutorial(tmp_path):
    """TVM's tensorize tutorial (GEMV micro-kernel in C via clang + import_llvm, then reset +
    update over a split reduction), its steps run with `tvm` imported from tilecraft."""
    from tilecraft.contrib import clang
    if not clang.find_clang(required=False):
        pytest.skip("no usable clang for the tutorial's C micro-kernel (apt-get install clang-19)")
    script = pathlib.Path(__file__).parent / "tvm_scripts" / "tensorize_tutorial.py"
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("OK"), r.stdout[-2000:]
    assert 'call_extern("gemv_update"' in r.stdout and 'call_extern("gemv_reset"' in r.stdout


def test_tensor_core_tutorial_script(tmp_path):
    """TVM's tensor-core convolution tutorial (opt_conv_tensorcore.py) at its own sizes, with `tvm`
    imported from tilecraft: the loop nests before and after tensorizing onto wmma; on a GPU with
    tensor cores it also builds and times the kernel (tests/cuda/test_tensorcore.py emulates and
    compiles it at small sizes, and checks it on a GPU)."""
    script = pathlib.Path(__file__).parent / "tvm_scripts" / "opt_conv_tensorcore.py"
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("OK"), r.stdout[-2000:]
    for call in ("tvm_load_matrix_sync(", "tvm_fill_fragment(", "tvm_mma_sync(", "tvm_store_matrix_sync("):
        assert call in r.stdout
    assert 'allocate(float32[2048], "wmma.accumulator")' in r.stdout     # 2 x 4 tiles of 16 x 16 per warp


def test_tvm_names_of_the_tensor_core_tutorial():
    from tilecraft.contrib import nvcc
    A = tvm.te.placeholder((4,), name="A", dtype="float16")
    assert A[0].astype("float").dtype == "float32" and A[0].astype("int").dtype == "int32"   # TVM's short names
    assert nvcc.have_tensorcore("7.0") and nvcc.have_tensorcore("9.0") and not nvcc.have_tensorcore("6.1")
    assert nvcc.have_tensorcore(None, target="cuda -arch=sm_90")   # this GPU's version, else the target's
    assert tvm.cpu(0).compute_version is None


def test_extern_op_tutorial(tmp_path):
    """TVM's extern_op tutorial: call_packed of tvm.contrib.cblas.matmul, contrib.cblas, and a
    Python function registered with tvm.register_func, run with `tvm` imported from tilecraft."""
    script = pathlib.Path(__file__).parent / "tvm_scripts" / "extern_op.py"
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("OK"), r.stdout[-2000:]


def _run_script(tmp_path, name, *flags):
    script = pathlib.Path(__file__).parent / "tvm_scripts" / name
    r = subprocess.run([sys.executable, str(script), *flags], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("OK"), r.stdout[-2000:]
    return r.stdout


def test_scan_tutorial(tmp_path):
    """TVM's scan tutorial: the cumsum scan scheduled for the GPU (emulated here, compiled with
    nvcc where present), a two-stage scan cell with compute_at, a scan with two states."""
    out = _run_script(tmp_path, "scan.py")
    assert "for scan.idx in range(0, m - 1):" in out and "scan.v1[" in out


@pytest.mark.cuda
def test_scan_tutorial_on_the_gpu(tmp_path):
    """The same script with --gpu: built for "cuda" and run on the device, as the tutorial does."""
    try:
        import pycuda.driver as drv
        drv.init()
        if drv.Device.count() == 0:
            raise RuntimeError("no CUDA device")
    except Exception as e:            # no pycuda, no driver, no device
        pytest.skip(f"no GPU ({e}): test_scan_tutorial emulated the kernels")
    _run_script(tmp_path, "scan.py", "--gpu")


def _gpu_or_skip(emulated_by: str):
    try:
        import pycuda.driver as drv
        drv.init()
        if drv.Device.count() == 0:
            raise RuntimeError("no CUDA device")
    except Exception as e:            # no pycuda, no driver, no device
        pytest.skip(f"no GPU ({e}): {emulated_by} emulated the kernels")


def test_tune_conv2d_cuda_tutorial(tmp_path):
    """TVM's tune_conv2d_cuda tutorial: the template with topi.nn.conv2d_nchw and its knobs, the
    task for "cuda", apply_history_best(None) (the tutorial's empty record file), the kernel built
    and compiled with nvcc; a smaller workload run in the CUDA emulator against
    topi.testing.conv2d_nchw_python."""
    out = _run_script(tmp_path, "tune_conv2d_cuda.py")
    assert "tile_f: Split(" in out and "Best config:" in out


@pytest.mark.cuda
def test_tune_conv2d_cuda_tutorial_on_the_gpu(tmp_path):
    """The same script with --gpu: the tutorial's workload run and timed on the device."""
    _gpu_or_skip("test_tune_conv2d_cuda_tutorial")
    _run_script(tmp_path, "tune_conv2d_cuda.py", "--gpu")


@pytest.mark.cuda
def test_tune_conv2d_cuda_tutorial_tuning_on_the_gpu(tmp_path):
    """The tutorial's tuning step (commented out in the tutorial): 5 XGBTuner trials measured on the
    device and logged, the best of the log applied, built, checked against numpy and timed."""
    _gpu_or_skip("test_tune_conv2d_cuda_tutorial")
    out = _run_script(tmp_path, "tune_conv2d_cuda.py", "--gpu", "--tune")
    records = (tmp_path / "conv2d.log").read_text().splitlines()
    assert len(records) == 5, records
    assert "Time cost of this operator" in out


def test_intrin_math_tutorial(tmp_path):
    """TVM's intrin_math tutorial: call_pure_extern of __expf, te.exp, a CUDA lowering rule for exp
    (register_intrin_lowering, level 99) and a new intrinsic mylog (register_op_attr); each kernel
    built for "cuda" (nvcc) and emulated against numpy. (Its OpenCL build is left out.)"""
    out = _run_script(tmp_path, "intrin_math.py")
    assert "__expf(A[" in out and "= expf(A[" in out and "= logf(A[" in out


@pytest.mark.cuda
def test_intrin_math_tutorial_on_the_gpu(tmp_path):
    """The same script with --gpu: each kernel run on the device against numpy."""
    _gpu_or_skip("test_intrin_math_tutorial")
    _run_script(tmp_path, "intrin_math.py", "--gpu")


def test_tensor_expr_get_started_tutorial(tmp_path):
    """TVM's tensor_expr_get_started tutorial: vector addition (three schedules, timed), its GPU
    version (nvcc build, emulated), mod.save of an object file + contrib.cc.create_shared +
    load_module, export_library, and the six matmul schedules against numpy (256³ here)."""
    out = _run_script(tmp_path, "tensor_expr_get_started.py")
    assert "-----GPU code-----" in out and "myadd.so" in out and "parallelization:" in out


@pytest.mark.cuda
def test_tensor_expr_get_started_tutorial_on_the_gpu(tmp_path):
    """The same script with --gpu: the vector addition run on the device."""
    _gpu_or_skip("test_tensor_expr_get_started_tutorial")
    _run_script(tmp_path, "tensor_expr_get_started.py", "--gpu")


def test_schedule_primitives_tutorial(tmp_path):
    """TVM's schedule_primitives tutorial: every primitive's loop nest printed, and each schedule
    run against numpy (the bound one emulated)."""
    out = _run_script(tmp_path, "schedule_primitives.py")
    assert "i.inner.j.inner.fused" in out and "blockIdx.x" in out


def test_reduction_tutorial_script(tmp_path):
    """TVM's reduction tutorial: row sums (split, bound, rfactor), the cross-thread reduction with
    set_store_predicate built for "cuda" (nvcc) and emulated, a 2-D convolution, a commutative
    reducer; the CPU schedules against numpy."""
    out = _run_script(tmp_path, "reduction.py")
    assert "B.rf" in out and "__global__" in out


@pytest.mark.cuda
def test_reduction_tutorial_script_on_the_gpu(tmp_path):
    """The same script with --gpu: the cross-thread reduction run on the device, as the tutorial does."""
    _gpu_or_skip("test_reduction_tutorial_script")
    _run_script(tmp_path, "reduction.py", "--gpu")


def test_intro_topi_tutorial(tmp_path):
    """TVM's TOPI tutorial: topi.sum, tensor arithmetic and topi.elemwise_sum, then
    topi.cuda.schedule_reduce / schedule_softmax / conv2d_nchw + schedule_conv2d_nchw built for
    "cuda" and emulated against numpy."""
    out = _run_script(tmp_path, "intro_topi.py")
    assert "stage(elemwise_sum, ComputeOp)" in out and "threadIdx.x" in out


@pytest.mark.cuda
def test_intro_topi_tutorial_on_the_gpu(tmp_path):
    """The same script with --gpu: the kernels run on the device at the tutorial's sizes."""
    _gpu_or_skip("test_intro_topi_tutorial")
    _run_script(tmp_path, "intro_topi.py", "--gpu")


def test_tedd_tutorial(tmp_path):
    """TVM's tedd tutorial: conv2d_hwcn + bias + relu with topi.generic's schedule, the three TEDD
    views written as DOT files (before and after normalize), and the schedule run against numpy."""
    out = _run_script(tmp_path, "tedd.py")
    assert "itervar.dot" in out
