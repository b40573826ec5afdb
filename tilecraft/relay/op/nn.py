"""``relay.nn``: the layer operators (TVM's names and attributes).

>>> y = relay.nn.conv2d(x, w, strides=(1, 1), padding=(1, 1))     # doctest: +SKIP
"""
from __future__ import annotations

from . import _pad4, _pair, make_call


def conv2d(data, weight, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, channels=None,
           kernel_size=None, data_layout="NCHW", kernel_layout="OIHW"):
    """2-d convolution; ``padding`` is one int, (h, w), or (top, left, bottom, right)."""
    return make_call("nn.conv2d", [data, weight], strides=_pair(strides), padding=_pad4(padding),
                     dilation=_pair(dilation), groups=int(groups), channels=channels,
                     kernel_size=None if kernel_size is None else _pair(kernel_size),
                     data_layout=data_layout, kernel_layout=kernel_layout)


def contrib_conv2d_nchwc(data, weight, strides=(1, 1), padding=(0, 0), channels=None, kernel_size=None,
                         data_layout=None, kernel_layout=None, out_layout=None):
    """2-d convolution in blocked layouts (TVM's ``contrib_conv2d_nchwc``): ``data_layout``
    ``NCHW<ic>c``, ``kernel_layout`` ``OIHW<ic>i<oc>o``, ``out_layout`` ``NCHW<oc>c``."""
    return make_call("nn.contrib_conv2d_NCHWc", [data, weight], strides=_pair(strides), padding=_pad4(padding),
                     channels=channels, kernel_size=None if kernel_size is None else _pair(kernel_size),
                     data_layout=data_layout, kernel_layout=kernel_layout, out_layout=out_layout)


def dense(data, weight, units=None): return make_call("nn.dense", [data, weight], units=units)  # noqa: E704
def contrib_dense_pack(data, weight, weight_layout, units=None):
    """``data @ weight.T`` with ``weight`` packed as ``[N / nr, K, nr]`` panels
    (``weight_layout`` ``"NK<nr>n"``; TVM's ``contrib_dense_pack``)."""
    return make_call("nn.contrib_dense_pack", [data, weight], units=units, weight_layout=weight_layout)


def bias_add(data, bias, axis=1): return make_call("nn.bias_add", [data, bias], axis=axis)  # noqa: E704
def relu(data): return make_call("nn.relu", [data])  # noqa: E704
def pad(data, pad_width, pad_value=0.0):
    """``data`` with ``pad_value`` around it: ``pad_width`` is ((before, after), ...) per axis."""
    return make_call("nn.pad", [data], pad_width=tuple((int(b), int(a)) for b, a in pad_width),
                     pad_value=float(pad_value))


def batch_flatten(data): return make_call("nn.batch_flatten", [data])  # noqa: E704
def softmax(data, axis=-1): return make_call("nn.softmax", [data], axis=axis)  # noqa: E704
def global_avg_pool2d(data, layout="NCHW"): return make_call("nn.global_avg_pool2d", [data], layout=layout)  # noqa: E704,E501
def global_max_pool2d(data, layout="NCHW"): return make_call("nn.global_max_pool2d", [data], layout=layout)  # noqa: E704,E501


def batch_matmul(x, y, transpose_a=False, transpose_b=True):
    """``x[b] @ y[b]`` (``y[b].T`` with ``transpose_b``, TVM's default)."""
    return make_call("nn.batch_matmul", [x, y], transpose_a=bool(transpose_a), transpose_b=bool(transpose_b))


def contrib_attention(q, k, v, heads, head_dim, scale, offsets=(0, 0, 0)):
    """Multi-head self-attention ``softmax(scale · Q_h K_hᵀ) V_h`` per head, the heads read in
    place from ``[S, W]`` tensors (head ``h`` of ``q`` is columns ``offsets[0] + h·head_dim ...``);
    result ``[S, heads, head_dim]`` (``FuseAttention`` makes it; ``topi/attention.py`` computes it)."""
    return make_call("nn.contrib_attention", [q, k, v], heads=int(heads), head_dim=int(head_dim),
                     scale=float(scale), offsets=tuple(int(o) for o in offsets))


def max_pool2d(data, pool_size=(1, 1), strides=(1, 1), dilation=(1, 1), padding=(0, 0), layout="NCHW"):
    """Max pooling; ``padding`` as conv2d's."""
    return make_call("nn.max_pool2d", [data], pool_size=_pair(pool_size), strides=_pair(strides),
                     dilation=_pair(dilation), padding=_pad4(padding), layout=layout)


def avg_pool2d(data, pool_size=(1, 1), strides=(1, 1), dilation=(1, 1), padding=(0, 0), layout="NCHW",
               count_include_pad=False):
    """Average pooling; ``padding`` as conv2d's."""
    return make_call("nn.avg_pool2d", [data], pool_size=_pair(pool_size), strides=_pair(strides),
                     dilation=_pair(dilation), padding=_pad4(padding), layout=layout,
                     count_include_pad=bool(count_include_pad))


def layer_norm(data, gamma, beta, axis=-1, epsilon=1e-5, center=True, scale=True):
    """Layer normalisation over ``axis`` (the last one so far)."""
    return make_call("nn.layer_norm", [data, gamma, beta], axis=axis, epsilon=float(epsilon),
                     center=center, scale=scale)


def batch_norm(data, gamma, beta, moving_mean, moving_var, axis=1, epsilon=1e-5, center=True, scale=True):
    """Inference batch norm; as TVM's, a tuple whose field 0 is the result (``bn[0]``)."""
    from ..ir import TupleGetItem
    call = make_call("nn.batch_norm", [data, gamma, beta, moving_mean, moving_var], axis=axis,
                     epsilon=float(epsilon), center=center, scale=scale)
    return _TupleWrapper(call, TupleGetItem)


class _TupleWrapper:
    """TVM's TupleWrapper: ``bn[0]`` is ``TupleGetItem(bn, 0)``; ``astuple()`` is the call."""

    def __init__(self, call, getitem):
        self._call, self._getitem = call, getitem

    def __getitem__(self, index):
        return self._getitem(self._call, index)

    def astuple(self):
        return self._call
