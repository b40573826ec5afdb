"""Shared machinery for the device-pool tests: small real kernels, and pool processes.

Every process a test starts runs in its own session and is killed with its group at the end
(``RpcProcesses``); every address is 127.0.0.1 with a port the OS picks.
"""
from __future__ import annotations

import os
import pathlib
import select
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def build_kernels(folder: pathlib.Path, n: int = 256) -> SimpleNamespace:
    """Exported libraries of ``C = A + B`` (naive reference, split+vectorized candidate), a
    wrong one (``A - B``) and one that never finishes; their ``arg_info``."""
    import tilecraft
    from tilecraft import te
    from tilecraft.autotune.local import tensor_arg_info

    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    out = SimpleNamespace(arg_info=tensor_arg_info([A, B, C]))

    def export(s, args, name):
        path = folder / f"{name}.so"
        tilecraft.build(s, args, target="llvm", name="default_function").export_library(str(path))
        return str(path)

    out.reference = export(te.create_schedule(C.op), [A, B, C], "reference")
    s = te.create_schedule(C.op)
    _, xi = s[C].split(C.op.axis[0], 8)
    s[C].vectorize(xi)
    out.good = export(s, [A, B, C], "good")
    W = te.compute((n,), lambda i: A[i] - B[i], name="C")
    out.wrong = export(te.create_schedule(W.op), [A, B, W], "wrong")
    k = te.reduce_axis((0, (1 << 31) - 1), name="k")
    H = te.compute((n,), lambda i: te.sum(A[(i + k) % n] * B[i], axis=k), name="C")
    out.hang = export(te.create_schedule(H.op), [A, B, H], "hang")
    return out


@pytest.fixture(scope="session")
def kernels(tmp_path_factory):
    return build_kernels(tmp_path_factory.mktemp("rpc-kernels"))


def measure_inputs(kernels, names, reference=True):
    """``(inputs, build_results)`` for the named kernels, ready for ``runner.run``."""
    from tilecraft.autotune import BuildResult, MeasureInput

    task = SimpleNamespace(target="llvm")
    inputs = [MeasureInput("llvm", task, None) for _ in names]
    builds = [BuildResult(getattr(kernels, n), kernels.arg_info, reference=kernels.reference if reference else None)
              for n in names]
    return task, inputs, builds


class RpcProcesses:
    """Start ``python -m tilecraft.rpc ...`` processes; learn their ports; kill them all at the end."""

    def __init__(self, folder: pathlib.Path, secret: bytes):
        self.folder = folder
        self.key_file = folder / "secret"
        self.key_file.write_bytes(secret)
        os.chmod(self.key_file, 0o600)
        self.procs: list[subprocess.Popen] = []

    def start(self, *args, wait: bool = True):
        """Start one; with ``wait``, return ``(proc, port)`` once it printed its address."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        env.pop("TILECRAFT_RPC_KEY", None)
        log = open(self.folder / f"proc{len(self.procs)}.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "tilecraft.rpc", *args, "--key-file", str(self.key_file)],
                                stdout=subprocess.PIPE, stderr=log, env=env, cwd=ROOT, start_new_session=True)
        log.close()
        self.procs.append(proc)
        return (proc, self.port_of(proc)) if wait else proc

    def port_of(self, proc, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                raise RuntimeError(f"the process did not start: {self.logs()}")
            ready, _, _ = select.select([proc.stdout], [], [], left)
            if ready:
                line += os.read(proc.stdout.fileno(), 1)
        return int(line.decode().rsplit(":", 1)[1])

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(self.folder.glob("proc*.log")))

    def close(self):
        for proc in self.procs:
            # the whole group: a server's measuring worker may outlive it
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
            proc.wait(timeout=10)
            proc.stdout.close()


def wait_until(predicate, timeout: float, what: str, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
