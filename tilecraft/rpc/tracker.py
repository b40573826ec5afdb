"""The tracker: which device servers exist, which are free, who waits for one.

Device servers register a *device key* (``"llvm:znver3"``, ``"cuda:sm_90"``) and their address
over a connection they keep open, and send a heartbeat every few seconds. Clients ask for a
server of a key and get a *lease*; they release it when done (or by disconnecting).

Hand-out is fair: requests for a key are served strictly in arrival order, and among free
servers the one that has been free longest goes first (so work spreads over the pool). A server
leaves the pool when its registration connection dies, when it misses heartbeats for
``heartbeat_timeout`` seconds, or when a client reports it broken (it may register again).

>>> # tracker = Tracker(secret=b"...", port=9190).start()
>>> # with TrackerClient("127.0.0.1", 9190, secret=b"...") as t: print(t.status())
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

import rpyc

from .protocol import (GuardedService, ProtocolError, RpcServer, bounded, check_secret, connect, generate_secret,
                       is_loopback, plain, remote)

MAX_KEY_LEN = 200
MAX_WAIT_S = 3600.0


# ---------------------------------------------------------------------------------------------
# Records (what clients get back, built from the plain tuples on the wire).


@dataclass(frozen=True)
class Lease:
    """A device server handed to one client until released."""

    lease_id: int
    server_id: int
    key: str
    host: str
    port: int


@dataclass(frozen=True)
class ServerInfo:
    server_id: int
    key: str
    host: str
    port: int
    busy: bool
    seconds_since_heartbeat: float


@dataclass(frozen=True)
class TrackerStatus:
    """``servers``: every registered server; ``queues``: ``{key: clients waiting}``."""

    servers: tuple
    queues: dict

    def keys(self) -> dict:
        """``{key: (free, total)}``."""
        out: dict = {}
        for s in self.servers:
            free, total = out.get(s.key, (0, 0))
            out[s.key] = (free + (not s.busy), total + 1)
        return out

    def format(self) -> str:
        lines = [f"{'key':<24} {'free':>4} {'total':>5} {'queue':>5}"]
        keys = self.keys()
        for key in sorted(set(keys) | set(self.queues)):
            free, total = keys.get(key, (0, 0))
            lines.append(f"{key:<24} {free:>4} {total:>5} {self.queues.get(key, 0):>5}")
        lines.append("")
        lines.append(f"{'server':>6} {'key':<24} {'address':<22} {'state':<5} {'heartbeat':>9}")
        for s in self.servers:
            lines.append(f"{s.server_id:>6} {s.key:<24} {s.host + ':' + str(s.port):<22} "
                         f"{'busy' if s.busy else 'free':<5} {s.seconds_since_heartbeat:>8.1f}s")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The pool itself: plain Python, no network, so its rules are testable with a fake clock.


@dataclass
class _Server:
    server_id: int
    key: str
    host: str
    port: int
    owner: object            # the registration session
    on_drop: Callable        # cuts the registration session
    last_seen: float
    lease_id: int | None = None
    free_since: int = 0      # a hand-out counter: the smallest goes first


@dataclass
class _Wait:
    ticket: int
    key: str
    owner: object
    lease: Lease | None = None
    cancelled: bool = False


class DevicePool:
    """Thread-safe registry of servers and FIFO queues of requests, per device key.

    ``clock`` is injected (tests pass a fake one); nothing here touches the network.
    """

    def __init__(self, heartbeat_timeout: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.heartbeat_timeout = heartbeat_timeout
        self.clock = clock
        self._cond = threading.Condition()
        self._servers: dict[int, _Server] = {}
        self._queues: dict[str, deque] = {}
        self._leases: dict[int, tuple] = {}   # lease_id -> (server_id, owner)
        self._ids = itertools.count(1)
        self._order = itertools.count(1)

    # --- servers

    def register(self, key: str, host: str, port: int, owner, on_drop: Callable = lambda: None) -> int:
        with self._cond:
            sid = next(self._ids)
            self._servers[sid] = _Server(sid, key, host, port, owner, on_drop, self.clock(),
                                         free_since=next(self._order))
            self._dispatch(key)
            return sid

    def heartbeat(self, server_id: int, owner) -> bool:
        """False when the server is no longer in the pool (it should register again)."""
        with self._cond:
            s = self._servers.get(server_id)
            if s is None or s.owner is not owner:
                return False
            s.last_seen = self.clock()
            return True

    def drop(self, server_id: int, reason: str = "") -> bool:
        with self._cond:
            s = self._servers.pop(server_id, None)
            if s is None:
                return False
            if s.lease_id is not None:
                self._leases.pop(s.lease_id, None)
        s.on_drop()
        return True

    def reap(self) -> list[int]:
        """Drop servers whose last heartbeat is older than ``heartbeat_timeout``."""
        with self._cond:
            now = self.clock()
            stale = [sid for sid, s in self._servers.items() if now - s.last_seen > self.heartbeat_timeout]
        return [sid for sid in stale if self.drop(sid, "missed heartbeats")]

    # --- clients

    def request(self, key: str, owner, timeout: float) -> Lease | None:
        """Wait up to ``timeout`` seconds for a server of ``key``; first come, first served."""
        with self._cond:
            wait = _Wait(next(self._order), key, owner)
            self._queues.setdefault(key, deque()).append(wait)
            self._dispatch(key)
            deadline = self.clock() + timeout
            while wait.lease is None and not wait.cancelled:
                left = deadline - self.clock()
                if left <= 0:
                    break
                self._cond.wait(min(left, 1.0))
            if wait.lease is None:
                wait.cancelled = True
                self._remove_wait(wait)
            return wait.lease

    def release(self, lease_id: int, owner) -> bool:
        with self._cond:
            held = self._leases.get(lease_id)
            if held is None or held[1] is not owner:
                return False
            del self._leases[lease_id]
            s = self._servers.get(held[0])
            if s is not None:
                s.lease_id = None
                s.free_since = next(self._order)
                self._dispatch(s.key)
            return True

    def report_broken(self, lease_id: int, owner) -> bool:
        """The holder of ``lease_id`` could not use its server: drop the server."""
        with self._cond:
            held = self._leases.get(lease_id)
            if held is None or held[1] is not owner:
                return False
        return self.drop(held[0], "reported broken")

    def forget_owner(self, owner) -> None:
        """A session ended: release its leases, cancel its waits, drop its servers."""
        with self._cond:
            for lid, (_, o) in list(self._leases.items()):
                if o is owner:
                    self.release(lid, owner)
            for q in self._queues.values():
                for w in q:
                    if w.owner is owner:
                        w.cancelled = True
            for q in self._queues.values():
                for w in [w for w in q if w.cancelled]:
                    q.remove(w)
            mine = [sid for sid, s in self._servers.items() if s.owner is owner]
            self._cond.notify_all()
        for sid in mine:
            self.drop(sid, "session closed")

    def status(self) -> TrackerStatus:
        with self._cond:
            now = self.clock()
            servers = tuple(ServerInfo(s.server_id, s.key, s.host, s.port, s.lease_id is not None,
                                       round(now - s.last_seen, 3))
                            for s in sorted(self._servers.values(), key=lambda s: s.server_id))
            queues = {k: len(q) for k, q in self._queues.items() if q}
            return TrackerStatus(servers, queues)

    # --- internals (called with the lock held)

    def _remove_wait(self, wait: _Wait):
        q = self._queues.get(wait.key)
        if q is not None and wait in q:
            q.remove(wait)
        self._dispatch(wait.key)

    def _dispatch(self, key: str):
        """Give free servers of ``key`` to the oldest waiters of ``key``."""
        q = self._queues.get(key)
        while q:
            free = [s for s in self._servers.values() if s.key == key and s.lease_id is None]
            if not free:
                break
            wait = q.popleft()
            if wait.cancelled:
                continue
            s = min(free, key=lambda s: s.free_since)
            lid = next(self._ids)
            s.lease_id = lid
            self._leases[lid] = (s.server_id, wait.owner)
            wait.lease = Lease(lid, s.server_id, s.key, s.host, s.port)
        self._cond.notify_all()


# ---------------------------------------------------------------------------------------------
# The rpyc service (one instance per connection) and the tracker process.


class TrackerService(GuardedService):
    """What a connection to the tracker may call. Every argument is checked with ``plain``;
    no message may exceed 64 KiB (they are a few hundred bytes)."""

    def __init__(self, pool: DevicePool):
        self._pool = pool
        self._peer = None

    def max_message_bytes(self) -> int:
        return 64 << 10

    def on_connect(self, conn):
        self._peer = conn._config.get("credentials")  # rpyc's documented place for it

    def on_disconnect(self, conn):
        self._pool.forget_owner(self)

    def _cut(self):
        sock = getattr(self._peer, "sock", None)
        if sock is not None:
            try:
                import socket
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # --- servers

    @remote
    def exposed_register(self, key, host, port):
        """``(server_id,)``. An empty ``host`` means "the address you see me at"."""
        key = plain(key, "key", str, MAX_KEY_LEN)
        host = plain(host, "host", str, 255)
        port = plain(port, "port", int)
        if not key or not 0 < port < 65536:
            raise ProtocolError("register: a key and a port in 1..65535 are needed")
        if not host:
            host = self._peer.address[0] if self._peer else "127.0.0.1"
        return (self._pool.register(key, host, port, self, self._cut),)

    @remote
    def exposed_heartbeat(self, server_id):
        return self._pool.heartbeat(plain(server_id, "server_id", int), self)

    # --- clients

    @remote
    def exposed_request(self, key, wait_s):
        """``(lease_id, server_id, key, host, port)`` or ``()`` when none came free in time."""
        key = plain(key, "key", str, MAX_KEY_LEN)
        wait_s = bounded(wait_s, "wait_s", MAX_WAIT_S)
        lease = self._pool.request(key, self, wait_s)
        if lease is None:
            return ()
        return (lease.lease_id, lease.server_id, lease.key, lease.host, lease.port)

    @remote
    def exposed_release(self, lease_id):
        return self._pool.release(plain(lease_id, "lease_id", int), self)

    @remote
    def exposed_report_broken(self, lease_id):
        return self._pool.report_broken(plain(lease_id, "lease_id", int), self)

    @remote
    def exposed_status(self):
        """``(servers, queues)``: ``((server_id, key, host, port, busy, heartbeat_age), ...)``
        and ``((key, waiting), ...)``."""
        st = self._pool.status()
        return (tuple((s.server_id, s.key, s.host, s.port, s.busy, s.seconds_since_heartbeat)
                      for s in st.servers),
                tuple(sorted(st.queues.items())))


class Tracker:
    """The tracker, served from a background thread of this process.

    ``secret``: the shared secret (a fresh random one when ``None``, readable as
    ``tracker.secret``: handy in tests); ``port=0`` picks a free port.

    >>> # tracker = Tracker(secret=load_secret("SECRET"), port=9190).start(); ...; tracker.close()
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 9190, secret: bytes | None = None,
                 heartbeat_timeout: float = 10.0, ssl_context=None):
        if secret is None:
            if not is_loopback(host):
                raise ValueError(f"refusing to serve on {host!r} (not loopback) without a shared secret")
            secret = generate_secret()
        self.secret = check_secret(secret)
        self.pool = DevicePool(heartbeat_timeout)
        self._rpc = RpcServer(rpyc.utils.helpers.classpartial(TrackerService, self.pool), host, port,
                              self.secret, ssl_context, name="tracker")
        self.host, self.port = host, self._rpc.port
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None

    def start(self) -> "Tracker":
        self._rpc.start()
        self._reaper = threading.Thread(target=self._reap_loop, name="tilecraft-tracker-reaper", daemon=True)
        self._reaper.start()
        return self

    def _reap_loop(self):
        while not self._stop.wait(max(0.05, self.pool.heartbeat_timeout / 4)):
            self.pool.reap()

    def status(self) -> TrackerStatus:
        return self.pool.status()

    def close(self):
        self._stop.set()
        self._rpc.close()
        if self._reaper is not None:
            self._reaper.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()


