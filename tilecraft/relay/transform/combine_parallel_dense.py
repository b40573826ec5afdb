"""``CombineParallelDense``: dense layers that read the same input become one dense layer.

Afterwards no ``min_num_branches`` (or more) ``nn.dense`` calls read the same data with
constant weights of the same dtype and depth ``K``: they are one ``nn.dense`` on the weights
concatenated along the output axis, and each former call is a ``strided_slice`` of its columns
(TVM's ``CombineParallelDense(to_batch=False)``). A transformer's query, key and value
projections are the case in point: one GEMM of ``M × 3N`` instead of three of ``M × N``, one
kernel, one read of the data, three times the columns to share among the threads. Dense calls
with another input, a non-constant weight, or fewer than ``min_num_branches`` siblings are left
as they are; the calls' order among their siblings is the graph's order, so the result is the
same graph whatever the traversal.

When every branch of a group adds a constant bias along its columns right after the layer (read
by nothing else, through at most one reshape that keeps the columns the last axis: the ONNX
importer's ``MatMul`` then ``Add``), the biases are concatenated too and added to the combined
result, so the GEMM's epilogue adds them and each branch's slice is its biased result (no
separate kernel adds Q's, K's and V's biases).

Run after ``EliminateCommonSubexpr`` (siblings must read the same node, not equal ones) and
before ``AlterOpLayout`` (which packs the combined weight for the micro-kernel GEMM).

    %1 = nn.dense(%x, W_q); %2 = nn.dense(%x, W_k); %3 = nn.dense(%x, W_v)
 →  %0 = nn.dense(%x, concat(W_q, W_k, W_v))
    %1 = strided_slice(%0, begin=[0], end=[768], axes=[1]); %2 = ... [768:1536]; %3 = ... [1536:2304]

    %1 = add(reshape(nn.dense(%x, W_q), [1, S, 768]), b_q); ...      (biases)
 →  %0 = add(nn.dense(%x, concat(W_q, W_k, W_v)), concat(b_q, b_k, b_v))
    %1 = reshape(strided_slice(%0, begin=[0], end=[768], axes=[1]), [1, S, 768]); ...

>>> mod = CombineParallelDense(min_num_branches=3)(InferType()(mod))      # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from .. import op as _op
from ..ir import Call, Constant, children, Function, RelayError, post_order, rewrite, with_children
from .infer_type import infer_expr
from .pass_infra import Pass


def _is_op(node, name: str) -> bool:
    return type(node) is Call and not isinstance(node.op, Function) and node.op.name == name


def _bias_add(dense: Call, readers: dict):
    """``(add call, bias vector)`` when ``dense``'s one reader is ``add(dense, bias)`` (either
    order), or ``reshape`` then that add with the columns still the last axis, and the bias a
    constant of the dense layer's dtype that varies along the columns only; else None."""
    n = dense.ty.shape[1]
    node = dense
    if len(readers.get(id(node), ())) != 1:
        return None
    (r,) = readers[id(node)]
    if _is_op(r, "reshape") and r.ty is not None and r.ty.shape and r.ty.shape[-1] == n:
        node = r
        if len(readers.get(id(node), ())) != 1:
            return None
        (r,) = readers[id(node)]
    if not _is_op(r, "add") or r.ty is None or r.ty.shape != node.ty.shape:
        return None
    other = r.args[1] if r.args[0] is node else r.args[0]
    if other is node or type(other) is not Constant or other.data.dtype.name != dense.ty.dtype:
        return None
    b = other.data
    if b.ndim == 0 or b.shape[-1] != n or any(d != 1 for d in b.shape[:-1]) or b.ndim > len(r.ty.shape):
        return None
    return r, b.reshape(n)


def _readers(body) -> dict:
    """``{id(node): [nodes reading it]}``: calls, tuples, the function's result (``None``); a
    node read twice by one call counts twice."""
    readers: dict = {id(body): [None]}
    for n in post_order(body):
        for a in children(n):
            readers.setdefault(id(a), []).append(n)
    return readers


def _branches(body, min_num_branches: int) -> tuple:
    """``({id(dense call): (group, column offset, columns)}, {group: combined weight},
    {group: combined bias}, {id(bias add): its dense call})`` of every group of sibling dense
    layers worth combining (a group has a bias when each of its branches adds one)."""
    groups: dict = {}
    for n in post_order(body):
        if type(n) is not Call or isinstance(n.op, Function) or n.op.name != "nn.dense":
            continue
        data, weight = n.args
        if type(weight) is not Constant or weight.data.ndim != 2 or n.ty is None:
            continue
        key = (id(data), weight.data.dtype.str, weight.data.shape[1], n.ty.dtype)
        groups.setdefault(key, []).append(n)
    plan, weights, biases, adds = {}, {}, {}, {}
    readers = None
    for key, calls in groups.items():
        if len(calls) < min_num_branches:
            continue
        weights[key] = Constant(np.concatenate([c.args[1].data for c in calls], axis=0))
        offset = 0
        for c in calls:
            n = c.args[1].data.shape[0]
            plan[id(c)] = (key, offset, n)
            offset += n
        readers = _readers(body) if readers is None else readers
        found = [_bias_add(c, readers) for c in calls]
        if all(f is not None for f in found):
            biases[key] = Constant(np.concatenate([b for _, b in found]))
            for c, (add, _) in zip(calls, found):
                adds[id(add)] = c
    return plan, weights, biases, adds


def combine_parallel_dense(f: Function, min_num_branches: int = 3) -> Function:
    """``f`` with its groups of sibling dense layers combined (see the module docstring)."""
    plan, weights, biases, adds = _branches(f.body, min_num_branches)
    if not plan:
        return f
    combined: dict = {}

    def sliced(key, offset, n):
        return _op.strided_slice(combined[key], begin=[offset], end=[offset + n], axes=[1])

    def visit(node, kids):
        if id(node) in plan:
            key, offset, n = plan[id(node)]
            if key not in combined:     # siblings read the same node: kids[0] is the same for all
                w = weights[key]
                combined[key] = _op.nn.dense(kids[0], w, units=w.data.shape[0])
                if key in biases:
                    combined[key] = _op.add(combined[key], biases[key])
            # with a bias, this slice is the biased result, read only by the add's replacement
            return sliced(key, offset, n)
        if id(node) in adds:
            dense = adds[id(node)]
            key, offset, n = plan[id(dense)]
            out = sliced(key, offset, n)
            return out if tuple(node.ty.shape) == tuple(dense.ty.shape) else _op.reshape(out, node.ty.shape)
        return with_children(node, kids)
    body = infer_expr(rewrite(f.body, visit))       # one typing of the new nodes, at the end
    return Function(f.params, body, body.ty, f.attrs)


def CombineParallelDense(min_num_branches: int = 3):
    """The pass (TVM's ``relay.transform.CombineParallelDense(min_num_branches=3,
    to_batch=False)``); runs from opt_level 3.

    >>> mod = relay.transform.CombineParallelDense(min_num_branches=2)(mod)   # doctest: +SKIP
    """
    if not isinstance(min_num_branches, int) or min_num_branches < 2:
        raise RelayError(f"CombineParallelDense: min_num_branches must be an integer >= 2, got {min_num_branches!r}")

    def run(mod):
        for gv, fn in mod.functions().items():
            mod = mod.with_function(gv, combine_parallel_dense(fn, min_num_branches))
        return mod
    return Pass("CombineParallelDense", 3, run)
