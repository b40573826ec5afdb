"""The XGBoost cost model: predicts which configs run fastest, from their features.

Labels are throughputs (FLOP/s) normalised to the best measured (failures are 0). With
``loss_type="rank"`` the booster learns ``rank:pairwise`` — only the order matters, which is all
simulated annealing needs; ``"reg"`` regresses the normalised throughput instead.

xgboost is imported here and only here, when the first model is made.
"""
from __future__ import annotations

import logging

import numpy as np

from . import features as feature_mod

log = logging.getLogger("tilecraft.autotune")

#: joint transfer: the other tasks' ranking groups weigh OTHER_WEIGHT against this task's
#: measurements while there are none, half that after OTHER_HALF of them
OTHER_WEIGHT = 1.0
OTHER_HALF = 32
#: agreement-weighted transfer: the base margin's weight is measured once this task has this
#: many error-free measurements (before that the other tasks' model is trusted whole)
AGREE_MIN = 8


def rank_agreement(a, b) -> float:
    """Spearman's rank correlation of ``a`` and ``b`` (ties broken by position; 0 when either
    is constant or there are fewer than 3 values).

    >>> rank_agreement([1, 2, 3, 4], [10, 20, 30, 25])
    0.8
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    ra = np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(np.float64)
    rb = np.argsort(np.argsort(b, kind="stable"), kind="stable").astype(np.float64)
    return float(np.corrcoef(ra, rb)[0, 1])


class XGBoostCostModel:
    """``fit(indices, flops, plan_size)``, ``predict(indices)``, ``fit_log(records, plan_size)``.

    Transfer (``fit_log``: other tasks' records): with ``transfer="margin"`` (AutoTVM's way) a
    model of the other tasks stays under this task's model as its base margin; with ``"joint"``
    one booster learns from both, each task its own ranking group, the others' weight
    ``OTHER_WEIGHT * OTHER_HALF / (OTHER_HALF + n)`` after ``n`` own measurements.
    ``transfer="agree"`` is the margin way with the base margin weighed by how well the other
    tasks' model ranks this task's own measurements (Spearman's rho, clipped to [0, 1], measured
    at every fit from ``AGREE_MIN`` error-free ones on; ``base_weight``): a neighbour that ranks
    this space alike keeps its say, one that disagrees fades out instead of steering the search.
    ``normalise=True`` caps the features that grow with the problem
    (``loop_features.shape_normalised``) once other tasks' records are in. Replayed over ground
    truth (docs/autotune.md) neither option beat the default on the quiet GEMM tables. Loop-nest
    features transfer from any template; knob features (split sizes as log2 with the outer
    ``-1``, knob values) only from tasks of the same template whose knobs have this task's names
    and widths, where they mean the same tiling whatever the shape — and there they rank a
    neighbouring shape's configs better than the loop-nest ones (docs/autotune.md). With
    loop-nest features and ``transfer_knobs=True``, such records also give the knob booster that
    steers the search a base model (off by default: replayed, it won on GEMM 256³ and lost on
    GEMM 512³).

    ``with_knobs`` (default True): a loop-nest model (``itervar``, ``curve``) also sees the
    config's knob features, appended to its loop-nest row, so the booster splits on whichever
    ranks the space better. Replayed on the H100 tables (20 seeds, trials to 99% of the optimum):
    SGEMM 1024³ 206 → 98 (knob features alone: 107; the loop-nest features miss what the
    SGEMM's knobs say directly), the conv2d layer 66 → 56 (docs/autotune.md). Other tasks'
    records (transfer) train on the loop-nest columns only: their knobs are another space's.

    >>> model = XGBoostCostModel(task, feature_type="knob")
    >>> model.fit(indices, flops, 64); model.predict(other_indices)
    """

    def __init__(self, task, feature_type: str = "itervar", loss_type: str = "rank",
                 num_threads: int | None = None, num_boost_round: int = 150, seed: int | None = None,
                 extractor=None, transfer: str = "margin", normalise: bool = False, transfer_knobs: bool = False,
                 with_knobs: bool = True):
        import xgboost  # noqa: F401 -- fail early, and here, if it is missing

        if loss_type not in ("rank", "reg"):
            raise ValueError(f"loss_type must be 'rank' or 'reg', not {loss_type!r}")
        if transfer not in ("joint", "margin", "agree"):
            raise ValueError(f"transfer must be 'joint', 'margin' or 'agree', not {transfer!r}")
        self.transfer = transfer
        self.base_weight = 1.0  # the base margin's weight (transfer="agree" measures it)
        self.other = None       # other tasks' (features, labels, group sizes), for joint transfer
        self.normalise = normalise
        self.shape_free = False  # set by fit_log: loop-nest features shape-normalised from then on
        self.task = task
        self.feature_type = feature_type
        self.loss_type = loss_type
        self.num_boost_round = num_boost_round
        self.params = {
            "max_depth": 3, "gamma": 1e-4, "min_child_weight": 1, "subsample": 1.0, "eta": 0.3,
            "lambda": 1.0, "alpha": 0.0, "verbosity": 0,
            "objective": "rank:pairwise" if loss_type == "rank" else "reg:squarederror",
            "nthread": num_threads or 0, "seed": seed or 0,
        }
        self.extractor = extractor or feature_mod.make_extractor(task, feature_type)
        self.bst = None
        self.base_bst = None   # trained on other tasks' records (transfer), when any
        self.base_model = None  # TVM's name: the model load_basemodel gave base_bst from
        # Loop-nest features cost one lowering per config: too slow for the tens of thousands
        # of points simulated annealing visits. A second booster on knob features guides the
        # search; the loop-nest booster ranks its proposals (see ModelBasedTuner.retrain).
        self.knob_extractor = feature_mod.knob_extractor(task.config_space) if feature_type != "knob" else None
        self.knob_bst = None
        self.transfer_knobs = transfer_knobs
        self.knob_base_bst = None   # the knob booster's base model (transfer from same-template tasks)
        if self.knob_extractor is None:
            self.predict_fast = None
        self.with_knobs = with_knobs and self.knob_extractor is not None
        self._knob_width = (int(sum(t.shape[1] for t in feature_mod.knob_tables(task.config_space)[0])) or 1
                            if self.with_knobs else 0)

    def _train(self, x: np.ndarray, y: np.ndarray, base_margin: np.ndarray | None = None,
               groups: list[int] | None = None, weights: list[float] | None = None):
        """A booster on ``x``, ``y``; ``groups``: sizes of consecutive row groups (tasks), each
        labelled relative to its own best and ranked only within itself; ``weights`` per group."""
        import xgboost as xgb

        groups = groups or [len(y)]
        y = y.astype(np.float64).copy()
        start = 0
        for g in groups:
            y[start:start + g] /= max(float(np.max(y[start:start + g], initial=0.0)), 1e-12)
            start += g
        dtrain = xgb.DMatrix(x, label=y, base_margin=base_margin)
        if self.loss_type == "rank":
            dtrain.set_group(groups)
            if weights is not None:
                dtrain.set_weight(np.asarray(weights, dtype=np.float32))
        elif weights is not None:
            dtrain.set_weight(np.repeat(np.asarray(weights, dtype=np.float32), groups))
        return xgb.train(self.params, dtrain, num_boost_round=self.num_boost_round)

    def _features(self, xs) -> np.ndarray:
        xs = np.asarray(xs, dtype=np.int64)
        x = self.extractor(xs)
        if self.shape_free:
            from .loop_features import shape_normalised
            x = shape_normalised(x, self.feature_type)
        if self.with_knobs:
            x = np.concatenate([x, self.knob_extractor(xs)], axis=1)
        return x

    def _loop_columns(self, x: np.ndarray) -> np.ndarray:
        """The loop-nest part of this model's rows (what other tasks' records have)."""
        return x[:, :x.shape[1] - self._knob_width]

    def fit(self, xs, ys, plan_size: int = 64):
        x = self._features(xs)
        y = np.asarray(ys, dtype=np.float64)
        valid = np.all(np.isfinite(x), axis=1)
        if self.other is not None:
            # joint transfer: one booster on this task's measurements and the other tasks',
            # each task its own ranking group (throughputs of different shapes are not
            # compared), the others weighing less as this task's own measurements grow
            ox, oy, ogroups = self.other
            if self.with_knobs:        # the other tasks' knobs are another space's: missing here
                ox = np.concatenate([ox, np.full((len(ox), x.shape[1] - ox.shape[1]), np.nan, np.float32)], axis=1)
            n = int(valid.sum())
            w_other = OTHER_WEIGHT * OTHER_HALF / (OTHER_HALF + n)
            self.bst = self._train(np.concatenate([x[valid], ox]), np.concatenate([y[valid], oy]),
                                   groups=[n] + ogroups, weights=[1.0] + [w_other] * len(ogroups))
        else:
            # with a model of other tasks (margin transfer), this task's model learns what that
            # one gets wrong: its predictions are the starting margin (AutoTVM's way)
            if self.transfer == "agree" and self.base_bst is not None:
                ok = valid & (y > 0)
                if int(ok.sum()) >= AGREE_MIN:
                    self.base_weight = 1.0
                    rho = rank_agreement(self._base_margin(x[ok]), y[ok])
                    self.base_weight = min(1.0, max(0.0, rho))
            self.bst = self._train(x[valid], y[valid], self._base_margin(x[valid]))
        if self.knob_extractor is not None:
            kx = self.knob_extractor(np.asarray(xs, dtype=np.int64))
            self.knob_bst = self._train(kx, y, self._knob_margin(kx))

    def predict_fast(self, xs) -> np.ndarray:
        """Scores from knob features only (cheap; used to steer simulated annealing)."""
        if self.knob_bst is None and self.knob_base_bst is None:
            return self.predict(xs)
        kx = self.knob_extractor(np.asarray(xs, dtype=np.int64))
        if self.knob_bst is None:
            return np.asarray(self.knob_base_bst.inplace_predict(kx), dtype=np.float64)
        return np.asarray(self.knob_bst.inplace_predict(kx, base_margin=self._knob_margin(kx)), dtype=np.float64)

    def _knob_margin(self, kx: np.ndarray) -> np.ndarray | None:
        if self.knob_base_bst is None or not len(kx):
            return None
        return np.asarray(self.knob_base_bst.inplace_predict(kx, predict_type="margin"), dtype=np.float32)

    def _knob_rows(self, group) -> list | None:
        """Knob features of another task's records, or None when its knobs are not this task's
        (another template, or other knob names or widths: knobs that mean something else)."""
        if group[0][0].task.name != self.task.name:
            return None
        space = self.task.config_space
        names = list(space.space_map)
        width = int(sum(t.shape[1] for t in feature_mod.knob_tables(space)[0])) or 1
        rows = []
        for inp, _ in group:
            cfg = inp.config
            if list(getattr(cfg, "_entity_map", {})) != names:
                return None
            f = cfg.get_flatten_feature()
            if len(f) != width:
                return None
            rows.append(f)
        return rows

    def fit_log(self, records, plan_size: int = 64) -> bool:
        """Pre-train on other tasks' records (transfer learning); returns whether a model was
        trained. Loop-nest features (``itervar``, ``curve``) from any task's records; knob
        features from those of tasks with this task's knobs (same names and widths)."""
        xs, ys, groups = [], [], []
        kxs, kys, kgroups = [], [], []
        by_task: dict = {}
        for inp, res in records:
            by_task.setdefault((inp.task.workload, str(inp.target)), []).append((inp, res))
        for group in by_task.values():
            task = group[0][0].task
            best = max(((task.flop or 1.0) / r.mean_cost if r.ok else 0.0) for _, r in group) or 1.0
            labels = [((task.flop or 1.0) / r.mean_cost if r.ok else 0.0) / best for _, r in group]
            if self.feature_type == "knob" or self.transfer_knobs:
                krows = self._knob_rows(group)
                if krows is not None:
                    kxs += krows
                    kys += labels
                    kgroups.append(len(krows))
            if self.feature_type == "knob":
                continue
            try:
                feats = feature_mod.features_of_configs(task, [i.config for i, _ in group], self.feature_type)
            except Exception as err:  # the template is gone or changed: skip that task
                log.info("transfer: skipping %s: %s", task.name, err)
                continue
            kept = [(f, lab) for f, lab in zip(feats, labels) if f is not None]
            for f, lab in kept:
                xs.append(f)
                ys.append(lab)
            if kept:
                groups.append(len(kept))
        if self.feature_type == "knob":
            xs, ys, groups = kxs, kys, kgroups
        elif len(kxs) >= 16:        # the knob booster that steers the search starts from them too
            self.knob_base_bst = self._train(np.stack(kxs), np.asarray(kys), groups=kgroups)
        if len(xs) < 16:
            return False
        x, y = np.stack(xs), np.asarray(ys)
        if self.normalise and self.feature_type != "knob":
            from .loop_features import shape_normalised
            x = shape_normalised(x, self.feature_type)
            self.shape_free = True
        self.base_bst = self._train(x, y, groups=groups)     # ranks the first plan
        if self.transfer == "joint":
            self.other = (x, y, groups)
        return True

    def load_basemodel(self, base_model: "XGBoostCostModel") -> None:
        """TVM's transfer: start from ``base_model``'s predictions (its booster, or the one its
        ``fit_log`` trained) as this model's base margin, so ``fit`` learns what it gets wrong.
        The two must use the same features (``itervar``/``curve``: any tasks; ``knob``: the same
        knobs). Sets ``self.base_model``.

        >>> base = XGBoostCostModel(task, "itervar"); base.fit_log(records, 64)
        >>> model = XGBoostCostModel(task, "itervar"); model.load_basemodel(base); model.fit(xs, ys, 64)
        """
        booster = base_model.bst if base_model.bst is not None else base_model.base_bst
        if booster is None:
            raise ValueError("load_basemodel: the base model is not trained (call its fit or fit_log first)")
        if base_model.feature_type != self.feature_type or (
                self.feature_type == "knob" and base_model.task.config_space.dims != self.task.config_space.dims):
            raise ValueError(f"load_basemodel: the base model's features ({base_model.feature_type} of task "
                             f"{base_model.task.name}) are not this model's ({self.feature_type} of task "
                             f"{self.task.name}); knob features transfer only between the same knobs")
        n_own = int(self._features(np.array([self.task.config_space.valid_index(0)])).shape[1])
        if booster.num_features() not in (n_own, self._loop_columns(np.zeros((1, n_own))).shape[1]):
            raise ValueError(f"load_basemodel: the base model's features ({booster.num_features()} columns: "
                             f"{base_model.feature_type} of task {base_model.task.name}, with_knobs="
                             f"{base_model.with_knobs}) do not fit this model's ({n_own}); a model of another "
                             "template transfers with with_knobs=False")
        self.base_model, self.base_bst, self.other = base_model, booster, None
        self.shape_free = base_model.shape_free

    def _base_margin(self, x: np.ndarray) -> np.ndarray | None:
        if self.base_bst is None or self.other is not None or not len(x):
            return None
        margin = np.asarray(self.base_bst.inplace_predict(self._for_base(x), predict_type="margin"), dtype=np.float32)
        return margin * np.float32(self.base_weight) if self.base_weight != 1.0 else margin

    def _for_base(self, x: np.ndarray) -> np.ndarray:
        """``x`` as the base model takes it: the loop-nest columns where it was trained on other
        tasks' records (``fit_log``), all of them where it is a model of this space."""
        return x if self.base_bst.num_features() == x.shape[1] else self._loop_columns(x)

    def predict(self, xs) -> np.ndarray:
        x = self._features(xs)
        if self.bst is None and self.base_bst is None:
            return np.zeros(len(x))
        if self.bst is None:
            pred = self.base_bst.inplace_predict(self._for_base(x))
        else:
            pred = self.bst.inplace_predict(x, base_margin=self._base_margin(x))
        pred = np.asarray(pred, dtype=np.float64)
        return np.where(np.all(np.isfinite(x), axis=1), pred, -1e9)
