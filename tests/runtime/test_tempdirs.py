"""Temporary folders of killed runs are removed at the next start: a tuner's (LocalBuilder), a
device server's library store, an export's. Folders of live processes, of other PID namespaces
and with other names stay."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tilecraft.runtime import tempdirs

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def start_then_kill(script: str) -> str:
    """Run ``script`` (which prints a folder it made, then waits) in a new interpreter, kill it
    with SIGKILL, and return the folder it left behind."""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=REPO))
    try:
        line = proc.stdout.readline().strip()
        assert line, proc.stderr.read()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert os.path.isdir(line), line
    return line


WAIT = "import sys, time; print({expr}, flush=True); time.sleep(600)"


@pytest.mark.parametrize("prefix, make", [
    ("tilecraft-tune-", textwrap.dedent("""
        import sys, time
        sys.path.insert(0, {tests!r})
        import tilecraft.autotune as autotune, autotune_real_templates
        b = autotune.LocalBuilder(n_parallel=1, tmp_dir={root!r})
        b.set_task(autotune.task.create("test/real_matmul", args=(8,), target="llvm"))
        open(b.tmp_dir + "/cand1.so", "wb").write(b"x")
        print(b.tmp_dir, flush=True); time.sleep(600)""")),
    ("tilecraft-rpc-", textwrap.dedent("""
        import time
        from tilecraft.rpc.server import LibraryStore
        s = LibraryStore(1 << 20, root={root!r}); s.put(b"library")
        print(s.root, flush=True); time.sleep(600)""")),
])
def test_a_killed_runs_folder_goes_when_the_next_run_starts(tmp_path, prefix, make):
    root = tmp_path / "tmp"
    root.mkdir()
    left = start_then_kill(make.format(root=str(root), tests=os.path.join(REPO, "tests", "autotune")))
    assert os.path.basename(left).startswith(prefix) and os.listdir(left)
    tempdirs._cleaned.discard((prefix, str(root)))          # as in a fresh process
    if prefix == "tilecraft-tune-":
        import tilecraft.autotune as autotune
        sys.path.insert(0, os.path.join(REPO, "tests", "autotune"))
        import autotune_real_templates  # noqa: F401
        b = autotune.LocalBuilder(n_parallel=1, tmp_dir=str(root))
        b.set_task(autotune.task.create("test/real_matmul", args=(8,), target="llvm"))
        mine = b.tmp_dir
        b.close()
    else:
        from tilecraft.rpc.server import LibraryStore
        store = LibraryStore(1 << 20, root=str(root))
        mine = store.root
        store.close()
    assert not os.path.exists(left)
    assert os.path.basename(mine).startswith(prefix)


def test_only_stale_folders_of_this_namespace_and_user_are_removed(tmp_path):
    prefix = "tilecraft-test-"
    ns = tempdirs._pid_namespace()
    live = tempdirs.owned_temp_dir(prefix, str(tmp_path))                       # this process
    dead = start_then_kill(WAIT.format(expr=f"__import__('tilecraft.runtime.tempdirs').runtime.tempdirs"
                                            f".owned_temp_dir({prefix!r}, {str(tmp_path)!r})"))
    me = os.getpid()
    reused = tmp_path / f"{prefix}{ns}-{me}-1-abc"          # this PID, another start: a dead owner
    other_ns = tmp_path / f"{prefix}1-{99999999}-1-abc"     # another namespace: not ours to judge
    foreign = tmp_path / f"{prefix}made-by-someone-else"
    plain_file = tmp_path / f"{prefix}{ns}-99999999-1-file"
    for d in (reused, other_ns, foreign):
        d.mkdir()
    plain_file.write_text("not a folder")
    removed = tempdirs.remove_stale_temp_dirs(prefix, str(tmp_path))
    assert sorted(removed) == sorted([dead, str(reused)])
    assert os.path.isdir(live) and other_ns.is_dir() and foreign.is_dir() and plain_file.exists()


def test_an_export_cleans_a_killed_exports_folder(tmp_path):
    """export_library's scratch folder lives in the system temporary folder; point it here."""
    import tempfile
    from tilecraft.codegen.llvm import build_llvm
    from tilecraft.ir import Var
    sys.path.insert(0, os.path.join(REPO, "tests", "codegen"))
    from llvm_ir_helpers import buf, func, ld, loop, st

    left = start_then_kill(WAIT.format(expr=f"__import__('tilecraft.runtime.tempdirs').runtime.tempdirs"
                                            f".owned_temp_dir('tilecraft-export-', {str(tmp_path)!r})"))
    n, i = Var("n"), Var("i")
    A = buf("A", (n,))
    mod = build_llvm(func("inc", (A, n), loop(i, n, st(A, i, ld(A, i) + 1.0))))
    old = tempfile.tempdir
    tempfile.tempdir = str(tmp_path)
    tempdirs._cleaned.discard(("tilecraft-export-", str(tmp_path)))
    try:
        mod.export_library(str(tmp_path / "libinc.so"))
    finally:
        tempfile.tempdir = old
    assert not os.path.exists(left)
    assert sorted(os.listdir(tmp_path)) == ["inc.h", "libinc.so"]
