"""RPCRunner: the autotune Runner that measures candidates on device servers from a tracker.

For each candidate, a worker thread leases a server of the device key from the tracker,
uploads the candidate's library (and the reference's, once per server), asks the server to
check and time it, and releases the lease. A server that refuses the connection, drops it or
does not answer within ``timeout`` plus slack is reported to the tracker (which drops it) and
the candidate is tried on another server, at most ``max_retries`` more times; then the result
is ``RUN_TIMEOUT`` (the server hung) or ``RUNTIME_DEVICE`` (it died).

Failures of the pool itself are never recorded as the candidate's: a tracker that cannot be
reached (restarting, say) is tried again with growing pauses (0.2 s doubling to 5 s) for up to
``tracker_retry_s`` seconds, and a pool that stays unusable (the tracker still away, no server
of the key free within ``request_timeout``, a wrong secret) stops tuning with
:class:`PoolUnavailableError` instead of filling the log with errors. A measurement that finished
is kept even if the tracker went away meanwhile.

    runner = RPCRunner("llvm:znver3", "127.0.0.1", 9190, secret=load_secret("SECRET"),
                       number=5, repeat=3, timeout=10)
    option = autotune.measure_option(builder=autotune.LocalBuilder(), runner=runner)
"""
from __future__ import annotations

import hashlib
import ssl
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np
import rpyc
from rpyc.core.async_ import AsyncResultTimeout

from ..autotune.measure import BuildResult, MeasureErrorNo, MeasureInput, MeasureResult
from .protocol import ENV_SECRET, AuthenticationError, abort, check_secret, connect, load_secret
from .tracker import Lease, TrackerClient


class PoolUnavailableError(RuntimeError):
    """The device pool cannot measure anything now (the tracker is unreachable, no server of the
    key came free, or the secret is refused). Tuning stops; the log keeps what was measured, and
    running the same command again resumes."""


class ServerFailure(Exception):
    """The leased server could not be used (connection refused or lost, or no answer in time)."""

    def __init__(self, message: str, hung: bool):
        super().__init__(message)
        self.hung = hung


_NETWORK_ERRORS = (EOFError, OSError, ConnectionError, ssl.SSLError, AuthenticationError)


