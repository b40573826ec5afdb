"""Search quality against ground truth: every tuner replayed over a measured space, many seeds.

    python3 bench/tuner_compare.py gemm256 conv2d_64 softmax1024 gemm512 --seeds 20
    python3 bench/tuner_compare.py gemm256 --tuners random,xgb-knob --seeds 5 --trials 128

Each space is a table of `bench/ground_truth/<space>.jsonl.gz` (`bench/ground_truth.py`):
measuring is looking up (`tilecraft.autotune.replay`), so each tuner runs `--seeds` times in
seconds, each seed drawing its own warm-up (no shared first plan). A replayed measurement is one
of the config's per-pass figures, drawn at random, so a tuner meets the recorded noise; the
curves are scored by the table's medians against the true optimum.

Per space and tuner it reports the trials to reach 95%, 99% and 100% of the optimum (quartiles
over seeds; `inf`: not within `--trials`), the area under the best-so-far curve, and the exact
median of uniform random search as a check of the simulator; per cost model, ndcg@32 and
recall@32 on held-out configs after training on 64 random ones. It writes
`bench/results/search_<space>.json` and `.png` (best-so-far against trials, median and
quartile band per tuner) and prints a markdown table.

Loop-nest features (`itervar`, `curve`) of every config of a space are computed once and kept
in `bench/ground_truth/.cache/<space>/features_<type>.npy`; the tuners read them from there.
Transfer (`xgb-transfer` and its variants `-joint`, `-norm`, `-joint-norm`: the cost model's
`transfer` and `normalise` options) pre-trains on 128 random configs of the neighbouring space's
table (`NEIGHBOUR`; `--tables DIR` looks there first, for the space and its neighbour);
`xgb-knob-transfer` does it with knob features (same template, same knobs). `--transfer-check`
tunes nothing: it says how well a model of 128 of the neighbour's configs ranks each space per
feature type, and how alike the two tables rank the configs they share
(`bench/results/.../transfer_check.json`).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

TABLES = os.path.join(HERE, "ground_truth")
RESULTS = os.path.join(HERE, "results")
NEIGHBOUR = {"gemm256": "gemm512", "gemm512": "gemm256", "conv2d_64": "conv2d_128",
             "conv2d_128": "conv2d_64", "softmax1024": "softmax256x4096",
             "softmax256x4096": "softmax1024"}
LEVELS = (0.95, 0.99, 1.0)
BUDGETS = (64, 128, 256, 512)        # issue 13's fixed budgets (Random's 512 exact, the rest replayed)
TRANSFER_RECORDS = 128


def tuner_table():
    """name -> (make(task, seed, ctx), what it is)."""
    from tilecraft.autotune.tuner import GATuner, GridSearchTuner, RandomTuner, XGBTuner

    def xgb(feature="knob", loss="rank", transfer="margin", normalise=False, transfer_knobs=False, with_knobs=False,
            **kw):
        def make(task, seed, ctx):
            model = ctx.model(task, feature, loss, seed, transfer, normalise, transfer_knobs, with_knobs)
            opts = dict(kw)
            if opts.get("optimizer") == "sa-walk":
                from tilecraft.autotune.tuner import SimulatedAnnealingOptimizer
                opts["optimizer"] = SimulatedAnnealingOptimizer(task, seed=seed, exhaustive_limit=0)
            return XGBTuner(task, feature_type=feature, loss_type=loss, cost_model=model, seed=seed, **opts)
        return make

    return {
        "random": (lambda t, s, c: RandomTuner(t, seed=s), "uniform without replacement"),
        "grid": (lambda t, s, c: GridSearchTuner(t), "index order (one run: no seed)"),
        "ga": (lambda t, s, c: GATuner(t, pop_size=32, seed=s), "genetic, population 32"),
        "xgb-autotvm": (xgb("knob", n_warmup=None, refit_every=None),
                        "knob features, rank loss, AutoTVM's schedule: 64 random, refit every 64"),
        "xgb-knob": (xgb("knob"), "knob features, rank loss: 16 random, refit every 8"),
        "xgb-knob-reg": (xgb("knob", "reg"), "knob features, regression loss"),
        "xgb-itervar": (xgb("itervar"), "itervar (loop-nest) features only, rank loss"),
        "xgb-itervar-knob": (xgb("itervar", with_knobs=True),
                             "itervar features with the knob features beside them (the default XGBTuner)"),
        "xgb-sa": (xgb("itervar", with_knobs=True, optimizer="sa-walk"),
                   "as xgb-itervar-knob, but simulated annealing walks even a space small enough to score "
                   "whole (what a space over the optimizer's exhaustive_limit gets)"),
        "xgb-curve": (xgb("curve"), "curve features, rank loss"),
        "xgb-knob-div": (xgb("knob", diversity_filter_ratio=2), "knob features, diversity filter 2x"),
        "xgb-transfer": (xgb("itervar"), "itervar features, the neighbouring shape's model as base margin "
                                         "(the default transfer, AutoTVM's)"),
        "xgb-transfer-knobs": (xgb("itervar", transfer_knobs=True),
                               "as xgb-transfer, and the neighbour's knob model under the knob booster "
                               "that steers the search"),
        "xgb-knob-transfer": (xgb("knob"), "knob features, the neighbouring shape's knob model as base margin"),
        "xgb-transfer-agree": (xgb("itervar", transfer="agree"),
                               "as xgb-transfer, the neighbour's margin weighed by how well it ranks this "
                               "space's own measurements (Spearman's rho, clipped to [0, 1])"),
        "xgb-default-transfer": (xgb("itervar", with_knobs=True),
                                 "the default XGBTuner's model (itervar + knob features), the neighbour's model "
                                 "as base margin"),
        "xgb-default-transfer-agree": (xgb("itervar", transfer="agree", with_knobs=True),
                                       "as xgb-default-transfer, the margin weighed by measured agreement"),
        "xgb-knob-transfer-agree": (xgb("knob", transfer="agree"),
                                    "as xgb-knob-transfer, the margin weighed by measured agreement"),
        "xgb-transfer-joint": (xgb("itervar", transfer="joint"),
                               "itervar features, one model with the neighbour's records as its own ranking "
                               "group, weighing less as own measurements grow"),
        "xgb-transfer-norm": (xgb("itervar", normalise=True), "as xgb-transfer, features shape-normalised"),
        "xgb-transfer-joint-norm": (xgb("itervar", transfer="joint", normalise=True),
                                    "as xgb-transfer-joint, features shape-normalised"),
    }


class Context:
    """Per space: the table, cached loop-nest features, the neighbour's records."""

    def __init__(self, truth, name: str):
        self.truth, self.name = truth, name
        self.features: dict[str, np.ndarray] = {}

    def feature_matrix(self, feature: str) -> np.ndarray:
        if feature not in self.features:
            self.features[feature] = space_features(self.truth, self.name, feature)
        return self.features[feature]

    def model(self, task, feature: str, loss: str, seed: int, transfer: str = "margin", normalise: bool = False,
              transfer_knobs: bool = False, with_knobs: bool = False):
        from tilecraft.autotune.cost_model import XGBoostCostModel

        extractor = None
        if feature != "knob":
            table = self.feature_matrix(feature)
            extractor = lambda idx: table[np.asarray(idx, dtype=np.int64)]  # noqa: E731
        return XGBoostCostModel(task, feature_type=feature, loss_type=loss, seed=seed, num_threads=1,
                                extractor=extractor, transfer=transfer, normalise=normalise,
                                transfer_knobs=transfer_knobs, with_knobs=with_knobs)


