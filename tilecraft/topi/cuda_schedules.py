"""Hand-written GPU schedules used by the CUDA tests, benches and examples.

Each function declares an operator with ``te`` and schedules it for ``target="cuda"``; it returns
``(schedule, [argument tensors])``. They show the GPU primitives together: ``bind`` to the grid,
``cache_read(..., "shared")`` fetched cooperatively by all threads of a block, ``cache_write``/
``cache_read(..., "local")`` register tiles, ``vthread``, ``double_buffer``, ``vectorize`` for
16-byte accesses, and reductions bound to ``threadIdx.x`` (with and without ``rfactor``).
The CUDA tuning templates (``topi/matmul.py``, ``topi/conv2d_cuda.py``) schedule with them.
"""
from __future__ import annotations

from .. import te
from ..schedule.naive_gpu import naive  # noqa: F401 -- the simplest GPU schedule, beside the hand-written ones

bx, by, bz = (lambda: te.thread_axis("blockIdx.x"), lambda: te.thread_axis("blockIdx.y"),
              lambda: te.thread_axis("blockIdx.z"))
tx, ty, tz = (lambda: te.thread_axis("threadIdx.x"), lambda: te.thread_axis("threadIdx.y"),
              lambda: te.thread_axis("threadIdx.z"))


def _fetch(s, X, threads: tuple, vec: int):
    """Split the fused axes of a shared stage over the block's threads, ``vec`` elements each
    (vectorized): all threads fetch the tile together."""
    f = s[X].fuse(*s[X].op.axis)
    f, v = s[X].split(f, factor=vec)
    if len(threads) == 1:
        f, t0 = s[X].split(f, factor=threads[0])
        s[X].bind(t0, tx())
    else:
        f, t0 = s[X].split(f, factor=threads[0])
        f, t1 = s[X].split(f, factor=threads[1])
        s[X].bind(t1, ty())
        s[X].bind(t0, tx())
    s[X].vectorize(v)


def elementwise(n=None, dtype="float32", threads=256, vec=4):
    """``C = exp(A) * B + 1`` over a vector (symbolic length when ``n`` is None)."""
    n = te.var("n") if n is None else n
    A = te.placeholder((n,), dtype, name="A")
    B = te.placeholder((n,), dtype, name="B")
    C = te.compute((n,), lambda i: te.exp(A[i]) * B[i] + te.const(1, dtype), name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=vec)
    b, t = s[C].split(xo, factor=threads)
    s[C].bind(b, bx())
    s[C].bind(t, tx())
    s[C].vectorize(xi)
    return s, [A, B, C]


