"""What the CUDA backend says when a schedule or the generated code is wrong, the race checker,
the nvcc cache, and that building CUDA C needs neither pycuda nor a GPU."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tilecraft
from tilecraft import te
from tilecraft.topi import cuda_schedules as cs
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import CUDACompileError, compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import EmulationError, emulate
from tilecraft.schedule.passes.gpu_kernels import GPULoweringError

pytestmark = pytest.mark.cuda
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is absent")


def _vadd(n=1024):
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i] * 2, name="C")
    return A, C, te.create_schedule(C.op)


def test_unbound_stage_is_reported():
    A, C, s = _vadd()
    with pytest.raises(GPULoweringError, match=r"stage 'C' is not bound to the GPU grid.*outermost loop 'i'"):
        tilecraft.lower(s, [A, C], target="cuda")


def test_thread_extent_mismatch_names_both_loops():
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] + 1, name="B")
    C = te.compute((64, 64), lambda i, j: B[i, j] * 2, name="C")
    s = te.create_schedule(C.op)
    s[B].set_scope("shared")
    i, j = s[C].op.axis
    s[C].bind(i, te.thread_axis("blockIdx.x"))
    s[C].bind(j, te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], i)
    jo, ji = s[B].split(s[B].op.axis[1], factor=32)
    s[B].bind(ji, te.thread_axis("threadIdx.x"))
    with pytest.raises(GPULoweringError, match=r"threadIdx.x is bound to loops of different extents.*stage 'B'.*"
                                               r"stage 'C'.*same extent"):
        tilecraft.lower(s, [A, C], target="cuda")


def test_too_many_threads_per_block():
    A, C, s = _vadd(4096)
    o, i = s[C].split(C.op.axis[0], factor=2048)
    s[C].bind(o, te.thread_axis("blockIdx.x"))
    s[C].bind(i, te.thread_axis("threadIdx.x"))
    with pytest.raises(GPULoweringError, match=r"2048 threads per block \(threadIdx.x=2048\).*smaller split"):
        tilecraft.lower(s, [A, C], target="cuda")


def test_shared_memory_too_large_names_the_tiles():
    # 2 x 64 KiB of tiles, double-buffered: 256 KiB, more than sm_90's 227 KiB per block (up to
    # that a kernel takes dynamic shared memory; 48 KiB was the limit before)
    s, args = cs.matmul(1024, 1024, 1024, block=(256, 256), k_tile=64)
    with pytest.raises(GPULoweringError, match=r"needs 262144 bytes of shared memory \('AT' 16384 × float32 × 2 "
                                               r"copies, 'B.shared' 16384 × float32 × 2 copies\), more than the "
                                               r"232448 bytes a block may have \(sm_90\).*cache_read"):
        tilecraft.lower(s, args, target="cuda")


def test_shared_stage_outside_kernel():
    A, C, s = _vadd()
    B = s.cache_read(A, "shared", [C])
    o, i = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(o, te.thread_axis("blockIdx.x"))
    s[C].bind(i, te.thread_axis("threadIdx.x"))
    with pytest.raises(GPULoweringError, match=r"'A.shared' has scope 'shared' but is not attached"):
        tilecraft.lower(s, [A, C], target="cuda")


@needs_nvcc
def test_compile_error_quotes_generated_lines():
    src = 'extern "C" __global__ void k(float* a) {\n  a[0] = 1.0f;\n  a[1] = undefined_thing;\n}\n'
    with pytest.raises(CUDACompileError) as e:
        compile_cuda(src, "sm_90", use_cache=False)
    msg = str(e.value)
    assert "undefined_thing" in msg and ">>     3 |   a[1] = undefined_thing;" in msg


@needs_nvcc
def test_cubin_cache_by_source_and_arch(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    src = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] = 2.0f; }\n'
    a = compile_cuda(src, "sm_90")
    files = [p for p in tmp_path.rglob("*.cubin")]
    assert len(files) == 1
    assert compile_cuda(src, "sm_90") == a
    compile_cuda(src, "sm_80")
    assert len(list(tmp_path.rglob("*.cubin"))) == 2


def test_emulator_finds_a_missing_barrier(monkeypatch):
    import tilecraft.schedule.passes.gpu_lower as gl
    monkeypatch.setattr(gl, "insert_barriers", lambda stmt, info: stmt)
    s, args = cs.matmul(64, 64, 16, block=(32, 32), threads=(4, 4), k_tile=4)
    f = tilecraft.lower(s, args, target="cuda")
    a, b = np.ones((64, 16), "float32"), np.ones((16, 64), "float32")
    with pytest.raises(EmulationError, match="race on shared"):
        emulate(f, [a, b, np.zeros((64, 64), "float32")])


def test_generated_source_features():
    s, args = cs.matmul(256, 256, 64)
    src = generate_cuda(tilecraft.lower(s, args, target="cuda"))
    assert "__launch_bounds__(256)" in src
    assert "__shared__ __align__(16) float AT[2048];" in src           # 2 x 8 x 128, double-buffered
    kernel = src.split("__global__ void")[1]
    # double buffering: the next tiles are loaded into registers before the compute, one barrier
    # after the prologue and one per tile
    assert kernel.count("__syncthreads();") == 2 and "AT_stage0[4]" in kernel
    assert "*(const uint4*)(A + " in src and "*(const uint4*)(B_shared + " in src   # 16-byte loads
    assert "#pragma unroll" in src
    s, args = cs.elementwise(1024, dtype="float16")
    src16 = generate_cuda(tilecraft.lower(s, args, target="cuda"))
    assert "#include <cuda_fp16.h>" in src16 and "half" in src16
    s, args = cs.softmax(8, 1024)
    assert "tc_allreduce<float, 256>" in generate_cuda(tilecraft.lower(s, args, target="cuda"))


def test_building_cuda_c_needs_no_pycuda():
    code = ("import sys; sys.modules['pycuda'] = None\n"
            "import tilecraft\n"
            "from tilecraft.topi import cuda_schedules as cs\n"
            "from tilecraft.codegen.cuda import generate_cuda\n"
            "s, a = cs.softmax(4, 512)\n"
            "print(len(generate_cuda(tilecraft.lower(s, a, target='cuda'))) > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


class _FakeFunction:
    """What pycuda reports for a loaded kernel (registers, shared memory, thread cap)."""
    def __init__(self, regs, shared=0):
        self.num_regs, self.shared_size_bytes = regs, shared
        self.max_threads_per_block = max(32, 65536 // max(regs, 1) // 32 * 32)


H100_LIMITS = {"threads": 1024, "shared": 48 * 1024, "regs": 65536}


def _matmul_kernel_info():
    from tilecraft.schedule.passes.gpu_lower import kernels_of
    s, args = cs.matmul(1024, 1024, 1024, block=(128, 128), threads=(32, 32), vthreads=(1, 1))
    _, ks = kernels_of(tilecraft.lower(s, args, target="cuda").body)
    return ks[0][0]


def test_register_limit_is_reported_in_words():
    from tilecraft.runtime.cuda_runtime import check_limits
    info = _matmul_kernel_info()                      # 1024 threads per block
    check_limits(info, _FakeFunction(64), H100_LIMITS)
    with pytest.raises(RuntimeError, match=r"128 registers per thread × 1024 threads per block "
                                           r"\(threadIdx.x=32 × threadIdx.y=32\).*cache_write 'local'.*"
                                           r"loop 'j.inner.inner.outer' of stage 'C'"):
        check_limits(info, _FakeFunction(128), H100_LIMITS)


def test_shared_limit_at_load_is_reported_in_words():
    from tilecraft.runtime.cuda_runtime import check_limits
    info = _matmul_kernel_info()
    with pytest.raises(RuntimeError, match=r"bytes of shared memory per block.*'AT'.*cache_read"):
        check_limits(info, _FakeFunction(32, shared=64 * 1024), H100_LIMITS)


def test_torch_tensors_and_time_evaluator():
    from .test_cuda_ops import gpu_available
    why = gpu_available()
    if why:
        pytest.skip(why)
    torch = pytest.importorskip("torch")
    s, args = cs.softmax(64, 1024)
    mod = tilecraft.build(s, args, target="cuda")
    x = torch.randn(64, 1024, device="cuda")
    y = torch.full_like(x, float("nan"))
    mod(x, y)                                          # __cuda_array_interface__ objects
    torch.testing.assert_close(y, torch.softmax(x, 1), rtol=1e-5, atol=1e-6)
    r = mod.time_evaluator(mod.entry_name, tilecraft.cuda(0), number=5, repeat=3)(x, y)
    assert len(r.results) == 3 and 0 < r.median < 1
    with pytest.raises(TypeError, match="expected dtype float32"):
        mod(x.double(), y)
    with pytest.raises(ValueError, match="expected shape"):
        mod(x[:32], y)
    with pytest.raises(TypeError, match="expected a GPU array"):
        mod(x.cpu().numpy(), y)


def test_function_lowered_without_cuda_target_is_accepted():
    s, args = cs.softmax(16, 1024)
    plain = generate_cuda(tilecraft.lower(s, args))          # TVM's tvm.build(tvm.lower(...), "cuda")
    s, args = cs.softmax(16, 1024)
    assert plain == generate_cuda(tilecraft.lower(s, args, target="cuda"))


def _symbolic_nparts():
    """C = (A + A) * 2 over a symbolic n split into 4 blocks of 128 threads: each thread's share
    of the loop depends on n."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    P = te.compute((n,), lambda i: A[i] + A[i], name="P")
    C = te.compute((n,), lambda i: P[i] * 2, name="C")
    s = te.create_schedule(C.op)
    b, r = s[C].split(C.op.axis[0], nparts=4)
    t, _ = s[C].split(r, nparts=128)
    s[C].bind(b, te.thread_axis("blockIdx.x"))
    s[C].bind(t, te.thread_axis("threadIdx.x"))
    return s, A, P, C, b, t


