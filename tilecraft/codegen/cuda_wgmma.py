"""CUDA C for the block-collective tensor-core calls of sm_90a (``ir/builtin.py``'s
``BLOCK_BUILTINS``): a warp-specialized GEMM main loop on ``wgmma.mma_async`` and its store.

The block is ``128 * (1 + bm / 64)`` threads: warpgroup 0 is the **producer**, the others are
**consumers**, each owning 64 rows of the block's ``bm x bn`` accumulator (``bn / 2`` floats per
thread, in the register layout of ``wgmma.m64nNk16``'s D: for each 8-column group ``j``, register
``4j + 2i + h`` is row ``16 * warp + lane / 4 + 8i``, column ``8j + 2 * (lane % 4) + h``).

Per 128-byte k step (64 float16 or 32 float32 elements of every row):

* the producer copies the step's ``bm`` rows of A and ``bn`` rows of B (both k-major) with
  16-byte ``cp.async`` into stage ``kt % stages`` of a ring of shared buffers, **128-byte
  swizzled**: 16-byte chunk ``c`` of row ``r`` lands at byte ``128 r + 16 (c ^ (r % 8))`` (the
  layout ``wgmma``'s shared-memory descriptors call SWIZZLE_128B, 8-row atoms of 1024 bytes).
  Before reusing a stage it waits on the stage's ``empty`` mbarrier; once a step's copies have
  landed (``cp.async.wait_group LAG`` after issuing the step ``lag`` later: 1 to ``stages - 2``
  steps of copies stay in flight) it fences them into the async proxy
  (``fence.proxy.async.shared::cta``) and arrives on the stage's ``full`` mbarrier. With ``lag``
  0 the producer never waits for its copies: ``cp.async.mbarrier.arrive.noinc`` makes each
  thread's arrival on ``full`` happen when its copies land (the consumers then fence);
* each consumer waits on ``full``, issues the step's ``wgmma.mma_async`` (k16 for float16 and
  bfloat16, k8 tf32 for float32: 32 bytes of each row per instruction, the descriptor's start advanced by 32
  bytes), commits them as a group, waits until only this group is in flight and releases the
  previous step's stage (``empty``).

No ``__syncthreads`` in the loop: each stage is released when its data lands and freed when the
mma that read it is done. (``setmaxnreg`` 40 / 232 made ptxas spill the 128 x 256 block's
accumulators at nvcc 13.0; without it the block uses 154 registers and no stack.)

The emulator runs the calls by their tensor intrinsics' TE definitions (``topi/tensorcore_wgmma.py``)
and models the data path (``cuda_emulate_wgmma.py``: the ring written with :func:`swizzled_offset`,
read back through :func:`wgmma_desc`); the protocol's timing is checked on a GPU.
"""
from __future__ import annotations

from ..ir import dtype as dt

# operand dtype -> (elements per 128-byte row of a stage, wgmma shape suffix k, PTX types)
WGMMA_KINDS = {"float16": (64, 16, "f32.f16.f16"), "bfloat16": (64, 16, "f32.bf16.bf16"),
               "float32": (32, 8, "f32.tf32.tf32")}
_SUFFIX = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}
WGMMA_BN = (64, 128, 256)          # n of the wgmma instruction (one per consumer and step slice)
SWIZZLE_ROW_BYTES = 128
SBO_BYTES = 1024                   # stride byte offset: 8 rows of 128 bytes (one swizzle atom)
LAYOUT_SWIZZLE_128B = 1            # the descriptor's layout type (bits 62-63) for SWIZZLE_128B


def swizzled_offset(row: int, chunk: int) -> int:
    """Byte offset of 16-byte ``chunk`` (0-7) of ``row`` in a SWIZZLE_128B stage buffer
    (the layout the producer writes and the descriptors read): ``swizzled_offset(9, 2) == 1184``."""
    return SWIZZLE_ROW_BYTES * row + 16 * (chunk ^ (row % 8))


def wgmma_desc(addr: int) -> int:
    """The shared-memory matrix descriptor ``tc_wgmma_desc`` builds for a K-major SWIZZLE_128B
    operand at shared address ``addr``: start address / 16 (bits 0-13), leading byte offset 1
    (unused by this layout, bits 16-29), stride byte offset ``SBO_BYTES`` / 16 (bits 32-45), layout
    type (bits 62-63). ``wgmma_desc(0x400) == 0x4000004000010040``."""
    return ((addr & 0x3FFFF) >> 4) | (1 << 16) | ((SBO_BYTES >> 4) << 32) | (LAYOUT_SWIZZLE_128B << 62)


