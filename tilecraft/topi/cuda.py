"""TVM's ``topi.cuda`` names: GPU schedules of ``topi`` computes, called as a TVM script calls them.

Each ``schedule_*`` takes the outputs (a tensor or a list of tensors) of a ``topi`` compute and
its epilogue, under ``with tvm.target.Target("cuda"):``, and returns a schedule for
``build(..., target="cuda")``. As in TVM, the elementwise stages between the outputs and the
anchor (the reduction, pooling, convolution, dense, batch_matmul) are inlined first; what the
anchor becomes is tilecraft's own schedule of it:

===============================  ==============================================================
``schedule_injective``           one thread per output element (axes fused, ``max_num_threads``
                                 per block; ``schedule_elemwise`` / ``schedule_broadcast`` too)
``schedule_reduce``              TVM's: the reduce axes fused and split over ``threadIdx.x``
                                 (a cross-thread reduction); 32 rows per block on
                                 ``threadIdx.y``, or all ``max_num_threads`` on one reduction
``schedule_softmax``             a block per row, the row's max and sum cross-thread reductions
                                 (as ``cuda_schedules.softmax``)
``schedule_pool`` /              one thread per output, the window (or whole image) reduced in
``schedule_adaptive_pool``       registers
``schedule_conv2d_nchw``         ``cuda_schedules.conv2d_nchw_block`` (the ``topi/conv2d_nchw.cuda``
                                 template's schedule) with the template's fallback tiles, or the
                                 tuned ones that ``apply_history_best`` gives for the workload
``schedule_dense_small_batch``   a block per output, the dot product split over ``threadIdx.x``
``schedule_dense_large_batch`` / a 16 x 16 tile of outputs per block, one per thread (the batch
``schedule_batch_matmul``        on ``blockIdx.z``)
===============================  ==============================================================

An epilogue that a reduction cannot be computed inside (a cross-thread reduction writes once per
block row, TVM guards its epilogue with a store predicate) is its own kernel, one thread per
element. The computes TVM's scripts pair with these: ``conv2d_nchw(data, kernel, strides,
padding, dilation, out_dtype)``, ``dense_small_batch`` / ``dense_large_batch(data, weight,
bias=None, out_dtype=None)``, ``batch_matmul(x, y, ...)``: ``topi.nn``'s, with TVM's argument order.

>>> with tvm.target.Target("cuda"):
...     conv = topi.cuda.conv2d_nchw(data, kernel, 1, 2, 1)
...     out = topi.nn.relu(conv)
...     s = topi.cuda.schedule_conv2d_nchw([out])
>>> f = tvm.build(s, [data, kernel, out], "cuda")
"""
from __future__ import annotations

from tilecraft import te
from tilecraft.te.tensor import ComputeOp, PlaceholderOp

from . import nn
from .generic import _outputs

__all__ = ["schedule_injective", "schedule_elemwise", "schedule_broadcast", "schedule_reduce",
           "schedule_softmax", "schedule_pool", "schedule_adaptive_pool", "schedule_conv2d_nchw",
           "schedule_dense_small_batch", "schedule_dense_large_batch", "schedule_batch_matmul",
           "conv2d_nchw", "dense_small_batch", "dense_large_batch", "batch_matmul"]

MAX_NUM_THREADS = 1024       # TVM's cuda target's max_num_threads


def _max_threads() -> int:
    """The current target's ``max_num_threads`` (``-max_num_threads=``), else CUDA's 1024."""
    from tilecraft.target import Target
    t = Target.current()
    return int(t.attrs.get("max_num_threads", MAX_NUM_THREADS)) if t is not None else MAX_NUM_THREADS


def _ops(outs) -> list:
    """The compute ops reachable from ``outs``, producers first."""
    seen, order = set(), []

    def visit(op):
        if op in seen or isinstance(op, PlaceholderOp):
            return
        seen.add(op)
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)
    for t in outs:
        visit(t.op)
    return order


def _injective(op) -> bool:
    return isinstance(op, ComputeOp) and not op.reduce_axis


def _inline_injective(s, outs, keep=()) -> list:
    """Inline every elementwise / broadcast stage that is not an output (TVM's traverse_inline);
    returns the compute ops that remain."""
    out_ops = {t.op for t in outs}
    left = []
    for op in _ops(outs):
        if _injective(op) and op not in out_ops and op not in keep:
            s[op].compute_inline()
        else:
            left.append(op)
    return left


