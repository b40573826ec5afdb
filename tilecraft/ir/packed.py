"""Packed functions: Python functions that generated code calls by name, as TVM's
``tvm.register_func`` / ``tir.call_packed``.

``register_func("my.addone", f)`` puts ``f`` in the table; ``call_packed("my.addone", ins[0],
outs[0])`` in a statement (a ``te.extern`` body) is ``Call("tvm_call_packed", (StringImm(name),
*args), "int32")``, where each buffer argument is ``Call("tvm_stack_make_array", (pointer,
*shape), "handle")``: its address and its shape, so that the callee sees an array. When the
compiled function runs, the call reaches the Python function (``runtime/packed.py``) with each
array as a ``tilecraft.nd`` array viewing the buffer's memory (writes go to the buffer) and each
scalar as a Python int or float; it runs with the GIL, in the calling thread (a parallel loop's
worker, inside one). An exception fails the compiled function with status
``STATUS_PACKED_FUNC`` and is the cause of the error raised to its caller.

The table starts with TVM's BLAS names, done with numpy (``tvm.contrib.cblas.matmul``,
``tvm.contrib.cblas.batch_matmul``): TVM scripts that call them run unchanged.

>>> @register_func("my.addone")
... def addone(x, y):
...     y.copyfrom(x.numpy() + 1)
"""
from __future__ import annotations

import numbers

from . import dtype as dt
from .expr import Call, Expr, StringImm, convert
from ..error import TVMError

PACKED_CALL = "tvm_call_packed"
MAKE_ARRAY = "tvm_stack_make_array"

# How an array reaches a packed function: the runtime hands in its array class (a lower layer
# receives the higher one's object by injection); plain numpy arrays until then.
wrap_array = None


class PackedFuncError(ValueError, TVMError):
    """A packed function is missing, registered twice, or called with a bad argument."""


def _cblas_matmul(a, b, c, transa=False, transb=False):
    x, y = a.numpy(), b.numpy()
    c.copyfrom((x.T if transa else x) @ (y.T if transb else y))


def _cblas_batch_matmul(a, b, c, transa=False, transb=False):
    x, y = a.numpy(), b.numpy()
    c.copyfrom((x.swapaxes(1, 2) if transa else x) @ (y.swapaxes(1, 2) if transb else y))


_REGISTRY: dict = {
    "tvm.contrib.cblas.matmul": _cblas_matmul,
    "tvm.contrib.cblas.batch_matmul": _cblas_batch_matmul,
}


def register_func(func_name, f=None, override: bool = False):
    """Register ``f`` as the packed function ``func_name``; without ``f``, a decorator.
    ``func_name`` may itself be the function (registered under its ``__name__``). A name that is
    taken is refused unless ``override=True``.

    >>> register_func("my.scale", lambda x, y, k: y.copyfrom(x.numpy() * k))
    """
    if callable(func_name):
        f, func_name = func_name, func_name.__name__
    if not isinstance(func_name, str) or not func_name:
        raise PackedFuncError(f"register_func: the name must be a non-empty string, got {func_name!r}")

    def register(fn):
        if not callable(fn):
            raise PackedFuncError(f"register_func('{func_name}'): expected a function, got {fn!r}")
        if func_name in _REGISTRY and not override:
            raise PackedFuncError(f"register_func: the packed function '{func_name}' is already registered; "
                                  f"pass override=True to replace it")
        _REGISTRY[func_name] = fn
        return fn
    return register(f) if f is not None else register


def get_global_func(name: str, allow_missing: bool = False):
    """The packed function registered as ``name`` (None if missing and ``allow_missing``)."""
    f = _REGISTRY.get(name)
    if f is None and not allow_missing:
        raise PackedFuncError(f"no packed function is registered as '{name}' (tvm.register_func(name, f) "
                              f"registers one; registered: {', '.join(sorted(_REGISTRY))})")
    return f


def call(name: str, args: list):
    """Call the packed function ``name`` with ``args`` (numpy arrays, viewing the caller's
    memory, are handed over as the runtime's arrays); its result as an int (None: 0)."""
    f = get_global_func(name)
    wrap = wrap_array or (lambda a: a)
    out = f(*[wrap(a) if hasattr(a, "__array_interface__") else a for a in args])
    return 0 if out is None else int(out)


def call_packed(name: str, *args) -> Call:
    """A call of the packed function ``name`` (TVM's ``tir.call_packed``): buffers (a
    ``te.extern``'s ``ins``/``outs``) are passed as arrays, numbers and scalar expressions as
    values. Its value is an ``int32`` (the function's result, 0 for None).

    >>> C = te.extern((n,), [A], lambda ins, outs: call_packed("my.addone", ins[0], outs[0]))
    """
    from .stmt import Buffer
    if not isinstance(name, str) or not name:
        raise PackedFuncError(f"call_packed: the first argument is the function's name, got {name!r}")
    out = [StringImm(name)]
    for k, a in enumerate(args):
        if isinstance(a, Buffer):
            out.append(Call(MAKE_ARRAY, (a.access_ptr("rw"),) + tuple(a.shape), "handle"))
            continue
        if isinstance(a, str) or not isinstance(a, (Expr, numbers.Number)):
            raise PackedFuncError(f"call_packed('{name}'): argument {k} must be a buffer, a number or a "
                                  f"scalar expression, got {type(a).__name__} {a!r}")
        e = convert(a)
        if dt.lanes(e.dtype) != 1 or e.dtype == "handle":
            raise PackedFuncError(f"call_packed('{name}'): argument {k} `{e}` is a {e.dtype}; pass "
                                  f"scalars (or buffers)")
        out.append(e)
    return Call(PACKED_CALL, tuple(out), "int32")