def block_threads(bm: int) -> int:
    """Threads of a wgmma block of ``bm`` rows: a producer warpgroup and ``bm / 64`` consumers."""
    return 128 * (1 + bm // 64)


def smem_bytes(bm: int, bn: int, stages: int) -> int:
    """Shared bytes the main loop needs: the ring (``stages`` x (bm + bn) rows of 128 bytes), 1024
    for aligning it and the 2 x stages mbarriers."""
    return stages * (bm + bn) * SWIZZLE_ROW_BYTES + 1024 + 16 * stages


_WGMMA_FUNCTION = r"""
// d (@N@ / 2 floats of this thread) += a (64 x K, descriptor) @ b (@N@ x K, descriptor)^T
__device__ __forceinline__ void @NAME@(float* d, unsigned long long da, unsigned long long db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %@IS@, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n@N@k@K@.@TYPES@ {@DREGS@}, %@IA@, %@IB@, p, 1, 1@TRANS@;\n}\n"
               : @DOUT@
               : "l"(da), "l"(db), "r"(1));
}
"""


def _wgmma_function(dtype: str, n: int) -> str:
    """The helper issuing one ``wgmma.mma_async.m64nNkK`` (written out per kind and n, so the PTX
    strings stay greppable)."""
    _, k, types = WGMMA_KINDS[dtype]
    regs = n // 2
    text = _WGMMA_FUNCTION
    subs = (("@NAME@", wgmma_name(dtype, n)), ("@N@", str(n)), ("@K@", str(k)), ("@TYPES@", types),
            ("@DREGS@", ", ".join(f"%{i}" for i in range(regs))), ("@IA@", str(regs)), ("@IB@", str(regs + 1)), ("@IS@", str(regs + 2)),
            ("@TRANS@", "" if dtype == "float32" else ", 0, 0"),       # imm-trans-a/b: 16-bit kinds only
            ("@DOUT@", ", ".join(f'"+f"(d[{i}])' for i in range(regs))))
    for key, v in subs:
        text = text.replace(key, v)
    return text


def wgmma_name(dtype: str, n: int) -> str:
    return f"tc_wgmma_m64n{n}_{_SUFFIX[dtype]}"


WGMMA_PRELUDE = r"""
// ---- sm_90a: warp-specialized wgmma main loop (cp.async producer, mbarriers, SWIZZLE_128B) ----
__device__ __forceinline__ unsigned tc_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void tc_mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void tc_mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void tc_mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
// a K-major SWIZZLE_128B shared-memory matrix descriptor: start address, leading byte offset
// (unused for this layout: 1), stride byte offset (8 rows of 128 bytes), layout type SWIZZLE_128B
// (the same bits as cuda_wgmma.py's wgmma_desc, which the emulator decodes)
__device__ __forceinline__ unsigned long long tc_wgmma_desc(unsigned addr) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(@SBO@ >> 4) << 32)
         | (@LAYOUT@ull << 62);
}
template <int R>
__device__ __forceinline__ void tc_wgmma_fence_regs(float* d) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
@WGMMA_FUNCTIONS@
// How a stage's A tile is filled (the pipeline's hook): fill_a(sa, kt, t) issues, for producer
// thread t (0-127), its cp.async copies of the 128-byte k step kt of the block's BM rows of A into
// the SWIZZLE_128B stage at shared address sa (16-byte chunk c of row r at sa + 128 r + 16 (c ^ r % 8)).
// The GEMM's: A k-major in global memory, rows lda elements apart. (The conv's implicit GEMM
// gathers instead: topi/conv2d_nhwc_wgmma.py.)
template <int BM, typename T>
struct tc_wgmma_gemm_a {
  const T* A;
  int lda;
  __device__ __forceinline__ void operator()(unsigned sa, int kt, int t) const {
    constexpr int EPR = 128 / sizeof(T);
    {  // (indented as the B loop of the pipeline, so that text patches of the two copy loops match both)
#pragma unroll 4
      for (int q = t; q < BM * 8; q += 128) {
        const int r = q >> 3, c = q & 7;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                     :: "r"(sa + r * 128 + ((c ^ (r & 7)) << 4)), "l"(A + (long long)r * lda + kt * EPR + c * (EPR / 8))
                     : "memory");
      }
    }
  }
};
// consumer warpgroup c (0 .. BM / 64 - 1): acc = its 64 rows of the product of the nk stages of the ring
// (full and empty: the stages' mbarriers) from the block's step g0 on (0, or the steps of the tiles a
// persistent block did before), waiting on each stage's `full`, issuing its wgmmas as one group, keeping
// one group in flight and releasing the previous step's stage (`empty`; LAST: the last step's too, for the
// next tile's copies); FENCE: the stage was written by the generic proxy (cp.async) and is observed
// through the mbarrier only
template <int BM, int BN, int STAGES, typename T, void (*MMA)(float*, unsigned long long, unsigned long long),
          bool FENCE, bool LAST = false>
__device__ __forceinline__ void tc_wgmma_consume(float* acc, unsigned ring, unsigned full, unsigned empty, int c,
                                                 int nk, int g0 = 0) {
  constexpr int EPR = 128 / sizeof(T), KSTEP = 32 / sizeof(T), STAGE_BYTES = (BM + BN) * 128;
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
  for (int kt = 0; kt < nk; ++kt) {
    const int g = g0 + kt, s = g % STAGES;
    tc_mbar_wait(full + 8 * s, (g / STAGES) & 1);
    if (FENCE) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    const unsigned sa = ring + s * STAGE_BYTES + c * 64 * 128, sb = ring + s * STAGE_BYTES + BM * 128;
    tc_wgmma_fence_regs<BN / 2>(acc);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < EPR / KSTEP; ++kk) MMA(acc, tc_wgmma_desc(sa + 32 * kk), tc_wgmma_desc(sb + 32 * kk));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    tc_wgmma_fence_regs<BN / 2>(acc);
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    if (kt > 0) tc_mbar_arrive(empty + 8 * ((g - 1) % STAGES));
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  tc_wgmma_fence_regs<BN / 2>(acc);
  if (LAST) tc_mbar_arrive(empty + 8 * ((g0 + nk - 1) % STAGES));
}
// acc (bn / 2 floats per consumer thread) = A[0:bm, 0:k] @ B[0:bn, 0:k]^T; A's stages filled by
// fill_a (above), B k-major with rows ldb elements apart; smem: smem_bytes(bm, bn, stages) bytes of
// shared memory; every thread of the block (128 * (1 + bm / 64)) calls it
template <int BM, int BN, int STAGES, int LAG, typename T, void (*MMA)(float*, unsigned long long, unsigned long long),
          typename FILL_A>
__device__ __forceinline__ void tc_wgmma_pipeline(float* acc, const FILL_A& fill_a, const T* B, int ldb, int k,
                                                  unsigned char* smem_raw) {
  constexpr int EPR = 128 / sizeof(T);              // elements of one 128-byte row of a stage
  constexpr int STAGE_BYTES = (BM + BN) * 128;
  unsigned char* smem = (unsigned char*)(((unsigned long long)smem_raw + 1023) & ~1023ull);
  const unsigned ring = tc_smem_addr(smem);
  const unsigned full = ring + STAGES * STAGE_BYTES, empty = full + 8 * STAGES;
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int wg = tid >> 7, nk = k / EPR;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      tc_mbar_init(full + 8 * s, 128);
      tc_mbar_init(empty + 8 * s, 128 * (BM / 64));
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (wg == 0) {
    const int t = tid;
    for (int kt = 0; kt < nk; ++kt) {
      const int s = kt % STAGES;
      if (kt >= STAGES) tc_mbar_wait(empty + 8 * s, ((kt / STAGES) - 1) & 1);
      const unsigned sa = ring + s * STAGE_BYTES, sb = sa + BM * 128;
      fill_a(sa, kt, t);
#pragma unroll 4
      for (int q = t; q < BN * 8; q += 128) {
        const int r = q >> 3, c = q & 7;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                     :: "r"(sb + r * 128 + ((c ^ (r & 7)) << 4)), "l"(B + (long long)r * ldb + kt * EPR + c * (EPR / 8))
                     : "memory");
      }
      if (LAG == 0) {                               // each copy of this thread arrives on `full` when it lands
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(full + 8 * s) : "memory");
        continue;
      }
      asm volatile("cp.async.commit_group;\n" ::: "memory");
      if (kt >= LAG) {                              // step kt - LAG's copies have landed
        asm volatile("cp.async.wait_group %0;\n" :: "n"(LAG) : "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        tc_mbar_arrive(full + 8 * ((kt - LAG) % STAGES));
      }
    }
    if (LAG > 0) {
      asm volatile("cp.async.wait_group 0;\n" ::: "memory");
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      for (int kt = nk > LAG ? nk - LAG : 0; kt < nk; ++kt) tc_mbar_arrive(full + 8 * (kt % STAGES));
    }
  } else {
    // LAG 0: the copies were written by the generic proxy and observed through the mbarrier only
    tc_wgmma_consume<BM, BN, STAGES, T, MMA, LAG == 0>(acc, ring, full, empty, wg - 1, nk);
  }
}
// C[0:bm, 0:bn] (rows ldc apart) = acc: each consumer thread its bn / 2 elements; a 16-bit C (VEC, the
// default) 16 bytes at a time: the four lanes of a quad hold one row's 4 x 2 elements of each 8-column
// group; four such groups are transposed across the quad (two butterfly shuffles), so that each lane then
// holds one group's 8 consecutive elements (H100, 4096^3 fp16: 527 TFLOP/s against 485 with the pairs
// stored as held, 8 rows x 16 bytes a warp instruction); float32 C (and VEC 0) two at a time
template <int BM, int BN, typename O, int VEC = 1>
__device__ __forceinline__ void tc_wgmma_store(O* C, int ldc, const float* acc) {
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int wg = tid >> 7;
  if (wg == 0) return;
  const int w = (tid >> 5) & 3, lane = tid & 31;
  const int row = (wg - 1) * 64 + 16 * w + (lane >> 2), col = 2 * (lane & 3);
  if constexpr (VEC != 0 && sizeof(O) == 2 && BN % 32 == 0) {
    const int q = lane & 3;
    const bool odd = q & 1, hi = q & 2;
#pragma unroll
    for (int j0 = 0; j0 < BN / 8; j0 += 4) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        unsigned v0 = tc_pack2(C, acc[4 * j0 + 2 * h], acc[4 * j0 + 2 * h + 1]);
        unsigned v1 = tc_pack2(C, acc[4 * j0 + 4 + 2 * h], acc[4 * j0 + 5 + 2 * h]);
        unsigned v2 = tc_pack2(C, acc[4 * j0 + 8 + 2 * h], acc[4 * j0 + 9 + 2 * h]);
        unsigned v3 = tc_pack2(C, acc[4 * j0 + 12 + 2 * h], acc[4 * j0 + 13 + 2 * h]);
        unsigned t = __shfl_xor_sync(0xffffffffu, odd ? v0 : v1, 1);
        if (odd) v0 = t; else v1 = t;
        t = __shfl_xor_sync(0xffffffffu, odd ? v2 : v3, 1);
        if (odd) v2 = t; else v3 = t;
        t = __shfl_xor_sync(0xffffffffu, hi ? v0 : v2, 2);
        if (hi) v0 = t; else v2 = t;
        t = __shfl_xor_sync(0xffffffffu, hi ? v1 : v3, 2);
        if (hi) v1 = t; else v3 = t;
        *(uint4*)(C + (long long)(row + 8 * h) * ldc + 8 * (j0 + q)) = make_uint4(v0, v1, v2, v3);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      tc_store2(C + (long long)row * ldc + 8 * j + col, acc[4 * j], acc[4 * j + 1]);
      tc_store2(C + (long long)(row + 8) * ldc + 8 * j + col, acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
}
"""

WGMMA_STORE2 = r"""
__device__ __forceinline__ void tc_store2(float* p, float a, float b) { *(float2*)p = make_float2(a, b); }
__device__ __forceinline__ void tc_store2(half* p, float a, float b) { *(half2*)p = __floats2half2_rn(a, b); }
__device__ __forceinline__ unsigned tc_pack2(half*, float a, float b) {
  half2 h = __floats2half2_rn(a, b);
  return *(unsigned*)&h;
}
template <typename O> __device__ __forceinline__ unsigned tc_pack2(O*, float a, float b) { return 0u; }   // unused
#ifdef __CUDA_BF16_TYPES_EXIST__
__device__ __forceinline__ void tc_store2(__nv_bfloat16* p, float a, float b) {
  *(__nv_bfloat162*)p = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ unsigned tc_pack2(__nv_bfloat16*, float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *(unsigned*)&h;
}
#endif
"""


def wgmma_prelude(kinds, tma: bool = False) -> str:
    """The prelude for the ``(dtype, n)`` pairs the kernels use (each wgmma helper once); ``tma``:
    with the TMA main loop (where a kernel takes tensor maps: ``CUtensorMap`` needs cuda.h)."""
    funcs = "".join(_wgmma_function(d, n) for d, n in sorted(kinds))
    text = WGMMA_PRELUDE.replace("@SBO@", str(SBO_BYTES)).replace("@LAYOUT@", str(LAYOUT_SWIZZLE_128B))
    from .cuda_wgmma_conv import CONV_FILL_A          # the conv's A fill (a template: free where unused)
    return (WGMMA_STORE2 + text.replace("@WGMMA_FUNCTIONS@", funcs) + WGMMA_GEMM_MAINLOOP
            + (WGMMA_TMA_MAINLOOP if tma else "") + CONV_FILL_A)


class WgmmaError(ValueError):
    """A block-collective call the CUDA C cannot express; the message names it."""


def block_call(r, e) -> str:
    """The C statement (without ``;``) of a block-collective call ``e`` for the renderer ``r``;
    records in ``r.wgmma_kinds`` which wgmma helpers the prelude needs."""
    frag = r.fragment(e.args[0], e)
    if r.fragments[frag][0] != "wgmma.accumulator":
        raise WgmmaError(f"{e.name}: '{frag}' is in scope {r.fragments[frag][0]}, not wgmma.accumulator")
    if e.name == "tc_wgmma_tma_mainloop":
        return tma_block_call(r, e, frag)
    if e.name == "tc_wgmma_conv_mainloop":
        from .cuda_wgmma_conv import conv_block_call
        return conv_block_call(r, e, frag)
    if e.name == "tc_wgmma_mainloop":
        _, a, lda, b, ldb, k, smem, bm, bn, stages, lag = e.args
        dtype = dt.element_of(a.buffer.dtype)
        bm, bn, stages, lag = int(bm.value), int(bn.value), int(stages.value), int(lag.value)
        if not 0 <= lag <= stages - 2:
            raise WgmmaError(f"tc_wgmma_mainloop with {stages} stages: lag={lag} must be 0 to stages - 2 = {stages - 2} "
                             f"(the producer would wait on a stage the consumers cannot free)")
        _check_operands("tc_wgmma_mainloop", a, b, dtype, bm, bn)
        r.wgmma_kinds.add((dtype, bn))
        ct = r.ctype(a.buffer.dtype)
        return (f"tc_wgmma_mainloop<{bm}, {bn}, {stages}, {lag}, {ct}, {wgmma_name(dtype, bn)}>({frag}, "
                f"{r.expr(a)}, {r.expr(lda)}, {r.expr(b)}, {r.expr(ldb)}, {r.expr(k)}, "
                f"(unsigned char*)({r.expr(smem)}))")
    _, c, ldc, bm, bn = e.args
    return f"tc_wgmma_store<{int(bm.value)}, {int(bn.value)}>({r.expr(c)}, {r.expr(ldc)}, {frag})"


def wgmma_fragment_decl(buf, name: str, body) -> str:
    """The declaration of a ``wgmma.accumulator`` fragment: ``bn / 2`` floats per thread (the
    block's ``bm x bn`` tile over its consumers' registers; ``bm``, ``bn`` from the calls on it)."""
    from ..ir.expr import Call
    from ..ir.functor import post_order_visit
    found = []
    post_order_visit(body, lambda n: found.append(n) if isinstance(n, Call) and n.name == "tc_wgmma_store"
                     and n.args[0] is buf.data else None)
    if dt.element_of(buf.dtype) != "float32":
        raise WgmmaError(f"the fragment '{buf.name}' in scope wgmma.accumulator is {buf.dtype}; wgmma accumulates "
                         f"in float32")
    if not found:
        raise WgmmaError(f"the fragment '{buf.name}' in scope wgmma.accumulator is never stored (tc_wgmma_store)")
    bm, bn = (int(x.value) for x in found[0].args[3:5])
    size = int(buf.shape[0].value)
    if size != bm * bn:
        raise WgmmaError(f"the fragment '{buf.name}' holds {size} elements, not the {bm} x {bn} block tile its "
                         f"tc_wgmma_store names")
    return f"float {name}[{bn // 2}];"


# the GEMM's main loop: the pipeline with the GEMM's A fill (appended to the prelude after the pipeline)
WGMMA_GEMM_MAINLOOP = r"""
// acc (bn / 2 floats per consumer thread) = A[0:bm, 0:k] @ B[0:bn, 0:k]^T; A, B k-major with rows
// lda, ldb elements apart (the pipeline with the GEMM's A fill)
template <int BM, int BN, int STAGES, int LAG, typename T, void (*MMA)(float*, unsigned long long, unsigned long long)>
__device__ __forceinline__ void tc_wgmma_mainloop(float* acc, const T* A, int lda, const T* B, int ldb, int k,
                                                  unsigned char* smem_raw) {
  tc_wgmma_pipeline<BM, BN, STAGES, LAG, T, MMA>(acc, tc_wgmma_gemm_a<BM, T>{A, lda}, B, ldb, k, smem_raw);
}
"""

# the TMA main loop (appended where a kernel takes tensor maps: CUtensorMap is cuda.h's)
WGMMA_TMA_MAINLOOP = r"""
__device__ __forceinline__ void tc_mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}
// box (rows from c1, 128 bytes from element c0) of the tensor map's 2-D array -> shared dst, SWIZZLE_128B;
// completes `bytes` of the transaction count of the mbarrier bar
__device__ __forceinline__ void tc_tma_load_2d(unsigned dst, const CUtensorMap* map, int c0, int c1, unsigned bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               :: "r"(dst), "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
// acc (bn / 2 floats per consumer thread) = A[a_row:+BM, a_col:+k] @ B[b_row:+BN, b_col:+k]^T, A and B
// read through their tensor maps (boxes of BM and BN rows x 128 bytes, SWIZZLE_128B): one thread of the
// producer warpgroup waits for a free stage, arms its `full` mbarrier with the stage's bytes and issues
// the two bulk tensor copies, which complete it; MAXNREG: setmaxnreg gives the producer's registers to
// the consumers (the kernel's __launch_bounds__(threads, 1) caps them at entry). steps: the k steps this
// block's earlier calls ran (a persistent block's tiles, `tc_wgmma_steps`; 0 for one tile a block): the
// ring's stages and phases go on from there, the mbarriers initialised by the first call only, so the
// producer fills the next tile's stages while the consumers store this one's
template <int BM, int BN, int STAGES, int MAXNREG, typename T,
          void (*MMA)(float*, unsigned long long, unsigned long long)>
__device__ __forceinline__ void tc_wgmma_tma_mainloop(float* acc, const CUtensorMap* ma, int a_row, int a_col,
                                                      const CUtensorMap* mb, int b_row, int b_col, int k,
                                                      unsigned char* smem_raw, int& steps) {
  constexpr int EPR = 128 / sizeof(T), STAGE_BYTES = (BM + BN) * 128;
  // setmaxnreg moves registers within the block's launch allocation (__launch_bounds__(threads, 1): BASE
  // each, a multiple of 8): the consumers may grow by what the producer gives up, no more (asking for
  // more blocks setmaxnreg.inc for ever: 256 x 128 blocks, 640 threads, hung on the H100 asking for 112)
  constexpr int BASE = 65536 / (128 * (1 + BM / 64)) / 8 * 8 > 248 ? 248 : 65536 / (128 * (1 + BM / 64)) / 8 * 8;
  constexpr int CONSUMER_REGS = (BASE + (BASE - 40) / (BM / 64)) / 8 * 8 > 256
                                ? 256 : (BASE + (BASE - 40) / (BM / 64)) / 8 * 8;
  unsigned char* smem = (unsigned char*)(((unsigned long long)smem_raw + 1023) & ~1023ull);
  const unsigned ring = tc_smem_addr(smem);
  const unsigned full = ring + STAGES * STAGE_BYTES, empty = full + 8 * STAGES;
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int wg = tid >> 7, nk = k / EPR, g0 = steps;
  steps += nk;
  if (g0 == 0) {
    if (tid == 0) {
      for (int s = 0; s < STAGES; ++s) {
        tc_mbar_init(full + 8 * s, 1);
        tc_mbar_init(empty + 8 * s, 128 * (BM / 64));
      }
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
  }
  if (wg == 0) {
    if (MAXNREG) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tid == 0) {
      for (int kt = 0; kt < nk; ++kt) {
        const int g = g0 + kt, s = g % STAGES;
        if (g >= STAGES) tc_mbar_wait(empty + 8 * s, ((g / STAGES) - 1) & 1);
        const unsigned sa = ring + s * STAGE_BYTES, sb = sa + BM * 128;
        tc_mbar_arrive_expect_tx(full + 8 * s, STAGE_BYTES);
        tc_tma_load_2d(sa, ma, a_col + kt * EPR, a_row, full + 8 * s);
        tc_tma_load_2d(sb, mb, b_col + kt * EPR, b_row, full + 8 * s);
      }
    }
    if (MAXNREG) {   // with 40 registers the producer must not run the consumers' code after the loop
      asm volatile("exit;\n" ::: "memory");
      __builtin_unreachable();
    }
  } else {
    if (MAXNREG) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(CONSUMER_REGS) : "memory");
    tc_wgmma_consume<BM, BN, STAGES, T, MMA, false, true>(acc, ring, full, empty, wg - 1, nk, g0);
  }
}
"""


def tma_block_call(r, e, frag) -> str:
    """``tc_wgmma_tma_mainloop``'s C call: the tensor maps of A's and B's buffers (the kernel's
    ``tc_tmap_j`` parameters, ``r.tensor_maps``) and each tile's first row and column in them."""
    _, a, lda, b, ldb, k, smem, bm, bn, stages, maxnreg = e.args
    dtype = dt.element_of(a.buffer.dtype)
    bm, bn, stages, maxnreg = int(bm.value), int(bn.value), int(stages.value), int(maxnreg.value)
    _check_operands("tc_wgmma_tma_mainloop", a, b, dtype, bm, bn)
    r.wgmma_kinds.add((dtype, bn))
    ops = []
    for ptr, ld, rows in ((a, lda, bm), (b, ldb, bn)):
        if len(ptr.buffer.shape) != 2:
            raise WgmmaError(f"tc_wgmma_tma_mainloop reads '{ptr.buffer.name}' through a 2-D tensor map, but it has "
                             f"{len(ptr.buffer.shape)} dimensions")
        j = r.tensor_maps.index((ptr.buffer, (rows, 128 // (dt.bits(ptr.buffer.dtype) // 8))))
        off = r.expr(ptr.offset)
        ops.append(f"&tc_tmap_{j}, (int)(({off}) / ({r.expr(ld)})), (int)(({off}) % ({r.expr(ld)}))")
    return (f"tc_wgmma_tma_mainloop<{bm}, {bn}, {stages}, {maxnreg}, {r.ctype(a.buffer.dtype)}, "
            f"{wgmma_name(dtype, bn)}>({frag}, {ops[0]}, {ops[1]}, {r.expr(k)}, (unsigned char*)({r.expr(smem)}), "
            f"tc_wgmma_steps)")


def kernel_decls(body) -> list:
    """Kernel-scope declarations the block calls of ``body`` need: the k-step count
    ``tc_wgmma_steps`` of a TMA main loop (its ring's phases go on across a persistent block's tiles)."""
    from ..ir.expr import Call
    from ..ir.functor import post_order_visit
    found = []
    post_order_visit(body, lambda n: found.append(n) if isinstance(n, Call) and n.name == "tc_wgmma_tma_mainloop"
                     else None)
    return ["int tc_wgmma_steps = 0;   // k steps of the TMA main loops so far (the ring's phases)"] if found else []


def _check_operands(name, a, b, dtype, bm, bn):
    if dtype not in WGMMA_KINDS or dt.element_of(b.buffer.dtype) != dtype:
        raise WgmmaError(f"{name} of '{a.buffer.name}' ({a.buffer.dtype}) and '{b.buffer.name}' "
                         f"({b.buffer.dtype}): wgmma takes float16, bfloat16 or float32 (tf32) operands, both alike")
    if bn not in WGMMA_BN or bm % 64 or not 64 <= bm <= 256:
        raise WgmmaError(f"{name} of a {bm} x {bn} block: bm must be 64, 128, 192 or 256 (64 rows a "
                         f"consumer warpgroup) and bn one of {WGMMA_BN}")
