"""TVM's ``tvm.contrib.graph_executor``: run a model built by ``relay.build``.

>>> lib = relay.build(mod, target="llvm", params=params)                 # doctest: +SKIP
>>> m = graph_executor.GraphModule(lib["default"](tilecraft.cpu(0)))     # doctest: +SKIP
>>> m.set_input("data", x); m.run(); y = m.get_output(0).numpy()        # doctest: +SKIP
>>> print(m.benchmark(tilecraft.cpu(0), repeat=3, number=10))            # doctest: +SKIP
"""
from __future__ import annotations

from ..runtime.graph_executor import GraphExecutor, GraphExecutorError


class GraphModule:
    """A wrapper of an executor with TVM's method names (``set_input``, ``run``,
    ``get_output``, ``get_input``, ``get_num_outputs``, ``get_num_inputs``, ``benchmark``)."""

    def __init__(self, module):
        from ..runtime.cuda_graph_executor import CUDAGraphExecutor
        if not isinstance(module, (GraphExecutor, CUDAGraphExecutor)):
            raise GraphExecutorError(f"GraphModule expects lib['default'](dev), got {type(module).__name__}")
        self.module = module

    def set_input(self, key=None, value=None, **params):
        self.module.set_input(key, value, **params)

    def run(self, **inputs):
        self.module.run(**inputs)

    def get_output(self, index: int, out=None):
        res = self.module.get_output(index)
        if out is not None:
            out.copyfrom(res) if hasattr(out, "copyfrom") else out.__setitem__(..., res.numpy())
            return out
        return res

    def get_input(self, key):
        return self.module.get_input(key)

    def get_num_outputs(self) -> int:
        return self.module.get_num_outputs()

    def get_num_inputs(self) -> int:
        return self.module.get_num_inputs()

    def benchmark(self, device=None, func_name: str = "run", repeat: int = 5, number: int = 5,
                  min_repeat_ms: float = 0, end_to_end: bool = False):
        """Seconds per ``run()`` (``.mean``, ``.median``, ...)."""
        return self.module.benchmark(device, func_name, repeat, number, min_repeat_ms, end_to_end)


    def profile(self, number: int = 10) -> list:
        """``[(kernel, calls per run, median ms per run)]``, the slowest first (see
        ``GraphExecutor.profile``)."""
        return self.module.profile(number)
