"""The emulator's model of the sm_90a wgmma main loop (``tc_wgmma_mainloop``, ``cuda_wgmma.py``):
the data path through shared memory, instruction by instruction.

The block-level intrinsic's TE definition gives the result (``cuda_emulate_intrin.py`` runs it);
this model runs the same main loop the way the CUDA C moves the data, and its result must agree:

* each 128-byte k step of the block's A and B rows is written into the kernel's shared ring
  (the ``wgmma_ring`` buffer itself, as bytes) in the SWIZZLE_128B layout the producer writes
  (``cuda_wgmma.swizzled_offset``), stage ``kt % stages``;
* each consumer warpgroup's instructions read their operands through the descriptors the C
  code builds (``cuda_wgmma.wgmma_desc``: start address, stride byte offset, layout type), decoded
  by the hardware's rule for SWIZZLE_128B (address bits 4-6 XOR bits 7-9), and run by the TE
  definition of one ``wgmma.mma_async.m64nNkK`` (:func:`wgmma_instruction`, a warpgroup-level
  matrix intrinsic: ``D[i, j] += sum_k A[i, k] * B[j, k]``, 64 x n x 32 bytes of k).

With TMA (``tc_wgmma_tma_mainloop``) the stages are written by :func:`tma_copy`, the copy one
``cp.async.bulk.tensor.2d`` performs: a box of the tensor map's 2-D array (rows from the tile's
first row, 128 bytes from its column ``kt * 128 bytes``; zeros outside the array) laid out
row-major, 128 bytes a row, then placed by the 128-byte swizzle on the shared address (bits 4-6
XOR bits 7-9), the tile's coordinates computed from its pointer and row stride as the C code does.

So a change to the swizzle, the descriptors, the ring's carving or the TMA coordinates that would
scramble the operands on a GPU fails here. Not modelled: the timing of the producer/consumer protocol (mbarrier phases,
cp.async completion), which the GPU tests check.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .cuda_wgmma import SWIZZLE_ROW_BYTES, swizzled_offset, wgmma_desc


@lru_cache(maxsize=None)
def wgmma_instruction(n: int, dtype: str):
    """The TE definition of one ``wgmma.mma_async.m64n{n}k{K}`` (K: 32 bytes of ``dtype``):
    ``(A, B, D)`` with ``D[i, j] = sum_k A[i, k] * B[j, k]`` in float32 (added to the accumulator)."""
    from .. import te
    from ..ir import dtype as dt
    kd = 32 // (dt.bits(dtype) // 8)
    A = te.placeholder((64, kd), dtype, name="A")
    B = te.placeholder((n, kd), dtype, name="B")
    k = te.reduce_axis((0, kd), name="k")
    D = te.compute((64, n), lambda i, j: te.sum(A[i, k].astype("float32") * B[j, k].astype("float32"), axis=k),
                   name="D")
    return A, B, D


def descriptor_rows(ring: np.ndarray, desc: int, rows: int) -> np.ndarray:
    """The ``rows`` x 32 bytes a K-major SWIZZLE_128B descriptor gives one instruction: byte ``b``
    of row ``r`` at ``start + (r / 8) * SBO + (r % 8) * 128 + b``, then bits 4-6 of the address
    XORed with bits 7-9."""
    start = (desc & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    if desc >> 62 != 1:
        raise ValueError(f"descriptor {desc:#x}: layout type {desc >> 62}, not SWIZZLE_128B (1)")
    r = np.arange(rows)[:, None]
    addr = start + (r // 8) * sbo + (r % 8) * SWIZZLE_ROW_BYTES + np.arange(32)[None, :]
    return ring[addr ^ (((addr >> 7) & 7) << 4)]


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """bfloat16 values (held in float32, already rounded) as their 16-bit patterns."""
    return (np.ascontiguousarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(bits).view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def tma_copy(ring: np.ndarray, dst: int, tensor: np.ndarray, c0: int, c1: int, box_rows: int, box_cols: int):
    """One 2-D bulk tensor copy with the 128-byte swizzle: rows ``c1 .. c1 + box_rows`` and columns
    ``c0 .. c0 + box_cols`` of ``tensor`` (zeros where the box leaves it) into ``ring`` at byte
    ``dst`` (1024-aligned), box row ``r`` at ``dst + r * 128`` with address bits 4-6 XORed with
    bits 7-9."""
    if dst % 1024:
        raise ValueError(f"a TMA copy with the 128-byte swizzle into shared byte {dst}: not 1024-aligned")
    if box_cols * tensor.itemsize != SWIZZLE_ROW_BYTES:
        raise ValueError(f"a TMA box row of {box_cols} x {tensor.itemsize} bytes: the 128-byte swizzle takes "
                         f"rows of 128 bytes")
    box = np.zeros((box_rows, box_cols), tensor.dtype)
    rows, cols = tensor.shape
    r0, r1, k0, k1 = max(c1, 0), min(c1 + box_rows, rows), max(c0, 0), min(c0 + box_cols, cols)
    if r0 < r1 and k0 < k1:
        box[r0 - c1:r1 - c1, k0 - c0:k1 - c0] = tensor[r0:r1, k0:k1]
    addr = dst + np.arange(box_rows * SWIZZLE_ROW_BYTES)
    ring[addr ^ (((addr >> 7) & 7) << 4)] = np.ascontiguousarray(box).view(np.uint8).reshape(-1)


def model_mainloop(ring: np.ndarray, a: np.ndarray, b: np.ndarray, bm: int, bn: int, stages: int,
                   dtype: str | None = None, tma=None) -> np.ndarray:
    """The block's ``bm x bn`` float32 accumulator as the main loop computes it, writing the k
    steps of ``a`` (bm x K) and ``b`` (bn x K) into ``ring`` (the shared ring's bytes, modified);
    ``dtype`` the operands' (``a.dtype`` by default; ``"bfloat16"``: values held in float32, their
    16-bit patterns go through the ring). ``tma``: ``(ga, (a_row, a_col), gb, (b_row, b_col))``,
    the whole 2-D arrays A and B are tiles of and the tiles' first elements in them: the stages are
    then written by :func:`tma_copy` from those arrays."""
    from ..interp import evaluate
    dtype = dtype or a.dtype.name
    if dtype == "bfloat16":
        a, b = _bf16_bits(a), _bf16_bits(b)
        if tma is not None:
            tma = (_bf16_bits(tma[0]), tma[1], _bf16_bits(tma[2]), tma[3])
    epr = SWIZZLE_ROW_BYTES // a.itemsize
    stage_bytes = (bm + bn) * SWIZZLE_ROW_BYTES
    dest = np.array([[swizzled_offset(r, c) for c in range(8)] for r in range(bm + bn)], np.int64)
    dest = (dest[:, :, None] + np.arange(16)[None, None, :]).reshape(bm + bn, 128)
    A, B, D = wgmma_instruction(bn, dtype)
    values = _bf16_values if dtype == "bfloat16" else (lambda x: np.ascontiguousarray(x).view(a.dtype))
    acc = np.zeros((bm, bn), np.float32)
    for kt in range(a.shape[1] // epr):
        base = (kt % stages) * stage_bytes
        if tma is not None:
            ga, (a_row, a_col), gb, (b_row, b_col) = tma
            tma_copy(ring, base, ga, a_col + kt * epr, a_row, bm, epr)
            tma_copy(ring, base + bm * SWIZZLE_ROW_BYTES, gb, b_col + kt * epr, b_row, bn, epr)
        else:
            step = np.concatenate([a[:, kt * epr:(kt + 1) * epr], b[:, kt * epr:(kt + 1) * epr]])
            ring[base + dest] = np.ascontiguousarray(step).view(np.uint8).reshape(bm + bn, 128)
        for c in range(bm // 64):
            for kk in range(4):
                fa = descriptor_rows(ring, wgmma_desc(base + c * 64 * 128 + 32 * kk), 64)
                fb = descriptor_rows(ring, wgmma_desc(base + bm * 128 + 32 * kk), bn)
                d = evaluate(D, {A: values(fa), B: values(fb)})
                acc[c * 64:(c + 1) * 64] += d
    return acc
