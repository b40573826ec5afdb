"""Static memory planning: the kernel outputs of a graph share storage by liveness.

Afterwards every kernel node of the graph has a ``storage_id``, an index into the graph's
``"storage"`` list of byte sizes; the executor allocates one buffer per storage (64-byte
aligned) and gives each tensor a view of its storage. Two tensors share a storage only when
their lifetimes do not overlap: a tensor lives from the kernel that writes it to the last
kernel that reads it; a graph output lives to the end (it is never reused); a kernel's output
never shares with any of its own inputs (a kernel may read its inputs after it starts writing).
Inputs and weights are not planned (they have their own arrays).

The allocator walks the kernels in execution order with a free list, TVM's way: a tensor takes
the smallest free storage of at least its size within a size class (at most ``MATCH_RANGE``
times bigger), else the biggest free one within the class below (which grows to fit), else a
new one. Sizes are in bytes (``shape`` x the dtype's itemsize), so tensors of different dtypes
share storage too.

``lib.memory_summary()`` (``runtime/graph_executor.py``) reports the plan against one buffer
per tensor.

>>> graph = plan_memory(graph)                   # doctest: +SKIP
>>> print(lib.memory_summary())                  # doctest: +SKIP
memory: 24 intermediate tensors, 5.23 MB one buffer each, 1.61 MB planned in 3 storages (0.31x)
"""
from __future__ import annotations

import numpy as np

MATCH_RANGE = 16


def tensor_bytes(node: dict) -> int:
    return int(np.prod(node["shape"], dtype=np.int64)) * np.dtype(node["dtype"]).itemsize


def plan_memory(graph: dict) -> dict:
    """The graph with a ``storage_id`` on every kernel node and its ``"storage"`` sizes (a new
    dict; the graph given is not changed). See the module docstring for the rules."""
    nodes = [dict(n) for n in graph["nodes"]]
    outputs = set(graph["outputs"])
    last_use = {}
    for nid, node in enumerate(nodes):
        for i in node.get("inputs", ()):
            last_use[i] = nid
    storage: list = []          # bytes per storage
    free: list = []             # storage ids free now
    dies_after: dict = {}       # kernel id -> storage ids its step frees
    for nid, node in enumerate(nodes):
        if node["op"] != "kernel":
            continue
        size = tensor_bytes(node)
        sid = _take(free, storage, size)
        node["storage_id"] = sid
        if nid not in outputs:
            dies_after.setdefault(last_use.get(nid, nid), []).append(sid)
        # after this kernel ran, the tensors it was the last reader of (and its own output when
        # nothing reads it) are free
        free.extend(dies_after.pop(nid, ()))
    return dict(graph, nodes=nodes, storage=storage)


def _take(free: list, storage: list, size: int) -> int:
    """A storage id for ``size`` bytes (see the module docstring)."""
    fits = [s for s in free if size <= storage[s] <= size * MATCH_RANGE]
    if fits:
        sid = min(fits, key=lambda s: storage[s])
    else:
        smaller = [s for s in free if storage[s] < size and storage[s] * MATCH_RANGE >= size]
        if not smaller:
            storage.append(size)
            return len(storage) - 1
        sid = max(smaller, key=lambda s: storage[s])
        storage[sid] = size
    free.remove(sid)
    return sid
