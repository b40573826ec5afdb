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

TILE = 16
SCOPES = {"wmma": ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator"),
          "mma": ("mma.matrix_a", "mma.matrix_b", "mma.accumulator")}


def _scopes(impl: str):
    if impl not in SCOPES:
        raise ValueError(f"tensor-core impl must be 'wmma' or 'mma', got {impl!r}")
    return SCOPES[impl]


def _tile_buffer(dtype, name, scope):
    """A 16 x 16 tile anywhere in its buffer (any row stride, any offset)."""
    return tir.decl_buffer((TILE, TILE), dtype, name=name, scope=scope, strides=[te.var(f"{name}_s"), 1],
                           offset_factor=1)


def fragment_index(buf):
    """Which tile of its fragment the declared tile ``buf`` is: its row of tiles times the tiles
    per row, plus its column (the fragment's rows are ``buf.strides[0]`` elements apart)."""
    s = buf.strides[0]
    return buf.elem_offset // (TILE * s) * (s // TILE) + buf.elem_offset % s // TILE


def load_matrix(role: str, layout: str = "row_major", impl: str = "wmma", src_scope: str = "shared"):
    """Load a 16 x 16 float16 tile of ``src_scope`` memory into a fragment: ``role`` is ``"a"``
    or ``"b"``; ``layout``: how the tile is stored (see the module docstring)."""
    scope = _scopes(impl)[0 if role == "a" else 1]
    A = te.placeholder((TILE, TILE), name="A", dtype="float16")
    C = te.compute((TILE, TILE), lambda i, j: A[i, j], name="C")
    BA = _tile_buffer("float16", "src", src_scope)
    BC = _tile_buffer("float16", "frag", scope)

    def lower(ins, outs):
        src, frag = ins[0], outs[0]
        if impl == "wmma":
            return tir.call_intrin("handle", "tir.tvm_load_matrix_sync", frag.data, TILE, TILE, TILE,
                                   fragment_index(frag), src.access_ptr("r"), src.strides[0], layout)
        return tir.call_intrin("handle", "tir.tc_ldmatrix", frag.data, fragment_index(frag),
                               src.access_ptr("r"), src.strides[0], layout)

    return te.decl_tensor_intrin(C.op, lower, name=f"{impl}_load_{role}_{layout}", binds={A: BA, C: BC})


def mma(layout_a: str = "row_major", layout_b: str = "row_major", impl: str = "wmma"):
    """``C[i, j] += sum_k A[i, k] * B[k, j]`` on 16 x 16 x 16 tiles, float16 → float32 (operands
    read in their fragments' layouts); ``reset`` fills the accumulator with 0."""
    sa, sb, sc = _scopes(impl)
    A = te.placeholder((TILE, TILE), name="A", dtype="float16")
    B = te.placeholder((TILE, TILE), name="B", dtype="float16")
    k = te.reduce_axis((0, TILE), name="k")

    def a(i, kk):
        return A[i, kk] if layout_a == "row_major" else A[kk, i]

    def b(kk, j):
        return B[kk, j] if layout_b == "row_major" else B[j, kk]
    C = te.compute((TILE, TILE), lambda i, j: te.sum(a(i, k).astype("float32") * b(k, j).astype("float32"),
                                                    axis=k), name="C")
    BA, BB, BC = _tile_buffer("float16", "fa", sa), _tile_buffer("float16", "fb", sb), \
        _tile_buffer("float32", "fc", sc)

    def lower(ins, outs):
        fa, fb = ins
        fc = outs[0]
        ia, ib, ic = fragment_index(fa), fragment_index(fb), fragment_index(fc)
        if impl == "wmma":
            update = tir.call_intrin("handle", "tir.tvm_mma_sync", fc.data, ic, fa.data, ia, fb.data, ib, fc.data, ic)
            reset = tir.call_intrin("handle", "tir.tvm_fill_fragment", fc.data, TILE, TILE, TILE, ic, 0.0)
        else:
            update = tir.call_intrin("handle", "tir.tc_mma_sync", fc.data, ic, fa.data, ia, fb.data, ib, fc.data, ic)
            reset = tir.call_intrin("handle", "tir.tc_mma_fill", fc.data, ic, 0.0)
        return tir.stmt_seq(tir.Evaluate(reset), tir.Evaluate(update)), reset, update

    return te.decl_tensor_intrin(C.op, lower, name=f"{impl}_mma_{layout_a}_{layout_b}",
                                 binds={A: BA, B: BB, C: BC})


def store_matrix(impl: str = "wmma", dst_scope: str = "global"):
    """Store a 16 x 16 float32 accumulator tile, row-major, to ``dst_scope`` memory."""
    A = te.placeholder((TILE, TILE), name="A", dtype="float32")
    C = te.compute((TILE, TILE), lambda i, j: A[i, j], name="C")
    BA = _tile_buffer("float32", "frag", _scopes(impl)[2])
    BC = _tile_buffer("float32", "dst", dst_scope)

    def lower(ins, outs):
        frag, dst = ins[0], outs[0]
        if impl == "wmma":
            return tir.call_intrin("handle", "tir.tvm_store_matrix_sync", frag.data, TILE, TILE, TILE,
                                   fragment_index(frag), dst.access_ptr("w"), dst.strides[0], "row_major")
        return tir.call_intrin("handle", "tir.tc_mma_store", frag.data, fragment_index(frag),
                               dst.access_ptr("w"), dst.strides[0])

    return te.decl_tensor_intrin(C.op, lower, name=f"{impl}_store", binds={A: BA, C: BC})


