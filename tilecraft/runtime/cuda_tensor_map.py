"""TMA tensor maps: the kernel parameters through which sm_90's bulk tensor copy engine reads a
2-D buffer (``cp.async.bulk.tensor``), and their encoding on the host.

A kernel whose body calls ``tc_wgmma_tma_mainloop`` (``ir/builtin.py``) takes, before its other
parameters, one ``const __grid_constant__ CUtensorMap`` per (buffer, box) it copies from
(:func:`tensor_maps_of` lists them in order; the renderer names them ``tc_tmap_0``, ...). A
tensor map is 128 opaque bytes that ``cuTensorMapEncodeTiled`` (libcuda, through ctypes: pycuda
does not wrap it) builds from the buffer's pointer, shape and row stride, the box one copy moves
(``rows x cols`` elements) and the shared-memory swizzle (128 bytes: chunk ``c`` of box row ``r``
lands at ``128 r + 16 (c ^ r % 8)``, the layout the wgmma descriptors read). The launcher
(``cuda_runtime.py``) encodes them at launch time, cached per (pointer, shape, dtype, box), and
passes each as 16 64-bit words at the front of the parameter buffer, at the offsets the driver
reports for the kernel (:func:`param_layout`: ``cuFuncGetParamInfo``). Those offsets are not
0, 128, ...: ptxas aligns a ``CUtensorMap`` (128-byte aligned in CUDA 13's cuda.h, 64 before) in
the constant bank, where the parameters start at 0x210 on sm_90, so the first map sits 112 bytes
into the buffer (an H100 run of maps packed from offset 0 faulted with "illegal instruction";
``bench/tensorcore_wgmma_diag.py``'s probes: a map from global memory or after 112 pad bytes copies
exactly).

>>> spec = TensorMapSpec(buffer_index=0, dtype="float16", box=(128, 64))
>>> tensor_map_args(spec, ptr=0x7f0000000000, shape=(4096, 4096))[:3]
(6, 2, (4096, 4096))
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ..ir import dtype as dt

TENSOR_MAP_BYTES = 128
TENSOR_MAP_WORDS = TENSOR_MAP_BYTES // 8
SWIZZLE_128B = 3                       # CU_TENSOR_MAP_SWIZZLE_128B
L2_PROMOTION_256B = 3                  # CU_TENSOR_MAP_L2_PROMOTION_L2_256B
# dtype -> CUtensorMapDataType (cuda.h); float32 operands of wgmma are read as tf32 by the mma, the
# copy moves their 32-bit patterns unchanged
DATA_TYPES = {"uint8": 0, "int8": 0, "uint16": 1, "uint32": 2, "int32": 3, "uint64": 4, "int64": 5,
              "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
TMA_CALLS = ("tc_wgmma_tma_mainloop",)


class TensorMapError(RuntimeError):
    """A tensor map the driver cannot build (or no driver to build it); the message says which."""


@dataclass(frozen=True)
class TensorMapSpec:
    """One tensor-map parameter of a kernel: the function argument it maps (``buffer_index``: the
    kernel's ``("arg", i)``), its element type, and the box ``(rows, cols)`` one copy moves."""
    buffer_index: int
    dtype: str
    box: tuple

    def to_json(self) -> list:
        return [self.buffer_index, self.dtype, list(self.box)]

    @staticmethod
    def from_json(d) -> "TensorMapSpec":
        return TensorMapSpec(int(d[0]), str(d[1]), tuple(int(x) for x in d[2]))


def tensor_maps_of(body) -> list:
    """The ``(buffer, box)`` pairs of a kernel body's TMA copies, in the order of its
    tensor-map parameters (each pair once): for ``tc_wgmma_tma_mainloop(frag, a, lda, b, ldb, k,
    smem, bm, bn, stages)`` A's ``(bm, 128 bytes)`` box and B's ``(bn, 128 bytes)``."""
    from ..ir.expr import Call
    from ..ir.functor import post_order_visit
    out: list = []

    def visit(n):
        if isinstance(n, Call) and n.name in TMA_CALLS:
            bm, bn = int(n.args[7].value), int(n.args[8].value)
            for ptr, rows in ((n.args[1], bm), (n.args[3], bn)):
                pair = (ptr.buffer, (rows, 128 // dt.nbytes(ptr.buffer.dtype)))
                if pair not in out:
                    out.append(pair)
    post_order_visit(body, visit)
    return out


def tensor_map_args(spec: TensorMapSpec, ptr: int, shape) -> tuple:
    """The arguments of ``cuTensorMapEncodeTiled`` after the map itself, as plain values:
    ``(data type, rank, global dims (innermost first), global strides in bytes (of the dims after
    the first), box (innermost first), element strides, interleave, swizzle, L2 promotion, OOB
    fill)`` for a C-contiguous 2-D array of ``shape`` at ``ptr``. Refuses what the copy engine
    cannot take, naming it."""
    if len(shape) != 2:
        raise TensorMapError(f"a TMA tensor map here is 2-D; the buffer has shape {tuple(shape)}")
    if spec.dtype not in DATA_TYPES:
        raise TensorMapError(f"TMA has no data type for {spec.dtype}")
    size = dt.nbytes(spec.dtype)
    rows, cols = (int(x) for x in shape)
    box_rows, box_cols = spec.box
    if ptr % 16:
        raise TensorMapError(f"TMA needs a 16-byte aligned global address, got {ptr:#x}")
    if cols * size % 16:
        raise TensorMapError(f"TMA needs rows a multiple of 16 bytes apart; a row of {cols} {spec.dtype} is "
                             f"{cols * size} bytes")
    if not (0 < box_rows <= 256 and 0 < box_cols <= 256) or box_cols * size > 128:
        raise TensorMapError(f"a TMA box of {box_rows} x {box_cols} {spec.dtype}: each side 1 to 256 elements, "
                             f"a row of at most 128 bytes with the 128-byte swizzle")
    return (DATA_TYPES[spec.dtype], 2, (cols, rows), (cols * size,), (box_cols, box_rows), (1, 1), 0,
            SWIZZLE_128B, L2_PROMOTION_256B, 0)


_libcuda = None
_cache: dict = {}


def libcuda():
    """The CUDA driver library (``libcuda.so.1``, loaded on first use)."""
    global _libcuda
    if _libcuda is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            fn = lib.cuTensorMapEncodeTiled
        except (OSError, AttributeError) as e:
            raise TensorMapError("kernels with TMA copies (load='tma') need the CUDA driver's "
                                 f"cuTensorMapEncodeTiled (libcuda.so.1, CUDA 12+): {e}") from None
        fn.restype = ctypes.c_int
        _libcuda = lib
    return _libcuda


def encode_tensor_map(spec: TensorMapSpec, ptr: int, shape) -> tuple:
    """The 16 64-bit words of the tensor map of ``spec`` over the array at ``ptr`` of ``shape``
    (cached per pointer, shape, dtype and box, so a launch costs a dictionary look-up).

    >>> # words = encode_tensor_map(TensorMapSpec(0, "float16", (128, 64)), a.data_ptr, (4096, 4096))
    """
    key = (ptr, tuple(shape), spec.dtype, spec.box)
    hit = _cache.get(key)
    if hit is not None:
        return hit
    dtype_code, rank, dims, strides, box, estrides, interleave, swizzle, l2, oob = tensor_map_args(spec, ptr, shape)
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    raw = (u64 * (TENSOR_MAP_WORDS + 16))()          # a CUtensorMap is 128-byte aligned (CUDA 13; 64 before)
    start = (-ctypes.addressof(raw) % 128) // 8
    out = (u64 * TENSOR_MAP_WORDS).from_buffer(raw, 8 * start)
    rc = libcuda().cuTensorMapEncodeTiled(
        ctypes.byref(out), ctypes.c_int(dtype_code), u32(rank), ctypes.c_void_p(ptr), (u64 * 2)(*dims),
        (u64 * 1)(*strides), (u32 * 2)(*box), (u32 * 2)(*estrides), ctypes.c_int(interleave),
        ctypes.c_int(swizzle), ctypes.c_int(l2), ctypes.c_int(oob))
    if rc != 0:
        raise TensorMapError(f"cuTensorMapEncodeTiled failed (CUresult {rc}) for a {spec.dtype} array of shape "
                             f"{tuple(shape)} at {ptr:#x}, box {spec.box}")
    words = tuple(int(w) for w in out)
    if len(_cache) > 4096:             # pointers of freed arrays would pile up
        _cache.clear()
    _cache[key] = words
    return words


def param_layout(image: bytes, name: str) -> tuple:
    """``(offset, size)`` of each parameter of kernel ``name`` in the parameter buffer a launch
    passes, as the driver lays it out (``cuFuncGetParamInfo``, CUDA 12.4+ drivers), read from a
    private load of the module ``image`` (a cubin) in the current context.

    >>> # param_layout(cubin, "default_function_kernel")  ->  ((112, 128), (240, 8), (248, 4), ...)
    """
    lib = libcuda()
    try:
        info = lib.cuFuncGetParamInfo
    except AttributeError:
        raise TensorMapError("kernels with TMA copies need the driver's cuFuncGetParamInfo (CUDA 12.4 or "
                             "newer driver) to lay out their tensor-map parameters") from None
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    rc = lib.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(bytes(image)))
    if rc != 0:
        raise TensorMapError(f"cuModuleLoadData failed (CUresult {rc}) reading the parameter layout of {name}")
    try:
        rc = lib.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode())
        if rc != 0:
            raise TensorMapError(f"cuModuleGetFunction({name}) failed (CUresult {rc})")
        out, off, size = [], ctypes.c_size_t(), ctypes.c_size_t()
        while info(fn, ctypes.c_size_t(len(out)), ctypes.byref(off), ctypes.byref(size)) == 0:
            out.append((off.value, size.value))
        return tuple(out)
    finally:
        lib.cuModuleUnload(mod)


def padded_format(types: str, n_maps: int, layout) -> str:
    """pycuda's ``prepare()`` string for a kernel whose first ``n_maps`` parameters are tensor maps
    (16 ``Q`` words each at the front of ``types``, one character per other parameter), with the
    pad bytes (``Nx``) that put each parameter at its offset in ``layout`` (:func:`param_layout`).

    >>> padded_format("Q" * 16 + "Pi", 1, ((112, 128), (240, 8), (248, 4)))
    '112xQQQQQQQQQQQQQQQQPi'
    """
    import struct
    chunks = ["Q" * TENSOR_MAP_WORDS] * n_maps + list(types[TENSOR_MAP_WORDS * n_maps:])
    if len(layout) != len(chunks):
        raise TensorMapError(f"the driver reports {len(layout)} kernel parameters, the launch plan has "
                             f"{len(chunks)}")
    fmt, at = "", 0
    for chunk, (off, size) in zip(chunks, layout):
        if off < at or struct.calcsize(chunk) != size:
            raise TensorMapError(f"kernel parameter layout {layout} does not fit the launch plan's {types!r}")
        fmt += (f"{off - at}x" if off > at else "") + chunk
        at = off + size
    return fmt
