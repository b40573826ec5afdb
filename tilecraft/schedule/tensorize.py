"""Tensorize: prove that the loops under a stage's tensorized axis compute a tensor intrinsic's TE
definition, and replace them by the intrinsic's lowering.

``schedule_ops`` calls :func:`tensorized_nest` for a stage with ``s[C].tensorize(axis, intrin)``.
The *region* is one execution of the loops from ``axis`` inwards: those loops range over their
extents while the loops outside stay fixed. Matching, as TVM's ``tensorize.cc`` does it:

1. every root axis of the stage covers a box in the region (``lo + [0, extent)``, ``lo`` an
   expression of the outer loops), and the inner loops enumerate exactly that box (as many
   iterations as points, no guard depends on them);
2. the stage's last axes (data, then reduction) map onto the intrinsic's axes of the same extent;
   leading axes the intrinsic lacks must be single points ("fuzzy" matching: a [1, 16] region
   matches a [16] intrinsic);
3. each input the stage reads (in first-use order) maps onto the intrinsic's input at that
   position: same dtype, its last dimensions a box of the intrinsic buffer's shape, leading ones
   single points;
4. with axes and inputs renamed so, the stage's body (after inlining) simplifies to the
   intrinsic's body: same combiner, sources, condition and init. The first differing
   subexpression is named when it does not.

Each declared buffer must then fit the box it views (``_check_view``): scope, extents, strides
(a compact declaration needs a contiguous box), ``elem_offset`` (0 unless an ``offset_factor``
or a variable allows others; a multiple of ``offset_factor``). Strides are those storage
flattening will give the buffers (``compact_strides`` with ``storage_align``).

Afterwards the stage's nest is the loops outside ``axis`` with, inside, one or two *uses* of the
intrinsic::

    # attr buffer_bind_scope(Ab) = A[i:+1, 0:+64]        (one per input and output buffer)
      # attr tensor_intrin(gemv) = 'body'
        <the intrinsic's body>

Reductions whose reduction loops all lie inside the region (or outside it run once) use
``body``. Otherwise the loops
between the first reduction loop and ``axis`` surround ``update``, and ``reset`` (output buffers
bound) runs before them over their data loops; an intrinsic without ``reset`` runs ``body`` in
the first iteration of those reduction loops and ``update`` in the others. Storage flattening
(``passes/storage_flatten.py``) gives the declared buffers' variables their values; the
interpreters run each use by the intrinsic's TE definition on the bound boxes.
"""
from __future__ import annotations

from ..ir.expr import (BinOp, BufferRegion, Const, IterKind, Reduce, TensorLoad, Var, binary, const)
from ..ir.functor import IRMutator, collect_vars, post_order_visit, structural_equal, substitute
from ..ir.simplify import simplify
from ..ir.simplify.arith import Analyzer
from ..ir.stmt import (AttrStmt, BUFFER_BIND_SCOPE, For, ForKind, IfThenElse, LetStmt, TENSOR_INTRIN_SCOPE, seq)
from .bound import Interval, union_max, union_min
from .passes.storage_flatten import compact_strides


def _error(msg: str):
    from .schedule import ScheduleError
    return ScheduleError(msg)


def tensorized_axis(st):
    """``(position among the leaves, intrinsic)`` of the stage's tensorized axis, or None."""
    for iv, a in st.iter_var_attrs.items():
        if a.tensor_intrin is not None:
            for k, leaf in enumerate(st.leaf_iter_vars):
                if leaf is iv:
                    return k, a.tensor_intrin
            raise _error(f"tensorize of stage '{st.name}': axis '{iv.var.name}' was tensorized and then "
                         f"split or fused; tensorize one of the axes that replaced it "
                         f"({', '.join(x.var.name for x in st.leaf_iter_vars)})")
    return None


def check_tensorize(st, iv, intrin) -> None:
    """What ``Stage.tensorize(iv, intrin)`` accepts: a tensor intrinsic (its scalar parameters,
    if any, no more than its output axes: parameter k is bound to where the region starts along
    output axis k), and no other tensorized axis on the stage."""
    from ..te.tensor_intrin import TensorIntrin
    if not isinstance(intrin, TensorIntrin):
        raise _error(f"tensorize on stage '{st.name}': expected a tensor intrinsic from "
                     f"te.decl_tensor_intrin, got {intrin!r}")
    if len(intrin.scalar_params) > len(intrin.op.axis):
        raise _error(f"tensorize on stage '{st.name}' with intrinsic '{intrin.name}': it has "
                     f"{len(intrin.scalar_params)} scalar_params but {len(intrin.op.axis)} output axes; "
                     f"scalar parameter k is bound to the region's start along output axis k")
    for other, a in st.iter_var_attrs.items():
        if a.tensor_intrin is not None and other is not iv:
            raise _error(f"tensorize on stage '{st.name}': the stage is already tensorized "
                         f"at axis '{other.var.name}' (with '{a.tensor_intrin.name}'); a stage "
                         f"has at most one tensorized loop")