def matmul(M, N, K, dtype="float32", acc="float32", block=(128, 128), vthreads=(2, 2),
           threads=(16, 16), k_tile=8, double_buffer=True, unroll=True):
    """``C[i, j] = sum_k A[i, k] * B[k, j]`` (row-major), the TVM-style SGEMM schedule.

    A block computes a ``block`` tile of C with ``threads`` threads; each thread holds
    ``block / threads`` accumulators in registers, split into ``vthreads`` interleaved sub-tiles
    (so neighbouring threads read neighbouring shared-memory words). A is fetched transposed into
    shared memory (so a thread's column of A is contiguous), B as is; both tiles are
    ``k_tile`` deep, double-buffered, and read into registers with 16-byte loads.
    """
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    AT = te.compute((K, M), lambda k, m: A[m, k], name="AT")
    k = te.reduce_axis((0, K), "k")
    cast = (lambda x: x) if acc == dtype else (lambda x: x.astype(acc))
    C = te.compute((M, N), lambda i, j: te.sum(cast(AT[k, i]) * cast(B[k, j]), axis=k), name="C")
    s = te.create_schedule(C.op)
    s[AT].set_scope("shared")
    AS = AT
    BS = s.cache_read(B, "shared", [C])
    AL = s.cache_read(AS, "local", [C])
    BL = s.cache_read(BS, "local", [C])
    CL = s.cache_write(C, "local")

    bm, bn = block
    vy, vx = vthreads
    ty_n, tx_n = threads
    rm, rn = bm // (vy * ty_n), bn // (vx * tx_n)      # per-thread sub-tile of each virtual thread
    i, j = s[C].op.axis
    bi, ii = s[C].split(i, factor=bm)
    bj, jj = s[C].split(j, factor=bn)
    vi, ii = s[C].split(ii, nparts=vy)
    vj, jj = s[C].split(jj, nparts=vx)
    ti, ii = s[C].split(ii, nparts=ty_n)
    tj, jj = s[C].split(jj, nparts=tx_n)
    s[C].reorder(bi, bj, vi, vj, ti, tj, ii, jj)
    s[C].bind(bi, by())
    s[C].bind(bj, bx())
    s[C].bind(vi, te.thread_axis("vthread", name="vy"))
    s[C].bind(vj, te.thread_axis("vthread", name="vx"))
    s[C].bind(ti, ty())
    s[C].bind(tj, tx())
    if rn in (2, 4) and dtype == "float32":
        s[C].vectorize(jj)
    s[CL].compute_at(s[C], tj)
    ci, cj = s[CL].op.axis
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=k_tile)
    s[CL].reorder(ko, ki, ci, cj)
    if unroll:
        s[CL].unroll(ki)
        s[CL].unroll(ci)
        s[CL].unroll(cj)
    s[AS].compute_at(s[CL], ko)
    s[BS].compute_at(s[CL], ko)
    s[AL].compute_at(s[CL], ki)
    s[BL].compute_at(s[CL], ki)
    for X in (AL, BL):
        ax = s[X].op.axis[-1]
        ext = rm if X is AL else rn
        if ext in (2, 4, 8) and dtype == "float32":
            s[X].vectorize(ax) if ext <= 4 else s[X].vectorize(s[X].split(ax, factor=4)[1])
    nthreads = ty_n * tx_n
    # AT: each thread reads 4 consecutive k of one row of A (16 bytes) and stores them transposed
    kk, mm = s[AS].op.axis
    s[AS].reorder(mm, kk)
    f = s[AS].fuse(mm, kk)
    f, v = s[AS].split(f, factor=min(4, k_tile))
    f, t0 = s[AS].split(f, factor=tx_n)
    f, t1 = s[AS].split(f, factor=ty_n)
    s[AS].bind(t1, ty())
    s[AS].bind(t0, tx())
    s[AS].vectorize(v)
    _fetch(s, BS, (tx_n, ty_n), 4)
    if double_buffer:
        s[AS].double_buffer()
        s[BS].double_buffer()
    return s, [A, B, C]


