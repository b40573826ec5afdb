"""A partial ground-truth table from what fixed-budget runs measured, for replays.

    python3 bench/tuner_partial_table.py conv2d_direct_64 LOGS/conv2d_direct_64_measured.jsonl \
        bench/ground_truth/partial/conv2d_direct_64_s22.jsonl.gz --note "session 22, H100 host"

`bench/tuner_budget.py --measure-cache` keeps one measurement of every config its runs drew
(`<log-dir>/<space>_measured.jsonl`). This turns that cache into a table in
`tilecraft.autotune.replay`'s format whose space is restricted to the measured configs (the
header's `valid`), so `bench/tuner_compare.py` can replay tuners and rank cost models over them
in seconds. It is *not* ground truth for the whole space: the configs are the union of what
Random (a uniform pool), GA and XGB drew, so good configs are over-represented, and each has a
single measurement (no spread between passes). It serves to compare tuner variants on a large
space's landscape without the machine.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def partial_table(space: str, cache: str, note: str = "") -> tuple[dict, list[dict]]:
    """(header, rows) of the table of ``space`` (a ``tuner_budget.SPACES`` name) restricted to
    the configs of the measurement cache ``cache`` (the first record of each config).

    >>> header, rows = partial_table("conv2d_direct_64", "logs/conv2d_direct_64_measured.jsonl")
    """
    import tuner_budget as tb

    from tilecraft.autotune import record
    from tilecraft.autotune.replay import TABLE_VERSION, space_knobs

    task = tb.make_task(space)
    first: dict = {}
    for inp, res in record.load_from_file(cache):
        if res.stage == "tune":
            first.setdefault(inp.config.index, res)
    rows = []
    for i in sorted(first):
        res = first[i]
        if res.ok:
            rows.append({"i": i, "cost": res.mean_cost, "passes": [res.mean_cost]})
        else:
            rows.append({"i": i, "error": res.error_no.name, "msg": res.error_msg[-200:]})
    spec = tb.SPACES[space]
    header = {"ground_truth": TABLE_VERSION, "space": space, "target": spec["target"], "partial": True,
              "source": os.path.basename(cache), "note": note or "configs measured by bench/tuner_budget.py runs",
              "task": {"name": spec["template"], "args": list(spec["args"]), "flop": task.flop,
                       "module": spec["module"]},
              "knobs": space_knobs(task.config_space), "valid": sorted(first),
              "configs_in_space": len(task.config_space)}
    return header, rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("space")
    p.add_argument("cache", help="a tuner_budget measurement cache (<space>_measured.jsonl)")
    p.add_argument("out", help="the table to write (.jsonl.gz)")
    p.add_argument("--note", default="")
    args = p.parse_args(argv)
    header, rows = partial_table(args.space, args.cache, args.note)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with gzip.open(args.out, "wt", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")
    ok = [r for r in rows if "cost" in r]
    print(f"{args.out}: {len(rows)} of {header['configs_in_space']} configs ({len(rows) - len(ok)} errors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
