"""TVM's error classes (``tvm.error``), the bases of tilecraft's own errors, so that a TVM script's
``except tvm.error.TVMError`` (or ``pytest.raises(tvm.error.TVMError)``) catches what tilecraft
raises for the same mistake.

Every error of the compiler and its runtime is a :class:`TVMError` besides its Python kind: a bad
schedule is ``ScheduleError(ValueError, TVMError)``, a bad dtype ``DTypeError(TypeError,
TVMError)``, a failed kernel ``KernelError(TVMError)`` (a ``RuntimeError``, as TVMError is).
This module imports nothing: it is the lowest layer.

>>> try:
...     s[C].split(C.op.axis[0], factor=0)
... except tvm.error.TVMError as e:
...     print(e)
"""


class TVMError(RuntimeError):
    """An error of the compiler or the runtime (TVM's default error class)."""


class InternalError(TVMError):
    """A check inside the compiler failed: a bug of tilecraft, not of the script."""


class DiagnosticError(TVMError):
    """Errors reported as diagnostics on a program."""


class RPCError(TVMError):
    """An error of the remote procedure call layer."""


class OpError(TVMError):
    """An operator was used wrongly (the graph level's frontends)."""


class OpNotImplemented(OpError, NotImplementedError):
    """An operator a frontend does not support."""


class OpAttributeRequired(OpError, AttributeError):
    """An operator lacks a required attribute."""


class OpAttributeInvalid(OpError, AttributeError):
    """An operator's attribute has a value it cannot take."""


class OpAttributeUnImplemented(OpError, NotImplementedError):
    """An operator's attribute is not supported."""
