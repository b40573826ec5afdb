"""Tensor-core intrinsics and a tensor-core GEMM schedule for ``target="cuda"``.

The intrinsics work on 16 x 16 x 16 tiles of float16 with float32 accumulation, in one of two
implementations of the same TE definitions (``impl``):

* ``"wmma"``: TVM's calls (``tvm_load_matrix_sync``, ``tvm_fill_fragment`` + ``tvm_mma_sync``,
  ``tvm_store_matrix_sync``) on fragments in the ``wmma.*`` scopes, rendered as ``nvcuda::wmma``;
* ``"mma"``: the PTX path (``tc_ldmatrix``: ``ldmatrix.x4``, ``.trans`` as the layout needs;
  ``tc_mma_fill`` + ``tc_mma_sync``: two ``mma.sync.aligned.m16n8k16``; ``tc_mma_store``) on
  fragments in the ``mma.*`` scopes, registers laid out as ``mma.sync`` wants them.

A fragment buffer holds several tiles; the calls name a tile by its index, computed here from
the tile's place (``fragment_index``: row of tiles × tiles per row + column), so any fragment
whose last two dimensions are whole tiles works. The TE definition of a load or store is a plain
copy of the tile in the orientation it is stored in; its ``layout`` tells the hardware whether that
is the matrix it uses (``row_major``) or its transpose (``col_major``), and the mma's definition
reads each operand in that orientation (``B[k, j]`` for a ``row_major`` B, ``B[j, k]`` for a
``col_major`` one).

>>> s, (A, B, C) = matmul_tensorcore(1024, 1024, 1024, impl="mma")
>>> mod = tilecraft.build(s, [A, B, C], target="cuda")
"""
from __future__ import annotations

from .. import te, tir
from ..ir import dtype as dt

TILE = 16
# operand dtype -> (tile depth K, accumulator dtype): an mma.sync operand tile is 16 rows of 32
# bytes (m16n8k16 for float16, m16n8k8 tf32 for float32, m16n8k32 for int8)
KINDS = {"float16": (16, "float32"), "float32": (8, "float32"), "int8": (32, "int32"), "bfloat16": (16, "float32")}
SCOPES = {"wmma": ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator"),
          "mma": ("mma.matrix_a", "mma.matrix_b", "mma.accumulator")}


def _scopes(impl: str):
    if impl not in SCOPES:
        raise ValueError(f"tensor-core impl must be 'wmma' or 'mma', got {impl!r}")
    return SCOPES[impl]


def _kind(dtype: str, impl: str):
    if dtype not in KINDS or (impl == "wmma" and dtype != "float16"):
        raise ValueError(f"tensor-core operands must be {' or '.join(KINDS) if impl == 'mma' else 'float16'} "
                         f"on the {impl} path, got {dtype!r}")
    return KINDS[dtype]


def _tile_buffer(dtype, name, scope, shape=(TILE, TILE)):
    """A tile anywhere in its buffer (any row stride, any offset)."""
    return tir.decl_buffer(shape, dtype, name=name, scope=scope, strides=[te.var(f"{name}_s"), 1],
                           offset_factor=1)


def fragment_index(buf):
    """Which tile of its fragment the declared tile ``buf`` is: its row of tiles times the tiles
    per row, plus its column (the fragment's rows are ``buf.strides[0]`` elements apart)."""
    s = buf.strides[0]
    rows, cols = (int(x.value) for x in buf.shape)
    return buf.elem_offset // (rows * s) * (s // cols) + buf.elem_offset % s // cols


def operand_shape(role: str, layout: str, dtype: str = "float16"):
    """The stored shape of an operand tile: A is 16 x K (row_major) or K x 16; B is K x 16
    (row_major) or 16 x K (col_major), K the kind's depth (16 for float16)."""
    kd = KINDS[dtype][0]
    mk = (role == "a") == (layout == "row_major")
    return (TILE, kd) if mk else (kd, TILE)


