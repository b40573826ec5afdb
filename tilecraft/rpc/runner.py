"""RPCRunner: the autotune Runner that measures candidates on device servers from a tracker.

For each candidate, a worker thread leases a server of the device key from the tracker,
uploads the candidate's library (and the reference's, once per server), asks the server to
check and time it, and releases the lease. A server that refuses the connection, drops it or
does not answer within ``timeout`` plus slack is reported to the tracker (which drops it) and
the candidate is tried on another server, at most ``max_retries`` more times; then the result
is ``RUN_TIMEOUT`` (the server hung) or ``RUNTIME_DEVICE`` (it died).

How each candidate is timed is a ``TimingOptions`` (sent to the server as JSON, validated there
too); how the runner deals with the pool is a :class:`PoolOptions`. Both may be given by name,
TVM's way.

Failures of the pool itself are never recorded as the candidate's: a tracker that cannot be
reached (restarting, say) is tried again with growing pauses (0.2 s doubling to 5 s) for up to
``tracker_retry_s`` seconds, and a pool that stays unusable (the tracker still away, no server
of the key free within ``request_timeout``, a wrong secret) stops tuning with
:class:`PoolUnavailableError` instead of filling the log with errors. A measurement that finished
is kept even if the tracker went away meanwhile.

    runner = RPCRunner("llvm:znver3", "127.0.0.1", 9190, secret=load_secret("SECRET"),
                       number=5, repeat=3, timeout=10)
    # the same: RPCRunner(..., timing=TimingOptions(number=5, repeat=3, timeout=10))
    option = autotune.measure_option(builder=autotune.LocalBuilder(), runner=runner)
"""
from __future__ import annotations

import hashlib
import ssl
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Sequence

import rpyc
from rpyc.core.async_ import AsyncResultTimeout

from ..autotune.inputs import input_recipe
from ..autotune.measure import (BuildResult, MeasureErrorNo, MeasureInput, MeasureResult, TimingFront,
                                TimingOptions, check_options, option, resolve_timing, split_options)
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


@dataclass(frozen=True)
class PoolOptions:
    """How an ``RPCRunner`` deals with the pool (validated when made, as ``TimingOptions``).

    ``max_retries``: other servers a candidate is tried on after its server failed; ``slack``:
    seconds beyond the candidate's timeout before a silent server counts as hung (also the limit
    to connect and upload); ``request_timeout``: seconds to wait for a free server of the key;
    ``tracker_retry_s``: seconds to keep trying an unreachable tracker before
    :class:`PoolUnavailableError`.

    >>> PoolOptions(max_retries=0).slack
    10.0
    """

    max_retries: int = option(2, int, 0, 100)
    slack: float = option(10.0, float, 0, 3600, low_open=True, unit="seconds")
    request_timeout: float = option(120.0, float, 0, 86_400, low_open=True, unit="seconds")
    tracker_retry_s: float = option(120.0, float, 0, 86_400, unit="seconds")

    def __post_init__(self):
        check_options(self, "pool option")

    def replace(self, **changes) -> "PoolOptions":
        """A copy with ``changes`` (validated)."""
        return replace(self, **changes)


