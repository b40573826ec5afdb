"""The tensor-expression language (TVM's ``te``): declare operators as index formulae.

>>> from tilecraft import te
>>> A = te.placeholder((64, 64), name="A")
>>> k = te.reduce_axis((0, 64), name="k")
>>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * A[k, j], axis=k), name="C")
>>> s = te.create_schedule(C.op)
"""
from ..ir.expr import Var, IterVar, Range, Expr
from .tensor import ComputeOp, Operation, PlaceholderOp, TEError, Tensor, TensorSlice
from .tag import TagScope, tag_scope
from .extern import ExternOp, extern
from .autodiff import gradient
from . import hybrid
from .scan import ScanOp, scan
from .operation import (Reducer, comm_reducer, compute, max, min, placeholder, reduce_axis,
                        size_var, sum, thread_axis, var)
from .tensor_intrin import TensorIntrin, decl_tensor_intrin
from ..ir.expr import div
from .intrin import (abs, all, any, ceil, const, cos, erf, exp, exp2, floor, floordiv, floormod,
                     fma, if_then_else, indexdiv, indexmod, isnan, log, log2, log10, max_value,
                     min_value, popcount, pow, power, round, rsqrt, select, sigmoid, sin, sqrt, tanh, trunc,
                     truncdiv, truncmod)


# ``te.create_schedule`` (TVM's name) is :func:`tilecraft.schedule.create_schedule`. The schedule
# layer sits above te and te never imports it: ``tilecraft/__init__.py`` hands it in, and every
# import of ``tilecraft.te`` runs that file first.
