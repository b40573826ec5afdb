"""Model-based tuning: a cost model ranks configs, an optimizer proposes the next plan.

The first ``n_warmup`` configs (16 by default) are random. From then on the model is refitted on
every measurement so far after each ``refit_every`` new ones (8 by default, at the end of the
batch that completes them; AutoTVM refits every ``plan_size``) and the optimizer (parallel simulated annealing,
or an exact ranking of a small space) returns the ``plan_size`` unmeasured configs the model
likes best; the next batch is taken from the top of that plan. Each pick is a random unmeasured
config instead with probability ``eps`` (5%), so a wrong model cannot trap the search. The
annealing chains are persistent, and before each search the best measured configs are planted
among them (``seed_chains``), so the walk starts where the measurements say it is good.

A cost model is any object with ``fit(indices, flops, plan_size)``,
``predict(indices) -> scores`` and (optionally) ``fit_log(records, plan_size)`` for transfer
learning; inject one to test the loop without XGBoost.
"""
from __future__ import annotations

import numpy as np

from .sa_optimizer import SimulatedAnnealingOptimizer
from .tuner import Tuner


def submodular_pick(scores, knobs, n_pick: int, knob_weight: float = 1.0) -> list[int]:
    """Greedily pick ``n_pick`` rows maximising score plus ``knob_weight`` per knob value not
    yet covered by the picked rows (diversity-aware selection)."""
    n_knobs = len(knobs[0]) if len(knobs) else 0
    covered = [set() for _ in range(n_knobs)]
    remain = list(range(len(scores)))
    picked = []
    for _ in range(min(n_pick, len(scores))):
        best, best_gain = -1, -np.inf
        for x in remain:
            gain = scores[x] + knob_weight * sum(knobs[x][i] not in covered[i] for i in range(n_knobs))
            if gain > best_gain:
                best, best_gain = x, gain
        picked.append(best)
        remain.remove(best)
        for i in range(n_knobs):
            covered[i].add(knobs[best][i])
    return picked


#: transfer ranks every config of a space this small with the pre-trained model (one lowering each)
TRANSFER_RANK_ALL = 1024


class _FastView:
    def __init__(self, predict):
        self.predict = predict