def llvm_imports(sch) -> tuple:
    """The LLVM IR texts of every ``pragma(axis, "import_llvm", text)`` in the schedule, once
    each, in stage order (the function's ``import_llvm`` attribute)."""
    out = []
    for st in sch.stages:
        for a in st.iter_var_attrs.values():
            for key, value in a.pragmas:
                if key == "import_llvm":
                    if not isinstance(value, str):
                        raise _error(f"pragma import_llvm on stage '{st.name}': the value must be LLVM "
                                     f"IR text, got {type(value).__name__}")
                    if value not in out:
                        out.append(value)
    return tuple(out)


# ------------------------------------------------------------------------------------------------
# the nest

def tensorized_nest(nb, st, k: int, intrin):
    """The loop nest of stage ``st`` tensorized at leaf ``k`` (``nb``: the ``NestBuilder``)."""
    info = nb.infos[st]
    leaves = st.leaf_iter_vars
    where = (f"tensorize of stage '{st.name}' at axis '{leaves[k].var.name}' with intrinsic "
             f"'{intrin.name}'")
    inner = leaves[k:]
    _check_inner_loops(nb, st, inner, where)
    inner_vars = {iv.var for iv in inner}
    conds, bounds = [], _loop_bounds(nb)
    for c in info.conditions:
        used = collect_vars(c) & inner_vars
        if not used:
            conds.append(c)
            continue
        proved = simplify(c, bounds)
        if isinstance(proved, Const) and proved.value:
            continue            # holds in every iteration (a region that fits its tensor)
        raise _error(f"{where}: the guard `{c}` (a split that does not divide its axis, or a region "
                     f"cut to its tensor) depends on loop '{sorted(v.name for v in used)[0]}' inside "
                     f"the tensorized region; the intrinsic computes whole boxes: choose factors that "
                     f"divide the extents")
    relax = {iv.var: (const(0, iv.var.dtype), simplify(info.extent[iv] - 1)) for iv in inner}
    binds, scalars = _match(nb, st, info, intrin, inner, relax, bounds, where)
    n_in = len(intrin.inputs)

    def use(part, bound):
        stmt = intrin.part(part)
        if stmt is None:
            raise _error(f"{where}: the region needs the intrinsic's '{part}', which its fcompute did "
                         f"not return ({_parts_needed(part)})")
        stmt = AttrStmt(TENSOR_INTRIN_SCOPE, intrin, part, stmt)
        for param, value in reversed(scalars):        # the lowering and the interpreters read them
            stmt = LetStmt(param, value, stmt)
        for declared, region in reversed(bound):
            stmt = AttrStmt(BUFFER_BIND_SCOPE, declared, region, stmt)
        return stmt

    # a reduction loop that runs once does not split the reduction
    first_reduce = next((j for j, iv in enumerate(leaves) if iv.kind is IterKind.REDUCE
                         and _equal(info.extent[iv], 1) is not True), None)
    if first_reduce is None or k <= first_reduce:
        stmt = _guard(conds, use("body", binds))
        for j in range(k - 1, -1, -1):
            stmt = nb.make_for(st, leaves[j], info, stmt)
        return stmt
    # reduction loops outside the region: reset before them, update inside them
    middle = leaves[first_reduce:k]
    if intrin.reduce_init is not None:
        update = _guard(conds, use("update", binds))
        reset = _reset_nest(st, info, middle, conds, use("reset", binds[n_in:]))
    else:
        first = None
        for iv in middle:
            if iv.kind is IterKind.REDUCE:
                later = iv.var > 0
                first = later if first is None else binary(BinOp.OR, first, later)
        update = _guard(conds, IfThenElse(first, use("update", binds), use("body", binds)))
        reset = None
    for iv in reversed(middle):
        update = nb.make_for(st, iv, info, update)
    stmt = seq(reset, update)
    for j in range(first_reduce - 1, -1, -1):
        stmt = nb.make_for(st, leaves[j], info, stmt)
    return stmt