def _thread_per_element(s, t, threads: int):
    """``t``'s axes fused, ``threads`` per block: returns the thread axis."""
    f = s[t].fuse(*s[t].op.axis)
    b, th = s[t].split(f, factor=threads)
    s[t].bind(b, te.thread_axis("blockIdx.x"))
    s[t].bind(th, te.thread_axis("threadIdx.x"))
    return th


def _new_schedule(outs):
    outs = _outputs(outs)
    return outs, te.create_schedule([t.op for t in outs])


def schedule_injective(outs):
    """TVM's ``topi.cuda.schedule_injective``: one thread per element of each output, the
    elementwise stages before them inlined (any other stage: one thread per element too).

    >>> with tvm.target.Target("cuda"):
    ...     s = topi.cuda.schedule_injective(C)
    """
    outs, s = _new_schedule(outs)
    threads = _max_threads()
    for op in _inline_injective(s, outs):
        _thread_per_element(s, op.output(0), threads)
    return s


schedule_elemwise = schedule_broadcast = schedule_injective


def _reduce_rows(s, data_out, threads_all: int) -> None:
    """TVM's reduction schedule of ``data_out``: its reduce axes fused and split, the inner part
    reduced across ``threadIdx.x`` (each thread accumulates its share, then the block combines:
    what TVM's ``rfactor`` of the split does); with data axes, 32 outputs per block on
    ``threadIdx.y``, else one block of ``threads_all`` threads."""
    op = data_out.op
    all_reduce = not op.axis
    num_thread = threads_all if all_reduce else 32
    fused = s[data_out].fuse(*op.reduce_axis)
    _, tx = s[data_out].split(fused, factor=num_thread)
    s[data_out].bind(tx, te.thread_axis("threadIdx.x"))
    if all_reduce:               # one block: its loop (TVM's singleton fuse) holds the kernel
        s[data_out].bind(s[data_out].fuse(), te.thread_axis("blockIdx.x"))
    else:
        f = s[data_out].fuse(*s[data_out].op.axis)
        bx, ty = s[data_out].split(f, factor=num_thread)
        s[data_out].bind(ty, te.thread_axis("threadIdx.y"))
        s[data_out].bind(bx, te.thread_axis("blockIdx.x"))


def schedule_reduce(outs):
    """TVM's ``topi.cuda.schedule_reduce``: each reduction (``topi.sum``, ``max``, ``mean``, a
    ``te.sum`` compute) reduced across the threads of a block (see :func:`_reduce_rows`); the
    elementwise stages feeding it are inlined, those after it run one thread per element.

    >>> g = topi.sum(f)
    >>> with tvm.target.cuda():
    ...     s = topi.cuda.schedule_reduce(g)
    """
    outs, s = _new_schedule(outs)
    threads = _max_threads()
    for op in _inline_injective(s, outs):
        if op.reduce_axis:
            _reduce_rows(s, op.output(0), threads)
        else:
            _thread_per_element(s, op.output(0), threads)
    return s


def schedule_softmax(outs, threads: int = 64):
    """TVM's ``topi.cuda.schedule_softmax`` of ``topi.nn.softmax`` (over the last axis): a
    block per row; the row's maximum and sum of exponentials are cross-thread reductions over
    ``threadIdx.x`` computed in the block, the outputs written ``threads`` at a time.

    >>> with tvm.target.Target("cuda"):
    ...     s = topi.cuda.schedule_softmax(topi.nn.softmax(X))
    """
    outs, s = _new_schedule(outs)
    out = outs[0]
    left = _inline_injective(s, outs)
    reductions = [op for op in left if op.reduce_axis]
    if len(outs) != 1 or len(reductions) != 2 or not all(len(r.reduce_axis) == 1 for r in reductions):
        raise ValueError("topi.cuda.schedule_softmax: expected the output of topi.nn.softmax (a max and a sum "
                         f"reduction over one axis), got the stages {[op.name for op in left]}")
    if any(getattr(r.output(0).shape[-1], "value", None) != 1 for r in reductions if r.output(0).shape):
        raise ValueError("topi.cuda.schedule_softmax: only a softmax over the last axis is scheduled here "
                         "(topi.nn.softmax(x, axis=-1)); use topi.cuda.schedule_injective's one thread per element "
                         "or a te schedule for another axis")
    *rows, col = s[out].op.axis
    row = s[out].fuse(*rows)
    s[out].bind(row, te.thread_axis("blockIdx.x"))
    _, tx = s[out].split(col, factor=threads)
    s[out].bind(tx, te.thread_axis("threadIdx.x"))
    for r in reductions:
        s[r].set_scope("local")
        s[r].compute_at(s[out], row)
        _, kt = s[r].split(r.reduce_axis[0], factor=threads)
        s[r].bind(kt, te.thread_axis("threadIdx.x"))
    return s


