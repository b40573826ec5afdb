"""Shared test machinery.

* ``--update-golden`` rewrites the golden files under ``tests/golden/`` instead of comparing.
* ``rng``: a fresh random generator per test. Its seed is printed (shown when the test fails);
  set ``TILECRAFT_TEST_SEED`` to replay a failure.
* ``rand(shape, dtype, low, high)``: random arrays from ``rng``.
* ``check_llvm``: build a schedule for the CPU with bound checks (an out-of-bounds access
  raises instead of reading garbage), run it twice on the given inputs with every output
  poisoned first (two different sentinels: NaN/1e30 for floats, two integers, False/True),
  require both runs to agree, and compare each output with the reference interpreter and, when
  given, with a hand-written numpy result; the build without checks (what users run) is run
  once and compared with the interpreter too.
"""
from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

GOLDEN_DIR = pathlib.Path(__file__).parent / "golden"
INT_SENTINEL = 0x5A   # fits every integer dtype, unlikely as a result


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/*.txt from the current output instead of comparing")


@pytest.fixture
def rng():
    seed = int(os.environ.get("TILECRAFT_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    print(f"random seed: {seed} (replay with TILECRAFT_TEST_SEED={seed})")
    return np.random.default_rng(seed)


@pytest.fixture
def rand(rng):
    """``rand(shape, dtype="float32", low=-1, high=1)``: fresh random values, never all zeros."""
    return lambda shape, dtype="float32", low=-1.0, high=1.0: random_array(rng, shape, dtype, low, high)


@pytest.fixture
def golden(request):
    """``golden("name", text)`` compares ``text`` with ``tests/golden/name.txt`` exactly."""
    update = request.config.getoption("--update-golden")

    def check(name: str, text: str):
        path = GOLDEN_DIR / f"{name}.txt"
        text = text.rstrip("\n") + "\n"
        if update:
            GOLDEN_DIR.mkdir(exist_ok=True)
            path.write_text(text)
            return
        if not path.exists():
            pytest.fail(f"no golden file {path}; create it with `pytest --update-golden`")
        expected = path.read_text()
        assert text == expected, (f"printed IR differs from {path} (refresh with --update-golden "
                                  f"if the change is intended)\n--- got ---\n{text}--- expected ---\n{expected}")
    return check


def poison(shape, dtype, variant: int = 0) -> np.ndarray:
    """An output buffer filled with a sentinel (variant 0: NaN / 0x5A / False, variant 1:
    1e30 / 0x25 / True). A run on each variant that gives the same result has written every
    element."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.full(shape, (np.nan, 1e30 if dtype.itemsize > 2 else 6e4)[variant], dtype)
    if dtype.kind == "b":
        return np.full(shape, bool(variant), dtype)
    return np.full(shape, (INT_SENTINEL, 0x25)[variant], dtype)


def random_array(rng, shape, dtype, low=-1.0, high=1.0) -> np.ndarray:
    """Random values that are never all zeros: floats in [low, high), ints in [low, high]."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.uniform(low, high, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)


def run_llvm(s, args, inputs: dict, name="f", scalars=None):
    """Build ``s`` for ``llvm`` twice, bounds-checked (``tir.instrument_bound_checkers``: an
    out-of-bounds access raises ``KernelIndexError``) and as users build it. The checked build
    runs on both poisons, which must agree exactly; the plain one on the first poison. Returns
    ``({output tensor: array} of the checked build, the same of the plain build)`` for every
    argument that is not an input."""
    import tilecraft
    from tilecraft.interp import evaluate
    from tilecraft.ir.expr import Var

    scalars = scalars or {}
    with tilecraft.transform.PassContext(config={"tir.instrument_bound_checkers": True}):
        checked = tilecraft.build(s, args, target="llvm", name=name)
    plain = tilecraft.build(s, args, target="llvm", name=name)
    outs = [a for a in args if not isinstance(a, Var) and a not in inputs]
    shapes = evaluate(outs, {**inputs, **scalars})
    results = []
    for f, variant in ((checked, 0), (checked, 1), (plain, 0)):
        call, got = [], {}
        for a in args:
            if isinstance(a, Var):
                call.append(scalars[a])
            elif a in inputs:
                call.append(inputs[a])
            else:
                got[a] = poison(shapes[outs.index(a)].shape, a.dtype, variant)
                call.append(got[a])
        f(*call)
        results.append(got)
    for t in outs:
        same = np.array_equal(results[0][t], results[1][t], equal_nan=results[0][t].dtype.kind == "f")
        assert same, (f"'{t.name}' differs between two runs on differently poisoned outputs: some "
                      f"elements are not written (or the result is not deterministic)")
    return results[0], results[2]


@pytest.fixture
def check_llvm():
    """``check_llvm(s, args, inputs, expected={T: numpy_result}, rtol=, atol=)``: build, run on
    poisoned outputs, compare every output with the interpreter and with ``expected``."""
    from tilecraft.interp import evaluate

    def check(s, args, inputs, expected=None, rtol=1e-5, atol=1e-5, scalars=None, name="f"):
        got, plain = run_llvm(s, args, inputs, name=name, scalars=scalars)
        outs = list(got)
        ref = dict(zip(outs, evaluate(outs, {**inputs, **(scalars or {})})))
        for t in outs:
            np.testing.assert_allclose(got[t], ref[t], rtol=rtol, atol=atol, equal_nan=False,
                                       err_msg=f"compiled '{t.name}' differs from the interpreter")
            np.testing.assert_allclose(plain[t], ref[t], rtol=rtol, atol=atol, equal_nan=False,
                                       err_msg=f"compiled '{t.name}' (without bound checks) differs "
                                               f"from the interpreter")
        for t, want in (expected or {}).items():
            np.testing.assert_allclose(ref[t], want, rtol=rtol, atol=atol, equal_nan=False,
                                       err_msg=f"interpreter's '{t.name}' differs from numpy")
            np.testing.assert_allclose(got[t], want, rtol=rtol, atol=atol, equal_nan=False,
                                       err_msg=f"compiled '{t.name}' differs from numpy")
        return got
    return check
