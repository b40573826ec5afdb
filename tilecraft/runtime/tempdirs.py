"""Temporary folders that name their owner, and the removal of those whose owner is gone.

A run killed with kill -9 cannot remove its temporary folders (tuning candidates, a device
server's libraries, an export in progress), and before this they piled up in /tmp. A folder made
by :func:`owned_temp_dir` is named ``<prefix><ns>-<pid>-<start>-<random>``: the process that owns
it, told apart from a later process that got the same PID by its start time (``/proc``), within
its PID namespace ``ns`` (a container that shares /tmp has its own PIDs: its folders are never
judged from here). Making the first folder of a prefix in a process removes the folders of that
prefix, in the same parent folder and of the same user, whose owner has exited.

>>> # path = owned_temp_dir("tilecraft-tune-")     # /tmp/tilecraft-tune-4026531836-1234-98765-k3j2
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading

_cleaned: set = set()
_lock = threading.Lock()


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").split("[")[-1].rstrip("]")
    except OSError:
        return "0"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]


def owned_temp_dir(prefix: str, dir: str | None = None) -> str:
    """``tempfile.mkdtemp`` (mode 0700) named after this process; removes the stale folders of
    ``prefix`` in ``dir`` (default: the system's temporary folder) the first time it is called
    for them in this process.

    >>> # owned_temp_dir("tilecraft-export-")
    """
    parent = dir if dir is not None else tempfile.gettempdir()
    key = (prefix, os.path.abspath(parent))
    with _lock:
        first = key not in _cleaned
        _cleaned.add(key)
    if first:
        remove_stale_temp_dirs(prefix, parent)
    pid = os.getpid()
    return tempfile.mkdtemp(prefix=f"{prefix}{_pid_namespace()}-{pid}-{_start_time(pid) or 0}-", dir=parent)


def remove_stale_temp_dirs(prefix: str, dir: str | None = None) -> list:
    """Remove the folders of ``prefix`` in ``dir`` made by :func:`owned_temp_dir` in this PID
    namespace, owned by this user, whose process has exited; return their paths. Folders named
    otherwise (or whose owner cannot be told, without ``/proc``) are left alone."""
    parent = dir if dir is not None else tempfile.gettempdir()
    if not os.path.isdir("/proc/self"):
        return []
    ns, uid, removed = _pid_namespace(), os.getuid(), []
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    for name in names:
        if not name.startswith(prefix):
            continue
        parts = name[len(prefix):].split("-")
        if len(parts) < 4 or parts[0] != ns or not parts[1].isdigit() or not parts[2].isdigit():
            continue
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid != uid or not os.path.isdir(path) or os.path.islink(path):
            continue
        if _start_time(int(parts[1])) == parts[2]:
            continue                           # its owner still runs
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
