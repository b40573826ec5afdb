"""TVM's topi names that its tuning tutorials use: ``topi.nn.conv2d_nchw`` with TVM's argument
forms (int or pair stride and dilation, int / pair / 4-tuple / "SAME" / "VALID" padding,
``out_dtype``) and ``topi.testing.conv2d_nchw_python``, checked against each other, against the
reference interpreter and against a direct numpy loop."""
import numpy as np
import pytest

from tilecraft import interp, te, topi
import tilecraft.topi.utils  # noqa: F401  (topi.utils, as TVM scripts reach it)
from tilecraft.topi.nn import pad_tuple
from tilecraft.topi.testing import conv2d_nchw_python


def _direct(a, w, stride, pads):
    """A plain loop nest: the definition of a convolution, no slicing tricks."""
    pt, pl, pb, pr = pads
    N, C, H, W = a.shape
    CO, _, KH, KW = w.shape
    ap = np.zeros((N, C, H + pt + pb, W + pl + pr))
    ap[:, :, pt:pt + H, pl:pl + W] = a
    OH = (H + pt + pb - KH) // stride + 1
    OW = (W + pl + pr - KW) // stride + 1
    out = np.zeros((N, CO, OH, OW))
    for co in range(CO):
        for y in range(OH):
            for x in range(OW):
                out[:, co, y, x] = (ap[:, :, y * stride:y * stride + KH, x * stride:x * stride + KW]
                                    * w[co]).sum(axis=(1, 2, 3))
    return out


@pytest.mark.parametrize("stride, padding, pads", [
    (1, 1, (1, 1, 1, 1)), ((1, 1), (1, 2), (1, 2, 1, 2)), (2, (0, 1, 2, 1), (0, 1, 2, 1)),
    (1, "SAME", (1, 1, 1, 1)), (2, "VALID", (0, 0, 0, 0))])
def test_conv2d_nchw_tvm_arguments(rng, stride, padding, pads):
    a = rng.standard_normal((1, 3, 7, 6)).astype("float32")
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    want = _direct(a, w, stride if isinstance(stride, int) else stride[0], pads)
    np.testing.assert_allclose(conv2d_nchw_python(a, w, stride, padding), want, rtol=1e-5, atol=1e-5)
    A = te.placeholder(a.shape, name="A")
    W = te.placeholder(w.shape, name="W")
    C = topi.nn.conv2d_nchw(A, W, stride, padding, dilation=1, out_dtype="float32")
    assert topi.utils.get_const_tuple(C.shape) == want.shape
    got = interp.evaluate(C, {A: a, W: w})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv2d_nchw_out_dtype_widens(rng):
    a = rng.integers(-128, 128, (1, 2, 5, 5)).astype("int8")
    w = rng.integers(-128, 128, (2, 2, 3, 3)).astype("int8")
    A = te.placeholder(a.shape, "int8", name="A")
    W = te.placeholder(w.shape, "int8", name="W")
    C = topi.nn.conv2d_nchw(A, W, 1, 0, 1, out_dtype="int32")
    assert C.dtype == "int32"
    got = interp.evaluate(C, {A: a, W: w})
    np.testing.assert_array_equal(got, _direct(a.astype("int64"), w.astype("int64"), 1, (0,) * 4))


def test_pad_tuple_same_puts_the_odd_pixel_last():
    assert pad_tuple("SAME", (4, 2)) == (1, 0, 2, 1)
    assert pad_tuple((1, 2), (3, 3)) == (1, 2, 1, 2)


@pytest.mark.parametrize("bad, msg", [("FULL", "padding must be an int, a tuple, 'SAME' or 'VALID'"),
                                      ((1, 2, 3), "padding must be an int, a pair or a 4-tuple")])
