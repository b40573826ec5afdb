"""Test helpers: ``tilecraft.testing.assert_allclose(actual, desired, rtol, atol)``.

Accepts NDArrays, numpy arrays and anything ``np.asarray`` takes, and reports the worst element.
``poison(shape, dtype, variant)`` makes an output buffer no correct kernel leaves as it is, and
``random_array(rng, shape, dtype)`` inputs that are never all zeros (the test suite's habits).
``sum_tolerance(terms, axis)`` is how far two float sums of the same terms may be apart.

>>> import numpy as np
>>> assert_allclose(np.ones(3), [1.0, 1.0, 1.0 + 1e-9])
"""
from __future__ import annotations

import numpy as np


def _as_numpy(x) -> np.ndarray:
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        return x.numpy()
    return np.asarray(x)


def assert_allclose(actual, desired, rtol: float = 1e-7, atol: float = 1e-7) -> None:
    """Like ``np.testing.assert_allclose`` but also takes ``tilecraft.nd`` arrays (TVM's default
    tolerances: rtol=atol=1e-7). Shapes must match exactly."""
    a, d = _as_numpy(actual), _as_numpy(desired)
    if a.shape != d.shape:
        raise AssertionError(f"shape mismatch: actual {a.shape}, desired {d.shape}")
    np.testing.assert_allclose(a, d, rtol=rtol, atol=atol, verbose=True)


def assert_array_equal(actual, desired) -> None:
    """Exact comparison, for integer and bool results."""
    np.testing.assert_array_equal(_as_numpy(actual), _as_numpy(desired))


INT_SENTINEL = 0x5A   # fits every integer dtype, unlikely as a result


def poison(shape, dtype, variant: int = 0) -> np.ndarray:
    """An output buffer filled with a sentinel (variant 0: NaN / 0x5A / False, variant 1:
    1e30 / 0x25 / True). A run on each variant that gives the same result has written every
    element.

    >>> c = poison((4,), "float32"); f(a, b, c)
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.full(shape, (np.nan, 1e30 if dtype.itemsize > 2 else 6e4)[variant], dtype)
    if dtype.kind == "b":
        return np.full(shape, bool(variant), dtype)
    return np.full(shape, (INT_SENTINEL, 0x25)[variant], dtype)


def random_array(rng, shape, dtype, low=-1.0, high=1.0) -> np.ndarray:
    """Random values that are never all zeros: floats in [low, high), ints in [low, high].

    >>> a = random_array(np.random.default_rng(0), (3, 4), "int8", -5, 5)
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.uniform(low, high, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)


def sum_tolerance(terms, axis=None, extra: float = 0.0, dtype=None):
    """How far apart two float sums of ``terms`` (along ``axis``) may be when they add in different
    orders, or one of them and the exact sum: ``(n + 1) * eps * (sum(|terms|) + |extra|)`` for n
    terms (``extra``: a start value added too), ``eps`` of ``dtype`` (default: the terms' dtype).

    Any order of n - 1 additions is within ``(n - 1) * eps / 2 * sum(|terms|)`` of the exact sum
    (the classical bound, to first order), so this bounds the difference between a vectorized
    sum (lanes, then a tree), a sequential one and a float64 reference rounded once. It is
    relative to the sum of magnitudes, not to the result, which cancellation can make tiny.
    Use it as ``atol`` with ``rtol=0``.

    >>> a = np.random.default_rng(0).uniform(-1, 1, (4, 100)).astype("float32")
    >>> np.testing.assert_allclose(a.sum(1), a.astype("float64").sum(1), rtol=0,
    ...                            atol=sum_tolerance(a, axis=1))
    """
    t = np.asarray(terms)
    dtype = np.dtype(dtype or t.dtype)
    n = t.size if axis is None else t.shape[axis]
    magnitude = np.abs(t.astype(np.float64)).sum(axis=axis) + abs(float(extra))
    return (n + 1) * np.finfo(dtype).eps * magnitude + np.finfo(dtype).tiny
