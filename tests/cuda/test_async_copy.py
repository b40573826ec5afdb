"""``s[AS].pipeline(stages)``: shared tiles fetched by ``cp.async`` into a ring of ``stages``
buffers (``schedule/passes/gpu_double_buffer.py``), the copies modelled by the emulator
(``codegen/cuda_emulate_async.py``: in flight until the thread's ``cp.async.wait_group``).

Each schedule is emulated on fresh random inputs with the output poisoned, compared with a
float64 reference, and compiled with nvcc for sm_90. Mutations of the pipeline (one group too
few waited for, the barrier after the wait left out) must fail in the emulator, which is what
makes its "passes" mean something without a GPU.
"""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te, tir
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
from tilecraft.codegen.cuda_emulate import EmulationError, emulate
from tilecraft.schedule import from_json
from tilecraft.schedule.passes import gpu_double_buffer
from tilecraft.schedule.passes.gpu_kernels import GPULoweringError
from tilecraft.topi import cuda_schedules as cs
from tilecraft.topi.tensorcore import matmul_tensorcore

from .test_cuda_ops import gpu_available

pytestmark = pytest.mark.cuda


def _nvcc(src: str):
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and emulated but not compiled")
    assert len(compile_cuda(src, "sm_90")) > 0


def _rel_err(got, want) -> float:
    return float(np.linalg.norm(got.astype("float64") - want) / np.linalg.norm(want))


def _tc_gemm(M, N, K, stages, **kw):
    s, (A, B, C) = matmul_tensorcore(M, N, K, double_buffer=False, **kw)
    for st in s.stages:
        if st.name in ("A.shared", "B.shared"):
            st.pipeline(stages)
    return s, (A, B, C)