def _per_output_thread(s, outs) -> None:
    """One thread per element of each output; a reduction of the output's shape that feeds it
    (a pool's sum before the division) is computed in that thread's registers."""
    threads = _max_threads()
    out_ops = {t.op for t in outs}
    left = _inline_injective(s, outs)
    thread_of = {}
    for t in outs:
        thread_of[t.op] = _thread_per_element(s, t, threads)
    for op in left:
        if op in out_ops:
            continue
        consumers = [o for o in left if o is not op and any(x.op is op for x in o.input_tensors)]
        target = consumers[0] if len(consumers) == 1 else None
        if target in out_ops and len(op.axis) == len(target.axis):
            s[op].set_scope("local")
            s[op].compute_at(s[target], thread_of[target])
        else:
            _thread_per_element(s, op.output(0), threads)


def schedule_pool(outs, layout: str = "NCHW"):
    """TVM's ``topi.cuda.schedule_pool`` of ``topi.nn.pool2d``: the padding inlined, one thread
    per output element reducing its window.

    >>> with tvm.target.Target("cuda"):
    ...     s = topi.cuda.schedule_pool(P, "NCHW")
    """
    outs, s = _new_schedule(outs)
    _per_output_thread(s, outs)
    return s


def schedule_adaptive_pool(outs, layout: str = "NCHW"):
    """TVM's ``topi.cuda.schedule_adaptive_pool`` (of ``topi.nn.global_pool`` here): one thread
    per output element reducing its region.

    >>> with tvm.target.Target("cuda"):
    ...     s = topi.cuda.schedule_adaptive_pool(topi.nn.global_pool(X, "avg"))
    """
    outs, s = _new_schedule(outs)
    _per_output_thread(s, outs)
    return s


def _conv_op(ops):
    for op in ops:
        if op.reduce_axis and (op.tag == "conv2d_nchw" or op.name == "conv2d") and len(op.axis) == 4 \
                and len(op.reduce_axis) == 3:
            return op
    return None


def _conv_tiles(conv, data, kernel):
    """The ``topi/conv2d_nchw.cuda`` template's config for this convolution: the one the dispatch
    context gives (a log's, under ``apply_history_best``) when the workload is one the template
    has (symmetric padding, equal strides, float32, no groups or dilation), else its fallback."""
    from tilecraft.topi.conv2d_cuda import conv_tiles_ok, fallback_tiles
    from tilecraft.topi.utils import get_const_tuple
    N, CI, H, W = get_const_tuple(data.shape)
    CO, CIg, KH, KW = get_const_tuple(kernel.shape)
    _, _, OH, OW = get_const_tuple(conv.output(0).shape)
    stride = conv.attrs.get("stride")
    pad = conv.attrs.get("pad")
    if stride is not None and pad is not None and CIg == CI and conv.attrs.get("dilation") == 1:
        from tilecraft.autotune.dispatch import DispatchContext
        from tilecraft.target import Target
        wl = ("topi/conv2d_nchw.cuda", N, CI, H, W, CO, KH, KW, stride, pad, conv.output(0).dtype)
        cfg = DispatchContext.current().query(Target.current(), wl)
        if cfg is not None and not getattr(cfg, "is_fallback", True):
            try:
                t = {k: cfg[k].val for k in ("tile_co", "tile_y", "tile_x", "co_per_thread", "ci_tile",
                                             "x_per_thread")}
            except (KeyError, AttributeError):
                t = None
            if t and conv_tiles_ok(CI, OH, OW, CO, KH, KW, t["tile_co"], t["tile_y"], t["tile_x"],
                                   t["co_per_thread"], t["ci_tile"], t["x_per_thread"], stride):
                return dict(t, n_per_block=1)
    t = fallback_tiles(CIg, OH, OW, CO, KH, KW, stride or 1)
    return dict(t, x_per_thread=1, n_per_block=1)


