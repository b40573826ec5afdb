"""``IRModule``: what ``tilecraft.lower`` returns, TVM's module of lowered functions.

A lowered schedule is one function, so the module *is* that function (a ``PrimFunc`` with every
field and method of one, so code written against ``lower``'s function keeps working) and, as in
TVM, a table of functions by name: ``mod["main"]`` (``lower``'s default name, else the ``name=``
given) is the plain ``PrimFunc``, ``mod.functions`` maps each ``GlobalVar`` to its function,
``"main" in mod`` asks for one. ``tilecraft.build(mod)`` builds it.

>>> mod = tilecraft.lower(s, [A, B, C], name="myadd")
>>> mod["myadd"].body           # the loop nest
>>> [gv.name_hint for gv in mod.get_global_vars()]
['myadd']
"""
from __future__ import annotations

from dataclasses import dataclass

from .stmt import PrimFunc


@dataclass(frozen=True)
class GlobalVar:
    """TVM's name of a function in a module: ``gv.name_hint``."""
    name_hint: str


@dataclass(frozen=True, eq=False, slots=True)
class IRModule(PrimFunc):
    """A module of one lowered function, which it also is (see the module docstring)."""

    @property
    def main(self) -> PrimFunc:
        return PrimFunc(self.name, self.params, self.body, self.attrs)

    def __getitem__(self, name) -> PrimFunc:
        key = name.name_hint if isinstance(name, GlobalVar) else name
        if key != self.name:
            raise KeyError(f"the module has no function {key!r}; it has: {self.name!r} (lower(..., "
                           f"name=...) names it)")
        return self.main

    def __contains__(self, name) -> bool:
        return (name.name_hint if isinstance(name, GlobalVar) else name) == self.name

    @property
    def functions(self) -> dict:
        """``{GlobalVar(name): PrimFunc}``, as TVM's ``mod.functions``."""
        return {GlobalVar(self.name): self.main}

    def get_global_vars(self) -> list:
        return [GlobalVar(self.name)]

    def get_global_var(self, name: str) -> GlobalVar:
        if name != self.name:
            raise ValueError(f"the module has no function {name!r}; it has: {self.name!r}")
        return GlobalVar(name)
