"""TimingOptions, the one record of how a runner checks and times candidates: every rule's error
message, canonical types, the JSON round trip (a property test), and the runners' TVM-style
keyword front (LocalRunner(number=...), RPCRunner(key, host, port, ...)) built on it."""
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilecraft.autotune as autotune
from tilecraft.autotune import LocalRunner, OptionError, TimingOptions
from tilecraft.autotune.measure import MeasureInput, BuildResult, MeasureErrorNo

import autotune_fakes as fk


# -- validation: one message per rule ---------------------------------------------------------

@pytest.mark.parametrize("name, value, message", [
    ("number", 0, "timing option 'number' must be an integer from 1 to 1000000, got 0"),
    ("number", 10**6 + 1, "timing option 'number' must be an integer from 1 to 1000000, got 1000001"),
    ("number", 2.0, "timing option 'number' must be an integer from 1 to 1000000, got 2.0"),
    ("number", True, "timing option 'number' must be an integer from 1 to 1000000, got True"),
    ("number", None, "timing option 'number' must be an integer from 1 to 1000000, got None"),
    ("repeat", 0, "timing option 'repeat' must be an integer from 1 to 10000, got 0"),
    ("repeat", "3", "timing option 'repeat' must be an integer from 1 to 10000, got '3'"),
    ("min_repeat_ms", -1, "timing option 'min_repeat_ms' must be a number of milliseconds from 0 to 60000, got -1"),
    ("min_repeat_ms", 60_001, "timing option 'min_repeat_ms' must be a number of milliseconds from 0 to 60000, "
                              "got 60001"),
    ("timeout", 0, "timing option 'timeout' must be a number of seconds > 0 and <= 86400, got 0"),
    ("timeout", math.inf, "timing option 'timeout' must be a number of seconds > 0 and <= 86400, got inf"),
    ("reference_timeout", -5.0, "timing option 'reference_timeout' must be a number of seconds > 0 and <= 86400, "
                                "got -5.0"),
    ("enable_cpu_cache_flush", 1, "timing option 'enable_cpu_cache_flush' must be True or False, got 1"),
    ("check_correctness", "yes", "timing option 'check_correctness' must be True or False, got 'yes'"),
    ("rtol", -1e-3, "timing option 'rtol' must be a number >= 0, got -0.001"),
    ("atol", math.nan, "timing option 'atol' must be a number >= 0, got nan"),
    ("seed", -1, "timing option 'seed' must be an integer from 0 to 9223372036854775807 or None, got -1"),
    ("seed", 1.5, "timing option 'seed' must be an integer from 0 to 9223372036854775807 or None, got 1.5"),
    ("max_timing_s", -1, "timing option 'max_timing_s' must be a number of seconds from 0 to 3600 (0: off), got -1"),
    ("max_timing_s", 3601, "timing option 'max_timing_s' must be a number of seconds from 0 to 3600 (0: off), "
                           "got 3601"),
])
def test_each_option_out_of_range_is_refused_naming_it_and_what_it_accepts(name, value, message):
    with pytest.raises(OptionError) as err:
        TimingOptions(**{name: value})
    assert str(err.value) == message
    assert err.value.option == name and err.value.allowed in message
    with pytest.raises(OptionError, match=f"'{name}'"):             # replace validates the same way
        TimingOptions().replace(**{name: value})


def test_a_long_bad_value_is_shortened_in_the_message():
    with pytest.raises(OptionError) as err:
        TimingOptions(number="x" * 500)
    assert str(err.value).endswith("got '" + "x" * 56 + "...") and len(str(err.value)) < 200


def test_values_are_stored_in_their_canonical_types():
    t = TimingOptions(number=np.int64(5), repeat=np.int32(2), min_repeat_ms=np.float32(1.5), rtol=1,
                      check_correctness=np.bool_(False), seed=np.uint16(7), max_timing_s=0)
    assert (type(t.number), type(t.repeat), type(t.min_repeat_ms), type(t.rtol), type(t.check_correctness),
            type(t.seed)) == (int, int, float, float, bool, int)
    assert t.max_timing_s is None                     # 0 means off, as None
    assert t == TimingOptions(number=5, repeat=2, min_repeat_ms=1.5, rtol=1.0, check_correctness=False, seed=7)
    assert hash(t) == hash(t.replace())
    with pytest.raises(Exception):                    # frozen
        t.number = 6


def test_seeded_draws_a_seed_only_when_there_is_none():
    fixed = TimingOptions(seed=123)
    assert fixed.seeded() is fixed
    drawn = TimingOptions().seeded()
    assert isinstance(drawn.seed, int) and 0 <= drawn.seed < 2**31
    assert drawn.replace(seed=None) == TimingOptions()


