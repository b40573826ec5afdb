"""Replay (tuners against a ground-truth table), its metrics, and the GA tuner: fakes only,
milliseconds."""
import gzip
import json
import math

import numpy as np
import pytest

import tilecraft.autotune as autotune
from tilecraft.autotune import replay
from tilecraft.autotune.replay import GroundTruth
from tilecraft.autotune.tuner import GridSearchTuner, RandomTuner, XGBTuner
from tilecraft.autotune.tuner.ga_tuner import GATuner

import autotune_fakes as fk


@pytest.fixture
def task():
    return autotune.task.create("test/fake_matmul", args=(64, 64, 64), target="llvm")


@pytest.fixture
def truth(task):
    costs = [fk.synthetic_cost(c) for c in task.config_space]
    return GroundTruth.from_costs(task, costs, spread=0.02, seed=3)


def test_table_costs_optimum_and_relative_throughput(task, truth):
    costs = np.array([fk.synthetic_cost(c) for c in task.config_space])
    assert len(truth) == len(task.config_space)
    assert truth.optimum == pytest.approx(costs.min(), rel=0.03)
    best = int(np.argmin(truth.costs))
    assert truth.relative([best])[0] == 1.0
    assert np.all(truth.relative(np.arange(len(truth))) <= 1.0)
    assert truth.near_optimal(0.0) == len(truth)
    assert 1 <= truth.near_optimal(0.99) < truth.near_optimal(0.5)


def test_measure_draws_the_recorded_passes_and_reports_errors(task):
    costs = [fk.synthetic_cost(c) for c in task.config_space]
    costs[5] = math.inf
    t = GroundTruth.from_costs(task, costs, spread=0.1, seed=1)
    rng = np.random.default_rng(0)
    seen = {t.measure(0, rng).costs[0] for _ in range(40)}
    assert seen == set(t.samples[0]) and len(seen) == 3
    assert t.measure(0).costs[0] == t.costs[0]            # no rng: the median
    res = t.measure(5, rng)
    assert not res.ok and res.error_no.name == "RUNTIME_DEVICE"
    assert t.relative([5])[0] == 0.0


def test_a_table_file_round_trips_with_its_own_space(task, tmp_path):
    restricted = replay.restrict_space(task.config_space, {"unroll": [1]})
    assert len(restricted) == len(task.config_space) // 2
    header = {"ground_truth": replay.TABLE_VERSION, "space": "fake", "target": "llvm",
              "task": {"name": task.name, "args": list(task.args), "flop": task.flop},
              "knobs": replay.space_knobs(restricted)}
    rows = [{"i": i, "cost": fk.synthetic_cost(c), "passes": [fk.synthetic_cost(c)] * 3}
            for i, c in enumerate(restricted)]
    rows[7] = {"i": 7, "error": "WRONG_ANSWER", "msg": "output 0 differs"}
    path = tmp_path / "fake.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for r in [header] + rows:
            f.write(json.dumps(r) + "\n")
    t = GroundTruth.load(path)
    assert len(t) == len(restricted) and t.errors == {7: ("WRONG_ANSWER", "output 0 differs")}
    for i in (0, 3, len(t) - 1):
        got, want = t.task.config_space.get(i), restricted.get(i)
        assert {k: str(v) for k, v in got._entity_map.items()} == {k: str(v) for k, v in want._entity_map.items()}
        assert got["unroll"].val == 1


def test_an_unfinished_table_is_refused_with_the_count(task):
    header = {"ground_truth": replay.TABLE_VERSION, "space": "half",
              "task": {"name": task.name, "args": list(task.args), "flop": task.flop},
              "knobs": replay.space_knobs(task.config_space)}
    with pytest.raises(ValueError, match=r"ground truth half: \d+ of \d+ configs have no row"):
        GroundTruth(header, [{"i": 0, "cost": 1.0}])
    with pytest.raises(ValueError, match="row index 99999 outside the space"):
        GroundTruth(header, [{"i": 99999, "cost": 1.0}])


def test_restrict_space_keeps_the_templates_multi_filter(task):
    """A filtered space restricted (the GPU conv2d ground truth's) keeps its filter: its configs
    are exactly the filtered space's with the kept knob values, and a table replays them."""
    space = task.config_space
    space.multi_filter(lambda e: e["tile_y"].size[-1] * e["tile_x"].size[-1] <= 64)
    restricted = replay.restrict_space(space, {"unroll": [1]})

    def knobs(c):
        return tuple(str(v) for v in c._entity_map.values())

    want = sorted(knobs(c) for c in space if c["unroll"].val == 1)
    assert 0 < len(want) < space.range_length // 2 and len(space) < space.range_length    # filtered
    assert len(restricted) == len(want) and sorted(knobs(c) for c in restricted) == want
    task.config_space = restricted
    truth = GroundTruth.from_costs(task, [fk.synthetic_cost(c) for c in restricted])
    assert len(truth) == len(restricted) and len(truth.header["valid"]) == len(want)


