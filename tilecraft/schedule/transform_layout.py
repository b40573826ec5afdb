"""``Stage.transform_layout(mapping)``: store a tensor in another layout (TVM <= 0.14, TE).

``s[B].transform_layout(lambda i, j: [j // 4, i, j % 4])`` stores ``B[i, j]`` at
``B[j // 4, i, j % 4]``: B's buffer (an argument's too) has the new shape, every reader reads the
new position, and a compute stage iterates its new layout in row-major order; the new loops are
returned (``C.op.axis`` of the stage afterwards), to schedule further. A placeholder can be
transformed too: the caller then passes its array in the new layout.

The mapping must be a bijection that tilecraft can invert: each new index is an axis, ``axis //
c`` or ``axis % c`` (``c`` a constant; both of them for a split axis), each axis used, with
constant extents. Calling it again composes. It must come before the stage's loops are
scheduled, as TVM's re-layout does.

Before::                                   After ``s[B].transform_layout(lambda i, j: [j, i])``::

    for i in range(4):                         for j in range(6):
        for j in range(6):                         for i in range(4):
            B[i, j] = A[i, j] * 2.0                    B[j, i] = A[i, j] * 2.0
    for i, j: C[i, j] = B[i, j] + 1.0          for i, j: C[i, j] = B[j, i] + 1.0
"""
from __future__ import annotations

import inspect

from ..ir.expr import BinOp, Binary, Const, IterKind, IterVar, Range, TensorLoad, Var, const, convert
from ..ir.functor import IRMutator, substitute
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor


def _error(msg):
    from .schedule import ScheduleError
    return ScheduleError(msg)


def transform_layout(stage, mapping):
    """See the module docstring; returns the new loops of a compute stage (None otherwise) and
    the mapping's JSON tree for the record."""
    from .store_predicate import to_json
    op = stage.op
    where = f"transform_layout of stage '{stage.name}'"
    if not isinstance(op, (ComputeOp, PlaceholderOp)) or len(op.outputs) != 1:
        raise _error(f"{where}: only a compute stage of one output or a placeholder can change its layout")
    if stage.relations or len(stage.leaf_iter_vars) != len(stage.all_iter_vars) or stage.iter_var_attrs:
        raise _error(f"{where}: it must come before other schedule primitives on the stage (the stage then "
                     f"iterates its new layout)")
    for other in stage.schedule.stages:
        if other.attach_stage is stage and other.attach_type == "scope":
            raise _error(f"{where}: stage '{other.name}' is computed at its loop '{other.attach_ivar.var.name}'; "
                         f"compute_at after transform_layout")
    old = op.outputs[0]
    for st in stage.schedule.stages:
        if not isinstance(st.op, ComputeOp) and any(t is old for t in st.op.input_tensors):
            raise _error(f"{where}: stage '{st.name}' ({type(st.op).__name__}) reads '{old.name}' as a whole "
                         f"buffer and cannot be re-indexed to the new layout")
    shape = []
    for d, e in enumerate(old.shape):
        if not isinstance(e, Const):
            raise _error(f"{where}: dimension {d} of '{old.name}' has the symbolic extent `{e}`; the new "
                         f"layout needs constant extents")
        shape.append(e.value)
    names = _arg_names(mapping, len(shape), where)
    args = [Var(n, "int32") for n in names]
    new_idx = mapping(*args)
    new_idx = [convert(x) for x in (new_idx if isinstance(new_idx, (list, tuple)) else [new_idx])]
    tree = tuple(_tuples(to_json(_Args(args), e)) for e in new_idx)
    new_shape, inverse, new_vars = _invert(new_idx, args, shape, where)
    mapped = {"args": args, "index": new_idx}

    if isinstance(op, PlaceholderOp):
        new_op = PlaceholderOp(op.name, tuple(const(n, "int32") for n in new_shape), op.dtype)
        loops = None
    else:
        axis = tuple(IterVar(Range(const(0, "int32"), const(n, "int32")), Var(f"ax{d}", "int32"), IterKind.DATA_PAR)
                     for d, n in enumerate(new_shape))
        vmap = {iv.var: substitute(inverse[k], {a: nv.var for a, nv in zip(new_vars, axis)})
                for k, iv in enumerate(op.axis)}
        new_op = ComputeOp(op.name, op.tag, op.attrs, axis, op.reduce_axis,
                           tuple(substitute(b, vmap) for b in op.body), (old.name,))
        loops = list(axis)
    new = new_op.output(0)
    sch = stage.schedule
    stage.op = new_op
    stage.all_iter_vars = list(new_op.axis) + list(new_op.reduce_axis)
    stage.leaf_iter_vars = list(stage.all_iter_vars)
    sch.stage_map[new_op] = stage
    remap = _Remap({old: (new, mapped)})
    for st in sch.stages:
        if st is stage or not isinstance(st.op, ComputeOp):
            continue
        body = tuple(remap.visit_expr(b) for b in st.op.body)
        if any(a is not b for a, b in zip(body, st.op.body)):
            o = st.op
            repl = ComputeOp(o.name, o.tag, o.attrs, o.axis, o.reduce_axis, body, tuple(t.name for t in o.outputs))
            sch.stage_map[repl] = st
            _retarget(sch, st, repl)
    return loops, tuple(names), tree