def load_matrix(role: str, layout: str = "row_major", impl: str = "wmma", src_scope: str = "shared",
                dtype: str = "float16"):
    """Load an operand tile of ``src_scope`` memory into a fragment: ``role`` is ``"a"`` or
    ``"b"``; ``layout``: how the tile is stored (see the module docstring); ``dtype`` float16
    (16 x 16 tiles), float32 (tf32, 16 x 8) or int8 (16 x 32) on the mma path.

    >>> intrin = load_matrix("b", "col_major", impl="mma", dtype="int8")   # a 16 (n) x 32 (k) tile
    """
    scope = _scopes(impl)[0 if role == "a" else 1]
    _kind(dtype, impl)
    shape = operand_shape(role, layout, dtype)
    A = te.placeholder(shape, name="A", dtype=dtype)
    C = te.compute(shape, lambda i, j: A[i, j], name="C")
    BA = _tile_buffer(dtype, "src", src_scope, shape)
    BC = _tile_buffer(dtype, "frag", scope, shape)

    def lower(ins, outs):
        src, frag = ins[0], outs[0]
        if impl == "wmma":
            return tir.call_intrin("handle", "tir.tvm_load_matrix_sync", frag.data, TILE, TILE, TILE,
                                   fragment_index(frag), src.access_ptr("r"), src.strides[0], layout)
        return tir.call_intrin("handle", "tir.tc_ldmatrix", frag.data, fragment_index(frag),
                               src.access_ptr("r"), src.strides[0], layout)

    suffix = "" if dtype == "float16" else f"_{dtype}"
    return te.decl_tensor_intrin(C.op, lower, name=f"{impl}_load_{role}_{layout}{suffix}", binds={A: BA, C: BC})


def mma(layout_a: str = "row_major", layout_b: str = "row_major", impl: str = "wmma", dtype: str = "float16"):
    """``C[i, j] += sum_k A[i, k] * B[k, j]`` on 16 x 16 x K tiles (operands read in their
    fragments' layouts); ``reset`` fills the accumulator with 0. float16 → float32 (K = 16),
    float32 → float32 (K = 8; the hardware rounds the operands to tf32, 10-bit mantissas), int8 →
    int32 (K = 32).

    >>> intrin = mma("row_major", "col_major", impl="mma", dtype="float32")   # tf32 m16n8k8, twice
    """
    sa, sb, sc = _scopes(impl)
    kd, acc = _kind(dtype, impl)
    A = te.placeholder(operand_shape("a", layout_a, dtype), name="A", dtype=dtype)
    B = te.placeholder(operand_shape("b", layout_b, dtype), name="B", dtype=dtype)
    k = te.reduce_axis((0, kd), name="k")

    def a(i, kk):
        return A[i, kk] if layout_a == "row_major" else A[kk, i]

    def b(kk, j):
        return B[kk, j] if layout_b == "row_major" else B[j, kk]
    C = te.compute((TILE, TILE), lambda i, j: te.sum(a(i, k).astype(acc) * b(k, j).astype(acc), axis=k), name="C")
    BA = _tile_buffer(dtype, "fa", sa, A.shape)
    BB = _tile_buffer(dtype, "fb", sb, B.shape)
    BC = _tile_buffer(acc, "fc", sc)

    def lower(ins, outs):
        fa, fb = ins
        fc = outs[0]
        ia, ib, ic = fragment_index(fa), fragment_index(fb), fragment_index(fc)
        if impl == "wmma":
            update = tir.call_intrin("handle", "tir.tvm_mma_sync", fc.data, ic, fa.data, ia, fb.data, ib, fc.data, ic)
            reset = tir.call_intrin("handle", "tir.tvm_fill_fragment", fc.data, TILE, TILE, TILE, ic, 0.0)
        else:
            update = tir.call_intrin("handle", "tir.tc_mma_sync", fc.data, ic, fa.data, ia, fb.data, ib, fc.data, ic)
            reset = tir.call_intrin("handle", "tir.tc_mma_fill", fc.data, ic, 0 if acc == "int32" else 0.0)
        return tir.stmt_seq(tir.Evaluate(reset), tir.Evaluate(update)), reset, update

    suffix = "" if dtype == "float16" else f"_{dtype}"
    return te.decl_tensor_intrin(C.op, lower, name=f"{impl}_mma_{layout_a}_{layout_b}{suffix}",
                                 binds={A: BA, B: BB, C: BC})


