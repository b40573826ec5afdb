"""Transfer learning between neighbouring shapes: shape-normalised loop-nest features, and the
joint model trained with another task's records (its own ranking group, weighing less as this
task's measurements grow). Fake features and synthetic costs: milliseconds, no machine."""
import math

import numpy as np
import pytest

import tilecraft.autotune as autotune
from tilecraft.autotune import loop_features, replay
from tilecraft.autotune.replay import GroundTruth

import autotune_fakes as fk


def _matmul(n):
    import tilecraft.topi.matmul  # noqa: F401
    return autotune.task.create("topi/matmul.llvm", args=(n, n, n, "float32"), target="llvm")


def test_shape_normalised_features_of_two_gemm_shapes_are_closer_than_raw_ones():
    """The same first config of GEMM 256³ and 1024³: after normalising, the total trip count is
    gone, no column passes its cap, and the two vectors differ less than the raw ones."""
    raw = np.stack([loop_features.extract(t, t.config_space.get(0)) for t in (_matmul(256), _matmul(1024))])
    norm = loop_features.shape_normalised(raw)
    glob = raw.shape[1] - loop_features.N_GLOBAL
    assert raw[0, glob + 4] != raw[1, glob + 4] and (norm[:, glob + 4] == 0).all()
    assert norm.max() <= loop_features.CAP_COUNT + 1e-6
    assert np.abs(norm[0] - norm[1]).sum() < 0.5 * np.abs(raw[0] - raw[1]).sum()
    assert (norm <= raw + 1e-6).all()               # it only caps, never invents
    assert not np.shares_memory(norm, raw)


def test_shape_normalised_names_a_wrong_width():
    with pytest.raises(ValueError, match=r"shape_normalised: expected rows of \d+ curve features, got shape \(3, 7\)"):
        loop_features.shape_normalised(np.zeros((3, 7)), "curve")


def _tile_features(task, configs, feature_type="itervar"):
    """Stand-in loop-nest features, the same meaning in every shape (log2 of the inner tiles),
    padded to the itervar width so that shape_normalised applies."""
    width = loop_features.feature_length("itervar")
    out = []
    for c in configs:
        f = np.zeros(width, np.float32)
        f[:4] = [math.log2(c["tile_y"].size[-1]), math.log2(c["tile_x"].size[-1]),
                 math.log2(c["tile_k"].size[-1]), c["unroll"].val]
        out.append(f)
    return out


@pytest.fixture
def shapes(monkeypatch):
    from tilecraft.autotune import features as feature_mod

    monkeypatch.setattr(feature_mod, "features_of_configs", _tile_features)
    task = autotune.task.create("test/fake_matmul", args=(64, 64, 16), target="llvm")
    other = autotune.task.create("test/fake_matmul", args=(128, 128, 32), target="llvm")
    space = task.config_space
    feats = np.stack(_tile_features(task, [space.get(i) for i in range(len(space))]))
    flops = np.array([task.flop / fk.synthetic_cost(space.get(i)) for i in range(len(space))])
    return task, other, feats, flops


def _records(other, cost, n=200, seed=0):
    truth = GroundTruth.from_costs(other, [cost(c) for c in other.config_space])
    return truth.records(np.random.default_rng(seed).permutation(len(truth))[:n])


def _quality(task, feats, flops, records, transfer, n_own, seed=0, normalise=False, with_knobs=True):
    from tilecraft.autotune.cost_model import XGBoostCostModel

    rng = np.random.default_rng(seed)
    own = rng.permutation(len(flops))[:n_own]
    test = np.setdiff1d(np.arange(len(flops)), own)
    model = XGBoostCostModel(task, feature_type="itervar", seed=0, num_threads=1, transfer=transfer,
                             normalise=normalise, extractor=lambda idx: feats[np.asarray(idx)],
                             with_knobs=with_knobs)
    if records is not None:
        assert model.fit_log(records, 64)
    if n_own:
        model.fit(own, flops[own], 64)
    return replay.ndcg_at(flops[test], model.predict(test), 32)


@pytest.mark.parametrize("transfer, normalise", [("margin", False), ("joint", False), ("margin", True),
                                                  ("joint", True), ("agree", False)])
