"""The security model: the shared secret, the locked-down rpyc, plain values, limits, TLS."""
import os
import socket
import ssl
import subprocess
import sys
import threading

import pytest
import rpyc
from rpyc.core import consts

from tilecraft.autotune import TimingOptions
from tilecraft.rpc import AuthenticationError, DeviceServer, Tracker, TrackerClient, connect, protocol
from tilecraft.rpc.protocol import load_secret

SECRET = b"s3cret-s3cret-s3cret-s3cret"


@pytest.fixture(scope="module")
def tracker():
    with Tracker(port=0, secret=SECRET) as t:
        yield t


def _peer_closed(sock, timeout=3.0) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_the_right_secret_is_accepted(tracker):
    with TrackerClient("127.0.0.1", tracker.port, SECRET) as t:
        assert t.status().servers == ()


def test_a_wrong_secret_is_refused_and_the_connection_closed(tracker):
    with pytest.raises(AuthenticationError, match="refused"):
        connect("127.0.0.1", tracker.port, b"not-the-secret-at-all-0000")
    # by hand: a wrong MAC gets no answer but a closed socket
    sock = socket.create_connection(("127.0.0.1", tracker.port), timeout=3)
    hello = protocol._recv_exact(sock, len(protocol.MAGIC) + protocol.NONCE_BYTES)
    assert hello.startswith(protocol.MAGIC)
    sock.sendall(protocol.MAGIC + os.urandom(32) + os.urandom(32))
    assert _peer_closed(sock)
    sock.close()


def test_a_client_refuses_a_server_that_does_not_know_the_secret():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def impostor():
        conn, _ = listener.accept()
        conn.sendall(protocol.MAGIC + os.urandom(32))
        protocol._recv_exact(conn, len(protocol.MAGIC) + 64)
        conn.sendall(os.urandom(32))            # cannot compute the server's MAC
        conn.close()

    t = threading.Thread(target=impostor, daemon=True)
    t.start()
    with pytest.raises(AuthenticationError, match="failed to prove"):
        connect("127.0.0.1", listener.getsockname()[1], SECRET)
    t.join(5)
    listener.close()


@pytest.mark.slow
def test_plain_rpyc_and_classic_clients_get_nothing(tracker, monkeypatch):
    monkeypatch.setattr(protocol, "HANDSHAKE_TIMEOUT", 0.5)
    for attempt in (lambda: rpyc.connect("127.0.0.1", tracker.port, config={"sync_request_timeout": 3}).root.status(),
                    lambda: rpyc.classic.connect("127.0.0.1", tracker.port).modules.os.getcwd()):
        with pytest.raises(Exception) as err:
            attempt()
        assert not isinstance(err.value, AssertionError)


def test_classic_mode_pickles_and_private_attributes_are_refused_after_authenticating(tracker):
    conn = connect("127.0.0.1", tracker.port, SECRET)
    try:
        root = conn.root
        for name in ("getmodule", "eval", "execute", "_pool", "__dict__"):
            with pytest.raises(AttributeError):
                getattr(root, name)
        # asked of the server directly (a proxy answers some dunders locally, about itself)
        for name in ("__class__", "__init__", "__reduce_ex__", "__new__", "__getattribute__", "__str__"):
            with pytest.raises(AttributeError):
                conn.sync_request(consts.HANDLE_GETATTR, root, name)
        with pytest.raises(AttributeError):
            conn.sync_request(consts.HANDLE_GETATTR, root.status, "__globals__")
        with pytest.raises(ValueError, match="pickling is disabled"):
            conn.sync_request(consts.HANDLE_PICKLE, root, 2)
        with pytest.raises(ValueError, match="pickling is disabled"):
            rpyc.classic.obtain(root)
        assert root.status() == ((), ())           # the connection still works
    finally:
        conn.close()


