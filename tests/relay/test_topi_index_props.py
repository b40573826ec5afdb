"""Property tests of the index arithmetic of the graph level's injective computes (reshape,
transpose, strided_slice, concatenate, take, broadcasting, pooling windows): random shapes and
parameters, evaluated by the reference interpreter, against numpy."""
import numpy as np
from hypothesis import given, settings, strategies as st

from tilecraft import te
from tilecraft.interp import evaluate
from tilecraft.topi import nn as tnn
from tilecraft.topi import transform as tt

dims = st.lists(st.integers(1, 5), min_size=1, max_size=4)


def fed(shape, seed=0, dtype="float32"):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, shape).astype(dtype)


@settings(max_examples=40, deadline=None)
@given(dims, st.randoms(use_true_random=False))
def test_reshape(shape, rnd):
    size = int(np.prod(shape))
    factors = [d for d in range(1, size + 1) if size % d == 0]
    a = rnd.choice(factors)
    b = rnd.choice([d for d in range(1, size // a + 1) if (size // a) % d == 0])
    new = (a, b, size // a // b)
    A = te.placeholder(shape, name="A")
    x = fed(shape)
    np.testing.assert_array_equal(evaluate(tt.reshape(A, new), {A: x}), x.reshape(new))


@settings(max_examples=40, deadline=None)
@given(dims, st.randoms(use_true_random=False))
def test_transpose(shape, rnd):
    axes = list(range(len(shape)))
    rnd.shuffle(axes)
    A = te.placeholder(shape, name="A")
    x = fed(shape)
    np.testing.assert_array_equal(evaluate(tt.transpose(A, axes), {A: x}), x.transpose(axes))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(-12, 12), st.integers(-12, 12), st.sampled_from([1, 2, 3, -1, -2]))
def test_strided_slice_matches_python_slicing(n, begin, end, step):
    """Bounds normalised as the ONNX frontend does, then the compute, against x[begin:end:step]."""
    x = fed((2, n))
    b = begin + n if begin < 0 else begin
    e = end + n if end < 0 else end
    if step > 0:
        b, e = min(max(b, 0), n), min(max(e, 0), n)
    else:
        b, e = min(max(b, -1), n - 1), min(max(e, -1), n - 1)
    expected = x[:, begin:end:step]
    A = te.placeholder((2, n), name="A")
    out = tt.strided_slice(A, [b], [e], [step], axes=[1])
    if expected.shape[1] == 0:
        assert int(out.shape[1].value) == 0
        return
    np.testing.assert_array_equal(evaluate(out, {A: x}), expected)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.integers(0, 2))
def test_concatenate(sizes, axis):
    shapes = [tuple(s if k == axis else 3 for k in range(3)) for s in sizes]
    ts = [te.placeholder(s, name=f"T{k}") for k, s in enumerate(shapes)]
    xs = [fed(s, k) for k, s in enumerate(shapes)]
    np.testing.assert_array_equal(evaluate(tt.concatenate(ts, axis), dict(zip(ts, xs))), np.concatenate(xs, axis))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(0, 1), st.lists(st.integers(-6, 5), min_size=1, max_size=5))
def test_take(n, axis, idx):
    shape = (n, 3) if axis == 0 else (3, n)
    idx = np.array([i % n - (n if i < 0 else 0) for i in idx], "int64")    # in [-n, n)
    A = te.placeholder(shape, name="A")
    Ind = te.placeholder(idx.shape, dtype="int64", name="I")
    x = fed(shape)
    np.testing.assert_array_equal(evaluate(tt.take(A, Ind, axis), {A: x, Ind: idx}), np.take(x, idx, axis))


@settings(max_examples=40, deadline=None)
@given(dims, st.data())
def test_broadcast(shape, data):
    other = [data.draw(st.sampled_from([1, d])) for d in shape][data.draw(st.integers(0, len(shape) - 1)):]
    A = te.placeholder(shape, name="A")
    B = te.placeholder(other or [1], name="B")
    x, y = fed(shape), fed(other or [1], 1)
    np.testing.assert_array_equal(evaluate(tt.subtract(A, B), {A: x, B: y}), x - y)


@settings(max_examples=30, deadline=None)
@given(st.integers(3, 7), st.integers(1, 3), st.integers(1, 2), st.integers(0, 1), st.integers(0, 1))
def test_avg_pool_counts_only_the_window_inside(size, k, stride, pad_lo, pad_hi):
    """The divisor of an average without count_include_pad is the number of input elements in
    the window, at every output position."""
    if size + pad_lo + pad_hi < k:
        return
    A = te.placeholder((1, 1, size, size), name="A")
    out = tnn.pool2d(A, "avg", (k, k), (stride, stride), (pad_lo, pad_lo, pad_hi, pad_hi))
    x = np.ones((1, 1, size, size), "float32")
    o = int(out.shape[2].value)
    inside = np.array([any(0 <= y * stride - pad_lo + j < size for j in range(k)) for y in range(o)])
    expected = (inside[:, None] & inside[None, :]).astype("float32")[None, None]   # 0 where all is padding
    np.testing.assert_allclose(evaluate(out, {A: x}), expected, rtol=1e-6)