def test_pad_tuple_errors(bad, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(")):
        pad_tuple(bad, (3, 3))


def test_conv2d_nchw_stride_error():
    A = te.placeholder((1, 1, 4, 4), name="A")
    W = te.placeholder((1, 1, 3, 3), name="W")
    with pytest.raises(ValueError, match="conv2d_nchw: the stride must be an int or a pair"):
        topi.nn.conv2d_nchw(A, W, (1, 1, 1), 0)


def test_topi_testing_schedule_dispatch(rng):
    """TVM's ``topi.testing.get_*_schedule(target)`` / ``get_conv2d_nchw_implement``: the CUDA
    names for "cuda", the generic ones otherwise; the CPU pair built and run against numpy."""
    import tilecraft as tvm
    assert topi.testing.get_broadcast_schedule("cuda") is topi.cuda.schedule_injective
    assert topi.testing.get_reduce_schedule(tvm.target.Target("cuda")) is topi.cuda.schedule_reduce
    assert topi.testing.get_elemwise_schedule("llvm") is topi.generic.schedule_injective
    assert topi.testing.get_conv2d_nchw_implement("cuda")[1] is topi.cuda.schedule_conv2d_nchw
    conv2d_nchw, schedule = topi.testing.get_conv2d_nchw_implement("llvm")
    a = rng.standard_normal((1, 3, 9, 9)).astype("float32")
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    with tvm.target.Target("llvm"):
        A = te.placeholder(a.shape, name="A")
        W = te.placeholder(w.shape, name="W")
        B = conv2d_nchw(A, W, (2, 2), (1, 1), (1, 1), "float32")     # TVM's positional out_dtype
        C = B + 10.0
        s = schedule([C])
    out = np.full(topi.utils.get_const_tuple(C.shape), np.nan, "float32")
    tvm.build(s, [A, W, C], "llvm")(a, w, out)
    np.testing.assert_allclose(out, conv2d_nchw_python(a, w, 2, 1) + 10, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pool_type, include_pad", [("max", True), ("avg", True), ("avg", False)])
def test_pooling_pool2d_tvm_signature(rng, pool_type, include_pad):
    """``topi.nn.pooling.pool2d`` (TVM's module path and argument order) against a numpy loop:
    3x3 windows, stride 2, padding (1, 0, 1, 1), dilation 1; TVM's default counts the padding."""
    from tilecraft.topi.nn.pooling import pool2d
    a = rng.standard_normal((2, 3, 9, 8)).astype("float32")
    A = te.placeholder(a.shape, name="A")
    P = pool2d(A, kernel=(3, 3), stride=(2, 2), dilation=(1, 1), padding=(1, 0, 1, 1), pool_type=pool_type,
               count_include_pad=include_pad)
    fill = -np.inf if pool_type == "max" else 0.0
    ap = np.pad(a.astype("float64"), ((0, 0), (0, 0), (1, 1), (0, 1)), constant_values=fill)
    inside = np.pad(np.ones(a.shape[2:]), ((1, 1), (0, 1)))
    OH, OW = (9 + 2 - 3) // 2 + 1, (8 + 1 - 3) // 2 + 1
    want = np.zeros((2, 3, OH, OW))
    for y in range(OH):
        for x in range(OW):
            win = ap[:, :, 2 * y:2 * y + 3, 2 * x:2 * x + 3]
            if pool_type == "max":
                want[:, :, y, x] = win.max(axis=(2, 3))
            else:
                n = 9 if include_pad else inside[2 * y:2 * y + 3, 2 * x:2 * x + 3].sum()
                want[:, :, y, x] = win.sum(axis=(2, 3)) / n
    assert topi.utils.get_const_tuple(P.shape) == want.shape
    np.testing.assert_allclose(interp.evaluate(P, {A: a}), want, rtol=1e-5, atol=1e-6)


def test_pooling_pool2d_errors():
    from tilecraft.topi.nn.pooling import pool2d
    A = te.placeholder((1, 1, 4, 4), name="A")
    with pytest.raises(ValueError, match="topi.nn.pooling.pool2d: ceil_mode=True is not supported"):
        pool2d(A, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "max", ceil_mode=True)
    with pytest.raises(ValueError, match="only the NCHW layout is supported, got 'NHWC'"):
        pool2d(A, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "max", layout="NHWC")
