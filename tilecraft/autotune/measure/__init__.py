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

How a runner times and checks a candidate is one record, :class:`TimingOptions` (``number``,
``repeat``, ``min_repeat_ms``, timeouts, tolerances, ``seed``, ...): validated once when it is
made, taken whole by ``LocalRunner``, ``RPCRunner``, the device server and the CLI, and sent over
the wire as JSON text (``to_json``/``from_json``, validated the same way on arrival).
"""
from __future__ import annotations

import difflib
import enum
import json
import math
import numbers
import operator
import time
from dataclasses import dataclass, field, fields, replace
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
    ``build_time``: seconds spent building; ``stage``: ``"tune"`` for a measurement while
    tuning, ``"verify"`` for a re-measurement of a top config after the run, alone
    (``Tuner.tune(verify_top=)``): what ``apply_history_best`` and ``export`` choose by first.
    TVM's positional order ``MeasureResult(costs, error_no, all_cost, timestamp)`` (a number
    where the message goes) is read as TVM means it.

        >>> MeasureResult((1e-3,), 0, 0.2, 5.0).all_cost, MeasureResult((1e-3,), 0, 0.2, 5.0).timestamp
        (0.2, 5.0)
    """

    costs: tuple
    error_no: MeasureErrorNo
    error_msg: str = ""
    all_cost: float = 0.0
    timestamp: float = 0.0
    build_time: float = 0.0
    stage: str = "tune"

    def __post_init__(self):
        if isinstance(self.error_msg, (int, float)) and not isinstance(self.error_msg, bool):
            # TVM's positional order, MeasureResult(costs, error_no, all_cost, timestamp): a
            # number in the message's place is all_cost, and the next one the timestamp
            if self.timestamp:
                raise TypeError("MeasureResult: a number as the third argument is TVM's order "
                                "(costs, error_no, all_cost, timestamp); give at most four")
            object.__setattr__(self, "timestamp", float(self.all_cost))
            object.__setattr__(self, "all_cost", float(self.error_msg))
            object.__setattr__(self, "error_msg", "")
        object.__setattr__(self, "costs", tuple(float(c) for c in self.costs))
        object.__setattr__(self, "error_no", MeasureErrorNo(int(self.error_no)))

    def __iter__(self):
        # TVM's MeasureResult is the namedtuple (costs, error_no, all_cost, timestamp): its tests
        # rebuild one with ``MeasureResult(*list(tuple(res)))``, which the order above reads back
        return iter((self.costs, self.error_no, self.all_cost, self.timestamp))

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
    ``((name, seconds), ...)`` of the build's steps, for throughput reports;
    ``reference_arg_info``: the reference library's, when not ``arg_info``.
    """

    filename: str | None
    arg_info: tuple = ()
    error_no: MeasureErrorNo = MeasureErrorNo.NO_ERROR
    error_msg: str = ""
    time_cost: float = 0.0
    reference: str | None = None
    phases: tuple = ()
    # the reference's own arguments when they differ from this candidate's (a template whose
    # argument shapes depend on the config: dense_pack's panels); () when the same
    reference_arg_info: tuple = ()


# ---------------------------------------------------------------------------------------------
# Options records: one frozen dataclass per group of options, each field declared with what it
# accepts (``option``), checked by one function (``check_options``) when a record is made.


class OptionError(ValueError):
    """An option is outside what it accepts. ``option``: its name (``None`` when the record as a
    whole is malformed); ``allowed``: what it accepts, in words; ``got``: the value given."""

    def __init__(self, message: str, option: str | None = None, allowed: str = "", got: Any = None):
        super().__init__(message)
        self.option, self.allowed, self.got = option, allowed, got


@dataclass(frozen=True)
class OptionRule:
    """What one option accepts: ``kind`` (``int``, ``float`` or ``bool``), a range
    ``[low, high]`` (``low`` excluded when ``low_open``), ``None`` when ``none_ok``, and 0 as a
    synonym of ``None`` ("off") when ``zero_is_off``. ``unit`` words the messages."""

    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    none_ok: bool = False
    zero_is_off: bool = False
    unit: str = ""

    def allowed(self) -> str:
        """What this option accepts, in words (for error messages and docs).

        >>> OptionRule(int, 1, 100).allowed()
        'an integer from 1 to 100'
        """
        if self.kind is bool:
            text = "True or False"
        else:
            noun = "an integer" if self.kind is int else f"a number of {self.unit}" if self.unit else "a number"
            low = None if self.low is None else _number(self.low)
            high = None if self.high is None else _number(self.high)
            if low is not None and high is not None and not self.low_open:
                text = f"{noun} from {low} to {high}"
            elif low is not None and high is not None:
                text = f"{noun} > {low} and <= {high}"
            elif low is not None:
                text = f"{noun} {'>' if self.low_open else '>='} {low}"
            else:
                text = f"a finite {noun[2:] if noun.startswith('a ') else noun}"
        if self.zero_is_off:
            text += " (0: off)"
        elif self.none_ok:
            text += " or None"
        return text

    def check(self, value, owner: str, name: str):
        """``value`` in its canonical type (``int``/``float``/``bool``/``None``), or
        :class:`OptionError` naming ``owner``'s option ``name`` and what it accepts."""
        if value is None and (self.none_ok or self.zero_is_off):
            return None
        given = value
        try:
            if self.kind is bool:
                if not _is_bool(value):
                    raise TypeError
                return bool(value)
            if _is_bool(value):
                raise TypeError                      # True is an int to Python, not a count
            if self.kind is int:
                value = int(operator.index(value))
            elif isinstance(value, numbers.Real):
                value = float(value)
                if not math.isfinite(value):
                    raise ValueError
            else:
                raise TypeError
        except (TypeError, ValueError):
            raise self._error(given, owner, name) from None
        if self.zero_is_off and value == 0:
            return None
        if ((self.low is not None and (value < self.low or (self.low_open and value == self.low)))
                or (self.high is not None and value > self.high)):
            raise self._error(given, owner, name)
        return value

    def _error(self, value, owner: str, name: str) -> OptionError:
        got = repr(value)
        got = got if len(got) <= 60 else got[:57] + "..."
        return OptionError(f"{owner} {name!r} must be {self.allowed()}, got {got}", name, self.allowed(), value)