def schedule_conv2d_nchw(outs):
    """TVM's ``topi.cuda.schedule_conv2d_nchw`` of ``topi.cuda.conv2d_nchw`` /
    ``topi.nn.conv2d_nchw`` and its elementwise epilogue (bias, ReLU): the direct convolution of
    the ``topi/conv2d_nchw.cuda`` template (``cuda_schedules.conv2d_nchw_block``): a block per
    tile of channels x pixels, the padded input and the weights fetched into shared memory, the
    sums in registers; tiles from a tuned config when one applies, else the template's fallback.

    >>> with tvm.target.Target("cuda"):
    ...     s = topi.cuda.schedule_conv2d_nchw([topi.nn.relu(topi.cuda.conv2d_nchw(x, w, 1, 1, 1))])
    """
    from .cuda_schedules import conv2d_nchw_block
    outs, s = _new_schedule(outs)
    ops = _ops(outs)
    conv = _conv_op(ops)
    if conv is None:
        raise ValueError("topi.cuda.schedule_conv2d_nchw: no conv2d_nchw stage (topi.nn.conv2d_nchw or "
                         f"topi.cuda.conv2d_nchw) among {[op.name for op in ops]}")
    padded, kernel = conv.input_tensors[:2]
    data = padded.op.input_tensors[0] if isinstance(padded.op, ComputeOp) else padded
    tiles = _conv_tiles(conv, data, kernel)
    left = _inline_injective(s, outs, keep=(padded.op,))
    if isinstance(padded.op, ComputeOp):
        s[padded].compute_inline()
    PS = s.cache_read(padded, "shared", [conv.output(0)])
    WS = s.cache_read(kernel, "shared", [conv.output(0)])
    WL = s.cache_read(WS, "local", [conv.output(0)])
    out = outs[0]
    if out.op is conv or len(outs) != 1 or len(out.op.axis) != 4:
        OL, bound = s.cache_write(conv.output(0), "local"), conv.output(0)
    else:                    # the epilogue writes; the convolution accumulates in its registers
        s[conv].set_scope("local")
        OL, bound = conv.output(0), out
    conv2d_nchw_block(s, bound, OL, PS, WS, WL, co_per_thread=tiles["co_per_thread"], **{
        k: tiles[k] for k in ("tile_co", "tile_y", "tile_x", "x_per_thread", "n_per_block", "ci_tile")})
    threads = _max_threads()
    for op in left:
        if op is not conv and op is not bound.op:
            _thread_per_element(s, op.output(0), threads)
    return s


def schedule_dense_small_batch(outs, threads: int = 64):
    """TVM's ``topi.cuda.schedule_dense_small_batch`` of ``topi.nn.dense``: a block per output
    (``blockIdx.y`` the row, ``blockIdx.x`` the column), the dot product split over
    ``threads`` threads (``rfactor`` + cross-thread reduction); an epilogue (bias, ReLU) runs one
    thread per element.

    >>> with tvm.target.Target("cuda"):
    ...     s = topi.cuda.schedule_dense_small_batch(topi.cuda.dense_small_batch(X, W))
    """
    outs, s = _new_schedule(outs)
    for op in _inline_injective(s, outs):
        if not op.reduce_axis or len(op.axis) != 2:
            _thread_per_element(s, op.output(0), _max_threads())
            continue
        C = op.output(0)
        _, ki = s[C].split(op.reduce_axis[0], factor=threads)
        rf = s.rfactor(C, ki)
        i, j = s[C].op.axis
        s[C].bind(i, te.thread_axis("blockIdx.y"))
        s[C].bind(j, te.thread_axis("blockIdx.x"))
        tx = s[C].op.reduce_axis[0]
        s[C].bind(tx, te.thread_axis("threadIdx.x"))
        s[rf].compute_at(s[C], tx)
    return s


