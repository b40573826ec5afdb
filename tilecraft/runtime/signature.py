"""What a compiled function expects: the typed record shared by codegen, the runtime's argument
checks, the exported manifest and the C header.

A signature lists parameters in C call order: buffers (a pointer each) then scalars. A buffer's
shape holds ints, names of scalar parameters (``"n"``) and, rarely, small expressions of them as
nested lists (``["+", "n", 2]``). Scalars whose name appears alone as a dimension are *derived*:
the caller never passes them; the runtime reads them off the arrays' shapes, as TVM does.

>>> sig = FuncSignature("vadd", (ParamSpec("A", "buffer", "float32", ("n",)),
...                              ParamSpec("n", "scalar", "int32")))
>>> FuncSignature.from_json(sig.to_json()) == sig
True
"""
from __future__ import annotations

from dataclasses import dataclass

_SHAPE_OPS = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b,
    "truncdiv": lambda a, b: int(a / b), "truncmod": lambda a, b: a - int(a / b) * b,
    "min": min, "max": max,
}


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
    """The value of a dimension given the scalar parameters' values."""
    if isinstance(d, int):
        return d
    if isinstance(d, str):
        return env[d]
    op, a, b = d
    return _SHAPE_OPS[op](eval_dim(a, env), eval_dim(b, env))
