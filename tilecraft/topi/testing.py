"""TVM's ``tvm.topi.testing`` references that tutorials check against: numpy implementations of
the operators, written for clarity, not speed.

>>> from tilecraft.topi.testing import conv2d_nchw_python
>>> out = conv2d_nchw_python(a_np, w_np, stride=(1, 1), padding=(1, 1))
"""
from __future__ import annotations

import numpy as np

from .nn import _pair, pad_tuple


def conv2d_nchw_python(a_np, w_np, stride, padding, groups: int = 1):
    """The 2-D convolution of NCHW ``a_np`` with OIHW ``w_np`` (``w_np.shape[1] == C / groups``),
    in float64 and returned in ``a_np``'s dtype; ``stride`` an int or a pair, ``padding`` any
    of TVM's forms (an int, ``(pad_h, pad_w)``, ``(top, left, bottom, right)``, ``"SAME"``,
    ``"VALID"``).

    >>> conv2d_nchw_python(np.ones((1, 1, 3, 3)), np.ones((1, 1, 3, 3)), 1, 1)[0, 0, 1, 1]
    9.0
    """
    N, C, H, W = a_np.shape
    CO, CIg, KH, KW = w_np.shape
    sh, sw = _pair(stride, "the stride")
    pt, pl, pb, pr = pad_tuple(padding, (KH, KW))
    a = np.pad(a_np.astype("float64"), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    OH = (H + pt + pb - KH) // sh + 1
    OW = (W + pl + pr - KW) // sw + 1
    out = np.zeros((N, CO, OH, OW))
    COg = CO // groups
    for co in range(CO):
        g = co // COg
        for ky in range(KH):
            for kx in range(KW):
                window = a[:, g * CIg:(g + 1) * CIg, ky:ky + sh * (OH - 1) + 1:sh, kx:kx + sw * (OW - 1) + 1:sw]
                out[:, co] += np.einsum("nchw,c->nhw", window, w_np[co, :, ky, kx].astype("float64"))
    return out.astype(a_np.dtype)


# --- TVM's topi.testing schedule dispatch: the schedule of a target kind ------------------------

def _dispatch(target, table: dict):
    """``table[kind]`` for ``target`` (a string or a ``Target``), else ``table["generic"]``."""
    from tilecraft.target import Target
    kind = str(Target(target).kind) if not isinstance(target, Target) else str(target.kind)
    return table.get(kind, table["generic"])


def get_injective_schedule(target):
    """TVM's ``topi.testing.get_injective_schedule(target)``: ``topi.cuda.schedule_injective`` for
    ``"cuda"``, ``topi.generic.schedule_injective`` otherwise.

    >>> s = get_injective_schedule("cuda")(C)
    """
    from . import cuda, generic
    return _dispatch(target, {"generic": generic.schedule_injective, "cuda": cuda.schedule_injective})


get_elemwise_schedule = get_broadcast_schedule = get_injective_schedule


def get_reduce_schedule(target):
    """TVM's ``topi.testing.get_reduce_schedule(target)``: ``topi.cuda.schedule_reduce`` for
    ``"cuda"``, the default schedule otherwise."""
    from . import cuda, generic
    return _dispatch(target, {"generic": generic.default_schedule, "cuda": cuda.schedule_reduce})


def _conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=None):
    from .nn import conv2d_nchw
    return conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=out_dtype)


def get_conv2d_nchw_implement(target):
    """TVM's ``topi.testing.get_conv2d_nchw_implement(target)``: ``(compute, schedule)`` with TVM's
    argument order ``compute(data, kernel, strides, padding, dilation, out_dtype)``: the
    ``topi.cuda`` pair for ``"cuda"``, ``topi.nn.conv2d_nchw`` and ``topi.generic``'s schedule
    otherwise.

    >>> conv2d_nchw, schedule = get_conv2d_nchw_implement("llvm")
    """
    from . import cuda, generic
    return _dispatch(target, {"generic": (_conv2d_nchw, generic.schedule_conv2d_nchw),
                              "cuda": (cuda.conv2d_nchw, cuda.schedule_conv2d_nchw)})
