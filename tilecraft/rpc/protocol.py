"""The wire: a shared-secret handshake before rpyc, a locked-down rpyc configuration, plain values.

Every TCP connection to a tracker or a device server starts with a mutual HMAC-SHA256
challenge–response, on the raw socket, before rpyc reads a single byte::

    server -> client   MAGIC | nonce_s (32 bytes)
    client -> server   MAGIC | nonce_c (32 bytes) | HMAC(secret, "client" | nonce_s | nonce_c)
    server -> client   HMAC(secret, "server" | nonce_s | nonce_c)

The server closes the socket when the client's MAC is wrong or late: the whole handshake (TLS
included) must be over within ``HANDSHAKE_TIMEOUT`` seconds of the connection, however the
client paces its bytes;
the client refuses a server whose MAC is wrong, so neither side talks rpyc to a peer that does
not know the secret. The secret is never sent. With ``ssl_context`` the handshake runs inside
TLS (which also protects what follows from being read or hijacked on the way).

After the handshake both sides speak rpyc with ``PROTOCOL_CONFIG``: no pickling, no public or
"safe" dunder attributes, only ``exposed_`` methods; services take and return only the plain
values that rpyc copies by value (bytes, str, int, float, bool, None and tuples of them), which
:func:`plain` checks on every argument a service receives.

>>> # conn = connect("127.0.0.1", 9190, secret=b"...")   # an rpyc connection; conn.root.status()
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import inspect
import ipaddress
import logging
import math
import os
import secrets
import socket
import ssl
import threading
import time
import zlib
from dataclasses import dataclass

import rpyc
from rpyc.core.channel import Channel
from rpyc.lib import hybridmethod

MAGIC = b"tilecraft-rpc/1\n"
NONCE_BYTES = 32
HANDSHAKE_TIMEOUT = 5.0
MIN_SECRET_BYTES = 16
ENV_SECRET = "TILECRAFT_RPC_KEY"
DEFAULT_KEY_FILE = os.path.join("~", ".tilecraft", "rpc.key")

# Everything rpyc would allow beyond calling exposed methods is off (see rpyc's DEFAULT_CONFIG).
PROTOCOL_CONFIG = {
    "allow_pickle": False,
    "allow_public_attrs": False,
    "allow_all_attrs": False,
    "allow_safe_attrs": False,
    "allow_setattr": False,
    "allow_delattr": False,
    "import_custom_exceptions": False,
    "instantiate_custom_exceptions": False,
    "instantiate_oldstyle_exceptions": False,
    "include_local_traceback": False,
    "propagate_SystemExit_locally": False,
}


class AuthenticationError(Exception):
    """The peer does not know the shared secret (or does not speak this protocol)."""


class ProtocolError(ValueError):
    """A request carried something other than the plain values the method accepts."""


# ---------------------------------------------------------------------------------------------
# Secrets.


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and 127.0.0.0/8 or ::1 addresses; False for ``0.0.0.0`` and names."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def generate_secret() -> bytes:
    """A fresh random secret (64 hex characters)."""
    return secrets.token_hex(32).encode()


def write_key_file(path: str, secret: bytes | None = None) -> bytes:
    """Write ``secret`` (or a new one) to ``path``, readable by its owner only; return it."""
    secret = secret or generate_secret()
    path = os.path.expanduser(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)         # the mode above applies only to a new file; an existing one keeps its own
    with os.fdopen(fd, "wb") as f:
        f.write(secret + b"\n")
    return secret


def read_key_file(path: str) -> bytes:
    """The secret in ``path``; warns when other users may read or change the file."""
    full = os.path.expanduser(path)
    with open(full, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode & 0o777
        secret = f.read().strip()
    if mode & 0o077:
        import warnings
        who = "other users" if mode & 0o007 else "its group"
        warnings.warn(f"the key file {path!r} is open to {who} (mode {mode:04o}): whoever reads it can "
                      f"run code on every server of the pool; make it private with `chmod 600 {path}`",
                      RuntimeWarning, stacklevel=3)
    return check_secret(secret, f"the key file {path!r}")


def check_secret(secret, where: str = "the secret") -> bytes:
    if isinstance(secret, str):
        secret = secret.encode()
    if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"{where} must hold at least {MIN_SECRET_BYTES} bytes "
                         f"(make one with `python -m tilecraft.rpc keygen FILE`)")
    return secret


def load_secret(key_file: str | None = None, host: str = "127.0.0.1", create_default: bool = False,
                environ=os.environ) -> bytes:
    """The shared secret, from (in order) ``key_file``, ``$TILECRAFT_RPC_KEY``, or — on a
    loopback ``host`` only — the per-user ``~/.tilecraft/rpc.key`` (made, mode 0600, when
    ``create_default``). Refuses a non-loopback ``host`` without an explicit secret.

    >>> # secret = load_secret("SECRET")
    """
    if key_file:
        return read_key_file(key_file)
    if environ.get(ENV_SECRET):
        return check_secret(environ[ENV_SECRET], f"${ENV_SECRET}")
    if not is_loopback(host):
        raise ValueError(f"refusing to use {host!r} (not a loopback address) without a shared secret: "
                         f"give --key-file FILE or set ${ENV_SECRET}")
    default = os.path.expanduser(DEFAULT_KEY_FILE)
    if os.path.exists(default):
        return read_key_file(default)
    if create_default:
        return write_key_file(default)
    raise ValueError(f"no shared secret: give --key-file FILE, set ${ENV_SECRET}, or start the tracker "
                     f"on this machine first (it creates {DEFAULT_KEY_FILE})")


# ---------------------------------------------------------------------------------------------
# The handshake.


def _mac(secret: bytes, role: bytes, nonce_s: bytes, nonce_c: bytes) -> bytes:
    return hmac.new(secret, role + b"|" + nonce_s + b"|" + nonce_c, hashlib.sha256).digest()


def _recv_exact(sock, n: int, deadline: float | None = None) -> bytes:
    """``n`` bytes; with ``deadline`` (``time.monotonic()``), all of them by then (a peer that
    sends one byte at a time cannot stretch the wait)."""
    buf = b""
    while len(buf) < n:
        if deadline is not None:
            _time_left(sock, deadline)
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise AuthenticationError("the peer closed the connection during the handshake")
        buf += chunk
    return buf


def _time_left(sock, deadline: float) -> None:
    """Make the socket's next operation end by ``deadline`` (raise ``socket.timeout`` if past)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("the handshake took too long")
    sock.settimeout(left)


