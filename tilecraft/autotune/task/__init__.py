"""Templates and tasks.

A *template* is a function that builds a schedule with knobs; a *task* is a template with its
arguments fixed, plus the config space those arguments give::

    @autotune.template("example/matmul")
    def matmul(N, L, M, dtype):
        A = te.placeholder((N, L), name="A", dtype=dtype)
        ...
        cfg = autotune.get_config()
        cfg.define_split("tile_y", y, num_outputs=2)
        yo, yi = cfg["tile_y"].apply(s, C, y)
        return s, [A, B, C]

    task = autotune.task.create("example/matmul", args=(512, 512, 512, "float32"), target="llvm")
    print(task.config_space)
    s, args = task.instantiate(task.config_space.get(17))

Calling the decorated function directly (``matmul(512, 512, 512, "float32")``) asks the current
dispatch context (``apply_history_best``, or the fallback) for the configuration of this workload
on ``Target.current()``.

The workload ``(name, *args)`` identifies a task in logs: the arguments must be JSON-able values
(numbers, strings, booleans, None, nested lists/tuples); tensors are written as
``["TENSOR", shape, dtype]``.
"""
from __future__ import annotations

import functools
import importlib
import warnings
from typing import Callable

import numpy as np

from tilecraft.target import Target

from ...error import TVMError
from ..dispatch import ApplyConfig, DispatchContext
from . import space                      # TVM's module path autotvm.task.space (the names of ..space)
from ..space import ConfigEntity, ConfigSpace, FallbackConfigEntity, StaleConfigError

_stale_warned: set = set()

#: Template name → decorated template function. Filled by ``@template`` when a module that
#: defines templates is imported (tilecraft.topi, or the user's own module).
TASK_TABLE: dict[str, Callable] = {}


def serialize_args(args) -> tuple:
    """Template arguments → a hashable, JSON-able tuple."""
    def conv(x):
        if isinstance(x, (bool, str)) or x is None:
            return x
        if isinstance(x, (int, np.integer)):
            return int(x)
        if isinstance(x, (float, np.floating)):
            return float(x)
        if isinstance(x, (list, tuple)):
            return tuple(conv(a) for a in x)
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
        if shape is not None and dtype is not None:
            return ("TENSOR", tuple(_const_int(d) for d in shape), str(dtype))
        raise TypeError(f"template argument {x!r} of type {type(x).__name__} cannot be part of a "
                        "workload: use numbers, strings, tuples or tensors")
    return tuple(conv(a) for a in args)


def _const_int(d):
    if isinstance(d, (int, np.integer)):
        return int(d)
    v = getattr(d, "value", None)
    if isinstance(v, (int, np.integer)):
        return int(v)
    return str(d)


def args_to_workload(args, task_name: str) -> tuple:
    return (task_name,) + serialize_args(args)


def _to_tuple(x):
    return tuple(_to_tuple(a) for a in x) if isinstance(x, (list, tuple)) else x


def workload_from_json(w) -> tuple:
    """A workload read back from JSON (lists) → the tuple form used as a dictionary key."""
    return _to_tuple(w)


def template(task_name: str, func: Callable | None = None):
    """Register ``func`` as the tuning template ``task_name`` (usable as a decorator).

    The returned function, when called, runs ``func`` with ``get_config()`` answering the
    configuration the current dispatch context chooses for this workload.
    """
    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            if kwargs:
                raise TypeError(f"template {task_name!r} takes positional arguments only "
                                "(they form the workload that identifies the task)")
            workload = args_to_workload(args, task_name)
            target = Target.current()
            cfg = DispatchContext.current().query(target, workload)
            try:
                with ApplyConfig(cfg):
                    return f(*args)
            except StaleConfigError as err:
                if not isinstance(cfg, ConfigEntity):
                    raise
                # a log written for an older version of the template: say so, use the fallback
                key = (str(target), workload)
                if key not in _stale_warned:
                    _stale_warned.add(key)
                    warnings.warn(f"the tuned configuration for workload {list(workload)!r} does not fit "
                                  f"template {task_name!r} any more ({err}): using the fallback "
                                  "configuration. Tune this workload again.", UserWarning, stacklevel=2)
                with ApplyConfig(FallbackConfigEntity()):
                    return f(*args)

        wrapper.template_name = task_name
        TASK_TABLE[task_name] = wrapper
        return wrapper

    return decorate(func) if func is not None else decorate


def get_config():
    """The configuration (or, while a task is created, the config space) of the template being
    run. Call it once at the top of a template."""
    return DispatchContext.current().query(Target.current(), None)


# modules that are a running script: another process cannot import them by name
_SCRIPT_MODULES = ("__main__", "__mp_main__")


class FlopCountError(ValueError, TVMError):
    """The FLOPs of a schedule cannot be counted (a RuntimeError, as TVM's)."""


class TemplateTransferError(TypeError):
    """A template defined in the running script cannot be sent to the worker processes."""