class _Args:
    """Stands for a stage in ``store_predicate.to_json``: the mapping's arguments are its axes."""

    def __init__(self, args):
        self.all_iter_vars = [IterVar(None, a, IterKind.DATA_PAR) for a in args]
        self.name = "transform_layout"


def _tuples(x):
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


def _arg_names(mapping, ndim, where) -> list:
    try:
        params = list(inspect.signature(mapping).parameters.values())
    except (TypeError, ValueError):
        params = None
    if params is None or any(p.kind is p.VAR_POSITIONAL for p in params):
        return [f"i{d}" for d in range(ndim)]
    if len(params) != ndim:
        raise _error(f"{where}: the mapping takes {len(params)} argument(s) but the tensor has {ndim} dimension(s)")
    return [p.name for p in params]


def _invert(new_idx, args, shape, where):
    """The new shape, and each old axis as an expression of variables standing for the new
    indices (the k-th of ``args`` stands for new index k: the caller substitutes the new loop
    variables for them by position)."""
    uses: dict = {a: {} for a in args}      # arg -> {"whole"|"div"|"mod": (new dim, constant)}
    new_shape = []
    for d, e in enumerate(new_idx):
        kind, a, c = _form(e, args)
        if kind is None:
            raise _error(f"{where}: the new index {d} `{e}` is not an axis, `axis // c` or `axis % c`; "
                         f"tilecraft inverts only those (permutations and splits of axes)")
        if kind in uses[a]:
            raise _error(f"{where}: the axis '{a.name}' appears twice as `{e}` in the new layout")
        uses[a][kind] = (d, c)
        n = shape[args.index(a)]
        new_shape.append(n if kind == "whole" else -(-n // c) if kind == "div" else min(c, n))
    if len(new_idx) > len(args):
        new_vars = args + [Var(f"_n{d}", "int32") for d in range(len(args), len(new_idx))]
    else:
        new_vars = args
    inverse = []
    for k, a in enumerate(args):
        u = uses[a]
        n = shape[k]
        if set(u) == {"whole"}:
            inverse.append(new_vars[u["whole"][0]])
        elif set(u) == {"div", "mod"} and u["div"][1] == u["mod"][1] and n % u["div"][1] == 0:
            c = u["div"][1]
            inverse.append(new_vars[u["div"][0]] * c + new_vars[u["mod"][0]])
        else:
            raise _error(f"{where}: the axis '{a.name}' (extent {n}) is not mapped one to one: use it whole, or "
                         f"as `{a.name} // c` and `{a.name} % c` with a constant c dividing {n}")
    return new_shape, inverse, new_vars


def _form(e, args):
    if isinstance(e, Var) and e in args:
        return "whole", e, None
    if isinstance(e, Binary) and e.op in (BinOp.FLOORDIV, BinOp.FLOORMOD) and isinstance(e.a, Var) \
            and e.a in args and isinstance(e.b, Const) and e.b.value > 0:
        return ("div" if e.op is BinOp.FLOORDIV else "mod"), e.a, e.b.value
    return None, None, None


class _Remap(IRMutator):
    """``T[idx]`` → ``T_new[mapping(idx)]`` for each transformed tensor."""

    def __init__(self, table: dict):
        self.table = table

    def visit_TensorLoad(self, e):
        e = super().visit_TensorLoad(e)
        hit = self.table.get(e.tensor)
        if hit is None:
            return e
        new, m = hit
        vmap = dict(zip(m["args"], e.indices))
        return TensorLoad(new, tuple(substitute(x, vmap) for x in m["index"]))


def _retarget(sch, st, repl) -> None:
    """Stage ``st`` now computes ``repl``; readers of its old outputs read the new ones."""
    old = list(st.op.outputs)
    st.op = repl
    sch._replace_inputs([x for x in sch.stages if x is not st], dict(zip(old, repl.outputs)))


def mapping_from_record(names, index):
    """The mapping function a ``transform_layout`` step records: its argument names and each new
    index as a JSON tree (``store_predicate``'s form, the arguments as ``["axis", name]``)."""
    from .store_predicate import from_json

    named = [Var(n, "int32") for n in names]
    exprs = [from_json(_Args(named), t) for t in index]

    def mapping(*vs):
        return [substitute(e, dict(zip(named, vs))) for e in exprs]
    # the recorded argument names, so that the step records the same names again
    mapping.__signature__ = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY)
                                               for n in names])
    return mapping


def python_lambda(names, index) -> str:
    """``lambda i, j: [j, i]`` for the record's Python form."""
    def py(t):
        head = t[0]
        if head == "axis":
            return t[1]
        if head == "const":
            return repr(t[1])
        op = BinOp[head]
        sym = {BinOp.FLOORDIV: "//", BinOp.FLOORMOD: "%", BinOp.ADD: "+", BinOp.SUB: "-", BinOp.MUL: "*"}[op]
        return f"{py(t[1])} {sym} {py(t[2])}"
    return f"lambda {', '.join(names)}: [{', '.join(py(t) for t in index)}]"
