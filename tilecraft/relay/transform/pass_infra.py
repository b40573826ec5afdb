"""The pass infrastructure (TVM's ``tvm.transform``, for graph modules): a :class:`Pass` is a
named ``IRModule -> IRModule`` function with the lowest ``opt_level`` it runs at;
:class:`Sequential` runs passes in order under the current
``tilecraft.transform.PassContext``: a pass runs when its opt_level is at most the context's,
or when the context's ``required_pass`` names it, and never when ``disabled_pass`` names it.
The context's ``instruments`` see the module after each pass that ran
(:class:`PrintAfterAll` prints it).

>>> seq = Sequential([InferType(), FoldConstant(), FuseOps()])      # doctest: +SKIP
>>> with tilecraft.transform.PassContext(opt_level=3, instruments=[PrintAfterAll()]):
...     mod = seq(mod)                                               # doctest: +SKIP
"""
from __future__ import annotations

from typing import Callable

from tilecraft.transform import PassContext

from ..ir import IRModule, RelayError


class Pass:
    """A module pass: ``mod = Pass(mod)``. Runs unconditionally when called directly; a
    :class:`Sequential` decides by opt_level."""

    def __init__(self, name: str, opt_level: int, fn: Callable):
        self.name, self.opt_level, self.fn = name, opt_level, fn

    def __call__(self, mod: IRModule) -> IRModule:
        if not isinstance(mod, IRModule):
            raise RelayError(f"{self.name}: expects a relay.IRModule, got {type(mod).__name__} "
                             "(wrap a function with relay.IRModule.from_expr)")
        out = self.fn(mod)
        for inst in PassContext.current().instruments:
            inst.run_after_pass(out, self)
        return out

    def __repr__(self) -> str:
        return f"<Pass {self.name} opt_level={self.opt_level}>"


def module_pass(fn: Callable, name: str, opt_level: int) -> Pass:
    """A pass from a function ``IRModule -> IRModule``."""
    return Pass(name, opt_level, fn)


def function_pass(fn: Callable, name: str, opt_level: int) -> Pass:
    """A pass that rewrites every function of the module with ``fn(function, mod) -> function``."""
    def run(mod: IRModule) -> IRModule:
        for gv, f in mod.functions().items():
            mod = mod.with_function(gv, fn(f, mod))
        return mod
    return Pass(name, opt_level, run)


class Sequential(Pass):
    """Passes run in order, each when the current PassContext enables it."""

    def __init__(self, passes, opt_level: int = 0, name: str = "sequential"):
        self.passes = list(passes)
        super().__init__(name, opt_level, self._run)

    def _run(self, mod: IRModule) -> IRModule:
        ctx = PassContext.current()
        for p in self.passes:
            if p.name in ctx.disabled_pass:
                continue
            if p.opt_level <= ctx.opt_level or p.name in ctx.required_pass:
                mod = p(mod)
        return mod

    def __call__(self, mod: IRModule) -> IRModule:
        if not isinstance(mod, IRModule):
            raise RelayError(f"{self.name}: expects a relay.IRModule, got {type(mod).__name__}")
        return self._run(mod)


class PrintAfterAll:
    """A PassContext instrument printing the module after each pass (TVM's
    ``tvm.ir.instrument.PrintAfterAll``); ``file`` defaults to stdout."""

    def __init__(self, file=None):
        self.file = file

    def run_after_pass(self, mod, info) -> None:
        print(f"# after {info.name}\n{mod}", file=self.file)
