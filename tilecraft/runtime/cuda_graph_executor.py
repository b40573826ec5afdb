"""The graph executor on the GPU: a model built with ``relay.build(mod, target="cuda")``.

The graph is the CPU executor's (``runtime/graph_executor.py``, format 1). Memory lives on the
device and is allocated once, when the executor is made: one allocation per planned storage
(the kernel outputs are views of their storage), one for all the weights (copied once, packed
64-byte aligned as in an exported library) and one per input. ``set_input`` copies an input to
the device, ``run()`` launches every kernel in order with the argument lists prepared (checked)
when the executor was made, and ``get_output`` copies an output back. The kernels are the
``CUDAModule``'s functions. With ``cuda_graph=True`` (``lib["default"](dev, cuda_graph=True)``)
the first ``run()`` captures the launches into a CUDA graph (the addresses never change) and
every ``run()`` replays it: one driver call instead of one Python launch per kernel.

Where the memory is and how a kernel runs is the executor's *device*: ``PyCUDADevice`` (a GPU
through pycuda, the default) or, injected by the caller, another with the same methods:
``relay.backend.cuda_executor.EmulatedDevice`` runs each kernel in the CUDA emulator on numpy
memory (the tests on machines without a GPU).

>>> lib = relay.build(mod, target="cuda", params=params)                 # doctest: +SKIP
>>> m = graph_executor.GraphModule(lib["default"](tilecraft.cuda(0)))    # doctest: +SKIP
>>> m.set_input("data", x); m.run(); y = m.get_output(0).numpy()        # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from .graph_executor import GRAPH_FORMAT, GraphExecutorError, GraphExecutorFactory, checked_input, pack_params
from .ndarray import NDArray, array


class DeviceView:
    """A typed view of device memory (an address, a shape, a dtype): what a kernel is passed.
    It has ``__cuda_array_interface__``, so CuPy and torch can wrap it without a copy."""

    __slots__ = ("ptr", "shape", "dtype")

    def __init__(self, ptr: int, shape, dtype):
        self.ptr, self.shape, self.dtype = int(ptr), tuple(int(d) for d in shape), np.dtype(dtype)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def reshape(self, shape) -> "DeviceView":
        return DeviceView(self.ptr, shape, self.dtype)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None}


class PyCUDADevice:
    """Device memory and kernel launches through pycuda (GPU ``index``)."""

    def __init__(self, module, index: int = 0):
        from . import cuda_runtime
        self.module, self.index = module, index
        self._rt = cuda_runtime
        cuda_runtime.context(index)
        self._keep: list = []

    def alloc(self, nbytes: int) -> int:
        mem = self._rt.driver().mem_alloc(max(int(nbytes), 1))
        self._keep.append(mem)
        return int(mem)

    def view(self, base: int, offset: int, shape, dtype) -> DeviceView:
        return DeviceView(base + offset, shape, dtype)

    def upload(self, dst: DeviceView, src: np.ndarray) -> None:
        self._rt.driver().memcpy_htod(dst.ptr, np.ascontiguousarray(src))

    def download(self, src: DeviceView) -> np.ndarray:
        out = np.empty(src.shape, src.dtype)
        self._rt.driver().memcpy_dtoh(out, src.ptr)
        return out

    def prepare(self, func: str, args: list):
        return self.module.get_function(func).prepare(args)

    def launch(self, steps: list) -> None:
        for calls in steps:
            for fn, grid, block, kargs, smem in calls:
                if grid is not None:
                    fn.prepared_call(grid, block, *kargs, shared_size=smem)

    def sync(self) -> None:
        self._rt.driver().Context.synchronize()

    def capture(self, steps: list):
        """``steps`` captured once into a CUDA graph; returns a function that replays it (on a
        blocking stream, so ordered with the synchronous copies of ``upload``/``download``)."""
        return _CapturedGraph(self._rt.driver(), steps)


class _CapturedGraph:
    """A CUDA graph of kernel launches, made by stream capture through the driver API (ctypes:
    pycuda has no graph calls in every version); calling it launches the graph."""

    _lib = None

    def __init__(self, drv, steps: list):
        import ctypes
        lib = _CapturedGraph._lib
        if lib is None:
            lib = _CapturedGraph._lib = ctypes.CDLL("libcuda.so.1")
        self._c, self._lib_ = ctypes, lib
        self.stream = drv.Stream()
        h = ctypes.c_void_p(int(self.stream.handle))
        self._h = h
        self._check("cuStreamBeginCapture_v2", h, ctypes.c_int(2))        # relaxed mode
        try:
            for calls in steps:
                for fn, grid, block, kargs, smem in calls:
                    if grid is not None:
                        fn.prepared_async_call(grid, block, self.stream, *kargs, shared_size=smem)
        finally:
            graph = ctypes.c_void_p()
            ended = lib.cuStreamEndCapture(h, ctypes.byref(graph))
        if ended:
            self._check("cuStreamEndCapture", h, ctypes.byref(graph), code=ended)
        self.graph, self.exec = graph, ctypes.c_void_p()
        self._check("cuGraphInstantiateWithFlags", ctypes.byref(self.exec), graph, ctypes.c_ulonglong(0))

    def _check(self, name: str, *args, code=None) -> None:
        rc = getattr(self._lib_, name)(*args) if code is None else code
        if rc:
            msg = self._c.c_char_p()
            self._lib_.cuGetErrorString(rc, self._c.byref(msg))
            raise GraphExecutorError(f"CUDA graph: {name} failed ({rc}: {(msg.value or b'?').decode()})")

    def __call__(self) -> None:
        self._check("cuGraphLaunch", self.exec, self._h)

    def __del__(self):
        try:
            self._lib_.cuGraphExecDestroy(self.exec)
            self._lib_.cuGraphDestroy(self.graph)
        except Exception:           # noqa: BLE001 -- interpreter shutdown
            pass


class CUDAGraphExecutor:
    """The state of one model running on the GPU (see the module docstring); the methods are
    the CPU executor's (TVM's ``GraphModule``)."""

    def __init__(self, graph: dict, module, params: dict, dev=None, device=None, cuda_graph: bool = False):
        if graph.get("format") != GRAPH_FORMAT:
            raise GraphExecutorError(f"graph format {graph.get('format')!r}; this runtime runs format {GRAPH_FORMAT}")
        self.graph, self.module, self.dev = graph, module, dev
        self.device = device if device is not None else PyCUDADevice(module, getattr(dev, "device_id", 0) or 0)
        d = self.device
        self.nodes = graph["nodes"]
        blob, table = pack_params({n["name"]: _param(params, n) for n in self.nodes if n["op"] == "param"})
        weights = d.alloc(len(blob))
        offsets = {p["name"]: p["offset"] for p in table}
        storages = [d.alloc(size) for size in graph.get("storage", ())]
        self.arrays, self.input_index = [], {}
        for nid, node in enumerate(self.nodes):
            shape, dtype = tuple(node["shape"]), node["dtype"]
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            if node["op"] == "param":
                arr = d.view(weights, offsets[node["name"]], shape, dtype)
            elif "storage_id" in node:
                arr = d.view(storages[node["storage_id"]], 0, shape, dtype)
            else:
                arr = d.view(d.alloc(nbytes), 0, shape, dtype)
            if node["op"] == "input":
                self.input_index[node["name"]] = nid
            self.arrays.append(arr)
        d.upload(d.view(weights, 0, (len(blob),), "uint8"), np.frombuffer(blob, np.uint8))
        self._steps = []
        for nid, node in enumerate(self.nodes):
            if node["op"] == "kernel":
                args = [self.arrays[i] for i in node["inputs"]] + [self.arrays[nid]]
                if "arg_shapes" in node:
                    args = [a.reshape(s) for a, s in zip(args, node["arg_shapes"])]
                self._steps.append(d.prepare(node["func"], args))
        self.outputs = list(graph["outputs"])
        self.cuda_graph, self._replay = bool(cuda_graph), None

    def set_input(self, key=None, value=None, **params) -> None:
        """Copy ``value`` (numpy, an NDArray) to input ``key`` (a name or a position) on the device."""
        if key is not None:
            self._set(key, value)
        for k, v in params.items():
            self._set(k, v)

    def _set(self, key, value) -> None:
        dst, src = checked_input(self.input_index, self.arrays, key, value)
        self.device.upload(dst, src)

    def run(self, **inputs) -> None:
        """Launch every kernel once (after setting ``inputs`` by name, if given); asynchronous on
        a GPU (``get_output`` waits)."""
        if inputs:
            self.set_input(**inputs)
        if not self.cuda_graph:
            self.device.launch(self._steps)
            return
        if self._replay is None:
            self._replay = self.device.capture(self._steps)
        self._replay()

    def get_num_outputs(self) -> int:
        return len(self.outputs)

    def get_num_inputs(self) -> int:
        return len(self.input_index)

    def get_input(self, key) -> NDArray:
        if isinstance(key, int):
            key = list(self.input_index)[key]
        return array(self.device.download(self.arrays[self.input_index[key]]))

    def get_output(self, index: int) -> NDArray:
        """Output ``index`` of the last run, copied to the host."""
        if not 0 <= index < len(self.outputs):
            raise GraphExecutorError(f"get_output: output {index} does not exist; the model has "
                                     f"{len(self.outputs)} output{'s' * (len(self.outputs) != 1)}")
        return array(self.device.download(self.arrays[self.outputs[index]]))

    def benchmark(self, device=None, func_name: str = "run", repeat: int = 5, number: int = 5,
                  min_repeat_ms: float = 0, end_to_end: bool = False):
        """Seconds per ``run()``, timed with CUDA events around ``number`` runs (after one
        warm-up), ``repeat`` times; a result with ``mean``, ``median``, ``min``, ``max``."""
        from .timing import ProfileResult
        if not isinstance(number, int) or number < 1:
            raise GraphExecutorError(f"benchmark: number must be a positive int, got {number!r}")
        drv = self.device._rt.driver()
        self.run()
        self.device.sync()
        start, end = drv.Event(), drv.Event()
        results = []
        for _ in range(repeat):
            start.record()
            for _ in range(number):
                self.run()
            end.record()
            end.synchronize()
            results.append(start.time_till(end) / 1e3 / number)
        return ProfileResult(sum(results) / len(results), tuple(results))


def _param(params: dict, node: dict) -> np.ndarray:
    if node["name"] not in params:
        raise GraphExecutorError(f"the graph needs the weight {node['name']!r}, which is not given")
    arr = np.asarray(params[node["name"]])
    if arr.shape != tuple(node["shape"]) or arr.dtype.name != node["dtype"]:
        raise GraphExecutorError(f"weight {node['name']!r}: expected {node['dtype']}{list(node['shape'])}, "
                                 f"got {arr.dtype.name}{list(arr.shape)}")
    return arr


class CUDAGraphExecutorFactory(GraphExecutorFactory):
    """A model built for the GPU: ``lib["default"](tilecraft.cuda(0))`` makes a
    :class:`CUDAGraphExecutor` (``cuda_graph=True``: runs replay a captured CUDA graph);
    ``lib["default"](dev, device=...)`` one on another device (the emulator); ``export_library`` writes the CUDA archive with the graph and the weights
    (or, to a ``.so`` path, a library with the model's C API)."""

    def __getitem__(self, name: str):
        if name == self.mod_name:
            return lambda dev=None, device=None, cuda_graph=False: CUDAGraphExecutor(
                self.graph, self.module, self.params, dev, device, cuda_graph)
        return super().__getitem__(name)

    def export_library(self, path) -> str:
        """Write one archive: the CUDA module's (manifest, cubin, CUDA C) plus ``graph.json``,
        ``params.json`` (the weights' table) and ``params.bin``; a path ending in ``.so`` gets a
        shared library with the model's C API instead (``runtime/model_capi_cuda.py``).

        >>> lib.export_library("model.tcuda"); lib.export_library("libnet.so")   # doctest: +SKIP
        """
        import os
        from .cuda_runtime import export_cuda
        if os.fspath(path).endswith(".so"):
            from .model_capi_cuda import export_cuda_c_library
            return export_cuda_c_library(self.graph, self.module, self.params, path)
        blob, table = pack_params(self.params)
        return export_cuda(self.module, path, extra={"graph.json": _json(self.graph),
                                                     "params.json": _json(table), "params.bin": blob})


def _json(obj) -> bytes:
    import json
    return json.dumps(obj).encode("utf-8")


def load_cuda_factory(module, files: dict) -> CUDAGraphExecutorFactory:
    """The model in a CUDA archive that has ``graph.json`` (``files``: name -> bytes)."""
    import json
    graph = json.loads(files["graph.json"])
    table = json.loads(files.get("params.json", b"[]"))
    blob = files.get("params.bin", b"")
    params = {}
    for p in table:
        count = int(np.prod(p["shape"], dtype=np.int64))
        params[p["name"]] = np.frombuffer(blob, p["dtype"], count, p["offset"]).reshape(p["shape"])
    return CUDAGraphExecutorFactory(graph, module, params)