class RPCRunner(TimingFront):
    """Measure on remote (or local) device servers through a tracker.

    ``key``: the device key servers registered with; ``host``/``port``: the tracker;
    ``secret``: the shared secret (default: ``load_secret()`` — ``$TILECRAFT_RPC_KEY`` or the
    per-user key file); ``timing``: a ``TimingOptions`` (as ``LocalRunner``'s; the server
    grants at most its ``max_timeout``); ``pool``: a :class:`PoolOptions`; ``n_parallel``:
    candidates in flight (default: the servers of ``key`` at ``set_task``); ``ssl_context``: for
    a pool that speaks TLS. Any option of either record may also be given by name
    (``RPCRunner(key, host, port, number=5, timeout=10, max_retries=0)``); timing options read
    back as attributes (``runner.number``).

    >>> runner = RPCRunner("llvm:znver3", "127.0.0.1", 9190, number=5, request_timeout=30)
    >>> runner.timing.number, runner.pool.request_timeout
    (5, 30.0)
    """

    def __init__(self, key: str, host: str = "127.0.0.1", port: int = 9190, secret: bytes | None = None,
                 timing: TimingOptions | None = None, pool: PoolOptions | None = None, *,
                 n_parallel: int | None = None, ssl_context=None, **options):
        timing_named, pool_named = split_options("RPCRunner", options, TimingOptions, PoolOptions)
        if pool is not None and not isinstance(pool, PoolOptions):
            raise TypeError(f"RPCRunner(pool=...) takes a PoolOptions, got {type(pool).__name__} {pool!r}")
        self.timing = resolve_timing("RPCRunner", timing, timing_named)
        pool = pool if pool is not None else PoolOptions()
        self.pool = pool.replace(**pool_named) if pool_named else pool
        self.key = key
        self.host, self.port = host, port
        self.secret = check_secret(secret) if secret is not None else load_secret(host=host)
        self.ssl_context = ssl_context
        self._n_parallel = n_parallel
        self.n_parallel = n_parallel or 1
        self.task = None
        self._task_seed: int | None = None      # drawn by set_task when timing.seed is None
        self._warned_no_reference = False

    def set_task(self, task):
        self.task = task
        self._task_seed = self.timing.seeded().seed
        if self._n_parallel is None:
            outage = _Backoff(self.pool.tracker_retry_s)
            while True:
                with self._reach_tracker(outage) as tracker:
                    try:
                        total = tracker.status().keys().get(self.key, (0, 0))[1]
                        break
                    except _NETWORK_ERRORS + (AsyncResultTimeout,) as err:
                        outage.wait_or_give_up(f"tracker {self.host}:{self.port}", err)
            self.n_parallel = max(1, total)

    def _task_timing(self) -> TimingOptions:
        """``timing`` with the task's seed (``timing`` may have been replaced since ``set_task``)."""
        if self.timing.seed is not None:
            return self.timing
        if self._task_seed is None:            # run() without set_task: draw one now, once
            self._task_seed = self.timing.seeded().seed
        return self.timing.replace(seed=self._task_seed)

    def _tracker(self) -> TrackerClient:
        return TrackerClient(self.host, self.port, self.secret, ssl_context=self.ssl_context)

    def _reach_tracker(self, outage: "_Backoff") -> TrackerClient:
        """A connection to the tracker, tried again with ``outage``'s pauses while it cannot be
        reached; :class:`PoolUnavailableError` when it refuses the secret or stays away."""
        while True:
            try:
                return self._tracker()
            except AuthenticationError as err:
                raise PoolUnavailableError(f"tracker {self.host}:{self.port} refused the shared secret "
                                           f"({err}): check --key-file or ${ENV_SECRET}") from None
            except _NETWORK_ERRORS + (AsyncResultTimeout,) as err:
                outage.wait_or_give_up(f"tracker {self.host}:{self.port}", err)

    def run(self, measure_inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult]) -> list[MeasureResult]:
        jobs = list(zip(measure_inputs, build_results))
        timing = self._task_timing()
        wire = timing.to_json()           # once per batch: what every server of it receives
        if self.n_parallel <= 1 or len(jobs) <= 1:
            return [self._measure_one(inp, br, timing, wire) for inp, br in jobs]
        with ThreadPoolExecutor(min(self.n_parallel, len(jobs)), thread_name_prefix="tilecraft-rpc") as ex:
            return list(ex.map(lambda job: self._measure_one(*job, timing, wire), jobs))

    # --- one candidate

    def _measure_one(self, inp: MeasureInput, br: BuildResult, timing: TimingOptions, wire: str) -> MeasureResult:
        t0 = time.perf_counter()
        task = inp.task if inp.task is not None else self.task
        target = str(task.target) if getattr(task, "target", None) is not None else "llvm"
        try:
            library = _read(br.filename)
            reference = _read(br.reference) if timing.check_correctness and br.reference else None
        except OSError as err:
            return MeasureResult((), MeasureErrorNo.RUNTIME_DEVICE, f"cannot read the library: {err}",
                                 time.perf_counter() - t0, time.time())
        if timing.check_correctness and reference is None and not self._warned_no_reference:
            self._warned_no_reference = True
            warnings.warn("no reference library: candidates' outputs are not checked", RuntimeWarning)
        failures = []            # servers that failed this candidate
        outage = _Backoff(self.pool.tracker_retry_s)
        while True:
            with self._reach_tracker(outage) as tracker:
                try:
                    lease = tracker.request(self.key, self.pool.request_timeout)
                except _NETWORK_ERRORS + (AsyncResultTimeout,) as err:
                    outage.wait_or_give_up(f"tracker {self.host}:{self.port}", err)
                    continue
                outage.reset()
                if lease is None:
                    raise PoolUnavailableError(f"no server of {self.key!r} came free within "
                                               f"{self.pool.request_timeout:g} s (tracker {self.host}:{self.port}); "
                                               "`tilecraft rpc status` lists the pool")
                try:
                    costs, err, msg = self._on_server(lease, library, reference, br.arg_info, target, timing,
                                                      wire, alive=lambda: _registered(tracker, lease),
                                                      inputs=input_recipe(task))
                except ServerFailure as failure:
                    failures.append(failure)
                    _quietly(tracker.report_broken, lease)   # a tracker that went away forgot it anyway
                    if len(failures) > self.pool.max_retries:
                        kind = MeasureErrorNo.RUN_TIMEOUT if failure.hung else MeasureErrorNo.RUNTIME_DEVICE
                        return MeasureResult((), kind, "; ".join(str(f) for f in failures),
                                             time.perf_counter() - t0, time.time())
                    continue
                _quietly(tracker.release, lease)             # measured: keep it whatever the tracker does
                return MeasureResult(costs, MeasureErrorNo(err), msg, time.perf_counter() - t0, time.time())

    def _on_server(self, lease: Lease, library: bytes, reference: bytes | None, arg_info, target: str,
                   timing: TimingOptions, wire: str, alive=None, inputs: tuple = ()):
        """Measure on the leased server; ``wire`` is ``timing.to_json()``. ``alive()`` says
        whether the tracker still has the server; it is asked during the long reference run, so
        a server that stops (missed heartbeats) is given up then rather than after
        ``timing.reference_limit_s``. ``inputs``: the task's input recipe (``autotune.inputs``),
        sent as names and numbers for the server to make the same arrays as a local run."""
        where = f"server {lease.server_id} ({lease.host}:{lease.port})"
        arg_info = tuple((tuple(int(d) for d in shape), str(dtype), bool(out)) for shape, dtype, out in arg_info)
        slack = self.pool.slack
        recipe = (inputs,) if inputs else ()     # random inputs: the request of servers before recipes
        try:
            conn = connect(lease.host, lease.port, self.secret, ssl_context=self.ssl_context, timeout=slack)
        except _NETWORK_ERRORS as err:
            raise ServerFailure(f"{where}: cannot connect: {type(err).__name__}: {err}",
                                hung=isinstance(err, TimeoutError)) from None
        healthy, stage = False, f"uploading (limit {slack:g} s)"
        try:
            root = conn.root
            limit = int(_call(root.info, slack)[2])
            for what, data in (("library", library), ("reference library", reference)):
                if data is not None and len(data) > limit:   # the server would close the connection
                    healthy = True
                    return ((), int(MeasureErrorNo.RUNTIME_DEVICE),
                            f"{where}: the {what} is {len(data)} bytes, over the server's upload limit of "
                            f"{limit} (its --max-upload-mb)")
            lib_digest = _upload(root, library, slack)
            ref_digest = ""
            if reference is not None:
                ref_digest = _upload(root, reference, slack)
                stage = f"running the reference (limit {timing.reference_limit_s + slack:g} s)"
                ok, msg = _call(root.prepare_reference, timing.reference_limit_s + slack,
                                ref_digest, arg_info, target, wire, *recipe, alive=alive)
                if not ok:
                    if not self._warned_no_reference:
                        self._warned_no_reference = True
                        warnings.warn(f"{where}: {msg}; outputs are not checked", RuntimeWarning)
                    ref_digest = ""
            stage = f"the measurement: did not answer within {timing.timeout + slack:g} s"
            answer = _call(root.measure, timing.timeout + slack, lib_digest, ref_digest, arg_info, target, wire,
                           *recipe)
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
