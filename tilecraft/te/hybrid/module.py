"""``te.hybrid.HybridModule``: a hybrid script kept as source text (TVM's), what
``te.hybrid.build`` returns for a scheduled loop nest.

The source is one ``def`` in the hybrid language. The module compiles it into a hybrid function
(:func:`tilecraft.te.hybrid.script`), so calling the module is calling a hybrid script: with
tensors it makes a ``HybridOp`` (to schedule and build again), with numpy arrays it runs as
Python. ``save(path)`` writes the source, ``load(path)`` reads one back.

>>> mod = te.hybrid.build(s, [a, b], [c])
>>> print(mod.get_source())
>>> mod.save("outer.py"); again = te.hybrid.HybridModule(); again.load("outer.py")
>>> again(a_np, b_np)                        # numpy arrays: the loop nest run as Python
"""
from __future__ import annotations

import ast
import itertools
import linecache

_counter = itertools.count()


class HybridModule:
    """A hybrid function from its source text (``src``; ``None``: call :meth:`load` later)."""

    def __init__(self, src: str | None = None, name: str | None = None):
        self.src_, self.name, self.func_ = None, name, None
        if src is not None:
            self._compile(src)

    def get_source(self) -> str:
        """The hybrid script's source text."""
        return self.src_

    def save(self, path: str) -> None:
        """Write the source to ``path`` (a ``.py`` file a person can read and edit)."""
        with open(path, "w") as f:
            f.write(self.src_)

    def load(self, path: str) -> None:
        """Read a hybrid script's source from ``path`` (one function definition) into this module."""
        with open(path) as f:
            self._compile(f.read())

    def __call__(self, *args):
        if self.func_ is None:
            raise RuntimeError("HybridModule: no source yet: give it one (HybridModule(src)) or load(path)")
        return self.func_(*args)

    def _compile(self, src: str) -> None:
        from . import HybridError, script
        defs = [n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)]
        if len(defs) != 1:
            raise HybridError(f"HybridModule: the source must define one function, found {len(defs)}")
        name = defs[0].name
        # the parser reads a script's source through inspect, which finds it in linecache
        filename = f"<hybrid module {name} #{next(_counter)}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        namespace: dict = {}
        exec(compile(src, filename, "exec"), namespace)     # noqa: S102 - the user's own script text
        self.src_, self.name, self.func_ = src, name, script(namespace[name])