class RPCRunner:
    """Measure on remote (or local) device servers through a tracker.

    ``key``: the device key servers registered with; ``host``/``port``: the tracker;
    ``secret``: the shared secret (default: ``load_secret()`` — ``$TILECRAFT_RPC_KEY`` or the
    per-user key file); ``number``/``repeat``/``min_repeat_ms``/``enable_cpu_cache_flush``/
    ``check_correctness``/``rtol``/``atol``/``seed``/``max_timing_s`` as ``LocalRunner``; ``timeout``: seconds
    per candidate on the server (then ``RUN_TIMEOUT``); ``n_parallel``: candidates in flight
    (default: the servers of ``key`` at ``set_task``); ``slack``: extra seconds before a silent
    server counts as hung; ``request_timeout``: how long to wait for a free server;
    ``tracker_retry_s``: how long to keep trying an unreachable tracker before
    :class:`PoolUnavailableError`.
    """

    def __init__(self, key: str, host: str = "127.0.0.1", port: int = 9190, secret: bytes | None = None,
                 number: int = 4, repeat: int = 3, min_repeat_ms: float = 0, timeout: float = 10,
                 n_parallel: int | None = None, enable_cpu_cache_flush: bool = False,
                 check_correctness: bool = True, rtol: float = 1e-3, atol: float = 1e-3,
                 seed: int | None = None, max_retries: int = 2, slack: float = 10.0,
                 request_timeout: float = 120.0, reference_timeout: float = 300.0, ssl_context=None,
                 max_timing_s: float | None = None, tracker_retry_s: float = 120.0):
        self.key = key
        self.host, self.port = host, port
        self.secret = check_secret(secret) if secret is not None else load_secret(host=host)
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self.timeout = timeout
        self.enable_cpu_cache_flush = enable_cpu_cache_flush
        self.check_correctness = check_correctness
        self.rtol, self.atol = rtol, atol
        self.max_retries = max(0, int(max_retries))
        self.slack = slack
        self.request_timeout = request_timeout
        self.reference_timeout = reference_timeout
        self.ssl_context = ssl_context
        self.max_timing_s = max_timing_s
        self.tracker_retry_s = tracker_retry_s
        self._n_parallel = n_parallel
        self.n_parallel = n_parallel or 1
        self._seed = seed
        self.seed = seed if seed is not None else 0
        self.task = None
        self._warned_no_reference = False

    def set_task(self, task):
        self.task = task
        self.seed = self._seed if self._seed is not None else int(np.random.SeedSequence().entropy % (2**31))
        if self._n_parallel is None:
            with self._tracker() as t:
                total = t.status().keys().get(self.key, (0, 0))[1]
            self.n_parallel = max(1, total)

    def _tracker(self) -> TrackerClient:
        return TrackerClient(self.host, self.port, self.secret, ssl_context=self.ssl_context)

    def run(self, measure_inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult]) -> list[MeasureResult]:
        jobs = list(zip(measure_inputs, build_results))
        if self.n_parallel <= 1 or len(jobs) <= 1:
            return [self._measure_one(inp, br) for inp, br in jobs]
        with ThreadPoolExecutor(min(self.n_parallel, len(jobs)), thread_name_prefix="tilecraft-rpc") as ex:
            return list(ex.map(lambda job: self._measure_one(*job), jobs))

    # --- one candidate

    def _measure_one(self, inp: MeasureInput, br: BuildResult) -> MeasureResult:
        t0 = time.perf_counter()
        task = inp.task if inp.task is not None else self.task
        target = str(task.target) if getattr(task, "target", None) is not None else "llvm"
        try:
            library = _read(br.filename)
            reference = _read(br.reference) if self.check_correctness and br.reference else None
        except OSError as err:
            return MeasureResult((), MeasureErrorNo.RUNTIME_DEVICE, f"cannot read the library: {err}",
                                 time.perf_counter() - t0, time.time())
        if self.check_correctness and reference is None and not self._warned_no_reference:
            self._warned_no_reference = True
            warnings.warn("no reference library: candidates' outputs are not checked", RuntimeWarning)
        failures = []            # servers that failed this candidate
        outage = _Backoff(self.tracker_retry_s)
        while True:
            try:
                tracker = self._tracker()
            except AuthenticationError as err:
                raise PoolUnavailableError(f"tracker {self.host}:{self.port} refused the shared secret "
                                           f"({err}): check --key-file or ${ENV_SECRET}") from None
            except _NETWORK_ERRORS + (AsyncResultTimeout,) as err:
                outage.wait_or_give_up(f"tracker {self.host}:{self.port}", err)
                continue
            with tracker:
                try:
                    lease = tracker.request(self.key, self.request_timeout)
                except _NETWORK_ERRORS + (AsyncResultTimeout,) as err:
                    outage.wait_or_give_up(f"tracker {self.host}:{self.port}", err)
                    continue
                outage.reset()
                if lease is None:
                    raise PoolUnavailableError(f"no server of {self.key!r} came free within "
                                               f"{self.request_timeout:g} s (tracker {self.host}:{self.port}); "
                                               "`tilecraft rpc status` lists the pool")
                try:
                    costs, err, msg = self._on_server(lease, library, reference, br.arg_info, target,
                                                      alive=lambda: _registered(tracker, lease))
                except ServerFailure as failure:
                    failures.append(failure)
                    _quietly(tracker.report_broken, lease)   # a tracker that went away forgot it anyway
                    if len(failures) > self.max_retries:
                        kind = MeasureErrorNo.RUN_TIMEOUT if failure.hung else MeasureErrorNo.RUNTIME_DEVICE
                        return MeasureResult((), kind, "; ".join(str(f) for f in failures),
                                             time.perf_counter() - t0, time.time())
                    continue
                _quietly(tracker.release, lease)             # measured: keep it whatever the tracker does
                return MeasureResult(costs, MeasureErrorNo(err), msg, time.perf_counter() - t0, time.time())

    def _on_server(self, lease: Lease, library: bytes, reference: bytes | None, arg_info, target: str,
                   alive=None):
        """Measure on the leased server. ``alive()`` says whether the tracker still has it; it is
        asked during the long reference run, so a server that stops (missed heartbeats) is given
        up then rather than after ``reference_timeout``."""
        where = f"server {lease.server_id} ({lease.host}:{lease.port})"
        arg_info = tuple((tuple(int(d) for d in shape), str(dtype), bool(out)) for shape, dtype, out in arg_info)
        try:
            conn = connect(lease.host, lease.port, self.secret, ssl_context=self.ssl_context,
                           timeout=self.slack)
        except _NETWORK_ERRORS as err:
            raise ServerFailure(f"{where}: cannot connect: {type(err).__name__}: {err}",
                                hung=isinstance(err, TimeoutError)) from None
        healthy, stage = False, f"uploading (limit {self.slack:g} s)"
        try:
            root = conn.root
            limit = int(_call(root.info, self.slack)[2])
            for what, data in (("library", library), ("reference library", reference)):
                if data is not None and len(data) > limit:   # the server would close the connection
                    healthy = True
                    return ((), int(MeasureErrorNo.RUNTIME_DEVICE),
                            f"{where}: the {what} is {len(data)} bytes, over the server's upload limit of "
                            f"{limit} (its --max-upload-mb)")
            lib_digest = _upload(root, library, self.slack)
            ref_digest = ""
            if reference is not None:
                ref_digest = _upload(root, reference, self.slack)
                stage = f"running the reference (limit {self.reference_timeout + self.slack:g} s)"
                ok, msg = _call(root.prepare_reference, self.reference_timeout + self.slack,
                                ref_digest, arg_info, target, self.seed, float(self.reference_timeout),
                                alive=alive)
                if not ok:
                    if not self._warned_no_reference:
                        self._warned_no_reference = True
                        warnings.warn(f"{where}: {msg}; outputs are not checked", RuntimeWarning)
                    ref_digest = ""
            stage = f"the measurement: did not answer within {self.timeout + self.slack:g} s"
            answer = _call(root.measure, self.timeout + self.slack, lib_digest, ref_digest, arg_info, target,
                           self.seed, int(self.number), int(self.repeat), float(self.min_repeat_ms),
                           bool(self.enable_cpu_cache_flush), float(self.rtol), float(self.atol),
                           float(self.timeout), float(self.max_timing_s or 0.0))
            healthy = True
            return answer
        except AsyncResultTimeout:
            raise ServerFailure(f"{where} hung during {stage}", hung=True) from None
        except _LeftPool:
            raise ServerFailure(f"{where} left the pool (missed heartbeats) during {stage}", hung=True) from None
        except _NETWORK_ERRORS as err:
            raise ServerFailure(f"{where} failed: {type(err).__name__}: {err}", hung=False) from None
        except Exception as err:  # noqa: BLE001 -- the server refused the request: no retry
            return (), int(MeasureErrorNo.RUNTIME_DEVICE), f"{where} refused the request: {type(err).__name__}: {err}"
        finally:
            if healthy:
                conn.close()
            else:
                abort(conn)

    def close(self):
        pass


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _upload(root, data: bytes, timeout: float) -> str:
    digest = hashlib.sha256(data).hexdigest()
    if not _call(root.has_library, timeout, digest):
        got = _call(root.upload_library, timeout + len(data) / 10e6, data)
        if got != digest:
            raise EOFError(f"the server stored the library as {got!r}, expected {digest}")
    return digest