def conv2d_nchw(N=1, CI=64, H=56, W=56, CO=64, KH=3, KW=3, pad=1, dtype="float32",
                tile_co=16, tile_y=8, tile_x=8, co_per_thread=4, ci_tile=16, x_per_thread=1, stride=1,
                k_split=1, n_per_block=1):
    """Direct NCHW convolution:
    ``Out[n, co, y, x] = sum W[co, ci, ry, rx] * Pad[n, ci, y*stride + ry, x*stride + rx]``.

    A block computes ``tile_co`` output channels of a ``tile_y × tile_x`` patch; each thread
    ``x_per_thread`` neighbouring pixels of a row for ``co_per_thread`` channels (its register
    tile). Per ``ci_tile`` input channels the padded input patch (with its halo) and the weights
    (transposed so a thread's channels are contiguous) are fetched into shared memory by all
    threads. ``k_split > 1`` splits the input channels into that many parts computed by separate
    blocks (``Partial[k, ...]``, more blocks for small images), summed by a second kernel.
    ``n_per_block > 1`` (large batches) gives a block that many images: each thread computes its
    pixels and channels for each of them, so every weight fetched into shared memory serves
    ``n_per_block`` images (the register tile grows by that factor).
    """
    if CI % k_split:
        raise ValueError(f"k_split={k_split} does not divide the {CI} input channels")
    if N % n_per_block:
        raise ValueError(f"n_per_block={n_per_block} does not divide the batch of {N} images")
    Data = te.placeholder((N, CI, H, W), dtype, name="Data")
    Wt = te.placeholder((CO, CI, KH, KW), dtype, name="W")
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1
    Pad = te.compute((N, CI, H + 2 * pad, W + 2 * pad),
                     lambda n, c, y, x: te.if_then_else(
                         te.all(y >= pad, y < H + pad, x >= pad, x < W + pad),
                         Data[n, c, y - pad, x - pad], te.const(0, dtype)), name="Pad")
    WT = te.compute((CI, KH, KW, CO), lambda c, ry, rx, o: Wt[o, c, ry, rx], name="WT")
    cs = CI // k_split
    rc = te.reduce_axis((0, cs), "rc")
    ry = te.reduce_axis((0, KH), "ry")
    rx = te.reduce_axis((0, KW), "rx")
    if k_split == 1:
        Out = Acc = te.compute((N, CO, OH, OW), lambda n, o, y, x: te.sum(
            Pad[n, rc, y * stride + ry, x * stride + rx] * WT[rc, ry, rx, o], axis=[rc, ry, rx]), name="Out")
    else:
        Acc = te.compute((k_split, N, CO, OH, OW), lambda k, n, o, y, x: te.sum(
            Pad[n, k * cs + rc, y * stride + ry, x * stride + rx] * WT[k * cs + rc, ry, rx, o],
            axis=[rc, ry, rx]), name="Partial")
        kk = te.reduce_axis((0, k_split), "kk")
        Out = te.compute((N, CO, OH, OW), lambda n, o, y, x: te.sum(Acc[kk, n, o, y, x], axis=kk), name="Out")
    s = te.create_schedule(Out.op)
    s[Pad].compute_inline()
    s[WT].set_scope("shared")
    PS = s.cache_read(Pad, "shared", [Acc])
    WL = s.cache_read(WT, "local", [Acc])
    OL = s.cache_write(Acc, "local")

    conv2d_nchw_block(s, Acc, OL, PS, WT, WL, tile_co=tile_co, tile_y=tile_y, tile_x=tile_x,
                      co_per_thread=co_per_thread, x_per_thread=x_per_thread, n_per_block=n_per_block,
                      ci_tile=ci_tile)
    if k_split > 1:
        f = s[Out].fuse(*s[Out].op.axis)
        b, t = s[Out].split(f, factor=128)
        s[Out].bind(b, bx())
        s[Out].bind(t, tx())
    return s, [Data, Wt, Out]


