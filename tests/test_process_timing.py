"""bench/process_timing.py: each contestant timed in its own worker process, in turns."""
import importlib.util
import json
import os
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench" / "process_timing.py"


def _load():
    spec = importlib.util.spec_from_file_location("process_timing", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module               # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


pt = _load()


# contestants (called in the workers, which load this file)
def env_reporter():
    keys = pt.THREAD_VARIABLES + ("OPENBLAS_THREAD_TIMEOUT", "OMP_WAIT_POLICY")
    return (lambda: None), json.dumps({k: os.environ.get(k) for k in keys})


def counter(path):
    def call():
        with open(path, "a") as f:
            f.write("x")
    return call


def broken():
    raise ValueError("the module does not build")


def test_each_contestant_in_its_own_process_with_the_thread_count(tmp_path):
    times = pt.time_apart({"a": pt.Contestant(__file__, "env_reporter"),
                           "b": pt.Contestant(__file__, "env_reporter")},
                          threads=3, rounds=3, seconds=0.001, pause=0)
    assert set(times) == {"a", "b"}
    pids = {t.pid for t in times.values()}
    assert len(pids) == 2 and os.getpid() not in pids
    for t in times.values():
        env = json.loads(t.info)
        assert all(env[v] == "3" for v in pt.THREAD_VARIABLES), env
        assert env["OPENBLAS_THREAD_TIMEOUT"] == "4"
        assert len(t.rounds) == 3 and t.median == sorted(t.rounds)[1]


def test_every_round_times_a_block_of_calls(tmp_path):
    """The worker calls the contestant twice to warm up and size the block, then once untimed and
    ``number`` times per round."""
    path = tmp_path / "calls"
    pt.time_apart({"c": pt.Contestant(__file__, "counter", {"path": str(path)})},
                  threads=1, rounds=4, seconds=1e-9, pause=0)
    assert path.read_text() == "x" * (2 + 4 * (1 + 1))


def test_user_settings_are_kept():
    env = pt.worker_env(2, {"OPENBLAS_THREAD_TIMEOUT": "20", "OMP_WAIT_POLICY": "ACTIVE", "PYTHONPATH": "/x"})
    assert env["OPENBLAS_THREAD_TIMEOUT"] == "20" and env["OMP_WAIT_POLICY"] == "ACTIVE"
    assert env["PYTHONPATH"].split(os.pathsep) == [pt.ROOT, "/x"]


def test_every_worker_gets_the_parents_wait_policy(monkeypatch):
    """ours and the references run with the same OpenMP wait policy (the parent's)."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    times = pt.time_apart({"a": pt.Contestant(__file__, "env_reporter"), "b": pt.Contestant(__file__, "env_reporter")},
                          threads=1, rounds=1, seconds=0.001, pause=0)
    assert [json.loads(t.info)["OMP_WAIT_POLICY"] for t in times.values()] == ["PASSIVE", "PASSIVE"]


def test_a_failing_contestant_is_named():
    with pytest.raises(RuntimeError, match="contestant 'tc' failed in its worker: ValueError: the module does not build"):
        pt.time_apart({"tc": pt.Contestant(__file__, "broken")}, threads=1, rounds=1)
