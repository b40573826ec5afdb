"""The tracker over the network (in this process): fair hand-out to clients, sessions, heartbeats,
and a device server answering directly."""
import threading

import pytest

from conftest import measure_inputs, wait_until
from tilecraft.autotune import MeasureErrorNo as E, TimingOptions
from tilecraft.rpc import DeviceServer, RPCRunner, Tracker, TrackerClient, connect

SECRET = b"tracker-secret-tracker-secret"


@pytest.fixture
def tracker():
    with Tracker(port=0, secret=SECRET, heartbeat_timeout=1.0) as t:
        yield t


def _register(tracker, key, port):
    """A stand-in server: a registration session that sends no heartbeats unless told."""
    conn = connect("127.0.0.1", tracker.port, SECRET)
    (sid,) = conn.root.register(key, "", port)
    return conn, sid


def test_clients_are_served_in_the_order_they_asked(tracker):
    reg, sid = _register(tracker, "llvm:fair", 4000)
    holder = TrackerClient("127.0.0.1", tracker.port, SECRET)
    first = holder.request("llvm:fair", timeout=1)
    assert first.server_id == sid and (first.host, first.port) == ("127.0.0.1", 4000)
    order, lock, threads = [], threading.Lock(), []

    def client(i):
        with TrackerClient("127.0.0.1", tracker.port, SECRET) as t:
            lease = t.request("llvm:fair", timeout=10)
            with lock:
                order.append(i)
            t.release(lease)

    for i in range(4):
        th = threading.Thread(target=client, args=(i,))
        th.start()
        threads.append(th)
        wait_until(lambda: tracker.status().queues.get("llvm:fair") == i + 1, 5, f"client {i} queued")
    reg.root.heartbeat(sid)
    holder.release(first)
    for th in threads:
        th.join(10)
    assert order == [0, 1, 2, 3]
    holder.close()
    reg.close()


@pytest.mark.slow
def test_a_dead_session_or_silence_takes_a_server_out_and_a_dead_client_frees_its_lease(tracker):
    quiet, _ = _register(tracker, "llvm:a", 4001)
    gone, _ = _register(tracker, "llvm:b", 4002)
    assert tracker.status().keys() == {"llvm:a": (1, 1), "llvm:b": (1, 1)}
    gone.close()
    wait_until(lambda: "llvm:b" not in tracker.status().keys(), 5, "the closed session's server gone")
    wait_until(lambda: "llvm:a" not in tracker.status().keys(), 5, "the silent server gone")
    with pytest.raises(EOFError):                  # its session was cut: it must register again
        quiet.root.heartbeat(1)
    quiet.close()

    reg, sid = _register(tracker, "llvm:c", 4003)
    client = TrackerClient("127.0.0.1", tracker.port, SECRET)
    assert client.request("llvm:c", timeout=1).server_id == sid
    client.close()                                  # without releasing
    reg.root.heartbeat(sid)
    with TrackerClient("127.0.0.1", tracker.port, SECRET) as other:
        assert other.request("llvm:c", timeout=2).server_id == sid
    reg.close()


def test_a_request_for_an_unknown_key_stops_tuning_instead_of_recording_an_error(tracker, kernels):
    """No server for the key is the pool's failure, not the candidate's: nothing is recorded."""
    from tilecraft.rpc import PoolUnavailableError
    runner = RPCRunner("llvm:nobody", "127.0.0.1", tracker.port, secret=SECRET, request_timeout=0.2)
    task, inputs, builds = measure_inputs(kernels, ["good"])
    runner.set_task(task)
    with pytest.raises(PoolUnavailableError, match=r"no server of 'llvm:nobody' came free within 0.2 s"):
        runner.run(inputs, builds)


def test_set_task_stops_on_a_refused_secret_or_a_tracker_that_stays_away(tracker, kernels):
    """``set_task`` asks the tracker how many servers the key has: a pool it cannot use stops
    tuning with ``PoolUnavailableError``, as a candidate's request does (it raised a bare
    ``ConnectionRefusedError`` / ``AuthenticationError``, a traceback in ``tilecraft tune``)."""
    import socket
    import time

    from tilecraft.rpc import PoolUnavailableError
    task, _, _ = measure_inputs(kernels, [])
    runner = RPCRunner("llvm:x", "127.0.0.1", tracker.port, secret=b"wrong-secret-wrong-secret")
    with pytest.raises(PoolUnavailableError, match=rf"tracker 127.0.0.1:{tracker.port} refused the shared secret"):
        runner.set_task(task)
    with socket.socket() as sock:           # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        runner = RPCRunner("llvm:x", "127.0.0.1", port, secret=SECRET, tracker_retry_s=0.5)
        t0 = time.monotonic()
        with pytest.raises(PoolUnavailableError, match=rf"tracker 127.0.0.1:{port} unreachable for \d+ s "
                                                       r"\(ConnectionRefusedError.*run the same command again"):
            runner.set_task(task)
        assert time.monotonic() - t0 >= 0.5          # tried again with pauses, for tracker_retry_s
    runner = RPCRunner("llvm:x", "127.0.0.1", tracker.port, secret=SECRET)
    runner.set_task(task)
    assert runner.n_parallel == 1           # no server of the key yet: one candidate at a time