def test_restrict_space_names_the_bad_knob_or_value(task):
    with pytest.raises(ValueError, match="no knob 'tile_z'"):
        replay.restrict_space(task.config_space, {"tile_z": [1]})
    with pytest.raises(ValueError, match=r"knob 'unroll' has no value 7; its values are \[0, 1\]"):
        replay.restrict_space(task.config_space, {"unroll": [7]})


@pytest.mark.parametrize("make", [
    lambda t, s: RandomTuner(t, seed=s),
    lambda t, s: GATuner(t, pop_size=16, seed=s),
    lambda t, s: XGBTuner(t, plan_size=16, cost_model=fk.FakeCostModel(t), seed=s),
])
def test_replayed_tuners_measure_distinct_configs_by_looking_up(truth, make):
    runs = replay.replay_tuner(make, truth, n_trial=40, seeds=range(3))
    assert len(runs) == 3
    for r in runs:
        assert len(r) == 40 and len(set(r)) == 40
        c = replay.curve(truth, r)
        assert np.all(np.diff(c) >= 0) and c[-1] <= 1.0
        assert c[-1] == pytest.approx(max(truth.relative(r)))


def test_random_tuner_agrees_with_the_exact_random_search_median(truth):
    runs = replay.replay_tuner(lambda t, s: RandomTuner(t, seed=s), truth, n_trial=len(truth), seeds=range(61))
    level = float(np.sort(truth.relative(np.arange(len(truth))))[-6])     # six configs reach it
    got = np.median([replay.trials_to_reach(replay.curve(truth, r), level) for r in runs])
    want = replay.random_search_median(truth, level)
    assert truth.near_optimal(level) == 6
    assert 0.6 * want <= got <= 1.5 * want


def test_a_perfect_model_beats_random_and_grid_search(truth):
    def median_trials(make):
        runs = replay.replay_tuner(make, truth, n_trial=200, seeds=range(5))
        return np.median([replay.trials_to_reach(replay.curve(truth, r), 0.99) for r in runs])

    xgb = median_trials(lambda t, s: XGBTuner(t, plan_size=16, cost_model=fk.FakeCostModel(t), seed=s))
    rand = median_trials(lambda t, s: RandomTuner(t, seed=s))
    assert xgb <= 32 and xgb < rand


def test_ga_tuner_improves_on_its_first_generation(truth):
    runs = replay.replay_tuner(lambda t, s: GATuner(t, pop_size=16, seed=s), truth, n_trial=160, seeds=range(6))
    first = np.median([replay.curve(truth, r)[15] for r in runs])
    last = np.median([replay.curve(truth, r)[-1] for r in runs])
    assert last > first


def test_ga_tuner_rejects_more_elites_than_its_population(task):
    with pytest.raises(ValueError, match="elite_num must be between 0 and pop_size"):
        GATuner(task, pop_size=4, elite_num=5)


def test_grid_search_replays_in_index_order(truth):
    runs = replay.replay_tuner(lambda t, s: GridSearchTuner(t), truth, n_trial=24, seeds=[0])
    assert runs[0] == list(range(24))


def test_trials_to_reach_and_quartiles():
    assert replay.trials_to_reach([0.5, 0.9, 0.99, 1.0], 0.99) == 3
    assert replay.trials_to_reach([0.5, 0.9], 0.99) == math.inf
    assert replay.quartiles([10, 20, 30, 40, 50]) == (20, 30, 40)
    assert replay.quartiles([10, 20, 30, math.inf]) == (17.5, 25.0, math.inf)
    assert replay.area_under_curve([0.5, 1.0], 4) == 0.875
    assert replay.area_under_curve([0.25, 0.5, 1.0], 2) == 0.375


def test_ndcg_and_recall_agree_with_sklearn():
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(5)
    for _ in range(10):
        t, p = rng.random(50), rng.random(50)
        assert replay.ndcg_at(t, p, 8) == pytest.approx(ndcg_score(t[None], p[None], k=8))
    t = np.arange(10.0)
    assert replay.recall_at(t, t, 3) == 1.0
    assert replay.recall_at(t, -t, 3) == 0.0


def test_ranking_quality_of_a_perfect_and_a_blind_model(truth):
    class Blind:
        def fit(self, xs, ys, plan_size):
            pass

        def predict(self, xs):
            return np.zeros(len(xs))

    good = replay.ranking_quality(lambda t: fk.FakeCostModel(t), truth, 128, seed=0)
    assert good["ndcg"] > 0.99 and good["recall"] > 0.9
    assert good["train"] == 128 and good["test"] == len(truth) - 128
    blind = replay.ranking_quality(lambda t: Blind(), truth, 128, seed=0)
    assert blind["ndcg"] < good["ndcg"]


