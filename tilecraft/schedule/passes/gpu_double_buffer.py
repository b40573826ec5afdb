"""Double buffering of shared tiles (``s[AA].double_buffer()``): the next tile's fetch overlaps
the current tile's compute.

A double-buffered shared buffer gets two copies. When the loop it was attached in has the usual
shape — first the statements that fetch the tiles (global → shared, nothing else), then the
compute (which only reads shared memory) — the loop is software-pipelined through registers::

    for k in range(0, n):                     AS[0 + i] = A[tile 0]                      (prologue)
        AS[i] = A[tile k]                     for k in range(0, n):         # pipelined
        ... compute(AS) ...          →            if k + 1 < n: AS.stage[i] = A[tile k+1]   (loads in flight)
                                                  ... compute(AS[(k % 2) * size + ...]) ...
                                                  if k + 1 < n: AS[((k+1) % 2) * size + i] = AS.stage[i]
                                                  __syncthreads()

The global loads of the next tile are issued before the compute and stored to the other copy
after it, so their latency hides behind the arithmetic, and one barrier per iteration suffices
(it orders both this iteration's stores before the next reads and this iteration's reads before
the stores two iterations later). The loop is marked ``tc_pipelined``; ``insert_barriers`` leaves
its inside alone. Any other shape falls back to alternating copies (iteration ``k`` fills and reads
copy ``k % 2``; ``insert_barriers`` then knows that no barrier is needed before the next fetch).

A buffer of ``pipeline(n)`` (``KernelInfo.async_stages``) gets ``n`` copies instead, and where
every fetch of its loop is whole 4/8/16-byte vector copies of a global buffer (aligned: provable
multiples of the vector; a copy may be ``select(p, load, 0)`` with ``p`` the same for its lanes:
``tc_cp_async_zfill``, zeros where ``p`` fails), the loop becomes an ``n``-stage ``cp.async`` pipeline (``Stage.pipeline``'s
docstring has the loop): the prologue issues ``n - 1`` tiles, one commit group each; each
iteration waits until at most ``n - 2`` groups are in flight, synchronises the block once, issues
the tile ``n - 1`` ahead into the slot read last iteration, commits (an empty group past the
end), and computes on slot ``(k - min) % n``; one barrier follows the loop. Other fetches
alternate among the ``n`` copies with ordinary loads and stores.

A pipelined loop with the pragma ``fragment_prefetch`` whose compute is two or more k slices
(``allocate(fragments) { loads from shared; mmas }``, a tensor-core step) is rotated: the first
slice's fragments get new buffers allocated around the loop (``<name>.next``), loaded for tile
``min`` after the prologue's wait and barrier; each iteration issues and commits its tile, runs the
first slice's mmas, the middle slices, the last slice's loads, then the wait and barrier that land
tile ``k + 1``, loads its first slice, and runs the last slice's mmas (``docs/tensorcore.md`` has
the loop). With ``copy_spread`` too, the tile's copies (their loops unrolled) are dealt out before
the slices and committed just before the wait. Afterwards the loop reads shared memory only
between barriers that order it against the copies, as in the plain form.
"""
from __future__ import annotations

from ...ir.expr import AccessPtr, Broadcast, BufferLoad, BufferRegion, Const, Ramp, Select, const
from ...ir.functor import IRMutator, post_order_visit, replace_refs, substitute
from ...ir.simplify import simplify
from ...ir.stmt import (Allocate, Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse, SeqStmt,
                        seq)
from .gpu_kernels import KernelInfo
from .gpu_vthread import offset_index

from .gpu_barriers import PIPELINED

FRAGMENT_PREFETCH = "pragma_fragment_prefetch"     # s[CF].pragma(ko, "fragment_prefetch", 1)
COPY_SPREAD = "pragma_copy_spread"                 # with it: the step's copies dealt out among its k slices


