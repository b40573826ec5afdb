"""A Hopper (sm_90a) tensor-core GEMM: block-level tensor intrinsics on ``wgmma.mma_async``.

Two intrinsics, each a TE compute the emulator runs and a block-collective call
(``ir/builtin.py``'s ``BLOCK_BUILTINS``, CUDA C in ``codegen/cuda_wgmma.py``):

* ``wgmma_mainloop(bm, bn, K, dtype)``: ``acc[i, j] = sum_k A[i, k] * B[j, k]`` over a block tile
  of ``bm x bn`` and the whole of K (A and B k-major in global memory, float16, bfloat16 or float32
  read as tf32; acc float32 in scope ``wgmma.accumulator``): one producer warpgroup copies 128-byte k
  steps into a ring of swizzled shared stages, ``bm / 64`` consumer warpgroups multiply them
  with ``wgmma``, mbarriers between them (no block-wide barrier in the loop);
* ``wgmma_store(bm, bn, out)``: ``C[i, j] = acc[i, j]`` (float32, or float16 / bfloat16 rounded to nearest)
  from the consumers' registers.

The lowering of each is its call under a loop bound to ``threadIdx.x`` of the block's
``128 * (1 + bm / 64)`` threads (the schedule binds no thread itself), the main loop's inside the
shared allocation of its ring.

>>> s, (A, B, C) = matmul_wgmma(4096, 4096, 4096, block=(128, 256), stages=4, out_dtype="float16")
>>> mod = tilecraft.build(s, [A, B, C], target="cuda")       # sm_90a (picked for wgmma)
"""
from __future__ import annotations

from .. import te, tir
from ..codegen.cuda_wgmma import WGMMA_BN, WGMMA_KINDS, block_threads, smem_bytes
from ..ir.stmt import Allocate, Buffer, For, ForKind
from ..ir.expr import Var, const
from .tensorcore import block_axes, cast_output, gemm_compute

SCOPE = "wgmma.accumulator"
OUT_DTYPES = ("float32", "float16", "bfloat16")     # C: the accumulator, or rounded to nearest at the store


def _threads(bm: int, body):
    v = Var("wgmma_tx", "int32")
    return For(v, const(0, "int32"), const(block_threads(bm), "int32"), ForKind.THREAD_BINDING, body, "threadIdx.x")