def _knob_like_features(task, configs, feature_type):
    """Stand-in loop-nest features that mean the same in every shape: log2 of the inner tiles."""
    return [np.array([math.log2(c["tile_y"].size[-1]), math.log2(c["tile_x"].size[-1]),
                      math.log2(c["tile_k"].size[-1]), c["unroll"].val], dtype=np.float32) for c in configs]


def test_transfer_keeps_the_other_shapes_model_under_a_few_own_measurements(task, monkeypatch):
    """A model pre-trained on another shape's records stays the base margin once this task's
    first few measurements are fitted, instead of being replaced by a 6-point model."""
    from tilecraft.autotune import features as feature_mod
    from tilecraft.autotune.cost_model import XGBoostCostModel

    monkeypatch.setattr(feature_mod, "features_of_configs", _knob_like_features)
    other = autotune.task.create("test/fake_matmul", args=(128, 128, 32), target="llvm")
    rng = np.random.default_rng(0)
    other_truth = GroundTruth.from_costs(other, [fk.synthetic_cost(c) for c in other.config_space])
    records = other_truth.records(rng.permutation(len(other_truth))[:200])
    space = task.config_space
    feats = np.stack(_knob_like_features(task, [space.get(i) for i in range(len(space))], "itervar"))
    flops = np.array([task.flop / fk.synthetic_cost(space.get(i)) for i in range(len(space))])
    own = rng.permutation(len(space))[:6]
    test = np.setdiff1d(np.arange(len(space)), own)

    def quality(pretrain: bool) -> float:
        model = XGBoostCostModel(task, feature_type="itervar", seed=0, num_threads=1,
                                 extractor=lambda idx: feats[np.asarray(idx)])
        if pretrain:
            assert model.fit_log(records, 64)
        model.fit(own, flops[own], 64)
        return replay.ndcg_at(flops[test], model.predict(test), 32)

    with_base, without = quality(True), quality(False)
    assert with_base > 0.8 and with_base > without + 0.1, (with_base, without)


def test_a_filtered_space_replays_only_its_valid_configs(task):
    """A table of a template with a multi_filter lists the kept indices; replayed tuners and
    the metrics see only those."""
    keep = [i for i in range(len(task.config_space)) if i % 3 == 0]
    header = {"ground_truth": replay.TABLE_VERSION, "space": "filtered",
              "task": {"name": task.name, "args": list(task.args), "flop": task.flop},
              "knobs": replay.space_knobs(task.config_space), "valid": keep}
    rows = [{"i": i, "cost": fk.synthetic_cost(task.config_space.get(i))} for i in keep]
    t = GroundTruth(header, rows)
    assert len(t) == len(keep) and len(t.task.config_space) == len(keep)
    assert t.optimum == min(r["cost"] for r in rows)
    for make in (lambda tk, s: RandomTuner(tk, seed=s),
                 lambda tk, s: XGBTuner(tk, plan_size=16, cost_model=fk.FakeCostModel(tk), seed=s)):
        runs = replay.replay_tuner(make, t, n_trial=40, seeds=range(2))
        assert all(set(r) <= set(keep) and len(set(r)) == 40 for r in runs)
    q = replay.ranking_quality(lambda tk: fk.FakeCostModel(tk), t, 64, seed=0)
    assert q["test"] == len(keep) - 64 and q["ndcg"] > 0.99
    with pytest.raises(ValueError, match=r"ground truth filtered: 1 of \d+ configs have no row"):
        GroundTruth(header, rows[1:])


def _ground_truth_script():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "ground_truth.py"
    spec = importlib.util.spec_from_file_location("ground_truth_script", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ground_truth_export_of_an_untimed_space_says_so(tmp_path, capsys):
    """Options may come before the spaces (`run --gpu SPACE` failed with 'unrecognized arguments'),
    and exporting a space with nothing timed is one line, not a ValueError from min()."""
    gt = _ground_truth_script()
    rc = gt.main(["export", "--partial", "--root", str(tmp_path / "cache"), "--out", str(tmp_path), "gemm256"])
    assert rc == 1
    assert "gemm256: no configuration timed yet" in capsys.readouterr().err
    assert not (tmp_path / "gemm256.jsonl.gz").exists()


@pytest.mark.parametrize("n", [1, 8, 64, 600])
def test_random_best_median_agrees_with_sampling(truth, n):
    """The exact median of Random's best within n trials, against 4000 sampled searches."""
    rel = truth.relative(truth.valid)
    rng = np.random.default_rng(7)
    sampled = [rel[rng.choice(len(rel), size=min(n, len(rel)), replace=False)].max() for _ in range(4000)]
    exact = replay.random_best_median(truth, n)
    assert exact in rel
    # the sampled median lies between the neighbouring distinct values of the exact one
    vals = np.unique(rel)
    pos = np.searchsorted(vals, exact)
    lo, hi = vals[max(pos - 1, 0)], vals[min(pos + 1, len(vals) - 1)]
    assert lo <= np.median(sampled) <= hi, (n, exact, np.median(sampled))
    if n >= len(rel):
        assert exact == 1.0          # the whole space: the optimum