class Task:
    """A template with fixed arguments, on one target.

    ``task.config_space``: the knobs; ``task.flop``: floating-point operations per run (from
    ``cfg.add_flop`` or counted on the compute graph); ``task.workload``: ``(name, *args)``;
    ``task.instantiate(config)`` → ``(schedule, args)``.

    A task is pickled by reference (name, arguments, target, template module): the process that
    unpickles it imports the module to find the template again. A template defined in the
    running script (``__main__``), which another process cannot import, travels by value
    (cloudpickle, only ever between this process and its own workers; the device pool receives
    names and numbers, never pickles).
    """

    def __init__(self, name: str, args, target=None, func: Callable | None = None,
                 template_module: str | None = None):
        self.name = name
        self.args = serialize_args(args)
        self.target = Target(target) if target is not None else None
        self._func = func
        self.template_module = template_module or (func.__module__ if func is not None else None)
        self.config_space: ConfigSpace | None = None
        self.flop: float = 0.0
        self.count = 1          # kernel calls of a model that run this workload (extract_from_program)

    @property
    def func(self) -> Callable:
        if self._func is None:
            if self.name not in TASK_TABLE and self.template_module:
                importlib.import_module(self.template_module)
            if self.name not in TASK_TABLE:
                raise KeyError(f"no template named {self.name!r} is registered; import the module "
                               "that defines it (tilecraft.topi, or your own) first")
            self._func = TASK_TABLE[self.name]
        return self._func

    @property
    def workload(self) -> tuple:
        return (self.name,) + self.args

    def instantiate(self, config):
        """The schedule and arguments of ``config`` (a ``ConfigEntity``); ``config.errors``
        lists what the template flagged with ``cfg.raise_error``."""
        config.errors = []
        with ApplyConfig(config):
            if self.target is not None:
                with self.target:
                    return self.func(*self.args)
            return self.func(*self.args)

    def __getstate__(self):
        state = {"name": self.name, "args": self.args,
                 "target": str(self.target) if self.target is not None else None,
                 "template_module": self.template_module, "flop": self.flop}
        if self.template_module in _SCRIPT_MODULES:
            state["template_by_value"] = self._template_bytes()
        return state

    def __setstate__(self, state):
        func = None
        blob = state.get("template_by_value")
        if blob is not None:
            import cloudpickle
            func = cloudpickle.loads(blob)
            TASK_TABLE.setdefault(state["name"], func)
        self.__init__(state["name"], state["args"], state["target"], func, state["template_module"])
        self.flop = state["flop"]
        self._template_blob = blob

    def _template_bytes(self) -> bytes:
        blob = getattr(self, "_template_blob", None)
        if blob is None:
            import cloudpickle
            try:
                blob = self._template_blob = cloudpickle.dumps(self.func)
            except Exception as err:
                raise TemplateTransferError(
                    f"the template {self.name!r} is defined in the running script and must be sent to "
                    f"the build and run worker processes, but it cannot be pickled: {err}. It (or a "
                    "global it uses) holds something like a lock, an open file or a socket; create "
                    "that inside the template, or move the template into a module") from err
        return blob

    def __repr__(self) -> str:
        return f"Task(name={self.name!r}, args={self.args!r}, target={str(self.target)!r})"


def create(task_name: str, args, target="llvm", target_host=None) -> Task:
    """Create the task of template ``task_name`` with ``args`` on ``target``: runs the template
    once to collect its config space and count its FLOPs."""
    if task_name not in TASK_TABLE:
        raise KeyError(f"no template named {task_name!r} is registered (known: "
                       f"{', '.join(sorted(TASK_TABLE)) or 'none'}); import the module that defines it")
    func = TASK_TABLE[task_name]
    task = Task(task_name, args, target, func)
    if task.target is not None and task.target.kind == "llvm":
        from tilecraft.codegen.llvm_target import check_target   # a bad -mcpu must fail here, once

        check_target(task.target)
    space, sch = collect_space(func, task.args, task.target)
    task.config_space = space
    if space.flop:
        task.flop = float(space.flop)
    else:
        try:
            task.flop = float(compute_flop(sch))
        except FlopCountError as err:
            warnings.warn(f"task {task_name!r}: {err}; GFLOP/s will read as 1/seconds. "
                          "Call cfg.add_flop(n) in the template.", stacklevel=2)
            task.flop = 0.0
    return task


def collect_space(func: Callable, args, target=None):
    """Run template ``func`` once in collect mode: ``(its ConfigSpace for args on target, the
    schedule it returned)``."""
    space = ConfigSpace()
    with ApplyConfig(space):
        if target is not None:
            with Target(target):
                sch, _ = func(*args)
        else:
            sch, _ = func(*args)
    return space, sch


def compute_flop(sch) -> float:
    """Floating-point operations of the compute ops of ``sch``'s outputs, counted on the TE
    graph: (arithmetic ops in the body) × (iterations of spatial and reduce axes)."""
    from ..flop import count_flop  # needs the compiler core

    try:
        return count_flop(sch)
    except FlopCountError:
        raise
    except Exception as err:  # an unfamiliar graph: report, never crash task creation
        raise FlopCountError(f"cannot count FLOPs ({type(err).__name__}: {err})") from err



def extract_from_program(mod, target="llvm", params: dict | None = None, ops=None, target_host=None) -> list:
    """One task per distinct tunable workload of a graph-level model (TVM's
    ``autotvm.task.extract_from_program``): ``mod`` is ``mod["main"]`` of a ``relay`` module (or
    the module), ``params`` its weights, ``ops`` optionally the operators to keep
    (``relay.op.get("nn.conv2d")`` or names). The workloads are the very keys ``relay.build``
    asks ``apply_history_best`` for, so tuning these tasks into a log and building inside
    ``apply_history_best(log)`` uses the results. ``task.count`` is how many kernel calls of the
    model run the workload (``tune_tasks`` weighs the trial budget by it).

    >>> tasks = autotune.task.extract_from_program(mod["main"], target="llvm", params=params)  # doctest: +SKIP
    """
    if not hasattr(mod, "tuning_workloads"):
        raise TypeError(f"extract_from_program expects a relay Function (mod['main']) or IRModule, "
                        f"got {type(mod).__name__}")
    tasks = []
    for workload, count, _ in mod.tuning_workloads(target, params, ops):   # relay, received by injection
        task = create(workload[0], workload[1:], target, target_host)
        task.count = count
        tasks.append(task)
    return tasks
