"""TVM's ``topi.generic`` schedules: the target-independent defaults a script asks for when it has
no tuned or hand-written schedule (``with tvm.target.Target("llvm"): s =
topi.generic.schedule_conv2d_hwcn([out])``). Each is the default schedule of the outputs' ops
(every stage at the root, in its own loop nest), as TVM's ``generic`` schedules are on the CPU;
the tuned templates (``topi/conv2d*.llvm``, ``topi/matmul.*``) are where the speed is.

>>> s = topi.generic.schedule_injective([relu_out])
"""
from __future__ import annotations

from tilecraft import te


def _outputs(outs) -> list:
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    if not outs or not all(isinstance(t, te.Tensor) for t in outs):
        raise TypeError(f"a topi.generic schedule takes a tensor or a list of tensors, got {outs!r}")
    return outs


def default_schedule(outs, auto_inline: bool = False):
    """The default schedule of ``outs``; with ``auto_inline``, the elementwise and broadcast
    stages between them and their inputs are inlined into their consumers."""
    outs = _outputs(outs)
    s = te.create_schedule([t.op for t in outs])
    if auto_inline:
        out_ops = {t.op for t in outs}
        for stage in s.stages:
            op = stage.op
            if op not in out_ops and getattr(op, "tag", "") in ("elemwise", "broadcast", "injective") \
                    and not getattr(op, "reduce_axis", ()):
                s[op].compute_inline()
    return s


def schedule_injective(outs):
    """Elementwise / broadcast / reshaping outputs: the default schedule."""
    return default_schedule(outs, False)


def schedule_conv2d_hwcn(outs):
    """A ``conv2d_hwcn`` (and what follows it): the default schedule."""
    return default_schedule(outs, False)


def schedule_conv2d_nchw(outs):
    """A ``conv2d_nchw`` (and what follows it): the default schedule."""
    return default_schedule(outs, False)


schedule_elemwise = schedule_broadcast = schedule_injective
