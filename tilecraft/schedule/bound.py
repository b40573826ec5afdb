"""Bound inference: which region of each stage must be computed, and how its loops map to it.

Afterwards every non-inlined compute stage has a :class:`StageInfo`:

* ``root_min[d]``/``root_extent[d]``: the region of output dimension ``d`` the stage computes.
  Root stages compute their whole shape. A stage attached with ``compute_at(P, ax)`` computes
  exactly the union of what its consumers read during one iteration of ``ax``: loops enclosing
  ``ax`` are fixed, loops inside it range over their extents (for ``shared`` scope, GPU thread
  indices range too, since the whole block shares the buffer).
* ``extent[leaf]``: the extent of each loop (all loops start at 0), and ``value[iv]``: each axis
  as an expression of the loop variables (``i = i.outer * 64 + i.inner``).
* ``conditions``: guards for split tails and for points outside the tensor's own domain.
* ``ragged``: for each ragged reduce axis (bounds that read tensors or outer axes), its symbols
  ``j.min``/``j.extent`` and their values in loop variables (``ragged.py``); the axis's extent
  and value are written in the symbols, which ``schedule_ops`` binds once per outer iteration.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import dtype as dt
from ..ir.expr import (BinOp, Binary, Cast, Const, Expr, IterKind, IterVar, Select, TensorLoad,
                       Unary, UnOp, Var, binary, const, convert, max_expr, min_expr)
from ..ir.functor import collect_vars, post_order_visit, substitute
from ..ir.simplify import simplify
from ..te.extern import ExternOp
from ..te.scan import ScanOp
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor
from .ragged import new_bounds, with_values


@dataclass
class StageInfo:
    stage: object
    body: tuple                       # the op's body with inlined producers substituted
    root_min: list = field(default_factory=list)
    root_extent: list = field(default_factory=list)
    extent: dict = field(default_factory=dict)      # IterVar -> Expr (leaf and intermediate)
    value: dict = field(default_factory=dict)       # IterVar -> Expr in loop vars (offset from min)
    conditions: list = field(default_factory=list)
    ragged: dict = field(default_factory=dict)      # ragged reduce IterVar -> RaggedBound

    def root_value(self, iv: IterVar, d: int | None = None) -> Expr:
        """The absolute coordinate of a root axis."""
        v = self.value[iv]
        if d is None:
            rb = self.ragged.get(iv)
            if rb is not None and rb.min_var is not None:
                return v + rb.min_var
            return v if _is_zero(iv.dom.min) else v + iv.dom.min
        return v if _is_zero(self.root_min[d]) else self.root_min[d] + v


def _is_zero(e) -> bool:
    return isinstance(e, Const) and e.value == 0


def const_int(e):
    e = simplify(e) if not isinstance(e, Const) else e
    return e.value if isinstance(e, Const) and dt.is_int(e.dtype) else None


# ---------------------------------------------------------------------------------------------
# Interval arithmetic over symbolic bounds

class Interval:
    """Evaluates ``[lo, hi]`` (inclusive, symbolic) of integer expressions when some variables
    range over intervals. ``relax(v)`` gives a variable's ``(lo, hi)`` or None if it is fixed."""

    def __init__(self, relax):
        self.relax = relax
        self.memo: dict = {}

    def __call__(self, e: Expr):
        key = id(e)
        r = self.memo.get(key)
        if r is None:
            r = self.memo[key] = (self._eval(e), e)
        return r[0]

    def _eval(self, e):
        t = type(e)
        if t is Const:
            return (e, e)
        if isinstance(e, Var):
            r = self.relax(e)
            if r is None:
                return (e, e)
            lo, hi = self(r[0]), self(r[1])
            if lo is None or hi is None:
                return None
            return (lo[0], hi[1])
        if t is Binary:
            op = e.op
            a = self(e.a)
            if a is None:
                return None
            b = self(e.b)
            if b is None:
                return None
            if a[0] is e.a and a[1] is e.a and b[0] is e.b and b[1] is e.b:
                return (e, e)          # nothing relaxed below: a point (keeps fused indices exact)
            if op is BinOp.ADD:
                return (a[0] + b[0], a[1] + b[1])
            if op is BinOp.SUB:
                return (a[0] - b[1], a[1] - b[0])
            # both sides single points (possibly after relaxing): the result is that point, built
            # from the relaxed operands, never from ``e`` (which still holds relaxed variables)
            points = a[0] is a[1] and b[0] is b[1]
            if op is BinOp.MUL:
                c = _const_point(b)
                x = a
                if c is None:
                    c, x = _const_point(a), b
                if c is None:
                    if points:
                        p = binary(op, a[0], b[0])
                        return (p, p)
                    return None
                return (x[0] * c, x[1] * c) if c >= 0 else (x[1] * c, x[0] * c)
            if op is BinOp.FLOORDIV or op is BinOp.TRUNCDIV:
                c = _const_point(b)
                if c is None or c <= 0:
                    if points:
                        p = binary(op, a[0], b[0])
                        return (p, p)
                    return None
                return (binary(op, a[0], c), binary(op, a[1], c))
            if op is BinOp.FLOORMOD:
                c = _const_point(b)
                if points:
                    p = binary(op, a[0], b[0])
                    return (p, p)
                if c is None or c <= 0:
                    return None
                return (const(0, e.dtype), const(c - 1, e.dtype))
            if op is BinOp.MIN:
                return (min_expr(a[0], b[0]), min_expr(a[1], b[1]))
            if op is BinOp.MAX:
                return (max_expr(a[0], b[0]), max_expr(a[1], b[1]))
            return None
        if t is Unary and e.op is UnOp.NEG:
            a = self(e.a)
            return None if a is None else (-a[1], -a[0])
        if t is Cast and dt.is_int(e.dtype):
            a = self(e.value)
            return None if a is None else (Cast(e.dtype, a[0]), Cast(e.dtype, a[1]))
        if t is Select:
            a, b = self(e.true_value), self(e.false_value)
            if a is None or b is None:
                return None
            return (min_expr(a[0], b[0]), max_expr(a[1], b[1]))
        return None   # loads (gathers), calls: unknown


