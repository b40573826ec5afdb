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
