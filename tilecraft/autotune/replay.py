"""Replay: run any tuner against a ground-truth table instead of the machine.

A *ground-truth table* holds the measured cost of every configuration of one tuning space
(``bench/ground_truth.py`` makes them; ``bench/ground_truth/*.jsonl.gz`` ships some). Replaying
a tuner against it measures nothing: the builder and runner look the configuration up. A
comparison of several tuners over 20 seeds then takes seconds, and because the true optimum is
known, "how many trials until 99% of the best" has an exact answer.

The table format (gzip'd JSON lines; the first line is the header)::

    {"ground_truth": 1, "space": "gemm256", "target": "llvm", "device": "AMD EPYC", "threads": 1,
     "task": {"name": "topi/matmul.llvm", "args": [256, 256, 256, "float32"], "flop": 33554432.0,
              "module": "tilecraft.topi.matmul"},
     "knobs": [["tile_y", "sp", [[-1, 1, 1], ...]], ["order", "ot", [0, 1]], ...],
     "restricted": {"order": [0]}, "timing": {...}, ...}
    {"i": 0, "cost": 0.00123, "passes": [0.00124, 0.00123, 0.00122], "spread": 0.016,
     "load": [0.4, 0.2, 0.9], "others": [0.01, 0.0, 0.1]}
    {"i": 1, "error": "WRONG_ANSWER", "msg": "..."}

``i`` is the mixed-radix index in the space the header's ``knobs`` describe (a template's space,
possibly restricted to some knob values: ``restricted``); where the template filters its space
(``multi_filter``), the header's ``valid`` lists the indices of the configs it keeps, and the
table has a row for each of those (replayed tuners see the same filtered space); ``cost`` is seconds per call (the
median of the passes' medians), ``passes`` the median of each pass, measured at different
times; ``load`` the 1-minute load average and ``others`` the cores other processes kept busy
while each pass timed the config.

    truth = GroundTruth.load("bench/ground_truth/gemm256.jsonl.gz")
    curves = replay_tuner(lambda task, seed: RandomTuner(task, seed=seed), truth, n_trial=256,
                          seeds=range(20))
    trials_to_reach(curves[0], 0.99)      # trials until 99% of the true optimum
"""
from __future__ import annotations

import copy
import gzip
import json
import math
import time
from collections import OrderedDict
from typing import Callable, Iterable, Sequence

import numpy as np

from .measure import BuildResult, MeasureErrorNo, MeasureInput, MeasureResult
from .space import ConfigSpace, KnobSpace, entity_from_json

TABLE_VERSION = 1


# ---------------------------------------------------------------------------------------------
# Spaces written out and read back.


def space_knobs(space: ConfigSpace) -> list:
    """The knobs of ``space`` as JSON: ``[[name, kind, [value, ...]], ...]``.

    >>> space_knobs(task.config_space)[0][:2]
    ['tile_y', 'sp']
    """
    return [[name, ks.entities[0].kind, [e.to_json() for e in ks.entities]] for name, ks in space.space_map.items()]


def space_from_knobs(knobs: Sequence, valid: Sequence[int] | None = None) -> ConfigSpace:
    """A ``ConfigSpace`` with exactly the knob values of ``knobs`` (``space_knobs``' form), so a
    table replays the space it was measured in, whatever the template offers on this host.
    ``valid``: the indices a template's ``multi_filter`` kept (None: all).

    >>> space_from_knobs([["order", "ot", [0, 1]]]).get(1)["order"].val
    1
    """
    space = ConfigSpace()
    for name, kind, values in knobs:
        ks = KnobSpace()
        ks.kind = kind
        ks.entities = [entity_from_json(kind, v) for v in values]
        if not ks.entities:
            raise ValueError(f"knob {name!r} has no values")
        space._add(name, ks)
    space._collect = False
    if valid is not None:
        keep = frozenset(int(i) for i in valid)
        if any(not 0 <= i < space.range_length for i in keep):
            raise ValueError(f"valid config indices outside the space of {space.range_length}")
        space._constraints.append(lambda entity: entity.index in keep)
        space._valid_indices = np.array(sorted(keep), dtype=np.int64)
    return space


