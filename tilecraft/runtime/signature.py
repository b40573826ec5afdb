"""What a compiled function expects: the typed record shared by codegen, the runtime's argument
checks, the exported manifest and the C header.

A signature lists parameters in C call order: buffers (a pointer each) then scalars. A buffer's
shape holds ints, names of scalar parameters (``"n"``) and, rarely, small expressions of them as
nested lists (``["+", "n", 2]``). Scalars whose name appears alone as a dimension are *derived*:
the caller never passes them; the runtime reads them off the arrays' shapes, as TVM does.
:func:`signature_of` derives the signature of a lowered function (both backends call it).

>>> sig = FuncSignature("vadd", (ParamSpec("A", "buffer", "float32", ("n",)),
...                              ParamSpec("n", "scalar", "int32")))
>>> FuncSignature.from_json(sig.to_json()) == sig
True
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.expr import trunc_divide, trunc_remainder

_SHAPE_OPS = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b,
    "truncdiv": trunc_divide, "truncmod": trunc_remainder,
    "min": min, "max": max,
}


def dim_of_expr(e, var_name, fail):
    """A dimension (int, name, or ``(op, a, b)``) from an IR integer expression of variables.

    ``var_name(v)`` names a variable (or raises to refuse it); ``fail(e)`` makes the exception
    raised for a node that is not an integer expression of them (a load, a call, ...).
    """
    from ..ir.expr import BinOp, Binary, Cast, Const, Var   # (the runtime loads without the IR)
    ops = {BinOp.ADD: "+", BinOp.SUB: "-", BinOp.MUL: "*", BinOp.FLOORDIV: "//", BinOp.FLOORMOD: "%",
           BinOp.TRUNCDIV: "truncdiv", BinOp.TRUNCMOD: "truncmod", BinOp.MIN: "min", BinOp.MAX: "max"}

    def dim(d):
        if isinstance(d, int):
            return d
        if isinstance(d, Const):
            return int(d.value)
        if isinstance(d, Var):
            return var_name(d)
        if isinstance(d, Cast):
            return dim(d.value)
        if isinstance(d, Binary) and d.op in ops:
            return (ops[d.op], dim(d.a), dim(d.b))
        raise fail(d)
    return dim(e)



@dataclass(frozen=True)
class ParamSpec:
    """One parameter: ``kind`` is ``"buffer"`` (pointer to ``dtype`` elements) or ``"scalar"``."""
    name: str
    kind: str
    dtype: str
    shape: tuple = ()
    written: bool = False

    def to_json(self) -> dict:
        d = {"name": self.name, "kind": self.kind, "dtype": self.dtype}
        if self.kind == "buffer":
            d["shape"] = [_dim_to_json(x) for x in self.shape]
            d["written"] = self.written
        return d

    @staticmethod
    def from_json(d: dict) -> "ParamSpec":
        shape = tuple(_dim_from_json(x) for x in d.get("shape", ()))
        return ParamSpec(d["name"], d["kind"], d["dtype"], shape, bool(d.get("written", False)))


def _dim_to_json(x):
    return list(_dim_to_json(y) for y in x) if isinstance(x, tuple) else x


def _dim_from_json(x):
    return tuple(_dim_from_json(y) for y in x) if isinstance(x, list) else x


@dataclass(frozen=True)
class FuncSignature:
    name: str
    params: tuple

    @property
    def buffers(self) -> tuple:
        return tuple(p for p in self.params if p.kind == "buffer")

    @property
    def scalars(self) -> tuple:
        return tuple(p for p in self.params if p.kind == "scalar")

    def derived_scalars(self) -> set:
        """Names of scalar parameters that appear alone as a dimension of some buffer."""
        dims = {d for b in self.buffers for d in b.shape if isinstance(d, str)}
        return {s.name for s in self.scalars if s.name in dims}

    def user_params(self) -> tuple:
        """The parameters a Python caller passes: buffers, then underived scalars."""
        derived = self.derived_scalars()
        return self.buffers + tuple(s for s in self.scalars if s.name not in derived)

    def to_json(self) -> dict:
        return {"name": self.name, "params": [p.to_json() for p in self.params]}

    @staticmethod
    def from_json(d: dict) -> "FuncSignature":
        return FuncSignature(d["name"], tuple(ParamSpec.from_json(p) for p in d["params"]))


def shape_str(shape) -> str:
    """``(1024, "n")`` → ``"(1024, n)"``."""
    parts = [dim_str(d) for d in shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def dim_str(d) -> str:
    if isinstance(d, tuple):
        op, a, b = d
        if op in ("min", "max", "truncdiv", "truncmod"):
            return f"{op}({dim_str(a)}, {dim_str(b)})"
        return f"({dim_str(a)} {op} {dim_str(b)})"
    return str(d)


def eval_dim(d, env: dict) -> int:
    """The value of a dimension given the scalar parameters' values (``env`` maps the leaves:
    names, or whatever ``dim_of_expr``'s ``var_name`` returned)."""
    if isinstance(d, int):
        return d
    if isinstance(d, tuple):
        op, a, b = d
        return _SHAPE_OPS[op](eval_dim(a, env), eval_dim(b, env))
    return int(env[d])


def signature_of(func, error=ValueError) -> FuncSignature:
    """The parameters of a lowered function (a ``PrimFunc``) as a :class:`FuncSignature`, symbolic
    names made unique; a buffer shape it cannot state raises ``error`` (the LLVM backend passes its
    ``CodegenError``), naming the function and the dimension.

    >>> # signature_of(tilecraft.lower(s, [A, B, C], name="vadd")).name == "vadd"
    """
    from ..ir import dtype as dt
    from ..ir.expr import AccessPtr, Var
    from ..ir.functor import post_order_visit
    from ..ir.stmt import Buffer, BufferStore
    names: dict = {}
    taken: dict = {}

    def var_name(v: Var) -> str:
        if v not in names:
            count = taken.get(v.name, 0)
            taken[v.name] = count + 1
            names[v] = v.name if count == 0 else f"{v.name}_{count}"
        return names[v]

    def dim(d):
        return dim_of_expr(d, var_name, lambda bad: error(
            f"{func.name}: the buffer dimension `{bad}` is not an integer expression of the shape parameters"))

    written = set()

    def visit(n):
        t = type(n)
        if t is BufferStore or (t is AccessPtr and n.access_mask & 2):
            written.add(n.buffer.data)
            written.add(n.buffer.name)
        elif t is Var and n.dtype == "handle":       # a bare pointer an extern call may write through
            written.add(n)
    post_order_visit(func.body, visit)
    scalar_vars = [p for p in func.params if isinstance(p, Var)]
    for v in scalar_vars:          # scalar parameters keep their own names first
        var_name(v)
    params = []
    for p in func.params:
        if isinstance(p, Buffer):
            params.append(ParamSpec(p.name, "buffer", dt.element_of(p.dtype),
                                    tuple(dim(d) for d in p.shape),
                                    p.data in written or p.name in written))
        elif isinstance(p, Var):
            params.append(ParamSpec(var_name(p), "scalar", p.dtype))
    sig = FuncSignature(func.name, tuple(params))
    known = {s.name for s in sig.scalars}
    for b in sig.buffers:
        for d in b.shape:
            for n in _dim_names(d):
                if n not in known:
                    raise error(f"{func.name}: the shape of {b.name} uses {n!r}, which is not "
                                "a parameter of the function")
    return sig


def _dim_names(d):
    if isinstance(d, str):
        yield d
    elif isinstance(d, tuple):
        for x in d[1:]:
            yield from _dim_names(x)
