"""conv2d NHWC (float16 or bfloat16) on sm_90a's ``wgmma``: the implicit GEMM of ``conv2d_nhwc_tensorcore`` on the
warp-specialized wgmma pipeline of ``codegen/cuda_wgmma.py``, its producer **gathering** the A tile.

The GEMM is ``conv2d_nhwc_tensorcore``'s: ``Y[m, k] = sum_{rs, c} A[m, rs·C + c] · Wt[k, rs·C + c]``
with ``m = (n·OH + oh)·OW + ow`` and ``A[m, rs·C + c] = X[n, oh·stride + r - pad, ow·stride + s - pad, c]``
(0 in the padding); the weights KRSC are B as the wgmma GEMM reads it (k-major rows of R·S·C).
The pipeline (``tc_wgmma_pipeline``: producer warpgroup, ring of SWIZZLE_128B stages, mbarriers,
consumer warpgroups on ``wgmma.mma_async``, ``tc_wgmma_store``) is the GEMM's, called with another
A fill (its hook ``fill_a``):

* ``tc_wgmma_conv_a`` fills step ``kt`` (128 bytes = 64 channels of one tap ``rs = kt / (C / 64)``,
  channels from ``(kt % (C / 64))·64``): producer thread ``t`` copies 16-byte chunk ``t % 8`` of rows
  ``t / 8 + 16 i`` (``i < bm / 16``), each with one ``cp.async`` whose source size is 0 (zeros)
  where the tap falls into the padding. A thread's rows are fixed, so their ``(n, oh, ow)`` are
  decoded once, before the loop. C must be a multiple of 64 (a step never straddles two taps);
  the error says so.

Two forms: :func:`conv2d_nhwc_wgmma_te`, a TE schedule (the template
``topi/conv2d_nhwc_tensorcore.cuda``'s ``wgmma`` knob and its fallback on sm_90) whose block-level
intrinsic :func:`wgmma_conv_mainloop` reads all of X with the block's first row as a scalar
parameter (tensorize binds it); and :func:`conv2d_nhwc_wgmma`, the same C as a kernel of its own
(:class:`ConvWgmma`, run through pycuda) for benches. CI checks the model of the data path
(:func:`model_conv_wgmma`, ``codegen/cuda_wgmma_conv.py``) against float64 numpy, emulates the TE
schedule and compiles both with nvcc for sm_90a.

>>> s, (X, Wt, Y) = conv2d_nhwc_wgmma_te(32, 56, 56, 64, 64, 3, 3, 1, 1, block=(128, 64), stages=4)
>>> conv = conv2d_nhwc_wgmma(32, 56, 56, 64, 64, 3, 3, stride=1, padding=1, block=(128, 64), stages=4)
>>> conv(x_nhwc, w_krsc, y)          # device arrays (torch, cupy); y: (N·OH·OW, K)
"""
from __future__ import annotations

import numpy as np

from ..codegen.cuda_wgmma import SWIZZLE_ROW_BYTES, WGMMA_KINDS, block_threads, smem_bytes, wgmma_name, wgmma_prelude
from .conv2d_nhwc_tensorcore import out_size
from .tensorcore_wgmma import check_config

KERNEL = "tc_conv2d_nhwc_wgmma"

KERNEL_TEMPLATE = r"""
// conv2d NHWC @N@x@H@x@W@x@C@ * KRSC @K@x@R@x@S@x@C@, stride @STRIDE@, pad @PAD@ -> Y (@M@ x @K@): a
// @BM@ x @BN@ block of the implicit GEMM per thread block (blockIdx.x: rows, blockIdx.y: channels)
extern "C" __global__ void __launch_bounds__(@THREADS@, 1)
@KERNEL@(const @T@* __restrict__ X, const @T@* __restrict__ Wt, @O@* __restrict__ Y) {
  extern __shared__ __align__(1024) unsigned char tc_smem[];
  float acc[@BN@ / 2];
  const int m0 = blockIdx.x * @BM@, n0 = blockIdx.y * @BN@;
  const tc_wgmma_conv_a<@BM@, @T@> fill(X, m0, @H@, @W@, @C@, @S@, @OH@, @OW@, @STRIDE@, @PAD@, threadIdx.x & 127);
  tc_wgmma_pipeline<@BM@, @BN@, @STAGES@, @LAG@, @T@, @MMA@>(acc, fill, Wt + (long long)n0 * @KG@, @KG@, @KG@,
                                                            tc_smem);
  tc_wgmma_store<@BM@, @BN@>(Y + (long long)m0 * @K@ + n0, @K@, acc);
}
"""