def restrict_space(space: ConfigSpace, keep: dict) -> ConfigSpace:
    """``space`` with some knobs limited to the values in ``keep`` (``{name: [value, ...]}``,
    values as ``to_json`` writes them, e.g. ``{"order": [0], "tile_k": [[-1, 16]]}``). Knobs not
    named keep all their values. A name or value the space lacks is a ``ValueError``. The
    template's ``multi_filter`` constraints still hold: they read knobs by name, so they judge the
    restricted space's configs as they judged the whole space's.

    >>> restrict_space(task.config_space, {"order": [0]})["order"]
    ot(0)
    """
    out = ConfigSpace()
    for name in keep:
        if name not in space.space_map:
            raise ValueError(f"restrict_space: no knob {name!r}; the knobs are {list(space.space_map)}")
    for name, ks in space.space_map.items():
        if name in keep:
            wanted = [entity_from_json(ks.entities[0].kind, v) for v in keep[name]]
            missing = [v for v, w in zip(keep[name], wanted) if w not in ks.entities]
            if missing:
                raise ValueError(f"restrict_space: knob {name!r} has no value {missing[0]!r}; its values are "
                                 f"{[e.to_json() for e in ks.entities]}")
            ks = copy.copy(ks)
            ks.entities = [e for e in ks.entities if e in wanted]
        out._add(name, ks)
    out._collect = False
    out._constraints = list(space._constraints)
    out.flop, out.code_hash = space.flop, space.code_hash
    return out


# ---------------------------------------------------------------------------------------------
# The table.


