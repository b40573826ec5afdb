"""``DeadCodeElimination``: drop what no output needs.

The graph is a dataflow graph, so only what the result reaches is ever computed; what can still
be dead is (1) the unused fields of a tuple that is only projected (``(a, b).0`` becomes ``a``,
and ``b`` dies with it unless something else reads it) and (2) functions of the module that
``main`` never calls. Afterwards neither exists. (Unused weights are dropped when
``relay.build`` binds its ``params``.)

>>> mod = DeadCodeElimination()(mod)      # doctest: +SKIP
"""
from __future__ import annotations

from ..ir import Call, Function, IRModule, Tuple, TupleGetItem, post_order, rewrite, with_children
from .pass_infra import module_pass


def _simplify_projections(e):
    def visit(node, kids):
        new = with_children(node, kids)
        if type(new) is TupleGetItem and type(new.tuple_value) is Tuple:
            return new.tuple_value.fields[new.index]
        return new
    return rewrite(e, visit)


def _run(mod: IRModule) -> IRModule:
    functions = {}
    for name, f in mod.functions().items():
        body = _simplify_projections(f.body)
        functions[name] = f if body is f.body else Function(f.params, body, f.ret_type, f.attrs)
    # functions reached from main by name (GlobalVar calls come with later parts: none yet)
    reached = {"main"} | {n.op for name in ("main",) if name in functions
                          for n in post_order(functions[name].body)
                          if type(n) is Call and isinstance(n.op, str)}
    if "main" in functions:
        functions = {k: v for k, v in functions.items() if k in reached}
    return IRModule(functions)


def DeadCodeElimination():
    """The pass (TVM's ``relay.transform.DeadCodeElimination()``); runs from opt_level 1."""
    return module_pass(_run, "DeadCodeElimination", 1)
