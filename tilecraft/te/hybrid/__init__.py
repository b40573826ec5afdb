"""``te.hybrid.script``: kernels written as a subset of Python (TVM's hybrid script).

A function decorated with ``@te.hybrid.script`` is two things, as in TVM:

* called with ``te.Tensor``s (and numbers, ``te.var``s, lists), it is parsed (``parser.py``) into
  a ``HybridOp``: a stage whose body is the script's loops, stores and branches, reading its
  input tensors and writing the tensors it returns. It schedules as a ``te.extern`` stage does:
  it runs at the root with its own loops, its producers and consumers are scheduled as usual;
* called with numpy arrays (and numbers, lists), it runs as plain Python (``runtime.py``), which
  is also how the reference interpreter (``tilecraft.interp``) evaluates a ``HybridOp``.

The language: ``output_tensor(shape, dtype)``, ``allocate(shape, dtype, scope)``, loops over
``range``, ``const_range`` (unrolled when parsed), ``unroll``, ``parallel``, ``vectorize`` and
``bind("threadIdx.x", n)``; ``if``/``elif``/``else``, ``x if c else y``, ``and``/``or``/``not``,
chained comparisons; ``+ - * / // % **``; ``sqrt log exp tanh sigmoid power sin cos floor ceil
round trunc exp2 log2 log10 erf min max abs``, casts ``float32(x)``, ``int32(x)``, ...;
``len``, ``ceil_div``; ``a.shape``, ``a.dtype``; scalar variables; captured constants. An
``output_tensor`` starts uninitialized in compiled code (as in TVM; as Python it is zeros).

>>> @te.hybrid.script
... def outer_product(n, m, a, b):
...     c = output_tensor((n, m), a.dtype)
...     for i in range(n):
...         for j in range(m):
...             c[i, j] = a[i] * b[j]
...     return c
>>> C = outer_product(n, m, A, B)              # a te.Tensor; te.create_schedule(C.op), build
>>> outer_product(3, 4, np.ones(3), np.ones(4))   # a numpy array
"""
from __future__ import annotations

import functools

import numpy as np

from ...ir.expr import Expr
from ..extern import ExternOp
from ..tag import scoped_tag
from ..tensor import Tensor
from .parser import HybridError, parse
from .module import HybridModule
from .runtime import HYBRID_GLOBALS, run_python

__all__ = ["script", "HybridOp", "HybridError", "HYBRID_GLOBALS", "HybridModule", "build"]

# ``te.hybrid.build(sch, inputs, outputs)`` (TVM's) is :func:`tilecraft.schedule.hybrid_dump.build`:
# it lowers, and the schedule layer sits above te, so ``tilecraft/__init__.py`` hands it in.
build = None


class HybridOp(ExternOp):
    """The stage a hybrid script makes: an ``ExternOp`` whose ``body`` is the parsed script,
    which keeps the function and its arguments so the interpreter can run it as Python.

    ``axis`` (TVM's): the loops of the script's outermost loop nest — each ``for`` that starts at
    0, is not bound to a GPU thread and whose extent does not depend on an enclosing loop, going
    inwards while the body is another such loop. They schedule as a compute stage's axes do
    (split, fuse, reorder, parallel, vectorize, unroll; ``schedule/hybrid_loops.py``)."""

    __slots__ = ("func", "call_args", "axis")

    def __init__(self, name, tag, attrs, inputs, input_placeholders, output_placeholders, body, func,
                 call_args):
        super().__init__(name, tag, attrs, inputs, input_placeholders, output_placeholders, body)
        self.func, self.call_args = func, tuple(call_args)
        self.axis = _loop_axes(body)

    def run_python(self, values: dict, scalar) -> list:
        """The outputs (numpy arrays) of the script run as Python on the arrays ``values`` of its
        input tensors; ``scalar(expr)`` gives the number a symbolic argument stands for."""
        def arg(a):
            if isinstance(a, Tensor):
                return values[a]
            if isinstance(a, (list, tuple)):
                return type(a)(arg(x) for x in a)
            if isinstance(a, Expr):
                return scalar(a)
            return a
        res = run_python(self.func, [arg(a) for a in self.call_args])
        res = list(res) if isinstance(res, (list, tuple)) else [res]
        return [np.asarray(r).astype(t.dtype) for r, t in zip(res, self.outputs)]

    def __repr__(self):
        return f"HybridOp({self.name})"


def _loop_axes(body) -> tuple:
    """The IterVars of the outermost loop nest of a script's body (see ``HybridOp``)."""
    from ...ir.expr import Const, IterKind, IterVar, Range
    from ...ir.functor import collect_vars
    from ...ir.stmt import For, ForKind
    axes, outer = [], set()
    while (isinstance(body, For) and isinstance(body.min, Const) and body.min.value == 0
           and body.kind is not ForKind.THREAD_BINDING and not (collect_vars(body.extent) & outer)):
        axes.append(IterVar(Range(body.min, body.extent), body.loop_var, IterKind.DATA_PAR))
        outer.add(body.loop_var)
        body = body.body
    return tuple(axes)


def _symbolic(a) -> bool:
    if isinstance(a, (list, tuple)):
        return any(_symbolic(x) for x in a)
    return isinstance(a, (Tensor, Expr))


class _Script:
    """A hybrid function: a ``HybridOp`` when called with tensors, plain Python otherwise."""

    def __init__(self, func):
        self.func = func
        functools.update_wrapper(self, func)

    def __call__(self, *args):
        if not any(_symbolic(a) for a in args):
            return run_python(self.func, args)
        body, inputs, in_bufs, out_bufs = parse(self.func, args)
        name = self.func.__name__
        op = HybridOp(name, scoped_tag("", f"hybrid script '{name}'"), {}, inputs, in_bufs, out_bufs, body,
                      self.func, args)
        return op.output(0) if len(op.outputs) == 1 else list(op.outputs)


def script(func):
    """Decorate a Python function written in the hybrid language (see the module docstring).

    >>> @te.hybrid.script
    ... def scale(a):
    ...     b = output_tensor(a.shape, a.dtype)
    ...     for i in range(a.shape[0]):
    ...         b[i] = a[i] * 2.0
    ...     return b
    """
    return _Script(func)