class GroundTruth:
    """A ground-truth table: the task (with the table's space), each config's cost.

    ``costs[i]``: seconds per call of config ``i`` (``inf`` where it failed); ``samples[i]``:
    its per-pass figures; ``errors``: ``{i: (kind, message)}``; ``optimum``: the lowest cost;
    ``header``: the table's first line.

    >>> truth = GroundTruth.load("bench/ground_truth/gemm256.jsonl.gz")
    >>> truth.optimum, len(truth.task.config_space)
    """

    def __init__(self, header: dict, rows: Iterable[dict]):
        from .task import Task

        self.header = header
        self.name = header.get("space", "?")
        t = header["task"]
        space = space_from_knobs(header["knobs"], header.get("valid"))
        self.task = Task(t["name"], t["args"], header.get("target") or "llvm", None, t.get("module"))
        self.task.config_space = space
        self.task.flop = float(t.get("flop") or 0.0)
        n = space.range_length
        #: the indices of the space's configs (all of range(n) unless the template filters)
        self.valid = space._valid() if space._constraints else np.arange(n)
        self.costs = np.full(n, np.nan)
        self.samples: list = [()] * n
        self.spread = np.zeros(n)
        self.errors: dict = {}
        for r in rows:
            i = int(r["i"])
            if not 0 <= i < n:
                raise ValueError(f"ground truth {self.name}: row index {i} outside the space of {n} configs")
            if r.get("error"):
                self.costs[i] = np.inf
                self.errors[i] = (r["error"], r.get("msg", ""))
            else:
                self.costs[i] = float(r["cost"])
                self.samples[i] = tuple(float(c) for c in r.get("passes", (r["cost"],)))
                self.spread[i] = float(r.get("spread", 0.0))
        missing = int(np.isnan(self.costs[self.valid]).sum())
        if missing:
            raise ValueError(f"ground truth {self.name}: {missing} of {len(self.valid)} configs have no row "
                             "(an unfinished table? finish it with bench/ground_truth.py)")
        self.costs[np.isnan(self.costs)] = np.inf          # indices the template's filter left out
        self.optimum = float(np.min(self.costs))

    @classmethod
    def load(cls, path) -> "GroundTruth":
        """Read a table (``.jsonl.gz`` or plain ``.jsonl``)."""
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            header = json.loads(f.readline())
            if header.get("ground_truth") != TABLE_VERSION:
                raise ValueError(f"{path}: not a ground-truth table of format {TABLE_VERSION}")
            rows = [json.loads(line) for line in f if line.strip()]
        return cls(header, rows)

    @classmethod
    def from_costs(cls, task, costs: Sequence[float], name: str = "synthetic", spread: float = 0.0,
                   seed: int = 0) -> "GroundTruth":
        """A table for ``task``'s space from a cost per config, in the order the space iterates
        (``inf`` or ``nan``: an error), e.g. a synthetic cost function in a test. With
        ``spread``, each config gets three per-pass figures scattered by that relative amount.

        >>> truth = GroundTruth.from_costs(task, [cost(c) for c in task.config_space])
        """
        space = task.config_space
        if len(costs) != len(space):
            raise ValueError(f"from_costs: {len(costs)} costs for a space of {len(space)} configs")
        rng = np.random.default_rng(seed)
        header = {"ground_truth": TABLE_VERSION, "space": name, "target": str(task.target or "llvm"),
                  "device": "synthetic",
                  "task": {"name": task.name, "args": list(task.args), "flop": task.flop,
                           "module": task.template_module},
                  "knobs": space_knobs(space),
                  "valid": [space.valid_index(k) for k in range(len(space))] if space._constraints else None}
        rows = []
        for i, c in zip((space.valid_index(k) for k in range(len(space))), costs):
            if not np.isfinite(c):
                rows.append({"i": i, "error": "RUNTIME_DEVICE", "msg": "synthetic failure"})
            else:
                passes = [float(c)] * 3 if not spread else sorted(float(c) * (1 + spread * rng.uniform(-1, 1, 3)))
                rows.append({"i": i, "cost": float(np.median(passes)), "passes": passes})
        return cls(header, rows)

    def __len__(self) -> int:
        return len(self.valid)

    def relative(self, indices) -> np.ndarray:
        """Throughput of ``indices`` relative to the optimum (1.0 = the best; 0 for failures)."""
        return self.optimum / self.costs[np.asarray(indices, dtype=np.int64)]

    def near_optimal(self, level: float) -> int:
        """How many configs reach ``level`` (e.g. 0.99) of the optimum's throughput."""
        return int(np.sum(self.optimum / self.costs >= level))

    def measure(self, index: int, rng: np.random.Generator | None = None) -> MeasureResult:
        """The result a tuner sees for ``index``: the error, or one of the config's per-pass
        figures drawn at random (with ``rng``; its median without), so a replayed tuner meets
        the measurement noise the table recorded."""
        if index in self.errors:
            kind, msg = self.errors[index]
            return MeasureResult((), MeasureErrorNo[kind], msg, 0.0, time.time())
        samples = self.samples[index] or (self.costs[index],)
        cost = samples[int(rng.integers(len(samples)))] if rng is not None else float(self.costs[index])
        return MeasureResult((cost,), MeasureErrorNo.NO_ERROR, "", 0.0, time.time())

    def records(self, indices, rng: np.random.Generator | None = None) -> list:
        """``(MeasureInput, MeasureResult)`` pairs of ``indices``, as a tuning log holds them
        (for ``tuner.load_history``: resuming, or transfer to another table's task)."""
        space = self.task.config_space
        return [(MeasureInput(self.task.target, self.task, space.get(int(i))), self.measure(int(i), rng))
                for i in indices]


# ---------------------------------------------------------------------------------------------
# Measuring by looking up.


class ReplayMeasure:
    """A builder and runner in one (``measure_option(builder=m, runner=m)``) that answer from a
    ``GroundTruth``: build errors of the table come back from ``build``, run results from
    ``run``. ``n_parallel`` is the batch size the tuner measures in. ``asked`` lists every
    index measured, in order.

    >>> m = ReplayMeasure(truth, batch_size=8, seed=0)
    >>> tuner.tune(256, autotune.measure_option(builder=m, runner=m))
    """

    _BUILD_ERRORS = ("INSTANTIATION_ERROR", "COMPILE_HOST", "COMPILE_DEVICE", "BUILD_TIMEOUT")

    def __init__(self, truth: GroundTruth, batch_size: int = 8, seed: int | None = 0, noise: bool = True):
        self.truth = truth
        self.n_parallel = batch_size
        self.rng = np.random.default_rng(seed) if noise else None
        self.asked: list[int] = []
        self.device_name = truth.header.get("device", "replay")

    def set_task(self, task):
        self.task = task

    def build(self, inputs) -> list[BuildResult]:
        out = []
        for inp in inputs:
            i = inp.config.index
            self.asked.append(i)
            kind, msg = self.truth.errors.get(i, (None, ""))
            if kind in self._BUILD_ERRORS:
                out.append(BuildResult(None, (), MeasureErrorNo[kind], msg, 0.0))
            else:
                out.append(BuildResult("replay", (), MeasureErrorNo.NO_ERROR, "", 0.0))
        return out

    def run(self, inputs, build_results) -> list[MeasureResult]:
        return [self.truth.measure(inp.config.index, self.rng) for inp in inputs]


