"""What a device server's child process runs: LocalRunner's own measuring code, given paths.

``tilecraft.autotune.local`` does the work (load with ``load_module``, compare with the saved
reference outputs, time with ``time_evaluator``); these wrappers only adapt its arguments,
since a server has a library path and a target string rather than a task.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..autotune.local import default_run_func, prepare_reference
from ..autotune.measure import BuildResult, MeasureInput, TimingOptions


@dataclass(frozen=True)
class _TargetOnly:
    """What ``default_run_func`` reads of a task: its target, and the recipe of its inputs
    (``autotune.inputs``; ``()``: random arrays) as the client sent it."""

    target: str
    input_recipe: tuple = ()


def run_library(path: str, arg_info: tuple, target: str, timing: TimingOptions, ref_outputs: str | None,
                recipe: tuple = ()):
    """Check and time the library at ``path`` as ``timing`` says, on the inputs of ``recipe``
    and ``timing.seed``; ``(costs, error_no, error_msg)``.

    ``ref_outputs``: the path :func:`prepare_reference_outputs` returned, or ``None`` for no check.
    """
    inp = MeasureInput(target, _TargetOnly(target, recipe), None)
    return default_run_func(inp, BuildResult(path, arg_info), timing, ref_outputs)


def prepare_reference_outputs(reference: str, arg_info: tuple, seed: int, target: str, recipe: tuple = ()) -> str:
    """Run the reference library on the inputs of ``recipe`` and ``seed`` once; the path of its
    saved outputs."""
    return prepare_reference(reference, arg_info, seed, target, _TargetOnly(target, recipe))


def warm_up() -> bool:
    """Import the compiler and runtime in a fresh worker before the first candidate arrives."""
    import tilecraft.runtime  # noqa: F401

    return True