def _const_point(iv):
    lo, hi = iv
    if isinstance(lo, Const) and lo is hi or (isinstance(lo, Const) and isinstance(hi, Const) and lo.value == hi.value):
        return lo.value
    return None


def union_min(a: Expr, b: Expr) -> Expr:
    d = simplify(a - b)
    if isinstance(d, Const):
        return a if d.value <= 0 else b
    return min_expr(a, b)


def union_max(a: Expr, b: Expr) -> Expr:
    d = simplify(a - b)
    if isinstance(d, Const):
        return a if d.value >= 0 else b
    return max_expr(a, b)


# ---------------------------------------------------------------------------------------------

def leaf_values(info: StageInfo, stage) -> None:
    """Fill ``extent``, ``value`` and tail ``conditions`` from the root extents and relations."""
    from .schedule import Singleton, Split
    ext = info.extent
    own = tuple(getattr(stage.op, "root_iter_vars", ()))       # te.scan's loop over its steps
    root_axes = list(stage.op.axis) + list(stage.op.reduce_axis) + list(own)
    for d, iv in enumerate(stage.op.axis):
        ext[iv] = info.root_extent[d]
    info.ragged = new_bounds(stage.op)
    for iv in stage.op.reduce_axis:
        rb = info.ragged.get(iv)
        ext[iv] = iv.dom.extent if rb is None else rb.extent_var
    for iv in own:
        ext[iv] = iv.dom.extent
    tails = []
    for rel in stage.relations:
        if isinstance(rel, Split):
            E = ext[rel.parent]
            if rel.factor is not None:
                f = rel.factor
                ext[rel.inner] = f
                ext[rel.outer] = simplify((E + f - 1) // f)
                fo, fi = ext[rel.outer], f
            else:
                n = rel.nparts
                ext[rel.outer] = n
                ext[rel.inner] = simplify((E + n - 1) // n)
                fo, fi = n, ext[rel.inner]
            covered = const_int(fo * fi - E)
            if covered != 0:
                tails.append((rel.parent, E))
        elif isinstance(rel, Singleton):
            ext[rel.iv] = const(1)
        else:
            ext[rel.fused] = simplify(ext[rel.outer] * ext[rel.inner])
    val = info.value
    for iv in stage.leaf_iter_vars:
        val[iv] = iv.var
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            val[rel.parent] = val[rel.outer] * ext[rel.inner] + val[rel.inner]
        elif not isinstance(rel, Singleton):
            fused = val[rel.fused]
            val[rel.outer] = fused // ext[rel.inner]
            val[rel.inner] = fused % ext[rel.inner]
    for iv in root_axes:
        if iv not in val:
            raise AssertionError(f"axis {iv} of stage {stage.name} has no value")
    for parent, E in tails:
        info.conditions.append(val[parent] < E)
    if info.ragged:
        axis_values = {iv.var: info.root_value(iv, d) for d, iv in enumerate(stage.op.axis)}
        info.ragged = {iv: with_values(rb, axis_values) for iv, rb in info.ragged.items()}


def infer_bounds(sch, bodies: dict, consumers: dict, loop_extent: dict, args=frozenset()) -> dict:
    """Compute a StageInfo for every compute stage that is not inlined.

    ``bodies`` maps stage → its body after inlining, ``consumers`` maps stage → stages reading
    it. ``loop_extent`` is filled with every loop variable's extent (used to relax loops).
    ``args`` are the tensors passed as arguments: an attached stage among them must still
    write every element (its consumers must read all of it).
    """
    from .schedule import ScheduleError
    infos: dict = {}
    scan_body = {o for st in sch.stages if isinstance(st.op, ScanOp) for o in st.op.body_ops}
    for st in reversed(sch.stages):
        if isinstance(st.op, PlaceholderOp) or st.attach_type == "inline":
            continue
        info = StageInfo(st, bodies[st])
        op = st.op
        if isinstance(op, ExternOp):
            if st.attach_type == "scope":
                raise ScheduleError(f"compute_at of the extern stage '{st.name}': it has no loops of its "
                                    f"own to place; it runs at the root")
            # a hybrid script's outermost loops are its axes (HybridOp.axis); te.extern has none
            info.root_min, info.root_extent = [iv.dom.min for iv in op.axis], [iv.dom.extent for iv in op.axis]
        elif isinstance(op, ScanOp):
            info.root_min, info.root_extent = [], []     # its outputs are whole buffers (scan_buffers)
        elif st.attach_type == "scope" and not st.is_output:
            _check_attach(st, consumers[st])
            mins, exts = _region(st, consumers[st], infos, loop_extent)
            if any(t in args for t in op.outputs):
                _check_covered(st, consumers[st], infos, loop_extent)
            info.root_min, info.root_extent = mins, exts
        else:
            info.root_min = [iv.dom.min for iv in op.axis]
            info.root_extent = [iv.dom.extent for iv in op.axis]
        leaf_values(info, st)
        if st.attach_type == "scope" and not st.is_output and not _is_scan_update(st, consumers[st]):
            for d, iv in enumerate(op.axis):
                absval = info.root_value(iv, d)
                lo_ok = _provably(info.root_min[d] >= 0)
                hi_ok = _provably(info.root_min[d] + info.root_extent[d] <= iv.dom.extent)
                if op in scan_body and not (lo_ok and hi_ok):
                    # a scan's body stage: its rows follow the scan's loop, whose range bounds them
                    lo_ok, hi_ok = _inside_over_loops(info.root_min[d], info.root_extent[d], iv.dom.extent,
                                                      loop_extent, lo_ok, hi_ok)
                if not hi_ok:
                    info.conditions.append(absval < iv.dom.extent)
                if not lo_ok:
                    info.conditions.append(absval >= 0)
        for iv in st.leaf_iter_vars:
            loop_extent[iv.var] = (st, iv, info.extent[iv])
        infos[st] = info
    return infos


def _inside_over_loops(lo, ext, full, loop_extent, lo_ok, hi_ok):
    """Whether ``[lo, lo + ext)`` provably lies inside ``[0, full)`` for every value of the
    loops it depends on (each over ``[0, its extent)``)."""
    r = Interval(lambda v: (const(0, v.dtype), loop_extent[v][2] - 1) if v in loop_extent else None)(lo)
    if r is None:
        return lo_ok, hi_ok
    return lo_ok or _provably(r[0] >= 0), hi_ok or _provably(r[1] + ext <= full)


def _provably(cond: Expr) -> bool:
    c = simplify(cond)
    return isinstance(c, Const) and bool(c.value)


def enclosing_loops(st, upto_inclusive: bool = True) -> list:
    """The (stage, IterVar) loops that enclose the body of stage ``st``'s attach point."""
    out = []
    cur = st
    seen = set()
    while cur.attach_type == "scope" and cur.attach_stage is not None:
        if id(cur) in seen:
            raise _cycle(st)
        seen.add(id(cur))
        p, ax = cur.attach_stage, cur.attach_ivar
        k = p.leaf_iter_vars.index(ax)
        out = [(p, iv) for iv in p.leaf_iter_vars[:k + 1]] + out
        cur = p
    return out


def _cycle(st):
    from .schedule import ScheduleError
    return ScheduleError(f"compute_at of stage '{st.name}' makes a cycle of attachments")


def _check_attach(st, consumers: list) -> None:
    """Every consumer must run inside the loop the stage is attached to."""
    from .schedule import ScheduleError
    P, ax = st.attach_stage, st.attach_ivar
    if ax not in P.leaf_iter_vars:
        raise ScheduleError(f"compute_at of stage '{st.name}': axis '{ax.var.name}' is no longer a loop of "
                            f"stage '{P.name}' (it was fused with the loop inside it after compute_at); "
                            f"compute_at the fused loop instead")
    if P.attach_type == "inline":
        raise ScheduleError(f"compute_at of stage '{st.name}': the target stage '{P.name}' is inlined")
    pos = P.leaf_iter_vars.index(ax)
    if not consumers:
        raise ScheduleError(f"compute_at of stage '{st.name}' into '{P.name}': nothing in '{P.name}' reads it")
    for c in consumers:
        cur, ok, seen = c, False, set()
        while True:
            if cur is P:
                ok = True
                break
            if id(cur) in seen:
                raise _cycle(st)
            seen.add(id(cur))
            if cur.attach_type != "scope" or cur.attach_stage is None:
                break
            if cur.attach_stage is P:
                ok = P.leaf_iter_vars.index(cur.attach_ivar) >= pos
                break
            if cur.attach_stage is st:
                raise _cycle(st)
            cur = cur.attach_stage
        if not ok:
            raise ScheduleError(f"compute_at of stage '{st.name}' at loop '{ax.var.name}' of stage '{P.name}': "
                                f"that loop does not enclose its consumer '{c.name}'")


def _accesses(body: tuple, tensors: set) -> list:
    out = []

    def f(n):
        if isinstance(n, TensorLoad) and n.tensor in tensors:
            out.append(n)
    for b in body:
        post_order_visit(b, f)
    return out


def _thread_bound_roots(stage) -> set:
    """The axes of ``stage`` whose extent sets the extent of a loop bound to a thread index
    (``bind``): the bound loops themselves, the parent of a split whose bound outer part has the
    extent ``ceil(E / factor)`` (or inner part ``ceil(E / nparts)``), both parts of a bound fusion.
    A split's ``factor`` (or ``nparts``) part does not depend on the parent's extent."""
    from .schedule import Fuse, Split
    bound = {iv for iv, a in stage.iter_var_attrs.items() if a.bind is not None}
    if not bound:
        return bound
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            if (rel.outer in bound and rel.factor is not None) or (rel.inner in bound and rel.factor is None):
                bound.add(rel.parent)
        elif isinstance(rel, Fuse) and rel.fused in bound:
            bound.update((rel.outer, rel.inner))
    return bound


def _read_box(st, consumers, infos, relax):
    """Per dimension of ``st``'s outputs, the ``[lo, hi]`` its consumers read while the loop
    variables that ``relax`` names range over their extents (None where unknown: gathers)."""
    op = st.op
    ndim = len(op.axis)
    lo = [None] * ndim
    hi = [None] * ndim
    unknown = [False] * ndim
    interval = Interval(relax)
    tensors = set(op.outputs)
    for c in consumers:
        cinfo = infos[c]
        cop = c.op
        if isinstance(cop, ScanOp):      # at each step the scan takes row t of its updates, whole
            _scan_rows(st, cop, cinfo, interval, lo, hi)
            continue
        vmap = {}
        for d, iv in enumerate(cop.axis):
            vmap[iv.var] = cinfo.root_value(iv, d)
        for iv in cop.reduce_axis:
            vmap[iv.var] = cinfo.root_value(iv)
        # a ragged axis's symbols exist only inside the consumer's nest: a read that depends on
        # them (or on loops whose extent does) is taken as unknown, so the whole dimension is made
        ragged = {v for rb in cinfo.ragged.values() for v in (rb.min_var, rb.extent_var) if v is not None}
        for acc in _accesses(cinfo.body, tensors):
            for d, idx in enumerate(acc.indices):
                if unknown[d]:
                    continue
                r = interval(substitute(idx, vmap))
                if r is None or (ragged and (collect_vars(r[0]) | collect_vars(r[1])) & ragged):
                    unknown[d] = True
                    continue
                a, b = simplify(r[0]), simplify(r[1])
                lo[d] = a if lo[d] is None else union_min(lo[d], a)
                hi[d] = b if hi[d] is None else union_max(hi[d], b)
    return [None if u else x for x, u in zip(lo, unknown)], [None if u else x for x, u in zip(hi, unknown)]


def _is_scan_update(st, consumers) -> bool:
    """An update stage of a scan: the row it computes lies inside it by construction."""
    return any(isinstance(c.op, ScanOp) and st.op in {u.op for u in c.op.update} for c in consumers)


def _scan_rows(st, scan, sinfo, interval, lo, hi) -> None:
    """Widen ``[lo, hi]`` by what scan ``scan`` takes of ``st``'s outputs at one step: the row
    of the current time, every element of the other dimensions."""
    for u in scan.update:
        if u.op is not st.op:
            continue
        r = interval(sinfo.root_value(scan.scan_axis))
        box = [r] + [(const(0, s.dtype), s - 1) for s in u.shape[1:]]
        for d, b in enumerate(box):       # the time is an affine expression of loops: never unknown
            a, z = simplify(b[0]), simplify(b[1])
            lo[d] = a if lo[d] is None else union_min(lo[d], a)
            hi[d] = z if hi[d] is None else union_max(hi[d], z)


def _check_covered(st, consumers, infos, loop_extent) -> None:
    """An attached stage that is an argument writes only what its consumers read: refuse it when
    that provably leaves elements out (the box of all reads, every loop relaxed, misses some)."""
    from .schedule import ScheduleError
    lo, hi = _read_box(st, consumers, infos,
                       lambda v: (const(0, v.dtype), loop_extent[v][2] - 1) if v in loop_extent else None)
    for d, iv in enumerate(st.op.axis):
        if lo[d] is None:
            continue
        if _provably(lo[d] > iv.dom.min) or _provably(hi[d] + 1 < iv.dom.min + iv.dom.extent):
            name = st.op.outputs[0].name
            raise ScheduleError(
                f"stage '{st.name}' is an argument but is computed at loop '{st.attach_ivar.var.name}' of "
                f"stage '{st.attach_stage.name}', which reads only {name}[{lo[d]}:{simplify(hi[d] + 1)}] "
                f"in dimension {d} (extent {iv.dom.extent}): the rest of {name} would never be written; "
                f"compute it at the root (compute_root) or leave it out of the arguments")


def _region(st, consumers, infos, loop_extent):
    """Union of what the consumers read during one iteration of the attach loop."""
    fixed = {iv.var for _, iv in enclosing_loops(st)}
    shared = st.scope == "shared"
    op = st.op

    def relax(v):
        e = loop_extent.get(v)
        if e is None:
            return None
        stage, iv, ext = e
        if v in fixed:
            a = stage.iter_var_attrs.get(iv)
            if not (shared and a is not None and a.bind is not None and
                    (a.bind.thread_tag.startswith("threadIdx") or a.bind.thread_tag == "vthread")):
                return None
        return (const(0, v.dtype), ext - 1)

    bound_roots = _thread_bound_roots(st)
    lo, hi = _read_box(st, consumers, infos, relax)
    mins, exts = [], []
    for d, iv in enumerate(op.axis):
        if lo[d] is None:
            mins.append(iv.dom.min)
            exts.append(iv.dom.extent)
            continue
        ext = simplify(hi[d] - lo[d] + 1)
        if not isinstance(ext, Const):
            # allocate for the largest extent any iteration needs
            big = Interval(lambda v: (const(0, v.dtype), loop_extent[v][2] - 1) if v in loop_extent else None)(ext)
            if big is not None and isinstance(simplify(big[1]), Const):
                ext = simplify(big[1])
            elif collect_vars(ext) & set(loop_extent):
                # the size would vary per iteration (and name loop variables where the buffer is
                # allocated): allocate the whole dimension instead
                mins.append(iv.dom.min)
                exts.append(iv.dom.extent)
                continue
        full = iv.dom.extent
        if isinstance(ext, Const) and isinstance(full, Const) and ext.value >= full.value:
            if ext.value == full.value or iv not in bound_roots:
                mins.append(iv.dom.min)
                exts.append(full)
                continue
            # a tile larger than the tensor, on an axis whose extent is that of a loop bound to a
            # thread index: that loop keeps the tile's extent (the launch size the other stages
            # of the kernel bind too); the points outside the tensor are guarded (infer_bounds)
        mins.append(lo[d])
        exts.append(ext)
    return mins, exts
