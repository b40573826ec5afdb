"""The tracker's pool rules without a network: fair hand-out, heartbeats, sessions, reports."""
import threading

import pytest

from tilecraft.rpc.tracker import DevicePool


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Owner:
    """Stands for one connection (a server's registration session or a client's)."""

    def __init__(self, name):
        self.name = name
        self.dropped = False

    def drop(self):
        self.dropped = True


def test_free_servers_are_handed_out_least_recently_used_first():
    pool = DevicePool()
    a, b = Owner("a"), Owner("b")
    sa = pool.register("llvm:x", "h", 1, a)
    sb = pool.register("llvm:x", "h", 2, b)
    me = Owner("client")
    got = []
    for _ in range(4):
        lease = pool.request("llvm:x", me, timeout=0)
        got.append(lease.server_id)
        pool.release(lease.lease_id, me)
    assert got == [sa, sb, sa, sb]


def test_requests_for_a_key_are_served_in_arrival_order():
    pool = DevicePool()
    pool.register("llvm:x", "h", 1, Owner("server"))
    holder = Owner("holder")
    first = pool.request("llvm:x", holder, timeout=0)
    order, threads, lock = [], [], threading.Lock()

    def client(i):
        me = Owner(i)
        lease = pool.request("llvm:x", me, timeout=10)
        with lock:
            order.append(i)
        pool.release(lease.lease_id, me)

    for i in range(5):
        t = threading.Thread(target=client, args=(i,))
        t.start()
        threads.append(t)
        # the next client arrives only once this one waits in the queue
        while pool.status().queues.get("llvm:x", 0) < i + 1:
            threading.Event().wait(0.001)
    pool.release(first.lease_id, holder)
    for t in threads:
        t.join(10)
    assert order == [0, 1, 2, 3, 4]
    assert pool.status().queues == {}


def test_keys_do_not_share_servers_and_a_request_times_out():
    pool = DevicePool()
    pool.register("cuda:sm_90", "h", 1, Owner("gpu"))
    assert pool.request("llvm:x", Owner("c"), timeout=0.05) is None
    assert pool.status().queues == {}          # the timed-out request left the queue
    assert pool.request("cuda:sm_90", Owner("c"), timeout=0).key == "cuda:sm_90"


def test_a_server_that_misses_heartbeats_leaves_the_pool():
    clock = FakeClock()
    pool = DevicePool(heartbeat_timeout=5, clock=clock)
    quiet, chatty = Owner("quiet"), Owner("chatty")
    s1 = pool.register("k", "h", 1, quiet, quiet.drop)
    s2 = pool.register("k", "h", 2, chatty, chatty.drop)
    clock.now += 4
    assert pool.heartbeat(s2, chatty)
    assert not pool.heartbeat(s2, quiet)            # only its own session may beat for it
    clock.now += 2
    assert pool.reap() == [s1]
    assert quiet.dropped and not chatty.dropped
    assert [s.server_id for s in pool.status().servers] == [s2]
    assert not pool.heartbeat(s1, quiet)            # told to register again


def test_a_closed_session_releases_leases_cancels_waits_and_drops_its_servers():
    pool = DevicePool()
    server = Owner("server")
    sid = pool.register("k", "h", 1, server, server.drop)
    client = Owner("client")
    lease = pool.request("k", client, timeout=0)
    assert pool.status().servers[0].busy
    pool.forget_owner(client)
    assert not pool.status().servers[0].busy
    assert not pool.release(lease.lease_id, client)
    pool.forget_owner(server)
    assert pool.status().servers == () and server.dropped
    assert sid not in [s.server_id for s in pool.status().servers]


def test_a_reported_server_is_dropped_and_the_queue_moves_to_the_others():
    pool = DevicePool()
    bad, good = Owner("bad"), Owner("good")
    s_bad = pool.register("k", "h", 1, bad, bad.drop)
    s_good = pool.register("k", "h", 2, good, good.drop)
    me = Owner("client")
    lease = pool.request("k", me, timeout=0)
    assert lease.server_id == s_bad
    other = Owner("other")
    assert not pool.report_broken(lease.lease_id, other)   # only the holder may report
    assert pool.report_broken(lease.lease_id, me)
    assert bad.dropped
    assert pool.request("k", me, timeout=0).server_id == s_good


@pytest.mark.parametrize("held", [True, False])
def test_status_counts_free_and_busy(held):
    pool = DevicePool()
    pool.register("k", "h", 1, Owner("s"))
    if held:
        pool.request("k", Owner("c"), timeout=0)
    st = pool.status()
    assert st.keys() == {"k": (0 if held else 1, 1)}
    assert "k" in st.format()
