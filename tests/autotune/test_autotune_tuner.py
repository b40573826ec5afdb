"""The tuner loop with a fake builder, runner and cost model: milliseconds, no compiler."""
import numpy as np
import pytest

import tilecraft.autotune as autotune
from tilecraft.autotune.tuner import (GridSearchTuner, RandomTuner, SimulatedAnnealingOptimizer,
                                      XGBTuner)

import autotune_fakes as fk


@pytest.fixture
def task():
    return autotune.task.create("test/fake_matmul", args=(64, 64, 64), target="llvm")


def test_task_has_space_flop_and_jsonable_workload(task):
    import json
    assert task.flop == 2.0 * 64**3
    assert len(task.config_space) == 7 * 7 * 7 * 2
    assert json.loads(json.dumps(task.workload)) == ["test/fake_matmul", 64, 64, 64]
    s, _ = task.instantiate(task.config_space.get(5))
    assert s.log and s.log[0][0] == "split"


def test_unknown_template_is_a_clear_error():
    with pytest.raises(KeyError, match="no template named"):
        autotune.task.create("test/nope", args=(1,))


@pytest.mark.parametrize("make", [lambda t: RandomTuner(t, seed=0), lambda t: GridSearchTuner(t)])
def test_model_free_tuners_measure_distinct_configs(task, make):
    option = fk.fake_option()
    tuner = make(task)
    tuner.tune(n_trial=40, measure_option=option)
    ran = option["runner"].ran
    assert len(ran) == 40 and len(set(ran)) == 40
    assert tuner.best_flops == pytest.approx(task.flop / (fk.synthetic_cost(tuner.best_config) * 1.005))
    assert len(tuner.trace) == 40


def test_grid_search_exhausts_the_space_and_stops():
    task = autotune.task.create("test/fake_matmul", args=(4, 2, 2), target="llvm")
    option = fk.fake_option()
    GridSearchTuner(task).tune(n_trial=1000, measure_option=option)
    assert sorted(option["runner"].ran) == list(range(len(task.config_space)))


def test_errors_are_counted_and_do_not_stop_tuning(task):
    option = fk.fake_option(fail_tile_x_one=True)
    tuner = GridSearchTuner(task)
    seen = []
    tuner.tune(n_trial=30, measure_option=option, callbacks=[lambda t, i, r: seen.extend(r)])
    assert len(seen) == 30
    errors = [r for r in seen if not r.ok]
    assert errors and all(r.error_no == autotune.MeasureErrorNo.COMPILE_HOST for r in errors)
    assert tuner.error_count == len(errors)


def test_early_stopping(task):
    option = fk.fake_option()
    tuner = GridSearchTuner(task)
    tuner.tune(n_trial=600, measure_option=option, early_stopping=20)
    assert len(option["runner"].ran) < 600
    assert len(tuner.trace) - 1 - tuner.best_iter >= 20
    assert tuner.stopped_early and tuner.trials_since_best == 20


def test_early_stopping_waits_for_min_trials(task):
    option = fk.fake_option()
    tuner = GridSearchTuner(task)
    tuner.tune(n_trial=600, measure_option=option, early_stopping=5, min_trials=100)
    assert 100 <= len(option["runner"].ran) < 600 and tuner.stopped_early


def test_early_stopping_counts_the_logged_trials_after_the_best(task, tmp_path):
    """A resumed run goes on counting from the log: the trials after the logged best count."""
    log = tmp_path / "t.jsonl"
    cost = lambda c: 1e-3 * (2.0 if c.index else 1.0)      # noqa: E731 -- config 0 is the best
    option = autotune.measure_option(builder=fk.FakeBuilder(), runner=fk.FakeRunner(cost))
    GridSearchTuner(task).tune(n_trial=15, measure_option=option, callbacks=[autotune.callback.log_to_file(log)])
    tuner = GridSearchTuner(task)
    assert tuner.load_history(autotune.record.load_from_file(log)) == 15
    assert tuner.trials_since_best == 14
    option = autotune.measure_option(builder=fk.FakeBuilder(), runner=fk.FakeRunner(cost))
    tuner.tune(n_trial=100, measure_option=option, early_stopping=20)
    assert len(option["runner"].ran) == 8 and tuner.stopped_early      # 6 more, in batches of 4