_CTYPES = {"float16": "half", "bfloat16": "__nv_bfloat16", "float32": "float"}


def check_conv_wgmma(N, H, W, C, K, R, S, stride, padding, dtype, out_dtype, block, stages, lag):
    """Refuse what the wgmma conv cannot run, naming it (the layer's sizes, the tile, the ring).

    >>> check_conv_wgmma(32, 56, 56, 96, 64, 3, 3, 1, 1, "float16", "float16", (128, 64), 4, 1)
    Traceback (most recent call last):
    ValueError: conv2d_nhwc_wgmma: C=96 input channels is not a multiple of 64 ...
    """
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"conv2d_nhwc_wgmma takes float16 or bfloat16 input and weights, got {dtype!r}")
    if out_dtype not in ("float16", "bfloat16", "float32"):
        raise ValueError(f"conv2d_nhwc_wgmma writes float16, bfloat16 or float32, got out_dtype={out_dtype!r}")
    epr = WGMMA_KINDS[dtype][0]
    if C % epr:
        raise ValueError(f"conv2d_nhwc_wgmma: C={C} input channels is not a multiple of {epr} (a wgmma step is 128 "
                         f"bytes of {dtype} channels of one filter tap and must not straddle two): pad the channels "
                         f"to a multiple of {epr}, or use conv2d_nhwc_tensorcore (mma.sync, C a multiple of 16)")
    bm, bn = block
    check_config(bm, bn, R * S * C, dtype, stages, lag)
    OH, OW = out_size(H, W, R, S, stride, padding)
    if OH < 1 or OW < 1:
        raise ValueError(f"conv2d_nhwc_wgmma: a {R}x{S} filter with stride {stride} and padding {padding} leaves no "
                         f"output of the {H}x{W} input")
    for what, size, tile in ((f"N·OH·OW={N * OH * OW} output pixels ({N}x{OH}x{OW})", N * OH * OW, bm),
                             (f"K={K} output channels", K, bn)):
        if size % tile:
            raise ValueError(f"conv2d_nhwc_wgmma: {what} is not a multiple of the block tile's {tile} "
                             f"(block={tuple(block)})")
    if N * H * W * C >= 2 ** 31 or N * OH * OW * K >= 2 ** 31:
        raise ValueError(f"conv2d_nhwc_wgmma: the input ({N * H * W * C} elements) or the output "
                         f"({N * OH * OW * K}) has 2^31 elements or more (32-bit indices): split the batch")


def conv2d_nhwc_wgmma_source(N, H, W, C, K, R, S, stride=1, padding=0, dtype="float16", out_dtype="float16",
                             block=(128, 128), stages=4, lag=1) -> str:
    """The CUDA C (sm_90a) of the wgmma conv: the wgmma prelude (the pipeline and store), the conv's
    A fill and the kernel ``tc_conv2d_nhwc_wgmma(X, Wt, Y)``, the layer's sizes compiled in.

    >>> src = conv2d_nhwc_wgmma_source(32, 14, 14, 256, 256, 3, 3, 1, 1, block=(128, 128))
    """
    check_conv_wgmma(N, H, W, C, K, R, S, stride, padding, dtype, out_dtype, block, stages, lag)
    bm, bn = block
    OH, OW = out_size(H, W, R, S, stride, padding)
    subs = {"@N@": N, "@H@": H, "@W@": W, "@C@": C, "@K@": K, "@R@": R, "@S@": S, "@STRIDE@": stride,
            "@PAD@": padding, "@OH@": OH, "@OW@": OW, "@M@": N * OH * OW, "@KG@": R * S * C, "@BM@": bm,
            "@BN@": bn, "@STAGES@": stages, "@LAG@": lag, "@THREADS@": block_threads(bm), "@KERNEL@": KERNEL,
            "@T@": _CTYPES[dtype], "@O@": _CTYPES[out_dtype], "@MMA@": wgmma_name(dtype, bn)}
    kernel = KERNEL_TEMPLATE
    for key, v in subs.items():
        kernel = kernel.replace(key, str(v))
    return "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" + wgmma_prelude({(dtype, bn)}) + kernel


