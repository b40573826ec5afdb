"""The graph IR's text form (``print(mod)``), close to TVM's Relay text::

    def @main(%x: Tensor[(1, 4), float32]) -> Tensor[(1, 4), float32] {
      %0 = add(%x, 1f) /* ty=Tensor[(1, 4), float32] */;
      nn.relu(%0) /* ty=Tensor[(1, 4), float32] */
    }

Every call, tuple and projection gets a ``%N`` line in evaluation order (a shared node is
printed once); scalar constants print inline (``1f``, ``2i``), others as
``meta[relay.Constant][K] /* shape */``, numbered per function in order of appearance.
Primitive functions (fused groups) print inline as ``fn (...) { ... }`` bound to a ``%N``.

>>> print(mod)       # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from .ir import Call, Constant, Function, IRModule, Tuple, TupleGetItem, Var, post_order

_DTYPE_SUFFIX = {"float32": "f", "float64": "f64", "int32": "i", "int64": "i64", "bool": ""}


def astext(node) -> str:
    """The text of a module, function or expression."""
    if isinstance(node, IRModule):
        return "\n".join(_Printer().function(f, f"@{name}") for name, f in node.functions().items())
    if isinstance(node, Function):
        return _Printer().function(node, "fn")
    p = _Printer()
    lines = []
    value = p.body(node, lines, "")
    return "\n".join(lines + [value])


def _attr(v) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(_attr(x) for x in v) + "]"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if v is None:
        return "None"
    return str(v)


class _Printer:
    def __init__(self):
        self.consts = 0

    def function(self, f: Function, head: str) -> str:
        params = ", ".join(f"%{p.name_hint}" + (f": {p.ty}" if p.ty is not None else "") for p in f.params)
        attrs = "".join(f", {k}={_attr(v)}" for k, v in f.attrs.items())
        ret = f" -> {f.body.ty}" if f.body.ty is not None else ""
        lines = []
        value = self.body(f.body, lines, "  ")
        kw = "def " if head.startswith("@") else ""
        return "\n".join([f"{kw}{head}({params}{attrs}){ret} {{"] + lines + [f"  {value}", "}"])

    def body(self, root, lines: list, indent: str) -> str:
        names: dict = {}
        order = [n for n in post_order(root) if type(n) in (Call, Tuple, TupleGetItem)]
        for node in order:
            text = self.node(node, names, lines, indent)
            if node is root:
                return text
            names[id(node)] = f"%{len(names)}"
            lines.append(f"{indent}{names[id(node)]} = {text};")
        return self.ref(root, names, lines, indent)

    def ref(self, e, names, lines, indent) -> str:
        if id(e) in names:
            return names[id(e)]
        if isinstance(e, Var):
            return f"%{e.name_hint}"
        if isinstance(e, Constant):
            return self.const(e)
        if isinstance(e, Function):
            text = self.function(e, "fn").replace("\n", "\n" + indent)
            names[id(e)] = f"%{len(names)}"
            lines.append(f"{indent}{names[id(e)]} = {text};")
            return names[id(e)]
        raise TypeError(f"cannot print {type(e).__name__}")

    def const(self, c: Constant) -> str:
        if c.data.ndim == 0 and c.data.dtype.name in _DTYPE_SUFFIX:
            v = c.data.item()
            if c.data.dtype.kind == "f":
                v = repr(float(np.float32(v))) if c.data.dtype.name == "float32" else repr(v)
                v = v[:-2] if v.endswith(".0") else v
            return f"{v}{_DTYPE_SUFFIX[c.data.dtype.name]}"
        k = self.consts
        self.consts += 1
        return f"meta[relay.Constant][{k}] /* {c.ty} */"

    def node(self, e, names, lines, indent) -> str:
        ty = f" /* ty={e.ty} */" if e.ty is not None else ""
        if isinstance(e, Call):
            args = [self.ref(a, names, lines, indent) for a in e.args]
            schema = getattr(e.op, "attrs", {})
            args += [f"{k}={_attr(v)}" for k, v in e.attrs.items() if k not in schema or v != schema[k]]
            head = e.op.name if not isinstance(e.op, Function) else self.ref(e.op, names, lines, indent)
            return f"{head}({', '.join(args)}){ty}"
        if isinstance(e, Tuple):
            fields = [self.ref(a, names, lines, indent) for a in e.fields]
            return f"({', '.join(fields)}{',' if len(fields) == 1 else ''}){ty}"
        return f"{self.ref(e.tuple_value, names, lines, indent)}.{e.index}{ty}"
