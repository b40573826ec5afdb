"""Tensor intrinsics: a unit of hardware (or micro-kernel) work declared as a tensor expression.

A :class:`TensorIntrin` pairs a TE compute, its *behaviour*, with its *lowering*: the
statements that do that work on buffers (calls of ``tir.call_extern``/``call_llvm_intrin``,
vector loads and stores). ``s[C].tensorize(axis, intrin)`` replaces the loops under ``axis`` by
the lowering once the loop nest is shown to compute what the TE definition says
(``schedule/tensorize.py``); the interpreters run a tensorized region by the TE definition, so a
tensorized schedule is checked without the hardware or the extern symbol.

For a reduction the lowering comes in up to three parts, chosen per use:

* ``body``: compute the outputs from scratch (the whole reduction is inside the region);
* ``reset``: set the outputs to the reduction's start value (identity or ``init=``);
* ``update``: fold the region's part of the reduction into the outputs.

>>> a = te.placeholder((16,), name="a"); b = te.placeholder((16,), name="b")
>>> c = te.compute((16,), lambda i: a[i] + b[i], name="c")
>>> def lower(ins, outs):
...     return tir.call_extern("int32", "vadd16", outs[0].access_ptr("w"), ins[0].access_ptr("r"),
...                            ins[1].access_ptr("r"))
>>> vadd = te.decl_tensor_intrin(c.op, lower, name="vadd16",
...                              default_buffer_params={"offset_factor": 1})
"""
from __future__ import annotations

from ..ir.expr import Expr, Reduce
from ..ir.stmt import Buffer, Evaluate, Stmt, decl_buffer
from .tensor import ComputeOp, PlaceholderOp, TEError, Tensor

PARTS = ("body", "reset", "update")


class TensorIntrin:
    """A tensor intrinsic (``te.decl_tensor_intrin``). ``op`` is its TE definition, ``inputs``
    its placeholders (in ``op.input_tensors`` order), ``buffers`` the declared buffers of the
    inputs then the outputs, ``body``/``reduce_init``/``reduce_update`` its lowering (None
    where not given)."""

    __slots__ = ("name", "op", "inputs", "buffers", "scalar_params", "body", "reduce_init",
                 "reduce_update", "__weakref__")

    def __init__(self, name, op, inputs, buffers, scalar_params, body, reduce_init, reduce_update):
        self.name, self.op, self.inputs, self.buffers = name, op, tuple(inputs), tuple(buffers)
        self.scalar_params = tuple(scalar_params)
        self.body, self.reduce_init, self.reduce_update = body, reduce_init, reduce_update

    @property
    def outputs(self) -> tuple:
        return self.op.outputs

    def part(self, name: str):
        """The statement of one part: ``"body"``, ``"reset"`` or ``"update"``."""
        return {"body": self.body, "reset": self.reduce_init, "update": self.reduce_update}[name]

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.op.body[0], Reduce)

    def __call__(self, *args, **kwargs):
        raise TEError(f"tensor intrinsic '{self.name}': calling an intrinsic inside te.compute "
                      f"(TVM's TensorComputeOp) is not supported; schedule the stage and use "
                      f"s[C].tensorize(axis, intrin)")

    def __repr__(self) -> str:
        return f"TensorIntrin({self.name})"


def decl_tensor_intrin(op, fcompute, name: str = "tensor_intrin", binds=None, scalar_params=None,
                       default_buffer_params=None) -> TensorIntrin:
    """Declare a tensor intrinsic, as TVM's ``te.decl_tensor_intrin``.

    ``op`` (``c.op``) is the TE compute that defines what the intrinsic computes; its inputs must
    be placeholders. Each input and output gets a buffer: ``binds[t]`` if given (a
    ``tir.decl_buffer`` of the tensor's shape and dtype, with variable strides or offset where
    the intrinsic accepts any), else ``tir.decl_buffer(t.shape, t.dtype, t.op.name,
    **default_buffer_params)`` (compact; without ``offset_factor`` it can bind only to the start
    of a buffer). ``fcompute(ins, outs)`` (``fcompute(ins, outs, scalar_params)`` when
    ``scalar_params`` are given) receives those buffers and returns the lowering: a statement
    or an expression (a call, run for its effect), or ``(body, reset, update)`` for a reduction,
    where any part may be None.

    >>> gemv = te.decl_tensor_intrin(c.op, intrin_func, name="gemv", binds={a: Ab, b: Bb, c: Cb})
    """
    if isinstance(op, Tensor):
        op = op.op
    if not isinstance(op, ComputeOp):
        raise TEError(f"decl_tensor_intrin '{name}': expected the operation of a te.compute (c.op), "
                      f"got {op!r}")
    inputs = list(op.input_tensors)
    for t in inputs:
        if not isinstance(t.op, PlaceholderOp):
            raise TEError(f"decl_tensor_intrin '{name}': the input '{t.name}' is computed by "
                          f"'{t.op.name}'; an intrinsic's inputs must be placeholders")
    binds = dict(binds or {})
    tensors = inputs + list(op.outputs)
    for t, b in binds.items():
        if not isinstance(t, Tensor) or not any(t is x for x in tensors):
            raise TEError(f"decl_tensor_intrin '{name}': binds has the key {t!r}, which is not an "
                          f"input or output of '{op.name}' ({', '.join(x.name for x in tensors)})")
        if not isinstance(b, Buffer):
            raise TEError(f"decl_tensor_intrin '{name}': binds[{t.name}] must be a buffer from "
                          f"tir.decl_buffer, got {b!r}")
        if b.dtype != t.dtype or len(b.shape) != len(t.shape):
            raise TEError(f"decl_tensor_intrin '{name}': binds[{t.name}] is a {b.dtype} buffer of "
                          f"{len(b.shape)} dimension(s) but {t.name} is {t.dtype} with {len(t.shape)}")
    params = dict(default_buffer_params or {})
    buffers = [binds[t] if t in binds else decl_buffer(t.shape, t.dtype, t.op.name, **params)
               for t in tensors]
    ins, outs = buffers[:len(inputs)], buffers[len(inputs):]
    if scalar_params:
        result = fcompute(ins, outs, list(scalar_params))
    else:
        result = fcompute(ins, outs)
    parts = list(result) if isinstance(result, (list, tuple)) else [result]
    if len(parts) > 3 or not parts:
        raise TEError(f"decl_tensor_intrin '{name}': fcompute must return a statement or "
                      f"(body, reset, update), got {len(parts)} values")
    parts += [None] * (3 - len(parts))
    for k, p in enumerate(parts):
        if isinstance(p, Expr):
            parts[k] = Evaluate(p)
        elif p is not None and not isinstance(p, Stmt):
            raise TEError(f"decl_tensor_intrin '{name}': the {PARTS[k]} returned by fcompute is "
                          f"{type(p).__name__}, not a statement or an expression")
    if not isinstance(op.body[0], Reduce) and (parts[1] is not None or parts[2] is not None):
        raise TEError(f"decl_tensor_intrin '{name}': '{op.name}' is not a reduction, so it has no "
                      f"reset or update; fcompute should return only the body")
    return TensorIntrin(name, op, inputs, buffers, scalar_params or (), *parts)