def test_references_to_client_objects_are_rejected_untouched(tracker):
    touched = []

    class Bait:
        def __str__(self):
            touched.append("str")
            return "llvm:x"

        def __getattr__(self, name):
            touched.append(name)
            raise AttributeError(name)

    conn = connect("127.0.0.1", tracker.port, SECRET)
    try:
        for bad in (Bait(), ["llvm:x"], {"k": 1}):
            with pytest.raises(Exception, match="expected a plain value"):
                conn.root.request(bad, 0.0)
        with pytest.raises(Exception, match="expected str"):
            conn.root.register(1, "", 5)
    finally:
        conn.close()
    # rpyc's own probes while making the reference (on this side) aside, nothing was used
    assert [t for t in touched if not t.startswith("____") and t != "__name__"] == []


def test_uploads_are_size_limited():
    with DeviceServer("llvm:test", secret=SECRET, max_upload_bytes=1000, warm_up=False) as server:
        conn = connect("127.0.0.1", server.port, SECRET)
        try:
            assert len(conn.root.upload_library(b"x" * 1000)) == 64
            with pytest.raises(Exception, match="exceeds the limit of 1000"):
                conn.root.upload_library(b"x" * 1001)
            with pytest.raises(Exception, match="not a SHA-256"):
                conn.root.has_library("../../etc/passwd")
        finally:
            conn.close()


def test_numbers_must_be_finite_and_a_runner_with_the_wrong_secret_stops(tracker, kernels):
    conn = connect("127.0.0.1", tracker.port, SECRET)
    try:
        with pytest.raises(Exception, match="finite"):
            conn.root.request("llvm:x", float("nan"))
    finally:
        conn.close()
    from conftest import measure_inputs
    from tilecraft.rpc import PoolUnavailableError, RPCRunner

    runner = RPCRunner("llvm:x", "127.0.0.1", tracker.port, secret=b"wrong-secret-wrong-secret", n_parallel=1)
    task, inputs, builds = measure_inputs(kernels, ["good"])
    runner.set_task(task)
    with pytest.raises(PoolUnavailableError, match="refused the shared secret"):
        runner.run(inputs, builds)          # every candidate would fail: not the candidates' fault


def test_no_secret_no_start_on_a_non_loopback_address(tmp_path, monkeypatch, capsys):
    with pytest.raises(ValueError, match="not loopback"):
        Tracker(host="0.0.0.0", port=0, secret=None)
    with pytest.raises(ValueError, match="without a shared secret"):
        load_secret(None, host="0.0.0.0", environ={})
    with pytest.raises(ValueError, match="at least 16 bytes"):
        load_secret(None, host="0.0.0.0", environ={"TILECRAFT_RPC_KEY": "short"})
    assert load_secret(None, host="10.0.0.1", environ={"TILECRAFT_RPC_KEY": "x" * 20}) == b"x" * 20
    key = tmp_path / "key"
    key.write_bytes(b"y" * 32 + b"\n")
    os.chmod(key, 0o600)
    assert load_secret(str(key), host="0.0.0.0", environ={}) == b"y" * 32
    from tilecraft.rpc import cli

    monkeypatch.delenv("TILECRAFT_RPC_KEY", raising=False)
    assert cli.main(["tracker", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "without a shared secret" in capsys.readouterr().err
    assert cli.main(["server", "--tracker", "10.1.2.3:9190", "--key", "llvm:x"]) == 2
    assert "without a shared secret" in capsys.readouterr().err


def test_keygen_writes_an_owner_only_secret(tmp_path):
    from tilecraft.rpc import cli

    path = tmp_path / "k"
    assert cli.main(["keygen", str(path)]) == 0
    assert os.stat(path).st_mode & 0o077 == 0
    assert len(load_secret(str(path), environ={})) == 64
    path.chmod(0o644)                # a file already there that others can read: replaced, and private
    before = path.read_bytes()
    assert cli.main(["keygen", str(path)]) == 0
    assert os.stat(path).st_mode & 0o777 == 0o600 and path.read_bytes() != before


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                        "-out", str(cert)], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"openssl cannot make a test certificate: {err}")
    return cert, key


