"""TVM's ``tir`` names that TE scripts use: ``tvm.tir.const``, ``tvm.tir.indexmod``, ``tvm.tir.Select``..."""
from .ir.expr import (Var, SizeVar, Const, Cast, Call, Select as _SelectNode, Expr as PrimExpr, IterVar,
                      Range, Reduce, Ramp, Broadcast, CommReducer)
from .ir.stmt import (For, ForKind, BufferStore, Allocate, SeqStmt, IfThenElse, LetStmt, Evaluate,
                      PrimFunc, Buffer)
from .te.intrin import (const, floordiv, floormod, truncdiv, truncmod, indexdiv, indexmod, exp, log,
                        sqrt, rsqrt, tanh, sigmoid, erf, power, floor, ceil, round, abs, if_then_else,
                        all, any, max_value, min_value, trunc)
from .te.intrin import select as Select
from .ir.expr import min_expr as min, max_expr as max  # noqa: A001
