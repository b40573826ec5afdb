"""Shared test machinery.

* ``--update-golden`` rewrites the golden files under ``tests/golden/`` instead of comparing.
* ``--fuzz-cases N`` runs N random cases per program in the CPU fuzzers (a big run).
* ``rng``: a fresh random generator per test. Its seed is printed (shown when the test fails);
  set ``TILECRAFT_TEST_SEED`` to replay a failure. ``--seeds N`` runs each test that takes it
  with N fresh seeds (``--seeds 7,42``: those), to hunt for inputs that fail; ``--near-misses K``
  lists the K float comparisons that came closest to their tolerance.
* ``rand(shape, dtype, low, high)``: random arrays from ``rng``.
* ``check_llvm``: build a schedule for the CPU with bound checks (an out-of-bounds access
  raises instead of reading garbage), run it twice on the given inputs with every output
  poisoned first (two different sentinels: NaN/1e30 for floats, two integers, False/True),
  require both runs to agree, and compare each output with the reference interpreter and, when
  given, with a hand-written numpy result; the build without checks (what users run) is run
  once and compared with the interpreter too. Before that, when the loop nest is small
  (``PASS_CHECK_BUDGET`` loop iterations; ``passes=True`` always), it runs the lowered-IR
  interpreter after every pass of ``lower()`` and fails with "wrong after <pass>" and the IR
  before and after that pass (``check_passes``).
"""
from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

from tilecraft.testing import INT_SENTINEL, poison, random_array  # noqa: F401 -- the suite's helpers