def _loop_bounds(nb) -> dict:
    """``{loop variable: (0, extent - 1)}`` for every loop of constant extent in the program."""
    out = {}
    for info in nb.infos.values():
        for iv, ext in info.extent.items():
            if isinstance(ext, Const):
                out[iv.var] = (0, ext.value - 1)
    return out


def _parts_needed(part: str) -> str:
    if part == "body":
        return "it computes the whole reduction, or the first step of one without reset"
    return ("some reduction loops lie outside the tensorized axis, so the intrinsic must return "
            "(body, reset, update) with update, and reset or body")


def _guard(conds, stmt):
    c = None
    for x in conds:
        c = x if c is None else binary(BinOp.AND, c, x)
    return stmt if c is None else IfThenElse(c, stmt)


def _reset_nest(st, info, middle, conds, stmt):
    """``stmt`` (the reset, output buffers bound) under fresh loops over the data axes among
    ``middle`` (as ``NestBuilder.init_stmt`` initialises a reduction)."""
    data = [iv for iv in middle if iv.kind is not IterKind.REDUCE]
    fresh = {iv.var: Var(iv.var.name + ".init", iv.var.dtype) for iv in data}
    reduce_vars = {iv.var for iv in st.leaf_iter_vars if iv.kind is IterKind.REDUCE}
    stmt = substitute(stmt, fresh)
    stmt = _guard([substitute(c, fresh) for c in conds if not (collect_vars(c) & reduce_vars)], stmt)
    for iv in reversed(data):
        attr = st.iter_var_attrs.get(iv)
        stmt = For(fresh[iv.var], const(0), info.extent[iv], attr.kind if attr else ForKind.SERIAL, stmt)
    return stmt


def _check_inner_loops(nb, st, inner, where):
    for iv in inner:
        attr = st.iter_var_attrs.get(iv)
        if attr is not None and attr.bind is not None:
            raise _error(f"{where}: loop '{iv.var.name}' inside the tensorized region is bound to "
                         f"{attr.bind.thread_tag}; bind only loops outside it")
        inside = nb.attached.get((st, iv))
        if inside:
            raise _error(f"{where}: stage '{inside[0].name}' is computed at loop '{iv.var.name}', inside "
                         f"the tensorized region; compute it at a loop outside it")


# ------------------------------------------------------------------------------------------------
# matching

def _box(exprs, relax: dict, bounds: dict, what: str, where: str):
    """``[(lo, extent)]`` of each expression while the region's loops range (``relax``);
    ``bounds`` are the loops' ranges, for the simplifier."""
    interval = Interval(lambda v: relax.get(v))
    out = []
    for e in exprs:
        r = interval(e)
        if r is None:
            raise _error(f"{where}: cannot tell which part of {what} the region covers (the index "
                         f"`{e}` is not an affine function of the loops)")
        lo = simplify(r[0], bounds)
        out.append((lo, simplify(r[1] - lo + 1, bounds)))
    return out


def _equal(a, b) -> bool | None:
    """True / False when ``a == b`` is provable / refutable for integer expressions, else None."""
    d = simplify(a - b)
    if isinstance(d, Const):
        return d.value == 0
    return None


class _Remap(IRMutator):
    """The stage's body in the intrinsic's terms: root axes → intrinsic axes (+ the box's start),
    loads of the stage's inputs → loads of the intrinsic's placeholders (minus the box's start)."""

    def __init__(self, vmap: dict, loads: dict, axes: dict):
        self.vmap, self.loads, self.axes = vmap, loads, axes

    def visit_Var(self, e):
        return self.vmap.get(e, e)
    visit_SizeVar = visit_Var

    def visit_TensorLoad(self, e):
        idx = self._exprs(e.indices)
        hit = self.loads.get(e.tensor)
        if hit is None:
            return TensorLoad(e.tensor, idx) if idx is not e.indices else e
        p, lead, los = hit
        return TensorLoad(p, tuple(idx[d] - los[d] for d in range(lead, len(idx))))

    def visit_Reduce(self, e):
        r = super().visit_Reduce(e)
        axis = tuple(self.axes[id(a)] for a in r.axis if id(a) in self.axes)
        return Reduce(r.combiner, r.source, axis, r.condition, r.value_index, r.init)