def space_features(truth, name: str, feature: str) -> np.ndarray:
    """Loop-nest features of every config of ``truth``'s space (cached on disk by space)."""
    from tilecraft.autotune import features as feature_mod

    path = os.path.join(TABLES, ".cache", name, f"features_{feature}.npy")
    space = truth.task.config_space
    if os.path.exists(path):
        table = np.load(path)
        if len(table) == space.range_length:
            return table
    t0 = time.time()
    lower = feature_mod.features_of_configs
    lower = getattr(lower, "__wrapped__", lower)    # not memoize_other_task_features' answer from this table
    rows = lower(truth.task, [space.get(int(i)) for i in truth.valid], feature)
    n = next((len(r) for r in rows if r is not None), None)
    if n is None:
        raise ValueError(f"{name}: no config lowers, so there are no {feature} features")
    table = np.full((space.range_length, n), np.nan, np.float32)     # rows by index; NaN: filtered out
    for i, r in zip(truth.valid, rows):
        if r is not None:
            table[int(i)] = r
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, table)
    print(f"  {name}: {feature} features of {len(table)} configs in {time.time() - t0:.0f} s", flush=True)
    return table


def memoize_other_task_features(contexts: dict) -> None:
    """Transfer pre-trains on the neighbour's records through ``features_of_configs``: answer
    from the neighbour's cached table instead of lowering each config again."""
    from tilecraft.autotune import features as feature_mod

    original = feature_mod.features_of_configs

    def cached(task, configs, feature_type):
        for ctx in contexts.values():
            if ctx.truth.task.workload == task.workload:
                table = ctx.feature_matrix(feature_type)
                return [None if np.isnan(table[c.index]).any() else table[c.index] for c in configs]
        return original(task, configs, feature_type)

    cached.__wrapped__ = original
    feature_mod.features_of_configs = cached


