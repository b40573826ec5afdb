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


def IntImm(dtype: str, value: int, span=None):
    """TVM's ``tir.IntImm(dtype, value)``: an integer constant (a ``Const``; ``isinstance(x,
    tir.IntImm)`` is not available, test ``isinstance(x, tir.Const)`` with an integer dtype)."""
    return const(int(value), dtype)


def FloatImm(dtype: str, value: float, span=None):
    """TVM's ``tir.FloatImm(dtype, value)``: a floating-point constant (a ``Const``)."""
    return const(float(value), dtype)
from . import ir_builder
