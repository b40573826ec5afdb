"""DropletTuner (AutoTVM's droplet search) and ModelBasedTuner.update marking configs visited,
with the fake builder/runner/cost model: milliseconds, no compiler."""
import numpy as np
import pytest

import tilecraft.autotune as autotune
from tilecraft.autotune.measure import MeasureInput
from tilecraft.autotune.tuner import DropletTuner, XGBTuner

import autotune_fakes as fk


@pytest.fixture
def task():
    return autotune.task.create("test/fake_matmul", args=(64, 64, 64), target="llvm")


def test_droplet_descends_to_the_optimum_of_a_smooth_space(task):
    option = fk.fake_option()
    tuner = DropletTuner(task)
    tuner.tune(n_trial=len(task.config_space), measure_option=option)
    ran = option["runner"].ran
    assert len(ran) == len(set(ran))                          # every trial a new config
    assert len(ran) < len(task.config_space) // 2             # it stopped by itself, long before exhausting
    best = min(fk.synthetic_cost(c) for c in task.config_space if c["tile_x"].size[-1] > 1)
    assert fk.synthetic_cost(tuner.best_config) == pytest.approx(best)
    assert not tuner.has_next()


def test_droplet_starts_where_told_and_checks_it(task):
    option = fk.fake_option()
    start = [3, 4, 2, 1]
    DropletTuner(task, start_position=start).tune(n_trial=1, measure_option=option)
    assert option["runner"].ran == [task.config_space.knob2point(start)]
    with pytest.raises(ValueError, match=r"start_position \[9, 0, 0, 0\] must give one digit per knob within "
                                         r"the knobs' lengths \[7, 7, 7, 2\]"):
        DropletTuner(task, start_position=[9, 0, 0, 0])
    with pytest.raises(ValueError, match=r"pvalue must be in \[0, 1\)"):
        DropletTuner(task, pvalue=1.5)


def test_model_based_update_marks_configs_visited(task):
    tuner = XGBTuner(task, cost_model=fk.FakeCostModel(task), plan_size=8, seed=0)
    option = fk.fake_option()
    configs = [task.config_space.get(i) for i in (3, 17, 40)]
    inputs = [MeasureInput(task.target, task, c) for c in configs]
    results = option["runner"].run(inputs, option["builder"].build(inputs))
    tuner.update(inputs, results)
    assert {3, 17, 40} <= tuner.visited
    tuner.tune(n_trial=20, measure_option=option)
    assert not {3, 17, 40} & set(option["runner"].ran[3:])     # not measured again