def store_matrix(impl: str = "wmma", dst_scope: str = "global", acc: str = "float32", out: str = None):
    """Store a 16 x 16 accumulator tile (``acc``: float32, or int32 on the mma path), row-major,
    to ``dst_scope`` memory as ``out`` (default ``acc``; float16 or bfloat16 from float32 on the mma
    path: the rounded, half-size epilogue).

    >>> intrin = store_matrix("mma", acc="float32", out="float16")     # C[i, j] = float16(acc[i, j])
    """
    out = out or acc
    ok = {("float32", "float32")} if impl == "wmma" else {("float32", "float32"), ("float32", "float16"),
                                                          ("float32", "bfloat16"), ("int32", "int32")}
    if (acc, out) not in ok:
        raise ValueError(f"the {impl} path stores a {acc} accumulator as one of "
                         f"{sorted(o for a, o in ok if a == acc) or 'nothing'}, not {out!r}")
    A = te.placeholder((TILE, TILE), name="A", dtype=acc)
    C = te.compute((TILE, TILE), lambda i, j: A[i, j].astype(out) if out != acc else A[i, j], name="C")
    BA = _tile_buffer(acc, "frag", _scopes(impl)[2])
    BC = _tile_buffer(out, "dst", dst_scope)

    def lower(ins, outs):
        frag, dst = ins[0], outs[0]
        if impl == "wmma":
            return tir.call_intrin("handle", "tir.tvm_store_matrix_sync", frag.data, TILE, TILE, TILE,
                                   fragment_index(frag), dst.access_ptr("w"), dst.strides[0], "row_major")
        return tir.call_intrin("handle", "tir.tc_mma_store", frag.data, fragment_index(frag),
                               dst.access_ptr("w"), dst.strides[0])

    suffix = "" if (acc, out) == ("float32", "float32") else f"_{acc}_{out}"
    return te.decl_tensor_intrin(C.op, lower, name=f"{impl}_store{suffix}", binds={A: BA, C: BC})


def matmul_tensorcore(M, N, K, impl="wmma", layout_b="row_major", block=(2, 2), warp=(2, 2), chunk=2,
                      pad=None, double_buffer=True, unroll=True, stages=0, prefetch=False, dtype="float16",
                      out_dtype=None, raster=0, min_blocks=0, fragment_prefetch=False, spread_copies=False):
    """``C = A @ B`` on tensor cores: ``A`` is (M, K); ``B`` is (K, N) (``layout_b="row_major"``)
    or (N, K) (``"col_major"``: ``C = A @ B.T``). ``dtype``: float16 (fp32 accumulation), float32
    (tf32 mma, fp32 accumulation) or int8 (int32 accumulation); the last two on the mma path with
    ``layout_b="col_major"`` (ldmatrix transposes 16-bit elements only). ``out_dtype``: C's dtype,
    the accumulator's by default; ``"float16"`` from a float32 accumulator rounds in the epilogue
    (half the bytes written, as cuBLAS's fp16 GEMM).

    A block has ``block[0] × block[1]`` warps, each computing ``warp[0] × warp[1]`` tiles of
    16 × 16 (a block tile of ``16·block·warp``); the reduction steps ``K_tile·chunk`` deep
    (``K_tile`` = 32 bytes of ``dtype``: 16 for float16) through shared tiles of A and B (rows
    padded by ``pad`` elements, 16 bytes by default, against bank conflicts), fetched by all
    threads 16 bytes at a time (``double_buffer``: the next step's tiles are loaded while this
    one's are multiplied; ``stages=n`` instead: ``cp.async`` copies into a ring of ``n``
    buffers, ``n - 1`` steps ahead, see ``Stage.pipeline``). ``unroll`` unrolls the loops over a
    warp's tiles. ``prefetch`` loads the fragments of a whole step (all ``chunk`` k-slices) before
    its first mma, so the ``ldmatrix`` of later slices overlap earlier ``mma.sync``s (more
    registers). ``raster=g`` numbers the blocks in groups of ``g`` block rows (one ``blockIdx.x``,
    block rows fastest within a group), so blocks running together share panels of B in L2;
    0 keeps the 2-D grid. ``min_blocks=n`` declares that ``n`` blocks should fit on a
    multiprocessor (``__launch_bounds__(threads, n)``, the pragma ``min_blocks_per_sm``): ptxas may
    then use up to 65536 / (threads·n) registers per thread and issues the ``ldmatrix`` of the next
    k slice before the ``mma.sync`` of this one (register double buffering of the fragments);
    without it ptxas keeps fewer registers and loads each fragment just before its first use.
    ``fragment_prefetch`` (with ``stages`` and ``chunk >= 2``) carries that double buffering
    across the steps: the wait and barrier that land step k + 1 move to before the last k slice
    of step k, and the first slice's fragments of step k + 1 are loaded right after them, before
    that last slice's ``mma.sync`` (the first slice's fragments live across iterations);
    ``spread_copies`` (with ``fragment_prefetch``) also deals the step's ``cp.async`` copies out
    before its k slices instead of issuing them all at the step's start.
    M, N must be multiples of the block tile, K of the step.

    >>> s, (A, B, C) = matmul_tensorcore(256, 256, 256, impl="mma", dtype="int8", layout_b="col_major")
    >>> s, (A, B, C) = matmul_tensorcore(512, 512, 512, impl="mma", out_dtype="float16", raster=2)
    """
    kd, acc = _kind(dtype, impl)
    out_dtype = out_dtype or acc
    if dt.bits(dtype) != 16 and layout_b != "col_major":
        raise ValueError(f"a tensor-core GEMM of {dtype} operands takes B as (N, K), layout_b='col_major': ldmatrix "
                         f"transposes 16-bit elements only")
    store = store_matrix(impl, acc=acc, out=out_dtype)
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N) if layout_b == "row_major" else (N, K), name="B", dtype=dtype)
    Cacc = gemm_compute(A, B, layout_b, acc)
    C = cast_output(Cacc, out_dtype)
    s = te.create_schedule(C.op)
    CF = accumulator_stage(s, Cacc, C, impl)
    opts = dict(impl=impl, layout_b=layout_b, block=block, warp=warp, chunk=chunk, pad=pad,
                double_buffer=double_buffer, unroll=unroll, stages=stages, prefetch=prefetch, dtype=dtype,
                fragment_prefetch=fragment_prefetch, spread_copies=spread_copies)
    bx, ii, jj = block_axes(s, C, block, warp, raster, min_blocks)
    schedule_mainloop(s, A, B, CF, C, ii, jj, store, **opts)
    return s, (A, B, C)


