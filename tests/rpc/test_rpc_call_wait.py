"""The runner's wait for a server's answer: a long call (the reference run) is given up as soon as
the tracker no longer has the server, instead of after its whole time limit."""
import threading

import pytest
import rpyc
from rpyc.core.async_ import AsyncResultTimeout
from rpyc.utils.factory import connect_thread

from tilecraft.rpc.runner import _call, _LeftPool


class _Slow(rpyc.Service):
    release = threading.Event()

    def exposed_wait(self):
        self.release.wait(60)
        return "done"

    def exposed_quick(self, x):
        return x + 1


@pytest.fixture
def conn():
    _Slow.release.clear()
    c = connect_thread(service=rpyc.VoidService, remote_service=_Slow)
    yield c
    _Slow.release.set()
    c.close()


def test_a_call_to_a_server_the_tracker_dropped_is_given_up(conn):
    asked = []

    def alive():
        asked.append(1)
        return len(asked) < 3          # the tracker drops the server at the third look
    with pytest.raises(_LeftPool):
        _call(conn.root.wait, 60, alive=alive, every=0.05)
    assert len(asked) == 3


def test_a_live_server_is_waited_for_until_the_limit(conn):
    with pytest.raises(AsyncResultTimeout):
        _call(conn.root.wait, 0.3, alive=lambda: True, every=0.05)
    _Slow.release.set()                 # the connection is served in one thread: free it
    assert _call(conn.root.quick, 5, 41, alive=lambda: True) == 42
    assert _call(conn.root.quick, 5, 1) == 2