def _match(nb, st, info, intrin, inner, relax, bounds, where):
    """Check that the region computes ``intrin``; returns ``[(declared buffer, BufferRegion)]``
    for its inputs then outputs."""
    op, iop = st.op, intrin.op
    count = 1
    for iv in inner:
        count = count * info.extent[iv]
    root = [(iv, info.root_value(iv, d)) for d, iv in enumerate(op.axis)] + \
           [(iv, info.root_value(iv)) for iv in op.reduce_axis]
    boxes = dict(zip((id(iv) for iv, _ in root),
                     _box([v for _, v in root], relax, bounds, f"stage '{st.name}'", where)))
    points = 1
    for _, ext in boxes.values():
        points = points * ext
    if _equal(count, points) is not True:
        raise _error(f"{where}: the loops from '{inner[0].var.name}' inwards "
                     f"({' × '.join(f'{iv.var.name}: {info.extent[iv]}' for iv in inner)}) do not run "
                     f"once per point of the box they cover "
                     f"({', '.join(f'{iv.var.name}: {boxes[id(iv)][1]}' for iv, _ in root)}); reorder so "
                     f"that the tensorized loops are the innermost parts of whole axes")
    for o, (t, it) in enumerate(zip(op.outputs, iop.outputs)):
        if t.dtype != it.dtype:
            raise _error(f"{where}: output {o} of the stage, '{t.name}', is {t.dtype} but the intrinsic's "
                         f"'{it.name}' is {it.dtype}")
    if len(op.outputs) != len(iop.outputs):
        raise _error(f"{where}: the stage has {len(op.outputs)} output(s), the intrinsic {len(iop.outputs)}")
    vmap, axes, starts = {}, {}, []
    for kind, mine, theirs in (("output", op.axis, iop.axis), ("reduction", op.reduce_axis, iop.reduce_axis)):
        if len(theirs) > len(mine):
            raise _error(f"{where}: the intrinsic has {len(theirs)} {kind} axes "
                         f"({', '.join(a.var.name for a in theirs)}) but the stage has {len(mine)}")
        lead = len(mine) - len(theirs)
        for d, iv in enumerate(mine):
            lo, ext = boxes[id(iv)]
            if d < lead:
                if _equal(ext, 1) is not True:
                    raise _error(f"{where}: {kind} axis '{iv.var.name}' covers {ext} points in the region, "
                                 f"but the intrinsic has no axis for it (it matches the last {len(theirs)} "
                                 f"{kind} axes; the ones before must be single points)")
                vmap[iv.var] = lo
                continue
            t_iv = theirs[d - lead]
            if _equal(ext, t_iv.dom.extent) is not True or _equal(t_iv.dom.min, 0) is not True:
                raise _error(f"{where}: {kind} axis '{iv.var.name}' covers {ext} points in the region but "
                             f"the intrinsic's axis '{t_iv.var.name}' has extent {t_iv.dom.extent}")
            vmap[iv.var] = t_iv.var if _equal(lo, 0) else t_iv.var + lo
            axes[id(iv)] = t_iv
            if kind == "output":
                starts.append(lo)
    loads, in_boxes = _inputs(st, info, intrin, relax, bounds, where)
    # the outer loops' bounds and the intrinsic's axes' ranges decide index arithmetic such as
    # (jo * 32 + j) % 32 -> j of a packed operand
    ranges = dict(bounds)
    for t_iv in list(iop.axis) + list(iop.reduce_axis):
        if isinstance(t_iv.dom.extent, Const):
            ranges[t_iv.var] = (0, t_iv.dom.extent.value - 1)
    body = [simplify(_Remap(vmap, loads, axes).visit_expr(b), ranges) for b in info.body]
    # scalar parameter k: where the region starts along output axis k (a definition reading
    # ``i + m0`` is the stage's ``m`` on a region starting at ``m0``)
    scalars = [(p, starts[k]) for k, p in enumerate(intrin.scalar_params)]
    sub = dict(scalars)
    want = [simplify(substitute(b, sub) if sub else b, ranges) for b in iop.body]
    for o, (mine, theirs) in enumerate(zip(body, want)):
        diff = _first_difference(mine, theirs)
        if diff is not None:
            a, b = diff
            raise _error(f"{where}: the stage does not compute what the intrinsic does. On the "
                         f"intrinsic's axes the stage computes\n    {mine}\nand the intrinsic\n    {theirs}\n"
                         f"They differ at `{a}` versus `{b}`")
    binds, bound = [], {}
    for (t, box), declared in zip(in_boxes, intrin.buffers):
        m = nb.mins.get(t)
        begin = [lo if m is None else simplify(lo - m[d]) for d, (lo, _) in enumerate(box)]
        binds.append(_view(nb, declared, nb.buffers[t], begin, [x for _, x in box], where, bound))
    for t, declared in zip(op.outputs, intrin.buffers[len(intrin.inputs):]):
        box = _box(nb.store_index(st, info, t), relax, bounds, f"'{t.name}'", where)
        binds.append(_view(nb, declared, nb.buffers[t], [lo for lo, _ in box], [x for _, x in box], where,
                           bound))
    return binds, scalars


