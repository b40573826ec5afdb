"""TVM's sample AutoTVM task (``tvm.testing.autotvm.get_sample_task``'s matmul: two split knobs,
8 x 8 = 64 configs at 128), records of it, and a builder/runner that measure nothing: the
tuners' and cost model's bookkeeping is what the tests that use them look at."""
import time

from tilecraft import autotune as autotvm
from tilecraft import te
from tilecraft.autotune.measure import BuildResult, MeasureErrorNo, MeasureInput, MeasureResult


@autotvm.template("tvm_api/sample_matmul")
def sample_matmul(N, L, M):
    """TVM's sample task: a matmul with two split knobs (8 x 8 = 64 configs at 128)."""
    A = te.placeholder((N, L), name="A")
    B = te.placeholder((L, M), name="B")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, k, yi, xi)
    return s, [A, B, C]


class NoBuilder:
    """Builds nothing: the tuners' bookkeeping is what these tests look at."""
    n_parallel = 3

    def set_task(self, task):
        pass

    def build(self, inputs):
        return [BuildResult("none", (), MeasureErrorNo.NO_ERROR, "", 0.0) for _ in inputs]


class DummyRunner:
    n_parallel = 1

    def set_task(self, task):
        pass

    def run(self, inputs, build_results):
        return [MeasureResult((1e-3 * (1 + inp.config.index % 7),), MeasureErrorNo.NO_ERROR, "", 0.0, time.time())
                for inp in inputs]


def sample_task(filtered=False):
    task = autotvm.task.create("tvm_api/sample_matmul", args=(128, 128, 128), target="llvm")
    if filtered:     # TVM's test: keep tile products in [32, 1024)
        task.config_space.multi_filter(lambda e: 32 <= e["tile_x"].size[1] * e["tile_y"].size[1] < 1024)
    return task


def dummy_option():
    return autotvm.measure_option(builder=NoBuilder(), runner=DummyRunner())


def sample_records(n: int, task=None):
    """``n`` (MeasureInput, MeasureResult) pairs of distinct configs with a smooth synthetic cost."""
    task = task or sample_task()
    space = task.config_space
    out = []
    for i in range(n):
        config = space.get(space.valid_index(i % len(space)))
        cost = 1e-3 * (1 + abs(config["tile_x"].size[-1] - 16) / 16 + abs(config["tile_y"].size[-1] - 8) / 8)
        out.append((MeasureInput(task.target, task, config),
                    MeasureResult((cost,), MeasureErrorNo.NO_ERROR, "", 0.0, time.time())))
    return out