class ConvWgmma:
    """One layer's wgmma conv: ``source`` (CUDA C), ``grid``, ``threads``, ``smem`` (dynamic shared
    bytes); calling it runs the kernel on device arrays (torch tensors or anything with
    ``__cuda_array_interface__``): ``x`` NHWC, ``w`` KRSC (contiguous), ``y`` (N·OH·OW, K).

    >>> conv = ConvWgmma(2, 8, 8, 64, 64, 3, 3, 1, 1)
    >>> conv.grid, conv.threads
    ((1, 1, 1), 384)
    """

    def __init__(self, N, H, W, C, K, R, S, stride=1, padding=0, dtype="float16", out_dtype="float16",
                 block=(128, 128), stages=4, lag=1):
        self.shape = (N, H, W, C, K, R, S, stride, padding)
        self.dtype, self.out_dtype, self.block, self.stages, self.lag = dtype, out_dtype, tuple(block), stages, lag
        self.source = conv2d_nhwc_wgmma_source(N, H, W, C, K, R, S, stride, padding, dtype, out_dtype, block,
                                               stages, lag)
        OH, OW = out_size(H, W, R, S, stride, padding)
        self.out_shape = (N * OH * OW, K)
        self.grid = (N * OH * OW // block[0], K // block[1], 1)
        self.threads = block_threads(block[0])
        self.smem = smem_bytes(block[0], block[1], stages)
        self._fn = None

    def build(self) -> bytes:
        """The cubin (nvcc, sm_90a; its disk cache)."""
        from ..codegen.cuda_compile import compile_cuda
        return compile_cuda(self.source, "sm_90a")

    def load(self):
        """Load the cubin into the current GPU (pycuda), raising the kernel's shared-memory limit."""
        if self._fn is None:
            from ..runtime.cuda_runtime import context, driver
            context()
            drv = driver()
            self._module = drv.module_from_buffer(self.build())
            fn = self._module.get_function(KERNEL)
            fn.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, self.smem)
            fn.prepare("PPP")
            self._fn = fn
        return self._fn

    def __call__(self, x, w, y):
        N, H, W, C, K, R, S, _, _ = self.shape
        fn = self.load()
        ptrs = [_device_ptr(a, shape, name) for a, shape, name in
                ((x, (N, H, W, C), "x (NHWC)"), (w, (K, R, S, C), "w (KRSC)"), (y, self.out_shape, "y"))]
        fn.prepared_call(self.grid, (self.threads, 1, 1), *ptrs, shared_size=self.smem)


def _device_ptr(a, shape, name) -> int:
    """The device pointer of a contiguous device array of ``shape``; a clear error otherwise."""
    if hasattr(a, "data_ptr") and hasattr(a, "is_contiguous"):        # torch
        ok, got, ptr = a.is_contiguous(), tuple(a.shape), a.data_ptr()
    else:
        iface = getattr(a, "__cuda_array_interface__", None)
        if iface is None:
            raise TypeError(f"conv2d_nhwc_wgmma: {name} must be a device array (torch, cupy), got {type(a).__name__}")
        got, ptr = tuple(iface["shape"]), iface["data"][0]
        ok = iface.get("strides") is None
    if got != tuple(shape) or not ok:
        raise ValueError(f"conv2d_nhwc_wgmma: {name} must be a contiguous array of shape {tuple(shape)}, got "
                         f"{got}{'' if ok else ' (not contiguous)'}")
    return int(ptr)


