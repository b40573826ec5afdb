"""Time contestants (tilecraft and its references) each in its own process, in turns.

Timing PyTorch or numpy in the same process as tilecraft understates whichever runs second:
their thread pools (OpenBLAS's, OpenMP's) keep spinning for a while after each call and take the
cores the next contestant needs (on 2 cores an idle numpy process's spinning threads halved the
tuned GEMM's speed). Here every contestant lives in a worker process of its own, with the same
thread count; the parent asks the workers in turns (a pause before each turn, the order rotated
every round) to time a block of calls, and reports the median of the rounds.

    from process_timing import Contestant, time_apart
    times = time_apart({"tilecraft": Contestant("bench/cpu_gemm.py", "setup_hand", {"n": 1024}),
                        "numpy": Contestant("bench/cpu_gemm.py", "setup_numpy", {"n": 1024})},
                       threads=2, rounds=7)
    times["numpy"].median        # seconds per call

A contestant is a function in a Python file, called in the worker with its keyword arguments; it
builds its inputs (from a seed, so every worker has the same data), checks its result if it wants
to, and returns the zero-argument callable to time, or ``(callable, info)`` where ``info`` is a
string the parent gets back (say, which tuned config it built). Worker environments: the thread
variables (``TILECRAFT_NUM_THREADS``, ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
``MKL_NUM_THREADS``) set to ``threads``, ``OPENBLAS_THREAD_TIMEOUT=4`` unless set (OpenBLAS's
idle threads sleep at once, as in the tuner's verdict), and the same OpenMP wait policy for every
worker: the parent's (``OMP_WAIT_POLICY`` / ``GOMP_SPINCOUNT``; once tilecraft is imported in the
parent, the user's choice or tilecraft's default, ``PASSIVE``). PyTorch's libgomp threads with
their default (spinning) policy ran its quantized Linear 2-3x slower on a shared 2-core machine.
"""
from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
THREAD_VARIABLES = ("TILECRAFT_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class Contestant:
    """``function`` of the Python file ``path`` called with ``kwargs`` in a worker process; it
    returns the callable to time (or ``(callable, info)``)."""
    path: str
    function: str
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Timing:
    """A contestant's seconds per call in each round, their median, its worker's pid and info."""
    rounds: tuple
    median: float
    pid: int
    info: str


def worker_env(threads: int, environ=None) -> dict:
    """The environment of a worker process with ``threads`` threads.

    >>> worker_env(2, {"OMP_WAIT_POLICY": "PASSIVE"})["OPENBLAS_NUM_THREADS"]
    '2'

    Everything else is the parent's (``environ``, default ``os.environ``), the wait policy included.
    """
    env = dict(os.environ if environ is None else environ)
    env.update({v: str(threads) for v in THREAD_VARIABLES})
    env.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    return env


def _load(path: str):
    spec = importlib.util.spec_from_file_location(f"_contestant_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module               # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _worker(path: str, function: str, kwargs_json: str, seconds: float) -> None:
    """The worker's loop: set up, answer ``ready``, then time a block of calls per stdin line."""
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)                   # whatever the contestant prints goes to stderr, not the protocol
    sys.stdout = sys.stderr
    try:
        made = getattr(_load(path), function)(**json.loads(kwargs_json))
    except Exception as e:                        # noqa: BLE001 - reported to the parent
        reply.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
        reply.flush()
        return
    fn, info = made if isinstance(made, tuple) else (made, "")
    fn()
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    number = max(1, min(1000, round(seconds / max(first, 1e-9))))
    reply.write(json.dumps({"ready": first, "number": number, "pid": os.getpid(), "info": info}) + "\n")
    reply.flush()
    for line in sys.stdin:
        if line.strip() != "go":
            break
        fn()                                       # one untimed call: caches and pool awake
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        reply.write(json.dumps({"seconds": (time.perf_counter() - t0) / number}) + "\n")
        reply.flush()


class _Worker:
    def __init__(self, name: str, c: Contestant, env: dict, seconds: float):
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", os.path.abspath(c.path), c.function,
             json.dumps(c.kwargs), str(seconds)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.ready = self.read()

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise RuntimeError(f"contestant {self.name!r}: its worker process exited "
                               f"(status {self.proc.returncode}) before answering; see its stderr above")
        msg = json.loads(line)
        if "error" in msg:
            self.close()
            raise RuntimeError(f"contestant {self.name!r} failed in its worker: {msg['error']}")
        return msg

    def time_once(self) -> float:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self.read()["seconds"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            self.proc.wait(timeout=60)


def time_apart(contestants: dict, *, threads: int, rounds: int = 7, seconds: float = 0.2,
               pause: float = 0.1, environ=None) -> dict:
    """Seconds per call of each contestant (``{name: Contestant}``), each timed in its own worker
    process with ``threads`` threads: ``rounds`` rounds in turns, each turn a block of about
    ``seconds`` of calls after ``pause`` seconds of quiet and one untimed call. Returns
    ``{name: Timing}``; a contestant that raises in its worker raises ``RuntimeError`` here with
    its name and message.

    >>> time_apart({"sleep": Contestant(__file__, "sleeper", {"s": 0.01})}, threads=1, rounds=3)["sleep"].median
    """
    env = worker_env(threads, environ)
    workers = []
    try:
        for name, c in contestants.items():      # one at a time: their set-ups do not overlap
            workers.append(_Worker(name, c, env, seconds))
        times = {w.name: [] for w in workers}
        for r in range(rounds):
            for w in workers[r % len(workers):] + workers[:r % len(workers)]:
                time.sleep(pause)
                times[w.name].append(w.time_once())
    finally:
        for w in workers:
            w.close()
    return {w.name: Timing(tuple(times[w.name]), statistics.median(times[w.name]), w.ready["pid"],
                           w.ready["info"]) for w in workers}


def sleeper(s: float):
    """A contestant for tests and the docstring: sleeps ``s`` seconds per call."""
    return lambda: time.sleep(s), f"sleeps {s} s"


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--worker":
        _worker(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    else:
        sys.exit(f"usage: {sys.argv[0]} --worker FILE FUNCTION KWARGS_JSON SECONDS (started by time_apart)")
