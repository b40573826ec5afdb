"""TVM's ``topi.nn.pooling`` module path: ``pool2d`` with TVM's signature.

>>> from tilecraft.topi.nn.pooling import pool2d
>>> P = pool2d(A, kernel=(3, 3), stride=(1, 1), dilation=(1, 1), padding=(0, 0, 0, 0), pool_type="max")
"""
from __future__ import annotations

from . import pool2d as _pool2d

__all__ = ["pool2d"]


def pool2d(data, kernel, stride, dilation, padding, pool_type, ceil_mode=False, layout="NCHW",
           count_include_pad=True):
    """TVM's ``topi.nn.pooling.pool2d``: max or average pooling of NCHW ``data`` over ``kernel``
    (a pair), ``stride`` and ``dilation`` pairs, ``padding`` (top, left, bottom, right); an
    average counts the padding when ``count_include_pad`` (TVM's default). ``topi.nn.pool2d`` is
    the same operator with tilecraft's argument order.

    >>> P = pool2d(A, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "avg")
    """
    if layout != "NCHW":
        raise ValueError(f"topi.nn.pooling.pool2d: only the NCHW layout is supported, got {layout!r}")
    if ceil_mode:
        raise ValueError("topi.nn.pooling.pool2d: ceil_mode=True is not supported (the output size rounds down)")
    if pool_type not in ("max", "avg"):
        raise ValueError(f"topi.nn.pooling.pool2d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    return _pool2d(data, pool_type, tuple(kernel), tuple(stride), tuple(padding), tuple(dilation),
                   count_include_pad=count_include_pad)