def test_the_reference_gets_at_least_the_candidates_timeout():
    assert TimingOptions().reference_limit_s == 300.0
    assert TimingOptions(timeout=900, reference_timeout=60).reference_limit_s == 900.0


# -- the wire form ----------------------------------------------------------------------------

def _finite(lo, hi):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


records = st.builds(
    TimingOptions,
    number=st.integers(1, 10**6), repeat=st.integers(1, 10**4), min_repeat_ms=_finite(0, 60_000),
    timeout=_finite(1e-6, 86_400), reference_timeout=_finite(1e-6, 86_400),
    enable_cpu_cache_flush=st.booleans(), check_correctness=st.booleans(),
    rtol=_finite(0, 1e9), atol=_finite(0, 1e9), seed=st.none() | st.integers(0, 2**63 - 1),
    max_timing_s=st.none() | _finite(0, 3600))


@settings(max_examples=200, deadline=None)
@given(records)
def test_json_round_trip_gives_the_same_record(t):
    text = t.to_json()
    assert isinstance(text, str) and "NaN" not in text and "Infinity" not in text
    assert TimingOptions.from_json(text) == t
    data = t.to_dict()
    assert json.loads(json.dumps(data)) == data        # plain JSON-able data
    assert TimingOptions.from_dict(data) == t


def test_from_dict_fills_missing_options_with_defaults():
    assert TimingOptions.from_dict({}) == TimingOptions()
    assert TimingOptions.from_json('{"repeat": 7}') == TimingOptions(repeat=7)


@pytest.mark.parametrize("text, message", [
    (b'{"number": 1}', "timing options: expected JSON text, got bytes"),
    ("{number: 1}", "timing options: not valid JSON (Expecting property name enclosed in double quotes"),
    ("[1, 2]", "timing options: expected an object of named options, got list"),
    ('{"numbr": 1}', "unknown timing option 'numbr' (did you mean 'number'?); the timing options are: number, "
                     "repeat, min_repeat_ms, timeout, reference_timeout, enable_cpu_cache_flush, check_correctness, "
                     "rtol, atol, seed, max_timing_s"),
    ('{"number": 0}', "timing option 'number' must be an integer from 1 to 1000000, got 0"),
    ('{"timeout": "10"}', "timing option 'timeout' must be a number of seconds > 0 and <= 86400, got '10'"),
    ('{"rtol": NaN}', "timing option 'rtol' must be a number >= 0, got nan"),
    ('{"check_correctness": 0}', "timing option 'check_correctness' must be True or False, got 0"),
])
def test_from_json_validates_what_it_receives(text, message):
    with pytest.raises(OptionError) as err:
        TimingOptions.from_json(text)
    assert str(err.value).startswith(message)


# -- the runners' fronts ----------------------------------------------------------------------

def test_local_runner_takes_tvm_keywords_or_a_record():
    runner = LocalRunner(number=5, repeat=2, min_repeat_ms=10, timeout=4, enable_cpu_cache_flush=True)
    assert runner.timing == TimingOptions(number=5, repeat=2, min_repeat_ms=10, timeout=4,
                                          enable_cpu_cache_flush=True)
    assert (runner.number, runner.repeat, runner.timeout) == (5, 2, 4.0)        # read as TVM scripts do
    base = TimingOptions(number=9, seed=3)
    assert LocalRunner(base).timing is base
    assert LocalRunner(base, repeat=1).timing == TimingOptions(number=9, seed=3, repeat=1)
    assert LocalRunner().timing == TimingOptions()


def test_local_runner_errors_name_the_option():
    with pytest.raises(OptionError, match=r"timing option 'repeat' must be an integer from 1 to 10000, got 0"):
        LocalRunner(repeat=0)
    with pytest.raises(TypeError, match=r"LocalRunner\(\) got an unexpected keyword argument 'numbr' "
                                        r"\(did you mean 'number'\?\); its options are: number, repeat"):
        LocalRunner(numbr=3)
    with pytest.raises(TypeError, match=r"LocalRunner\(timing=...\) takes a TimingOptions, got int 10; give the "
                                        r"options by name, e.g. LocalRunner\(timeout=10, number=4\)"):
        LocalRunner(10)
    runner = LocalRunner()
    with pytest.raises(AttributeError, match=r"number is part of the runner's TimingOptions \(frozen\): write "
                                             r"runner.timing = runner.timing.replace\(number=...\)"):
        runner.number = 5
    with pytest.raises(AttributeError, match="no attribute 'numbr'"):
        runner.numbr