GOLDEN_DIR = pathlib.Path(__file__).parent / "golden"
# check_llvm runs the lowered-IR interpreter after every pass when the loop nest runs at most
# this many iterations (about a microsecond each, per pass)
PASS_CHECK_BUDGET = 20_000


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/*.txt from the current output instead of comparing")
    parser.addoption("--fuzz-cases", type=int, default=None, metavar="N",
                     help="random cases per program in the CPU fuzzers (test_schedule_fuzz.py, "
                          "test_expr_fuzz.py) instead of their default slice")
    parser.addoption("--seeds", default=None, metavar="N|S1,S2,...",
                     help="run every test that takes the rng fixture once per seed: N fresh seeds or "
                          "the seeds listed (a hunt for inputs that fail; the seed is in the test id)")
    parser.addoption("--near-misses", type=int, default=0, metavar="N",
                     help="after the run, list the N float comparisons (np.testing.assert_allclose) that "
                          "came closest to their tolerance: the worst |got - want| / (atol + rtol |want|) "
                          "per test and line (with --seeds: tolerances that would fail on some seed)")


_NEAR: dict = {}               # --near-misses: (test id, line) -> worst ratio
_NEAR_TEST = [""]


def pytest_configure(config):
    if config.getoption("--near-misses"):
        np.testing.assert_allclose = _recording_allclose(np.testing.assert_allclose)


def _recording_allclose(original):
    import sys

    def assert_allclose(actual, desired, rtol=1e-7, atol=0, *args, **kwargs):
        try:
            _record(actual, desired, rtol, atol)
        except Exception:                          # what numpy refuses, it reports itself
            pass
        return original(actual, desired, rtol, atol, *args, **kwargs)

    def _record(actual, desired, rtol, atol):
        a = np.asarray(actual.numpy() if hasattr(actual, "numpy") else actual)
        d = np.asarray(desired.numpy() if hasattr(desired, "numpy") else desired)
        if a.dtype.kind == "f" or d.dtype.kind == "f":
            a, d = np.broadcast_arrays(a.astype(np.float64), d.astype(np.float64))
            ok = np.isfinite(a) & np.isfinite(d)
            diff, tol = np.abs(a - d)[ok], (atol + rtol * np.abs(d))[ok]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = float(np.max(np.where(tol > 0, diff / tol, np.where(diff > 0, np.inf, 0.0)), initial=0.0))
            frame = sys._getframe(1)               # the test's own line, not a helper's
            while frame.f_back is not None and ("/tests/" not in frame.f_code.co_filename
                                                or frame.f_code.co_filename.endswith("conftest.py")):
                frame = frame.f_back
            where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
            key = (_NEAR_TEST[0], where)
            _NEAR[key] = max(_NEAR.get(key, 0.0), ratio)
    return assert_allclose


def pytest_runtest_setup(item):
    _NEAR_TEST[0] = item.nodeid


def pytest_terminal_summary(terminalreporter, config):
    n = config.getoption("--near-misses")
    if not n:
        return
    terminalreporter.section("near misses: worst |got - want| / (atol + rtol |want|), 1 fails")
    for (test, where), ratio in sorted(_NEAR.items(), key=lambda kv: -kv[1])[:n]:
        terminalreporter.write_line(f"{ratio:8.3f}  {where:32}  {test}")


def pytest_generate_tests(metafunc):
    spec = metafunc.config.getoption("--seeds")
    if spec and "rng" in metafunc.fixturenames:
        if "," in spec or not spec.isdigit():
            seeds = [int(x) for x in spec.split(",") if x.strip()]
        else:
            seeds = [int(x) for x in np.random.SeedSequence().generate_state(int(spec))]
        metafunc.parametrize("rng", seeds, indirect=True, ids=[f"seed{x}" for x in seeds])


@pytest.fixture
def rng(request):
    seed = getattr(request, "param", None)       # --seeds
    if seed is None:
        seed = int(os.environ.get("TILECRAFT_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    print(f"random seed: {seed} (replay with TILECRAFT_TEST_SEED={seed})")
    return np.random.default_rng(seed)


@pytest.fixture
def seeded_ir_helpers(rng):
    """``llvm_ir_helpers.rand`` (the hand-built-IR tests' arrays) draws from this test's ``rng``,
    so its seed is printed and replays (``pytestmark = pytest.mark.usefixtures(...)``)."""
    import llvm_ir_helpers
    llvm_ir_helpers.RNG = rng


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


def run_llvm(s, args, inputs: dict, name="f", scalars=None, lowered=None):
    """Build ``s`` for ``llvm`` (or the already ``lowered`` function) twice, bounds-checked
    (``tir.instrument_bound_checkers``: an out-of-bounds access raises ``KernelIndexError``) and
    as users build it. The checked build runs on both poisons, which must agree exactly; the plain
    one on the first poison. Returns ``({output tensor: array} of the checked build, the same of
    the plain build)`` for every argument that is not an input."""
    import tilecraft
    from tilecraft.interp import evaluate
    from tilecraft.ir.expr import Var

    scalars = scalars or {}

    def build():
        if lowered is not None:
            return tilecraft.build(lowered, target="llvm")
        return tilecraft.build(s, args, target="llvm", name=name)

    with tilecraft.transform.PassContext(config={"tir.instrument_bound_checkers": True}):
        checked = build()
    plain = build()
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


def check_passes(s, args, inputs: dict, reference: dict, scalars=None, rtol=1e-5, atol=1e-5,
                 budget=PASS_CHECK_BUDGET, name="f"):
    """Lower ``s`` for ``llvm`` and run the lowered-IR interpreter after every pass on
    ``inputs``, comparing each output with ``reference`` ({tensor: array}); a pass whose output
    differs fails the test as "wrong after <pass>" with the IR before and after it. Returns the
    lowered function and the checker (``checker.checked``: the passes run; ``checker.stopped``:
    why it stopped early, when the first run needed more than ``budget`` iterations)."""
    import tilecraft
    from tilecraft.interp_lowered import PassChecker
    from tilecraft.ir.expr import Var

    tensors = [a for a in args if not isinstance(a, Var)]
    arrays = [inputs.get(t) for t in tensors]
    expected = {k: reference[t] for k, t in enumerate(tensors) if t not in inputs}
    checker = PassChecker(arrays, expected, scalars=scalars, rtol=rtol, atol=atol, budget=budget)
    func = tilecraft.lower(s, args, name=name, target="llvm", after_pass=checker)
    return func, checker


@pytest.fixture
def check_llvm():
    """``check_llvm(s, args, inputs, expected={T: numpy_result}, rtol=, atol=, passes="auto")``:
    check every pass with the lowered-IR interpreter (``passes``: "auto" for small loop nests,
    True always, False never), build, run on poisoned outputs, compare every output with the
    interpreter and with ``expected``."""
    from tilecraft.interp import evaluate
    from tilecraft.ir.expr import Var

    def check(s, args, inputs, expected=None, rtol=1e-5, atol=1e-5, scalars=None, name="f",
              passes="auto"):
        outs = [a for a in args if not isinstance(a, Var) and a not in inputs]
        ref = dict(zip(outs, evaluate(outs, {**inputs, **(scalars or {})})))
        lowered = None
        if passes:
            lowered, _ = check_passes(s, args, inputs, ref, scalars=scalars, rtol=rtol, atol=atol,
                                      name=name, budget=PASS_CHECK_BUDGET if passes == "auto" else None)
        got, plain = run_llvm(s, args, inputs, name=name, scalars=scalars, lowered=lowered)
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