def test_local_stage_of_symbolic_size():
    # found by the GPU fuzzer: rendered as `float P[(n + 3) / 4 ...]`, which nvcc rejects
    s, A, P, C, b, t = _symbolic_nparts()
    s[P].compute_at(s[C], t)
    with pytest.raises(GPULoweringError, match=r"kernel main_kernel: the local buffer 'P' has the size `.*n.*`, "
                                               r"which is not a constant.*attached under \(compute_at\): split "
                                               r"them with constant factors"):
        tilecraft.lower(s, [A, C], target="cuda")


def test_shared_stage_of_symbolic_size():
    s, A, P, C, b, t = _symbolic_nparts()
    AS = s.cache_read(A, "shared", [P])
    s[P].compute_inline()
    s[AS].compute_at(s[C], b)
    with pytest.raises(GPULoweringError, match=r"the shared buffer 'A.shared' has the size `.*n.*`, which is not "
                                               r"a constant.*Use constant split factors"):
        tilecraft.lower(s, [A, C], target="cuda")


def test_double_buffer_outside_any_loop():
    # a shared tile attached at the block's own loop has no sequence of tiles to alternate
    A = te.placeholder((64, 64), name="A")
    C = te.compute((64, 64), lambda i, j: A[i, j] * 2, name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[C].bind(io, te.thread_axis("blockIdx.y"))
    s[C].bind(jo, te.thread_axis("blockIdx.x"))
    s[C].bind(ii, te.thread_axis("threadIdx.y"))
    s[C].bind(ji, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[C], jo)
    s[AS].bind(s[AS].op.axis[0], te.thread_axis("threadIdx.y"))
    s[AS].bind(s[AS].op.axis[1], te.thread_axis("threadIdx.x"))
    s[AS].double_buffer()
    with pytest.raises(GPULoweringError, match=r"double_buffer on 'A.shared': the stage is not attached inside a "
                                               r"loop of the kernel, so there is no next tile to overlap with"):
        tilecraft.lower(s, [A, C], target="cuda")
