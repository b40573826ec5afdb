"""The loop-nest cost model also sees the knob features (``XGBoostCostModel(with_knobs=True)``,
the default): fakes only, milliseconds. Where the loop-nest features miss what decides the
speed (as on the H100 SGEMM table: docs/autotune.md), the knob columns carry it."""
import numpy as np
import pytest

import tilecraft.autotune as autotune
from tilecraft.autotune import replay
from tilecraft.autotune.cost_model import XGBoostCostModel

import autotune_fakes as fk


@pytest.fixture
def task():
    return autotune.task.create("test/fake_matmul", args=(64, 64, 64), target="llvm")


def blind_loop_features(task, seed=0, nan_every=0):
    """Loop-nest rows that say nothing about the speed (noise), NaN every ``nan_every``-th config
    (a config that does not lower)."""
    n = task.config_space.range_length
    feats = np.random.default_rng(seed).normal(size=(n, 8)).astype(np.float32)
    if nan_every:
        feats[::nan_every] = np.nan
    return feats


def flops_of(task):
    space = task.config_space
    return np.array([task.flop / fk.synthetic_cost(space.get(i)) for i in range(space.range_length)])


def ndcg(task, feats, with_knobs, seed=0, n_train=64):
    flops = flops_of(task)
    order = np.random.default_rng(seed).permutation(len(flops))
    train, test = order[:n_train], order[n_train:]
    model = XGBoostCostModel(task, feature_type="itervar", seed=seed, num_threads=1, with_knobs=with_knobs,
                             extractor=lambda idx: feats[np.asarray(idx)])
    model.fit(train, flops[train], 64)
    return replay.ndcg_at(flops[test], model.predict(test), 32)


def test_the_knob_columns_rank_a_space_whose_loop_features_miss_the_speed(task):
    feats = blind_loop_features(task)
    with_knobs = np.median([ndcg(task, feats, True, seed=s) for s in range(3)])
    without = np.median([ndcg(task, feats, False, seed=s) for s in range(3)])
    assert with_knobs > 0.75 and with_knobs > without + 0.3, (with_knobs, without)


def test_informative_loop_features_still_rank_with_the_knobs_beside_them(task):
    """Loop-nest features that carry the speed (here the knobs' own values, scrambled into
    other columns) rank as well with the knob columns appended as without."""
    space = task.config_space
    rows = np.stack([space.get(i).get_flatten_feature() for i in range(space.range_length)]).astype(np.float32)
    feats = rows[:, ::-1] * 3.0 + 1.0
    assert ndcg(task, feats, True) > 0.9 and ndcg(task, feats, False) > 0.9


def test_rows_that_do_not_lower_stay_out_with_the_knobs_appended(task):
    feats = blind_loop_features(task, nan_every=5)
    flops = flops_of(task)
    model = XGBoostCostModel(task, feature_type="itervar", seed=0, num_threads=1,
                             extractor=lambda idx: feats[np.asarray(idx)])
    assert model.with_knobs
    model.fit(np.arange(40), flops[:40], 64)
    pred = model.predict(np.arange(40, 60))
    assert np.all(pred[::5] == -1e9) and np.all(pred[1::5] > -1e9)       # 40, 45, 50, 55 do not lower
    width = len(task.config_space.get(0).get_flatten_feature())
    assert model._features(np.arange(3)).shape == (3, 8 + width)


def test_knob_models_and_the_with_knobs_off_switch_keep_their_features(task):
    feats = blind_loop_features(task)
    assert not XGBoostCostModel(task, feature_type="knob").with_knobs
    off = XGBoostCostModel(task, feature_type="itervar", with_knobs=False, extractor=lambda i: feats[i])
    assert off._features(np.arange(3)).shape == (3, 8)


def test_a_base_model_of_this_template_with_its_knobs_loads(task):
    feats = blind_loop_features(task)
    flops = flops_of(task)
    train = np.random.default_rng(0).permutation(len(flops))[:64]
    base = XGBoostCostModel(task, feature_type="itervar", seed=0, num_threads=1, extractor=lambda i: feats[i])
    base.fit(train, flops[train], 64)
    model = XGBoostCostModel(task, feature_type="itervar", seed=0, num_threads=1, extractor=lambda i: feats[i])
    model.load_basemodel(base)
    test = np.setdiff1d(np.arange(len(flops)), train)
    assert np.allclose(model.predict(test), base.predict(test))          # the base model's ranking
    assert replay.ndcg_at(flops[test], model.predict(test), 32) > 0.75