class ModelBasedTuner(Tuner):
    """The loop of a model-guided tuner (see the module docstring); ``XGBTuner`` fills it in.

    >>> ModelBasedTuner(task, FakeModel(), SimulatedAnnealingOptimizer(task), n_warmup=8)
    """

    def __init__(self, task, cost_model, model_optimizer, plan_size: int = 64,
                 diversity_filter_ratio: float | None = None, eps: float = 0.05, seed: int | None = None,
                 n_warmup: int | None = 16, refit_every: int | None = 8, seed_chains: int = 8):
        super().__init__(task, seed)
        if refit_every is not None and refit_every < 1:
            raise ValueError(f"refit_every must be a positive number of measurements (or None), not {refit_every!r}")
        self.cost_model = cost_model
        self.model_optimizer = model_optimizer
        self.plan_size = plan_size
        self.diversity_filter_ratio = diversity_filter_ratio
        self.eps = eps
        self.n_warmup = max(1, plan_size if n_warmup is None else n_warmup)
        self.refit_every = refit_every or plan_size
        self.seed_chains = seed_chains
        self.trials: list[int] = []
        self.trial_pt = 0
        self.xs: list[int] = []
        self.ys: list[float] = []
        self.train_ct = 0
        self.fitted_at = 0          # measurements the last fit saw
        self.flops_max = 0.0
        self.rerank = 4

    def next_batch(self, batch_size):
        batch = []
        while len(batch) < batch_size and len(self.visited) + len(batch) < len(self.space):
            index = None
            explore = self.rng.random() < self.eps
            while not explore and self.trial_pt < len(self.trials):
                cand = self.trials[self.trial_pt]
                self.trial_pt += 1
                if cand not in self.visited and all(c.index != cand for c in batch):
                    index = cand
                    break
            if index is None:
                # an ε-greedy pick, no plan yet, or the plan used up: a random unmeasured config
                for _ in range(100):
                    cand = self._random_unvisited()
                    if cand is None or all(c.index != cand for c in batch):
                        index = cand
                        break
                if index is None:
                    break
            batch.append(self.space.get(index))
        return batch

    def update(self, inputs, results):
        for inp, res in zip(inputs, results):
            self.visited.add(inp.config.index)     # as TVM's: results handed in directly count too
            self.xs.append(inp.config.index)
            flops = self.flops_of(res)
            self.ys.append(flops)
            self.flops_max = max(self.flops_max, flops)
        n = len(self.xs)
        if self.flops_max <= 0 or n == self.fitted_at:
            return
        if self.train_ct == 0:
            due = n >= self.n_warmup
        else:
            due = n >= self.fitted_at + self.refit_every
        if due:
            self.retrain()

    def retrain(self):
        """Fit the model on every measurement so far and plan the next ``plan_size`` trials.

        A model with a cheap ``predict_fast`` (knob features) next to an expensive ``predict``
        (loop-nest features, one lowering per config) is searched with the cheap one, and the
        ``rerank`` × more candidates it proposes are ordered by the expensive one.
        """
        self.cost_model.fit(self.xs, self.ys, self.plan_size)
        n_cand = int(self.plan_size * (self.diversity_filter_ratio or 1))
        plant = getattr(self.model_optimizer, "seed_chains", None)
        if plant is not None and self.seed_chains:
            order = np.argsort(-np.asarray(self.ys), kind="stable")[: self.seed_chains]
            plant([self.xs[i] for i in order if self.ys[i] > 0])
        fast = getattr(self.cost_model, "predict_fast", None)
        if fast is not None:
            cands = self.model_optimizer.find_maximums(_FastView(fast), n_cand * self.rerank, self.visited)
            scores = np.asarray(self.cost_model.predict(np.array(cands, dtype=np.int64)))
            cands = [cands[i] for i in np.argsort(-scores, kind="stable")[:n_cand]]
        else:
            cands = self.model_optimizer.find_maximums(self.cost_model, n_cand, self.visited)
        if self.diversity_filter_ratio:
            knobs = [self.space.point2knob(int(c)) for c in cands]
            pick = submodular_pick(np.zeros(len(cands)), knobs, self.plan_size, knob_weight=1)
            cands = [cands[i] for i in pick]
        self.trials = [int(m) for m in cands]
        self.trial_pt = 0
        self.train_ct += 1
        self.fitted_at = len(self.xs)

    def _transfer(self, records):
        """Pre-train on other tasks' records; plan the first trials from candidates ranked by
        that model: the whole space when it has at most ``TRANSFER_RANK_ALL`` configs, else
        ``4 × plan_size`` random ones (its features are loop-nest ones: too slow for a search)."""
        fit_log = getattr(self.cost_model, "fit_log", None)
        if fit_log is None or not fit_log(records, self.plan_size):
            return
        n = len(self.space)
        if n <= TRANSFER_RANK_ALL and not self.space._constraints:
            cands = [i for i in range(n) if i not in self.visited]
        else:
            cands = []
            for _ in range(self.plan_size * 4):
                c = self._random_unvisited()
                if c is None:
                    break
                cands.append(c)
            cands = list(dict.fromkeys(cands))
        if cands:
            scores = np.asarray(self.cost_model.predict(np.array(cands, dtype=np.int64)))
            self.trials = [int(cands[i]) for i in np.argsort(-scores, kind="stable")[:self.plan_size]]
            self.trial_pt = 0

    def has_next(self):
        return len(self.visited) < len(self.space)


class XGBTuner(ModelBasedTuner):
    """AutoTVM's tuner: an XGBoost cost model and parallel simulated annealing.

    ``feature_type``: ``itervar`` (per-loop features of the lowered nest), ``knob`` (the knob
    values) or ``curve`` (per-buffer touch curves); ``loss_type``: ``rank`` (``rank:pairwise``)
    or ``reg``; ``optimizer``: ``"sa"`` or an object with ``find_maximums(model, num,
    exclusive)``; ``cost_model``: replace the XGBoost model (tests inject a fake);
    ``n_warmup``: random configs before the first fit (None: ``plan_size``, AutoTVM's);
    ``refit_every``: measurements between refits (None: ``plan_size``, AutoTVM's); ``eps``: the
    chance that a pick is random.

    >>> tuner = XGBTuner(task, loss_type="rank")
    >>> tuner.tune(n_trial=200, measure_option=option, callbacks=[progress_bar(200)])
    """

    def __init__(self, task, plan_size: int = 64, feature_type: str = "itervar", loss_type: str = "rank",
                 num_threads: int | None = None, optimizer="sa", diversity_filter_ratio: float | None = None,
                 log_interval: int = 50, cost_model=None, seed: int | None = None, n_warmup: int | None = 16,
                 refit_every: int | None = 8, eps: float = 0.05):
        if cost_model is None:
            from ..cost_model import XGBoostCostModel

            cost_model = XGBoostCostModel(task, feature_type=feature_type, loss_type=loss_type,
                                          num_threads=num_threads, seed=seed)
        if optimizer == "sa":
            optimizer = SimulatedAnnealingOptimizer(task, seed=seed)
        elif isinstance(optimizer, str):
            raise ValueError(f"unknown optimizer {optimizer!r}: expected 'sa' or an optimizer object")
        super().__init__(task, cost_model, optimizer, plan_size, diversity_filter_ratio, eps=eps, seed=seed,
                         n_warmup=n_warmup, refit_every=refit_every)
        self.feature_type = feature_type
        self.loss_type = loss_type