def test_a_device_server_in_this_process_measures_and_registers(tracker, kernels):
    with DeviceServer("llvm:here", secret=SECRET, tracker=("127.0.0.1", tracker.port),
                      heartbeat_interval=0.1) as server:
        assert server.registered.wait(5)
        runner = RPCRunner("llvm:here", "127.0.0.1", tracker.port, secret=SECRET, number=1, repeat=1)
        task, inputs, builds = measure_inputs(kernels, ["good", "wrong"], reference=True)
        runner.set_task(task)
        assert [r.error_no for r in runner.run(inputs, builds)] == [E.NO_ERROR, E.WRONG_ANSWER]
        runner.timing = runner.timing.replace(check_correctness=False)
        task, inputs, builds = measure_inputs(kernels, ["wrong"], reference=False)
        assert [r.error_no for r in runner.run(inputs, builds)] == [E.NO_ERROR]
        runner.timing = runner.timing.replace(repeat=3, max_timing_s=1e-9)      # "slow": timed with fewer runs
        (fast,) = runner.run(inputs, builds)
        assert fast.error_no == E.NO_ERROR and len(fast.costs) == 1
        conn = connect("127.0.0.1", server.port, SECRET)
        try:
            key, version, limit = conn.root.info()
            assert key == "llvm:here" and limit == 64 << 20
            timing = TimingOptions(number=1, repeat=1, timeout=1.0, seed=1).to_json()
            costs, err, msg = conn.root.measure("0" * 64, "", kernels.arg_info, "llvm", timing)
            assert costs == () and E(err) == E.RUNTIME_DEVICE and "not uploaded" in msg
            with pytest.raises(Exception, match="unsupported dtype"):
                conn.root.measure("0" * 64, "", (((4,), "object", True),), "llvm", timing)
        finally:
            conn.close()


class HangingServer(DeviceServer):
    """A server whose measurements never answer (as if its machine froze mid-run)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.release = threading.Event()

    def measure(self, *args, **kw):
        self.release.wait(30)
        return super().measure(*args, **kw)


@pytest.mark.slow
def test_with_one_hung_server_and_no_retries_the_result_is_run_timeout(tracker, kernels):
    with HangingServer("llvm:hung", secret=SECRET, tracker=("127.0.0.1", tracker.port),
                       heartbeat_interval=0.1) as server:
        assert server.registered.wait(5)
        runner = RPCRunner("llvm:hung", "127.0.0.1", tracker.port, secret=SECRET, number=1, repeat=1,
                           timeout=0.3, slack=0.3, max_retries=0)
        task, inputs, builds = measure_inputs(kernels, ["good"])
        runner.set_task(task)
        (result,) = runner.run(inputs, builds)
        server.release.set()
        assert result.error_no == E.RUN_TIMEOUT and "did not answer within 0.6 s" in result.error_msg
        # reported: the tracker cut the server's session; the server registers again
        wait_until(lambda: tracker.status().keys().get("llvm:hung") == (1, 1), 10, "the server back")


def test_status_command_errors_are_one_line(tracker, tmp_path, capsys):
    """``tilecraft rpc status``: an unreachable tracker is status 1, a refused secret or a
    malformed address status 2, each one line (they were tracebacks, or a bare SystemExit)."""
    import socket

    from tilecraft.rpc import cli
    keys = {}
    for name, secret in (("right", SECRET), ("wrong", b"wrong-secret-wrong-secret")):
        keys[name] = tmp_path / name
        keys[name].write_bytes(secret)
        keys[name].chmod(0o600)
    assert cli.main(["status", "--tracker", f"127.0.0.1:{tracker.port}", "--key-file", str(keys["right"])]) == 0
    assert "key" in capsys.readouterr().out
    with socket.socket() as sock:           # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        cases = [(f"127.0.0.1:{port}", "right", 1,
                  f"error: cannot reach the tracker at 127.0.0.1:{port} (ConnectionRefusedError: "),
                 (f"127.0.0.1:{tracker.port}", "wrong", 2,
                  f"error: tracker 127.0.0.1:{tracker.port} refused the shared secret ("),
                 ("localhost", "right", 2, "error: --tracker expects HOST:PORT (e.g. 127.0.0.1:9190), got 'localhost'")]
        for address, key, status, start in cases:
            assert cli.main(["status", "--tracker", address, "--key-file", str(keys[key])]) == status
            (line,) = capsys.readouterr().err.strip().splitlines()
            assert line.startswith(start), line