class _Alternate(IRMutator):
    def __init__(self, remap: dict):
        self.remap = remap           # old buffer -> (new buffer, offset expr)

    def visit_BufferLoad(self, e):
        e = super().visit_BufferLoad(e)
        hit = self.remap.get(e.buffer)
        return e if hit is None else BufferLoad(hit[0], (offset_index(e.indices[0], hit[1]),), e.dtype)

    def visit_BufferStore(self, s):
        s = super().visit_BufferStore(s)
        hit = self.remap.get(s.buffer)
        return s if hit is None else BufferStore(hit[0], s.value, (offset_index(s.indices[0], hit[1]),))

    def visit_AccessPtr(self, e):            # a tensor intrinsic's pointer into the tile
        e = super().visit_AccessPtr(e)
        hit = self.remap.get(e.buffer)
        return e if hit is None else AccessPtr(hit[0], e.offset + hit[1], e.extent, e.access_mask)

    def visit_BufferRegion(self, e):         # its tile: one more leading dimension, the copy
        e = super().visit_BufferRegion(e)
        hit = self.remap.get(e.buffer)
        if hit is None:
            return e
        return BufferRegion(hit[0], (hit[1],) + e.begin, (const(1),) + e.extent, (const(1),) + e.strides)


def _shared_access(node):
    reads, writes = set(), set()

    def f(n):
        if isinstance(n, BufferLoad) and n.buffer.scope == "shared":
            reads.add(n.buffer)
        elif isinstance(n, BufferStore) and n.buffer.scope == "shared":
            writes.add(n.buffer)
        elif isinstance(n, AccessPtr) and n.buffer.scope == "shared":
            if n.access_mask & 1:
                reads.add(n.buffer)
            if n.access_mask & 2:
                writes.add(n.buffer)
    post_order_visit(node, f)
    return reads, writes


def _split_fetch(stmt, reg_name: str):
    """A fetch ``loops(if c: B[idx] = value)`` → (register buffer, ``loops(if c: R[j] = value)``,
    ``loops(if c: B[idx] = R[j])``), or None if it is not of that shape (constant extents only)."""
    loops = []
    s = stmt
    while isinstance(s, For):
        if not isinstance(s.extent, Const) or not (isinstance(s.min, Const) and s.min.value == 0):
            return None
        loops.append(s)
        s = s.body
    cond = None
    if isinstance(s, IfThenElse) and s.else_case is None:
        cond, s = s.condition, s.then_case
    if not isinstance(s, BufferStore):
        return None
    from ...ir import dtype as dt
    lanes = max(dt.lanes(s.value.dtype), dt.lanes(s.indices[0].dtype))
    count = 1
    lin = const(0)
    for lp in reversed(loops):
        lin = lin + lp.loop_var * (count * lanes)
        count *= int(lp.extent.value)
    reg = Buffer(reg_name, (Const(count * lanes, "int32"),), s.buffer.dtype, "local")
    j = Ramp(simplify(lin), const(1), lanes) if lanes > 1 else simplify(lin)
    load = BufferStore(reg, s.value, (j,))
    store = BufferStore(s.buffer, BufferLoad(reg, (j,), s.value.dtype), s.indices)

    def wrap(inner):
        if cond is not None:
            inner = IfThenElse(cond, inner)
        for lp in reversed(loops):
            inner = For(lp.loop_var, lp.min, lp.extent, ForKind.UNROLLED, inner, lp.thread_tag, lp.annotations)
        return inner
    return reg, wrap(load), wrap(store)


