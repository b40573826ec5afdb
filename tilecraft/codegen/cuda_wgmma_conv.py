"""CUDA C and its model for the wgmma conv's A fill (``tc_wgmma_pipeline``'s hook, ``cuda_wgmma.py``):
the implicit GEMM's rows gathered from an NHWC input, zero-filled in the padding.

* ``tc_wgmma_conv_a<BM, T>`` (in the wgmma prelude): step ``kt`` is 128 bytes (64 fp16 / bf16
  channels) of one filter tap, ``tap = kt / (C / 64)``; producer thread ``t`` copies 16-byte chunk
  ``t % 8`` of rows ``t / 8 + 16 i`` of the block's ``BM`` rows with ``cp.async ... 16, src_size``,
  ``src_size`` 0 where the tap falls into the padding; each row's ``(n, oh·stride − pad,
  ow·stride − pad)`` decoded once, when the fill is constructed;
* the block call ``tc_wgmma_conv_mainloop(frag, x, w, m0, smem, bm, bn, stages, lag, N, H, W, C, R,
  S, stride, pad)`` (``ir/builtin.py``): the block's accumulator of rows ``m0 ..`` through the
  pipeline with that fill, B the weights KRSC (rows of R·S·C);
* :func:`model_fill_a` / :func:`model_conv_block`: the same arithmetic in numpy, writing the shared
  ring's bytes and reading each wgmma's operands back through its descriptors (the emulator
  checks each block against the intrinsic's definition with it; ``topi/conv2d_nhwc_wgmma.py``'s
  model runs a whole layer).
"""
from __future__ import annotations

import numpy as np

from .cuda_wgmma import SWIZZLE_ROW_BYTES, swizzled_offset, wgmma_desc, wgmma_name

CONV_FILL_A = r"""
// the conv's A fill (tc_wgmma_pipeline's hook): the implicit GEMM's rows m0 .. m0 + BM - 1 gathered
// from NHWC X, step kt = tap (kt / csteps) x channels (kt % csteps) * EPR ..; zeros in the padding
template <int BM, typename T>
struct tc_wgmma_conv_a {
  static constexpr int RPT = BM / 16;          // rows per producer thread: t / 8 + 16 i
  static constexpr int EPR = 128 / sizeof(T);  // channels of one 128-byte step
  const T* X;
  int H, W, C, S, csteps;
  int base[RPT], h0[RPT], w0[RPT];             // n·H·W·C, oh·stride - pad, ow·stride - pad of each row
  __device__ __forceinline__ tc_wgmma_conv_a(const T* X_, int m0, int H_, int W_, int C_, int S_, int OH, int OW,
                                             int stride, int pad, int t)
      : X(X_), H(H_), W(W_), C(C_), S(S_), csteps(C_ / EPR) {
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const int m = m0 + (t >> 3) + 16 * i, n = m / (OH * OW), p = m - n * (OH * OW), oh = p / OW;
      base[i] = n * H_ * W_ * C_;
      h0[i] = oh * stride - pad;
      w0[i] = (p - oh * OW) * stride - pad;
    }
  }
  __device__ __forceinline__ void operator()(unsigned sa, int kt, int t) const {
    const int tap = kt / csteps, r = tap / S, s = tap - r * S;
    const int c0 = (kt - tap * csteps) * EPR + (t & 7) * (EPR / 8);
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const int row = (t >> 3) + 16 * i, h = h0[i] + r, w = w0[i] + s;
      const bool inside = (unsigned)h < (unsigned)H && (unsigned)w < (unsigned)W;
      const T* src = inside ? X + base[i] + (h * W + w) * C + c0 : X;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                   :: "r"(sa + row * 128 + (((t & 7) ^ (row & 7)) << 4)), "l"(src), "r"(inside ? 16 : 0)
                   : "memory");
    }
  }
};
"""