class TrackerClient:
    """A connection to a tracker (leases end when it closes).

    >>> # with TrackerClient("127.0.0.1", 9190, secret) as t:
    >>> #     lease = t.request("llvm:znver3", timeout=60); ...; t.release(lease)
    """

    def __init__(self, host: str, port: int, secret: bytes, ssl_context=None, connect_timeout: float = 10.0):
        self.conn = connect(host, port, check_secret(secret), ssl_context=ssl_context, timeout=connect_timeout)

    def request(self, key: str, timeout: float = 60.0) -> Lease | None:
        """Wait up to ``timeout`` seconds for a server of ``key`` (``None`` if none came free)."""
        call = rpyc.async_(self.conn.root.request)(key, float(timeout))
        call.set_expiry(timeout + 30.0)
        got = call.value
        return Lease(*got) if got else None

    def release(self, lease: Lease) -> bool:
        return bool(self.conn.root.release(lease.lease_id))

    def report_broken(self, lease: Lease) -> bool:
        return bool(self.conn.root.report_broken(lease.lease_id))

    def status(self) -> TrackerStatus:
        servers, queues = self.conn.root.status()
        return TrackerStatus(tuple(ServerInfo(*s) for s in servers), dict(queues))

    def close(self):
        try:
            self.conn.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
