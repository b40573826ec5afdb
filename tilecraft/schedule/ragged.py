"""Ragged reduce axes: bounds that are expressions of the stage's outer axes and of tensor loads.

``te.reduce_axis((row_ptr[i], row_ptr[i + 1]), "j")`` makes ``j`` *ragged*: its range changes with
the output point. Bound inference gives each ragged axis two fresh variables, ``j.min`` and
``j.extent``, and treats them as opaque symbols: every loop and guard derived from ``j`` (split
extents ``ceil(j.extent / f)``, tail guards ``j.outer * f + j.inner < j.extent``) is written in
them. ``schedule_ops`` binds them with ``let`` statements just outside the outermost loop made
from ``j`` (:func:`wrap_bound_lets`), so the bounds are loaded once per outer iteration, and
refuses a loop order where a loop the bounds depend on runs inside a loop of ``j``.

Example (the CSR product of a sparse matrix and a vector)::

    def row(i):
        j = te.reduce_axis((row_ptr[i], row_ptr[i + 1]), "j")
        return te.sum(val[j] * x[col_idx[j]], axis=j)
    y = te.compute((m,), row, name="y")

lowers to::

    for i in range(0, m):
        y[i] = 0.0
        let j.min = row_ptr[i]
        let j.extent = row_ptr[i + 1] - row_ptr[i]
        for j in range(0, j.extent):
            y[i] = y[i] + val[j + j.min] * x[col_idx[j + j.min]]
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.expr import Const, Expr, IterVar, TensorLoad, Var
from ..ir.functor import collect_vars, post_order_visit, substitute
from ..ir.stmt import LetStmt
from ..te.tensor import is_ragged_axis


@dataclass(frozen=True)
class RaggedBound:
    """The symbols of one ragged axis and their values in the stage's loop variables."""
    axis: IterVar
    min_var: Var | None                # None: the min is a constant (a triangular 0 .. i + 1)
    extent_var: Var
    min_value: Expr | None = None      # filled once the data axes' values are known
    extent_value: Expr | None = None


def ragged_axes(op) -> list:
    """The ragged reduce axes of a compute op (an empty list for most ops)."""
    return [iv for iv in getattr(op, "reduce_axis", ()) if is_ragged_axis(op, iv)]


def bound_reads(op) -> list:
    """The tensors read by the bounds of ``op``'s reduce axes."""
    out = []
    for iv in getattr(op, "reduce_axis", ()):
        for e in (iv.dom.min, iv.dom.extent):
            post_order_visit(e, lambda n: out.append(n.tensor) if isinstance(n, TensorLoad) else None)
    return out


def new_bounds(op) -> dict:
    """A :class:`RaggedBound` with fresh symbols for each ragged axis of ``op``."""
    out = {}
    for iv in ragged_axes(op):
        name = iv.var.name
        lo = None if isinstance(iv.dom.min, Const) else Var(name + ".min", iv.dom.min.dtype)
        out[iv] = RaggedBound(iv, lo, Var(name + ".extent", iv.dom.extent.dtype))
    return out


def with_values(rb: RaggedBound, axis_values: dict) -> RaggedBound:
    """``rb`` with its bounds written in loop variables (``axis_values``: data axis var → value)."""
    return RaggedBound(rb.axis, rb.min_var, rb.extent_var,
                       substitute(rb.axis.dom.min, axis_values), substitute(rb.axis.dom.extent, axis_values))


def leaves_of(stage, root: IterVar) -> set:
    """The leaf IterVars of ``stage`` derived from ``root`` through splits and fusions."""
    from .schedule import Split
    derived = {root}
    for rel in stage.relations:
        if isinstance(rel, Split):
            if rel.parent in derived:
                derived.update((rel.outer, rel.inner))
        elif rel.outer in derived or rel.inner in derived:
            derived.add(rel.fused)
    return derived & set(stage.leaf_iter_vars)


def let_positions(stage, info) -> dict:
    """Leaf position → the ragged bounds to bind just outside that loop: the outermost loop made
    from each ragged axis. Raises ``ScheduleError`` when a loop the bounds depend on (an outer data
    axis) runs inside that loop."""
    from .schedule import ScheduleError
    leaves = stage.leaf_iter_vars
    out: dict = {}
    leaf_vars = {iv.var: iv for iv in leaves}
    for rb in info.ragged.values():
        mine = leaves_of(stage, rb.axis)
        pos = min(leaves.index(iv) for iv in mine)
        outer = {iv.var for iv in leaves[:pos]}
        used = (collect_vars(rb.min_value) | collect_vars(rb.extent_value)) & set(leaf_vars)
        inner = sorted((v for v in used if v not in outer), key=lambda v: leaves.index(leaf_vars[v]))
        if inner:
            raise ScheduleError(
                f"stage '{stage.name}': the bounds of the ragged axis '{rb.axis.var.name}' "
                f"(min `{rb.axis.dom.min}`, extent `{rb.axis.dom.extent}`) depend on loop "
                f"'{inner[0].name}', which runs inside loop '{leaves[pos].var.name}' of that axis; "
                f"reorder so that the loops of '{rb.axis.var.name}' are inside '{inner[0].name}'")
        out.setdefault(pos, []).append(rb)
    return out


def wrap_bound_lets(body, bounds: list, to_loads):
    """``let j.min = ...; let j.extent = ...`` around ``body`` for each bound (``to_loads`` turns
    the tensor loads of the bounds into buffer loads)."""
    for rb in reversed(bounds):
        body = LetStmt(rb.extent_var, to_loads.visit_expr(rb.extent_value), body)
        if rb.min_var is not None:
            body = LetStmt(rb.min_var, to_loads.visit_expr(rb.min_value), body)
    return body
