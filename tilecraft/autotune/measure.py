"""Measurement: typed records at the boundary, and the builder/runner interface.

A tuner turns configurations into ``MeasureInput``s and gets ``MeasureResult``s back from a
*measure batch* made of two injected objects::

    option = autotune.measure_option(builder=autotune.LocalBuilder(timeout=10),
                                     runner=autotune.LocalRunner(number=5, repeat=3))

The interface those objects implement (any object with these methods works — an RPC runner
from ``tilecraft.rpc``, or a fake in a test):

``Builder``
    ``n_parallel`` (int); ``set_task(task)`` once per task; ``build(inputs) -> [BuildResult]``
    (same order). A build that fails gives a ``BuildResult`` with ``error_no != 0``.
``Runner``
    ``n_parallel`` (int); ``set_task(task)`` once per task; ``run(inputs, build_results) ->
    [MeasureResult]`` (same order), called only with successful builds.
``close()``
    optional on both: release worker processes.

``BuildResult.filename`` is a shared library (``Module.export_library``) and
``BuildResult.reference`` the naive schedule's library, which a runner uses to check outputs.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Any, Protocol, Sequence


class MeasureErrorNo(enum.IntEnum):
    """Why a measurement has no time. The numbers are those of TVM's AutoTVM."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1  # the template rejected the config (cfg.raise_error / InstantiationError)
    COMPILE_HOST = 2         # lowering or host code generation failed
    COMPILE_DEVICE = 3       # device (CUDA) compilation failed
    RUNTIME_DEVICE = 4       # loading or running failed, or the run process died (segfault, OOM)
    WRONG_ANSWER = 5         # ran, but the output differs from the reference
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8


@dataclass(frozen=True)
class MeasureInput:
    """One configuration of one task on one target."""

    target: Any
    task: Any
    config: Any


@dataclass(frozen=True)
class MeasureResult:
    """The outcome of measuring a ``MeasureInput``.

    ``costs``: seconds per run, one per repeat (empty on error); ``error_no``: a
    ``MeasureErrorNo``; ``error_msg``: what went wrong, kept whole; ``all_cost``: wall seconds
    spent on this candidate (build + run); ``timestamp``: when it finished (Unix time);
    ``build_time``: seconds spent building.
    """

    costs: tuple
    error_no: MeasureErrorNo
    error_msg: str = ""
    all_cost: float = 0.0
    timestamp: float = 0.0
    build_time: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "costs", tuple(float(c) for c in self.costs))
        object.__setattr__(self, "error_no", MeasureErrorNo(int(self.error_no)))

    @property
    def mean_cost(self) -> float:
        return sum(self.costs) / len(self.costs) if self.costs else float("inf")

    @property
    def ok(self) -> bool:
        return self.error_no == MeasureErrorNo.NO_ERROR and bool(self.costs)


@dataclass(frozen=True)
class BuildResult:
    """What a builder made of one input: a library file and what its arguments look like.

    ``arg_info``: ``[(shape, dtype, is_output), ...]`` in call order; ``phases``: optional
    ``((name, seconds), ...)`` of the build's steps, for throughput reports.
    """

    filename: str | None
    arg_info: tuple = ()
    error_no: MeasureErrorNo = MeasureErrorNo.NO_ERROR
    error_msg: str = ""
    time_cost: float = 0.0
    reference: str | None = None
    phases: tuple = ()


class Builder(Protocol):
    n_parallel: int

    def set_task(self, task) -> None: ...

    def build(self, measure_inputs: Sequence[MeasureInput]) -> list[BuildResult]: ...


class Runner(Protocol):
    n_parallel: int

    def set_task(self, task) -> None: ...

    def run(self, measure_inputs: Sequence[MeasureInput],
            build_results: Sequence[BuildResult]) -> list[MeasureResult]: ...


def measure_option(builder=None, runner=None) -> dict:
    """The builder and runner a tuner measures with (``LocalBuilder()``/``LocalRunner()`` when
    not given)."""
    if builder is None or builder == "local":
        from .local import LocalBuilder

        builder = LocalBuilder()
    if runner is None or runner == "local":
        from .local import LocalRunner

        runner = LocalRunner()
    for obj, what, methods in ((builder, "builder", ("set_task", "build")),
                               (runner, "runner", ("set_task", "run"))):
        missing = [m for m in methods if not callable(getattr(obj, m, None))]
        if missing:
            raise TypeError(f"the {what} {obj!r} lacks {', '.join(missing)}: see docs/autotune.md")
    return {"builder": builder, "runner": runner}


class MeasureBatch:
    """Build a batch of inputs (in parallel) and run the ones that built."""

    def __init__(self, task, option: dict):
        target = getattr(task, "target", None)
        if target is not None and getattr(target, "kind", None) == "llvm":
            from tilecraft.codegen.llvm import check_target   # a bad -mcpu fails here, once, not per candidate

            check_target(target)
        self.builder = option["builder"]
        self.runner = option["runner"]
        self.builder.set_task(task)
        self.runner.set_task(task)
        self.n_parallel = max(1, int(getattr(self.builder, "n_parallel", 1)))
        #: seconds spent per phase, summed over candidates: the builder's phases (in its
        #: workers, so they overlap), and wall seconds of the build and run calls here
        self.stats: dict = {}

    def _add(self, key, seconds):
        self.stats[key] = self.stats.get(key, 0.0) + seconds

    def __call__(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        t0 = time.perf_counter()
        build_results = self.builder.build(inputs)
        self._add("build_wall", time.perf_counter() - t0)
        for br in build_results:
            for name, sec in br.phases:
                self._add("build." + name, sec)
        results: list[MeasureResult | None] = [None] * len(inputs)
        ok = []
        for i, br in enumerate(build_results):
            if br.error_no != MeasureErrorNo.NO_ERROR:
                results[i] = MeasureResult((), br.error_no, br.error_msg, br.time_cost, time.time(),
                                           br.time_cost)
            else:
                ok.append(i)
        if ok:
            t0 = time.perf_counter()
            run_results = self.runner.run([inputs[i] for i in ok], [build_results[i] for i in ok])
            self._add("run_wall", time.perf_counter() - t0)
            for i, rr in zip(ok, run_results):
                bt = build_results[i].time_cost
                results[i] = MeasureResult(rr.costs, rr.error_no, rr.error_msg, rr.all_cost + bt,
                                           rr.timestamp or time.time(), bt)
        cleanup = getattr(self.builder, "cleanup", None)
        if cleanup is not None:
            cleanup(build_results)
        return results  # type: ignore[return-value]

    def close(self):
        for obj in (self.builder, self.runner):
            close = getattr(obj, "close", None)
            if close is not None:
                close()


def create_measure_batch(task, option: dict) -> MeasureBatch:
    return MeasureBatch(task, option)
