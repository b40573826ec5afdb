"""``python -m tilecraft.rpc {tracker,server,status,keygen}`` (and ``tilecraft rpc ...``).

    python -m tilecraft.rpc keygen SECRET
    python -m tilecraft.rpc tracker --host 127.0.0.1 --port 9190 --key-file SECRET
    python -m tilecraft.rpc server --tracker 127.0.0.1:9190 --key llvm:znver3 --key-file SECRET
    python -m tilecraft.rpc status --tracker 127.0.0.1:9190 --key-file SECRET

``--key`` is the device key; ``--key-file`` the shared secret (or ``$TILECRAFT_RPC_KEY``);
``--certfile/--keyfile`` serve TLS, ``--ca-file`` verifies a TLS peer. See docs/rpc.md.
"""
from __future__ import annotations

import argparse
import logging
import signal
import ssl
import sys
import threading

from .protocol import is_loopback, load_secret, write_key_file


def add_commands(subparsers) -> None:
    """Add ``rpc {tracker,server,status,keygen}`` to a parent CLI's ``subparsers``; the parsed
    arguments' ``func(args) -> int`` runs the command (exit status: 0; 2 for bad input: a missing,
    short or refused secret, an address that is not HOST:PORT; 1 when ``status`` cannot reach
    the tracker).

    >>> # sub = parser.add_subparsers(dest="command"); add_commands(sub)
    >>> # args = parser.parse_args(); sys.exit(args.func(args))
    """
    rpc = subparsers.add_parser("rpc", help="the device pool: tracker, device server, status",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    rpc.add_argument("-v", "--verbose", action="store_true", help="log every connection and registration")
    _add_rpc_subcommands(rpc.add_subparsers(dest="rpc_command", required=True))


def _add_rpc_subcommands(sub) -> None:
    p = sub.add_parser("tracker", help="run a tracker")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=9190, help="port (default: 9190; 0: any free one)")
    p.add_argument("--heartbeat-timeout", type=float, default=10.0,
                   help="seconds without a heartbeat before a server leaves the pool (default: 10)")
    _secret_args(p)
    _tls_server_args(p)
    p.set_defaults(func=dispatch, rpc_func=run_tracker)

    p = sub.add_parser("server", help="run a device server and register it with a tracker")
    p.add_argument("--tracker", required=True, metavar="HOST:PORT",
                   help="the tracker to register with; the server registers again whenever the tracker "
                        "comes back")
    p.add_argument("--key", default=None, help="device key, e.g. llvm:znver3 (default: llvm:<this CPU>)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port (default: any free one)")
    p.add_argument("--advertise-host", default=None, help="address clients use to reach this server")
    p.add_argument("--heartbeat-interval", type=float, default=2.0, metavar="SECONDS",
                   help="seconds between heartbeats to the tracker (default: 2); keep it well under the "
                        "tracker's --heartbeat-timeout")
    p.add_argument("--max-upload-mb", type=float, default=64.0, help="largest library accepted (default: 64)")
    p.add_argument("--max-memory-mb", type=int, default=None, help="cap the measuring process's memory")
    _secret_args(p)
    _tls_server_args(p)
    p.add_argument("--ca-file", default=None, help="verify the tracker's TLS certificate with this CA")
    p.set_defaults(func=dispatch, rpc_func=run_server)

    p = sub.add_parser("status", help="list a tracker's servers, keys and queues")
    p.add_argument("--tracker", required=True, metavar="HOST:PORT", help="the tracker to ask")
    _secret_args(p)
    p.add_argument("--ca-file", default=None, help="verify the tracker's TLS certificate with this CA")
    p.set_defaults(func=dispatch, rpc_func=run_status)

    p = sub.add_parser("keygen", help="write a new random shared secret to FILE (mode 0600)")
    p.add_argument("file", metavar="FILE",
                   help="where to write the secret (a file there is replaced); give the file to every "
                        "machine of the pool and name it with --key-file")
    p.set_defaults(func=dispatch, rpc_func=run_keygen)


def _secret_args(p):
    p.add_argument("--key-file", default=None,
                   help="file holding the shared secret (else $TILECRAFT_RPC_KEY; on loopback only, "
                        "~/.tilecraft/rpc.key)")