@dataclass(frozen=True)
class Peer:
    """What a service learns about an authenticated connection (rpyc's ``credentials``)."""

    address: tuple
    sock: object  # to cut the connection from another thread (see Tracker.drop)


def server_handshake(sock, secret: bytes, ssl_context: ssl.SSLContext | None = None):
    """rpyc authenticator: prove both sides know ``secret``; returns ``(sock, Peer)``."""
    address = sock.getpeername()
    deadline = time.monotonic() + HANDSHAKE_TIMEOUT      # for all of it, not for each read
    try:
        _time_left(sock, deadline)
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(sock, server_side=True)   # the TLS handshake, by the deadline
        nonce_s = secrets.token_bytes(NONCE_BYTES)
        _time_left(sock, deadline)
        sock.sendall(MAGIC + nonce_s)
        reply = _recv_exact(sock, len(MAGIC) + NONCE_BYTES + 32, deadline)
        magic, nonce_c, mac = reply[:len(MAGIC)], reply[len(MAGIC):-32], reply[-32:]
        if magic != MAGIC or not hmac.compare_digest(mac, _mac(secret, b"client", nonce_s, nonce_c)):
            raise AuthenticationError(f"{address} does not know the shared secret")
        _time_left(sock, deadline)
        sock.sendall(_mac(secret, b"server", nonce_s, nonce_c))
        sock.settimeout(None)
    except (OSError, ssl.SSLError, AuthenticationError) as err:
        _log.warning("rejected connection from %s: %s", address, err)
        _close_socket(sock)
        # rpyc's ThreadedServer logs and drops the socket on its own AuthenticationError.
        from rpyc.utils.authenticators import AuthenticationError as RpycAuthError
        raise RpycAuthError(str(err)) from None
    return sock, Peer(address, sock)


def client_handshake(sock, secret: bytes, timeout: float = HANDSHAKE_TIMEOUT) -> None:
    """The client's half of the handshake, within ``timeout`` seconds in all; raises
    :class:`AuthenticationError` (or ``TimeoutError``)."""
    deadline = time.monotonic() + timeout
    try:
        hello = _recv_exact(sock, len(MAGIC) + NONCE_BYTES, deadline)
    except socket.timeout:
        # a hung server looks the same as a port that is not ours: the caller decides
        raise TimeoutError(f"no greeting within {timeout:g} s (a hung server, or not a tilecraft "
                           f"rpc endpoint)") from None
    except AuthenticationError:
        # closed before it greeted us: the server is going away or starting (a restart), not
        # refusing the secret (which it has not seen yet): a network error the caller retries
        raise ConnectionResetError("the server closed the connection before its greeting") from None
    if hello[:len(MAGIC)] != MAGIC:
        raise AuthenticationError("the server does not speak tilecraft-rpc/1")
    nonce_s, nonce_c = hello[len(MAGIC):], secrets.token_bytes(NONCE_BYTES)
    try:
        _time_left(sock, deadline)
        sock.sendall(MAGIC + nonce_c + _mac(secret, b"client", nonce_s, nonce_c))
    except socket.timeout:
        raise TimeoutError(f"the handshake did not go out within {timeout:g} s") from None
    try:
        mac = _recv_exact(sock, 32, deadline)
    except socket.timeout:
        raise TimeoutError(f"no answer to the handshake within {timeout:g} s") from None
    except (AuthenticationError, ConnectionError):
        raise AuthenticationError("the server refused the shared secret") from None
    if not hmac.compare_digest(mac, _mac(secret, b"server", nonce_s, nonce_c)):
        raise AuthenticationError("the server failed to prove it knows the shared secret")
    sock.settimeout(None)