def conv2d_nhwc_wgmma(N, H, W, C, K, R, S, stride=1, padding=0, dtype="float16", out_dtype="float16",
                      block=(128, 128), stages=4, lag=1) -> ConvWgmma:
    """conv2d of ``X`` (N, H, W, C) with ``Wt`` (K, R, S, C), both ``dtype`` (float16 or bfloat16),
    on sm_90a's wgmma (the module docstring): a :class:`ConvWgmma` writing ``Y`` (N·OH·OW, K) of
    ``out_dtype`` (float16 or bfloat16, rounded once, or float32); ``block`` = (bm, bn) of the implicit GEMM per thread block (bm 64 to
    256 rows: a consumer warpgroup per 64; bn 64, 128 or 256 channels), ``stages`` of the ring,
    ``lag`` steps of copies in flight (1 to ``stages - 2``).

    >>> conv = conv2d_nhwc_wgmma(32, 14, 14, 256, 256, 3, 3, stride=1, padding=1, block=(128, 128), stages=4)
    """
    return ConvWgmma(N, H, W, C, K, R, S, stride, padding, dtype, out_dtype, block, stages, lag)


# -- the model CI runs (no GPU) --------------------------------------------------------------------

def model_conv_wgmma(x: np.ndarray, w: np.ndarray, stride: int, padding: int, block=(128, 128),
                     stages: int = 4, dtype: str | None = None) -> np.ndarray:
    """``Y`` (N·OH·OW, K) float32 as the wgmma conv computes it, block by block
    (``codegen/cuda_wgmma_conv.model_conv_block``: each k step's A rows gathered into a poisoned
    shared ring with the C's index arithmetic, B's rows, each instruction's operands read back
    through its descriptors and run by ``wgmma.mma_async``'s TE definition). ``dtype``
    "bfloat16": ``x``, ``w`` hold bfloat16 values as float32 (the emulator's way).

    >>> y = model_conv_wgmma(x, w, 1, 1, block=(128, 64), stages=3)
    """
    from ..codegen.cuda_wgmma_conv import model_conv_block
    N, H, W, C = x.shape
    K, R, S, _ = w.shape
    bm, bn = block
    dtype = dtype or x.dtype.name
    check_conv_wgmma(N, H, W, C, K, R, S, stride, padding, dtype, "float32", block, stages, 1)
    OH, OW = out_size(H, W, R, S, stride, padding)
    ring = np.full(stages * (bm + bn) * SWIZZLE_ROW_BYTES, 0x7E, np.uint8)   # poison: float16 NaN
    y = np.zeros((N * OH * OW, K), np.float32)
    for m0 in range(0, N * OH * OW, bm):
        for n0 in range(0, K, bn):
            y[m0:m0 + bm, n0:n0 + bn] = model_conv_block(ring, x, w[n0:n0 + bn], m0, (N, H, W, C, K, R, S, stride,
                                                         padding), bm, bn, stages, dtype)
    return y


# -- the TE schedule: a block-level intrinsic with the block's first row as a scalar parameter ----

