"""A tracker restarted in the middle of a run (real processes): the runner waits for it with
growing pauses and every candidate is measured; none is recorded as failed (before, each one in
flight during a 3 s outage became a RUNTIME_DEVICE error, and a tracker that stays away stops
tuning instead of burning the remaining trials)."""
import os
import signal
import threading
import time

import pytest

from conftest import RpcProcesses, measure_inputs, wait_until
from tilecraft.autotune import MeasureErrorNo as E
from tilecraft.rpc import PoolUnavailableError, RPCRunner, TrackerClient

SECRET = b"restart-secret-restart-secret-0123"
KEY = "llvm:restart"


def _status(port):
    with TrackerClient("127.0.0.1", port, SECRET) as t:
        return t.status()


def test_a_tracker_restarted_mid_run_costs_no_trial(tmp_path, kernels):
    procs = RpcProcesses(tmp_path, SECRET)
    try:
        tracker, port = procs.start("tracker", "--port", "0", "--heartbeat-timeout", "1.5")
        for _ in range(2):
            procs.start("server", "--tracker", f"127.0.0.1:{port}", "--key", KEY, "--heartbeat-interval", "0.2")
        wait_until(lambda: _status(port).keys().get(KEY) == (2, 2), 30, "two servers registered")
        runner = RPCRunner(KEY, "127.0.0.1", port, secret=SECRET, number=2, repeat=2, min_repeat_ms=40,
                           timeout=5, request_timeout=30, n_parallel=2, tracker_retry_s=60)
        task, inputs, builds = measure_inputs(kernels, ["good"] * 16)
        runner.set_task(task)
        restarted = {}

        def restart():
            wait_until(lambda: any(s.busy for s in _status(port).servers), 30, "a server busy", interval=0.01)
            os.kill(tracker.pid, signal.SIGKILL)
            tracker.wait(10)
            restarted["down"] = time.time()
            time.sleep(3.0)                                  # the outage of the report
            procs.start("tracker", "--port", str(port), "--heartbeat-timeout", "1.5")
            restarted["up"] = time.time()

        t = threading.Thread(target=restart, daemon=True)
        t.start()
        results = runner.run(inputs, builds)
        t.join(30)
        assert "up" in restarted, "the tracker was not restarted during the run"
        assert [r.error_no for r in results] == [E.NO_ERROR] * 16, [r.error_msg for r in results]
        assert any(r.timestamp > restarted["up"] for r in results), "no candidate waited for the restart"
        wait_until(lambda: _status(port).keys().get(KEY) == (2, 2), 30, "both servers back, every lease released")
    finally:
        procs.close()


def test_a_tracker_that_stays_away_stops_tuning(tmp_path, kernels):
    procs = RpcProcesses(tmp_path, SECRET)
    try:
        tracker, port = procs.start("tracker", "--port", "0")
        runner = RPCRunner(KEY, "127.0.0.1", port, secret=SECRET, n_parallel=1, tracker_retry_s=1.0)
        task, inputs, builds = measure_inputs(kernels, ["good"])
        runner.set_task(task)
        os.kill(tracker.pid, signal.SIGKILL)
        tracker.wait(10)
        with pytest.raises(PoolUnavailableError, match=rf"tracker 127.0.0.1:{port} unreachable for 1 s "
                                                       r"\(ConnectionRefusedError.*run the same command again"):
            runner.run(inputs, builds)
    finally:
        procs.close()
