"""Legalization: rewrite intrinsic calls and conversions into what one target computes natively.

After :func:`legalize` for a target T (``"llvm"`` or ``"cuda"``, the rules of
``ir.intrinsics.TARGETS[T]``):

* every ``Call`` of an intrinsic in the table (``ir/intrinsics.py``) has a native lowering on T:
  a call T lacks is replaced by its row's ``expand`` (``sigmoid(x)`` → ``1 / (1 + exp(-x))``,
  ``rsqrt`` on LLVM, ``isnan(x)`` → ``x != x`` on LLVM, ``likely(c)`` → ``c``), itself legalized;
  an intrinsic with neither, or a call that breaks its row's dtype rule (IR built by hand), is
  a ``LegalizeError`` naming the intrinsic, the target and the call;
* where T computes float16 math in float32, no intrinsic call has float16 arguments: each is
  ``float16(f(float32(x), ...))``, computed in float32 and rounded once (a bool result is not
  converted back);
* where T has no one-rounding float64 → float16 conversion (LLVM), every such ``Cast`` goes
  through ``round_to_float32_odd``: float64 → float32 rounded to odd, then float32 → float16,
  which rounds exactly as a direct conversion would.

Calls outside the table (GPU builtins, externs) are left alone: the backends name them. A lowering
rule a user registered for a call and T (``ir/intrin_rules.py``, TVM's ``register_intrin_lowering``)
runs before all this, and its result is legalized in turn; an operator the user declared that has
no rule for T is a ``LegalizeError``. A
function that is already legalized for T (``PrimFunc.attr("legalized_for")``) is returned as
it is by :func:`legalize_func`, so ``build(lower(s, args, target=...))`` legalizes once and
``build(lower(s, args))`` (no target at lowering) legalizes in the backend.

>>> legalize(body_with_sigmoid, "llvm")     # C[i] = sigmoid(A[i])  →  C[i] = 1f / (1f + exp(-A[i]))
"""
from __future__ import annotations

from ...ir import dtype as dt
from ...ir import intrin_rules, intrinsics
from ...ir.expr import Call, Cast, Expr, cast
from ...ir.functor import IRMutator
from ...ir.stmt import Allocate, PrimFunc, Stmt
from ...error import TVMError

LEGALIZED_ATTR = "legalized_for"


class LegalizeError(ValueError, TVMError):
    """An intrinsic has no lowering on the target and no decomposition."""


def legalize(body: Stmt, target: str) -> Stmt:
    """``body`` with its intrinsic calls and float64 → float16 conversions made native for
    ``target`` (``"llvm"``, ``"cuda"``); the very same object when nothing changes.

    >>> legalize(func.body, "cuda")
    """
    return _Legalize(target).visit_stmt(body)


def legalize_func(func: PrimFunc, target: str) -> PrimFunc:
    """``func`` legalized for ``target`` and marked so (``func.attr("legalized_for")``); ``func``
    itself when it already is.

    >>> f = legalize_func(tilecraft.lower(s, [A, C]), "llvm")
    """
    if func.attr(LEGALIZED_ATTR) == target:
        return func
    attrs = tuple((k, v) for k, v in func.attrs if k != LEGALIZED_ATTR) + ((LEGALIZED_ATTR, target),)
    return PrimFunc(func.name, func.params, legalize(func.body, target), attrs)


class _Legalize(IRMutator):
    def __init__(self, target: str):
        if target not in intrinsics.TARGETS:
            raise LegalizeError(f"no legalization rules for target '{target}'; known targets: "
                                f"{', '.join(intrinsics.TARGETS)}")
        self.target = target
        self.rules = intrinsics.TARGETS[target]

    def visit_Call(self, e):
        e = super().visit_Call(e)
        if intrin_rules.LOWERING or intrin_rules.OP_ATTRS:
            rule = intrin_rules.lowering_rule(e.name, self.target)
            if rule is not None:
                out = rule(e)
                if out is not e:
                    if not isinstance(out, Expr):
                        raise LegalizeError(f"the lowering rule registered for 'tir.{e.name}' on target "
                                            f"'{self.target}' returned {type(out).__name__} {out!r} for "
                                            f"`{e}`; it must return an expression (or the call itself)")
                    return self.visit_expr(out)
            elif intrinsics.lookup(e.name) is None and intrin_rules.is_registered_op(e.name):
                raise LegalizeError(f"the operator 'tir.{e.name}' has no lowering rule for target "
                                    f"'{self.target}' (in `{e}`): register one with "
                                    f"tvm.ir.register_intrin_lowering('tir.{e.name}', target="
                                    f"'{self.target}', f=...)")
        return self._legal(e)

    def _legal(self, e):
        """``e`` (whose arguments are legal) made legal."""
        row = intrinsics.lookup(e.name)
        if row is None:
            return e
        if e.args and dt.element_of(e.args[0].dtype) not in row.dtypes:
            raise LegalizeError(f"the intrinsic '{e.name}' takes {'/'.join(row.dtypes)} arguments, "
                                f"got {e.args[0].dtype} in `{e}`")
        if self.rules.float16_math_in_float32 and e.args \
                and dt.element_of(e.args[0].dtype) == "float16":
            wide = tuple(cast(dt.with_lanes("float32", dt.lanes(a.dtype)), a) for a in e.args)
            inner = self._legal(Call(e.name, wide, row.result_dtype(wide[0].dtype)))
            return inner if dt.is_bool(e.dtype) else Cast(e.dtype, inner)
        if row.native_on(self.target):
            return e
        if row.expand is None:
            raise LegalizeError(f"the intrinsic '{e.name}' has no lowering for target '{self.target}' "
                                f"and no decomposition (in `{e}`)")
        # the expansion's new calls (exp in sigmoid) may need legalizing in turn
        return self.visit_expr(row.expand(e.args, e.dtype))

    def visit_Allocate(self, s):
        # a buffer's shape holds no intrinsic call or float conversion: only the body is looked at
        body = self.visit_stmt(s.body)
        return s if body is s.body else Allocate(s.buffer, body)

    def visit_Cast(self, e):
        e = super().visit_Cast(e)
        if self.rules.float64_to_float16 == "round_to_odd" and dt.element_of(e.dtype) == "float16" \
                and dt.element_of(e.value.dtype) == "float64":
            mid = dt.with_lanes("float32", dt.lanes(e.dtype))
            return Cast(e.dtype, Call("round_to_float32_odd", (e.value,), mid))
        return e