def _tls_server_args(p):
    p.add_argument("--certfile", default=None, help="serve TLS with this certificate (PEM)")
    p.add_argument("--keyfile", default=None, help="the certificate's private key (PEM)")


def _server_ssl(args):
    if bool(args.certfile) != bool(args.keyfile):
        raise ValueError("--certfile and --keyfile go together")
    if not args.certfile:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.certfile, args.keyfile)
    return ctx


def _client_ssl(args):
    return ssl.create_default_context(cafile=args.ca_file) if getattr(args, "ca_file", None) else None


def parse_address(text: str, flag: str = "--tracker") -> tuple:
    """``(host, port)`` of ``HOST:PORT``; a ``ValueError`` naming ``flag`` otherwise.

    >>> parse_address("127.0.0.1:9190")
    ('127.0.0.1', 9190)
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{flag} expects HOST:PORT (e.g. 127.0.0.1:9190), got {text!r}")
    return host, int(port)


def default_device_key() -> str:
    """``llvm:<host CPU name>``."""
    import llvmlite.binding as llvm

    return f"llvm:{llvm.get_host_cpu_name()}"


def _wait_for_signal(stop: threading.Event):
    # SIGTERM ends the process as Ctrl-C does: through the finally blocks that close everything.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass


def run_tracker(args) -> int:
    from .tracker import Tracker

    secret = load_secret(args.key_file, host=args.host, create_default=True)
    tracker = Tracker(args.host, args.port, secret, heartbeat_timeout=args.heartbeat_timeout,
                      ssl_context=_server_ssl(args)).start()
    print(f"tilecraft-rpc tracker listening on {tracker.host}:{tracker.port}", flush=True)
    try:
        _wait_for_signal(threading.Event())
    finally:
        tracker.close()
    return 0


def run_server(args) -> int:
    from .server import DeviceServer

    tracker = parse_address(args.tracker)
    exposed = args.host if not is_loopback(args.host) else tracker[0]
    secret = load_secret(args.key_file, host=exposed)
    server = DeviceServer(args.key or default_device_key(), args.host, args.port, secret, tracker=tracker,
                          advertise_host=args.advertise_host, heartbeat_interval=args.heartbeat_interval,
                          max_upload_bytes=int(args.max_upload_mb * (1 << 20)), max_memory_mb=args.max_memory_mb,
                          ssl_context=_server_ssl(args), tracker_ssl_context=_client_ssl(args)).start()
    print(f"tilecraft-rpc server {server.key} listening on {server.host}:{server.port}", flush=True)
    try:
        _wait_for_signal(threading.Event())
    finally:
        server.close()
    return 0


def run_status(args) -> int:
    from .protocol import AuthenticationError
    from .tracker import TrackerClient

    host, port = parse_address(args.tracker)
    secret = load_secret(args.key_file, host=host)
    try:
        with TrackerClient(host, port, secret, ssl_context=_client_ssl(args)) as t:
            print(t.status().format())
    except AuthenticationError as err:
        raise ValueError(f"tracker {host}:{port} refused the shared secret ({err}): check --key-file "
                         "or $TILECRAFT_RPC_KEY") from None
    except (OSError, EOFError) as err:
        print(f"error: cannot reach the tracker at {host}:{port} ({type(err).__name__}: {err})", file=sys.stderr)
        return 1
    return 0


def run_keygen(args) -> int:
    write_key_file(args.file)
    print(f"wrote a new shared secret to {args.file} (mode 0600); copy it to every machine of the pool")
    return 0


def main(argv=None) -> int:
    """``python -m tilecraft.rpc ...``."""
    parser = argparse.ArgumentParser(prog="python -m tilecraft.rpc", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log every connection and registration")
    _add_rpc_subcommands(parser.add_subparsers(dest="rpc_command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def dispatch(args) -> int:
    """Run the parsed command ``args.rpc_func``: logging set up, a refused secret reported."""
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    try:
        return args.rpc_func(args)
    except ValueError as err:   # a missing, short or refused secret, a refused or malformed address
        print(f"error: {err}", file=sys.stderr)
        return 2