def gemm_compute(A, B, layout_b: str, acc: str, name: str = "C"):
    """The GEMM of ``A`` (``..., M, K``) and ``B`` (``..., K, N`` for ``layout_b="row_major"``,
    ``..., N, K`` for ``"col_major"``) accumulated in ``acc``; leading (batch) axes are shared
    by A, B and the result.

    >>> A = te.placeholder((12, 128, 64), "float16", name="A"); B = te.placeholder((12, 128, 64), "float16", name="B")
    >>> C = gemm_compute(A, B, "col_major", "float32")          # C[b] = A[b] @ B[b].T, (12, 128, 128)
    """
    *lead, M, K = A.shape
    N = B.shape[-1] if layout_b == "row_major" else B.shape[-2]
    k = te.reduce_axis((0, K), name="k")

    def body(*idx):
        *b, i, j = idx
        bk = B[(*b, k, j)] if layout_b == "row_major" else B[(*b, j, k)]
        return te.sum(A[(*b, i, k)].astype(acc) * bk.astype(acc), axis=k)
    return te.compute((*lead, M, N), body, name=name)


def cast_output(Cacc, out_dtype: str):
    """The GEMM's output: ``Cacc`` itself when ``out_dtype`` is its dtype, else a cast of it
    (``C_out``) that the store intrinsic tensorizes (float32 -> float16 rounds at the store).

    >>> C = cast_output(gemm_compute(A, B, "row_major", "float32"), "float16")
    """
    if out_dtype == Cacc.dtype:
        return Cacc
    return te.compute(Cacc.shape, lambda *idx: Cacc[idx].astype(out_dtype), name="C_out")


def accumulator_stage(s, Cacc, C, impl: str):
    """The stage that accumulates in fragments: a ``cache_write`` of ``C`` in the accumulator
    scope when C is the GEMM itself, else the GEMM stage ``Cacc``, moved to that scope.

    >>> CF = accumulator_stage(s, Cacc, C, "mma")
    """
    sc = _scopes(impl)[2]
    if C is Cacc:
        return s.cache_write(C, sc)
    s[Cacc].set_scope(sc)
    return Cacc