def run_space(name: str, tuners: list[str], seeds: int, trials: int, contexts: dict,
              with_ranking: bool = True) -> dict:
    from tilecraft.autotune import replay

    ctx = contexts[name]
    truth = ctx.truth
    table = tuner_table()
    out = {"space": name, "configs": len(truth), "optimum_s": truth.optimum,
           "optimum_gflops": truth.task.flop / truth.optimum / 1e9, "trials": trials, "seeds": seeds,
           "near_optimal": {str(lv): truth.near_optimal(lv) for lv in LEVELS},
           "random_exact_median": {str(lv): replay.random_search_median(truth, lv) for lv in LEVELS},
           "random_best_exact": {str(b): replay.random_best_median(truth, b) for b in BUDGETS},
           "header": {k: truth.header.get(k) for k in ("device", "threads", "restricted", "measured", "timing")},
           "tuners": {}}
    for tname in tuners:
        make, what = table[tname]
        history = None
        if "transfer" in tname:
            nb = NEIGHBOUR.get(name)
            if nb not in contexts:
                print(f"  {name}: no neighbouring table loaded ({nb}); xgb-transfer skipped")
                continue
            nbt = contexts[nb].truth

            def history(seed, nbt=nbt):
                idx = nbt.valid[np.random.default_rng(5000 + seed).permutation(len(nbt))[:TRANSFER_RECORDS]]
                return nbt.records(idx, np.random.default_rng(seed))
        n_seeds = 1 if tname == "grid" else seeds
        t0 = time.time()
        runs = replay.replay_tuner(lambda t, s: make(t, s, ctx), truth, trials, range(n_seeds), history=history)
        curves = [replay.curve(truth, r) for r in runs]
        res = {"what": what, "seconds": round(time.time() - t0, 1), "runs": len(runs)}
        for lv in LEVELS:
            res[f"to{int(lv * 100)}"] = replay.quartiles([replay.trials_to_reach(c, lv) for c in curves])
        res["auc"] = float(np.median([replay.area_under_curve(c, trials) for c in curves]))
        full = np.stack([np.concatenate([c, np.full(trials - len(c), c[-1])]) for c in curves])
        res["curve_q"] = [np.percentile(full, q, axis=0).round(5).tolist() for q in (25, 50, 75)]
        # issue 13's fixed budgets: the median best within b trials, relative to the optimum
        res["best_at"] = {str(b): float(np.median(full[:, b - 1])) for b in BUDGETS if b <= trials}
        out["tuners"][tname] = res
        print(f"  {name} {tname:13s} to99 {fmt_q(res['to99'])}  to100 {fmt_q(res['to100'])}  "
              f"auc {res['auc']:.3f}  ({res['seconds']} s)", flush=True)
    r512 = out["random_best_exact"]["512"]
    for tname, res in out["tuners"].items():
        if "128" in res.get("best_at", {}):
            print(f"  {name} {tname:13s} median best within 64 / 128 / 256 trials: "
                  + " / ".join(f"{v:.3f}" for v in res["best_at"].values())
                  + f" of the optimum; Random within 512 (exact): {r512:.3f}"
                  + (" (at 128 >= Random at 512)" if res["best_at"]["128"] >= r512 else ""), flush=True)
    if with_ranking:
        out["ranking"] = ranking(ctx, seeds)
    return out


