"""A small pool of worker processes where each job has a timeout and a dying worker is survivable.

``concurrent.futures`` cannot kill one hung job, and a segfault breaks its whole pool; the
tuner needs both: a candidate that hangs is killed after its timeout, one that crashes is
reported with the signal that killed it, and the next job gets a fresh worker.

Workers are fresh interpreters (``python -c``, no inherited threads from XGBoost or a CPU runtime
pool), started once and reused. Unlike ``multiprocessing``'s ``spawn``, they do not import the
parent's ``__main__``: a user's script that tunes at top level, without an
``if __name__ == "__main__":`` guard, is not run again in every worker. The functions sent to them
must be importable by name (a task whose template lives in ``__main__`` carries it by value, see
``Task``). Parent and worker talk over a private socket pair; nothing else can reach it.

Workers die with their parent, even in the middle of a job that hangs in compiled code: each
holds the read end of a pipe whose write end only the parent has, and a watchdog thread kills the
worker when that pipe reports end-of-file (the parent exited, however: kill -9, SIGTERM, a crash).
Workers started from the parent's main thread also ask the kernel for SIGKILL when it exits
(``PR_SET_PDEATHSIG``), which needs no Python thread to run; the kernel ties that signal to the
*thread* that started the process, so workers started from other threads rely on the pipe alone.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Callable, Sequence


@dataclass(frozen=True)
class JobOutcome:
    """What became of one job: ``status`` is ``ok`` (``value`` is the result), ``error``
    (``value`` is the traceback text), ``timeout`` or ``died`` (``value`` is the exit code;
    negative: killed by that signal)."""

    status: str
    value: Any
    seconds: float


def signal_name(exitcode) -> str:
    if isinstance(exitcode, str):
        return exitcode
    if exitcode is None:
        return "unknown exit"
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def _worker_main(conn, initializer, initargs):
    # Children ignore Ctrl-C: the parent decides when they stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if initializer is not None:
        initializer(*initargs)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        fn, args = msg
        conn.send(("start", os.getpid()))
        try:
            result = ("ok", fn(*args))
        except BaseException:  # noqa: BLE001 -- the job's failure is data for the tuner
            result = ("error", traceback.format_exc(limit=20))
        try:
            conn.send(result)
        except Exception:  # an unpicklable result
            conn.send(("error", traceback.format_exc(limit=5)))


_BOOT = ("import sys; from tilecraft.autotune.worker_pool import _boot; "
         "_boot(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == '1')")
PR_SET_PDEATHSIG = 1


def _boot(fd: int, alive_fd: int, parent_pid: int, pdeathsig: bool) -> None:
    """A worker's entry point: arrange to die with the parent, take its import path, serve jobs."""
    _die_with_parent(alive_fd, parent_pid, pdeathsig)
    from multiprocessing.connection import Connection
    conn = Connection(fd)
    path, cwd, initializer, initargs = conn.recv()
    sys.path[:] = path
    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    _worker_main(conn, initializer, initargs)


def _die_with_parent(alive_fd: int, parent_pid: int, pdeathsig: bool) -> None:
    if pdeathsig and sys.platform.startswith("linux"):
        import ctypes
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:          # the parent died before we got here
        os._exit(1)
    import threading
    threading.Thread(target=_watch_parent, args=(alive_fd,), name="tilecraft-parent-watch", daemon=True).start()


def _watch_parent(alive_fd: int) -> None:
    """Block until the parent's end of the pipe closes (it never writes), then die at once: the
    main thread may be stuck in a job, and nothing it holds needs cleaning up."""
    while True:
        try:
            if os.read(alive_fd, 1) == b"":
                break
        except InterruptedError:
            continue
        except OSError:
            break
    os.kill(os.getpid(), signal.SIGKILL)


class _Process:
    """The worker's process, with the parts of ``multiprocessing.Process`` the pool uses:
    ``exitcode`` is negative for a signal, ``sentinel`` becomes ready when it exits."""

    def __init__(self, child_fd: int):
        import threading
        alive_r, self.alive_w = os.pipe()      # the parent keeps the write end while the worker lives
        pdeathsig = threading.current_thread() is threading.main_thread()
        try:
            self.popen = subprocess.Popen([sys.executable, "-c", _BOOT, str(child_fd), str(alive_r),
                                           str(os.getpid()), "1" if pdeathsig else "0"],
                                          pass_fds=(child_fd, alive_r), stdin=subprocess.DEVNULL)
        except BaseException:
            os.close(self.alive_w)
            raise
        finally:
            os.close(alive_r)
        try:
            self.sentinel = os.pidfd_open(self.popen.pid)
        except (AttributeError, OSError):       # no pidfd: the socket's EOF tells of a death
            self.sentinel = None

    @property
    def exitcode(self):
        return self.popen.poll()

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()

    def join(self, timeout=None) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        if self.sentinel is not None:
            os.close(self.sentinel)
            self.sentinel = None
        if self.alive_w is not None:
            os.close(self.alive_w)
            self.alive_w = None


