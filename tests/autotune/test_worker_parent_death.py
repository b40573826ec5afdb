"""Workers die with their parent: a tuner killed (SIGKILL or SIGTERM) while its runner worker hangs
in a real compiled candidate leaves no process behind (before, the worker went on at 100% CPU
under PID 1). Also for pools whose workers were started from a thread that has since exited."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

HUNG_TUNER = textwrap.dedent("""
    import sys
    import autotune_real_templates  # noqa: F401  (test/real_misbehaving_vadd)
    import tilecraft.autotune as autotune
    from tilecraft.autotune.measure import MeasureInput
    task = autotune.task.create("test/real_misbehaving_vadd", args=(64,), target="llvm")
    space = task.config_space
    cfg = next(space.get(i) for i in range(len(space)) if space.get(i)["behaviour"].val == "hang")
    inp = MeasureInput(task.target, task, cfg)
    builder = autotune.LocalBuilder(n_parallel=1, timeout=120)
    runner = autotune.LocalRunner(timeout=3600, number=1, repeat=1, check_correctness=False)
    builder.set_task(task)
    runner.set_task(task)
    (br,) = builder.build([inp])
    assert br.error_no == 0, br.error_msg
    print("running", flush=True)
    runner.run([inp], [br])              # a 2^31-step reduction per element: hangs
""")

HUNG_FROM_A_THREAD = textwrap.dedent("""
    import threading
    from tilecraft.autotune.worker_pool import WorkerPool
    import autotune_fakes as fk
    pool = WorkerPool(1)
    # the worker is started by a thread that ends; the job hangs in the main thread's map()
    t = threading.Thread(target=lambda: pool.map(fk.pool_job, [("ok",)], timeout=60))
    t.start(); t.join()
    print("running", flush=True)
    pool.map(fk.spin_forever, [()], timeout=3600)
""")


def children_of(pid):
    """PIDs whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


def alive(pid):
    """Running (not gone, not a zombie waiting for PID 1 to reap it)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def cpu_ticks(pid):
    stat = open(f"/proc/{pid}/stat").read()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def start_parent(script):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, REPO]), TILECRAFT_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    line = proc.stdout.readline()
    assert line.strip() == "running", proc.stderr.read() if proc.poll() is not None else line
    return proc


def wait_for_busy_child(parent, seconds=60.0):
    """The worker that runs the hung job: a child of ``parent`` that uses CPU."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        kids = [k for k in children_of(parent.pid) if alive(k)]
        before = {k: cpu_ticks(k) for k in kids}
        time.sleep(0.5)
        busy = [k for k in kids if alive(k) and cpu_ticks(k) > before[k] + 10]
        if busy:
            return kids
    pytest.fail("no worker of the tuner started the hung job")


def assert_all_gone(pids, seconds=20.0):
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.1)
        assert not [p for p in pids if alive(p)], "workers outlived their parent"
    finally:
        for p in pids:               # never leave a spinning process on the machine
            if alive(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killed_tuner_takes_its_hung_worker_along(sig):
    parent = start_parent(HUNG_TUNER)
    try:
        workers = wait_for_busy_child(parent)
        os.kill(parent.pid, sig)
        parent.wait(timeout=30)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert_all_gone(workers)


def test_worker_started_from_an_ended_thread_lives_until_the_parent_dies():
    """PR_SET_PDEATHSIG would fire when the starting thread ends; the pipe watchdog does not."""
    parent = start_parent(HUNG_FROM_A_THREAD)
    try:
        workers = wait_for_busy_child(parent)     # alive and busy although its thread ended
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert_all_gone(workers)