def _sgemm(M, N, K, stages, tile=32, k_tile=16):
    """fp32 C = A @ B with A and B tiles copied as they are (16 bytes per thread) into shared
    memory, 8 x 8 threads of 4 x 4 outputs each."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AS, BS = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    bi, i = s[C].split(i, factor=tile)
    bj, j = s[C].split(j, factor=tile)
    ti, i = s[C].split(i, nparts=8)
    tj, j = s[C].split(j, nparts=8)
    s[C].reorder(bi, bj, ti, tj, i, j)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tj)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=k_tile)
    s[CL].reorder(ko, ki, *CL.op.axis)
    for X in (AS, BS):
        s[X].compute_at(s[CL], ko)
        f = s[X].fuse(*X.op.axis)
        f, v = s[X].split(f, factor=4)
        f, tx = s[X].split(f, factor=8)
        f, ty = s[X].split(f, factor=8)
        s[X].bind(tx, te.thread_axis("threadIdx.x"))
        s[X].bind(ty, te.thread_axis("threadIdx.y"))
        s[X].vectorize(v)
        s[X].pipeline(stages)
    return s, (A, B, C)


def _run_tc(func, rng, M, N, K, layout_b="row_major"):
    a = rng.uniform(-1, 1, (M, K)).astype("float16")
    b = rng.uniform(-1, 1, (K, N) if layout_b == "row_major" else (N, K)).astype("float16")
    c = np.full((M, N), np.nan, "float32")
    emulate(func, [a, b, c])
    bb = b.astype("float64") if layout_b == "row_major" else b.astype("float64").T
    return c, a.astype("float64") @ bb


PIPELINES = [
    # (impl, layout_b, (M, N, K), stages, options)
    ("mma", "row_major", (64, 64, 128), 3, dict(block=(2, 2), warp=(2, 2), chunk=1)),
    ("mma", "row_major", (128, 128, 96), 4, dict(block=(2, 2), warp=(4, 4), chunk=1)),     # 6 tiles, 4 stages
    ("mma", "col_major", (64, 128, 64), 2, dict(block=(2, 2), warp=(2, 4), chunk=2)),
    ("mma", "row_major", (64, 64, 32), 4, dict(block=(2, 2), warp=(2, 2), chunk=1)),       # 2 tiles < stages - 1
    ("wmma", "row_major", (64, 64, 96), 3, dict(block=(2, 2), warp=(2, 2), chunk=1)),
    # 4 stages of 128 x 32 and 32 x 128 tiles: 75776 bytes, more than a static __shared__ array
    ("mma", "row_major", (128, 128, 160), 4, dict(block=(2, 2), warp=(4, 4), chunk=2)),
]
PIPELINE_IDS = [f"{i}-{l}-{'x'.join(map(str, sz))}-{n}stages" for i, l, sz, n, _ in PIPELINES]


@pytest.mark.parametrize("impl,layout_b,size,stages,opts", PIPELINES, ids=PIPELINE_IDS)
def test_tensor_core_gemm_pipelined(impl, layout_b, size, stages, opts, rng):
    M, N, K = size
    s, (A, B, C) = _tc_gemm(M, N, K, stages, impl=impl, layout_b=layout_b, **opts)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    assert "tc_cp_async<16>(" in src and f"tc_cp_async_wait({stages - 2})" in src
    assert "cp.async.cg.shared.global" in src
    for _ in range(2):                                   # fresh inputs, freshly poisoned output
        c, ref = _run_tc(func, rng, M, N, K, layout_b)
        assert not np.isnan(c).any()
        assert _rel_err(c, ref) < 1e-6
    _nvcc(src)


def test_more_than_48k_of_shared_memory_is_dynamic():
    from tilecraft.runtime.cuda_runtime import plan_of
    s, (A, B, C) = _tc_gemm(128, 128, 64, 4, impl="mma", block=(2, 2), warp=(4, 4), chunk=2)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    assert "extern __shared__ __align__(16) unsigned char tc_dyn_smem[];" in src
    assert "half* __restrict__ A_shared = (half*)(tc_dyn_smem + 0);" in src
    assert "half* __restrict__ B_shared = (half*)(tc_dyn_smem + 40960);" in src     # 4 x 128 x 40 halves
    assert plan_of(func).kernels[0].dynamic_shared_bytes == 40960 + 4 * 32 * 136 * 2
    s, (A, B, C) = _tc_gemm(128, 128, 64, 2, impl="mma", block=(2, 2), warp=(4, 4), chunk=2)
    func = tc.lower(s, [A, B, C], target="cuda")
    assert "__shared__ __align__(16) half A_shared[10240];" in generate_cuda(func)
    assert plan_of(func).kernels[0].dynamic_shared_bytes == 0


def test_double_buffering_past_48k_compiles(rng):
    # 36 KiB of tiles, doubled by double_buffer: the static arrays ptxas refused ("uses too much
    # shared data") before the limit counted the copies; now they are dynamic
    M = N = 128
    K = 192
    s, (A, B, C) = matmul_tensorcore(M, N, K, impl="mma", block=(2, 4), warp=(4, 2), chunk=4, double_buffer=True)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    assert "tc_dyn_smem" in src
    c, ref = _run_tc(func, rng, M, N, K)
    assert _rel_err(c, ref) < 1e-6
    _nvcc(src)


def test_more_shared_memory_than_a_block_may_have():
    s, (A, B, C) = _tc_gemm(256, 256, 512, 7, impl="mma", block=(2, 2), warp=(8, 8), chunk=4)
    msg = (r"kernel main_kernel needs \d+ bytes of shared memory \('A.shared' \d+ × float16 × 7 copies, "
           r"'B.shared' \d+ × float16 × 7 copies\), more than the 232448 bytes a block may have \(sm_90\): make "
           r"the tiles cached with cache_read\(..., 'shared'\) smaller .* or use fewer pipeline stages")
    with pytest.raises(GPULoweringError, match=msg):
        tc.lower(s, [A, B, C], target="cuda")


@pytest.mark.parametrize("stages", [2, 3])
def test_fp32_tiles_pipelined(stages, rng):
    M, N, K = 64, 32, 80                                   # 5 tiles of k
    s, (A, B, C) = _sgemm(M, N, K, stages)
    func = tc.lower(s, [A, B, C], target="cuda")
    src = generate_cuda(func)
    assert src.count("tc_cp_async<16>(") == 2 * stages     # A and B: the prologue's stages - 1, the loop's
    a, b = rng.uniform(-1, 1, (M, K)).astype("float32"), rng.uniform(-1, 1, (K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    emulate(func, [a, b, c])
    np.testing.assert_allclose(c, a.astype("float64") @ b.astype("float64"), rtol=1e-5, atol=1e-5)
    _nvcc(src)


def test_a_fetch_that_is_not_a_copy_falls_back_to_alternating_buffers(rng):
    # the SGEMM schedule fetches A transposed (a gather, not a 16-byte copy): the ring of three
    # buffers is kept, filled by ordinary loads and stores, and the result is right
    s, args = cs.matmul(64, 64, 32, block=(32, 32), threads=(8, 8), vthreads=(1, 1), k_tile=4, double_buffer=False)
    for st in s.stages:
        if st.name in ("AT", "B.shared"):
            st.pipeline(3)
    func = tc.lower(s, args, target="cuda")
    src = generate_cuda(func)
    assert "cp_async" not in src and "% 3" not in src and "tc_floormod(k_outer, 3)" in src
    a, b = rng.uniform(-1, 1, (64, 32)).astype("float32"), rng.uniform(-1, 1, (32, 64)).astype("float32")
    c = np.full((64, 64), np.nan, "float32")
    emulate(func, [a, b, c])
    np.testing.assert_allclose(c, a.astype("float64") @ b.astype("float64"), rtol=1e-5, atol=1e-5)


# -- the emulator holds copies back until they are waited for -------------------------------------------

def _mutated(monkeypatch, drop=None, wait_delta=0):
    """Lower the 3-stage tensor-core GEMM with the pipeline pass changed: its wait allows
    ``wait_delta`` more groups in flight, or the statement ``drop`` (a barrier) is left out."""
    orig = gpu_double_buffer._Pipeline.pipeline_async

    def patched(self, loop, bufs, fetches, rest, n):
        out = orig(self, loop, bufs, fetches, rest, n)
        if out is None:
            return out
        from tilecraft.ir.expr import Call, Const
        from tilecraft.ir.stmt import Evaluate, For, SeqStmt, seq
        parts = list(out.seq)
        i = next(k for k, p in enumerate(parts) if isinstance(p, For))
        loop_ = parts[i]
        body = list(loop_.body.seq)
        wait = body[0]
        body[0] = Evaluate(Call("tc_cp_async_wait", (Const(wait.value.args[0].value + wait_delta, "int32"),),
                                "handle"))
        if drop == "barrier":
            del body[1]
        parts[i] = For(loop_.loop_var, loop_.min, loop_.extent, loop_.kind, seq(*body), loop_.thread_tag,
                       loop_.annotations)
        return SeqStmt(tuple(parts))
    monkeypatch.setattr(gpu_double_buffer._Pipeline, "pipeline_async", patched)
    s, (A, B, C) = _tc_gemm(64, 64, 128, 3, impl="mma", block=(2, 2), warp=(2, 2), chunk=1)
    return tc.lower(s, [A, B, C], target="cuda")


def test_reading_a_tile_still_in_flight_is_an_error(monkeypatch, rng):
    func = _mutated(monkeypatch, wait_delta=1)          # wait_group 2: tile k may still be in flight
    assert "tc_cp_async_wait(2)" in generate_cuda(func)
    with pytest.raises(EmulationError, match=r"kernel main_kernel: thread \d+ of block \d+ reads shared "
                                             r"'[AB]\.shared\[\d+\]' while a cp.async into it is in flight \(wait "
                                             r"for its group with cp.async.wait_group, then "
                                             r"__syncthreads\(\), first\)"):
        _run_tc(func, rng, 64, 64, 128)


def test_landed_copies_need_a_barrier_before_other_threads_read_them(monkeypatch, rng):
    func = _mutated(monkeypatch, drop="barrier")
    with pytest.raises(EmulationError, match=r"race on shared '[AB]\.shared\[\d+\]': thread \d+ reads what thread "
                                             r"\d+ wrote with no __syncthreads\(\) between"):
        _run_tc(func, rng, 64, 64, 128)


def test_waiting_for_more_groups_than_needed_is_still_right(monkeypatch, rng):
    func = _mutated(monkeypatch, wait_delta=-1)         # wait_group 0: no overlap, but correct
    c, ref = _run_tc(func, rng, 64, 64, 128)
    assert _rel_err(c, ref) < 1e-6


# -- the primitive: record, errors -------------------------------------------------------------------------

def test_pipeline_is_recorded_and_replayed():
    s, (A, B, C) = _tc_gemm(64, 64, 64, 3, impl="mma", block=(2, 2), warp=(2, 2), chunk=1)
    assert "s[A_shared].pipeline(3)" in s.to_python() or ".pipeline(3)" in s.to_python()
    steps = [st for st in s.steps if st.kind == "pipeline"]
    assert [st.to_json() for st in steps] == [{"step": "pipeline", "stage": "A.shared", "stages": 3},
                                              {"step": "pipeline", "stage": "B.shared", "stages": 3}]
    from tilecraft.topi import tensorcore as T
    again = from_json(s.to_json(), [C], intrins=[T.load_matrix("a", impl="mma"), T.load_matrix("b", impl="mma"),
                                                 T.mma("row_major", "row_major", "mma"), T.store_matrix("mma")])
    assert str(tc.lower(again, [A, B, C], target="cuda")) == str(tc.lower(s, [A, B, C], target="cuda"))


def test_pipeline_errors():
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] * 2, name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    with pytest.raises(ValueError, match=r"pipeline on 'A.shared': stages must be at least 2 \(a ring of that many "
                                         r"buffers\), got 1"):
        s[AS].pipeline(1)
    i, j = B.op.axis
    s[B].bind(i, te.thread_axis("blockIdx.x"))
    s[B].bind(j, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[B], i)
    s[AS].bind(s[AS].op.axis[1], te.thread_axis("threadIdx.x"))
    s[AS].pipeline(3)
    with pytest.raises(GPULoweringError, match=r"pipeline on 'A.shared': the stage is not attached inside a "
                                               r"loop of the kernel"):
        tc.lower(s, [A, B], target="cuda")


def test_async_copy_call_errors():
    S = tir.decl_buffer((64,), "float16", name="S", scope="shared")
    G = tir.decl_buffer((64,), "float16", name="G")
    with pytest.raises(TypeError, match=r"call_intrin\('tir.tc_cp_async'\): argument 0 \(dst\) must be a pointer "
                                        r"into shared memory"):
        tir.call_intrin("handle", "tir.tc_cp_async", G.access_ptr("w"), G.access_ptr("r"), 16)
    with pytest.raises(TypeError, match=r"argument 1 \(src\) must be a pointer into global memory"):
        tir.call_intrin("handle", "tir.tc_cp_async", S.access_ptr("w"), S.access_ptr("r"), 16)
    with pytest.raises(ValueError, match=r"argument 2 \(bytes\) must be 4, 8 or 16 \(what one cp.async copies\), "
                                         r"got `32`"):
        tir.call_intrin("handle", "tir.tc_cp_async", S.access_ptr("w"), G.access_ptr("r"), 32)
    with pytest.raises(ValueError, match=r"tc_cp_async_wait'\): argument 0 \(count\) must be a constant from 0 to 7"):
        tir.call_intrin("handle", "tir.tc_cp_async_wait", 9)
    with pytest.raises(ValueError, match=r"takes 0 argument\(s\) \(\), got 1"):
        tir.call_intrin("handle", "tir.tc_cp_async_commit", 1)
    call = tir.call_intrin("handle", "tir.tc_cp_async", S.access_ptr("w"), G.access_ptr("r"), 16)
    assert call.name == "tc_cp_async"


@pytest.mark.parametrize("stages,chunk", [(2, 1), (4, 1), (4, 2)])       # (4, 2): dynamic shared memory
def test_gpu_pipelined_gemm(stages, chunk, rng):
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: checked by test_tensor_core_gemm_pipelined (emulator + nvcc) only")
    import torch
    M, N, K = 256, 256, 512
    s, (A, B, C) = _tc_gemm(M, N, K, stages, impl="mma", block=(2, 2), warp=(4, 4), chunk=chunk)
    mod = tc.build(s, [A, B, C], target="cuda")
    for _ in range(2):
        a = rng.uniform(-1, 1, (M, K)).astype("float16")
        b = rng.uniform(-1, 1, (K, N)).astype("float16")
        c = torch.full((M, N), float("nan"), device="cuda")
        mod(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c)
        got = c.cpu().numpy()
        assert not np.isnan(got).any()
        assert _rel_err(got, a.astype("float64") @ b.astype("float64")) < 1e-5


def test_misaligned_copy_is_an_error(monkeypatch, rng):
    # cp.async of 16 bytes needs 16-byte aligned addresses: the pass only makes aligned ones, so
    # shift its destinations by one element to see the emulator refuse them
    from tilecraft.ir.expr import AccessPtr
    from tilecraft.ir.functor import IRMutator
    orig = gpu_double_buffer._async_fetch

    class Shift(IRMutator):
        def visit_AccessPtr(self, e):
            return AccessPtr(e.buffer, e.offset + 1, e.extent, e.access_mask) if e.access_mask == 2 else e

    monkeypatch.setattr(gpu_double_buffer, "_async_fetch",
                        lambda stmt: None if orig(stmt) is None else Shift().visit_stmt(orig(stmt)))
    s, (A, B, C) = _tc_gemm(64, 64, 64, 2, impl="mma", block=(2, 2), warp=(2, 2), chunk=1)
    func = tc.lower(s, [A, B, C], target="cuda")
    with pytest.raises(EmulationError, match=r"kernel main_kernel: cp.async of 16 bytes at element \d+ of "
                                             r"'[AB]\.shared' by thread \(\d+, \d+, \d+\) of block \(\d+, \d+, \d+\): "
                                             r"the address must be a multiple of 16 bytes"):
        _run_tc(func, rng, 64, 64, 64)