def _async_fetch(stmt):
    """A fetch ``loops(if c: B[ramp] = A[ramp])`` of whole 4-, 8- or 16-byte vectors from global
    memory → ``loops(if c: tc_cp_async(B + base, A + base, bytes))``, or None if it is not
    of that shape. A padded fetch, ``B[ramp] = select(p, A[ramp], 0)`` with one ``p`` for all
    lanes (an implicit-GEMM convolution's border), → ``tc_cp_async_zfill(B + base, A + base,
    bytes, p)``."""
    from ...ir import dtype as dt
    from ...ir.builtin import ASYNC_COPY_BYTES
    from ...ir.expr import Call
    from .gpu_vector_index import canonicalize_vector_indices, known_multiple
    loops = []
    s = canonicalize_vector_indices(stmt)
    while isinstance(s, For):
        loops.append(s)
        s = s.body
    cond = None
    if isinstance(s, IfThenElse) and s.else_case is None:
        cond, s = s.condition, s.then_case
    if not isinstance(s, BufferStore):
        return None
    src, dst, pred = s.value, s, None
    if isinstance(src, Select) and dt.lanes(src.condition.dtype) == 1 and _is_zero(src.false_value):
        pred, src = src.condition, src.true_value          # a padded fetch: zeros where pred fails
    if not isinstance(src, BufferLoad):
        return None
    if src.buffer.scope != "global" or src.buffer.dtype != dst.buffer.dtype:
        return None
    lanes = dt.lanes(src.dtype)
    nbytes = lanes * dt.bits(dst.buffer.dtype) // 8
    if nbytes not in ASYNC_COPY_BYTES:
        return None

    def base(i):
        if lanes == 1:
            return i if dt.lanes(i.dtype) == 1 else None
        if isinstance(i, Ramp) and isinstance(i.stride, Const) and i.stride.value == 1 and i.lanes == lanes \
                and known_multiple(i.base) % lanes == 0:     # cp.async needs aligned addresses
            return i.base
        return None
    b_src, b_dst = base(src.indices[0]), base(dst.indices[0])
    if b_src is None or b_dst is None:
        return None
    ptrs = (AccessPtr(dst.buffer, b_dst, const(lanes), 2), AccessPtr(src.buffer, b_src, const(lanes), 1), const(nbytes))
    inner = Evaluate(Call("tc_cp_async", ptrs, "handle") if pred is None else
                     Call("tc_cp_async_zfill", ptrs + (pred,), "handle"))
    if cond is not None:
        inner = IfThenElse(cond, inner)
    for lp in reversed(loops):
        kind = ForKind.UNROLLED if lp.kind is ForKind.VECTORIZED else lp.kind
        inner = For(lp.loop_var, lp.min, lp.extent, kind, inner, lp.thread_tag, lp.annotations)
    return inner


def _is_zero(e) -> bool:
    """``e`` is the constant 0 (or a broadcast of it)."""
    if isinstance(e, Broadcast):
        e = e.value
    return isinstance(e, Const) and e.value == 0


def _async_call(name, *args):
    from ...ir.expr import Call
    return Evaluate(Call(name, tuple(const(a) for a in args), "handle"))