def _tile_per_thread(s, outs, tile: int = 16) -> None:
    """Matmul-like outputs (``[..., M, N]``): a ``tile x tile`` block of outputs per thread block,
    one per thread, leading (batch) axes on ``blockIdx.z``; the reduction that feeds an epilogue
    is computed in the thread's registers."""
    out_ops = {t.op for t in outs}
    left = _inline_injective(s, outs)
    attached = set()
    for t in outs:
        *lead, i, j = s[t].op.axis
        bi, ti = s[t].split(i, factor=tile)
        bj, tj = s[t].split(j, factor=tile)
        s[t].reorder(*lead, bi, bj, ti, tj)
        if lead:
            s[t].bind(s[t].fuse(*lead), te.thread_axis("blockIdx.z"))
        s[t].bind(bi, te.thread_axis("blockIdx.y"))
        s[t].bind(bj, te.thread_axis("blockIdx.x"))
        s[t].bind(ti, te.thread_axis("threadIdx.y"))
        s[t].bind(tj, te.thread_axis("threadIdx.x"))
        for op in left:
            if op not in out_ops and any(x.op is op for x in t.op.input_tensors) and len(op.axis) == len(t.op.axis):
                s[op].set_scope("local")
                s[op].compute_at(s[t], tj)
                attached.add(op)
    for op in left:
        if op not in out_ops and op not in attached:
            _thread_per_element(s, op.output(0), _max_threads())


def schedule_batch_matmul(outs):
    """TVM's ``topi.cuda.schedule_batch_matmul`` of ``topi.nn.batch_matmul``: 16 x 16 outputs
    per block, one per thread, the batch on ``blockIdx.z``, the sum in registers.

    >>> with tvm.target.Target("cuda"):
    ...     s = topi.cuda.schedule_batch_matmul(topi.cuda.batch_matmul(X, Y))
    """
    outs, s = _new_schedule(outs)
    _tile_per_thread(s, outs)
    return s


def schedule_dense_large_batch(outs):
    """TVM's ``topi.cuda.schedule_dense_large_batch``: as :func:`schedule_batch_matmul`, one
    output per thread in 16 x 16 blocks."""
    outs, s = _new_schedule(outs)
    _tile_per_thread(s, outs)
    return s


def conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype="float32"):
    """TVM's ``topi.cuda.conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype)``: the
    convolution of ``topi.nn.conv2d_nchw`` (the AutoTVM ``cfg`` of TVM's template is the dispatch
    context's, read by :func:`schedule_conv2d_nchw`)."""
    out = nn.conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=out_dtype)
    return _with_attrs(out, strides, padding, dilation, kernel)


def _with_attrs(out, strides, padding, dilation, kernel):
    """Record the workload's scalars on the op (the tuned-config lookup reads them) when they are
    the template's kind: equal strides, symmetric padding, no dilation."""
    from tilecraft.topi.utils import get_const_tuple
    sh, sw = nn._pair(strides, "the stride")
    dh, dw = nn._pair(dilation, "the dilation")
    _, _, KH, KW = get_const_tuple(kernel.shape)
    pads = nn.pad_tuple(padding, (KH, KW))
    if sh == sw and len(set(pads)) == 1 and dh == dw == 1:
        out.op.attrs.update(stride=sh, pad=pads[0], dilation=1)
    return out


def dense_small_batch(data, weight, bias=None, out_dtype=None):
    """TVM's ``topi.cuda.dense_small_batch``: ``data @ weight.T`` (+ ``bias``)."""
    return _dense(data, weight, bias, out_dtype)


def dense_large_batch(data, weight, bias=None, out_dtype=None):
    """TVM's ``topi.cuda.dense_large_batch``: ``data @ weight.T`` (+ ``bias``)."""
    return _dense(data, weight, bias, out_dtype)


def _dense(data, weight, bias, out_dtype):
    if out_dtype not in (None, data.dtype):
        raise ValueError(f"topi.cuda.dense: out_dtype {out_dtype!r} other than the data's {data.dtype!r} "
                         "is not supported")
    out = nn.dense(data, weight)
    if bias is None:
        return out
    return te.compute(out.shape, lambda i, j: out[i, j] + bias[j], name="T_add", tag="broadcast")


def batch_matmul(x, y, out_shape=None, out_dtype=None, transpose_a=False, transpose_b=True):
    """TVM's ``topi.cuda.batch_matmul(x, y, ...)``: ``topi.nn.batch_matmul``."""
    return nn.batch_matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b)
