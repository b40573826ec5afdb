"""Tune through a device pool: a tracker, one device server, RPCRunner, a few trials, shut down.

    python examples/rpc_pool.py [N_TRIAL]

Everything runs on 127.0.0.1 in this process (the server still measures each candidate in a
child process). On real machines the tracker and servers are separate commands:

    python -m tilecraft.rpc tracker --host 0.0.0.0 --port 9190 --key-file SECRET
    python -m tilecraft.rpc server --tracker TRACKER:9190 --key llvm:znver3 --key-file SECRET \\
        --host 0.0.0.0 --advertise-host THIS_MACHINE

See docs/rpc.md.
"""
import os
import sys
import tempfile

import tilecraft.autotune as autotune
from tilecraft import te
from tilecraft.rpc import DeviceServer, RPCRunner, Tracker, generate_secret


@autotune.template("example/rpc_matmul")
def matmul(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    cfg = autotune.get_config()
    y, x = s[C].op.axis
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, s[C].op.reduce_axis[0], yi, xi)
    cfg.add_flop(2 * n * n * n)
    return s, [A, B, C]


def main(n_trial: int = 6) -> None:
    secret = generate_secret()        # on several machines: load_secret("SECRET") everywhere
    key = "llvm:example"
    with Tracker(port=0, secret=secret, heartbeat_timeout=5) as tracker:
        with DeviceServer(key, secret=secret, tracker=("127.0.0.1", tracker.port)) as server:
            server.registered.wait(10)
            print(tracker.status().format(), "\n")

            task = autotune.task.create("example/rpc_matmul", args=(32,), target="llvm")
            runner = RPCRunner(key, "127.0.0.1", tracker.port, secret=secret, number=3, repeat=2, timeout=10)
            option = autotune.measure_option(builder=autotune.LocalBuilder(n_parallel=2), runner=runner)
            with tempfile.TemporaryDirectory() as folder:
                log = os.path.join(folder, "rpc_matmul.jsonl")
                tuner = autotune.tuner.RandomTuner(task, seed=0)
                tuner.tune(n_trial, option, callbacks=[autotune.callback.log_to_file(log)])
                records = autotune.record.load_from_file(log)
            option["builder"].close()

            for inp, res in records:
                cost = f"{res.mean_cost * 1e6:8.2f} us" if res.ok else res.error_no.name
                print(f"config {inp.config.index:4d}: {cost}")
            assert all(res.ok for _, res in records), "a candidate failed"
            print(f"\nbest: {tuner.best_config} at {tuner.best_flops / 1e9:.2f} GFLOP/s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