def _inputs(st, info, intrin, relax, bounds, where):
    """The stage's inputs (first use in its inlined body) against the intrinsic's: ``{tensor:
    (placeholder, leading dims, box starts)}`` for the remap and ``[(tensor, box)]``."""
    found = []

    def f(n):
        if isinstance(n, TensorLoad):
            found.append(n)
    for b in info.body:
        post_order_visit(b, f)
    tensors = list(dict.fromkeys(n.tensor for n in found))
    if len(tensors) != len(intrin.inputs):
        raise _error(f"{where}: the stage reads {len(tensors)} tensor(s) ({', '.join(t.name for t in tensors)}) "
                     f"but the intrinsic {len(intrin.inputs)} ({', '.join(t.name for t in intrin.inputs)})")
    rootmap = {iv.var: info.root_value(iv, d) for d, iv in enumerate(st.op.axis)}
    rootmap.update({iv.var: info.root_value(iv) for iv in st.op.reduce_axis})
    loads, boxes = {}, []
    for pos, (t, p, buf) in enumerate(zip(tensors, intrin.inputs, intrin.buffers)):
        if t.dtype != p.dtype:
            raise _error(f"{where}: input {pos} of the stage, '{t.name}', is {t.dtype} but the intrinsic's "
                         f"input '{p.name}' is {p.dtype}")
        if len(p.shape) > len(t.shape):
            raise _error(f"{where}: input {pos}: the intrinsic's '{p.name}' has {len(p.shape)} dimensions but "
                         f"the stage's '{t.name}' has {len(t.shape)}")
        lo, hi = None, None
        for n in found:
            if n.tensor is not t:
                continue
            box = _box([substitute(i, rootmap) for i in n.indices], relax, bounds, f"'{t.name}'", where)
            los = [b[0] for b in box]
            his = [simplify(b[0] + b[1] - 1) for b in box]
            lo = los if lo is None else [union_min(a, b) for a, b in zip(lo, los)]
            hi = his if hi is None else [union_max(a, b) for a, b in zip(hi, his)]
        box = [(a, simplify(b - a + 1)) for a, b in zip(lo, hi)]
        lead = len(t.shape) - len(p.shape)
        text = ", ".join(f"{a}:+{x}" for a, x in box)
        for d in range(lead):
            if _equal(box[d][1], 1) is not True:
                raise _error(f"{where}: the region reads {t.name}[{text}]; the intrinsic's input '{p.name}' has "
                             f"{len(p.shape)} dimension(s), so the leading {lead} must be single points")
        for j, want in enumerate(buf.shape):
            got = box[lead + j][1]
            if not isinstance(want, Var) and _equal(got, want) is not True:
                raise _error(f"{where}: the region reads {t.name}[{text}] (extents "
                             f"{', '.join(str(x) for _, x in box[lead:])}) but the intrinsic's buffer "
                             f"'{buf.name}' has shape ({', '.join(str(x) for x in buf.shape)})")
        loads[t] = (p, lead, [a for a, _ in box])
        boxes.append((t, box))
    return loads, boxes


def _first_difference(a, b):
    """None when ``a`` and ``b`` are the same computation, else the first pair of differing
    subexpressions, widened to the tensor element they index where they are indices
    (reductions compare their combiners by structure, not identity)."""
    stack = [(a, b, None)]
    while stack:
        x, y, load = stack.pop()
        if x is y:
            continue
        if type(x) is not type(y):
            return load or (x, y)
        if isinstance(x, Reduce):
            if not _same_combiner(x.combiner, y.combiner) or x.value_index != y.value_index \
                    or len(x.source) != len(y.source) or len(x.init) != len(y.init) \
                    or [v.var for v in x.axis] != [v.var for v in y.axis]:
                return x, y
            stack.extend((p, q, load) for p, q in reversed(list(zip(x.children(), y.children()))))
            continue
        kx, ky = x.children(), y.children()
        if len(kx) != len(ky) or x.node_key() != y.node_key():
            return load or (x, y)
        if isinstance(x, TensorLoad):
            load = (x, y)
        stack.extend((p, q, load) for p, q in reversed(list(zip(kx, ky))))
    return None


