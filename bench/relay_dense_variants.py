"""The BERT-base layer of ``relay_bert.py`` built with each of a few ``topi/dense_pack.llvm``
configurations forced on all its dense layers (a log written here, read by
``apply_history_best``), to choose the fallback on a new CPU: per build, the sum of the
per-kernel times in the model (``GraphModule.profile``: each kernel's median over 10 runs, the
minimum of ``--rounds`` such profiles, the builds in turns) and the dense layers' part, then
the end-to-end times in turns. Not a test.

    python3 bench/relay_dense_variants.py [--threads 2] [--rounds 5]
"""
import argparse
import json
import os
import tempfile
import time
import warnings

import numpy as np

# (mr, nr), kc, mc_tiles, nc_tiles, order, k_unroll; "fallback": no log (the template's fallback)
VARIANTS = {
    "fallback": None,
    "8x48 kc256 mc16": ((8, 48), 256, 16, 1, "nm", 4),
    "8x48 kc128 mc4 nc8": ((8, 48), 128, 4, 8, "nm", 1),
    "8x48 kc768 mc16 nc2 mn": ((8, 48), 768, 16, 2, "mn", 4),
    "4x64 kc256 mc16": ((4, 64), 256, 16, 1, "nm", 4),
    "8x32 kc256 mc4 nc2": ((8, 32), 256, 4, 2, "nm", 2),
}


def forced_log(path, cfg, shapes):
    with open(path, "w") as f:
        for M, N, K in shapes:
            (tile, kc, mc, nc, order, ku) = cfg
            rec = {"v": 1, "tilecraft": "bench", "target": "llvm", "device": "bench",
                   "task": {"name": "topi/dense_pack.llvm", "args": [M, N, K, "float32"], "flop": 2.0 * M * N * K,
                            "module": "tilecraft.topi.dense_pack"},
                   "config": {"index": 0, "code_hash": None,
                              "knobs": [["tile", "ot", list(tile)], ["kc", "ot", kc], ["mc_tiles", "ot", mc],
                                        ["nc_tiles", "ot", nc], ["order", "ot", order], ["k_unroll", "ot", ku]]},
                   "costs": [1e-3], "error": "NO_ERROR", "error_msg": "", "all_cost": 0.0, "build_time": 0.0,
                   "timestamp": time.time(), "run": {"id": "forced", "tuner": "none"}}
            f.write(json.dumps(rec) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import relay_bert
    import relay_common

    import tilecraft as tc
    from tilecraft import autotune, relay
    from tilecraft.contrib import graph_executor
    warnings.filterwarnings("ignore", message="no tuned configuration")
    tc.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    model = relay_bert.encoder_layer(rng, 128)
    x = rng.standard_normal((1, 128, 768)).astype("float32")
    mod, params = relay.frontend.from_onnx(model)
    shapes = [(128, 2304, 768), (128, 768, 768), (128, 3072, 768), (128, 768, 3072)]
    tmp = tempfile.mkdtemp()
    mods, ref = {}, None
    for name, cfg in VARIANTS.items():
        log = []
        if cfg is not None:
            log = os.path.join(tmp, name.replace(" ", "_") + ".jsonl")
            forced_log(log, cfg, shapes)
        with autotune.apply_history_best(log), tc.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target="llvm", params=params)
        m = graph_executor.GraphModule(lib["default"](tc.cpu(0)))
        m.set_input("x", x)
        m.run()
        out = m.get_output(0).numpy()
        ref = out if ref is None else ref
        assert np.abs(out - ref).max() < 1e-3, name
        mods[name] = m
    best: dict = {}
    for _ in range(args.rounds):
        for name, m in mods.items():
            rows = m.module.profile(10)
            total = sum(ms for _, _, ms in rows)
            dense = sum(ms for k, _, ms in rows if "dense" in k)
            old = best.get(name)
            best[name] = (min(total, old[0]), min(dense, old[1])) if old else (total, dense)
    e2e = relay_common.in_turns({k: m.module.run for k, m in mods.items()}, args.rounds, 5)
    print(f"BERT layer, {args.threads} threads, load {os.getloadavg()[0]:.1f}: dense_pack configurations forced on "
          f"all four dense workloads (min over {args.rounds} profiles of the per-kernel medians; end to end median "
          f"of {args.rounds} turns)")
    for name in VARIANTS:
        total, dense = best[name]
        print(f"  {name:26s} kernels {total:6.2f} ms, dense {dense:6.2f} ms, end to end {e2e[name] * 1e3:6.2f} ms")


if __name__ == "__main__":
    main()