def block_axes(s, X, block, warp, raster=0, min_blocks=0):
    """Split the last two axes of stage ``X`` (a tensor) into thread blocks of
    ``16·block·warp`` and bind them: block rows to ``blockIdx.y`` and columns to ``blockIdx.x``
    (or, ``raster=g``, both on one ``blockIdx.x`` in groups of g block rows), a leading batch
    axis to ``blockIdx.z``; ``min_blocks`` puts the ``min_blocks_per_sm`` pragma on the block
    axis. Returns the innermost block axis (where per-block stages attach) and the row and
    column axes inside a block.

    >>> bx, ii, jj = block_axes(s, C, block=(2, 2), warp=(4, 4), raster=8)   # 128 x 128 blocks
    """
    *lead, i, j = X.op.axis
    if len(lead) > 1:
        raise ValueError(f"a tensor-core schedule binds one batch axis to blockIdx.z; {X.op.name} has {len(lead)}")
    M, N = (int(x.value) for x in X.shape[-2:])
    for name, size, axis in (("M", M, 0), ("N", N, 1)):
        tile = TILE * block[axis] * warp[axis]
        if size % tile:
            raise ValueError(f"{X.op.name}: {name}={size} is not a multiple of the block tile's {tile} "
                             f"(16 x block[{axis}]={block[axis]} x warp[{axis}]={warp[axis]})")
    rows = M // (TILE * block[0] * warp[0])
    if raster and rows % raster:
        raise ValueError(f"raster={raster} numbers the blocks in groups of {raster} block rows, but M={M} has "
                         f"{rows} block rows of {TILE * block[0] * warp[0]}: choose a raster that divides {rows} "
                         f"(or 0)")
    bi, ii = s[X].split(i, factor=TILE * block[0] * warp[0])
    bj, jj = s[X].split(j, factor=TILE * block[1] * warp[1])
    if raster:
        # blocks numbered group by group of `raster` block rows, rows fastest inside a group
        bio, bii = s[X].split(bi, factor=raster)
        s[X].reorder(*lead, bio, bj, bii, ii, jj)
        bj = s[X].fuse(bio, bj, bii)
        s[X].bind(bj, te.thread_axis("blockIdx.x"))
    else:
        s[X].reorder(*lead, bi, bj, ii, jj)
        s[X].bind(bi, te.thread_axis("blockIdx.y"))
        s[X].bind(bj, te.thread_axis("blockIdx.x"))
    if lead:
        s[X].bind(lead[0], te.thread_axis("blockIdx.z"))
    if min_blocks:
        s[X].pragma(bj, "min_blocks_per_sm", min_blocks)
    return bj, ii, jj