def _close_socket(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------
# Connections and servers.


def connect(host: str, port: int, secret: bytes, *, ssl_context: ssl.SSLContext | None = None,
            timeout: float = 10.0, server_hostname: str | None = None):
    """An authenticated rpyc connection to a tracker or device server.

    ``timeout``: seconds to connect, to finish the handshake, and for each plain call (use
    ``rpyc.async_(...)`` with ``set_expiry`` for longer ones). ``ssl_context``: a client
    context (``ssl.create_default_context(cafile=...)``) when the other side uses TLS.
    """
    import rpyc
    from rpyc.core.stream import SocketStream

    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
        client_handshake(sock, secret, timeout)
    except BaseException:
        _close_socket(sock)
        raise
    # every plain call (even fetching ``conn.root`` or a method) waits at most ``timeout``;
    # long calls set their own expiry with ``rpyc.async_``
    return rpyc.utils.factory.connect_stream(SocketStream(sock),
                                             config=dict(PROTOCOL_CONFIG, sync_request_timeout=timeout))


def abort(conn) -> None:
    """Close ``conn`` without waiting for the peer (rpyc's ``close`` waits for a reply that a
    hung server never sends): cut the socket first, then let rpyc clean up."""
    try:
        dup = socket.fromfd(conn.fileno(), socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, ValueError, EOFError):
        dup = None
    if dup is not None:
        _close_socket(dup)   # shutdown acts on the connection, close only on the duplicate
    try:
        conn.close()
    except Exception:  # noqa: BLE001 -- closing a broken connection may fail in many ways
        pass


class MessageTooLarge(EOFError):
    """A peer announced a message over the connection's limit; the connection is closed."""


class LimitedChannel(Channel):
    """rpyc's channel, refusing any message whose announced (or decompressed) size is over
    ``max_bytes`` *before* reading it: an upload over the limit costs the server nothing."""

    __slots__ = ("max_bytes", "peer")

    def __init__(self, stream, max_bytes: int, peer=None):
        super().__init__(stream)
        self.max_bytes, self.peer = max_bytes, peer

    def recv(self):
        header = self.stream.read(self.FRAME_HEADER.size)
        length, compressed = self.FRAME_HEADER.unpack(header)
        if length > self.max_bytes:
            self._refuse(length)
        data = self.stream.read(length + len(self.FLUSHER))[:-len(self.FLUSHER)]
        if compressed:
            unzip = zlib.decompressobj()
            data = unzip.decompress(data, self.max_bytes + 1)
            if len(data) > self.max_bytes or unzip.unconsumed_tail:
                self._refuse(f"more than {self.max_bytes} (once decompressed)")
        return data

    def _refuse(self, size):
        _log.warning("closing the connection from %s: a message of %s bytes, over the limit of %d",
                     self.peer, size, self.max_bytes)
        self.close()
        raise MessageTooLarge(f"a message of {size} bytes is over the limit of {self.max_bytes}")


class RemoteError(RuntimeError):
    """What a client gets when a service failed on its side (the details stay in the server's log)."""


class GuardedConnection(rpyc.Connection):
    """rpyc's connection, telling a peer nothing it does not need: ``dir`` lists the exposed
    methods only, ``inspect`` their names and docstrings only, ``repr``/``str`` a fixed text
    (rpyc's own would list private attributes, class paths and memory addresses)."""

    def _handle_dir(self, obj):
        return tuple(sorted(_exposed(obj)))

    def _handle_inspect(self, id_pack):
        obj = self._local_objects[id_pack]
        return tuple((name, inspect.getdoc(method)) for name, method in sorted(_exposed(obj).items()))

    def _handle_repr(self, obj):
        return "<tilecraft rpc object>"

    _handle_str = _handle_repr


def _exposed(obj) -> dict:
    return {name[len("exposed_"):]: getattr(obj, name) for name in dir(type(obj)) if name.startswith("exposed_")}


class GuardedService(rpyc.Service):
    """Base of the tracker's and the device server's services: each connection's messages are at
    most ``max_message_bytes()``, checked from each message's header before its body is read
    (:class:`LimitedChannel`), and the connection reveals no internals (:class:`GuardedConnection`;
    exposed methods wear :func:`remote`)."""

    _protocol = GuardedConnection

    def max_message_bytes(self) -> int:
        return 1 << 20

    @hybridmethod
    def _connect(self, channel, config={}):
        if isinstance(self, type):       # rpyc's server calls this on the class
            self = self()
        peer = getattr(config.get("credentials"), "address", None)
        channel = LimitedChannel(channel.stream, self.max_message_bytes(), peer)
        return super(GuardedService, self)._connect(channel, config)


def remote(method):
    """Decorate an exposed method: a client's mistake (:class:`ProtocolError`, e.g. from
    :func:`plain`, or a wrong number of arguments) goes back with its message; any other failure
    is logged here with its traceback and answered with one line that names no file, class or
    attribute of the server.

    >>> # @remote
    >>> # def exposed_status(self): ...
    """
    name = method.__name__[len("exposed_"):] if method.__name__.startswith("exposed_") else method.__name__
    params = list(inspect.signature(method).parameters.values())[1:]
    least = sum(p.default is p.empty for p in params)
    names = ", ".join(p.name for p in params)

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if kwargs or not least <= len(args) <= len(params):
            expected = str(least) if least == len(params) else f"{least} to {len(params)}"
            raise ProtocolError(f"{name}({names}) takes {expected} positional arguments, got {len(args)}"
                                + (" and keyword arguments" if kwargs else ""))
        try:
            return method(self, *args)
        except ProtocolError:
            raise
        except Exception as err:  # noqa: BLE001 -- the client learns that it failed, the log why
            _log.exception("%s failed", name)
            raise RemoteError(f"{name} failed on the server ({type(err).__name__}); "
                              "the server's log has the details") from None
    return call


class RpcServer:
    """An rpyc ``ThreadedServer`` for ``service`` behind the handshake, run in a thread.

    ``port=0`` picks a free port (see ``.port`` after ``start()``).
    """

    def __init__(self, service, host: str, port: int, secret: bytes,
                 ssl_context: ssl.SSLContext | None = None, name: str = "rpc"):
        from rpyc.utils.server import ThreadedServer

        self.secret = check_secret(secret)
        self._server = ThreadedServer(
            service, hostname=host, port=port, reuse_addr=True,
            authenticator=lambda sock: server_handshake(sock, self.secret, ssl_context),
            protocol_config=dict(PROTOCOL_CONFIG), logger=logging.getLogger(f"tilecraft.rpc.{name}"))
        self.host = host
        self.port = self._server.listener.getsockname()[1]
        self._thread: threading.Thread | None = None
        self._name = name

    def start(self) -> "RpcServer":
        # listen before returning, so a client connecting right after start() is not refused
        self._server._listen()
        self._thread = threading.Thread(target=self._server.start, name=f"tilecraft-{self._name}",
                                        daemon=True)
        self._thread.start()
        return self

    def serve_forever(self):
        self._server.start()

    def close(self):
        self._server.close()
        if self._thread is not None:
            self._thread.join(timeout=5)


# ---------------------------------------------------------------------------------------------
# Plain values.

_SCALARS = (bytes, str, int, float, bool, type(None))


def plain(value, what: str, kind=None, max_len: int | None = None):
    """Check that ``value`` received from the network is a plain value (never a reference to an
    object on the other side) of ``kind``; returns it.

    ``type(...)`` is used, not ``isinstance``: an rpyc reference can fake ``__class__``.
    """
    def ok(v, depth=0):
        t = type(v)
        if t in _SCALARS:
            return True
        return t is tuple and depth < 8 and all(ok(x, depth + 1) for x in v)

    if not ok(value):
        raise ProtocolError(f"{what}: expected a plain value, got {type(value).__name__}")
    if kind is not None:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and type(value) is int:
            value = float(value)
        if type(value) not in kinds or (bool not in kinds and type(value) is bool):
            raise ProtocolError(f"{what}: expected {' or '.join(k.__name__ for k in kinds)}, "
                                f"got {type(value).__name__}")
    if max_len is not None and type(value) in (bytes, str, tuple) and len(value) > max_len:
        raise ProtocolError(f"{what}: {len(value)} exceeds the limit of {max_len}")
    return value


def bounded(value, what: str, upper: float) -> float:
    """A plain, finite number (seconds, milliseconds), clipped to ``[0, upper]``."""
    value = plain(value, what, float)
    if not math.isfinite(value):
        raise ProtocolError(f"{what}: expected a finite number, got {value}")
    return min(max(value, 0.0), upper)


_log = logging.getLogger("tilecraft.rpc")
