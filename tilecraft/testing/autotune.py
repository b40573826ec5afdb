"""TVM's AutoTVM test helpers at TVM's path (``tvm.testing.autotvm`` is
``tilecraft.testing.autotune``, as ``tvm.autotvm`` is ``tilecraft.autotune``): a sample matmul
task with two split knobs, records of it, and a runner that measures nothing.

This module belongs to the autotune layer (tests/test_layering.py places it there): it imports
the tuner, which the rest of ``tilecraft.testing`` must not.

    >>> from tilecraft.testing.autotune import get_sample_task, DummyRunner
    >>> task, target = get_sample_task()
    >>> len(task.config_space)          # 8 x 8 splits of 128
    64
"""
from __future__ import annotations

import time

import numpy as np

from tilecraft import te
from tilecraft.autotune import task as _task_api
from tilecraft.autotune.measure import MeasureErrorNo, MeasureInput, MeasureResult
from tilecraft.target import Target


class DummyRunner:
    """A runner that runs nothing: each input gets a random cost in [0, 1) s (TVM's DummyRunner).

    >>> from tilecraft import autotune
    >>> option = autotune.measure_option(builder=autotune.LocalBuilder(), runner=DummyRunner())
    """

    def __init__(self):
        self.n_parallel = 1
        self.timeout = 1
        self.task = None

    def set_task(self, task):
        self.task = task

    def run(self, measure_inputs, build_results):
        return [MeasureResult((float(np.random.random()),), MeasureErrorNo.NO_ERROR, "", 0.2, time.time())
                for _ in measure_inputs]

    def get_build_kwargs(self):
        return {}


@_task_api.template("testing/matmul")
def matmul(N, L, M, dtype):
    """TVM's sample template: a matmul with split knobs ``tile_y`` and ``tile_x``; ``tile_x``'s
    inner factor 1 leaves ``x`` unsplit, so configs differ in their number of loops."""
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    k = s[C].op.reduce_axis[0]
    cfg = _task_api.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    yo, yi = cfg["tile_y"].apply(s, C, y)
    if cfg["tile_x"].size[-1] > 1:
        xo, xi = cfg["tile_x"].apply(s, C, x)
        s[C].reorder(yo, xo, k, yi, xi)
    else:
        s[C].reorder(yo, k, yi, x)
    return s, [A, B, C]


@_task_api.template("testing/bad_matmul")
def bad_matmul(N, L, M, dtype):
    """``matmul``, except under a target with the key ``bad_device``: there the reduction misses
    its last element (a wrong kernel, for tests of result checking)."""
    target = Target.current(allow_none=True)
    if target is not None and "bad_device" in target.keys:
        A = te.placeholder((N, L), name="A", dtype=dtype)
        B = te.placeholder((L, M), name="B", dtype=dtype)
        k = te.reduce_axis((0, L - 1), name="k")
        C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        s = te.create_schedule(C.op)
        y, x = s[C].op.axis
        cfg = _task_api.get_config()
        cfg.define_split("tile_y", y, num_outputs=2)
        cfg.define_split("tile_x", x, num_outputs=2)
        return s, [A, B, C]
    return matmul(N, L, M, dtype)


def get_sample_task(n=128):
    """``(task, target)``: the ``testing/matmul`` task at ``n``³ float32 for ``llvm``.

    >>> task, target = get_sample_task(64)
    >>> task.name
    'testing/matmul'
    """
    target = Target("llvm")
    task = _task_api.create("testing/matmul", args=(n, n, n, "float32"), target=target)
    return task, target


def get_sample_records(n):
    """``n`` ``(MeasureInput, MeasureResult)`` pairs of the sample task: config ``i % len(space)``
    with cost ``i + 1`` seconds.

    >>> [r.costs for _, r in get_sample_records(2)]
    [(1.0,), (2.0,)]
    """
    task, target = get_sample_task()
    space = task.config_space
    return [(MeasureInput(target, task, space.get(i % len(space))),
             MeasureResult((i + 1,), MeasureErrorNo.NO_ERROR, "", float(i), time.time()))
            for i in range(n)]