def schedule_mainloop(s, A, B, CF, C, ii, jj, store, *, impl, layout_b, block, warp, chunk, pad, double_buffer,
                      unroll, stages, prefetch, dtype, fragment_prefetch=False, spread_copies=False):
    """Schedule a tensor-core GEMM inside one thread block: ``C``'s axes ``ii``, ``jj`` (one block
    tile, 16·block·warp) go to ``block`` warps (``threadIdx.y``, ``threadIdx.z``) of ``warp``
    16 x 16 tiles each, tensorized by the intrinsic ``store`` (accumulator -> C); the
    accumulator stage ``CF`` (a fragment scope) is computed per warp, fed from shared tiles of A
    and B (fetched by all threads, 16 bytes each, ``double_buffer`` or a ``stages`` ring) through
    operand fragments. ``C`` may be a global output or a shared tile an epilogue reads
    (``dense_tensorcore``). See ``matmul_tensorcore`` for the options.

    >>> bx, ii, jj = block_axes(s, C, (2, 2), (2, 2))
    >>> schedule_mainloop(s, A, B, CF, C, ii, jj, store_matrix("mma"), impl="mma", layout_b="row_major", ...)
    """
    kd = KINDS[dtype][0]
    K = int(A.shape[-1].value)
    if fragment_prefetch and (not stages or chunk < 2 or prefetch):
        raise ValueError(f"fragment_prefetch loads the next step's first k slice during this step's last: it needs a "
                         f"cp.async pipeline (stages > 0, got {stages}), two or more k slices a step (chunk >= 2, got "
                         f"{chunk}) and fragments loaded per slice (prefetch=False, got {prefetch})")
    if spread_copies and not fragment_prefetch:
        raise ValueError("spread_copies deals a step's copies out among the slices of the rotated pipeline: it needs "
                         "fragment_prefetch=True")
    if K % (kd * chunk):
        raise ValueError(f"K={K} (the columns of {A.op.name}) is not a multiple of the reduction step's {kd * chunk} "
                         f"({kd} for {dtype} x chunk={chunk})")
    AS = s.cache_read(A, "shared", [CF])
    BS = s.cache_read(B, "shared", [CF])
    sa, sb, _ = _scopes(impl)
    AF = s.cache_read(AS, sa, [CF])
    BF = s.cache_read(BS, sb, [CF])

    bm, bn = block
    wm, wn = warp
    i, it = s[C].split(ii, factor=TILE)
    j, jt = s[C].split(jj, factor=TILE)
    ti, iw = s[C].split(i, factor=wm)
    tj, jw = s[C].split(j, factor=wn)
    s[C].reorder(ti, tj, iw, jw, it, jt)
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.z"))

    s[CF].compute_at(s[C], tj)
    ci, cj = CF.op.axis[-2:]
    ci, cii = s[CF].split(ci, factor=TILE)
    cj, cji = s[CF].split(cj, factor=TILE)
    # reduce axes before the last (a convolution's filter taps) go outermost, fused with the steps
    *outer, ck = CF.op.reduce_axis
    ko, kk = s[CF].split(ck, factor=kd * chunk)
    kt, ki = s[CF].split(kk, factor=kd)
    s[CF].reorder(*outer, ko, kt, ci, cj, cii, cji, ki)
    if outer:
        ko = s[CF].fuse(*outer, ko)         # one loop of steps: the pipeline runs across the taps
    if fragment_prefetch:
        s[CF].pragma(ko, "fragment_prefetch", 1)    # read by the pipeline (gpu_double_buffer)
    if spread_copies:
        s[CF].pragma(ko, "copy_spread", 1)
    frag_at = ko if prefetch else kt
    s[AF].compute_at(s[CF], frag_at)
    s[BF].compute_at(s[CF], frag_at)
    s[AS].compute_at(s[CF], ko)
    s[BS].compute_at(s[CF], ko)
    vec = 16 * 8 // dt.bits(dtype)           # elements in 16 bytes
    for X in (AS, BS):
        f = s[X].fuse(*X.op.axis)
        f, v = s[X].split(f, factor=vec)
        f, tx = s[X].split(f, factor=32)
        f, ty = s[X].split(f, factor=bm)
        f, tz = s[X].split(f, factor=bn)
        s[X].bind(tx, te.thread_axis("threadIdx.x"))
        s[X].bind(ty, te.thread_axis("threadIdx.y"))
        s[X].bind(tz, te.thread_axis("threadIdx.z"))
        s[X].vectorize(v)
    # shared rows padded by `pad` elements (16 bytes): the 8 rows an ldmatrix (or wmma load)
    # reads at once start in different banks
    pad = vec if pad is None else pad
    s[AS].storage_align(AS.op.axis[-2], kd * chunk, pad)
    s[BS].storage_align(BS.op.axis[-2], kd * chunk if layout_b == "col_major" else TILE * bn * wn, pad)

    ai, ak = AF.op.axis[-2:]
    ai, aii = s[AF].split(ai, factor=TILE)
    ako, aki = s[AF].split(ak, factor=kd)            # one slice unless prefetch
    s[AF].reorder(ako, ai, aii, aki)
    s[AF].tensorize(aii, load_matrix("a", "row_major", impl, dtype=dtype))
    bx0, bx1 = BF.op.axis[-2:]
    if layout_b == "row_major":             # (k, n): tiles along n
        bno, bni = s[BF].split(bx1, factor=TILE)
        bko, bki = s[BF].split(bx0, factor=kd)
        s[BF].reorder(bko, bno, bki, bni)
        s[BF].tensorize(bki, load_matrix("b", "row_major", impl, dtype=dtype))
    else:                                   # (n, k): tiles along n
        bno, bni = s[BF].split(bx0, factor=TILE)
        bko, bki = s[BF].split(bx1, factor=kd)
        s[BF].reorder(bko, bno, bni, bki)
        s[BF].tensorize(bni, load_matrix("b", "col_major", impl, dtype=dtype))
    s[CF].tensorize(cii, mma("row_major", layout_b, impl, dtype=dtype))
    s[C].tensorize(it, store)
    if stages:
        s[AS].pipeline(stages)
        s[BS].pipeline(stages)
    elif double_buffer:
        s[AS].double_buffer()
        s[BS].double_buffer()
    if unroll:
        for st, ax in ((CF, kt), (CF, ci), (CF, cj), (AF, ako), (AF, ai), (BF, bko), (BF, bno), (C, iw), (C, jw)):
            s[st].unroll(ax)
