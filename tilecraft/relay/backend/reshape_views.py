"""Reshapes without kernels: a fused group that only reshapes its one input (``reshape``,
``squeeze``, ``expand_dims``: the same elements in the same order) copies nothing at run time.

Afterwards the executor's graph has no kernel node of such a group, except where a graph output
needs it as it is (an output that is a reshape of an input or weight, or of a value read
elsewhere too). The group's value is either

* the producer's own output, written in the reshaped shape (when a kernel computes the group's
  input and nothing else reads it): the producer's node takes the reshape's shape and passes
  its kernel the shapes it was compiled for (``arg_shapes``, views of the same memory), or
* a view of its input (an input, a weight, or a value read elsewhere too): every kernel reading
  it is passed views in the shapes it was compiled for.

The arrays are C-contiguous, so a view in another shape is the same bytes; memory planning
runs afterwards on the graph as it is (a view keeps its source alive until its last reader).
BERT's layer had two such kernels, each copying its 384 KB (0.05-0.09 ms per run).

>>> graph = elide_reshape_kernels(graph, {"fused_reshape"})      # doctest: +SKIP
"""
from __future__ import annotations

from ..ir import Call, Function, Var

VIEW_OPS = ("reshape", "squeeze", "expand_dims")


def is_reshape_group(fn: Function) -> bool:
    """Whether a primitive function only reshapes its one parameter (no copy needed)."""
    if len(fn.params) != 1:
        return False
    e = fn.body
    while type(e) is Call and not isinstance(e.op, Function) and e.op.name in VIEW_OPS and len(e.args) == 1:
        e = e.args[0]
    return e is fn.params[0] and type(e) is Var and fn.body is not e


def elide_reshape_kernels(graph: dict, reshape_kernels: set) -> dict:
    """``graph`` (format 1) without the kernel nodes of the functions named in
    ``reshape_kernels`` where that is possible (see the module docstring); a new dict, node
    indices renumbered."""
    nodes, outputs = graph["nodes"], graph["outputs"]
    uses = [0] * len(nodes)
    for node in nodes:
        for i in node.get("inputs", ()):
            uses[i] += 1
    for o in outputs:
        uses[o] += 1
    shape_of = [list(n["shape"]) for n in nodes]        # the shapes the kernels were compiled for
    new_nodes: list = []
    index: dict = {}
    own: set = set()          # old indices whose value is their node's own array in its shape
    for old, node in enumerate(nodes):
        if node["op"] == "kernel" and node["func"] in reshape_kernels and len(node["inputs"]) == 1:
            src = node["inputs"][0]
            producer = new_nodes[index[src]]
            if producer["op"] == "kernel" and uses[src] == 1 and src in own:
                if "arg_shapes" not in producer:
                    producer["arg_shapes"] = [shape_of[i] for i in producer["_old_inputs"]] + [shape_of[src]]
                producer["shape"] = list(node["shape"])
                index[old] = index[src]
                own.add(old)
                continue
            if old not in outputs:
                index[old] = index[src]
                continue
        node = dict(node)
        if node["op"] == "kernel":
            node["_old_inputs"] = list(node["inputs"])
            node["inputs"] = [index[i] for i in node["inputs"]]
        index[old] = len(new_nodes)
        own.add(old)
        new_nodes.append(node)
    for node in new_nodes:
        if node["op"] == "kernel":
            old_inputs = node.pop("_old_inputs")
            if "arg_shapes" not in node and any(new_nodes[n]["shape"] != shape_of[o]
                                                for n, o in zip(node["inputs"], old_inputs)):
                node["arg_shapes"] = [shape_of[o] for o in old_inputs] + [list(node["shape"])]
    out = dict(graph)
    out["nodes"] = new_nodes
    out["outputs"] = [index[o] for o in outputs]
    return out
