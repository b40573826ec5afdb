"""Type relations: an operator's result type from its arguments' types and its attributes.

Each relation is ``rel(op_name, arg_types, attrs) -> type`` and raises :class:`RelayError`
naming the operator and what does not fit. They read static shapes only.

>>> from tilecraft.relay.ir import TensorType, Attrs
>>> broadcast_rel("add", [TensorType((4, 1)), TensorType((3,))], Attrs())
TensorType(shape=(4, 3), dtype='float32')
"""
from __future__ import annotations

from ..ir import RelayError, TensorType, TupleType


def _tensor(op, ty, k=0) -> TensorType:
    if not isinstance(ty, TensorType):
        raise RelayError(f"{op}: argument {k} must be a tensor, got {ty}")
    return ty


def _same_dtype(op, types):
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1:
        raise RelayError(f"{op}: the arguments' dtypes differ ({', '.join(str(t) for t in types)}); "
                         "insert a cast")


def _axis(op, axis, ndim, what="axis") -> int:
    if not -ndim <= axis < ndim:
        raise RelayError(f"{op}: {what} {axis} is out of range for a {ndim}-d tensor")
    return axis % ndim


def broadcast_shapes(op, a: tuple, b: tuple) -> tuple:
    """numpy's broadcast of two shapes; an error names the operator and both shapes."""
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            raise RelayError(f"{op}: shapes {tuple(a)} and {tuple(b)} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out)


def unary_rel(op, types, attrs):
    return _tensor(op, types[0])


def broadcast_rel(op, types, attrs):
    a, b = _tensor(op, types[0]), _tensor(op, types[1], 1)
    _same_dtype(op, [a, b])
    return TensorType(broadcast_shapes(op, a.shape, b.shape), a.dtype)


def compare_rel(op, types, attrs):
    return TensorType(broadcast_rel(op, types, attrs).shape, "bool")


def logical_rel(op, types, attrs):
    for k, t in enumerate(types):
        if _tensor(op, t, k).dtype != "bool":
            raise RelayError(f"{op}: expects bool tensors, argument {k} is {t}")
    if len(types) == 1:
        return types[0]
    return TensorType(broadcast_shapes(op, types[0].shape, types[1].shape), "bool")


def clip_rel(op, types, attrs):
    x = _tensor(op, types[0])
    if attrs.a_min > attrs.a_max:
        raise RelayError(f"{op}: a_min {attrs.a_min} is greater than a_max {attrs.a_max}")
    return x


def broadcast_to_rel(op, types, attrs):
    x = _tensor(op, types[0])
    shape = broadcast_shapes(op, x.shape, tuple(attrs.shape))
    if shape != tuple(attrs.shape):
        raise RelayError(f"{op}: {x} does not broadcast to the shape {tuple(attrs.shape)} (it would be {shape})")
    return TensorType(shape, x.dtype)


def pad_rel(op, types, attrs):
    x = _tensor(op, types[0])
    pw = attrs.pad_width
    if len(pw) != x.ndim or any(len(p) != 2 or p[0] < 0 or p[1] < 0 for p in pw):
        raise RelayError(f"{op}: pad_width must be {x.ndim} pairs (before, after) of non-negative "
                         f"counts for {x}, got {pw}")
    return TensorType(tuple(d + b + a for d, (b, a) in zip(x.shape, pw)), x.dtype)


def layout_transform_rel(op, types, attrs):
    from tilecraft.topi.layout import transformed_shape
    x = _tensor(op, types[0])
    try:
        return TensorType(transformed_shape(x.shape, attrs.src_layout, attrs.dst_layout), x.dtype)
    except ValueError as e:
        raise RelayError(f"{op}: {x} from {attrs.src_layout} to {attrs.dst_layout}: {e}") from None


def conv2d_nchwc_rel(op, types, attrs):
    x, w = _tensor(op, types[0]), _tensor(op, types[1], 1)
    if x.ndim != 5 or w.ndim != 6 or x.shape[1] != w.shape[1] or x.shape[4] != w.shape[4]:
        raise RelayError(f"{op}: expects data [N, CI/ic, H, W, ic] and a kernel [CO/oc, CI/ic, KH, KW, ic, oc], "
                         f"got {x} and {w}")
    N, _, H, W, _ = x.shape
    COc, _, KH, KW, _, oc = w.shape
    sh, sw = attrs.strides
    pt, pl, pb, pr = attrs.padding
    OH, OW = (H + pt + pb - KH) // sh + 1, (W + pl + pr - KW) // sw + 1
    if OH <= 0 or OW <= 0:
        raise RelayError(f"{op}: the kernel {KH}x{KW} does not fit the padded input {H + pt + pb}x{W + pl + pr}")
    return TensorType((N, COc, OH, OW, oc), x.dtype)


def where_rel(op, types, attrs):
    c, a, b = (_tensor(op, t, k) for k, t in enumerate(types))
    if c.dtype != "bool":
        raise RelayError(f"{op}: the condition must be bool, got {c.dtype}")
    _same_dtype(op, [a, b])
    return TensorType(broadcast_shapes(op, broadcast_shapes(op, c.shape, a.shape), b.shape), a.dtype)


def cast_rel(op, types, attrs):
    return TensorType(_tensor(op, types[0]).shape, attrs.dtype)


def bias_add_rel(op, types, attrs):
    x, b = _tensor(op, types[0]), _tensor(op, types[1], 1)
    axis = _axis(op, attrs.axis, x.ndim)
    if b.shape != (x.shape[axis],):
        raise RelayError(f"{op}: the bias must have shape ({x.shape[axis]},) (axis {axis} of {x}), got {b}")
    return x


def conv2d_rel(op, types, attrs):
    x, w = _tensor(op, types[0]), _tensor(op, types[1], 1)
    nhwc = attrs.data_layout == "NHWC"
    if (attrs.data_layout, attrs.kernel_layout) not in (("NCHW", "OIHW"), ("NHWC", "OHWI")):
        raise RelayError(f"{op}: data_layout/kernel_layout must be NCHW/OIHW or NHWC/OHWI, got "
                         f"{attrs.data_layout}/{attrs.kernel_layout}")
    if x.ndim != 4 or w.ndim != 4:
        raise RelayError(f"{op}: expects {'NHWC data and an OHWI' if nhwc else 'NCHW data and an OIHW'} kernel, "
                         f"got {x} and {w}")
    if nhwc:        # TensorCoreLayout's form (transform/tensorcore_layout.py)
        N, H, W, C = x.shape
        O, KH, KW, I = w.shape
    else:
        N, C, H, W = x.shape
        O, I, KH, KW = w.shape
    g = attrs.groups
    if C % g or O % g or I != C // g:
        raise RelayError(f"{op}: {C} input channels in {g} groups need a kernel of shape "
                         f"({O}, {C // g if g else '?'}, KH, KW), got {w.shape}")
    sh, sw = attrs.strides
    dh, dw = attrs.dilation
    pt, pl, pb, pr = attrs.padding
    OH = (H + pt + pb - (KH - 1) * dh - 1) // sh + 1
    OW = (W + pl + pr - (KW - 1) * dw - 1) // sw + 1
    if OH <= 0 or OW <= 0:
        raise RelayError(f"{op}: the kernel {KH}x{KW} (dilation {dh}x{dw}) does not fit the padded "
                         f"input {H + pt + pb}x{W + pl + pr}")
    return TensorType((N, OH, OW, O) if nhwc else (N, O, OH, OW), x.dtype)


def dense_rel(op, types, attrs):
    x, w = _tensor(op, types[0]), _tensor(op, types[1], 1)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
        raise RelayError(f"{op}: expects data [M, K] and weight [N, K], got {x} and {w}")
    _same_dtype(op, [x, w])
    return TensorType((x.shape[0], w.shape[0]), x.dtype)


def dense_pack_rel(op, types, attrs):
    x, w = _tensor(op, types[0]), _tensor(op, types[1], 1)
    if x.ndim != 2 or w.ndim != 3 or x.shape[1] != w.shape[1]:
        raise RelayError(f"{op}: expects data [M, K] and a packed weight [N / nr, K, nr], got {x} and {w}")
    _same_dtype(op, [x, w])
    return TensorType((x.shape[0], w.shape[0] * w.shape[2]), x.dtype)


def batch_matmul_rel(op, types, attrs):
    x, y = _tensor(op, types[0]), _tensor(op, types[1], 1)
    if x.ndim != 3 or y.ndim != 3:
        raise RelayError(f"{op}: expects two 3-d tensors, got {x} and {y}")
    B1, M, K = (x.shape[0], x.shape[2], x.shape[1]) if attrs.transpose_a else x.shape
    B2, N, K2 = y.shape if attrs.transpose_b else (y.shape[0], y.shape[2], y.shape[1])
    if K != K2 or (B1 != B2 and 1 not in (B1, B2)):
        raise RelayError(f"{op}: shapes {x.shape} and {y.shape} do not multiply "
                         f"(transpose_a={attrs.transpose_a}, transpose_b={attrs.transpose_b})")
    return TensorType((max(B1, B2), M, N), x.dtype)


def attention_rel(op, types, attrs):
    """``nn.contrib_attention``: q, k, v ``[S, W]`` of one dtype, each holding ``heads × head_dim``
    columns from its offset; the result ``[S, heads, head_dim]``."""
    ts = [_tensor(op, t, k) for k, t in enumerate(types)]
    width = attrs.heads * attrs.head_dim
    for name, t, off in zip("qkv", ts, attrs.offsets):
        if t.ndim != 2 or t.shape[0] != ts[0].shape[0] or off < 0 or off + width > t.shape[1]:
            raise RelayError(f"{op}: {name} must be [S, W] with {attrs.heads} heads x {attrs.head_dim} columns "
                             f"from column {off}, got {t} (S = {ts[0].shape[0]})")
    _same_dtype(op, ts)
    return TensorType((ts[0].shape[0], attrs.heads, attrs.head_dim), ts[0].dtype)


def _pool_block(op, x, layout: str):
    """The channel block of a pooling operator's layout (None for NCHW), checked against ``x``."""
    from tilecraft.topi.layout import block_factor
    if layout == "NHWC":                     # TensorCoreLayout's, on the GPU: no channel block
        if x.ndim != 4:
            raise RelayError(f"{op}: expects NHWC data, got {x}")
        return None
    try:
        block = block_factor(layout)
    except ValueError:
        raise RelayError(f"{op}: layout must be NCHW, NHWC or NCHW<x>c, got {layout!r}") from None
    if x.ndim != (4 if block is None else 5) or (block is not None and x.shape[-1] != block):
        raise RelayError(f"{op}: expects {layout} data, got {x}")
    return block


def pool2d_rel(op, types, attrs):
    x = _tensor(op, types[0])
    block = _pool_block(op, x, attrs.layout)
    N, C, H, W = x.shape[:4] if attrs.layout != "NHWC" else (x.shape[0], x.shape[3], x.shape[1], x.shape[2])
    KH, KW = attrs.pool_size
    sh, sw = attrs.strides
    dh, dw = attrs.dilation
    pt, pl, pb, pr = attrs.padding
    OH = (H + pt + pb - (KH - 1) * dh - 1) // sh + 1
    OW = (W + pl + pr - (KW - 1) * dw - 1) // sw + 1
    if OH <= 0 or OW <= 0:
        raise RelayError(f"{op}: the window {KH}x{KW} does not fit the padded input {H + pt + pb}x{W + pl + pr}")
    if attrs.layout == "NHWC":
        return TensorType((N, OH, OW, C), x.dtype)
    return TensorType((N, C, OH, OW) + (() if block is None else (block,)), x.dtype)


def global_pool_rel(op, types, attrs):
    x = _tensor(op, types[0])
    block = _pool_block(op, x, attrs.layout)
    if attrs.layout == "NHWC":
        return TensorType((x.shape[0], 1, 1, x.shape[3]), x.dtype)
    return TensorType(x.shape[:2] + (1, 1) + (() if block is None else (block,)), x.dtype)


def softmax_rel(op, types, attrs):
    x = _tensor(op, types[0])
    _axis(op, attrs.axis, x.ndim)
    return x


def layer_norm_rel(op, types, attrs):
    x, g, b = (_tensor(op, t, k) for k, t in enumerate(types))
    axis = _axis(op, attrs.axis, x.ndim)
    if axis != x.ndim - 1:
        raise RelayError(f"{op}: only the last axis is normalised so far, got axis {attrs.axis} of {x}")
    for name, t in (("gamma", g), ("beta", b)):
        if t.shape != (x.shape[axis],):
            raise RelayError(f"{op}: {name} must have shape ({x.shape[axis]},), got {t}")
    return x


def batch_norm_rel(op, types, attrs):
    x = _tensor(op, types[0])
    axis = _axis(op, attrs.axis, x.ndim)
    for name, t in zip(("gamma", "beta", "moving_mean", "moving_var"), types[1:]):
        if _tensor(op, t).shape != (x.shape[axis],):
            raise RelayError(f"{op}: {name} must have shape ({x.shape[axis]},), got {t}")
    c = TensorType((x.shape[axis],), x.dtype)
    return TupleType((x, c, c))


def reshape_rel(op, types, attrs):
    x = _tensor(op, types[0])
    shape = tuple(attrs.newshape)
    if any(d < 0 for d in shape) or _prod(shape) != x.size:
        raise RelayError(f"{op}: cannot reshape {x} ({x.size} elements) to {shape}")
    return TensorType(shape, x.dtype)


def batch_flatten_rel(op, types, attrs):
    x = _tensor(op, types[0])
    return TensorType((x.shape[0], _prod(x.shape[1:])), x.dtype)


def transpose_rel(op, types, attrs):
    x = _tensor(op, types[0])
    axes = attrs.axes if attrs.axes is not None else tuple(range(x.ndim))[::-1]
    if sorted(a % x.ndim for a in axes) != list(range(x.ndim)) or len(axes) != x.ndim:
        raise RelayError(f"{op}: axes {tuple(axes)} are not a permutation of {x.ndim} axes")
    return TensorType(tuple(x.shape[a % x.ndim] for a in axes), x.dtype)


def expand_dims_rel(op, types, attrs):
    x = _tensor(op, types[0])
    axis = _axis(op, attrs.axis, x.ndim + 1)
    return TensorType(x.shape[:axis] + (1,) * attrs.num_newaxis + x.shape[axis:], x.dtype)


def squeeze_rel(op, types, attrs):
    x = _tensor(op, types[0])
    axes = [k for k, d in enumerate(x.shape) if d == 1] if attrs.axis is None else \
        [_axis(op, a, x.ndim) for a in attrs.axis]
    for a in axes:
        if x.shape[a] != 1:
            raise RelayError(f"{op}: axis {a} of {x} has extent {x.shape[a]}, not 1")
    return TensorType(tuple(d for k, d in enumerate(x.shape) if k not in axes), x.dtype)


def concatenate_rel(op, types, attrs):
    (tup,) = types
    if not isinstance(tup, TupleType) or not tup.fields:
        raise RelayError(f"{op}: expects a tuple of tensors, got {tup}")
    first = _tensor(op, tup.fields[0])
    axis = _axis(op, attrs.axis, first.ndim)
    _same_dtype(op, tup.fields)
    for t in tup.fields:
        t = _tensor(op, t)
        if t.ndim != first.ndim or any(a != b for k, (a, b) in enumerate(zip(t.shape, first.shape)) if k != axis):
            raise RelayError(f"{op}: {t} and {first} differ outside axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in tup.fields)
    return TensorType(tuple(shape), first.dtype)


def strided_slice_rel(op, types, attrs):
    x = _tensor(op, types[0])
    axes = attrs.axes if attrs.axes is not None else tuple(range(len(attrs.begin)))
    shape = list(x.shape)
    for a, b, e, s in zip(axes, attrs.begin, attrs.end, attrs.strides):
        a = _axis(op, a, x.ndim)
        if s == 0:
            raise RelayError(f"{op}: a step of 0 on axis {a}")
        if not (0 <= b <= shape[a] and -1 <= e <= shape[a]):
            raise RelayError(f"{op}: begin {b} / end {e} outside axis {a} of {x} (normalise them first)")
        shape[a] = max(0, -(-(e - b) // s)) if s > 0 else max(0, -(-(b - e) // -s))
    return TensorType(tuple(shape), x.dtype)


def take_rel(op, types, attrs):
    x, ind = _tensor(op, types[0]), _tensor(op, types[1], 1)
    if not ind.dtype.startswith("int"):
        raise RelayError(f"{op}: indices must be integers, got {ind}")
    axis = _axis(op, attrs.axis, x.ndim)
    return TensorType(x.shape[:axis] + ind.shape + x.shape[axis + 1:], x.dtype)


def reduce_rel(op, types, attrs):
    x = _tensor(op, types[0])
    axes = range(x.ndim) if attrs.axis is None else [_axis(op, a, x.ndim) for a in attrs.axis]
    axes = set(axes)
    if attrs.keepdims:
        return TensorType(tuple(1 if k in axes else d for k, d in enumerate(x.shape)), x.dtype)
    return TensorType(tuple(d for k, d in enumerate(x.shape) if k not in axes), x.dtype)


def _prod(shape) -> int:
    out = 1
    for d in shape:
        out *= int(d)
    return out