def replay_tuner(make_tuner: Callable, truth: GroundTruth, n_trial: int, seeds: Iterable[int],
                 batch_size: int = 8, noise: bool = True, history: Callable | None = None) -> list:
    """Run ``make_tuner(task, seed)`` against ``truth`` once per seed; per seed the list of
    configs it measured, in order (``curve`` and ``trials_to_reach`` turn them into figures).
    ``history(seed)``, when given, returns records the tuner loads first (``load_history``):
    another task's records for transfer learning.

    >>> runs = replay_tuner(lambda t, s: XGBTuner(t, seed=s), truth, 256, range(20))
    """
    from .measure import measure_option

    out = []
    for seed in seeds:
        tuner = make_tuner(truth.task, seed)
        if history is not None:
            tuner.load_history(history(seed))
        m = ReplayMeasure(truth, batch_size, seed=seed + 10_000, noise=noise)
        tuner.tune(n_trial, measure_option(builder=m, runner=m))
        out.append(list(m.asked))
    return out


# ---------------------------------------------------------------------------------------------
# Metrics.


def curve(truth: GroundTruth, measured: Sequence[int]) -> np.ndarray:
    """Best-so-far throughput relative to the true optimum after each trial (1.0 = the optimum):
    by the table's figures, whatever noise the tuner met while measuring.

    >>> curve(truth, runs[0])[-1]
    1.0
    """
    if not len(measured):
        return np.zeros(0)
    return np.maximum.accumulate(truth.relative(measured))