def ranking(ctx, seeds: int, n_trains=(64,), features=("knob", "itervar", "curve", "itervar+knob"),
            losses=("rank", "reg")) -> dict:
    """ndcg@32 / recall@32 of each cost model on held-out configs after ``n`` random ones, for
    each ``n`` of ``n_trains`` (the key carries ``@n`` unless it is 64), median of up to 10 draws."""
    from tilecraft.autotune import replay

    out = {}
    for n in n_trains:
        for feature in features:
            for loss in losses:
                kind, with_knobs = feature.split("+")[0], feature.endswith("+knob")
                try:
                    got = [replay.ranking_quality(lambda t: ctx.model(t, kind, loss, s, with_knobs=with_knobs),
                                                  ctx.truth, n, seed=s)
                           for s in range(min(seeds, 10))]
                except ValueError as err:
                    print(f"  ranking with {feature} features: {err}")
                    continue
                key = f"{feature}-{loss}" + ("" if n == 64 else f"@{n}")
                out[key] = {"ndcg32": float(np.median([g["ndcg"] for g in got])),
                            "recall32": float(np.median([g["recall"] for g in got])), "train": n}
                print(f"  {ctx.name} ranking {key}: ndcg@32 {out[key]['ndcg32']:.3f}, recall@32 "
                      f"{out[key]['recall32']:.3f}", flush=True)
    return out


def transfer_check(ctx, nb_ctx, seeds: int = 5) -> dict:
    """Does the neighbour's knowledge carry over, before any own measurement? Per feature type
    (``knob``, ``itervar``, ``itervar-norm``: shape-normalised), a ranking model trained on 128
    random configs of the neighbour's table ranks every config of this one: Spearman's rho and
    ndcg@32 against the true throughputs, and the true relative throughput of its first pick and
    of the best of its first 16 (median over ``seeds``). ``same_configs``: rho between the two
    tables over the configs both spaces hold (same knob values), the ceiling of any transfer;
    ``self_agreement``: rho between each table's first two passes over its own configs (how well
    a table agrees with itself: a neighbour cannot be expected to rank the target better)."""
    import xgboost as xgb

    from tilecraft.autotune import replay
    from tilecraft.autotune.loop_features import shape_normalised

    def rel(truth):
        c = truth.costs[truth.valid]
        return np.where(np.isfinite(c), truth.optimum / c, 0.0)

    def feats(c, kind):
        if kind == "knob":
            space = c.truth.task.config_space
            return np.stack([space.get(int(i)).get_flatten_feature() for i in c.truth.valid])
        t = c.feature_matrix("itervar")[c.truth.valid]
        return shape_normalised(t, "itervar") if kind == "itervar-norm" else t

    def spearman(a, b):
        ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
        return float(np.corrcoef(ra, rb)[0, 1])

    yt, yn = rel(ctx.truth), rel(nb_ctx.truth)
    out = {}
    for kind in ("knob", "itervar", "itervar-norm"):
        xt, xn = feats(ctx, kind), feats(nb_ctx, kind)
        if xt.shape[1] != xn.shape[1]:
            continue
        got = []
        for seed in range(seeds):
            idx = np.random.default_rng(5000 + seed).permutation(len(yn))[:TRANSFER_RECORDS]
            ok = np.all(np.isfinite(xn[idx]), axis=1)
            d = xgb.DMatrix(xn[idx][ok], label=yn[idx][ok])
            d.set_group([int(ok.sum())])
            bst = xgb.train({"max_depth": 3, "eta": 0.3, "objective": "rank:pairwise", "verbosity": 0,
                             "seed": seed, "nthread": 1}, d, 150)
            p = np.asarray(bst.inplace_predict(np.nan_to_num(xt, nan=0.0)))
            top = np.argsort(-p, kind="stable")
            got.append((spearman(p, yt), replay.ndcg_at(yt, p, 32), yt[top[0]], yt[top[:16]].max()))
        med = np.median(np.array(got), axis=0)
        out[kind] = {"rho": round(float(med[0]), 3), "ndcg32": round(float(med[1]), 3),
                     "first_pick": round(float(med[2]), 3), "best_of_16": round(float(med[3]), 3)}

    def keyed(truth):
        space = truth.task.config_space
        return {tuple((k, str(v)) for k, v in space.get(int(i))._entity_map.items()): r
                for i, r in zip(truth.valid, rel(truth))}

    out["self_agreement"] = {name: pass_agreement(c.truth) for name, c in (("target", ctx), ("neighbour", nb_ctx))}
    kt, kn = keyed(ctx.truth), keyed(nb_ctx.truth)
    common = [k for k in kt if k in kn]
    if len(common) > 2:
        out["same_configs"] = {"n": len(common), "rho": round(spearman([kt[k] for k in common],
                                                                         [kn[k] for k in common]), 3)}
    return out