class _Pipeline(IRMutator):
    def __init__(self, info: KernelInfo, remap: dict, loops: dict):
        self.info, self.remap, self.loops = info, remap, loops      # loop var -> {buffers}
        self.pipelined = set()

    def visit_For(self, s):
        s = super().visit_For(s)
        bufs = self.loops.get(s.loop_var)
        if not bufs:
            return s
        return self.pipeline(s, bufs) or s

    def pipeline(self, loop: For, bufs: set):
        items = list(loop.body.seq) if isinstance(loop.body, SeqStmt) else [loop.body]
        fetches = []
        while items:
            r, w = _shared_access(items[0])
            if r or not w or not w <= bufs:
                break
            fetches.append(items.pop(0))
        rest = seq(*items)
        if not fetches or rest is None:
            return None
        r, w = _shared_access(rest)
        if w:                               # the compute writes shared memory: keep it simple
            return None
        k = loop.loop_var
        rings = {self.remap[b][3] for b in bufs}           # 0: through registers, else cp.async stages
        if rings != {0}:
            if len(rings) != 1:
                return None                  # buffers of one loop with different rings: alternate
            return self.pipeline_async(loop, bufs, fetches, rest, rings.pop())
        stages = []
        for n, f in enumerate(fetches):
            got = _split_fetch(f, f"{_writes(f)}.stage{n}")
            if got is None:
                return None
            stages.append(got)
        nxt = {k: k + 1}
        more = simplify(k + 1 < loop.min + loop.extent)
        cur = _Alternate({b: (self.remap[b][0], (k % 2) * self.remap[b][2]) for b in bufs})
        ahead = _Alternate({b: (self.remap[b][0], ((k + 1) % 2) * self.remap[b][2]) for b in bufs})
        first = _Alternate({b: (self.remap[b][0], const(0)) for b in bufs})
        prologue = seq(*[first.visit_stmt(substitute(f, {k: loop.min})) for f in fetches])
        loads = seq(*[substitute(ld, nxt) for _, ld, _ in stages])
        stores = seq(*[ahead.visit_stmt(substitute(st, nxt)) for _, _, st in stages])
        body = seq(IfThenElse(more, loads), cur.visit_stmt(rest), IfThenElse(more, stores),
                   Evaluate(_sync()))
        for reg, _, _ in reversed(stages):
            body = Allocate(reg, body)
        new = For(k, loop.min, loop.extent, loop.kind, body, loop.thread_tag,
                  loop.annotations + ((PIPELINED, 1),))
        self.pipelined |= bufs
        return seq(prologue, new)

    def pipeline_async(self, loop: For, bufs: set, fetches: list, rest, n: int):
        """The loop as an ``n``-stage cp.async pipeline (``Stage.pipeline``'s docstring)."""
        copies = []
        for f in fetches:
            c = _async_fetch(f)
            if c is None:
                return None
            copies.append(c)
        k, lo, ext = loop.loop_var, loop.min, loop.extent

        def slot(x):
            return _Alternate({b: (self.remap[b][0], ((x - lo) % n) * self.remap[b][2]) for b in bufs})
        prologue = []
        for j in range(n - 1):
            fetch = seq(*[slot(lo + j).visit_stmt(substitute(c, {k: lo + j})) for c in copies])
            more = simplify(const(j) < ext)
            if not (isinstance(more, Const) and not more.value):
                prologue.append(fetch if isinstance(more, Const) else IfThenElse(more, fetch))
            prologue.append(_async_call("tc_cp_async_commit"))
        ahead = k + (n - 1)
        fetch = seq(*[slot(ahead).visit_stmt(substitute(c, {k: ahead})) for c in copies])
        wait = seq(_async_call("tc_cp_async_wait", n - 2), Evaluate(_sync()))
        issue = seq(IfThenElse(simplify(ahead < lo + ext), fetch), _async_call("tc_cp_async_commit"))
        rotated = loop.annotation(FRAGMENT_PREFETCH) and _rotate_slices(rest)
        if rotated:
            # the first slice's fragments of step k + 1 are loaded right after the barrier that
            # lands that step, before the last slice's mma of step k (module docstring)
            (allocs0, loads0, mma0), middle, (allocs1, loads1, mma1) = rotated
            nxt = IfThenElse(simplify(k + 1 < lo + ext), slot(k + 1).visit_stmt(substitute(loads0, {k: k + 1})))
            parts = loop.annotation(COPY_SPREAD) and _spread(fetch, len(middle) + 2)
            if parts:
                # the step's copies dealt out before the slices (the slot they fill is free from
                # the iteration's start), committed as one group just before the wait
                more = simplify(ahead < lo + ext)
                part = [IfThenElse(more, p) if p is not None else None for p in parts]
                last = _wrap(allocs1, seq(part[-1], loads1, _async_call("tc_cp_async_commit"), wait, nxt, mma1))
                body = seq(part[0], mma0, *[seq(part[j + 1], slot(k).visit_stmt(x)) for j, x in enumerate(middle)],
                           slot(k).visit_stmt(last))
            else:
                last = _wrap(allocs1, seq(loads1, wait, nxt, mma1))
                body = seq(issue, mma0, slot(k).visit_stmt(seq(*middle, last)))
            new = For(k, lo, ext, loop.kind, body, loop.thread_tag, loop.annotations + ((PIPELINED, 1),))
            first = seq(wait, IfThenElse(simplify(ext > 0), slot(lo).visit_stmt(substitute(loads0, {k: lo}))))
            self.pipelined |= bufs
            return _wrap(allocs0, seq(*prologue, first, new, Evaluate(_sync())))
        body = seq(wait, issue, slot(k).visit_stmt(rest))
        new = For(k, lo, ext, loop.kind, body, loop.thread_tag, loop.annotations + ((PIPELINED, 1),))
        self.pipelined |= bufs
        return seq(*prologue, new, Evaluate(_sync()))