def test_a_neighbours_records_help_while_own_measurements_are_few(shapes, transfer, normalise):
    task, other, feats, flops = shapes
    records = _records(other, fk.synthetic_cost)
    with_other = _quality(task, feats, flops, records, transfer, n_own=6, normalise=normalise)
    alone = _quality(task, feats, flops, None, transfer, n_own=6, normalise=normalise)
    assert with_other > 0.8 and with_other > alone + 0.1, (with_other, alone)
    first = _quality(task, feats, flops, records, transfer, n_own=0, normalise=normalise)
    assert first > 0.8          # the first plan's ranking


def test_joint_transfer_lets_own_measurements_outvote_a_misleading_neighbour(shapes, monkeypatch):
    """A neighbour whose speeds run the other way: its group weighs less as own measurements
    grow, so 96 of them rank this task nearly as well as without the neighbour, and 16 already
    better than with the neighbour's weight held constant. (Loop-nest columns only: the knob
    columns, which the neighbour's rows lack, would let own measurements outvote it anyway.)"""
    from tilecraft.autotune import cost_model

    task, other, feats, flops = shapes
    wrong = _records(other, lambda c: 1.0 / fk.synthetic_cost(c))
    q = lambda records, n: _quality(task, feats, flops, records, "joint", n_own=n, with_knobs=False)  # noqa: E731
    alone = q(None, 96)
    misled = q(wrong, 96)
    assert misled > alone - 0.1, (misled, alone)
    assert q(wrong, 4) < alone - 0.5     # it does mislead
    decaying = q(wrong, 16)
    monkeypatch.setattr(cost_model, "OTHER_HALF", 10 ** 9)
    constant = q(wrong, 16)
    assert decaying > constant + 0.1, (decaying, constant)


def test_transfer_must_be_joint_margin_or_agree(shapes):
    from tilecraft.autotune.cost_model import XGBoostCostModel

    with pytest.raises(ValueError, match="transfer must be 'joint', 'margin' or 'agree', not 'both'"):
        XGBoostCostModel(shapes[0], transfer="both")


def test_agreement_weighted_transfer_keeps_an_agreeing_neighbour_and_drops_a_misleading_one(shapes):
    """transfer="agree": the neighbour's margin is weighed by how it ranks own measurements. A
    neighbour that ranks alike keeps weight ~1; one whose speeds run the other way gets 0, so
    16 own measurements rank this task as well as without it, where the plain margin transfer
    stays misled."""
    from tilecraft.autotune.cost_model import XGBoostCostModel

    task, other, feats, flops = shapes
    own = np.random.default_rng(0).permutation(len(flops))[:16]
    weights = {}
    for name, cost in (("alike", fk.synthetic_cost), ("wrong", lambda c: 1.0 / fk.synthetic_cost(c))):
        model = XGBoostCostModel(task, feature_type="itervar", seed=0, num_threads=1, transfer="agree",
                                 extractor=lambda idx: feats[np.asarray(idx)], with_knobs=False)
        assert model.fit_log(_records(other, cost), 64) and model.base_weight == 1.0
        model.fit(own, flops[own], 64)
        weights[name] = model.base_weight
    assert weights["alike"] > 0.8 and weights["wrong"] == 0.0, weights
    wrong = _records(other, lambda c: 1.0 / fk.synthetic_cost(c))
    q = lambda records, transfer: _quality(task, feats, flops, records, transfer, n_own=16,  # noqa: E731
                                           with_knobs=False)
    alone, agree, margin = q(None, "margin"), q(wrong, "agree"), q(wrong, "margin")
    assert abs(agree - alone) < 1e-9 and margin < alone - 0.05, (agree, alone, margin)


