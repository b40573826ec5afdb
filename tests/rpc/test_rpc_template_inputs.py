"""Templates with an input recipe (``autotune.inputs``) are measured on the same inputs over the
device pool as locally: the server makes the sparse templates' CSR matrix from the recipe's
names and numbers. Through a real tracker and server (``python -m tilecraft.rpc``)."""
import numpy as np
import pytest

from conftest import RpcProcesses, wait_until
from tilecraft.autotune import MeasureErrorNo as E

SECRET = b"inputs-secret-inputs-secret-0123456789"
ARGS = (200, 150, 6.0, "powerlaw")      # rows, cols, nonzeros per row, law: rows longer than 8


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    from tilecraft.rpc import TrackerClient

    procs = RpcProcesses(tmp_path_factory.mktemp("rpc-inputs"), SECRET)
    try:
        _, port = procs.start("tracker", "--port", "0")
        procs.start("server", "--tracker", f"127.0.0.1:{port}", "--key", "llvm:inputs", "--heartbeat-interval", "0.2")
        procs.tracker_port = port
        with TrackerClient("127.0.0.1", port, SECRET) as t:
            wait_until(lambda: t.status().keys().get("llvm:inputs") == (1, 1), 20, "the server registered")
        yield procs
    finally:
        procs.close()


@pytest.fixture(scope="module")
def spmv_libraries(tmp_path_factory):
    """The spmv template's task, its naive reference, a tuned candidate, and a candidate that
    drops the nonzeros of a row past the 8th (right on random integers, whose 'rows' are at most
    6 long; wrong on the template's matrix)."""
    import tilecraft
    import tilecraft.topi.sparse  # noqa: F401 -- registers the templates
    from tilecraft import autotune, te

    folder = tmp_path_factory.mktemp("spmv-libs")
    task = autotune.task.create("topi/spmv.llvm", args=ARGS, target="llvm")

    def export(s, tensors, name):
        path = str(folder / f"{name}.so")
        tilecraft.build(s, tensors, target="llvm", name="default_function").export_library(path)
        return path

    _, tensors = task.instantiate(autotune.FallbackConfigEntity())
    y = tensors[-1]
    libs = {"reference": export(te.create_schedule(y.op), tensors, "reference")}
    s, tuned = task.instantiate(task.config_space.get(len(task.config_space) - 1))
    libs["good"] = export(s, tuned, "good")
    row_ptr, col_idx, val, x, _ = tensors

    def first_8(i):
        j = te.reduce_axis((row_ptr[i], te.min(row_ptr[i + 1], row_ptr[i] + 8)), "j")
        return te.sum(val[j] * x[col_idx[j]], axis=j)
    short = te.compute(y.shape, first_8, name="y")
    libs["first_8"] = export(te.create_schedule(short.op), [row_ptr, col_idx, val, x, short], "first_8")
    return task, libs


def _measure(pool, task, libs, names):
    from tilecraft.autotune import BuildResult, MeasureInput
    from tilecraft.autotune.local import tensor_arg_info
    from tilecraft.rpc import RPCRunner

    _, tensors = task.instantiate(task.config_space.get(0))
    info = tensor_arg_info(tensors)
    runner = RPCRunner("llvm:inputs", "127.0.0.1", pool.tracker_port, secret=SECRET, number=1, repeat=1,
                       timeout=20, request_timeout=20)
    inputs = [MeasureInput("llvm", task, None) for _ in names]
    builds = [BuildResult(libs[n], info, reference=libs["reference"]) for n in names]
    return runner.run(inputs, builds)


def test_the_server_measures_on_the_templates_matrix(pool, spmv_libraries):
    """The candidate that drops long rows' tails is caught on the server, as it is locally."""
    from tilecraft.autotune.inputs import make_matrix

    task, libs = spmv_libraries
    row_ptr, _, _ = make_matrix(*ARGS)
    assert np.diff(row_ptr).max() > 8            # the matrix has rows the wrong candidate cuts short
    good, first_8 = _measure(pool, task, libs, ["good", "first_8"])
    assert good.error_no == E.NO_ERROR, good.error_msg
    assert first_8.error_no == E.WRONG_ANSWER, first_8.error_msg
    assert "differs from the reference" in first_8.error_msg


def test_random_inputs_do_not_tell_the_difference(pool, spmv_libraries):
    """Why the recipe matters: without it (a task that has none) the server draws random
    integers for row_ptr, and the candidate that drops nonzeros past the 8th passes."""
    from types import SimpleNamespace

    task, libs = spmv_libraries
    plain_task = SimpleNamespace(target="llvm")
    plain_task.config_space = task.config_space
    plain_task.instantiate = task.instantiate
    (first_8,) = _measure(pool, plain_task, libs, ["first_8"])
    assert first_8.error_no == E.NO_ERROR, first_8.error_msg


def test_bad_recipes_are_refused():
    from tilecraft.rpc.protocol import ProtocolError
    from tilecraft.rpc.server import check_inputs

    assert check_inputs(()) == ()
    assert check_inputs(("csr_matrix", (3, 5, 1.0, "banded"))) == ("csr_matrix", (3, 5, 1.0, "banded"))
    with pytest.raises(ProtocolError, match=r"inputs: unknown input recipe 'os.system'; this server knows csr_layout, csr_matrix"):
        check_inputs(("os.system", ("rm -rf /",)))
    with pytest.raises(ProtocolError, match=r"inputs: expected \(\) or \(recipe name, parameters\)"):
        check_inputs(("csr_matrix", 3))
    with pytest.raises(ProtocolError, match=r"inputs: the parameters of 'csr_matrix' must be at most 16 numbers"):
        check_inputs(("csr_matrix", ((1, 2),)))
    with pytest.raises(ProtocolError, match=r"inputs: expected a plain value, got list"):
        check_inputs(["csr_matrix", ()])
