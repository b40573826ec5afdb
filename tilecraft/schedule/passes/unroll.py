"""Unrolling: ``pragma(ax, "auto_unroll_max_step", n)`` marks every serial loop inside ``ax``
whose subtree has at most ``n`` iterations (constant extents) as unrolled (and, with
``PassContext(config={"tir.UnrollLoop": {"auto_max_step": n}})``, every such loop anywhere), then every unrolled
loop with a constant extent of at most ``EXPLICIT_UNROLL_LIMIT`` is replaced by copies of its body.

Unrolling here rather than in LLVM matters: LLVM promotes a register tile's accumulators out of
the reduction loop only if the tile's loop is already unrolled when its loop passes run.
Afterwards the remaining ``UNROLLED`` loops (long ones) are left to the backends (LLVM full-unroll
metadata, CUDA ``#pragma unroll``).
"""
from __future__ import annotations

from ...ir.expr import Const
from ...ir.functor import IRMutator
from ...ir.stmt import For, ForKind


class _AutoUnroll(IRMutator):
    def __init__(self, limit=None):
        self.limit = limit

    def visit_For(self, s):
        saved = self.limit
        step = s.annotation("pragma_auto_unroll_max_step")
        if step is not None:
            self.limit = int(step)
        new = super().visit_For(s)
        self.limit = saved
        if self.limit and new.kind is ForKind.SERIAL and isinstance(new.extent, Const):
            n = _trip_count(new)
            if n is not None and n <= self.limit:
                return For(new.loop_var, new.min, new.extent, ForKind.UNROLLED, new.body, new.thread_tag,
                           new.annotations)
        return new


def _trip_count(s) -> int | None:
    """Iterations of the whole subtree of a loop nest (constant extents only)."""
    if isinstance(s, For):
        if not isinstance(s.extent, Const):
            return None
        inner = _trip_count(s.body)
        return None if inner is None else s.extent.value * inner
    from ...ir.stmt import SeqStmt, IfThenElse, LetStmt, Allocate, AttrStmt
    if isinstance(s, SeqStmt):
        total = 0
        for x in s.seq:
            n = _trip_count(x)
            if n is None:
                return None
            total += n
        return max(total, 1)
    if isinstance(s, (LetStmt, Allocate, AttrStmt)):
        return _trip_count(s.body)
    if isinstance(s, IfThenElse):
        a = _trip_count(s.then_case)
        b = _trip_count(s.else_case) if s.else_case is not None else 1
        return None if a is None or b is None else max(a, b)
    return 1


EXPLICIT_UNROLL_LIMIT = 64


class _ExplicitUnroll(IRMutator):
    def visit_For(self, s):
        s = super().visit_For(s)
        if s.kind is not ForKind.UNROLLED or not isinstance(s.extent, Const) or not isinstance(s.min, Const):
            return s
        n = s.extent.value
        if n > EXPLICIT_UNROLL_LIMIT:
            return s
        from ...ir.expr import const
        from ...ir.functor import substitute
        from ...ir.stmt import seq, Evaluate
        copies = [substitute(s.body, {s.loop_var: const(s.min.value + i, s.loop_var.dtype)}) for i in range(n)]
        return seq(*copies) or Evaluate(const(0))


def unroll_loops(body):
    from ...transform import PassContext
    limit = PassContext.current().get("tir.UnrollLoop").get("auto_max_step") or None
    return _ExplicitUnroll().visit_stmt(_AutoUnroll(limit).visit_stmt(body))
