"""``DeadCodeElimination``: drop what no output needs.

The graph is a dataflow graph, so only what the result reaches is ever computed; what can still
be dead is (1) the unused fields of a tuple that is only projected (``(a, b).0`` becomes ``a``,
and ``b`` dies with it unless something else reads it) and (2) functions of the module that
``main`` never calls. Afterwards neither exists. (Unused weights are dropped when
``relay.build`` binds its ``params``.)

>>> mod = DeadCodeElimination()(mod)      # doctest: +SKIP
"""
from __future__ import annotations

from ..ir import Function, IRModule, Tuple, TupleGetItem, rewrite, with_children
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
    # nothing calls a module function by name yet (no GlobalVar calls): only main is reachable
    if "main" in functions:
        functions = {"main": functions["main"]}
    return IRModule(functions)


def DeadCodeElimination():
    """The pass (TVM's ``relay.transform.DeadCodeElimination()``); runs from opt_level 1."""
    return module_pass(_run, "DeadCodeElimination", 1)
