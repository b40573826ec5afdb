"""``te.extern``: a stage whose outputs are written by a statement of your own, typically a call
of a packed Python function or a C function, instead of an index formula.

``te.extern(shape, inputs, fcompute)`` declares a buffer for each input tensor and each output
(``in_buffers``/``out_buffers`` to give your own, e.g. with strides) and calls
``fcompute(ins, outs)`` with them; it returns a statement (``ir_builder``'s ``ib.get()``) or an
expression such as ``tvm.tir.call_packed("name", ins[0], outs[0])``. Lowering binds each
declared buffer to the whole tensor's buffer, so the statement reads the inputs and must write
every element of the outputs. The stage has no loops to schedule: it runs at the root, and its
consumers and producers are scheduled as usual.

>>> C = te.extern((n,), [A], lambda ins, outs: tvm.tir.call_packed("my.addone", ins[0], outs[0]),
...               name="C")
"""
from __future__ import annotations

import numbers

from ..ir import dtype as dt
from ..ir.expr import Expr
from ..ir.stmt import Buffer, Evaluate, Stmt, decl_buffer
from .operation import _shape
from .tag import scoped_tag
from .tensor import Operation, TEError, Tensor


class ExternOp(Operation):
    """``te.extern``: ``body`` writes the outputs through ``output_placeholders`` and reads
    ``inputs`` through ``input_placeholders`` (buffers bound to the tensors when lowered)."""

    __slots__ = ("name", "tag", "attrs", "inputs", "input_placeholders", "output_placeholders", "body",
                 "outputs", "__weakref__")
    axis = ()
    reduce_axis = ()

    def __init__(self, name, tag, attrs, inputs, input_placeholders, output_placeholders, body):
        self.name, self.tag, self.attrs = name, tag, dict(attrs or {})
        self.inputs, self.body = tuple(inputs), body
        self.input_placeholders, self.output_placeholders = tuple(input_placeholders), tuple(output_placeholders)
        n = len(output_placeholders)
        self.outputs = tuple(Tensor(self, i, tuple(b.shape), b.dtype, name if n == 1 else f"{name}.v{i}")
                             for i, b in enumerate(output_placeholders))

    @property
    def input_tensors(self) -> list:
        return list(self.inputs)

    def __repr__(self):
        return f"ExternOp({self.name})"


def extern(shape, inputs, fcompute, name: str = "extern", dtype=None, in_buffers=None, out_buffers=None,
           tag: str = "", attrs=None):
    """A stage computed by ``fcompute(ins, outs)`` (see the module docstring); returns its output
    tensor, or a list of them when ``shape`` is a list of shapes.

    >>> D = te.extern([(n,), (n,)], [A, B], lambda ins, outs: ib_program(ins, outs), name="D")
    """
    where = f"extern '{name}'"
    tag = scoped_tag(tag, where)
    single = not (isinstance(shape, (list, tuple)) and shape and isinstance(shape[0], (list, tuple)))
    shapes = [_shape(shape, where)] if single else [_shape(s, where) for s in shape]
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    for k, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TEError(f"{where}: input {k} must be a tensor, got {type(t).__name__} {t!r}")
    if dtype is None:
        dtypes = [inputs[0].dtype if inputs else "float32"] * len(shapes)
    else:
        dtypes = [dtype] * len(shapes) if isinstance(dtype, str) else list(dtype)
    if len(dtypes) != len(shapes):
        raise TEError(f"{where}: {len(shapes)} output shape(s) but {len(dtypes)} dtype(s)")
    ins = _buffers(in_buffers, [(t.shape, t.dtype, t.name) for t in inputs], "in_buffers", where)
    outs = _buffers(out_buffers, [(s, dt.normalize(d), name if len(shapes) == 1 else f"{name}.v{i}")
                                  for i, (s, d) in enumerate(zip(shapes, dtypes))], "out_buffers", where)
    body = fcompute(list(ins), list(outs))
    if isinstance(body, (Expr, numbers.Number)) and not isinstance(body, bool):
        from ..ir.expr import convert
        body = Evaluate(convert(body))
    if not isinstance(body, Stmt):
        raise TEError(f"{where}: fcompute(ins, outs) must return a statement (ib.get()) or an expression "
                      f"such as tvm.tir.call_packed(...), got {type(body).__name__}")
    op = ExternOp(name, tag, attrs, inputs, ins, outs, body)
    return op.output(0) if single else list(op.outputs)


def _buffers(given, wanted, what: str, where: str) -> list:
    if given is None:
        return [decl_buffer(s, d, name=n) for s, d, n in wanted]
    given = list(given)
    if len(given) != len(wanted):
        raise TEError(f"{where}: {what} has {len(given)} buffer(s) for {len(wanted)} tensor(s)")
    for b, (s, d, n) in zip(given, wanted):
        if not isinstance(b, Buffer):
            raise TEError(f"{where}: {what} must hold tvm.tir.decl_buffer(...) buffers, got {b!r}")
        if b.dtype != d or len(b.shape) != len(s):
            raise TEError(f"{where}: buffer '{b.name}' of {what} is {b.dtype} with {len(b.shape)} "
                          f"dimension(s), but tensor '{n}' is {d} with {len(s)}")
    return given
