"""TVM's index-range tuner API (``GridSearchTuner``/``RandomTuner`` with ``range_idx``,
``begin_idx``/``end_idx``/``range_length``/``visited_max``/``index``), the space's
``subrange_length``/``get_next_index``/``get_rand_index``, and re-defining a knob — ported in
spirit from TVM's ``test_autotvm_index_tuner.py`` and ``test_autotvm_space.py``."""
import pytest
from hypothesis import given, settings, strategies as st

from autotvm_sample import dummy_option as _option, sample_task as _task
from tilecraft import autotune as autotvm
from tilecraft.autotune.space import ConfigSpace


def test_grid_search_tuner_range():
    task = _task()
    tuner = autotvm.tuner.GridSearchTuner(task)
    assert (tuner.begin_idx, tuner.end_idx, tuner.index, tuner.range_length, tuner.visited_max) == (0, 64, 0, 64, 64)
    tuner = autotvm.tuner.GridSearchTuner(task, range_idx=(8, 15))
    assert (tuner.begin_idx, tuner.end_idx, tuner.index, tuner.range_length, tuner.visited_max) == (8, 16, 8, 8, 8)
    tuner.tune(n_trial=20, measure_option=_option())
    assert sorted(tuner.visited) == list(range(8, 16)) and tuner.trace_index == list(range(8, 16))
    assert not tuner.has_next() and tuner.index == 16


def test_grid_search_tuner_range_with_multi_filter():
    task = _task(filtered=True)
    tuner = autotvm.tuner.GridSearchTuner(task)
    assert (tuner.begin_idx, tuner.end_idx, tuner.index, tuner.range_length, tuner.visited_max) == (0, 64, 5, 64, 34)
    tuner = autotvm.tuner.GridSearchTuner(task, range_idx=(8, 15))
    assert (tuner.begin_idx, tuner.end_idx, tuner.index, tuner.range_length, tuner.visited_max) == (8, 16, 12, 8, 4)
    tuner.tune(n_trial=8, measure_option=_option())
    assert len(tuner.visited) == 4 and not tuner.has_next()
    assert all(8 <= i < 16 and task.config_space.is_index_valid(i) for i in tuner.visited)


@pytest.mark.parametrize("filtered", [False, True])
def test_random_tuner_range_visits_every_valid_index_once(filtered):
    task = _task(filtered)
    tuner = autotvm.tuner.RandomTuner(task, range_idx=(8, 15), seed=1)
    assert (tuner.begin_idx, tuner.end_idx, tuner.range_length) == (8, 16, 8)
    assert tuner.visited_max == (4 if filtered else 8)
    tuner.tune(n_trial=8, measure_option=_option())
    want = [i for i in range(8, 16) if task.config_space.is_index_valid(i)]
    assert sorted(tuner.trace_index) == want and not tuner.has_next()


def test_disjoint_slices_cover_the_space_once():
    """TVM's distributed use: jobs tuning disjoint slices measure every valid config exactly once."""
    task, seen = _task(filtered=True), []
    for lo, hi in [(0, 20), (21, 40), (41, 63)]:
        tuner = autotvm.tuner.RandomTuner(task, range_idx=(lo, hi), seed=lo)
        tuner.tune(n_trial=64, measure_option=_option())
        seen += tuner.trace_index
    assert sorted(seen) == [task.config_space.valid_index(i) for i in range(len(task.config_space))]


def test_range_idx_errors_name_the_tuner_and_the_bounds():
    task = _task()
    with pytest.raises(ValueError, match=r"GridSearchTuner of task tvm_api/sample_matmul: range_idx=\(8, 64\) must "
                                         r"satisfy 0 <= begin <= end < 64"):
        autotvm.tuner.GridSearchTuner(task, range_idx=(8, 64))
    with pytest.raises(ValueError, match=r"RandomTuner of task .*: range_idx must be None or a pair of ints"):
        autotvm.tuner.RandomTuner(task, range_idx=8)
    with pytest.raises(ValueError, match=r"range_idx=\(9, 8\) must satisfy"):
        autotvm.tuner.RandomTuner(task, range_idx=(9, 8))


def _space():
    space = ConfigSpace()
    space.define_split("a", 16)
    space.define_split("b", 16)
    space.multi_filter(lambda e: e["a"].size[-1] * e["b"].size[-1] <= 16)
    return space


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 25), st.integers(0, 25), st.integers(-4, 4).filter(lambda n: n != 0), st.booleans())
def test_space_index_range_helpers_agree_with_is_index_valid(start, end, n, filtered):
    space = _space() if filtered else ConfigSpace()
    if not filtered:
        space.define_split("a", 16)
        space.define_split("b", 16)
    start, end = min(start, end), max(start, end)
    valid = [i for i in range(start, end) if space.is_index_valid(i)]
    assert space.subrange_length(start, end) == len(valid)
    for index in range(start, end):
        step = [i for i in valid if (i > index if n > 0 else i < index)]
        want = (step[n - 1] if n <= len(step) else None) if n > 0 else (step[n] if -n <= len(step) else None)
        assert space.get_next_index(index, n, start, end) == want
    if valid:
        assert space.get_rand_index(start, end, to_exclude=valid[1:]) == valid[0]
    else:
        with pytest.raises(ValueError, match=r"every valid index in \[\d+, \d+\) is excluded"):
            space.get_rand_index(start, end)


def test_subrange_length_refuses_a_range_outside_the_space():
    with pytest.raises(IndexError, match=r"index range \[0, 26\) is not within the space's \[0, 25\)"):
        _space().subrange_length(0, 26)


def test_redefining_a_knob_replaces_it_in_place():
    """TVM: a knob defined again replaces the earlier one, keeping its place in the index."""
    space = ConfigSpace()
    space.define_knob("a", [1, 2])
    space.define_knob("b", [3, 4, 5])
    space.define_knob("a", [1, 2])                  # the same again (templates calling helpers twice): silent
    assert list(space.space_map) == ["a", "b"] and len(space) == 6
    with pytest.warns(UserWarning, match=r"knob 'b' is defined again with other values; the last definition "
                                         r"replaces the first \(3 -> 2 values\)"):
        space.define_knob("b", [7, 8])
    assert list(space.space_map) == ["a", "b"] and len(space) == 4
    assert space["b"].val == 7 and space.get(3)["a"].val == 2 and space.get(3)["b"].val == 8
