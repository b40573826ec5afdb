"""The CPU thread pool: OpenMP's (libgomp), driven by generated code through ``GOMP_parallel``.

Generated modules that contain parallel loops read their team size from their own global
``tilecraft_num_threads`` (0 means libgomp's default). This file keeps every live module's copy
equal to :func:`get_num_threads`, which is read once from ``TILECRAFT_NUM_THREADS`` (default: the
cores this process may run on) and changed with :func:`set_num_threads`.

How idle pool threads wait is libgomp's *wait policy*, read from the environment once, when
libgomp is loaded. Its default spins ~300,000 iterations after every parallel loop before
sleeping: on a machine shared with other work those spinning threads take the cores the others
(and this process's own next call) need. When this module is imported, and unless the user set
``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``, it sets :data:`DEFAULT_WAIT_POLICY` in ``os.environ``
(so child processes inherit it); ``bench/thread_policy.py`` measured the choice.
:func:`wait_policy` says what is in effect.

>>> set_num_threads(2); get_num_threads()
2
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import weakref

_LIBGOMP_CANDIDATES = ("libgomp.so.1", "/lib/x86_64-linux-gnu/libgomp.so.1",
                       "/usr/lib/x86_64-linux-gnu/libgomp.so.1")
_lock = threading.Lock()
_libgomp_path: str | None = None
_cells: "weakref.WeakKeyDictionary[object, int]" = weakref.WeakKeyDictionary()


def _default_threads() -> int:
    env = os.environ.get("TILECRAFT_NUM_THREADS", "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"TILECRAFT_NUM_THREADS must be a positive integer, got {env!r}") from None
        if n < 1:
            raise ValueError(f"TILECRAFT_NUM_THREADS must be a positive integer, got {env!r}")
        return n
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


_num_threads = _default_threads()

# --- libgomp's wait policy -----------------------------------------------------------------
WAIT_POLICY_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
DEFAULT_WAIT_POLICY = {"OMP_WAIT_POLICY": "PASSIVE"}


def _libgomp_loaded() -> bool:
    try:
        ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)
    except (OSError, AttributeError):
        return False
    return True


def _set_default_wait_policy() -> str:
    """Put DEFAULT_WAIT_POLICY into os.environ unless the user chose a policy; say who decided."""
    if any(v in os.environ for v in WAIT_POLICY_VARIABLES):
        return "user"
    loaded_before = _libgomp_loaded()
    os.environ.update(DEFAULT_WAIT_POLICY)
    # libgomp already read its environment (another library loaded it first): only children see ours
    return "libgomp (loaded before tilecraft)" if loaded_before else "tilecraft"


_wait_policy_source = _set_default_wait_policy()


def wait_policy() -> dict:
    """The wait-policy variables in this process's environment and who chose them: ``"user"``,
    ``"tilecraft"`` (its default), or ``"libgomp (loaded before tilecraft)"`` when another library
    loaded libgomp before tilecraft was imported (libgomp then uses its own default here).

    >>> wait_policy()["source"] in ("user", "tilecraft", "libgomp (loaded before tilecraft)")
    True
    """
    return {"source": _wait_policy_source,
            **{v: os.environ[v] for v in WAIT_POLICY_VARIABLES if v in os.environ}}

# libgomp is not fork-safe: a child forked after its parent ran a parallel region hangs in its
# first parallel region with more than one thread. Such children run parallel loops on one thread.
_parallel_used = False
_forked_after_use = False
_FORK_MESSAGE = ("this process was forked after its parent ran parallel loops; OpenMP (libgomp) "
                 "cannot run more than one thread here. Start worker processes with "
                 "multiprocessing's 'spawn' or 'forkserver' method instead of 'fork'.")


def mark_parallel_used() -> None:
    """Called when a function with parallel loops runs (so forked children know)."""
    global _parallel_used
    _parallel_used = True


def _after_fork_in_child() -> None:
    global _num_threads, _forked_after_use
    if not _parallel_used:
        return
    _forked_after_use = True
    _num_threads = 1
    for addr in list(_cells.values()):
        ctypes.c_int32.from_address(addr).value = 1
    import warnings
    warnings.warn("parallel loops run on one thread in this process: " + _FORK_MESSAGE, RuntimeWarning)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def get_num_threads() -> int:
    """How many threads a parallel loop uses."""
    return _num_threads


def set_num_threads(n: int) -> None:
    """Set the team size of parallel loops in every module, loaded or built later."""
    global _num_threads
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"set_num_threads expects a positive int, got {n!r}")
    if n > 1 and _forked_after_use:
        raise RuntimeError(_FORK_MESSAGE)
    with _lock:
        _num_threads = n
        for owner, addr in list(_cells.items()):
            ctypes.c_int32.from_address(addr).value = n


def register_thread_count_cell(owner, address: int) -> None:
    """Keep the int32 at ``address`` (valid while ``owner`` lives) equal to the thread count."""
    with _lock:
        ctypes.c_int32.from_address(address).value = _num_threads
        _cells[owner] = address


def libgomp_path() -> str:
    """Load libgomp into the process with RTLD_GLOBAL (so JIT-ed code resolves GOMP_* symbols)."""
    global _libgomp_path
    with _lock:
        if _libgomp_path is None:
            errors = []
            names = list(_LIBGOMP_CANDIDATES)
            found = ctypes.util.find_library("gomp")
            if found:
                names.insert(0, found)
            for name in names:
                try:
                    ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
                except OSError as e:
                    errors.append(str(e))
                    continue
                _libgomp_path = name
                break
            else:
                raise RuntimeError("parallel loops need the OpenMP runtime libgomp.so.1, which could "
                                   "not be loaded: " + "; ".join(errors))
    return _libgomp_path
