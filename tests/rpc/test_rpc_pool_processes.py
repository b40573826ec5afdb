"""A real pool: a tracker and device servers in their own processes (``python -m tilecraft.rpc``),
RPCRunner measuring real kernels through it, servers killed or frozen in the middle of a run."""
import os
import re
import signal
import threading

import pytest

from conftest import RpcProcesses, measure_inputs, wait_until
from tilecraft.autotune import MeasureErrorNo as E
from tilecraft.rpc import RPCRunner, TrackerClient

SECRET = b"pool-secret-pool-secret-0123456789"


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """A tracker and two servers of ``llvm:rpctest``. The tests below run in this order and
    leave both servers registered, except the last, which kills one."""
    procs = RpcProcesses(tmp_path_factory.mktemp("rpc-pool"), SECRET)
    try:
        _, port = procs.start("tracker", "--port", "0", "--heartbeat-timeout", "1.5")
        servers = [procs.start("server", "--tracker", f"127.0.0.1:{port}", "--key", "llvm:rpctest",
                               "--heartbeat-interval", "0.2", wait=False) for _ in range(2)]
        procs.servers = [(s, procs.port_of(s)) for s in servers]
        procs.tracker_port = port
        with TrackerClient("127.0.0.1", port, SECRET) as t:
            wait_until(lambda: t.status().keys().get("llvm:rpctest") == (2, 2), 20, "two servers registered")
        yield procs
    finally:
        procs.close()


def _runner(pool, key, **kw):
    kw = {"number": 2, "repeat": 2, "timeout": 5, "request_timeout": 20, **kw}
    return RPCRunner(key, "127.0.0.1", pool.tracker_port, secret=SECRET, **kw)


def _status(pool):
    with TrackerClient("127.0.0.1", pool.tracker_port, SECRET) as t:
        return t.status()


