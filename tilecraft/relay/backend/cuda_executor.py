"""Run a model built for ``target="cuda"`` without a GPU: every kernel in the CUDA emulator.

``EmulatedDevice`` has the methods of ``runtime.cuda_graph_executor.PyCUDADevice`` (alloc,
view, upload, download, prepare, launch, sync) over numpy memory, and runs each kernel's
lowered ``PrimFunc`` with ``codegen.cuda_emulate.emulate`` (lock-step threads, shared- and
global-memory race checks). Memory starts as NaN bytes, so an output element no kernel writes
shows. It is slow (a Python interpreter of every thread): small shapes only. The tests run the
whole GPU flow with it on machines without a GPU.

>>> lib = relay.build(mod, target="cuda", params=params)            # doctest: +SKIP
>>> m = graph_executor.GraphModule(emulated_executor(lib))          # doctest: +SKIP
>>> m.set_input("data", x); m.run(); y = m.get_output(0).numpy()   # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np


class EmulatedDevice:
    """Device memory as numpy bytes; kernels run in the CUDA emulator."""

    def __init__(self, module, check_races: bool = True):
        self.module, self.check_races = module, check_races
        self._memory: dict = {}          # base address -> its bytes
        self._next = 1 << 20

    def alloc(self, nbytes: int) -> int:
        base = self._next
        self._next += (int(nbytes) + 255) // 256 * 256 + 256
        self._memory[base] = np.full(max(int(nbytes), 1), 0xFF, np.uint8)    # NaN in every float
        return base

    def view(self, base: int, offset: int, shape, dtype) -> np.ndarray:
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * np.dtype(dtype).itemsize
        return self._memory[base][offset:offset + nbytes].view(dtype).reshape(shape)

    def upload(self, dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src.reshape(dst.shape))

    def download(self, src: np.ndarray) -> np.ndarray:
        return src.copy()

    def prepare(self, func: str, args: list):
        if func not in self.module.funcs:
            raise KeyError(f"the module has no function {func!r}")
        return self.module.funcs[func], args

    def launch(self, steps: list) -> None:
        from tilecraft.codegen.cuda_emulate import emulate
        for func, args in steps:
            emulate(func, args, check_races=self.check_races)

    def sync(self) -> None:
        pass

    def capture(self, steps: list):
        """What a CUDA graph of ``steps`` does when replayed: launch them in order."""
        return lambda: self.launch(steps)


def emulated_executor(lib, mod_name: str = "default", check_races: bool = True, cuda_graph: bool = False):
    """An executor of a model built for ``cuda`` that runs in the CUDA emulator (see the
    module docstring); ``lib`` is what ``relay.build(..., target="cuda")`` returned."""
    return lib[mod_name](None, EmulatedDevice(lib.module, check_races), cuda_graph)
