"""TVM's ``tir`` names that TE scripts use: ``tvm.tir.const``, ``tvm.tir.indexmod``, ``tvm.tir.Select``,
and what a tensor intrinsic's lowering is written with: ``decl_buffer`` (with ``access_ptr``,
``vload``, ``vstore``), ``ir_builder.create()``, ``call_extern``, ``call_llvm_intrin``, ``reinterpret`` ...

>>> Bb = tvm.tir.decl_buffer((16, 64), "float32", name="B", offset_factor=1, strides=[te.var("s1"), 1])
>>> tvm.tir.call_extern("int32", "gemv_update", Bb.access_ptr("r"), Bb.strides[0])
"""
from ..ir.expr import (Var, SizeVar, Const, Cast, Call, Select as _SelectNode, Expr as PrimExpr, IterVar,
                       Range, Reduce, Ramp, Broadcast, CommReducer, StringImm, BufferLoad)
from ..ir.stmt import (For, ForKind, BufferStore, Allocate, SeqStmt, IfThenElse, LetStmt, Evaluate,
                       AttrStmt, PrimFunc, Buffer, Stmt, decl_buffer)
from ..ir.stmt import seq as stmt_seq         # TVM's tir.stmt_seq(*stmts)
from ..ir.builtin import (call_extern, call_pure_extern, call_intrin, call_llvm_intrin,
                          call_llvm_pure_intrin, reinterpret)
from ..te.intrin import (const, floordiv, floormod, truncdiv, truncmod, indexdiv, indexmod, exp, log,
                         sqrt, rsqrt, tanh, sigmoid, erf, power, floor, ceil, round, abs, if_then_else,
                         all, any, max_value, min_value, trunc, popcount)
from ..te.intrin import select as Select
from ..ir.expr import min_expr as min, max_expr as max  # noqa: A001
from ..ir.expr import div
from ..ir.packed import call_packed
from ..ir.intrin_rules import CallEffectKind


class _ConstKind(type):
    """``isinstance(x, tir.IntImm)`` / ``tir.FloatImm`` for tilecraft's one constant node (``Const``):
    true for a ``Const`` of an integer (or bool) / float dtype, as TVM's classes are. TVM scripts
    test constants this way (``assert isinstance(v, tvm.tir.IntImm)``); the check is all the
    metaclass does."""

    def __instancecheck__(cls, x) -> bool:
        return isinstance(x, Const) and cls._kind(x.dtype)


class IntImm(metaclass=_ConstKind):
    """TVM's ``tir.IntImm(dtype, value)``: an integer constant (a ``Const``);
    ``isinstance(x, tir.IntImm)`` holds for every integer or bool ``Const``.

    >>> isinstance(tvm.tir.IntImm("int32", 3), tvm.tir.IntImm)
    True
    """

    def __new__(cls, dtype: str, value: int, span=None):
        return const(int(value), dtype)

    @staticmethod
    def _kind(dtype: str) -> bool:
        return dtype.startswith(("int", "uint", "bool"))


class FloatImm(metaclass=_ConstKind):
    """TVM's ``tir.FloatImm(dtype, value)``: a floating-point constant (a ``Const``);
    ``isinstance(x, tir.FloatImm)`` holds for every float ``Const``."""

    def __new__(cls, dtype: str, value: float, span=None):
        return const(float(value), dtype)

    @staticmethod
    def _kind(dtype: str) -> bool:
        return dtype.startswith(("float", "bfloat"))


from . import ir_builder, stmt_functor