def test_xgb_tuner_with_fake_model_follows_the_model(task):
    model = fk.FakeCostModel(task)
    tuner = XGBTuner(task, plan_size=16, cost_model=model, seed=0)
    option = fk.fake_option()
    tuner.tune(n_trial=64, measure_option=option)
    # 16 random configs, then a refit every 8 (batches of 4): at 16, 24, ..., 64
    assert model.fits == 7 and model.predicted > 0
    ran = option["runner"].ran
    assert len(set(ran)) == 64
    # a perfect model finds the optimum within a few plans
    best = min(fk.synthetic_cost(c) for c in task.config_space)
    assert fk.synthetic_cost(tuner.best_config) == pytest.approx(best)


def test_refit_per_plan_and_warmup_as_autotvm_does(task):
    model = fk.FakeCostModel(task)
    tuner = XGBTuner(task, plan_size=16, cost_model=model, seed=0, n_warmup=None, refit_every=None)
    tuner.tune(n_trial=64, measure_option=fk.fake_option())
    assert model.fits == 4          # at 16, 32, 48, 64
    with pytest.raises(ValueError, match=r"refit_every must be a positive number of measurements \(or None\), not 0"):
        XGBTuner(task, cost_model=model, refit_every=0)


def test_warmup_is_random_then_the_plan_is_followed(task):
    model = fk.FakeCostModel(task)
    tuner = XGBTuner(task, plan_size=16, cost_model=model, seed=3, n_warmup=8, eps=0.0, refit_every=4)
    option = fk.fake_option()
    tuner.tune(n_trial=16, measure_option=option)
    ran = option["runner"].ran
    assert model.fits == 3                 # after 8, 12 and 16
    space = task.config_space
    ranked = sorted((i for i in range(len(space)) if i not in ran[:8]),
                    key=lambda i: fk.synthetic_cost(space.get(i)))
    assert ran[8:12] == ranked[:4]        # the model's four favourites, in order


def test_eps_picks_random_configs_at_that_rate(task):
    model = fk.FakeCostModel(task)
    tuner = XGBTuner(task, plan_size=64, cost_model=model, seed=1, n_warmup=8, eps=0.5)
    option = fk.fake_option()
    tuner.tune(n_trial=200, measure_option=option)
    space = task.config_space
    top = set(sorted(range(len(space)), key=lambda i: fk.synthetic_cost(space.get(i)))[:200])
    off_plan = sum(i not in top for i in option["runner"].ran[8:])
    assert 40 <= off_plan <= 110         # about half of 192 picks are random (some land in the top)


def test_small_spaces_are_ranked_exactly_and_planted_chains_walk_from_the_best(task):
    model = fk.FakeCostModel(task)
    space = task.config_space
    ranked = sorted(range(len(space)), key=lambda i: fk.synthetic_cost(space.get(i)))
    exact = SimulatedAnnealingOptimizer(task, seed=0)
    assert exact.exhaustive
    assert exact.find_maximums(model, 10, set(ranked[:3])) == ranked[3:13]
    worst = {}
    for planted in (False, True):
        sa = SimulatedAnnealingOptimizer(task, n_iter=1, early_stop=0, parallel_size=16, seed=0,
                                         exhaustive_limit=0)
        if planted:
            sa.seed_chains(ranked[:8] + ranked[100:120])
            assert list(sa.points[:8]) == ranked[:8] and len(sa.points) == 16    # at most half planted
        picks = sa.find_maximums(model, 4, set(ranked[:8]))
        worst[planted] = max(ranked.index(p) for p in picks)
    # one step from the best configs finds better ones than one step from random chains
    assert worst[True] < worst[False]


def test_sa_never_proposes_measured_configs(task):
    model = fk.FakeCostModel(task)
    sa = SimulatedAnnealingOptimizer(task, n_iter=200, seed=1, exhaustive_limit=0)
    space = task.config_space
    # exclude the model's 100 favourite configs: SA must find others
    ranked = sorted(range(len(space)), key=lambda i: fk.synthetic_cost(space.get(i)))
    exclusive = set(ranked[:100])
    picks = sa.find_maximums(model, 32, exclusive)
    assert len(picks) == 32 and len(set(picks)) == 32
    assert not set(picks) & exclusive
    assert set(picks) <= set(ranked[100:200]) | set(ranked[200:])
    # most picks are among the best remaining configs
    assert len(set(picks) & set(ranked[100:164])) >= 24


def test_sa_early_stops_and_persists_chains(task):
    model = fk.FakeCostModel(task)
    sa = SimulatedAnnealingOptimizer(task, n_iter=500, early_stop=50, seed=2, exhaustive_limit=0)
    sa.find_maximums(model, 8, set())
    assert sa.last_steps < 500
    first = sa.points.copy()
    sa.find_maximums(model, 8, set())
    assert sa.points is not None and len(first) == sa.parallel_size


