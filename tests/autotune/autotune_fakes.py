"""Fakes for the tuner's tests: a schedule that records primitives, synthetic templates, a
builder and runner that measure nothing, and module-level build/run functions (importable by
the worker processes) that crash, hang or answer wrongly on purpose."""
from __future__ import annotations

import math
import os
import signal
import time

import numpy as np

import tilecraft.autotune as autotune
from tilecraft.autotune.measure import BuildResult, MeasureErrorNo, MeasureResult


class FakeAxis:
    def __init__(self, name, extent):
        self.name, self.extent = name, extent

    def __repr__(self):
        return f"{self.name}:{self.extent}"


class FakeStage:
    def __init__(self, log):
        self.log = log

    def split(self, axis, factor=None, nparts=None):
        self.log.append(("split", axis.name, factor))
        outer = FakeAxis(axis.name + ".o", math.ceil(axis.extent / factor))
        inner = FakeAxis(axis.name + ".i", factor)
        return outer, inner

    def reorder(self, *axes):
        self.log.append(("reorder", tuple(a.name for a in axes)))

    def unroll(self, ax):
        self.log.append(("unroll", ax.name))

    def vectorize(self, ax):
        self.log.append(("vectorize", ax.name))

    def parallel(self, ax):
        self.log.append(("parallel", ax.name))


class FakeSchedule:
    def __init__(self):
        self.log = []

    def __getitem__(self, op):
        return FakeStage(self.log)


@autotune.template("test/fake_matmul")
def fake_matmul(N, M, K):
    """A template over plain ints: 2 splits, an order, an annotation and a knob."""
    cfg = autotune.get_config()
    cfg.define_split("tile_y", N, num_outputs=2)
    cfg.define_split("tile_x", M, num_outputs=2)
    cfg.define_split("tile_k", K, num_outputs=2, policy="power2")
    cfg.define_knob("unroll", [0, 1])
    s = FakeSchedule()
    y, x = FakeAxis("y", N), FakeAxis("x", M)
    yo, yi = cfg["tile_y"].apply(s, "C", y)
    xo, xi = cfg["tile_x"].apply(s, "C", x)
    cfg.add_flop(2.0 * N * M * K)
    return s, []


def synthetic_cost(config) -> float:
    """Seconds for a fake matmul config: best with tile_y inner 8, tile_x inner 16, tile_k inner
    4 and unroll; smooth in log-space so a model can learn it."""
    ty = config["tile_y"].size[-1]
    tx = config["tile_x"].size[-1]
    tk = config["tile_k"].size[-1]
    u = config["unroll"].val
    c = 1e-3 * (1 + 0.5 * (math.log2(ty) - 3) ** 2 + 0.3 * (math.log2(tx) - 4) ** 2
                + 0.2 * (math.log2(tk) - 2) ** 2) * (0.8 if u else 1.0)
    return c


class FakeBuilder:
    """Builds nothing; configs with tile_x inner 1 fail to 'compile', to exercise errors."""

    n_parallel = 4

    def __init__(self, fail_tile_x_one=False):
        self.fail = fail_tile_x_one
        self.built = []

    def set_task(self, task):
        self.task = task

    def build(self, inputs):
        out = []
        for inp in inputs:
            self.built.append(inp.config.index)
            if self.fail and inp.config["tile_x"].size[-1] == 1:
                out.append(BuildResult(None, (), MeasureErrorNo.COMPILE_HOST, "fake compile error", 0.01))
            else:
                out.append(BuildResult("fake.so", (), MeasureErrorNo.NO_ERROR, "", 0.01))
        return out


class FakeRunner:
    n_parallel = 1

    def __init__(self, cost=synthetic_cost):
        self.cost = cost
        self.ran = []

    def set_task(self, task):
        self.task = task

    def run(self, inputs, build_results):
        out = []
        for inp in inputs:
            self.ran.append(inp.config.index)
            c = self.cost(inp.config)
            out.append(MeasureResult((c, c * 1.01), MeasureErrorNo.NO_ERROR, "", 0.02, time.time()))
        return out


def fake_option(**kw):
    return autotune.measure_option(builder=FakeBuilder(**kw), runner=FakeRunner())


class FakeCostModel:
    """Predicts -synthetic cost exactly (a perfect model) and counts its calls."""

    def __init__(self, task):
        self.task = task
        self.fits = 0
        self.predicted = 0

    def fit(self, xs, ys, plan_size):
        self.fits += 1

    def predict(self, xs):
        self.predicted += len(xs)
        return np.array([-synthetic_cost(self.task.config_space.get(int(i))) for i in xs])


# -- functions run inside LocalBuilder/LocalRunner workers ------------------------------------

def behaviour(config) -> str:
    return ["ok", "segfault", "hang", "wrong", "raise", "ok"][config.index % 6]


def fake_build_func(inp, path):
    if behaviour(inp.config) == "raise":
        raise RuntimeError("fake lowering failure")
    with open(path, "w") as f:
        f.write("fake library")
    return BuildResult(path, (((4,), "float32", True),), MeasureErrorNo.NO_ERROR, "", 0.001)


def hanging_build_func(inp, path):
    if inp.config.index % 2:
        time.sleep(60)
    return fake_build_func(inp, path)


def crashing_build_func(inp, path):
    if inp.config.index % 2:
        os.kill(os.getpid(), signal.SIGSEGV)
    return fake_build_func(inp, path)


def fake_run_func(inp, br, timing, ref_outputs):
    b = behaviour(inp.config)
    if b == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if b == "hang":
        time.sleep(60)
    if b == "wrong":
        return (), int(MeasureErrorNo.WRONG_ANSWER), "output 0 differs from the reference"
    assert os.path.exists(br.filename)
    return (1e-3 * (1 + inp.config.index),), 0, ""


def pool_job(what):
    if what == "raise":
        raise ValueError("boom")
    if what == "hang":
        time.sleep(60)
    if what == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    return "fine"


def spin_forever():
    """A job that never ends and keeps a core busy."""
    while True:
        pass


def greedy_run_func(inp, br, timing, ref_outputs):
    """Allocates 8 GiB: under a memory cap this must fail cleanly."""
    import numpy as np
    block = np.ones(8 << 30, dtype=np.uint8)
    return (float(block[0]),), 0, ""


def echo_timing_run_func(inp, br, timing, ref_outputs):
    """Answers the timing record it received (as JSON, in the message) and one cost."""
    return (1e-3,), 0, timing.to_json()