def wgmma_mainloop(bm: int, bn: int, K: int, dtype: str = "float16", stages: int = 4, lag: int = 1,
                   load: str = "cp.async", maxnreg: int = 0):
    """The block's ``bm x bn`` accumulator over all of ``K``: ``acc = A @ B.T`` with A (bm, K) and
    B (bn, K) tiles of global memory, ``stages`` shared stages filled by the producer warpgroup.
    ``load="cp.async"``: its 128 threads copy 16 bytes at a time (any row stride), keeping ``lag``
    steps of copies in flight (1 to ``stages - 2``) before it hands a stage over (0: it never
    waits; each copy arrives on the stage's mbarrier when it lands). ``load="tma"``: one thread
    issues a bulk tensor copy per operand and step through tensor maps of A's and B's buffers
    (kernel parameters, ``runtime/cuda_tensor_map.py``; the tiles must be whole rows of 2-D
    buffers; ``lag`` unused), the copies completing the stage's mbarrier; ``maxnreg`` 1 (TMA
    only) moves registers from the producer to the consumers (``setmaxnreg``).

    >>> intrin = wgmma_mainloop(128, 256, 4096, "float16", stages=4, load="tma")
    """
    check_config(bm, bn, K, dtype, stages, lag, load, maxnreg)
    A = te.placeholder((bm, K), name="A", dtype=dtype)
    B = te.placeholder((bn, K), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((bm, bn), lambda i, j: te.sum(A[i, k].astype("float32") * B[j, k].astype("float32"), axis=k),
                   name="C")
    BA = tir.decl_buffer(A.shape, dtype, name="a", scope="global", strides=[te.var("lda"), 1], offset_factor=1)
    BB = tir.decl_buffer(B.shape, dtype, name="b", scope="global", strides=[te.var("ldb"), 1], offset_factor=1)
    BC = tir.decl_buffer(C.shape, "float32", name="acc", scope=SCOPE, offset_factor=1)

    def lower(ins, outs):
        a, b = ins
        acc = outs[0]
        ring = Buffer("wgmma_ring", (const(smem_bytes(bm, bn, stages), "int32"),), "uint8", scope="shared")
        common = (acc.data, a.access_ptr("r"), a.strides[0], b.access_ptr("r"), b.strides[0], K, ring.access_ptr("rw"),
                  bm, bn, stages)
        if load == "tma":
            call = tir.call_intrin("handle", "tir.tc_wgmma_tma_mainloop", *common, maxnreg)
        else:
            call = tir.call_intrin("handle", "tir.tc_wgmma_mainloop", *common, lag)
        return Allocate(ring, _threads(bm, tir.Evaluate(call)))

    how = f"tma{'_r' if maxnreg else ''}" if load == "tma" else f"l{lag}"
    return te.decl_tensor_intrin(C.op, lower, name=f"wgmma_mainloop_{bm}x{bn}_{dtype}_s{stages}_{how}",
                                 binds={A: BA, B: BB, C: BC})


def wgmma_store(bm: int, bn: int, out: str = "float32"):
    """``C[i, j] = acc[i, j]`` for the block's ``bm x bn`` accumulator (``out`` float32, or
    float16 / bfloat16 rounded to nearest), into a tile of global memory (any row stride).

    >>> intrin = wgmma_store(128, 256, "float16")
    """
    if out not in OUT_DTYPES:
        raise ValueError(f"the wgmma accumulator (float32) is stored as float32, float16 or bfloat16, not {out!r}")
    A = te.placeholder((bm, bn), name="A", dtype="float32")
    C = te.compute((bm, bn), lambda i, j: A[i, j].astype(out) if out != "float32" else A[i, j], name="C")
    BA = tir.decl_buffer(A.shape, "float32", name="acc", scope=SCOPE, offset_factor=1)
    BC = tir.decl_buffer(C.shape, out, name="c", scope="global", strides=[te.var("ldc"), 1], offset_factor=1)

    def lower(ins, outs):
        acc, c = ins[0], outs[0]
        call = tir.call_intrin("handle", "tir.tc_wgmma_store", acc.data, c.access_ptr("w"), c.strides[0], bm, bn)
        return _threads(bm, tir.Evaluate(call))

    return te.decl_tensor_intrin(C.op, lower, name=f"wgmma_store_{bm}x{bn}_{out}", binds={A: BA, C: BC})


LOADS = ("cp.async", "tma")         # how the producer fills the stages


def check_config(bm: int, bn: int, K: int, dtype: str, stages: int, lag: int = 1, load: str = "cp.async",
                 maxnreg: int = 0):
    """Refuse what the wgmma main loop cannot run, naming it."""
    if load not in LOADS:
        raise ValueError(f"load={load!r}: the wgmma producer fills its stages by 'cp.async' or 'tma'")
    if maxnreg not in (0, 1) or (maxnreg and load != "tma"):
        raise ValueError(f"maxnreg={maxnreg!r}: 0, or 1 (setmaxnreg) with load='tma' (the cp.async producer needs "
                         f"its registers)")
    if dtype not in WGMMA_KINDS:
        raise ValueError(f"the wgmma GEMM takes float16, bfloat16 or float32 (tf32) operands, got {dtype!r}")
    if bm not in (64, 128, 192, 256) or bn not in WGMMA_BN:
        raise ValueError(f"the wgmma block tile is bm x bn with bm in 64, 128, 192, 256 (64 rows per consumer "
                         f"warpgroup) and bn in {', '.join(map(str, WGMMA_BN))}, got {bm} x {bn}")
    step = WGMMA_KINDS[dtype][0]
    if K % step:
        raise ValueError(f"K={K} is not a multiple of the wgmma main loop's step of {step} ({dtype}: 128 bytes of "
                         f"each row)")
    if not 3 <= stages <= 8:
        raise ValueError(f"stages={stages}: the wgmma main loop takes 3 to 8 shared stages")
    if not 0 <= lag <= stages - 2:
        raise ValueError(f"lag={lag}: the wgmma producer keeps 0 to stages - 2 = {stages - 2} steps of copies in flight "
                         f"(more and it would wait on a stage the consumers cannot free)")
    if K // step < 1:
        raise ValueError(f"K={K} gives no step")
    from ..schedule.passes.gpu_kernels import MAX_SHARED_BYTES
    if smem_bytes(bm, bn, stages) > MAX_SHARED_BYTES:
        raise ValueError(f"a {bm} x {bn} wgmma block with {stages} stages needs {smem_bytes(bm, bn, stages)} bytes of "
                         f"shared memory, more than the {MAX_SHARED_BYTES} of a block (sm_90): fewer stages")


def matmul_wgmma(M, N, K, dtype="float16", out_dtype=None, block=(128, 256), stages=4, raster=0, lag=1,
                 load="cp.async", maxnreg=0, persistent=0):
    """``C = A @ B.T`` with A (M, K) and B (N, K) (B stored n-major, ``layout_b="col_major"``) on
    sm_90a's ``wgmma`` (``dtype`` float16, bfloat16, or float32 as tf32; fp32 accumulation), ``block`` =
    (bm, bn) rows and columns of C per thread block, ``stages`` shared stages of 128-byte k steps,
    ``lag`` steps of copies the producer keeps in flight (1 to ``stages - 2``; 0: the copies arrive
    on the stage's mbarrier themselves, ``cp.async.mbarrier.arrive.noinc``), ``raster`` as in
    ``matmul_tensorcore``, ``load`` and ``maxnreg`` as in ``wgmma_mainloop`` (``"tma"``: the stages
    filled by bulk tensor copies through tensor maps of A and B, encoded at launch).
    ``persistent=P`` (TMA, ``maxnreg`` 0): a persistent grid of G blocks, G the largest divisor of
    the tile count up to P (the GPU's SM count, 132 on an H100), block b computing tiles b, b + G, ...
    (in ``raster`` order): the ring's phases go on across a block's tiles, so its producer fills
    the next tile's stages while the consumers store this one. ``out_dtype``: float32 (default),
    float16 or bfloat16.

    >>> s, (A, B, C) = matmul_wgmma(1024, 1024, 1024, block=(128, 128), stages=4, load="tma")
    """
    out_dtype = out_dtype or "float32"
    bm, bn = block
    check_config(bm, bn, K, dtype, stages, lag, load, maxnreg)
    if persistent and (load != "tma" or maxnreg or persistent < 1):
        raise ValueError(f"persistent={persistent}: a persistent grid needs load='tma' and maxnreg=0 (the producer "
                         f"of a block with setmaxnreg exits after its first tile)")
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"the wgmma accumulator (float32) is stored as float32, float16 or bfloat16, not "
                         f"{out_dtype!r}")
    for name, size, tile in (("M", M, bm), ("N", N, bn)):
        if size % tile:
            raise ValueError(f"matmul_wgmma: {name}={size} is not a multiple of the block tile's {tile} "
                             f"(block={tuple(block)})")
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((N, K), name="B", dtype=dtype)
    Cacc = gemm_compute(A, B, "col_major", "float32")
    C = cast_output(Cacc, out_dtype)
    s = schedule_wgmma_blocks(Cacc, C, (bm, bn), wgmma_mainloop(bm, bn, K, dtype, stages, lag, load, maxnreg),
                              out_dtype, raster, persistent)
    return s, (A, B, C)