class _Worker:
    def __init__(self, initializer, initargs):
        self.conn, child = mp.Pipe()
        try:
            self.proc = _Process(child.fileno())
        finally:
            child.close()
        self.conn.send((list(sys.path), os.getcwd(), initializer, initargs))
        self.job: int | None = None
        self.started: float | None = None  # when the worker began the job (not when it was sent)
        self.sent: float | None = None

    def kill(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5)
        self.proc.close()
        self.conn.close()


class WorkerPool:
    """``n_workers`` persistent worker processes.

    >>> pool = WorkerPool(2)
    >>> [o.value for o in pool.map(pow, [(2, 3), (3, 2)], timeout=5)]
    [8, 9]
    """

    def __init__(self, n_workers: int, initializer: Callable | None = None, initargs: Sequence = (),
                 start_timeout: float = 120.0):
        self.n_workers = max(1, int(n_workers))
        self._initializer = initializer
        self._initargs = tuple(initargs)
        self._start_timeout = start_timeout
        self._workers: list[_Worker] = []

    def _spawn(self) -> _Worker:
        return _Worker(self._initializer, self._initargs)

    def map(self, fn: Callable, args_list: Sequence[tuple], timeout: float) -> list[JobOutcome]:
        """Run ``fn(*args)`` for each ``args``; each job may take ``timeout`` seconds once its
        worker has started it."""
        outcomes: list[JobOutcome | None] = [None] * len(args_list)
        pending = list(range(len(args_list)))[::-1]
        while len(self._workers) < min(self.n_workers, len(args_list)):
            self._workers.append(self._spawn())
        busy: dict[int, _Worker] = {}
        retries = [0] * len(args_list)

        def lost_before_start(w, now) -> bool:
            # A worker that dies or never starts before the job began is not the job's fault:
            # give the job to a fresh worker (once).
            if w.started is None and retries[w.job] < 1:
                retries[w.job] += 1
                pending.append(w.job)
                return True
            return False

        while pending or busy:
            for w in list(self._workers):
                if not pending:
                    break
                if w.job is None:
                    if not w.proc.is_alive():
                        self._replace(w)
                        continue
                    j = pending.pop()
                    w.job, w.sent, w.started = j, time.monotonic(), None
                    try:
                        w.conn.send((fn, args_list[j]))
                    except (BrokenPipeError, OSError):
                        outcomes[j] = JobOutcome("died", w.proc.exitcode, 0.0)
                        self._replace(w)
                        continue
                    busy[id(w)] = w
            if not busy:
                continue
            now = time.monotonic()
            deadlines = []
            for w in busy.values():
                if w.started is not None:
                    deadlines.append(w.started + timeout - now)
                else:
                    deadlines.append(w.sent + self._start_timeout - now)
            ready = wait([w.conn for w in busy.values()]
                         + [w.proc.sentinel for w in busy.values() if w.proc.sentinel is not None],
                         timeout=max(0.0, min(deadlines)))
            now = time.monotonic()
            for w in list(busy.values()):
                if w.conn in ready:
                    try:
                        kind, value = w.conn.recv()
                    except (EOFError, OSError):
                        kind, value = "died", None
                    if kind == "start":
                        w.started = now
                        continue
                    if kind == "died":
                        w.proc.join(timeout=5)
                        if not lost_before_start(w, now):
                            outcomes[w.job] = JobOutcome("died", w.proc.exitcode, now - (w.started or now))
                        del busy[id(w)]
                        self._replace(w)
                        continue
                    outcomes[w.job] = JobOutcome(kind, value, now - (w.started or now))
                    w.job = None
                    del busy[id(w)]
                elif w.proc.sentinel is not None and w.proc.sentinel in ready:
                    w.proc.join(timeout=5)
                    if not lost_before_start(w, now):
                        outcomes[w.job] = JobOutcome("died", w.proc.exitcode, now - (w.started or now))
                    del busy[id(w)]
                    self._replace(w)
                elif w.started is not None and now - w.started > timeout:
                    outcomes[w.job] = JobOutcome("timeout", timeout, now - w.started)
                    del busy[id(w)]
                    self._replace(w)
                elif w.started is None and now - w.sent > self._start_timeout:
                    if not lost_before_start(w, now):
                        outcomes[w.job] = JobOutcome("died", "worker did not start", now - w.sent)
                    del busy[id(w)]
                    self._replace(w)
        return outcomes  # type: ignore[return-value]

    def _replace(self, w: _Worker):
        w.kill()
        i = self._workers.index(w)
        self._workers[i] = self._spawn()

    def close(self):
        for w in self._workers:
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for w in self._workers:
            w.proc.join(timeout=2)
            w.kill()
        self._workers = []

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