def model_fill_a(ring: np.ndarray, sa: int, x: np.ndarray, m0: int, kt: int, shape, bm: int) -> None:
    """Write step ``kt`` of the block at row ``m0`` into ``ring`` (bytes) at stage offset ``sa`` as
    ``tc_wgmma_conv_a`` does: producer thread ``t``, its rows ``t / 8 + 16 i`` and chunk ``t % 8``,
    the same index arithmetic, zeros where the tap is in the padding."""
    N, H, W, C, K, R, S, stride, pad = shape
    OH, OW = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    epr = SWIZZLE_ROW_BYTES // x.itemsize
    csteps = C // epr
    tap = kt // csteps
    r, s = tap // S, tap % S
    t = np.arange(128)[:, None]
    i = np.arange(bm // 16)[None, :]
    row = (t >> 3) + 16 * i
    m = m0 + row
    n, p = m // (OH * OW), m % (OH * OW)
    h = (p // OW) * stride - pad + r
    w = (p % OW) * stride - pad + s
    inside = (h >= 0) & (h < H) & (w >= 0) & (w < W)
    c0 = (kt % csteps) * epr + (t & 7) * (epr // 8)
    flat = x.reshape(-1)
    src = (n * H * W * C + (np.where(inside, h, 0) * W + np.where(inside, w, 0)) * C + c0)[..., None] + np.arange(8)
    chunk = np.where(inside[..., None], flat[src], np.zeros((), x.dtype))          # (128, RPT, 8 elements)
    dst = np.vectorize(swizzled_offset)(row, np.broadcast_to(t & 7, row.shape)) + sa
    ring[dst[..., None] + np.arange(16)] = np.ascontiguousarray(chunk).view(np.uint8).reshape(*row.shape, 16)


def model_conv_block(ring: np.ndarray, x: np.ndarray, w: np.ndarray, m0: int, shape, bm: int, bn: int,
                     stages: int, dtype: str) -> np.ndarray:
    """The ``bm x bn`` float32 accumulator of the block at row ``m0`` as the pipeline computes it:
    each step's A rows gathered from ``x`` (NHWC) into ``ring`` (bytes, modified) by
    :func:`model_fill_a`, ``w``'s ``bn`` rows (K-tile, R, S, C) written as the GEMM's producer
    writes B, each instruction's operands read through its descriptors and run by the TE
    definition of ``wgmma.mma_async``. ``dtype`` "bfloat16": ``x``, ``w`` hold bfloat16 values as
    float32 (the emulator's way), the ring their 16-bit patterns."""
    from ..interp import evaluate
    from .cuda_emulate_wgmma import _bf16_bits, _bf16_values, descriptor_rows, wgmma_instruction
    N, H, W, C, K, R, S, stride, pad = shape
    if dtype == "bfloat16":
        x, w = _bf16_bits(x), _bf16_bits(w)
        operand = _bf16_values
    else:
        def operand(raw):
            return raw.view(x.dtype)
    epr = SWIZZLE_ROW_BYTES // x.itemsize
    wk = np.ascontiguousarray(w).reshape(bn, R * S * C)
    stage_bytes = (bm + bn) * SWIZZLE_ROW_BYTES
    dest_b = np.array([[swizzled_offset(r, c) for c in range(8)] for r in range(bn)], np.int64)
    dest_b = (dest_b[:, :, None] + np.arange(16)).reshape(bn, 128)
    A, B, D = wgmma_instruction(bn, dtype)
    acc = np.zeros((bm, bn), np.float32)
    for kt in range(R * S * C // epr):
        base = (kt % stages) * stage_bytes
        model_fill_a(ring, base, x, m0, kt, shape, bm)
        rows = np.ascontiguousarray(wk[:, kt * epr:(kt + 1) * epr]).view(np.uint8)
        ring[base + bm * 128 + dest_b] = rows.reshape(bn, 128)
        for c in range(bm // 64):
            for kk in range(4):
                fa = descriptor_rows(ring, wgmma_desc(base + c * 64 * 128 + 32 * kk), 64)
                fb = descriptor_rows(ring, wgmma_desc(base + bm * 128 + 32 * kk), bn)
                acc[c * 64:(c + 1) * 64] += evaluate(D, {A: operand(np.ascontiguousarray(fa)),
                                                        B: operand(np.ascontiguousarray(fb))})
    return acc


def conv_block_call(r, e, frag: str) -> str:
    """The C of ``tc_wgmma_conv_mainloop`` for the renderer ``r`` (``cuda_wgmma.block_call``)."""
    from ..ir import dtype as dt
    from .cuda_wgmma import WGMMA_KINDS, WgmmaError
    _, x, w, m0, smem, bm, bn, stages, lag, N, H, W, C, R, S, stride, pad = e.args
    c = {k: int(v.value) for k, v in zip(("bm", "bn", "stages", "lag", "N", "H", "W", "C", "R", "S", "stride"),
                                         (bm, bn, stages, lag, N, H, W, C, R, S, stride))}
    dtype = dt.element_of(x.buffer.dtype)
    if dtype not in WGMMA_KINDS or dtype == "float32" or dt.element_of(w.buffer.dtype) != dtype:
        raise WgmmaError(f"tc_wgmma_conv_mainloop of '{x.buffer.name}' ({x.buffer.dtype}) and '{w.buffer.name}' "
                         f"({w.buffer.dtype}): the wgmma conv takes float16 or bfloat16 operands, both alike")
    OH = (c["H"] + 2 * int(pad.value) - c["R"]) // c["stride"] + 1
    OW = (c["W"] + 2 * int(pad.value) - c["S"]) // c["stride"] + 1
    r.wgmma_kinds.add((dtype, c["bn"]))
    ct = r.ctype(x.buffer.dtype)
    kg = c["R"] * c["S"] * c["C"]
    tid = "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 127"
    return (f"{{ const tc_wgmma_conv_a<{c['bm']}, {ct}> tc_fill({r.expr(x)}, {r.expr(m0)}, {c['H']}, {c['W']}, "
            f"{c['C']}, {c['S']}, {OH}, {OW}, {c['stride']}, {r.expr(pad)}, {tid});\n"
            f"  tc_wgmma_pipeline<{c['bm']}, {c['bn']}, {c['stages']}, {c['lag']}, {ct}, {wgmma_name(dtype, c['bn'])}>("
            f"{frag}, tc_fill, {r.expr(w)}, {kg}, {kg}, (unsigned char*)({r.expr(smem)})); }}")