def conv2d_nchw_block(s, bound, OL, PS, WT, WL, *, tile_co, tile_y, tile_x, co_per_thread, x_per_thread,
                      n_per_block, ci_tile):
    """The block of :func:`conv2d_nchw`'s direct convolution: ``bound``'s output tile (its leading
    axes, e.g. a k-split's, fused into the block index) split over ``threadIdx.z/y/x``, the
    convolution ``OL`` accumulated in registers at each thread, the padded input ``PS`` and the
    weights ``WT`` fetched cooperatively into shared memory per chunk of ``ci_tile`` input
    channels, ``WL`` read into registers. The template schedules its accumulator this way; the
    graph build (``relay/backend/te_compiler_cuda.py``) passes the group's epilogue stage as
    ``bound``."""
    *ks, n, o, y, x = s[bound].op.axis
    bn, ni = s[bound].split(n, factor=n_per_block)
    bo, oi = s[bound].split(o, factor=tile_co)
    byy, yi = s[bound].split(y, factor=tile_y)
    bxx, xi = s[bound].split(x, factor=tile_x)
    to, oi = s[bound].split(oi, factor=co_per_thread)
    txx, xv = s[bound].split(xi, factor=x_per_thread)
    s[bound].reorder(*ks, bn, bo, byy, bxx, to, yi, txx, ni, oi, xv)
    blk = s[bound].fuse(*ks, bn, bo, byy, bxx)
    s[bound].bind(blk, bx())
    s[bound].bind(to, tz())
    s[bound].bind(yi, ty())
    s[bound].bind(txx, tx())
    s[OL].compute_at(s[bound], txx)
    rc, ry, rx = s[OL].op.reduce_axis
    rco, rci = s[OL].split(rc, factor=ci_tile)
    *_, nn, oo, yy, xx = s[OL].op.axis
    s[OL].reorder(rco, rci, ry, rx, *s[OL].op.axis)
    s[OL].unroll(ry)
    s[OL].unroll(rx)
    if x_per_thread > 1:
        s[OL].unroll(oo)
        s[OL].unroll(xx)
    if n_per_block > 1:
        s[OL].unroll(nn)
    s[PS].compute_at(s[OL], rco)
    s[WT].compute_at(s[OL], rco)
    s[WL].compute_at(s[OL], rx)
    if co_per_thread in (2, 4):
        s[WL].vectorize(s[WL].op.axis[-1])
    threads = (tile_x // x_per_thread, tile_y, tile_co // co_per_thread)
    for X in (PS, WT):
        f = s[X].fuse(*s[X].op.axis)
        f, t0 = s[X].split(f, factor=threads[0])
        f, t1 = s[X].split(f, factor=threads[1])
        f, t2 = s[X].split(f, factor=threads[2])
        s[X].reorder(f, t2, t1, t0)
        s[X].bind(t2, tz())
        s[X].bind(t1, ty())
        s[X].bind(t0, tx())


def softmax(rows, cols, dtype="float32", threads=256, vec=4):
    """Row softmax in one kernel: a block per row; the row is fetched once into shared memory
    (16-byte loads), its max and its sum of exponentials are cross-thread reductions over
    ``threadIdx.x`` kept in registers, and the output is written with 16-byte stores."""
    X = te.placeholder((rows, cols), dtype, name="X")
    k1 = te.reduce_axis((0, cols), "k1")
    k2 = te.reduce_axis((0, cols), "k2")
    Mx = te.compute((rows,), lambda i: te.max(X[i, k1], axis=k1), name="Mx")
    Sm = te.compute((rows,), lambda i: te.sum(te.exp(X[i, k2] - Mx[i]), axis=k2), name="Sm")
    Y = te.compute((rows, cols), lambda i, j: te.exp(X[i, j] - Mx[i]) / Sm[i], name="Y")
    s = te.create_schedule(Y.op)
    XS = s.cache_read(X, "shared", [Mx, Sm, Y])
    s[Mx].set_scope("local")
    s[Sm].set_scope("local")
    i, j = s[Y].op.axis
    s[Y].bind(i, bx())
    jo, jv = s[Y].split(j, factor=vec)
    jo, jt = s[Y].split(jo, factor=threads)
    s[Y].bind(jt, tx())
    s[Y].vectorize(jv)
    for R in (Mx, Sm):
        s[R].compute_at(s[Y], i)
        ko, kt = s[R].split(s[R].op.reduce_axis[0], factor=threads)
        s[R].bind(kt, tx())
    s[XS].compute_at(s[Y], i)
    _fetch(s, XS, (threads,), vec)
    return s, [X, Y]


def layer_norm(rows, cols, eps=1e-5, dtype="float32", threads=128):
    """``Y = (X - mean) / sqrt(var + eps) * gamma + beta`` over each row, one kernel, a block per row;
    mean and mean of squares are cross-thread reductions."""
    X = te.placeholder((rows, cols), dtype, name="X")
    G = te.placeholder((cols,), dtype, name="gamma")
    Bt = te.placeholder((cols,), dtype, name="beta")
    k1 = te.reduce_axis((0, cols), "k1")
    k2 = te.reduce_axis((0, cols), "k2")
    S1 = te.compute((rows,), lambda i: te.sum(X[i, k1], axis=k1), name="S1")
    S2 = te.compute((rows,), lambda i: te.sum(X[i, k2] * X[i, k2], axis=k2), name="S2")
    inv = 1.0 / cols

    def f(i, j):
        mean = S1[i] * inv
        var = S2[i] * inv - mean * mean
        return (X[i, j] - mean) * te.rsqrt(var + eps) * G[j] + Bt[j]
    Y = te.compute((rows, cols), f, name="Y")
    s = te.create_schedule(Y.op)
    XS = s.cache_read(X, "shared", [S1, S2, Y])
    for R in (S1, S2):
        s[R].set_scope("local")
    i, j = s[Y].op.axis
    s[Y].bind(i, bx())
    jo, jt = s[Y].split(j, factor=threads)
    s[Y].bind(jt, tx())
    for R in (S1, S2):
        s[R].compute_at(s[Y], i)
        ko, kt = s[R].split(s[R].op.reduce_axis[0], factor=threads)
        s[R].bind(kt, tx())
    s[XS].compute_at(s[Y], i)
    _fetch(s, XS, (threads,), 1)
    return s, [X, G, Bt, Y]


def max_pool2d(N, C, H, W, size=2, stride=2, dtype="float32", threads=128):
    """NCHW max pooling: one thread per output element, the window reduced serially."""
    X = te.placeholder((N, C, H, W), dtype, name="X")
    OH, OW = (H - size) // stride + 1, (W - size) // stride + 1
    ry = te.reduce_axis((0, size), "ry")
    rx = te.reduce_axis((0, size), "rx")
    P = te.compute((N, C, OH, OW), lambda n, c, y, x: te.max(X[n, c, y * stride + ry, x * stride + rx],
                                                              axis=[ry, rx]), name="P")
    s = te.create_schedule(P.op)
    f = s[P].fuse(*s[P].op.axis)
    b, t = s[P].split(f, factor=threads)
    s[P].bind(b, bx())
    s[P].bind(t, tx())
    return s, [X, P]


def row_sum_rfactor(n, m, dtype="float32", threads_x=16, rows_per_block=32):
    """``B[i] = sum_k A[i, k]`` as in TVM's reduction tutorial: the reduction is split, the inner
    part factored out with ``rfactor`` and bound to threadIdx.x, rows bound to threadIdx.y."""
    A = te.placeholder((n, m), dtype, name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=threads_x)
    BF = s.rfactor(B, ki)
    xo, xi = s[B].split(s[B].op.axis[0], factor=rows_per_block)
    s[B].bind(xo, bx())
    s[B].bind(xi, ty())
    s[B].bind(s[B].op.reduce_axis[0], tx())
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    return s, [A, B]


def transpose(n, m, tile=32, rows_per_pass=8, dtype="float32", pad_rows=True):
    """``B[j, i] = A[i, j]`` through a shared ``tile × tile`` block: coalesced reads of A and
    coalesced writes of B. ``storage_align`` pads each shared row by one word so that reading a
    column of the tile hits 32 different banks."""
    A = te.placeholder((n, m), dtype, name="A")
    B = te.compute((m, n), lambda j, i: A[i, j], name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    j, i = s[B].op.axis
    bj, jj = s[B].split(j, factor=tile)
    bi, ii = s[B].split(i, factor=tile)
    s[B].reorder(bj, bi, jj, ii)
    jo, ji = s[B].split(jj, factor=rows_per_pass)
    s[B].reorder(bj, bi, jo, ji, ii)
    s[B].bind(bj, by())
    s[B].bind(bi, bx())
    s[B].bind(ji, ty())
    s[B].bind(ii, tx())
    s[AS].compute_at(s[B], bi)
    if pad_rows:
        s[AS].storage_align(s[AS].op.axis[0], tile, 1)
    r, c = s[AS].op.axis
    ro, ri = s[AS].split(r, factor=rows_per_pass)
    s[AS].bind(ri, ty())
    s[AS].bind(c, tx())
    return s, [A, B]
