"""An upload over the server's limit is refused from the message's header, before the server
reads it (before, a 400 MiB upload grew the server by 1.2 GB until the 64 MiB check fired), and
the runner does not even try: the candidate gets an error naming the limit, the server stays."""
import os
import socket

import pytest

from conftest import RpcProcesses, measure_inputs, wait_until
from rpyc.core.channel import Channel
from tilecraft.autotune import BuildResult, MeasureErrorNo as E
from tilecraft.rpc import RPCRunner, TrackerClient, protocol

SECRET = b"upload-secret-upload-secret-0123"
KEY = "llvm:upload"


def peak_rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    procs = RpcProcesses(tmp_path_factory.mktemp("rpc-upload"), SECRET)
    try:
        _, port = procs.start("tracker", "--port", "0")
        server, server_port = procs.start("server", "--tracker", f"127.0.0.1:{port}", "--key", KEY,
                                          "--max-upload-mb", "1")
        with TrackerClient("127.0.0.1", port, SECRET) as t:
            wait_until(lambda: t.status().keys().get(KEY) == (1, 1), 30, "the server registered")
        procs.tracker_port, procs.server, procs.server_port = port, server, server_port
        yield procs
    finally:
        procs.close()


def test_an_oversized_message_is_refused_before_its_body_is_read(pool):
    before = peak_rss_kib(pool.server.pid)
    sock = socket.create_connection(("127.0.0.1", pool.server_port), timeout=10)
    protocol.client_handshake(sock, SECRET)
    declared = 128 << 20
    sock.sendall(Channel.FRAME_HEADER.pack(declared, 0))
    sent, chunk = 0, b"\0" * (1 << 20)
    try:
        while sent < declared:
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass                       # the server closed the connection
    sock.close()
    assert sent < declared, "the server read the whole 128 MiB message"
    grew_mib = (peak_rss_kib(pool.server.pid) - before) / 1024
    assert grew_mib < 16, f"the server grew by {grew_mib:.0f} MiB"
    wait_until(lambda: f"a message of {declared} bytes, over the limit of {(1 << 20) + (64 << 10)}"
               in pool.logs(), 10, "the refusal in the server's log")


def test_the_runner_does_not_send_a_library_over_the_limit(pool, kernels, tmp_path):
    big = tmp_path / "big.so"
    big.write_bytes(os.urandom((1 << 20) + (128 << 10)))   # 1.125 MiB: over the 1 MiB (+64 KiB) limit
    task, inputs, builds = measure_inputs(kernels, ["good"], reference=False)
    builds = [BuildResult(str(big), kernels.arg_info)]
    runner = RPCRunner(KEY, "127.0.0.1", pool.tracker_port, secret=SECRET, n_parallel=1, check_correctness=False)
    runner.set_task(task)
    (result,) = runner.run(inputs, builds)
    assert result.error_no == E.RUNTIME_DEVICE
    assert f"the library is {(1 << 20) + (128 << 10)} bytes, over the server's upload limit of {1 << 20}" \
        in result.error_msg
    with TrackerClient("127.0.0.1", pool.tracker_port, SECRET) as t:
        assert t.status().keys().get(KEY) == (1, 1)          # not reported broken
    (ok,) = runner.run(*measure_inputs(kernels, ["good"], reference=False)[1:])
    assert ok.error_no == E.NO_ERROR