def trials_to_reach(best_so_far: Sequence[float], level: float) -> float:
    """The first trial (counted from 1) at which ``best_so_far`` reaches ``level``; ``inf`` when it
    never does within the trials run.

    >>> trials_to_reach([0.5, 0.9, 0.99, 1.0], 0.99)
    3
    """
    hits = np.nonzero(np.asarray(best_so_far) >= level - 1e-12)[0]
    return int(hits[0]) + 1 if len(hits) else math.inf


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(25th percentile, median, 75th percentile) of ``values``, which may hold ``inf`` ("not
    reached"): a percentile that falls on or between infinite values is ``inf``.

    >>> quartiles([10, 20, 30, math.inf])
    (17.5, 25.0, inf)
    """
    v = sorted(float(x) for x in values)
    if not v:
        return (math.nan, math.nan, math.nan)

    def pct(q):
        pos = q * (len(v) - 1)
        lo, hi = int(math.floor(pos)), int(math.ceil(pos))
        if math.isinf(v[hi]) or math.isinf(v[lo]):
            return math.inf
        return v[lo] + (v[hi] - v[lo]) * (pos - lo)

    return (pct(0.25), pct(0.5), pct(0.75))


def area_under_curve(best_so_far: Sequence[float], budget: int) -> float:
    """The mean of the best-so-far curve over trials 1..``budget`` (a curve that stopped early
    keeps its last value): 1.0 would be the optimum from the first trial on.

    >>> area_under_curve([0.5, 1.0], 4)
    0.875
    """
    c = np.asarray(best_so_far, dtype=np.float64)[:budget]
    if len(c) == 0:
        return 0.0
    if len(c) < budget:
        c = np.concatenate([c, np.full(budget - len(c), c[-1])])
    return float(np.mean(c))


def random_search_median(truth: GroundTruth, level: float) -> float:
    """The exact median trials for uniform random sampling without replacement to reach
    ``level`` of the optimum: with K of N configs at the level, P(T > t) = C(N-K, t) / C(N, t).
    What the simulated Random tuner should agree with.

    >>> random_search_median(truth, 0.99)
    """
    n, k = len(truth), truth.near_optimal(level)
    if k == 0:
        return math.inf
    survive = 1.0          # P(T > t)
    for t in range(1, n - k + 2):
        survive *= (n - k - (t - 1)) / (n - (t - 1))
        if survive <= 0.5:
            return float(t)
    return float(n - k + 1)


def random_best_median(truth: GroundTruth, trials: int) -> float:
    """The exact median, over uniform random searches of ``trials`` configs without
    replacement, of the best one's throughput relative to the optimum (issue 13's fixed-budget
    figure for Random). With the configs sorted fastest first, the best of a search is at least
    the k-th with probability 1 - C(N-k, n) / C(N, n); the median is the k-th for the smallest k
    where that reaches one half (failures count as 0).

    >>> random_best_median(truth, 512)      # Random's median best within 512 trials
    """
    rel = np.sort(truth.relative(truth.valid))[::-1]
    n_all, n = len(rel), min(trials, len(rel))
    for k in range(1, n_all + 1):
        if n_all - k < n:
            return float(rel[k - 1])
        miss = 1.0         # C(N-k, n) / C(N, n): none of the k fastest drawn
        for j in range(n):
            miss *= (n_all - k - j) / (n_all - j)
            if miss < 0.5:
                break
        if miss <= 0.5:
            return float(rel[k - 1])
    return float(rel[-1])


def ndcg_at(truth_scores: Sequence[float], predicted: Sequence[float], k: int) -> float:
    """Normalised discounted cumulative gain of the top ``k`` of ``predicted`` with gains
    ``truth_scores`` (scikit-learn's ``ndcg_score`` for one query; ties broken by order).

    >>> ndcg_at([3, 2, 1], [0.9, 0.5, 0.1], 2)
    1.0
    """
    t = np.asarray(truth_scores, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    k = min(k, len(t))
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    ideal = float(np.sum(np.sort(t)[::-1][:k] * disc))
    got = float(np.sum(t[np.argsort(-p, kind="stable")[:k]] * disc))
    return got / ideal if ideal > 0 else 0.0


def recall_at(truth_scores: Sequence[float], predicted: Sequence[float], k: int) -> float:
    """The share of the truly best ``k`` that are among the predicted best ``k``.

    >>> recall_at([3, 2, 1, 0], [0, 2, 3, 1], 2)
    0.5
    """
    t = np.asarray(truth_scores)
    p = np.asarray(predicted)
    k = min(k, len(t))
    top_true = set(np.argsort(-t, kind="stable")[:k].tolist())
    top_pred = set(np.argsort(-p, kind="stable")[:k].tolist())
    return len(top_true & top_pred) / k if k else 0.0


def ranking_quality(make_model: Callable, truth: GroundTruth, n_train: int, seed: int = 0,
                    k: int = 32) -> dict:
    """Train ``make_model(task)`` (a cost model: ``fit(indices, flops, plan_size)``,
    ``predict(indices)``) on ``n_train`` random configs of ``truth`` and rank the rest:
    ``{"ndcg": ndcg@k, "recall": recall@k, "train": n, "test": m}``. Failures are in the
    training set with throughput 0 and left out of the test set.

    >>> ranking_quality(lambda t: XGBoostCostModel(t, feature_type="knob"), truth, 128)
    """
    rng = np.random.default_rng(seed)
    order = truth.valid[rng.permutation(len(truth))]
    train, test = order[:n_train], order[n_train:]
    test = test[np.isfinite(truth.costs[test])]
    flops = lambda ids: truth.task.flop / truth.costs[ids]  # noqa: E731 -- inf cost → 0 FLOP/s
    model = make_model(truth.task)
    model.fit(train, flops(train), 64)
    pred = np.asarray(model.predict(test), dtype=np.float64)
    rel = truth.relative(test)
    return {"ndcg": ndcg_at(rel, pred, k), "recall": recall_at(rel, pred, k), "train": len(train),
            "test": len(test)}