def _is_bool(value) -> bool:
    """Python's ``bool`` or numpy's (``numpy.bool_``), which is not an ``int`` subclass."""
    return isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"))


def _number(x) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def option(default, kind: type, low: float | None = None, high: float | None = None, **rule):
    """A dataclass field for an options record: its default and what it accepts
    (:class:`OptionRule`'s arguments).

    >>> # number: int = option(4, int, 1, 10**6)
    """
    return field(default=default, metadata={"rule": OptionRule(kind, low, high, **rule)})


def check_options(record, owner: str) -> None:
    """Check every field of the frozen ``record`` against its rule and store it in its canonical
    type (call from ``__post_init__``). ``owner`` starts the messages ("timing option").

    >>> TimingOptions(number=0)      # OptionError: timing option 'number' must be an integer from 1 to 1000000, got 0
    """
    for f in fields(record):
        value = f.metadata["rule"].check(getattr(record, f.name), owner, f.name)
        object.__setattr__(record, f.name, value)


def options_from_dict(cls, data, owner: str):
    """``cls(**data)`` for plain data received from outside (JSON): a dict of option names;
    an unknown name is an :class:`OptionError` naming it and the closest known one; a missing
    one takes its default."""
    if type(data) is not dict:
        raise OptionError(f"{owner}s: expected an object of named options, got {type(data).__name__}")
    names = [f.name for f in fields(cls)]
    for key in data:
        if key not in names:
            raise OptionError(f"unknown {owner} {key!r}{_did_you_mean(str(key), names)}; the {owner}s are: "
                              f"{', '.join(names)}", str(key))
    return cls(**data)


def split_options(who: str, options: dict, *classes) -> list[dict]:
    """The keyword arguments ``options`` given to ``who`` (a runner), split by the options
    record each belongs to (one dict per class in ``classes``, in order); a keyword none of
    them knows is a ``TypeError`` naming it and the closest known one."""
    groups: list[dict] = [{} for _ in classes]
    known = {f.name: i for i, cls in enumerate(classes) for f in fields(cls)}
    for key, value in options.items():
        if key not in known:
            raise TypeError(f"{who}() got an unexpected keyword argument {key!r}"
                            f"{_did_you_mean(key, list(known))}; its options are: {', '.join(known)}")
        groups[known[key]][key] = value
    return groups


def _did_you_mean(name: str, names) -> str:
    close = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