class _LeftPool(Exception):
    """The tracker dropped the server while a call to it was waiting."""


def _call(method, timeout: float, *args, alive=None, every: float = 2.0):
    """Call ``method`` and wait up to ``timeout`` seconds for its answer; with ``alive``, ask it
    every ``every`` seconds of waiting whether the server is still worth waiting for."""
    call = rpyc.async_(method)(*args)
    if alive is None:
        call.set_expiry(timeout)
        return call.value
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        call.set_expiry(max(0.0, min(every, left)))
        try:
            return call.value
        except AsyncResultTimeout:
            if left <= every:
                raise
            if not alive():
                raise _LeftPool() from None


def _registered(tracker: TrackerClient, lease: Lease) -> bool:
    """Whether the tracker still lists the leased server (True when the tracker cannot say)."""
    try:
        return any(s.server_id == lease.server_id for s in tracker.status().servers)
    except _NETWORK_ERRORS + (AsyncResultTimeout,):
        return True


def _quietly(method, *args):
    """A call to the tracker whose failure changes nothing for the candidate."""
    try:
        method(*args)
    except _NETWORK_ERRORS + (AsyncResultTimeout,):
        pass


class _Backoff:
    """Pauses between tries at an unreachable tracker: 0.2 s doubling to 5 s, for ``budget`` s."""

    def __init__(self, budget: float):
        self.budget = budget
        self.reset()

    def reset(self):
        self.since, self.pause = None, 0.2

    def wait_or_give_up(self, what: str, err: BaseException):
        now = time.monotonic()
        if self.since is None:
            self.since = now
        if now - self.since >= self.budget:
            raise PoolUnavailableError(f"{what} unreachable for {now - self.since:.0f} s "
                                       f"({type(err).__name__}: {err}); stopping here, the log keeps what "
                                       "was measured: run the same command again to resume") from None
        time.sleep(min(self.pause, max(0.0, self.budget - (now - self.since))))
        self.pause = min(self.pause * 2, 5.0)