def test_rpc_runner_splits_keywords_between_its_two_records():
    pytest.importorskip("rpyc")
    from tilecraft.rpc import PoolOptions, RPCRunner

    secret = b"front-secret-front-secret"
    runner = RPCRunner("llvm:x", "127.0.0.1", 9, secret=secret, number=5, timeout=3, max_retries=0, slack=1,
                       request_timeout=30, tracker_retry_s=0)
    assert runner.timing == TimingOptions(number=5, timeout=3)
    assert runner.pool == PoolOptions(max_retries=0, slack=1, request_timeout=30, tracker_retry_s=0)
    assert runner.number == 5
    timing, pool = TimingOptions(repeat=7), PoolOptions(slack=2)
    runner = RPCRunner("llvm:x", "127.0.0.1", 9, secret, timing, pool, max_retries=1)
    assert runner.timing is timing and runner.pool == PoolOptions(slack=2, max_retries=1)
    with pytest.raises(TypeError, match=r"RPCRunner\(\) got an unexpected keyword argument 'max_retry' "
                                        r"\(did you mean 'max_retries'\?\)"):
        RPCRunner("llvm:x", "127.0.0.1", 9, secret=secret, max_retry=1)
    with pytest.raises(TypeError, match=r"RPCRunner\(pool=...\) takes a PoolOptions, got dict"):
        RPCRunner("llvm:x", "127.0.0.1", 9, secret=secret, pool={"slack": 1})


@pytest.mark.parametrize("name, value, message", [
    ("max_retries", -1, "pool option 'max_retries' must be an integer from 0 to 100, got -1"),
    ("slack", 0, "pool option 'slack' must be a number of seconds > 0 and <= 3600, got 0"),
    ("request_timeout", "soon", "pool option 'request_timeout' must be a number of seconds > 0 and <= 86400, "
                                "got 'soon'"),
    ("tracker_retry_s", -0.5, "pool option 'tracker_retry_s' must be a number of seconds from 0 to 86400, got -0.5"),
])
def test_pool_options_are_validated_the_same_way(name, value, message):
    pytest.importorskip("rpyc")
    from tilecraft.rpc import PoolOptions, RPCRunner

    with pytest.raises(OptionError) as err:
        PoolOptions(**{name: value})
    assert str(err.value) == message
    with pytest.raises(OptionError, match=f"'{name}'"):
        RPCRunner("llvm:x", "127.0.0.1", 9, secret=b"front-secret-front-secret", **{name: value})


# -- the record reaches the worker whole ------------------------------------------------------

def test_the_worker_receives_the_record_with_the_tasks_seed():
    """LocalRunner hands its record (seed drawn once per task) to the run function in the worker
    process; a record replaced between batches is what the next batch gets."""
    task = autotune.task.create("test/fake_matmul", args=(64, 64, 64), target="llvm")
    runner = LocalRunner(number=3, repeat=2, rtol=0.25, check_correctness=False, run_func=fk.echo_timing_run_func)
    try:
        runner.set_task(task)
        inputs = [MeasureInput(task.target, task, task.config_space.get(i)) for i in (0, 1)]
        builds = [BuildResult(__file__, ((), "float32", True)) for _ in inputs]
        first = runner.run(inputs, builds)
        got = [TimingOptions.from_json(r.error_msg) for r in first]
        assert all(r.error_no == MeasureErrorNo.NO_ERROR for r in first)
        assert got[0] == got[1] and got[0].seed is not None
        assert got[0] == TimingOptions(number=3, repeat=2, rtol=0.25, check_correctness=False, seed=got[0].seed)
        runner.timing = runner.timing.replace(number=1, min_repeat_ms=2.5)
        (again,) = runner.run(inputs[:1], builds[:1])
        assert TimingOptions.from_json(again.error_msg) == got[0].replace(number=1, min_repeat_ms=2.5)
        runner.set_task(task)                                    # a new task: a new seed (almost surely)
        runner.timing = runner.timing.replace(seed=42)
        (fixed,) = runner.run(inputs[:1], builds[:1])
        assert TimingOptions.from_json(fixed.error_msg).seed == 42
    finally:
        runner.close()



def _doc_table(doc: str, names) -> dict:
    """``{option: (default, accepts)}`` of the markdown table rows of ``doc`` naming ``names``."""
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0].strip("`") in names:
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


@pytest.mark.parametrize("doc, record", [("autotune.md", "TimingOptions"), ("rpc.md", "PoolOptions")])
def test_the_docs_tables_list_every_option_with_its_default_and_range(doc, record):
    """docs/autotune.md's table of timing options and docs/rpc.md's of pool options are the
    records', row for row."""
    import pathlib
    from dataclasses import fields

    if record == "PoolOptions":
        pytest.importorskip("rpyc")
        from tilecraft.rpc import PoolOptions as cls
    else:
        cls = TimingOptions
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / doc).read_text()
    expected = {f.name: (str(f.default), f.metadata["rule"].allowed()) for f in fields(cls)}
    assert _doc_table(text, expected) == expected
