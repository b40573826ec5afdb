"""The device server: receives libraries, checks and times them in a child process, answers numbers.

A client (``RPCRunner``) holding a lease on this server calls, in order::

    has_library(digest) / upload_library(bytes) -> digest      the candidate and the reference
    prepare_reference(ref_digest, arg_info, target, timing, inputs)   -> (ok, message)
    measure(lib_digest, ref_digest, arg_info, target, timing, inputs) -> (costs, error_no, error_msg)

``timing`` is a ``TimingOptions`` as JSON text (``to_json``), validated here as it would be
where it was made; an invalid one is refused with the message naming the option. ``inputs``
is the recipe of the measurement's inputs (``autotune.inputs``: a name and plain parameters,
``()`` for random arrays, the default); the server makes the arrays from it and the seed.

Libraries are stored by SHA-256 in a private temporary folder (size-limited, least recently
used evicted). Every load and run happens in a worker process (``autotune.worker_pool.WorkerPool``):
a candidate that segfaults or hangs costs a fresh worker, never the server. One measurement runs
at a time. The server registers with a tracker and sends heartbeats; if the tracker drops it or
goes away, it registers again.

Uploading a library means running its code here: anyone with the secret can do so (see
docs/rpc.md, "Security model").

>>> # srv = DeviceServer("llvm:znver3", secret=s, tracker=("127.0.0.1", 9190)).start()
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
import time

import rpyc

from ..autotune.worker_pool import WorkerPool, signal_name
from ..autotune.inputs import RECIPES
from ..autotune.local import limit_memory
from ..autotune.measure import MeasureErrorNo, OptionError, TimingOptions
from ..runtime.tempdirs import owned_temp_dir
from . import measure as child
from .protocol import (GuardedService, ProtocolError, RpcServer, check_secret, connect, generate_secret,
                       is_loopback, plain, remote)

_log = logging.getLogger("tilecraft.rpc.server")

DTYPES = frozenset(["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                    "float16", "float32", "float64"])
MAX_ARGS = 64
MAX_ARG_ELEMENTS = 1 << 31
MAX_TIMING_CHARS = 4096


class LibraryStore:
    """Uploaded libraries by SHA-256 digest, in a private folder, at most ``max_bytes`` in all."""

    def __init__(self, max_bytes: int, root: str | None = None):
        self.max_bytes = max_bytes
        # mode 0700, named after this process: a killed server's folder goes when the next starts
        self.root = owned_temp_dir("tilecraft-rpc-", root)
        self._files: dict[str, tuple] = {}   # digest -> (size, last_used)
        self._lock = threading.Lock()

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        path = self.path_of(digest)
        with self._lock:
            if digest not in self._files:
                self._evict(len(data))
                tmp = path + ".part"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            self._files[digest] = (len(data), time.monotonic())
        return digest

    def get(self, digest: str) -> str | None:
        with self._lock:
            if digest not in self._files:
                return None
            self._files[digest] = (self._files[digest][0], time.monotonic())
            return self.path_of(digest)

    def path_of(self, digest: str) -> str:
        return os.path.join(self.root, digest + ".so")

    def _evict(self, incoming: int):
        total = sum(size for size, _ in self._files.values()) + incoming
        for digest, (size, _) in sorted(self._files.items(), key=lambda kv: kv[1][1]):
            if total <= self.max_bytes:
                break
            del self._files[digest]
            total -= size
            for name in os.listdir(self.root):    # the library and its saved reference outputs
                if name.startswith(digest):
                    try:
                        os.remove(os.path.join(self.root, name))
                    except OSError:
                        pass

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)


def _digest(value, what: str) -> str:
    d = plain(value, what, str, 64)
    if len(d) != 64 or any(c not in "0123456789abcdef" for c in d):
        raise ProtocolError(f"{what}: not a SHA-256 hex digest")
    return d


def check_arg_info(value) -> tuple:
    """``((shape, dtype, is_output), ...)`` as plain, bounded values."""
    info = plain(value, "arg_info", tuple, MAX_ARGS)
    out = []
    for i, arg in enumerate(info):
        if type(arg) is not tuple or len(arg) != 3:
            raise ProtocolError(f"arg_info[{i}]: expected (shape, dtype, is_output)")
        shape, dtype, is_output = arg
        if type(shape) is not tuple or len(shape) > 16 or any(type(d) is not int or d < 0 for d in shape):
            raise ProtocolError(f"arg_info[{i}]: the shape must be a tuple of non-negative ints")
        n = 1
        for d in shape:
            n *= d
        if n > MAX_ARG_ELEMENTS:
            raise ProtocolError(f"arg_info[{i}]: {n} elements is more than this server allows")
        if dtype not in DTYPES:
            raise ProtocolError(f"arg_info[{i}]: unsupported dtype {dtype!r}")
        if type(is_output) is not bool:
            raise ProtocolError(f"arg_info[{i}]: is_output must be a bool")
        out.append((shape, dtype, is_output))
    return tuple(out)


def check_timing(value) -> TimingOptions:
    """The ``TimingOptions`` of a request's JSON text, validated as where it was made, with a
    seed (the inputs of a measurement come from it); a :class:`ProtocolError` otherwise."""
    text = plain(value, "timing", str, MAX_TIMING_CHARS)
    try:
        timing = TimingOptions.from_json(text)
    except OptionError as err:
        raise ProtocolError(f"timing: {err}") from None
    if timing.seed is None:
        raise ProtocolError("timing: timing option 'seed' must be an integer here: a measurement's random "
                            "inputs come from it (runners draw one per task)")
    return timing


def check_inputs(value) -> tuple:
    """An input recipe as plain values: ``()`` or ``(name, params)`` with ``name`` one of
    ``autotune.inputs.RECIPES`` and ``params`` numbers and strings (the recipe checks them
    against the arguments when it runs)."""
    recipe = plain(value, "inputs", tuple, 2)
    if not recipe:
        return ()
    if len(recipe) != 2 or type(recipe[0]) is not str or type(recipe[1]) is not tuple:
        raise ProtocolError("inputs: expected () or (recipe name, parameters)")
    name, params = recipe
    if name not in RECIPES:
        raise ProtocolError(f"inputs: unknown input recipe {name[:64]!r}; this server knows "
                            f"{', '.join(sorted(RECIPES))}")
    if len(params) > 16 or any(type(p) not in (int, float, str, bool) or (type(p) is str and len(p) > 64)
                               for p in params):
        raise ProtocolError(f"inputs: the parameters of {name!r} must be at most 16 numbers and short strings")
    return (name, params)


class DeviceServerService(GuardedService):
    """What a connection to a device server may call (one instance per connection). A message
    may be as large as the upload limit plus 64 KiB for the rest of the request; a larger one is
    refused from its header, before the server reads (and holds) its body."""

    def __init__(self, server: "DeviceServer"):
        self._server = server

    def max_message_bytes(self) -> int:
        return self._server.max_upload_bytes + (64 << 10)

    @remote
    def exposed_info(self):
        """``(key, tilecraft_version, max_upload_bytes)``."""
        from ..runtime import version

        return (self._server.key, version(), self._server.max_upload_bytes)

    @remote
    def exposed_has_library(self, digest):
        return self._server.store.get(_digest(digest, "digest")) is not None

    @remote
    def exposed_upload_library(self, data):
        data = plain(data, "library", bytes, self._server.max_upload_bytes)
        return self._server.store.put(data)

    @remote
    def exposed_prepare_reference(self, ref_digest, arg_info, target, timing, inputs=()):
        """Run the reference once on the inputs of ``inputs`` (a recipe, ``()``: random) and
        ``timing``'s seed (a ``TimingOptions`` as JSON), within its ``reference_limit_s``;
        ``(ok, message)``."""
        return self._server.prepare_reference(
            _digest(ref_digest, "ref_digest"), check_arg_info(arg_info), plain(target, "target", str, 200),
            check_timing(timing), check_inputs(inputs))

    @remote
    def exposed_measure(self, lib_digest, ref_digest, arg_info, target, timing, inputs=()):
        """Check and time a library as ``timing`` (a ``TimingOptions`` as JSON) says, on the
        inputs of ``inputs`` and its seed; ``(costs, error_no, error_msg)``. ``ref_digest``
        empty: no correctness check."""
        ref = plain(ref_digest, "ref_digest", str, 64)
        return self._server.measure(_digest(lib_digest, "lib_digest"), _digest(ref, "ref_digest") if ref else "",
                                    check_arg_info(arg_info), plain(target, "target", str, 200),
                                    check_timing(timing), check_inputs(inputs))


class DeviceServer:
    """A device server for one device ``key``, served from background threads of this process.

    ``tracker``: ``(host, port)`` to register with (``None``: serve direct connections only);
    ``secret``: the shared secret (of the tracker too); ``advertise_host``: the address clients
    should use (default: ``host``, or what the tracker sees when ``host`` is ``0.0.0.0``);
    ``max_upload_bytes`` per library, ``max_store_bytes`` in all; ``max_timeout`` caps the
    seconds a client's timing options may give one candidate (or the reference); ``warm_up``
    starts the measuring process at once (rather than on the first candidate);
    ``max_memory_mb`` caps the measuring process's address space (as
    ``LocalRunner(max_memory_mb=)``).
    """

    def __init__(self, key: str, host: str = "127.0.0.1", port: int = 0, secret: bytes | None = None,
                 tracker: tuple | None = None, advertise_host: str | None = None,
                 heartbeat_interval: float = 2.0, max_upload_bytes: int = 64 << 20,
                 max_store_bytes: int = 512 << 20, max_timeout: float = 600.0,
                 ssl_context=None, tracker_ssl_context=None, store_root: str | None = None,
                 warm_up: bool = True, max_memory_mb: int | None = None):
        if secret is None:
            if not is_loopback(host):
                raise ValueError(f"refusing to serve on {host!r} (not loopback) without a shared secret")
            secret = generate_secret()
        self.key = key
        self.secret = check_secret(secret)
        self.tracker = tracker
        self.heartbeat_interval = heartbeat_interval
        self.max_upload_bytes = max_upload_bytes
        self.max_timeout = max_timeout
        self.tracker_ssl_context = tracker_ssl_context
        self.store = LibraryStore(max_store_bytes, store_root)
        self._rpc = RpcServer(rpyc.utils.helpers.classpartial(DeviceServerService, self), host, port,
                              self.secret, ssl_context, name="server")
        self.host, self.port = host, self._rpc.port
        self.advertise_host = advertise_host or ("" if host in ("0.0.0.0", "::", "") else host)
        limit = int(max_memory_mb) << 20 if max_memory_mb else None
        self._pool = WorkerPool(1, initializer=limit_memory, initargs=(limit,))
        self._measure_lock = threading.Lock()
        self._references: dict = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.registered = threading.Event()
        self.server_id: int | None = None
        self._warm_up_on_start = warm_up

    # --- life cycle

    def start(self) -> "DeviceServer":
        self._rpc.start()
        if self._warm_up_on_start:
            self._spawn(self._warm_up, "warm-up")
        if self.tracker is not None:
            self._spawn(self._register_loop, "register")
        return self

    def _spawn(self, fn, name):
        t = threading.Thread(target=fn, name=f"tilecraft-server-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def _warm_up(self):
        with self._measure_lock:
            self._pool.map(child.warm_up, [()], timeout=120)

    def _register_loop(self):
        backoff = 0.2
        while not self._stop.is_set():
            conn = None
            try:
                conn = connect(self.tracker[0], self.tracker[1], self.secret, ssl_context=self.tracker_ssl_context)
                (sid,) = conn.root.register(self.key, self.advertise_host, self.port)
                self.server_id = sid
                self.registered.set()
                backoff = 0.2
                _log.info("registered with the tracker %s:%s as server %s", *self.tracker, sid)
                while not self._stop.wait(self.heartbeat_interval):
                    beat = rpyc.async_(conn.root.heartbeat)(sid)
                    beat.set_expiry(max(5.0, 3 * self.heartbeat_interval))
                    if not beat.value:
                        _log.warning("the tracker dropped this server; registering again")
                        break
            except Exception as err:  # noqa: BLE001 -- the tracker may be down: retry
                _log.warning("tracker %s:%s: %s: %s", *self.tracker, type(err).__name__, err)
            finally:
                self.registered.clear()
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass
            self._stop.wait(backoff)
            backoff = min(backoff * 2, 5.0)

    def serve_forever(self):
        self.start()
        try:
            while not self._stop.wait(1.0):
                pass
        finally:
            self.close()

    def close(self):
        self._stop.set()
        self._rpc.close()
        for t in self._threads:
            t.join(timeout=5)
        self._pool.close()
        self.store.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # --- the work

    def _limit(self, seconds: float) -> float:
        """A client's timeout as this server grants it: at most ``max_timeout``, at least 0.1 s."""
        return max(min(seconds, self.max_timeout), 0.1)

    def prepare_reference(self, ref_digest: str, arg_info: tuple, target: str, timing: TimingOptions,
                          inputs: tuple = ()):
        path = self.store.get(ref_digest)
        if path is None:
            return (False, "the reference library was not uploaded")
        cache_key = (ref_digest, arg_info, target, timing.seed, inputs)
        done = self._references.get(cache_key)
        if done is not None and os.path.exists(done):
            return (True, "")
        with self._measure_lock:
            out = self._pool.map(child.prepare_reference_outputs, [(path, arg_info, timing.seed, target, inputs)],
                                 timeout=self._limit(timing.reference_limit_s))[0]
        if out.status != "ok":
            return (False, f"running the reference failed: {out.status} {self._for_client(out)}")
        self._references[cache_key] = out.value
        return (True, "")

    def measure(self, lib_digest: str, ref_digest: str, arg_info: tuple, target: str, timing: TimingOptions,
                inputs: tuple = ()):
        path = self.store.get(lib_digest)
        if path is None:
            return ((), int(MeasureErrorNo.RUNTIME_DEVICE), "the library was not uploaded")
        ref_outputs = None
        if ref_digest and timing.check_correctness:
            ref_outputs = self._references.get((ref_digest, arg_info, target, timing.seed, inputs))
            if ref_outputs is None or not os.path.exists(ref_outputs):
                return ((), int(MeasureErrorNo.RUNTIME_DEVICE), "the reference was not prepared")
        timeout = self._limit(timing.timeout)
        with self._measure_lock:
            out = self._pool.map(child.run_library, [(path, arg_info, target, timing, ref_outputs, inputs)],
                                 timeout=timeout)[0]
        if out.status == "ok":
            costs, err, msg = out.value
            return (tuple(float(c) for c in costs), int(err), str(msg))
        if out.status == "timeout":
            return ((), int(MeasureErrorNo.RUN_TIMEOUT), f"run took more than {timeout:g} s and was killed")
        if out.status == "died":
            return ((), int(MeasureErrorNo.RUNTIME_DEVICE), f"the run process died ({signal_name(out.value)})")
        return ((), int(MeasureErrorNo.RUNTIME_DEVICE), self._for_client(out))

    def _for_client(self, out) -> str:
        """A worker's failure as the client may see it: the exception's own lines (what went
        wrong), without the traceback and with this server's folders left out; the whole
        traceback goes to the log."""
        if out.status == "died":
            return signal_name(out.value)
        text = str(out.value)
        if out.status == "error":
            _log.warning("a measurement failed here:\n%s", text)
            lines = text.rstrip().splitlines()
            tail = []
            for line in reversed(lines):
                if line.startswith((" ", "Traceback ")) or not line:
                    break
                tail.append(line)
            text = "\n".join(reversed(tail)) or "the worker failed"
        return text.replace(self.store.root + os.sep, "")[-2000:]