def matmul_tensorcore(M, N, K, impl="wmma", layout_b="row_major", block=(2, 2), warp=(2, 2), chunk=2,
                      pad=8, double_buffer=True, unroll=True, stages=0, prefetch=False):
    """``C = A @ B`` (float16 in, float32 out) on tensor cores: ``A`` is (M, K); ``B`` is (K, N)
    (``layout_b="row_major"``) or (N, K) (``"col_major"``: ``C = A @ B.T``).

    A block has ``block[0] × block[1]`` warps, each computing ``warp[0] × warp[1]`` tiles of
    16 × 16 (a block tile of ``16·block·warp``); the reduction steps ``16·chunk`` deep through
    shared tiles of A and B (rows padded by ``pad`` halves against bank conflicts), fetched by
    all threads 16 bytes at a time (``double_buffer``: the next step's tiles are loaded while
    this one's are multiplied; ``stages=n`` instead: ``cp.async`` copies into a ring of ``n``
    buffers, ``n - 1`` steps ahead, see ``Stage.pipeline``). ``unroll`` unrolls the loops over a
    warp's tiles. ``prefetch`` loads the fragments of a whole step (all ``chunk`` k-slices) before
    its first mma, so the ``ldmatrix`` of later slices overlap earlier ``mma.sync``s (more
    registers). M, N must be multiples of the block tile, K of the step.
    """
    A = te.placeholder((M, K), name="A", dtype="float16")
    if layout_b == "row_major":
        B = te.placeholder((K, N), name="B", dtype="float16")
    else:
        B = te.placeholder((N, K), name="B", dtype="float16")
    k = te.reduce_axis((0, K), name="k")
    if layout_b == "row_major":
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k),
                       name="C")
    else:
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("float32") * B[j, k].astype("float32"), axis=k),
                       name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    sa, sb, sc = _scopes(impl)
    AF = s.cache_read(AS, sa, [C])
    BF = s.cache_read(BS, sb, [C])
    CF = s.cache_write(C, sc)

    bm, bn = block
    wm, wn = warp
    i, j = C.op.axis
    i, ii = s[C].split(i, factor=TILE)
    j, ji = s[C].split(j, factor=TILE)
    i, iw = s[C].split(i, factor=wm)
    j, jw = s[C].split(j, factor=wn)
    bi, ti = s[C].split(i, factor=bm)
    bj, tj = s[C].split(j, factor=bn)
    s[C].reorder(bi, bj, ti, tj, iw, jw, ii, ji)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.z"))

    s[CF].compute_at(s[C], tj)
    ci, cj = CF.op.axis
    ci, cii = s[CF].split(ci, factor=TILE)
    cj, cji = s[CF].split(cj, factor=TILE)
    (ck,) = CF.op.reduce_axis
    ko, kk = s[CF].split(ck, factor=TILE * chunk)
    kt, ki = s[CF].split(kk, factor=TILE)
    s[CF].reorder(ko, kt, ci, cj, cii, cji, ki)
    frag_at = ko if prefetch else kt
    s[AF].compute_at(s[CF], frag_at)
    s[BF].compute_at(s[CF], frag_at)
    s[AS].compute_at(s[CF], ko)
    s[BS].compute_at(s[CF], ko)
    for X in (AS, BS):
        f = s[X].fuse(*X.op.axis)
        f, v = s[X].split(f, factor=8)
        f, tx = s[X].split(f, factor=32)
        f, ty = s[X].split(f, factor=bm)
        f, tz = s[X].split(f, factor=bn)
        s[X].bind(tx, te.thread_axis("threadIdx.x"))
        s[X].bind(ty, te.thread_axis("threadIdx.y"))
        s[X].bind(tz, te.thread_axis("threadIdx.z"))
        s[X].vectorize(v)
    # shared rows padded by `pad` halves: the 8 rows an ldmatrix (or wmma load) reads at once
    # start in different banks
    s[AS].storage_align(AS.op.axis[0], TILE * chunk, pad)
    s[BS].storage_align(BS.op.axis[0], TILE * chunk if layout_b == "col_major" else TILE * bn * wn, pad)

    ai, ak = AF.op.axis
    ai, aii = s[AF].split(ai, factor=TILE)
    ako, aki = s[AF].split(ak, factor=TILE)          # one slice unless prefetch
    s[AF].reorder(ako, ai, aii, aki)
    s[AF].tensorize(aii, load_matrix("a", "row_major", impl))
    bx0, bx1 = BF.op.axis
    if layout_b == "row_major":             # (k, n): tiles along n
        bno, bni = s[BF].split(bx1, factor=TILE)
        bko, bki = s[BF].split(bx0, factor=TILE)
        s[BF].reorder(bko, bno, bki, bni)
        s[BF].tensorize(bki, load_matrix("b", "row_major", impl))
    else:                                   # (n, k): tiles along n
        bno, bni = s[BF].split(bx0, factor=TILE)
        bko, bki = s[BF].split(bx1, factor=TILE)
        s[BF].reorder(bko, bno, bni, bki)
        s[BF].tensorize(bni, load_matrix("b", "col_major", impl))
    s[CF].tensorize(cii, mma("row_major", layout_b, impl))
    s[C].tensorize(ii, store_matrix(impl))
    if stages:
        s[AS].pipeline(stages)
        s[BS].pipeline(stages)
    elif double_buffer:
        s[AS].double_buffer()
        s[BS].double_buffer()
    if unroll:
        for st, ax in ((CF, kt), (CF, ci), (CF, cj), (AF, ako), (AF, ai), (BF, bko), (BF, bno), (C, iw), (C, jw)):
            s[st].unroll(ax)
    return s, (A, B, C)
