"""The graph executor: runs a built model's kernels in order over its inputs and weights.

A *graph* is the JSON-able plan ``relay.build`` writes (format 1)::

    {"format": 1,
     "nodes": [{"op": "input",  "name": "data", "shape": [1, 3, 8, 8], "dtype": "float32"},
               {"op": "param",  "name": "p0",   "shape": [4, 3, 3, 3], "dtype": "float32"},
               {"op": "kernel", "name": "fused_nn_conv2d_nn_relu", "func": "fused_nn_conv2d_nn_relu",
                "inputs": [0, 1], "shape": [1, 4, 8, 8], "dtype": "float32"}],
     "outputs": [2]}

Nodes come in execution order; a kernel node calls the module function ``func`` with the arrays
of its ``inputs`` (node ids) and then its own output array, reshaped (views of the same memory)
to its ``arg_shapes`` when it has them (a row-reduction template that takes ``[rows, N]``).
A planned graph (``relay/backend/memory_plan.py``) also has ``"storage": [bytes, ...]`` and a
``storage_id`` on each kernel node: the executor allocates one 64-byte aligned buffer per
storage and each kernel output is a view of its storage (tensors whose lifetimes do not overlap
share memory); without them every kernel output has a buffer of its own. The executor lives in
the runtime: a library loaded with ``load_module`` runs it without the compiler.

>>> ex = GraphExecutor(graph, module, params, tilecraft.cpu(0))      # doctest: +SKIP
>>> ex.set_input("data", x); ex.run(); y = ex.get_output(0).numpy()  # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from .ndarray import NDArray, array
from .threads import mark_parallel_used

GRAPH_FORMAT = 1


class GraphExecutorError(ValueError):
    """A wrong input name, shape or dtype, or a graph this runtime cannot run."""


def checked_input(input_index: dict, arrays: list, key, value):
    """``(destination, source)`` of ``set_input(key, value)`` (``key`` an input's name or position;
    ``value`` numpy or an NDArray), or a GraphExecutorError naming what differs; the CPU and the
    CUDA executors both set inputs through it.

    >>> dst, src = checked_input({"x": 0}, [np.zeros(2, "float32")], 0, np.ones(2, "float32"))
    """
    names = list(input_index)
    if isinstance(key, int):
        if not 0 <= key < len(names):
            raise GraphExecutorError(f"set_input: input {key} does not exist; the model has {len(names)} "
                                     f"input{'s' * (len(names) != 1)} ({', '.join(names)})")
        key = names[key]
    if key not in input_index:
        raise GraphExecutorError(f"set_input: the model has no input {key!r}; its inputs: {', '.join(names)}")
    dst = arrays[input_index[key]]
    src = value.numpy() if isinstance(value, NDArray) else np.asarray(value)
    if src.shape != dst.shape:
        raise GraphExecutorError(f"set_input: input {key!r} has shape {list(dst.shape)}, got {list(src.shape)}")
    if src.dtype != dst.dtype:
        raise GraphExecutorError(f"set_input: input {key!r} has dtype {dst.dtype.name}, got {src.dtype.name}")
    return dst, src


class GraphExecutor:
    """The state of one running model: its input, weight and intermediate arrays."""

    def __init__(self, graph: dict, module, params: dict, dev=None):
        if graph.get("format") != GRAPH_FORMAT:
            raise GraphExecutorError(f"graph format {graph.get('format')!r}; this runtime runs format {GRAPH_FORMAT}")
        self.graph, self.module, self.device = graph, module, dev
        self.nodes = graph["nodes"]
        self.arrays = []
        self.input_index = {}
        self._steps = []
        storage = [_aligned_bytes(size) for size in graph.get("storage", ())]
        for nid, node in enumerate(self.nodes):
            shape, dtype = tuple(node["shape"]), node["dtype"]
            if node["op"] == "param":
                if node["name"] not in params:
                    raise GraphExecutorError(f"the graph needs the weight {node['name']!r}, which is not given")
                arr = np.asarray(params[node["name"]])
                if arr.shape != shape or arr.dtype.name != dtype:
                    raise GraphExecutorError(f"weight {node['name']!r}: expected {dtype}{list(shape)}, "
                                             f"got {arr.dtype.name}{list(arr.shape)}")
            elif "storage_id" in node:      # a view of shared storage (planned memory)
                count = int(np.prod(shape, dtype=np.int64))
                arr = storage[node["storage_id"]][:count * np.dtype(dtype).itemsize].view(dtype).reshape(shape)
            else:
                arr = np.zeros(shape, dtype)
            if node["op"] == "input":
                self.input_index[node["name"]] = nid
            self.arrays.append(arr)
        for nid, node in enumerate(self.nodes):
            if node["op"] == "kernel":
                func = module.get_function(node["func"])
                args = [self.arrays[i] for i in node["inputs"]] + [self.arrays[nid]]
                if "arg_shapes" in node:     # a kernel on other views of the same memory (2-d rows)
                    args = [a.reshape(shape) for a, shape in zip(args, node["arg_shapes"])]
                # the arrays never move: their shapes, dtypes and addresses are checked once here
                self._steps.append((func, func._prepare(args)))
        self.outputs = list(graph["outputs"])
        self._parallel = any(f.parallel for f, _ in self._steps)

    # --- TVM's GraphModule surface ---------------------------------------------------------
    def set_input(self, key=None, value=None, **params) -> None:
        """Copy ``value`` into input ``key`` (a name or a position); keyword arguments set
        several inputs by name."""
        if key is not None:
            self._set(key, value)
        for k, v in params.items():
            self._set(k, v)

    def _set(self, key, value) -> None:
        dst, src = checked_input(self.input_index, self.arrays, key, value)
        np.copyto(dst, src)

    def run(self, **inputs) -> None:
        """Run every kernel once (after setting ``inputs`` by name, if given)."""
        if inputs:
            self.set_input(**inputs)
        if self._parallel:
            mark_parallel_used()
        for func, raw in self._steps:
            rc = func._cfunc(*raw)
            if rc:
                func._check_rc(rc)

    def get_num_outputs(self) -> int:
        return len(self.outputs)

    def get_num_inputs(self) -> int:
        return len(self.input_index)

    def get_input(self, key) -> NDArray:
        """The current value of an input (by name or position)."""
        if isinstance(key, int):
            key = list(self.input_index)[key]
        return array(self.arrays[self.input_index[key]])

    def get_output(self, index: int) -> NDArray:
        """Output ``index`` of the last run (a copy)."""
        if not 0 <= index < len(self.outputs):
            raise GraphExecutorError(f"get_output: output {index} does not exist; the model has "
                                     f"{len(self.outputs)} output{'s' * (len(self.outputs) != 1)}")
        return array(self.arrays[self.outputs[index]])

    def benchmark(self, device=None, func_name: str = "run", repeat: int = 5, number: int = 5,
                  min_repeat_ms: float = 0, end_to_end: bool = False):
        """Time ``run()``: ``repeat`` measurements of ``number`` runs each (TVM's
        ``GraphModule.benchmark``); returns a result with ``mean``, ``median``, ``min``,
        ``max``, ``std`` and ``results`` (seconds per run)."""
        from .timing import time_evaluator
        return time_evaluator(_RunAll(self), device, number, repeat, min_repeat_ms)()

    def profile(self, number: int = 10) -> list:
        """Where a run's time goes: ``[(kernel name, calls per run, median ms per run)]`` over
        ``number`` runs after one warm-up, the slowest first (the median of each kernel's
        per-run total; a kernel called several times per run sums its calls).

        >>> for name, calls, ms in ex.profile(10)[:5]:               # doctest: +SKIP
        ...     print(f"{ms:7.2f} ms  {calls}x  {name}")
        """
        import time
        if self._parallel:
            mark_parallel_used()
        names = [n["func"] for n in self.nodes if n["op"] == "kernel"]
        self.run()
        per_run = []
        for _ in range(max(1, number)):
            totals: dict = {}
            for (func, raw), name in zip(self._steps, names):
                t = time.perf_counter()
                rc = func._cfunc(*raw)
                totals[name] = totals.get(name, 0.0) + time.perf_counter() - t
                if rc:
                    func._check_rc(rc)
            per_run.append(totals)
        calls = {name: names.count(name) for name in set(names)}
        rows = [(name, calls[name], float(np.median([r[name] for r in per_run])) * 1e3) for name in calls]
        return sorted(rows, key=lambda r: -r[2])


def _aligned_bytes(size: int) -> np.ndarray:
    """``size`` zeroed bytes starting at a 64-byte boundary (a cache line, an AVX-512 vector)."""
    raw = np.zeros(size + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + size]


def memory_use(graph: dict) -> dict:
    """The intermediate memory of a graph: ``{"tensors", "per_tensor_bytes", "planned_bytes",
    "storages"}`` (kernel outputs; one buffer per tensor against the planned storage, equal
    when the graph is not planned)."""
    sizes = [int(np.prod(n["shape"], dtype=np.int64)) * np.dtype(n["dtype"]).itemsize
             for n in graph["nodes"] if n["op"] == "kernel"]
    planned = graph.get("storage")
    return {"tensors": len(sizes), "per_tensor_bytes": sum(sizes),
            "planned_bytes": sum(planned) if planned is not None else sum(sizes),
            "storages": len(planned) if planned is not None else len(sizes)}


class _RunAll:
    """``run`` in the shape of a compiled function, for the time evaluator."""
    name = "run"

    def __init__(self, ex):
        self.ex = ex
        self.parallel = any(f.parallel for f, _ in ex._steps)

    def _prepare(self, args) -> list:
        return []

    def _cfunc(self) -> int:
        self.ex.run()
        return 0

    def _check_rc(self, rc) -> None:
        pass


class GraphExecutorFactory:
    """A built model: kernels, graph and weights. ``factory["default"](dev)`` makes an executor
    (TVM's ``GraphExecutorFactoryModule``); ``export_library`` writes all three into one file."""

    def __init__(self, graph: dict, module, params: dict, exporter=None):
        self.graph, self.module, self.params = graph, module, dict(params)
        self._exporter = exporter

    @property
    def mod_name(self) -> str:
        return self.graph.get("mod_name", "default")

    def __getitem__(self, name: str):
        if name == self.mod_name:
            return lambda dev=None: GraphExecutor(self.graph, self.module, self.params, dev)
        if name == "default":
            raise GraphExecutorError(f"this model was built with mod_name={self.mod_name!r}: make its executor "
                                     f"with lib[{self.mod_name!r}](dev)")
        return self.module[name]

    def get_graph_json(self) -> str:
        import json
        return json.dumps(self.graph)

    def memory_summary(self) -> str:
        """One line: the kernel outputs' memory as planned against one buffer per tensor.

        >>> print(lib.memory_summary())     # doctest: +SKIP
        memory: 24 intermediate tensors, 5.23 MB one buffer each, 1.61 MB planned in 3 storages (0.31x)
        """
        m = memory_use(self.graph)
        ratio = m["planned_bytes"] / m["per_tensor_bytes"] if m["per_tensor_bytes"] else 1.0
        return (f"memory: {m['tensors']} intermediate tensors, {m['per_tensor_bytes'] / 1e6:.2f} MB one buffer "
                f"each, {m['planned_bytes'] / 1e6:.2f} MB planned in {m['storages']} storages ({ratio:.2f}x)")

    def get_params(self) -> dict:
        return dict(self.params)

    def get_lib(self):
        return self.module

    def export_library(self, path) -> str:
        """Write one shared library: every kernel, the graph and the weights."""
        if self._exporter is None:
            raise GraphExecutorError("this model cannot be exported from here")
        return self._exporter(self, path)

    def __repr__(self) -> str:
        kernels = sum(1 for n in self.graph["nodes"] if n["op"] == "kernel")
        return f"<GraphExecutorFactory {kernels} kernels, {len(self.params)} weights>"


PARAMS_SYMBOL = "tilecraft_params"


def pack_params(params: dict) -> tuple[bytes, list]:
    """The weights as one blob (each 64-byte aligned) and their table ``[{name, shape, dtype,
    offset}]`` for the manifest."""
    chunks, table, offset = [], [], 0
    for name, value in params.items():
        arr = np.ascontiguousarray(value)
        pad = -offset % 64
        chunks.append(b"\0" * pad)
        offset += pad
        table.append({"name": name, "shape": list(arr.shape), "dtype": arr.dtype.name, "offset": offset})
        chunks.append(arr.tobytes())
        offset += arr.nbytes
    return b"".join(chunks) or b"\0", table


def load_factory(module, info: dict, lib) -> GraphExecutorFactory:
    """The model of a library loaded by ``load_module``: its weights are read-only views of the
    library's ``tilecraft_params`` data (no copy)."""
    import ctypes
    params = {}
    table = info.get("params", [])
    if table:
        base = ctypes.addressof(ctypes.c_char.in_dll(lib, PARAMS_SYMBOL))
        end = max(p["offset"] + int(np.prod(p["shape"], dtype=np.int64)) * np.dtype(p["dtype"]).itemsize
                  for p in table)
        blob = (ctypes.c_char * end).from_address(base)
        for p in table:
            count = int(np.prod(p["shape"], dtype=np.int64))
            arr = np.frombuffer(blob, dtype=p["dtype"], count=count, offset=p["offset"]).reshape(p["shape"])
            arr.flags.writeable = False      # the library's read-only data
            params[p["name"]] = arr
    return GraphExecutorFactory(info["graph"], module, params, exporter=_reexport)


def _reexport(factory, path):
    return factory.module.export_library(path)