def _wrap(allocs, body):
    for buf in reversed(allocs):
        body = Allocate(buf, body)
    return body


def _slice(stmt):
    """A k slice of a tensor-core step: ``allocate(fragments) { loads; mmas }`` with the loads
    (statements that read shared memory) first and the mmas (nothing shared) after → (fragment
    buffers, loads, mmas), or None."""
    allocs = []
    while isinstance(stmt, Allocate):
        allocs.append(stmt.buffer)
        stmt = stmt.body
    items = list(stmt.seq) if isinstance(stmt, SeqStmt) else [stmt]
    loads = []
    while items and _shared_access(items[0])[0]:
        loads.append(items.pop(0))
    if not allocs or not loads or not items or any(_shared_access(x)[0] or _shared_access(x)[1] for x in items):
        return None
    return allocs, seq(*loads), seq(*items)


def _rotate_slices(rest):
    """The compute of a step as (first slice, the slices between, last slice), the first
    slice's fragments renamed (they live across the loop's iterations), or None when the step is
    not two or more slices of the ``_slice`` shape."""
    items = list(rest.seq) if isinstance(rest, SeqStmt) else [rest]
    if len(items) < 2:
        return None
    first, last = _slice(items[0]), _slice(items[-1])
    if first is None or last is None:
        return None
    import dataclasses
    allocs, loads, mma = first
    fresh = {b: dataclasses.replace(b, name=b.name + ".next", data=None) for b in allocs}
    data = {b.data: nb.data for b, nb in fresh.items()}
    loads, mma = (substitute(replace_refs(x, fresh), data) for x in (loads, mma))
    return (list(fresh.values()), loads, mma), items[1:-1], last


def _spread(fetch, parts: int, most: int = 256):
    """The copy statements of ``fetch`` (its loops of constant extent unrolled) dealt into
    ``parts`` sequences of about equal length, or None when there are more than ``most``."""
    out = []

    def flat(s):
        if isinstance(s, SeqStmt):
            return all(flat(x) for x in s.seq)
        if isinstance(s, For):
            if not (isinstance(s.extent, Const) and isinstance(s.min, Const)):
                return False
            return all(flat(substitute(s.body, {s.loop_var: const(s.min.value + i, s.loop_var.dtype)}))
                       for i in range(int(s.extent.value)))
        out.append(s)
        return len(out) <= most
    if not flat(fetch):
        return None
    cut = [len(out) * j // parts for j in range(parts + 1)]
    return [seq(*out[a:b]) for a, b in zip(cut, cut[1:])]


def _writes(stmt) -> str:
    out = []
    post_order_visit(stmt, lambda n: out.append(n.buffer.name) if isinstance(n, BufferStore) else None)
    return out[0]


def _sync():
    from .gpu_barriers import SYNC
    from ...ir.expr import Call
    return Call(SYNC, (), "int32")


def double_buffer(stmt, info: KernelInfo):
    """Give each double-buffered shared buffer two copies, and pipeline its loop where the loop
    has the fetch-then-compute shape (see the module docstring)."""
    if not info.double_buffered:
        return stmt
    remap, loops = {}, {}
    for buf, loop_var in info.double_buffered.items():
        size = int(buf.shape[0].value)
        ring = info.async_stages.get(buf, 0)
        copies = ring or 2
        nb = Buffer(buf.name, (Const(copies * size, "int32"),), buf.dtype, "shared")
        remap[buf] = (nb, (loop_var % copies) * size, size, ring)
        loops.setdefault(loop_var, set()).add(buf)
    p = _Pipeline(info, remap, loops)
    stmt = p.visit_stmt(stmt)
    rest = {b: (v[0], v[1]) for b, v in remap.items() if b not in p.pipelined}
    stmt = _Alternate(rest).visit_stmt(stmt)
    info.shared = [remap[b][0] if b in remap else b for b in info.shared]
    info.double_buffered = {remap[b][0]: lv for b, lv in info.double_buffered.items() if b not in p.pipelined}
    info.async_stages = {}
    return stmt