def test_status_lists_servers_keys_and_queues(pool, capsys):
    from tilecraft.rpc import cli

    assert cli.main(["status", "--tracker", f"127.0.0.1:{pool.tracker_port}", "--key-file", str(pool.key_file)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split() == ["llvm:rpctest", "2", "2", "0"]
    assert out.count("llvm:rpctest") == 3


@pytest.mark.slow
def test_tilecraft_tune_measures_on_the_pool(pool, tmp_path, capsys):
    """`tilecraft tune --tracker ... --key ...`: builds here, measures on the pool's servers."""
    import json

    from tilecraft import cli

    log = tmp_path / "mm.jsonl"
    rc = cli.main(["tune", "matmul", "64", "64", "64", "float32", "--trials", "6", "--tuner", "random",
                   "--seed", "1", "--log", str(log), "--quiet", "--n-parallel", "2",
                   "--tracker", f"127.0.0.1:{pool.tracker_port}", "--key", "llvm:rpctest",
                   "--key-file", str(pool.key_file)])
    assert rc == 0, capsys.readouterr()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    records = [r for r in lines if "stage" not in r]
    assert len(records) == 6
    assert sum(r["error"] == "NO_ERROR" for r in records) >= 1
    assert not [r for r in records if r["error"] == "WRONG_ANSWER"]
    # then the fastest (up to --verify 3) are measured again on the pool, one at a time
    verified = [r for r in lines if r.get("stage") == "verify"]
    assert 1 <= len(verified) <= 3 and lines[-len(verified):] == verified
    assert {r["config"]["index"] for r in verified} <= {r["config"]["index"] for r in records if r["error"] == "NO_ERROR"}


def test_tilecraft_tune_tracker_errors_are_plain(pool, tmp_path, monkeypatch, capsys):
    from tilecraft import cli

    monkeypatch.delenv("TILECRAFT_RPC_KEY", raising=False)
    base = ["tune", "matmul", "64", "64", "64", "float32", "--trials", "1", "--quiet",
            "--log", str(tmp_path / "t.jsonl")]
    for args, expected in ((["--tracker", "localhost", "--key", "llvm:rpctest"], r"--tracker expects HOST:PORT"),
                           (["--tracker", f"127.0.0.1:{pool.tracker_port}"], r"--tracker needs --key"),
                           (["--tracker", "10.1.2.3:9190", "--key", "llvm:x"], r"without a shared secret")):
        assert cli.main(base + args) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("tilecraft tune: error: ") and re.search(expected, line), line
    assert not (tmp_path / "t.jsonl").exists()        # found before any work
    wrong = tmp_path / "wrong.key"
    wrong.write_text("w" * 32)
    wrong.chmod(0o600)
    assert cli.main(base + ["--tracker", f"127.0.0.1:{pool.tracker_port}", "--key", "llvm:rpctest",
                            "--key-file", str(wrong)]) == 1          # the pool refuses it: tuning stops
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"tilecraft tune: error: tracker 127.0.0.1:{pool.tracker_port} refused the shared "
                           "secret"), line


@pytest.mark.slow
def test_runner_measures_real_kernels_and_checks_them_against_the_reference(pool, kernels):
    runner = _runner(pool, "llvm:rpctest")
    task, inputs, builds = measure_inputs(kernels, ["good", "wrong", "good", "hang"])
    runner.set_task(task)
    assert runner.n_parallel == 2                      # one per server of the key
    runner.timing = runner.timing.replace(timeout=1.0)
    results = runner.run(inputs, builds)
    assert [r.error_no for r in results] == [E.NO_ERROR, E.WRONG_ANSWER, E.NO_ERROR, E.RUN_TIMEOUT], results
    good = results[0]
    assert len(good.costs) == 2 and all(0 < c < 0.01 for c in good.costs)
    assert "differs from the reference" in results[1].error_msg
    assert "killed" in results[3].error_msg
    st = _status(pool)
    assert st.keys()["llvm:rpctest"] == (2, 2) and st.queues == {}     # every lease came back


def _servers(pool, key="llvm:rpctest"):
    """``[(process, server_id), ...]`` of the fixture's servers, as registered now."""
    wait_until(lambda: _status(pool).keys().get(key) == (2, 2), 20, f"both servers of {key} registered")
    by_port = {s.port: s.server_id for s in _status(pool).servers if s.key == key}
    return [(proc, by_port[port]) for proc, port in pool.servers]


def _when_busy(pool, server_id, action):
    """In the background: as soon as ``server_id`` is leased, do ``action``."""
    def watch():
        wait_until(lambda: any(s.server_id == server_id and s.busy for s in _status(pool).servers), 20,
                   f"server {server_id} busy", interval=0.005)
        action()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


@pytest.mark.slow
def test_a_frozen_server_times_out_is_dropped_and_registers_again_when_it_thaws(pool, kernels):
    (frozen, frozen_id), (_, other_id) = _servers(pool)
    runner = _runner(pool, "llvm:rpctest", n_parallel=1, min_repeat_ms=100, max_retries=1, timeout=1, slack=1)
    task, inputs, builds = measure_inputs(kernels, ["good"] * 3)
    runner.set_task(task)
    watcher = _when_busy(pool, frozen_id, lambda: os.kill(frozen.pid, signal.SIGSTOP))
    results = runner.run(inputs, builds)
    watcher.join(5)
    assert [r.error_no for r in results] == [E.NO_ERROR] * 3, results
    assert [s.server_id for s in _status(pool).servers if s.key == "llvm:rpctest"] == [other_id]
    os.kill(frozen.pid, signal.SIGCONT)
    wait_until(lambda: _status(pool).keys().get("llvm:rpctest") == (2, 2), 10, "the thawed server back")
    # frozen while idle: it misses heartbeats and leaves the pool by itself
    os.kill(frozen.pid, signal.SIGSTOP)
    wait_until(lambda: _status(pool).keys().get("llvm:rpctest") == (1, 1), 10, "the idle frozen server dropped")
    os.kill(frozen.pid, signal.SIGCONT)
    _servers(pool)     # both back for the next test


@pytest.mark.slow
def test_a_server_killed_mid_queue_is_dropped_and_its_work_done_by_the_other(pool, kernels):
    (victim, victim_id), (_, survivor_id) = _servers(pool)
    runner = _runner(pool, "llvm:rpctest", n_parallel=1, min_repeat_ms=100, max_retries=2)
    task, inputs, builds = measure_inputs(kernels, ["good"] * 4)
    runner.set_task(task)
    watcher = _when_busy(pool, victim_id, lambda: os.kill(victim.pid, signal.SIGKILL))
    results = runner.run(inputs, builds)
    watcher.join(5)
    assert [r.error_no for r in results] == [E.NO_ERROR] * 4, results
    assert victim.wait(5) == -signal.SIGKILL
    assert [s.server_id for s in _status(pool).servers if s.key == "llvm:rpctest"] == [survivor_id]