@dataclass(frozen=True)
class TimingOptions:
    """How a runner checks and times each candidate: one frozen record, validated when made
    (an :class:`OptionError` names the option and what it accepts), shared by ``LocalRunner``,
    ``RPCRunner``, the device server and ``tilecraft tune``.

    ``number``: calls per timed repeat (more if needed to fill ``min_repeat_ms``); ``repeat``:
    timings per candidate; ``timeout``: seconds a candidate may run (then ``RUN_TIMEOUT``);
    ``reference_timeout``: seconds the reference (naive schedule) may take to run once, at least
    ``timeout``; ``enable_cpu_cache_flush``: evict the caches before each repeat;
    ``check_correctness``: compare outputs with the reference's (``rtol``/``atol``);
    ``seed``: of the random inputs (``None``: a fresh one per task, see :meth:`seeded`);
    ``max_timing_s``: when the first (checking) call shows ``number × repeat`` runs would take
    longer, time the candidate with fewer runs (``None`` or 0: off).

    >>> t = TimingOptions(number=5, repeat=3)
    >>> TimingOptions.from_json(t.to_json()) == t
    True
    >>> t.replace(repeat=0)       # OptionError: timing option 'repeat' must be an integer from 1 to 10000, got 0
    """

    number: int = option(4, int, 1, 10**6)
    repeat: int = option(3, int, 1, 10**4)
    min_repeat_ms: float = option(0.0, float, 0, 60_000, unit="milliseconds")
    timeout: float = option(10.0, float, 0, 86_400, low_open=True, unit="seconds")
    reference_timeout: float = option(300.0, float, 0, 86_400, low_open=True, unit="seconds")
    enable_cpu_cache_flush: bool = option(False, bool)
    check_correctness: bool = option(True, bool)
    rtol: float = option(1e-3, float, 0)
    atol: float = option(1e-3, float, 0)
    seed: int | None = option(None, int, 0, 2**63 - 1, none_ok=True)
    max_timing_s: float | None = option(None, float, 0, 3600, zero_is_off=True, unit="seconds")

    def __post_init__(self):
        check_options(self, "timing option")

    def replace(self, **changes) -> "TimingOptions":
        """A copy with ``changes`` (validated).

        >>> TimingOptions().replace(number=10).number
        10
        """
        return replace(self, **changes)

    def seeded(self) -> "TimingOptions":
        """This record if it has a seed, else a copy with a fresh random one (runners call this
        once per task: every candidate of a task sees the same inputs).

        >>> TimingOptions(seed=7).seeded().seed
        7
        """
        if self.seed is not None:
            return self
        import numpy as np

        return replace(self, seed=int(np.random.SeedSequence().entropy % (2**31)))

    @property
    def reference_limit_s(self) -> float:
        """Seconds the reference may take: ``reference_timeout``, and never less than ``timeout``."""
        return max(self.reference_timeout, self.timeout)

    def to_dict(self) -> dict:
        """Plain, JSON-able data: ``{option name: value}``.

        >>> TimingOptions().to_dict()["number"]
        4
        """
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data) -> "TimingOptions":
        """The record of ``to_dict``'s data, validated (unknown names are refused, missing ones
        take their defaults).

        >>> TimingOptions.from_dict({"number": 5}).number
        5
        """
        return options_from_dict(cls, data, "timing option")

    def to_json(self) -> str:
        """The wire form: compact JSON text of ``to_dict``.

        >>> TimingOptions().to_json()[:12]
        '{"number":4,'
        """
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text) -> "TimingOptions":
        """The record of ``to_json``'s text, validated as if made here (an :class:`OptionError`
        otherwise; what a device server calls on every request).

        >>> TimingOptions.from_json('{"number": 0}')   # OptionError: timing option 'number' must be ...
        """
        if type(text) is not str:
            raise OptionError(f"timing options: expected JSON text, got {type(text).__name__}")
        try:
            data = json.loads(text)
        except ValueError as err:
            raise OptionError(f"timing options: not valid JSON ({err})") from None
        return cls.from_dict(data)


def resolve_timing(who: str, timing: TimingOptions | None, options: dict) -> TimingOptions:
    """The ``TimingOptions`` a runner ``who`` was given: ``timing`` (default: the defaults)
    with the options given by name replaced. Unknown names are a ``TypeError``.

    >>> resolve_timing("LocalRunner", None, {"number": 5}).number
    5
    """
    if timing is not None and not isinstance(timing, TimingOptions):
        raise TypeError(f"{who}(timing=...) takes a TimingOptions, got {type(timing).__name__} {timing!r}; "
                        f"give the options by name, e.g. {who}(timeout=10, number=4)")
    (named,) = split_options(who, options, TimingOptions)
    base = timing if timing is not None else TimingOptions()
    return base.replace(**named) if named else base


class TimingFront:
    """The options of a runner's ``timing`` record read as its attributes, as TVM scripts do
    (``runner.number``); setting one says how to change the record instead."""

    def __getattr__(self, name):
        if name != "timing" and name in TimingOptions.__dataclass_fields__ and "timing" in self.__dict__:
            return getattr(self.timing, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        if name in TimingOptions.__dataclass_fields__:
            raise AttributeError(f"{name} is part of the runner's TimingOptions (frozen): write "
                                 f"runner.timing = runner.timing.replace({name}=...)")
        super().__setattr__(name, value)


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
        from ..local import LocalBuilder

        builder = LocalBuilder()
    if runner is None or runner == "local":
        from ..local import LocalRunner

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
            from tilecraft.codegen.llvm_target import check_target   # a bad -mcpu fails here, once, not per candidate

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


def __getattr__(name):
    # TVM's ``autotvm.measure.LocalRunner`` / ``LocalBuilder`` live in ``local.py``, which imports
    # this module: reached lazily, on first use
    if name in ("LocalRunner", "LocalBuilder"):
        from .. import local
        return getattr(local, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
