"""tilecraft's intermediate representation: expressions, statements, traversals, printing.

This package imports nothing else from tilecraft. Semantics are stated in ``expr.py``'s docstring.
"""
from . import dtype
from .dtype import DTypeError
from .expr import (AccessPtr, BinOp, Binary, Broadcast, BufferLoad, BufferRegion, Call, Cast,
                   CommReducer, Const, Expr, IterKind, IterVar, Let, Ramp, Range, Reduce, Select,
                   SizeVar, StringImm, TensorLoad, Unary, UnOp, Var, VectorReduce, binary, cast,
                   const, convert, div, is_const_int, const_value, logical_not, max_expr, min_expr,
                   neg, select)
from .stmt import (Allocate, AttrStmt, Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse,
                   LetStmt, PrimFunc, SeqStmt, Stmt, decl_buffer, seq)
from .functor import (IRMutator, collect_vars, expr_key, post_order_visit, structural_equal,
                      substitute)
from .printer import expr_str, func_str, stmt_str
from .intrin_rules import register_intrin_lowering, register_op_attr
from .module import GlobalVar, IRModule