def _same_combiner(c, d) -> bool:
    if c is d:
        return True
    if len(c.result) != len(d.result):
        return False
    m = {**dict(zip(d.lhs, c.lhs)), **dict(zip(d.rhs, c.rhs))}
    return all(structural_equal(x, substitute(y, m)) for x, y in zip(c.result, d.result)) and \
        all(structural_equal(x, y) for x, y in zip(c.identity, d.identity))


# ------------------------------------------------------------------------------------------------
# declared buffers against the boxes they view

def _view(nb, declared, target, begin, extent, where, bound: dict):
    """Check that ``declared`` can view ``target[begin : begin + extent]`` (as storage flattening
    will lay ``target`` out); returns ``(declared, BufferRegion)``. ``bound`` collects the value
    each variable of the declared buffers takes (one variable, one value in a use)."""
    what = f"{where}: the intrinsic's buffer '{declared.name}' viewing '{target.name}'"
    if declared.scope != target.scope:
        raise _error(f"{what}: it is declared in scope '{declared.scope}' but '{target.name}' is in "
                     f"'{target.scope}'")
    if declared.dtype != target.dtype:
        raise _error(f"{what}: it is {declared.dtype} but '{target.name}' is {target.dtype}")
    strides = compact_strides(target.shape, nb.aligns.get(target))
    start = len(target.shape) - len(declared.shape)
    view = strides[start:]
    box = f"{target.name}[{', '.join(f'{b}:+{x}' for b, x in zip(begin, extent))}]"
    if declared.strides is None:
        want = const(1)
        for j in range(len(declared.shape) - 1, -1, -1):
            if _equal(extent[start + j], 1) is not True and _equal(view[j], want) is not True:
                raise _error(f"{what}: it is declared compact (no strides), but the box {box} is not "
                             f"contiguous: its strides are ({', '.join(str(x) for x in view)}); declare "
                             f"variable strides, e.g. strides=[te.var('s{j}'), 1]")
            want = simplify(want * extent[start + j])
    else:
        for j, (mine, got) in enumerate(zip(declared.strides, view)):
            if isinstance(mine, Var):
                _bind(bound, mine, got, declared, where)
            elif _equal(mine, got) is not True:
                raise _error(f"{what}: its stride {j} is declared {mine} but the box {box} has stride "
                             f"{got} there")
    for mine, got in zip(declared.shape, extent[start:]):
        if isinstance(mine, Var):
            _bind(bound, mine, got, declared, where)
    offset = None
    for b, s in zip(begin, strides):
        term = simplify(b * s)
        offset = term if offset is None else offset + term
    offset = simplify(offset) if offset is not None else const(0)
    eo = declared.elem_offset if declared.elem_offset is not None else const(0)
    if not isinstance(eo, Var):
        if _equal(eo, offset) is not True:
            raise _error(f"{what}: it starts at element {eo} (declared without offset_factor or "
                         f"elem_offset), but the box {box} starts at element {offset} of "
                         f"'{target.name}'; declare it with offset_factor=1 (or a larger factor the "
                         f"offsets are multiples of)")
    elif _bind(bound, eo, offset, declared, where) and declared.offset_factor > 1 \
            and not _multiple(offset, declared.offset_factor):
        raise _error(f"{what}: its offset_factor is {declared.offset_factor}, but the box {box} starts at "
                     f"element {offset}, which is not provably a multiple of {declared.offset_factor}; "
                     f"choose tiles aligned to it or a smaller offset_factor")
    return declared, BufferRegion(target, tuple(begin), tuple(extent))


def _bind(bound: dict, var, value, declared, where) -> bool:
    """Record that ``var`` (a variable of ``declared``) stands for ``value`` here."""
    old = bound.get(var)
    if old is None:
        bound[var] = (value, declared.name)
    elif _equal(old[0], value) is not True:
        raise _error(f"{where}: the variable '{var.name}' stands for {old[0]} in buffer '{old[1]}' and for "
                     f"{value} in buffer '{declared.name}'")
    return True


def _multiple(e, k: int) -> bool:
    """Whether the integer expression ``e`` is provably a multiple of ``k`` (each term of its
    linear form is)."""
    lin = Analyzer().linear(e)
    return lin.const % k == 0 and all(c % k == 0 for _, c in lin.terms.values())