def persistent_grid(tiles: int, sms: int) -> int:
    """The blocks of a persistent grid: the largest divisor of ``tiles`` up to ``sms`` (so every block
    runs as many tiles; ``persistent_grid(512, 132) == 128``)."""
    return max(g for g in range(1, min(tiles, sms) + 1) if tiles % g == 0)


def _persistent_axes(s, X, bm: int, bn: int, raster: int, sms: int):
    """Block tiles of stage ``X`` numbered as ``block_axes`` numbers them, then dealt to a persistent
    grid (``persistent_grid``): ``blockIdx.x`` outside, the block's tiles a serial loop inside."""
    i, j = X.op.axis
    M, N = (int(x.value) for x in X.shape)
    rows = M // bm
    if raster and rows % raster:
        raise ValueError(f"raster={raster} numbers the blocks in groups of {raster} block rows, but M={M} has "
                         f"{rows} block rows of {bm}: choose a raster that divides {rows} (or 0)")
    bi, ii = s[X].split(i, factor=bm)
    bj, jj = s[X].split(j, factor=bn)
    if raster:
        bio, bii = s[X].split(bi, factor=raster)
        s[X].reorder(bio, bj, bii, ii, jj)
        t = s[X].fuse(bio, bj, bii)
    else:
        s[X].reorder(bi, bj, ii, jj)
        t = s[X].fuse(bi, bj)
    grid = persistent_grid(rows * (N // bn), sms)
    to, ti = s[X].split(t, factor=grid)
    s[X].reorder(ti, to, ii, jj)
    s[X].bind(ti, te.thread_axis("blockIdx.x"))
    s[X].pragma(ti, "min_blocks_per_sm", 1)
    return to, ii, jj


def schedule_wgmma_blocks(acc, out, block, mainloop, out_dtype: str, raster: int = 0, persistent: int = 0):
    """The schedule of a (M, N) output ``out`` (``acc`` itself, or its cast ``cast_output(acc)``)
    computed by a wgmma block intrinsic: rows and columns tiled by ``block`` = (bm, bn), each
    block's accumulator (in the ``wgmma.accumulator`` scope) tensorized by ``mainloop`` (the GEMM's
    or the conv's), stored by ``wgmma_store``. Shared by ``matmul_wgmma`` and the wgmma conv.

    ``persistent``: the tiles dealt to a persistent grid of up to that many blocks (``matmul_wgmma``).

    >>> s = schedule_wgmma_blocks(Cacc, C, (128, 128), wgmma_mainloop(128, 128, 1024), "float32")
    """
    bm, bn = block
    s = te.create_schedule(out.op)
    if out is acc:
        CF = s.cache_write(out, SCOPE)
    else:
        s[acc].set_scope(SCOPE)
        CF = acc
    if persistent:
        bx, ii, jj = _persistent_axes(s, out, bm, bn, raster, persistent)
    else:
        bx, ii, jj = block_axes(s, out, (bm // 16, 1), (1, bn // 16), raster, min_blocks=1)
    s[CF].compute_at(s[out], bx)
    s[CF].tensorize(CF.op.axis[-2], mainloop)
    s[out].tensorize(ii, wgmma_store(bm, bn, out_dtype))
    return s
