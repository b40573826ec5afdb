"""User lowering rules for intrinsics (TVM's ``tvm.ir.register_intrin_lowering`` and
``register_op_attr``): how a call such as ``exp(x)`` or a new ``mylog(x)`` becomes code on one target.

The built-in intrinsics are lowered by the table (``ir/intrinsics.py``) and the ``legalize`` pass;
a rule registered here for ``(op, target)`` runs first, in ``legalize``: it receives the ``Call``
(``call.op.name`` is ``"tir.exp"``, ``call.args``, ``call.dtype``) and returns its replacement
(usually ``tir.call_pure_extern`` of a device function), or the call itself to decline, in which
case the table lowers it as usual. A rule for target ``"default"`` applies on every target without
its own. A new operator is declared by registering any attribute of it
(``register_op_attr("tir.mylog", "TCallEffectKind", CallEffectKind.Pure)``); ``tir.call_intrin``
then accepts its name, and a target without a rule for it refuses it at lowering.

Rules carry a level, as in TVM: a higher level replaces a lower one, an equal level is an error
(the same rule registered twice), a lower one is ignored. The registry is per process, filled only
by these calls.

>>> def cuda_exp(call):
...     return tir.call_pure_extern(call.dtype, "expf", call.args[0]) if call.dtype == "float32" else call
>>> register_intrin_lowering("tir.exp", target="cuda", f=cuda_exp, level=99)
"""
from __future__ import annotations

import enum

LOWERING: dict = {}        # (op name without "tir.", target kind) -> (level, rule)
OP_ATTRS: dict = {}        # op name without "tir." -> {attribute: (level, value)}


class CallEffectKind(enum.IntEnum):
    """TVM's ``tir.CallEffectKind``: what a call may do besides computing its result."""
    ExprAnnotation = 0
    Pure = 1
    ReadState = 2
    UpdateState = 3
    Opaque = UpdateState
    Embedded = 4
    ControlJump = 5


def _op_name(op_name: str, api: str) -> str:
    if not isinstance(op_name, str) or not op_name:
        raise ValueError(f"{api}: the operator name must be a string such as 'tir.exp', got {op_name!r}")
    return op_name[4:] if op_name.startswith("tir.") else op_name


def register_op_attr(op_name: str, attr_key: str, value=None, level: int = 10):
    """Set attribute ``attr_key`` of operator ``op_name`` (declaring the operator if it is new);
    with ``value`` None, a decorator that registers the function it decorates.

    >>> register_op_attr("tir.mylog", "TCallEffectKind", tir.CallEffectKind.Pure)
    """
    name = _op_name(op_name, "register_op_attr")

    def register(v):
        attrs = OP_ATTRS.setdefault(name, {})
        old = attrs.get(attr_key)
        if old is not None and old[0] == level:
            raise ValueError(f"register_op_attr: attribute {attr_key!r} of operator {op_name!r} is already "
                             f"registered at level {level}; give a higher level to replace it")
        if old is None or level > old[0]:
            attrs[attr_key] = (level, v)
        return v
    return register if value is None else register(value)


def register_intrin_lowering(op_name: str, target: str = "default", *, f=None, level: int = 10):
    """Lower calls of ``op_name`` on ``target`` (``"llvm"``, ``"cuda"`` or ``"default"``) with
    ``f(call) -> expr``; without ``f``, a decorator.

    >>> register_intrin_lowering("tir.mylog", target="cuda", f=my_cuda_mylog_rule, level=99)
    """
    name = _op_name(op_name, "register_intrin_lowering")
    kind = str(target).split()[0]

    def register(rule):
        if not callable(rule):
            raise TypeError(f"register_intrin_lowering({op_name!r}): the rule must be a function of the "
                            f"call, got {type(rule).__name__}")
        old = LOWERING.get((name, kind))
        if old is not None and old[0] == level:
            raise ValueError(f"register_intrin_lowering: operator {op_name!r} already has a lowering rule "
                             f"for target {kind!r} at level {level}; give a higher level to replace it")
        if old is None or level > old[0]:
            LOWERING[(name, kind)] = (level, rule)
        OP_ATTRS.setdefault(name, {})
        return rule
    return register if f is None else register(f)


def lowering_rule(name: str, target: str):
    """The rule registered for calls named ``name`` (no ``tir.`` prefix) on ``target``, else the
    ``"default"`` one, else None."""
    hit = LOWERING.get((name, target)) or LOWERING.get((name, "default"))
    return None if hit is None else hit[1]


def is_registered_op(name: str) -> bool:
    """Whether ``name`` (no ``tir.`` prefix) was declared by :func:`register_op_attr` or
    :func:`register_intrin_lowering`."""
    return name in OP_ATTRS