def test_xgb_rank_model_orders_better_than_random(task):
    from sklearn.metrics import ndcg_score
    from tilecraft.autotune.cost_model import XGBoostCostModel

    rng = np.random.default_rng(0)
    space = task.config_space
    idx = rng.permutation(len(space))
    train, test = idx[:200], idx[200:]
    flops = lambda ids: np.array([task.flop / fk.synthetic_cost(space.get(int(i))) for i in ids])
    model = XGBoostCostModel(task, feature_type="knob", loss_type="rank", seed=0)
    model.fit(train, flops(train), 64)
    truth = flops(test)[None, :]
    ours = ndcg_score(truth, model.predict(test)[None, :], k=32)
    rand = np.mean([ndcg_score(truth, rng.random(len(test))[None, :], k=32) for _ in range(20)])
    assert ours > rand + 0.05


def test_xgb_tuner_real_model_beats_random_on_synthetic_task(task):
    results = {}
    for name in ("xgb", "random"):
        best = []
        for seed in range(2):
            tuner = (XGBTuner(task, plan_size=32, feature_type="knob", seed=seed) if name == "xgb"
                     else RandomTuner(task, seed=seed))
            tuner.tune(n_trial=96, measure_option=fk.fake_option())
            best.append(tuner.best_flops)
        results[name] = np.mean(best)
    assert results["xgb"] >= results["random"]


class _FixedOptimizer:
    """Proposes configs in a fixed order of preference (a stand-in for simulated annealing)."""

    def __init__(self, ranked):
        self.ranked, self.asked = ranked, []

    def find_maximums(self, model, num, exclusive):
        self.asked.append(num)
        return [c for c in self.ranked if c not in exclusive][:num]


def _knob_coverage(space, configs) -> int:
    """How many distinct values of each knob the configs use, summed over the knobs."""
    knobs = [space.point2knob(c) for c in configs]
    return sum(len({k[i] for k in knobs}) for i in range(len(knobs[0])))


def test_diversity_filter_picks_a_more_varied_plan_than_the_top_candidates(task):
    """The model's 8 favourites differ only in tile_k and unroll; the next 8 differ in every knob.
    Without the filter the plan is the 8 favourites; with ratio 2 the tuner asks for 16 and
    picks 8 that cover more knob values, among them some of the varied ones."""
    space = task.config_space
    same_tiles = [space.knob2point([0, 0, k, u]) for k in range(4) for u in range(2)]
    varied = [space.knob2point([k % 7, (k + 3) % 7, (k + 5) % 7, k % 2]) for k in range(1, 9)]
    plans = {}
    for ratio in (None, 2):
        opt = _FixedOptimizer(same_tiles + varied)
        tuner = XGBTuner(task, plan_size=8, cost_model=fk.FakeCostModel(task), optimizer=opt,
                         diversity_filter_ratio=ratio, seed=0, eps=0.0)
        tuner.xs, tuner.ys = list(range(8)), [1.0] * 8
        tuner.retrain()
        assert opt.asked == [8 * (ratio or 1)]
        plan = [c.index for c in tuner.next_batch(8)]
        assert plan == tuner.trials and len(set(plan)) == 8          # the plan is what is measured
        plans[ratio] = plan
    assert plans[None] == same_tiles
    assert set(plans[2]) <= set(same_tiles + varied) and set(plans[2]) & set(varied)
    assert _knob_coverage(space, plans[2]) > _knob_coverage(space, plans[None]) == 1 + 1 + 4 + 2


def test_diversity_filter_in_a_tuning_run(task):
    option = fk.fake_option()
    tuner = XGBTuner(task, plan_size=16, cost_model=fk.FakeCostModel(task), diversity_filter_ratio=2, seed=0)
    tuner.tune(n_trial=40, measure_option=option)
    assert len(tuner.visited) == 40 and len(set(option["runner"].ran)) == 40


def test_load_history_resumes_without_remeasuring(task):
    option = fk.fake_option()
    first = RandomTuner(task, seed=3)
    records = []
    first.tune(n_trial=20, measure_option=option, callbacks=[lambda t, i, r: records.extend(zip(i, r))])
    measured = set(option["runner"].ran)
    second = XGBTuner(task, plan_size=8, cost_model=fk.FakeCostModel(task), seed=3)
    assert second.load_history(records) == 20
    assert second.best_flops == pytest.approx(first.best_flops)
    option2 = fk.fake_option()
    second.tune(n_trial=30, measure_option=option2)
    assert not set(option2["runner"].ran) & measured
    assert len(second.visited) == 50
