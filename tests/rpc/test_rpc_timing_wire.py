"""TimingOptions on the wire: RPCRunner sends its record as JSON text, the device server
rebuilds it with the same validation and refuses an invalid one (naming the option) before any
work; a valid record arrives whole, with the task's seed."""
import threading

import pytest

from conftest import measure_inputs
from tilecraft.autotune import TimingOptions
from tilecraft.rpc import DeviceServer, RPCRunner, Tracker, connect

SECRET = b"timing-wire-secret-timing-wire"


class RecordingServer(DeviceServer):
    """Records the TimingOptions each request carried and answers at once (nothing is run)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.received = []
        self._lock = threading.Lock()

    def prepare_reference(self, ref_digest, arg_info, target, timing, inputs=()):
        with self._lock:
            self.received.append(("prepare_reference", timing))
        return (True, "")

    def measure(self, lib_digest, ref_digest, arg_info, target, timing, inputs=()):
        with self._lock:
            self.received.append(("measure", timing))
        return ((1e-3,), 0, "")


@pytest.fixture(scope="module")
def direct():
    """A recording server and an authenticated connection to it, with one library uploaded."""
    with RecordingServer("llvm:wire", secret=SECRET, warm_up=False) as server:
        conn = connect("127.0.0.1", server.port, SECRET)
        try:
            digest = conn.root.upload_library(b"a library's bytes")
            yield server, conn, digest
        finally:
            conn.close()


ARG_INFO = (((4,), "float32", False), ((4,), "float32", True))
LONG = '{"seed": 1, "pad": "' + "x" * 5000 + '"}'


@pytest.mark.parametrize("timing, message", [
    ('{"number": 0, "seed": 1}', "timing: timing option 'number' must be an integer from 1 to 1000000, got 0"),
    ('{"rtol": -1, "seed": 1}', "timing: timing option 'rtol' must be a number >= 0, got -1"),
    ('{"timeout": 1e400, "seed": 1}', "timing: timing option 'timeout' must be a number of seconds > 0 and "
                                      "<= 86400, got inf"),
    ('{"numbr": 1, "seed": 1}', "timing: unknown timing option 'numbr' (did you mean 'number'?)"),
    ('{"number": 1}', "timing: timing option 'seed' must be an integer here: a measurement's random inputs "
                      "come from it"),
    ('{"seed": true}', "timing: timing option 'seed' must be an integer from 0 to 9223372036854775807 or None, "
                       "got True"),
    ("[4, 3]", "timing: timing options: expected an object of named options, got list"),
    ("number=4", "timing: timing options: not valid JSON"),
    ((("number", 4), ("seed", 1)), "timing: expected str, got tuple"),
    (4, "timing: expected str, got int"),
    pytest.param(LONG, f"timing: {len(LONG)} exceeds the limit of 4096", id="too-long"),
])
def test_the_server_refuses_an_invalid_record_before_any_work(direct, timing, message):
    server, conn, digest = direct
    before = len(server.received)
    with pytest.raises(Exception) as err:
        conn.root.measure(digest, "", ARG_INFO, "llvm", timing)
    assert message in str(err.value)
    with pytest.raises(Exception) as err:
        conn.root.prepare_reference(digest, ARG_INFO, "llvm", timing)
    assert message in str(err.value)
    assert len(server.received) == before                    # neither request reached the work
    assert conn.root.info()[0] == "llvm:wire"                # and the connection is still good


def test_a_valid_record_arrives_whole(direct):
    server, conn, digest = direct
    sent = TimingOptions(number=7, repeat=2, min_repeat_ms=12.5, timeout=3, reference_timeout=40,
                         enable_cpu_cache_flush=True, check_correctness=False, rtol=0.5, atol=1e-6,
                         seed=2**40 + 3, max_timing_s=1.5)
    assert conn.root.measure(digest, "", ARG_INFO, "llvm", sent.to_json()) == ((1e-3,), 0, "")
    assert conn.root.prepare_reference(digest, ARG_INFO, "llvm", sent.to_json()) == (True, "")
    assert server.received[-2:] == [("measure", sent), ("prepare_reference", sent)]


def test_rpc_runner_sends_its_record_with_the_tasks_seed(kernels):
    with Tracker(port=0, secret=SECRET) as tracker, \
            RecordingServer("llvm:wire2", secret=SECRET, tracker=("127.0.0.1", tracker.port),
                            heartbeat_interval=0.1, warm_up=False) as server:
        assert server.registered.wait(5)
        timing = TimingOptions(number=5, repeat=4, min_repeat_ms=1, timeout=2, rtol=0.01, atol=0.02,
                               enable_cpu_cache_flush=True, max_timing_s=0.5)
        runner = RPCRunner("llvm:wire2", "127.0.0.1", tracker.port, secret=SECRET, timing=timing, n_parallel=1)
        task, inputs, builds = measure_inputs(kernels, ["good", "good"], reference=True)
        runner.set_task(task)
        results = runner.run(inputs, builds)
        assert [r.costs for r in results] == [(1e-3,), (1e-3,)]
        kinds = [kind for kind, _ in server.received]
        assert kinds.count("measure") == 2 and "prepare_reference" in kinds
        got = {t for _, t in server.received}
        assert len(got) == 1                                  # one record for the task: same seed throughout
        (record,) = got
        assert record.seed is not None and record == timing.replace(seed=record.seed)