def pass_agreement(truth) -> float | None:
    """Spearman's rho between a table's first two passes, over the configs timed in both
    (``None`` for a table of one pass): how much of its ranking is the machine's noise.

    >>> pass_agreement(GroundTruth.load("bench/ground_truth/conv2d_64.jsonl.gz"))
    0.58
    """
    from tilecraft.autotune.cost_model import rank_agreement

    pairs = [truth.samples[int(i)][:2] for i in truth.valid if len(truth.samples[int(i)]) >= 2]
    if len(pairs) < 3:
        return None
    a = np.asarray(pairs, dtype=np.float64)
    return round(rank_agreement(-a[:, 0], -a[:, 1]), 3)


def fmt_q(q) -> str:
    f = lambda v: "inf" if math.isinf(v) else f"{v:.0f}"  # noqa: E731
    return f"{f(q[1])} [{f(q[0])}-{f(q[2])}]"


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = np.arange(1, result["trials"] + 1)
    for name, res in result["tuners"].items():
        lo, med, hi = (np.asarray(c) for c in res["curve_q"])
        line, = ax.plot(x, med, label=f"{name} (99% at {fmt_q(res['to99']).split()[0]})", lw=1.4)
        if res["runs"] > 1:
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15, lw=0)
    ax.set_xscale("log")
    ax.set_ylim(0.75, 1.005)          # the region where tuners differ; the legend gives trials to 99%
    ax.axhline(0.99, color="grey", lw=0.6, ls=":")
    ax.set_xlabel("trials (configs measured)")
    ax.set_ylabel("best so far / true optimum (throughput)")
    ax.set_title(f"{result['space']}: {result['configs']} configs, optimum "
                 f"{result['optimum_gflops']:.1f} GFLOP/s; median and quartiles over {result['seeds']} seeds",
                 fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(results: list[dict]) -> str:
    lines = ["| space | configs (≥99%) | tuner | trials to 95% | to 99% | to 100% | AUC |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        for name, res in r["tuners"].items():
            lines.append(f"| {r['space']} | {r['configs']} ({r['near_optimal']['0.99']}) | {name} | "
                         f"{fmt_q(res['to95'])} | {fmt_q(res['to99'])} | {fmt_q(res['to100'])} | {res['auc']:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spaces", nargs="+", help="table names under bench/ground_truth/ (or paths)")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--trials", type=int, default=0, help="budget per run (default: half the space, at most 256)")
    p.add_argument("--tuners", default=",".join(tuner_table()))
    p.add_argument("--out", default=RESULTS)
    p.add_argument("--tables", default=TABLES,
                   help="where to look for a space's table (and its neighbour's) before bench/ground_truth/")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--no-ranking", action="store_true", help="skip the cost models' ndcg / recall")
    p.add_argument("--ranking-only", default="", metavar="N,N,...",
                   help="tune nothing: the cost models' ndcg@32 / recall@32 after N random configs, each N "
                        "(rank loss; knob and itervar + knob features)")
    p.add_argument("--replot", action="store_true", help="only redraw the plots from bench/results/search_*.json")
    p.add_argument("--transfer-check", action="store_true",
                   help="only say how well a model of the neighbour's table ranks each space (no tuning)")
    args = p.parse_args(argv)
    os.environ.setdefault("TILECRAFT_FEATURE_WORKERS", "1")
    if args.replot:
        for name in args.spaces:
            with open(os.path.join(args.out, f"search_{name}.json")) as f:
                plot(json.load(f), os.path.join(args.out, f"search_{name}.png"))
        return 0
    from tilecraft.autotune.replay import GroundTruth

    tuners = args.tuners.split(",")
    unknown = [t for t in tuners if t not in tuner_table()]
    if unknown:
        p.error(f"unknown tuner {unknown[0]!r}; the tuners: {', '.join(tuner_table())}")

    def path_of(name):
        if os.path.exists(name):
            return name
        first = os.path.join(args.tables, f"{name}.jsonl.gz")       # then the shipped tables
        return first if os.path.exists(first) else os.path.join(TABLES, f"{name}.jsonl.gz")

    names = [os.path.basename(s).split(".")[0] for s in args.spaces]
    contexts = {}
    for name, spec in zip(names, args.spaces):
        contexts[name] = Context(GroundTruth.load(path_of(spec)), name)
    if args.transfer_check or any("transfer" in t for t in tuners):
        for name in names:
            nb = NEIGHBOUR.get(name)
            if nb and nb not in contexts and os.path.exists(path_of(nb)):
                contexts[nb] = Context(GroundTruth.load(path_of(nb)), nb)
        memoize_other_task_features(contexts)
    os.makedirs(args.out, exist_ok=True)
    if args.transfer_check:
        checks = {}
        for name in names:
            nb = NEIGHBOUR.get(name)
            if nb not in contexts:
                print(f"{name}: no neighbouring table ({nb})")
                continue
            checks[name] = {"neighbour": nb, **transfer_check(contexts[name], contexts[nb])}
            print(f"{name} <- {nb}: " + json.dumps({k: v for k, v in checks[name].items() if k != "neighbour"}),
                  flush=True)
        with open(os.path.join(args.out, "transfer_check.json"), "w") as f:
            json.dump(checks, f, indent=1)
        return 0
    if args.ranking_only:
        got = {name: ranking(contexts[name], args.seeds, [int(n) for n in args.ranking_only.split(",")],
                             ("knob", "itervar+knob"), ("rank",)) for name in names}
        with open(os.path.join(args.out, "ranking_at.json"), "w") as f:
            json.dump(got, f, indent=1)
        return 0
    results = []
    for name in names:
        truth = contexts[name].truth
        trials = args.trials or min(256, len(truth) // 2)
        print(f"{name}: {len(truth)} configs, {truth.near_optimal(0.99)} within 99% of the optimum "
              f"({truth.task.flop / truth.optimum / 1e9:.1f} GFLOP/s); {trials} trials, {args.seeds} seeds", flush=True)
        r = run_space(name, tuners, args.seeds, trials, contexts, with_ranking=not args.no_ranking)
        r["command"] = "python3 bench/tuner_compare.py " + " ".join(argv if argv is not None else sys.argv[1:])
        results.append(r)
        with open(os.path.join(args.out, f"search_{name}.json"), "w") as f:
            json.dump(r, f, indent=1, default=lambda v: None if isinstance(v, float) and math.isinf(v) else v)
        if not args.no_plot:
            plot(r, os.path.join(args.out, f"search_{name}.png"))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