def test_rank_agreement_is_spearmans_rho():
    from tilecraft.autotune.cost_model import rank_agreement

    assert rank_agreement([1, 2, 3, 4], [10, 20, 30, 25]) == pytest.approx(0.8)
    assert rank_agreement([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert rank_agreement([1, 1, 1], [1, 2, 3]) == 0.0 and rank_agreement([1, 2], [1, 2]) == 0.0


def test_tuner_compare_computes_a_cold_feature_cache_with_transfer_on(monkeypatch, tmp_path):
    """bench/tuner_compare.py answers the neighbour's features from its cached table; with that
    cache still cold, computing it went through the same answer and recursed without end."""
    import importlib.util
    import pathlib

    from tilecraft.autotune import features as feature_mod

    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "tuner_compare.py"
    spec = importlib.util.spec_from_file_location("tuner_compare_script", path)
    tc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tc)
    monkeypatch.setattr(tc, "TABLES", str(tmp_path))
    monkeypatch.setattr(feature_mod, "features_of_configs", _tile_features)
    contexts = {}
    for name, args in (("small", (64, 64, 16)), ("large", (128, 128, 32))):
        task = autotune.task.create("test/fake_matmul", args=args, target="llvm")
        truth = GroundTruth.from_costs(task, [fk.synthetic_cost(c) for c in task.config_space])
        contexts[name] = tc.Context(truth, name)
    tc.memoize_other_task_features(contexts)
    table = contexts["small"].feature_matrix("itervar")
    assert (tmp_path / ".cache" / "small" / "features_itervar.npy").exists()
    task = contexts["small"].truth.task
    configs = [task.config_space.get(i) for i in (0, 5)]
    got = feature_mod.features_of_configs(task, configs, "itervar")        # answered from the table
    assert np.array_equal(np.stack(got), table[[0, 5]])


@autotune.template("test/fake_matmul_3way")
def _fake_matmul_3way(N, M, K):
    """fake_matmul's knob names with three-way splits: knob features of another width."""
    cfg = autotune.get_config()
    cfg.define_split("tile_y", N, num_outputs=3)
    cfg.define_split("tile_x", M, num_outputs=3)
    cfg.define_split("tile_k", K, num_outputs=2, policy="power2")
    cfg.define_knob("unroll", [0, 1])
    cfg.add_flop(2.0 * N * M * K)
    return fk.FakeSchedule(), []


def _knob_model(task, records=None, own=(), flops=None, transfer_knobs=False, feature_type="knob", feats=None):
    from tilecraft.autotune.cost_model import XGBoostCostModel

    model = XGBoostCostModel(task, feature_type=feature_type, seed=0, num_threads=1,
                             transfer_knobs=transfer_knobs,
                             extractor=None if feats is None else (lambda idx: feats[np.asarray(idx)]))
    trained = model.fit_log(records, 64) if records is not None else None
    if len(own):
        model.fit(own, flops[own], 64)
    return model, trained


def test_knob_features_transfer_between_shapes_of_one_template(shapes):
    """Split sizes as log2 (outer -1) mean the same tiling in every shape: a knob model of the
    neighbour's records ranks this task's configs before any own measurement, and with 6 own
    ones it ranks better than those 6 alone."""
    task, other, _, flops = shapes
    records = _records(other, fk.synthetic_cost)
    allc = np.arange(len(flops))
    model, trained = _knob_model(task, records)
    assert trained and replay.ndcg_at(flops, model.predict(allc), 32) > 0.8
    own = np.random.default_rng(0).permutation(len(flops))[:6]
    test = np.setdiff1d(allc, own)
    with_other = replay.ndcg_at(flops[test], _knob_model(task, records, own, flops)[0].predict(test), 32)
    alone = replay.ndcg_at(flops[test], _knob_model(task, None, own, flops)[0].predict(test), 32)
    assert with_other > 0.8 and with_other > alone + 0.1, (with_other, alone)


def test_knob_transfer_skips_a_task_whose_knobs_mean_something_else(shapes):
    task, other, _, flops = shapes
    three = autotune.task.create("test/fake_matmul_3way", args=(64, 64, 16), target="llvm")
    model, trained = _knob_model(task, _records(three, lambda c: 1e-3))
    assert trained is False and model.base_bst is None
    # mixed: only the matching task's records are used
    model, trained = _knob_model(task, _records(three, lambda c: 1e-3) + _records(other, fk.synthetic_cost))
    assert trained and replay.ndcg_at(flops, model.predict(np.arange(len(flops))), 32) > 0.8


def test_loop_nest_transfer_also_steers_the_search_with_the_neighbours_knob_model(shapes):
    """With itervar features the search is steered by a knob booster (cheap); the neighbour's
    knob records give it a base model, so its first proposals are good before any own fit."""
    task, other, feats, flops = shapes
    records = _records(other, fk.synthetic_cost)
    allc = np.arange(len(flops))
    steered, _ = _knob_model(task, records, feature_type="itervar", feats=feats, transfer_knobs=True)
    assert steered.knob_base_bst is not None
    assert replay.ndcg_at(flops, steered.predict_fast(allc), 32) > 0.8
    own = np.random.default_rng(1).permutation(len(flops))[:6]
    steered.fit(own, flops[own], 64)           # own measurements go on top of the base model
    assert replay.ndcg_at(flops, steered.predict_fast(allc), 32) > 0.8
    plain, _ = _knob_model(task, records, feature_type="itervar", feats=feats)
    assert plain.knob_base_bst is None          # off by default


def test_tuner_compare_draws_a_filtered_neighbours_records_among_its_valid_configs(monkeypatch):
    """The neighbour's 128 records are drawn among its table's configs: with a multi_filter'd
    space (conv2d's), positions below len(space) are not config indices (IndexError before)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "tuner_compare.py"
    spec = importlib.util.spec_from_file_location("tuner_compare_script", path)
    tc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tc)
    contexts = {}
    for name, args in (("small", (64, 64, 16)), ("large", (128, 128, 32))):
        task = autotune.task.create("test/fake_matmul", args=args, target="llvm")
        if name == "large":
            task.config_space.multi_filter(lambda e: e["tile_y"].size[-1] >= 8)
        truth = GroundTruth.from_costs(task, [fk.synthetic_cost(c) for c in task.config_space])
        contexts[name] = tc.Context(truth, name)
    assert len(contexts["large"].truth) < contexts["large"].truth.task.config_space.range_length
    monkeypatch.setattr(tc, "NEIGHBOUR", {"small": "large"})
    got = tc.run_space("small", ["xgb-knob-transfer"], 2, 16, contexts, with_ranking=False)
    assert got["tuners"]["xgb-knob-transfer"]["runs"] == 2


def test_transfer_check_scores_each_feature_type_and_the_same_configs(monkeypatch, tmp_path):
    """`tuner_compare.py --transfer-check`: with a neighbour whose speeds follow the same rule, the
    model of its table ranks this one well with knob and loop-nest features, and the configs both
    spaces hold rank alike; with speeds that run the other way, they rank it badly."""
    import importlib.util
    import pathlib

    from tilecraft.autotune import features as feature_mod

    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "tuner_compare.py"
    spec = importlib.util.spec_from_file_location("tuner_compare_script", path)
    tc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tc)
    monkeypatch.setattr(tc, "TABLES", str(tmp_path))
    monkeypatch.setattr(feature_mod, "features_of_configs", _tile_features)

    def ctx(name, args, cost):
        task = autotune.task.create("test/fake_matmul", args=args, target="llvm")
        return tc.Context(GroundTruth.from_costs(task, [cost(c) for c in task.config_space]), name)

    small = ctx("small", (64, 64, 16), fk.synthetic_cost)
    alike = tc.transfer_check(small, ctx("large", (128, 128, 32), fk.synthetic_cost), seeds=2)
    assert set(alike) == {"knob", "itervar", "itervar-norm", "same_configs", "self_agreement"}
    assert alike["self_agreement"] == {"target": 1.0, "neighbour": 1.0}       # noiseless passes
    assert alike["knob"]["rho"] > 0.8 and alike["knob"]["best_of_16"] > 0.95
    assert alike["itervar"]["ndcg32"] > 0.8 and alike["same_configs"]["rho"] > 0.95
    unlike = tc.transfer_check(small, ctx("large2", (128, 128, 32), lambda c: 1.0 / fk.synthetic_cost(c)), seeds=2)
    assert unlike["knob"]["rho"] < 0 and unlike["same_configs"]["rho"] < -0.95


def test_pass_agreement_falls_with_the_noise_between_passes():
    """In a space whose configs differ by at most 20%, a table whose passes scatter by 30% ranks
    against itself worse than one scattered by 1%;
    a table of one pass has no figure."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "tuner_compare.py"
    spec = importlib.util.spec_from_file_location("tuner_compare_script", path)
    tc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tc)
    task = autotune.task.create("test/fake_matmul", args=(64, 64, 16), target="llvm")
    raw = [fk.synthetic_cost(c) for c in task.config_space]
    costs = [1e-3 * (1 + 0.2 * (c - min(raw)) / (max(raw) - min(raw))) for c in raw]   # a flat space: 20%
    quiet = tc.pass_agreement(GroundTruth.from_costs(task, costs, spread=0.01, seed=1))
    noisy = tc.pass_agreement(GroundTruth.from_costs(task, costs, spread=0.3, seed=1))
    assert 0.9 < quiet <= 1.0 and noisy < quiet - 0.05, (quiet, noisy)
    one = GroundTruth.from_costs(task, costs)
    one.samples = [s[:1] for s in one.samples]
    assert tc.pass_agreement(one) is None
