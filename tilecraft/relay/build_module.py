"""``relay.build``: optimise a graph module, compile every fused group, plan the graph.

The pipeline, one pass after another under the current ``PassContext`` (``opt_level`` decides
which run; ``PrintAfterAll`` shows the module after each)::

    InferType → SimplifyInference → FoldConstant → FoldScaleAxis → EliminateCommonSubexpr
              → CombineParallelDense → FuseAttention → AlterOpLayout → TensorCoreLayout → FoldConstant → SinkReshape
              → EliminateCommonSubexpr → DeadCodeElimination → FuseOps → InferType

then each distinct primitive function is lowered (``backend/te_compiler.py``) and all of them
are compiled into one LLVM module; ``main``'s calls become the executor's graph
(``tilecraft/runtime/graph_executor.py``) and its remaining constants the weights
``p0, p1, ...``; the kernel outputs share storage by liveness (``backend/memory_plan.py``). Inside ``autotune.apply_history_best(log)`` tuned configurations schedule the
convolutions and dense layers whose workloads the log has.

>>> with tilecraft.transform.PassContext(opt_level=3):
...     lib = relay.build(mod, target="llvm", params=params)              # doctest: +SKIP
>>> lib.export_library("model.so")                                         # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from .ir import Call, Constant, Function, IRModule, RelayError, Tuple, Var, post_order, rewrite, with_children
from .printer import astext
from .transform import (AlterOpLayout, CombineParallelDense, DeadCodeElimination, EliminateCommonSubexpr, FoldConstant, FoldScaleAxis, FuseAttention, FuseOps,
                        InferType, Sequential, SimplifyInference, SinkReshape, TensorCoreLayout)


def bind_params_by_name(func: Function, params: dict) -> Function:
    """``func`` with the parameters named in ``params`` replaced by constants (the weights)."""
    if not params:
        return func
    names = [p.name_hint for p in func.params]
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise RelayError(f"bind_params_by_name: {', '.join(unknown)} "
                         f"{'is not a parameter' if len(unknown) == 1 else 'are not parameters'} of the function (its parameters: {', '.join(names)})")
    consts = {}
    for p in func.params:
        if p.name_hint in params:
            value = np.asarray(getattr(params[p.name_hint], "numpy", lambda: params[p.name_hint])())
            if p.ty is not None and (value.shape != p.ty.shape or value.dtype.name != p.ty.dtype):
                raise RelayError(f"bind_params_by_name: {p.name_hint!r} is {p.ty}, the value given is "
                                 f"{value.dtype.name}{list(value.shape)}")
            consts[id(p)] = Constant(value)
    body = rewrite(func.body, lambda n, kids: consts.get(id(n)) or with_children(n, kids))
    return Function([p for p in func.params if id(p) not in consts], body, None, func.attrs)


def optimize(mod: IRModule, target=None, params: dict | None = None) -> tuple:
    """``(mod, params)`` after the build's passes (TVM's ``relay.optimize``): the graph fused,
    not yet compiled; the weights are constants of the graph, so ``params`` comes back empty."""
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    if params:
        mod = mod.with_function("main", bind_params_by_name(mod["main"], params))
    # CSE first so that sibling dense layers read one node (CombineParallelDense needs that)
    seq = Sequential([InferType(), SimplifyInference(), FoldConstant(), FoldScaleAxis(), EliminateCommonSubexpr(),
                      CombineParallelDense(), FuseAttention(), AlterOpLayout(), TensorCoreLayout(), FoldConstant(),
                      SinkReshape(), EliminateCommonSubexpr(), DeadCodeElimination(), FuseOps(), InferType()],
                     name="relay.build")
    if target is None:
        return seq(mod), {}
    from tilecraft.target import Target
    # under the target, as the kernels are built later: layout passes look up the same tuned (or
    # fallback) configurations, and a missing one is reported once, not once per target string
    with Target(target) if isinstance(target, str) else target:
        return seq(mod), {}


def _kernel_name(fn: Function, taken: dict, prefix: str = "") -> str:
    base = prefix + "fused_" + (fn.attrs.get("Name") or "fn")
    base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in base)[:80]
    n = taken.get(base, 0)
    taken[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


def build(mod, target="llvm", params: dict | None = None, target_host=None, mod_name: str = "default"):
    """Compile a model for ``target`` (``"llvm"``, or ``"cuda"``: kernels from
    ``backend/te_compiler_cuda.py``, run by ``runtime/cuda_graph_executor.py``): returns a
    ``GraphExecutorFactory``; ``lib[mod_name](dev)`` is an executor (wrap it in
    ``tilecraft.contrib.graph_executor.GraphModule``), ``lib.export_library(path)`` writes one
    library, ``lib.memory_summary()`` reports the memory plan.

    ``target_host`` (TVM's) must be None or an ``llvm`` target: the host code of a CPU model is
    the kernels' own code, so nothing else is compiled for it. ``mod_name`` names the model:
    ``lib[mod_name](dev)`` makes its executor, and its kernels are named ``{mod_name}_fused_...``
    (``fused_...`` for ``"default"``) so that models of different names can share one process
    or library. Memory planning (``backend/memory_plan.py``) runs unless the ``PassContext``
    disables ``"PlanMemory"``.

    >>> lib = relay.build(mod, target="llvm", params=params, mod_name="resnet")   # doctest: +SKIP
    >>> ex = lib["resnet"](tilecraft.cpu(0))                                       # doctest: +SKIP
    """
    from tilecraft.codegen.cuda import build_cuda
    from tilecraft.codegen.llvm import build_llvm
    from tilecraft.runtime.cuda_graph_executor import CUDAGraphExecutorFactory
    from tilecraft.runtime.graph_executor import GraphExecutorFactory
    from tilecraft.target import Target, TargetError
    from tilecraft.transform import PassContext

    from .backend.memory_plan import plan_memory
    from .backend.reshape_views import elide_reshape_kernels, is_reshape_group
    from .backend.te_compiler import lower_primitive
    from .backend.te_compiler_cuda import lower_primitive_cuda
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    if not isinstance(mod, IRModule):
        raise RelayError(f"relay.build expects a relay.IRModule, got {type(mod).__name__}")
    try:
        tgt = Target(target)
        host = Target(target_host) if target_host is not None else None
    except TargetError as err:
        raise RelayError(f"relay.build: {err}") from None
    if tgt.kind not in ("llvm", "cuda"):
        raise RelayError(f"relay.build: target {str(tgt)!r} is not supported; the graph level builds "
                         "for 'llvm' (the CPU) and 'cuda'")
    if host is not None and host.kind != "llvm":
        raise RelayError(f"relay.build: target_host must be an llvm target (a model's host code runs on the CPU), "
                         f"got {str(host)!r}")
    if not isinstance(mod_name, str) or not mod_name.isidentifier():
        raise RelayError(f"relay.build: mod_name must be a name made of letters, digits and '_' (it prefixes "
                         f"the kernels' symbols), got {mod_name!r}")
    prefix = "" if mod_name == "default" else mod_name + "_"
    mod, _ = optimize(mod, tgt, params)
    main = mod["main"]
    with tgt:
        funcs, kernel_of, by_text, taken, views, reshapes = [], {}, {}, {}, {}, set()
        for n in post_order(main.body):
            if type(n) is Call and isinstance(n.op, Function):
                key = astext(n.op)          # equal groups (same ops, attributes, shapes) share a kernel
                if key not in by_text:
                    name = _kernel_name(n.op, taken, prefix)
                    func, views[name] = (lower_primitive(n.op, name, "llvm") if tgt.kind == "llvm"
                                         else lower_primitive_cuda(n.op, name))
                    funcs.append(func)
                    by_text[key] = name
                    if is_reshape_group(n.op):
                        reshapes.add(name)
                kernel_of[id(n)] = by_text[key]
        if tgt.kind == "cuda":
            if not funcs:
                raise RelayError("relay.build: the model has no kernels (its result is an input or a weight)")
            module = build_cuda(funcs, tgt)
        else:
            module = build_llvm(funcs, str(tgt)) if funcs else None
    graph, weights = plan_graph(main, kernel_of, views)
    graph = elide_reshape_kernels(graph, reshapes)     # a reshape is a view, not a copy
    if "PlanMemory" not in PassContext.current().disabled_pass:
        graph = plan_memory(graph)
    if mod_name != "default":
        graph["mod_name"] = mod_name
    if tgt.kind == "cuda":
        return CUDAGraphExecutorFactory(graph, module, weights)
    return GraphExecutorFactory(graph, module, weights, exporter=_export)


def plan_graph(main: Function, kernel_of: dict, views: dict | None = None) -> tuple:
    """The executor's graph (format 1) and weights of a fused ``main``; ``views`` gives, per
    kernel, the shapes its arguments are passed as (a template on 2-d views), or None."""
    views = views or {}
    nodes, index, weights = [], {}, {}

    def add(node, e):
        ty = e.checked_type
        node.update(shape=list(ty.shape), dtype=ty.dtype)
        index[id(e)] = len(nodes)
        nodes.append(node)
    for p in main.params:
        add({"op": "input", "name": p.name_hint}, p)
    for n in post_order(main.body):
        t = type(n)
        if t is Constant:
            name = f"p{len(weights)}"
            weights[name] = n.data
            add({"op": "param", "name": name}, n)
        elif t is Call:
            if id(n) not in kernel_of:
                raise RelayError(f"relay.build: {n.op_name} was not fused into a kernel")
            for a in n.args:
                if id(a) not in index:
                    raise RelayError(f"relay.build: a kernel reads a {type(a).__name__}, which the executor "
                                     "cannot pass yet")
            node = {"op": "kernel", "name": kernel_of[id(n)], "func": kernel_of[id(n)],
                    "inputs": [index[id(a)] for a in n.args]}
            if views.get(kernel_of[id(n)]):
                node["arg_shapes"] = [list(v) for v in views[kernel_of[id(n)]]]
            add(node, n)
        elif t is Var:
            if id(n) not in index:
                raise RelayError(f"relay.build: %{n.name_hint} is not a parameter of main")
        elif t is not Tuple or n is not main.body:
            raise RelayError(f"relay.build: a {t.__name__} between kernels is not supported yet")
    body = main.body
    outs = list(body.fields) if type(body) is Tuple else [body]
    return {"format": 1, "nodes": nodes, "outputs": [index[id(o)] for o in outs]}, weights


def _export(factory, path) -> str:
    from tilecraft.codegen.export import export_llvm
    from tilecraft.runtime.graph_executor import PARAMS_SYMBOL, pack_params
    if factory.module is None:
        raise RelayError("export_library: the model has no kernels")
    from tilecraft.runtime.model_capi import model_c_source
    from tilecraft.runtime.module import manifest
    blob, table = pack_params(factory.params)
    functions = {f["name"]: f for f in manifest(factory.module)["functions"]}
    api = model_c_source(factory.graph, table, functions)        # the model's C API (model_capi.py)
    return export_llvm(factory.module.artifact, factory.module, str(path),
                       extra_info={"graph": factory.graph, "params": table}, blobs={PARAMS_SYMBOL: blob},
                       c_sources={"model_api.c": api})