def _wrapped_gather(X, m, rs, c, shape):
    """``X[n, oh·stride + r − pad, ow·stride + s − pad, c]`` of implicit-GEMM row ``m`` (0 in the
    padding), every index wrapped by ``floormod`` into its extent (the identity where the value is
    used) so that a block's region reads a box that is all of X, whatever the block."""
    N, H, W, C, K, R, S, stride, pad = shape
    OH, OW = out_size(H, W, R, S, stride, pad)
    n, oh, ow = (m // (OH * OW)) % N, (m // OW) % OH, m % OW
    h, w = oh * stride + rs // S - pad, ow * stride + rs % S - pad
    v = X[n, h % H, w % W, c]
    if not pad:
        return v
    from .. import te
    return te.if_then_else(te.all(h >= 0, h < H, w >= 0, w < W), v, te.const(0, X.dtype))


def _conv_compute(X, Wt, m, k, rs, c, shape):
    S = shape[6]
    return (_wrapped_gather(X, m, rs, c, shape).astype("float32")
            * Wt[k, rs // S, rs % S, c].astype("float32"))


def wgmma_conv_mainloop(shape, bm: int, bn: int, dtype: str = "float16", stages: int = 4, lag: int = 1):
    """The block-level intrinsic of the wgmma conv: ``acc[i, j] = sum_{rs, c} A[m0 + i, rs·C + c] ·
    Wt[j, rs, c]`` over all of X (N, H, W, C) and a ``bn``-channel tile of the weights (bn, R, S, C),
    ``m0`` (a scalar parameter: tensorize binds it to where the block's rows start) the block's
    first implicit-GEMM row; lowered to ``tc_wgmma_conv_mainloop`` under the block's threads.

    >>> intrin = wgmma_conv_mainloop((32, 14, 14, 256, 256, 3, 3, 1, 1), 128, 128)
    """
    from .. import te, tir
    from ..ir.expr import const
    from ..ir.stmt import Allocate, Buffer
    from .tensorcore_wgmma import SCOPE, _threads
    N, H, W, C, K, R, S, stride, pad = shape
    X = te.placeholder((N, H, W, C), name="X", dtype=dtype)
    Wt = te.placeholder((bn, R, S, C), name="W", dtype=dtype)
    m0 = te.var("m0")
    rs = te.reduce_axis((0, R * S), name="rs")
    c = te.reduce_axis((0, C), name="c")
    acc = te.compute((bm, bn), lambda i, j: te.sum(_conv_compute(X, Wt, i + m0, j, rs, c, shape), axis=[rs, c]),
                     name="C")
    BX = tir.decl_buffer(X.shape, dtype, name="x", scope="global", offset_factor=1)
    BW = tir.decl_buffer(Wt.shape, dtype, name="w", scope="global", strides=[te.var("ldw"), S * C, C, 1],
                         offset_factor=1)
    BC = tir.decl_buffer(acc.shape, "float32", name="acc", scope=SCOPE, offset_factor=1)

    def lower(ins, outs, sp):
        x, w = ins
        ring = Buffer("wgmma_ring", (const(smem_bytes(bm, bn, stages), "int32"),), "uint8", scope="shared")
        call = tir.call_intrin("handle", "tir.tc_wgmma_conv_mainloop", outs[0].data, x.access_ptr("r"),
                               w.access_ptr("r"), sp[0], ring.access_ptr("rw"), bm, bn, stages, lag,
                               N, H, W, C, R, S, stride, pad)
        return Allocate(ring, _threads(bm, tir.Evaluate(call)))

    return te.decl_tensor_intrin(acc.op, lower, name=f"wgmma_conv_{bm}x{bn}_{dtype}_s{stages}_l{lag}",
                                 binds={X: BX, Wt: BW, acc: BC}, scalar_params=[m0])


def conv2d_nhwc_wgmma_te(N, H, W, C, K, R, S, stride=1, padding=0, dtype="float16", out_dtype="float16",
                         block=(128, 128), stages=4, lag=1, raster=0):
    """The wgmma conv as a TE schedule (what the template builds): ``s, (X, Wt, Y)`` with ``Y``
    (N·OH·OW, K) of ``out_dtype``; the implicit GEMM's rows tiled by ``block`` = (bm, bn), each
    block's accumulator by :func:`wgmma_conv_mainloop` (its first row bound by tensorize), stored
    by ``wgmma_store``. Emulated like any schedule (the emulator also runs each block through the
    modelled gather and ring).

    >>> s, (X, Wt, Y) = conv2d_nhwc_wgmma_te(32, 56, 56, 64, 64, 3, 3, 1, 1, block=(128, 64), stages=4)
    >>> mod = tilecraft.build(s, [X, Wt, Y], target="cuda")
    """
    from .. import te
    from .tensorcore import cast_output
    from .tensorcore_wgmma import schedule_wgmma_blocks
    check_conv_wgmma(N, H, W, C, K, R, S, stride, padding, dtype, out_dtype, block, stages, lag)
    shape = (N, H, W, C, K, R, S, stride, padding)
    OH, OW = out_size(H, W, R, S, stride, padding)
    bm, bn = block
    X = te.placeholder((N, H, W, C), name="X", dtype=dtype)
    Wt = te.placeholder((K, R, S, C), name="W", dtype=dtype)
    rs = te.reduce_axis((0, R * S), name="rs")
    c = te.reduce_axis((0, C), name="c")
    Yacc = te.compute((N * OH * OW, K), lambda m, k: te.sum(_conv_compute(X, Wt, m, k, rs, c, shape), axis=[rs, c]),
                      name="Y")
    Y = cast_output(Yacc, out_dtype)
    s = schedule_wgmma_blocks(Yacc, Y, (bm, bn), wgmma_conv_mainloop(shape, bm, bn, dtype, stages, lag), out_dtype,
                              raster)
    return s, (X, Wt, Y)
