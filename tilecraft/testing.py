"""Test helpers: ``tilecraft.testing.assert_allclose(actual, desired, rtol, atol)``.

Accepts NDArrays, numpy arrays and anything ``np.asarray`` takes, and reports the worst element.

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
