"""The suite's own comparison helpers (``tilecraft.testing``): ``assert_sum_close`` must accept
every correctly rounded order of a sum, however the terms cancel, and still catch a term that is
dropped, doubled or wrong."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tilecraft.testing import assert_sum_close, sum_error_bound, unit_roundoff


def _orders(x: np.ndarray, rng) -> list:
    """``x.sum()`` in float32 in several orders a compiler may pick."""
    seq = np.float32(0)
    for v in x:
        seq = np.float32(seq + v)
    rev = np.float32(0)
    for v in x[::-1]:
        rev = np.float32(rev + v)
    vals = list(x)                       # a random tree (rfactor, vector lanes, splits)
    while len(vals) > 1:
        i = int(rng.integers(len(vals) - 1))
        vals[i:i + 2] = [np.float32(vals[i] + vals[i + 1])]
    lanes = np.zeros(8, np.float32)      # eight vector lanes, then a horizontal sum
    for k, v in enumerate(x):
        lanes[k % 8] = np.float32(lanes[k % 8] + v)
    return [seq, rev, vals[0] if vals else np.float32(0), np.sum(x, dtype=np.float32), lanes.sum(dtype=np.float32)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, width=32), min_size=1, max_size=80), st.integers(0, 2**32 - 1))
def test_every_order_of_a_float32_sum_is_within_the_bound(terms, seed):
    x = np.array(terms, np.float32)
    x = np.concatenate([x, -x[: len(x) // 2] * np.float32(1.0000001)])      # heavy cancellation
    want = x.astype(np.float64).sum()
    abs_sum = np.abs(x.astype(np.float64)).sum()
    for got in _orders(x, np.random.default_rng(seed)):
        assert_sum_close(np.array([got]), np.array([want]), abs_sum, len(x))


def test_cancellation_that_an_rtol_rejects_is_accepted():
    """The flake of test_interpreter_starts_from_init (seed 3593342461, row 1): init 1 plus five
    terms summing to -0.965, in float32 as the interpreter adds them, against float64."""
    x = np.random.default_rng(3593342461).uniform(-1, 1, (4, 5)).astype(np.float32)[1]
    tree = np.float32(np.float32(x[0] + x[1]) + np.float32(x[2] + x[3])) + x[4]
    got = np.float32(1) + tree
    want = x.astype(np.float64).sum() + 1
    assert abs(got - want) > 1e-6 * abs(want)                    # what rtol=1e-6 rejected
    assert_sum_close(np.array([got]), np.array([want]), np.abs(x).sum(dtype=np.float64) + 1, 6)


def test_a_dropped_doubled_or_wrong_term_fails(rng):
    a = rng.uniform(-1, 1, (6, 40)).astype(np.float32)
    want = a.astype(np.float64).sum(1)
    abs_sum = np.abs(a).sum(1, dtype=np.float64)
    assert_sum_close(a.sum(1), want, abs_sum, 40)
    bound = sum_error_bound(abs_sum, 40)
    for row, change in ((1, -1), (3, +1)):            # one term dropped, one counted twice
        k = int(np.argmax(np.abs(a[row])))
        got = a.sum(1)
        got[row] += change * a[row, k]
        assert abs(a[row, k]) > bound[row]
        with pytest.raises(AssertionError, match=rf"1 of 6 sums differ by more than the rounding error of 40 "
                                                 rf"terms in float32; worst at index \({row},\)"):
            assert_sum_close(got, want, abs_sum, 40, err_msg="C")
    got = a.sum(1)
    got[4] = np.nan
    with pytest.raises(AssertionError, match=r"^C: 1 of 6 sums .* index \(4,\): got nan"):
        assert_sum_close(got, want, abs_sum, 40, err_msg="C")


def test_sums_stored_narrower_than_accumulated():
    """float16 inputs, float32 accumulation, a float16 result: the final rounding is allowed."""
    a = np.random.default_rng(5).uniform(-1, 1, (3, 64)).astype(np.float16)
    got = a.astype(np.float32).sum(1).astype(np.float16)
    want = a.astype(np.float64).sum(1)
    abs_sum = np.abs(a.astype(np.float64)).sum(1)
    assert_sum_close(got, want, abs_sum, 64, dtype="float32")
    with pytest.raises(AssertionError):
        assert_sum_close(got + np.float16(0.25), want, abs_sum, 64, dtype="float32")


def test_bad_calls_are_refused():
    with pytest.raises(AssertionError, match=r"shape mismatch: got \(3,\), want \(4,\)"):
        assert_sum_close(np.ones(3, np.float32), np.ones(4), np.ones(4), 2)
    with pytest.raises(TypeError, match="compare integer sums exactly"):
        assert_sum_close(np.ones(3, np.int32), np.ones(3), np.ones(3), 2)
    with pytest.raises(ValueError, match=r"no error bound \(n \* u >= 1\)"):
        sum_error_bound(1.0, 4096, "float16")
    assert unit_roundoff("float32") == 2.0 ** -24 and unit_roundoff("float16") == 2.0 ** -11


def test_the_testing_module_examples_run():
    """The docstring examples of tilecraft.testing (sum_tolerance's failed on numpy 2.4 unnoticed)."""
    import doctest
    import tilecraft.testing
    assert doctest.testmod(tilecraft.testing).failed == 0
