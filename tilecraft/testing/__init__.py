"""Test helpers: ``tilecraft.testing.assert_allclose(actual, desired, rtol, atol)``.

Accepts NDArrays, numpy arrays and anything ``np.asarray`` takes, and reports the worst element.
``poison(shape, dtype, variant)`` makes an output buffer no correct kernel leaves as it is, and
``random_array(rng, shape, dtype)`` inputs that are never all zeros (the test suite's habits).
``sum_tolerance(terms, axis)`` is how far two float sums of the same terms may be apart.

``assert_sum_close(got, want, terms_abs_sum, n_terms)`` checks a floating-point reduction
against a float64 reference within the error that *any* order of its additions may make
(``sum_error_bound``): a fixed ``rtol`` fails when the terms cancel (a result near zero carries
the rounding error of terms far larger than itself), a fixed ``atol`` is too loose for small
sums and too tight for long ones.

TVM's helpers that its unit tests call (``device_enabled``, ``requires_gpu``/``requires_cuda``/
``requires_tensorcore``, ``uses_gpu``, ``skip_if_wheel_test``, ``check_numerical_grads``) are in
``tvm_helpers.py``; TVM's AutoTVM helpers (``tvm.testing.autotvm``) are ``testing/autotune.py``.

>>> import numpy as np
>>> assert_allclose(np.ones(3), [1.0, 1.0, 1.0 + 1e-9])
"""
from __future__ import annotations

import numpy as np

from .tvm_helpers import (check_numerical_grads, device_enabled, requires_cuda,  # noqa: F401  (tvm.testing.X)
                          requires_gpu, requires_tensorcore, skip_if_wheel_test, uses_gpu)


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

    >>> c = poison((4,), "float32")      # then f(a, b, c) and compare
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
    orders, or one of them and the exact sum: twice ``sum_error_bound`` of n + 1 terms, about
    ``(n + 1) * eps * (sum(|terms|) + |extra|)`` for n
    terms (``extra``: a start value added too), ``eps`` of ``dtype`` (default: the terms' dtype).

    Any order of n - 1 additions is within ``(n - 1) * eps / 2 * sum(|terms|)`` of the exact sum
    (the classical bound, to first order), so this bounds the difference between a vectorized
    sum (lanes, then a tree), a sequential one and a float64 reference rounded once. It is
    relative to the sum of magnitudes, not to the result, which cancellation can make tiny.
    Use it as ``atol`` with ``rtol=0``.

    >>> a = np.random.default_rng(0).uniform(-1, 1, (4, 100)).astype("float32")
    >>> bool((abs(a.sum(1) - a.astype("float64").sum(1)) <= sum_tolerance(a, axis=1)).all())
    True
    """
    t = np.asarray(terms)
    dtype = np.dtype(dtype or t.dtype)
    n = t.size if axis is None else t.shape[axis]
    magnitude = np.abs(t.astype(np.float64)).sum(axis=axis) + abs(float(extra))
    # two sums, each within sum_error_bound of the exact one (n terms and the start value)
    return 2 * sum_error_bound(magnitude, n + 1, dtype) + np.finfo(dtype).tiny


def unit_roundoff(dtype) -> float:
    """Half the distance from 1.0 to the next number of a float ``dtype`` (2**-24 for float32):
    the largest relative error of one correctly rounded operation."""
    return float(np.finfo(np.dtype(dtype)).eps) / 2


def sum_error_bound(terms_abs_sum, n_terms: int, dtype="float32"):
    """The largest error of a sum of ``n_terms`` terms computed in ``dtype``, in any order of
    additions (sequential, pairwise, split, vectorized, rfactor): ``gamma_n * sum |terms|`` with
    ``gamma_n = n u / (1 - n u)``, ``u`` the unit roundoff (Higham, *Accuracy and Stability of
    Numerical Algorithms*, 2nd ed., section 4.2; ``n`` rather than ``n - 1`` also covers the
    rounding of each term when it is a product, as in a dot product). Count a reduction's
    ``init`` as a term, and add one per further rounding of a term (``A[k] * B[k] + C[k]``: 2).

    >>> f"{float(sum_error_bound(100.0, 10)):.3g}"      # ten float32 terms whose |values| sum to 100
    '5.96e-05'
    """
    nu = n_terms * unit_roundoff(dtype)
    if nu >= 1:
        raise ValueError(f"{n_terms} terms in {np.dtype(dtype).name}: no error bound (n * u >= 1)")
    return nu / (1 - nu) * np.asarray(terms_abs_sum, dtype=np.float64)


def assert_sum_close(got, want, terms_abs_sum, n_terms: int, dtype=None, err_msg: str = "") -> None:
    """Check sums (reductions) ``got`` against ``want``, computed in float64 from the same terms:
    ``|got - want| <= sum_error_bound(terms_abs_sum, n_terms, dtype)`` elementwise, plus the
    rounding to ``got``'s dtype when that is narrower than ``dtype`` (the accumulator's; default:
    ``got``'s). ``terms_abs_sum`` (broadcast to ``got``) is the sum of the terms' absolute values,
    in float64. The bound holds for every order of additions, so the check fails only on a real
    error: a term dropped, counted twice or wrong by more than the rounding of the whole sum.

    >>> a = np.random.default_rng(0).uniform(-1, 1, (4, 300)).astype("float32")
    >>> assert_sum_close(a.sum(1), a.astype("float64").sum(1), np.abs(a).sum(1, dtype="float64"), 300)
    """
    g, w = _as_numpy(got), _as_numpy(want)
    if g.shape != w.shape:
        raise AssertionError(f"shape mismatch: got {g.shape}, want {w.shape}")
    if g.dtype.kind != "f":
        raise TypeError(f"assert_sum_close checks floating-point sums, got dtype {g.dtype}; compare "
                        "integer sums exactly")
    acc = np.dtype(dtype) if dtype is not None else g.dtype
    bound = np.broadcast_to(sum_error_bound(terms_abs_sum, n_terms, acc), g.shape)
    w64 = w.astype(np.float64)
    if unit_roundoff(g.dtype) > unit_roundoff(acc):        # stored narrower than accumulated
        bound = bound + unit_roundoff(g.dtype) * (np.abs(w64) + bound)
    err = np.abs(g.astype(np.float64) - w64)
    bad = ~(err <= bound)                                  # NaN is bad
    if bad.any():
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(bad, np.nan_to_num(err / bound, nan=np.inf), -1.0)    # NaN and 0 bounds rank first
        at = tuple(int(k) for k in np.unravel_index(int(np.argmax(ratio)), g.shape))
        raise AssertionError(
            (err_msg + ": " if err_msg else "") +
            f"{int(bad.sum())} of {bad.size} sums differ by more than the rounding error of "
            f"{n_terms} terms in {acc.name}; worst at index {at}: got {g[at]!s}, want {float(w64[at])!r}, "
            f"error {float(err[at]):.3g} > bound {float(bound[at]):.3g} (sum of |terms| "
            f"{float(np.broadcast_to(terms_abs_sum, g.shape)[at]):.3g})")