def test_tls_wraps_the_handshake_and_the_secret_is_still_required(certificate):
    cert, key = certificate
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    with Tracker(port=0, secret=SECRET, ssl_context=server_ctx) as tracker:
        with TrackerClient("127.0.0.1", tracker.port, SECRET, ssl_context=client_ctx) as t:
            assert t.status().servers == ()
        with pytest.raises(AuthenticationError):
            connect("127.0.0.1", tracker.port, b"wrong-secret-wrong-secret", ssl_context=client_ctx)
        with pytest.raises((AuthenticationError, OSError)):
            connect("127.0.0.1", tracker.port, SECRET, timeout=0.5)   # plain TCP to a TLS port


def test_importing_tilecraft_does_not_import_rpyc():
    r = subprocess.run([sys.executable, "-c", "import sys, tilecraft; print('rpyc' in sys.modules)"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr


def test_on_loopback_the_first_tracker_makes_a_per_user_key_file(tmp_path, monkeypatch):
    monkeypatch.setattr(protocol, "DEFAULT_KEY_FILE", str(tmp_path / "home" / "rpc.key"))
    with pytest.raises(ValueError, match="start the tracker"):
        load_secret(None, host="127.0.0.1", environ={})
    made = load_secret(None, host="127.0.0.1", create_default=True, environ={})
    assert os.stat(tmp_path / "home" / "rpc.key").st_mode & 0o077 == 0
    assert load_secret(None, host="localhost", environ={}) == made      # servers on this machine find it
    with pytest.raises(ValueError, match="without a shared secret"):
        load_secret(None, host="192.168.1.2", environ={})               # never for a real network


def test_the_library_store_evicts_least_recently_used(tmp_path):
    from tilecraft.rpc.server import LibraryStore

    store = LibraryStore(max_bytes=250, root=str(tmp_path))
    a, b = store.put(b"a" * 100), store.put(b"b" * 100)
    assert store.get(a)                       # a is now the most recently used
    c = store.put(b"c" * 100)
    assert store.get(b) is None and store.get(a) and store.get(c)
    assert sorted(os.listdir(store.root)) == sorted([a + ".so", c + ".so"])
    assert oct(os.stat(store.root).st_mode & 0o777) == "0o700"
    store.close()
    assert not os.path.exists(store.root)


def test_the_commands_plug_into_a_parent_cli(monkeypatch, capsys):
    import argparse

    from tilecraft.rpc import cli

    parser = argparse.ArgumentParser(prog="tilecraft")
    cli.add_commands(parser.add_subparsers(dest="command", required=True))
    monkeypatch.delenv("TILECRAFT_RPC_KEY", raising=False)
    args = parser.parse_args(["rpc", "tracker", "--host", "0.0.0.0"])
    assert args.func(args) == 2 and "without a shared secret" in capsys.readouterr().err


def test_the_handshake_has_one_deadline_however_slowly_the_client_drips(monkeypatch):
    """A client that sends its reply one byte at a time, each byte well within the deadline, is
    cut off when the whole handshake's deadline passes (before, the limit applied to each read:
    80 bytes at 4 s each held a connection and a thread for five minutes)."""
    import time
    monkeypatch.setattr(protocol, "HANDSHAKE_TIMEOUT", 1.0)
    with Tracker(port=0, secret=SECRET) as t:
        sock = socket.create_connection(("127.0.0.1", t.port), timeout=3)
        protocol._recv_exact(sock, len(protocol.MAGIC) + protocol.NONCE_BYTES)
        reply = protocol.MAGIC + os.urandom(64)
        sent, closed, t0 = 0, False, time.monotonic()
        sock.settimeout(0.3)           # one byte every 0.3 s: each read alone would be in time
        for byte in reply:
            try:
                if sock.recv(1) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
            except ConnectionError:
                closed = True
                break
            try:
                sock.send(bytes([byte]))
            except OSError:
                closed = True
                break
            sent += 1
        sock.close()
    assert closed, f"the server still listened after {time.monotonic() - t0:.1f} s and {sent} bytes"
    assert sent < 10           # about 1.0 / 0.3 bytes; all 80 before


@pytest.mark.parametrize("mode, who", [(0o644, "other users"), (0o640, "its group"), (0o604, "other users")])
def test_a_key_file_others_can_read_is_warned_about(tmp_path, mode, who):
    import re
    import warnings
    key = tmp_path / "key"
    key.write_bytes(b"z" * 32 + b"\n")
    os.chmod(key, mode)
    with pytest.warns(RuntimeWarning, match=re.escape(f"the key file {str(key)!r} is open to {who} "
                                                      f"(mode {mode:04o})") + ".*chmod 600"):
        assert load_secret(str(key), environ={}) == b"z" * 32
    os.chmod(key, 0o600)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_secret(str(key), environ={}) == b"z" * 32


def test_a_connection_reveals_no_internals(tracker):
    """dir, inspect, repr and str of the root object name only the exposed methods (rpyc's own
    answers list private attributes such as '_pool', class paths and memory addresses)."""
    conn = connect("127.0.0.1", tracker.port, SECRET)
    try:
        root = conn.root
        names = conn.sync_request(consts.HANDLE_DIR, root)
        assert names == ("get_service_aliases", "get_service_name", "heartbeat", "register", "release",
                         "report_broken", "request", "status")
        inspected = conn.sync_request(consts.HANDLE_INSPECT, root.____id_pack__)
        assert [n for n, _ in inspected] == list(names)
        for handler in (consts.HANDLE_REPR, consts.HANDLE_STR):
            assert conn.sync_request(handler, root) == "<tilecraft rpc object>"
            assert conn.sync_request(handler, root.status) == "<tilecraft rpc object>"
        assert root.status() == ((), ())
    finally:
        conn.close()


def test_errors_name_no_server_internals(caplog):
    """A wrong call gets the method's public signature; a failure inside the server gets one line
    (the details, traceback and paths, stay in the server's log); a candidate that fails to load
    gets the exception's message without traceback or server folders."""
    import shutil
    with DeviceServer("llvm:test", secret=SECRET, warm_up=False) as server:
        conn = connect("127.0.0.1", server.port, SECRET)
        try:
            with pytest.raises(Exception) as err:
                conn.root.measure("0" * 64)
            text = str(err.value)
            assert "measure(lib_digest, ref_digest, arg_info, target, timing, inputs) takes 5 to 6 positional " \
                   "arguments, got 1" in text
            assert "Service" not in text and "exposed_" not in text
            junk = conn.root.upload_library(b"not a shared library")
            timing = TimingOptions(number=1, repeat=1, timeout=30.0, seed=1).to_json()
            costs, error_no, msg = conn.root.measure(junk, "", (((4,), "float32", True),), "llvm", timing)
            assert costs == () and "is not a loadable shared library" in msg
            for leak in ("Traceback", 'File "', server.store.root, "site-packages"):
                assert leak not in msg
            shutil.rmtree(server.store.root)           # the server's own folder vanishes
            with caplog.at_level("ERROR", logger="tilecraft.rpc"):
                with pytest.raises(Exception) as err:
                    conn.root.upload_library(b"more bytes")
            text = str(err.value)
            assert "upload_library failed on the server (FileNotFoundError); the server's log has the details" in text
            assert server.store.root not in text and "Traceback" not in text.split("Remote Traceback")[0]
            assert "FileNotFoundError" in caplog.text and server.store.root in caplog.text
        finally:
            conn.close()


def test_a_server_closing_before_its_greeting_is_a_network_error_not_a_refused_secret():
    """A tracker killed or restarting closes connections before it greets; that was reported as
    'refused the shared secret' and stopped a tuning run (found by test_rpc_tracker_restart)."""
    import socket
    import threading
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def close_at_once():
        conn, _ = listener.accept()
        conn.close()

    t = threading.Thread(target=close_at_once, daemon=True)
    t.start()
    try:
        with pytest.raises(ConnectionResetError, match="before its greeting") as info:
            connect("127.0.0.1", port, SECRET, timeout=5)
        assert not isinstance(info.value, AuthenticationError)
    finally:
        t.join(5)
        listener.close()
