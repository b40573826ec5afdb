"""TVM's module path ``autotvm.task.task`` (``from tvm.autotvm.task.task import compute_flop``):
the task names, which live in ``tilecraft.autotune.task``; the same objects."""
from . import (FlopCountError, Task, compute_flop, create, get_config, template)  # noqa: F401
