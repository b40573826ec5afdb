"""Run the real ``tilecraft`` command in a subprocess, importing this checkout."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))


def tilecraft_command() -> list[str]:
    """The installed console script (what a user types), else ``python -m tilecraft``."""
    exe = shutil.which("tilecraft")
    return [exe] if exe else [sys.executable, "-m", "tilecraft"]


def cli_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, HERE, env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run_tilecraft(*args, cwd, timeout=300, **env) -> subprocess.CompletedProcess:
    return subprocess.run(tilecraft_command() + [str(a) for a in args], cwd=cwd, env=cli_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def _default_sigint():
    # A shell starts background jobs (`cmd &`) with SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: give the child the default so a test can interrupt it as Ctrl-C does.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def popen_tilecraft(*args, cwd, **env) -> subprocess.Popen:
    return subprocess.Popen(tilecraft_command() + [str(a) for a in args], cwd=cwd, env=cli_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The error of a command that must fail with one line on stderr and status 2."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]
