"""tilecraft: a tensor-expression compiler with an auto-tuner.

Declare an operator with ``te.compute``, schedule it, build it for the CPU (LLVM) or an NVIDIA GPU
(CUDA C), run and time it, tune it, export it::

    import numpy as np, tilecraft as tc
    from tilecraft import te
    n = te.var("n")
    A = te.placeholder((n,), name="A"); B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=64)
    s[C].parallel(xo); s[C].vectorize(xi)
    f = tc.build(s, [A, B, C], target="llvm", name="vadd")

The API follows TVM's, so ``import tilecraft as tvm`` runs TVM scripts written against the
supported subset.
"""
__version__ = "0.1.0"

from . import arith, error, ir, te, target, tir, transform
from .ir import DTypeError
from .ir import container   # TVM's tvm.container.Map / Array
from .ir.packed import get_global_func, register_func
from .te import TEError
from .schedule import ScheduleError, create_schedule, lower
te.create_schedule = create_schedule   # TVM's te.create_schedule, handed to te (which sits below schedule)
from .schedule import hybrid_dump as _hybrid_dump
te.hybrid.build = _hybrid_dump.build   # TVM's te.hybrid.build (a schedule printed as a HybridModule)
from .schedule import te_passes as _te_passes
te.schedule = _te_passes               # TVM's te.schedule.InferBound, ScheduleOps, ... (schedule/te_passes.py)
from .te.json_io import load_json, save_json
ir.save_json, ir.load_json = save_json, load_json   # TVM's tvm.ir.save_json / load_json (te/json_io.py)
from .target import Target
from .codegen.build import build, BuildError
from .runtime import nd, cpu, cuda, device, load_module, set_num_threads, get_num_threads
from . import runtime, testing


_LAZY = ("autotune", "topi", "rpc", "interp", "relay", "contrib", "_ffi")
_ALIASES = {"autotvm": "autotune"}     # TVM's names: `tvm.autotvm.task.create(...)`, `from tilecraft import autotvm`


def __getattr__(name):
    # heavy or optional parts load on first use (import_module, not `from . import`, which would
    # ask this function again for the attribute)
    if name in _LAZY or name in _ALIASES:
        import importlib
        return importlib.import_module(f"{__name__}.{_ALIASES.get(name, name)}")
    raise AttributeError(f"module 'tilecraft' has no attribute {name!r}")
