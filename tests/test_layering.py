"""The import layering: every import in ``tilecraft/`` goes down the layers, function-level ones
included (README, "Layout"). A lower layer may receive a higher one's object by injection, never
import it.

The units are the subpackages, plus the root modules placed in ``LAYERS`` (a new root module must
be placed there, or this test fails). Units on one line of ``LAYERS`` are peers and import
nothing of each other, so no cycle can form between units. Imports of another unit's private
modules or names (a leading underscore) fail too. Imports are read from the source (``ast``):
``import``, ``from ... import``, and ``importlib.import_module``/``__import__`` of a literal name.
"""
from __future__ import annotations

import ast
import pathlib
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "tilecraft"

# bottom to top
LAYERS = [
    ("error",),             # TVM's error classes, the bases of every unit's errors
    ("_ffi",),              # TVM's tvm._ffi.base.TVMError path (error's class)
    ("ir", "target", "transform", "testing"),  # import nothing of tilecraft but error
    ("te",),
    ("tir", "interp"),      # tir.py: TVM's tir names; interp.py, interp_lowered.py: the reference interpreters
    ("schedule",),
    ("runtime",),
    ("codegen",),
    ("contrib",),           # TVM's contrib: clang (C to LLVM IR), utils.tempdir
    ("tilecraft",),         # tilecraft/__init__.py, the public facade (autotune, topi, rpc on first use)
    ("autotune",),
    ("rpc",),
    ("topi",),
    ("relay",),             # the graph level: IR, passes, frontends, build (contrib/graph_executor is its runtime face)
    ("cli",),               # cli.py, cli_tune.py, __main__.py
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}
ROOT_MODULES = {"__init__": "tilecraft", "__main__": "cli", "cli": "cli", "cli_tune": "cli", "cli_relay": "cli",
                "interp": "interp", "interp_lowered": "interp", "interp_lowered_runtime": "interp", "target": "target", "tir": "tir",
                "arith": "tir",
                "transform": "transform", "testing": "testing", "error": "error"}
# modules placed in another unit than their folder's: TVM's path of autotune's test helpers
# (``tvm.testing.autotvm``) is tilecraft/testing/autotune.py, a module of the autotune layer
PLACED_MODULES = {"tilecraft.testing.autotune": "autotune"}
ORDER = " → ".join("/".join(units) for units in LAYERS)


def unit_of_file(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE)
    if module_name(path) in PLACED_MODULES:
        return PLACED_MODULES[module_name(path)]
    if len(rel.parts) > 1:
        return rel.parts[0]
    return ROOT_MODULES.get(rel.stem, f"<unplaced root module {rel.name}>")


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of_module(dotted: str) -> str | None:
    """The unit a ``tilecraft.x.y`` module belongs to (the facade for ``tilecraft`` itself)."""
    parts = dotted.split(".")
    if parts[0] != "tilecraft":
        return None
    if ".".join(parts[:3]) in PLACED_MODULES:
        return PLACED_MODULES[".".join(parts[:3])]
    if len(parts) == 1:
        return "tilecraft"
    if (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return ROOT_MODULES.get(parts[1])


def imports_of(path: pathlib.Path):
    """``(line, imported module, imported names)`` for every import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            yield node.lineno, module, tuple(a.name for a in node.names)
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module"
                   or getattr(node.func, "id", None) in ("import_module", "__import__"))):
            yield node.lineno, node.args[0].value, ()


def edges_of(path: pathlib.Path):
    """``(line, target unit, what)`` for each import of tilecraft code in the file; ``from
    tilecraft import te`` is an import of ``te``, ``from tilecraft import build`` of the facade."""
    for line, module, names in imports_of(path):
        if not module or unit_of_module(module) is None:
            continue
        if module == "tilecraft" and names:
            for name in names:
                sub = unit_of_module(f"tilecraft.{name}")
                yield line, sub or "tilecraft", f"tilecraft.{name}", (name,) if sub is None else ()
        else:
            yield line, unit_of_module(module), module, names


def violations(root: pathlib.Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        src = unit_of_file(path)
        where = path.relative_to(root.parent)
        if src not in RANK:
            out.append(f"{where}: {src}: give it a place in LAYERS (tests/test_layering.py) and the README")
            continue
        for line, dst, module, names in edges_of(path):
            if dst == src:
                continue
            if dst not in RANK:
                out.append(f"{where}:{line}: imports {module}, which has no place in LAYERS")
            elif RANK[dst] > RANK[src]:
                out.append(f"{where}:{line}: {src} → {dst} (import of {module}) goes up the layers {ORDER}; "
                           f"a lower layer may receive a higher one's object by injection, never import it")
            elif RANK[dst] == RANK[src]:
                out.append(f"{where}:{line}: {src} → {dst} (import of {module}): peers in the layers "
                           f"{ORDER} import nothing of each other")
            private = [p for p in module.split(".") if p.startswith("_") and not p.startswith("__")]
            private += [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                out.append(f"{where}:{line}: {src} imports {', '.join(private)} (from {module}), private to {dst}")
    return out


def test_imports_go_down_the_layers():
    found = violations()
    assert not found, "\n".join(found)


def test_every_root_module_and_subpackage_has_a_place():
    units = {unit_of_file(p) for p in PACKAGE.rglob("*.py")}
    assert units <= set(RANK), sorted(units - set(RANK))


@pytest.mark.parametrize("source, expected", [
    # function-level, upward: runtime reaching codegen
    ("def f():\n    from ..codegen.export import copy_library\n",
     "tilecraft/runtime/bad.py:2: runtime → codegen (import of tilecraft.codegen.export) goes up the layers"),
    # a peer: ir importing target
    ("from tilecraft.target import Target\n",
     "tilecraft/ir/bad.py:1: ir → target (import of tilecraft.target): peers"),
    # the facade, below autotune
    ("import tilecraft as tc\n", "tilecraft/schedule/bad.py:1: schedule → tilecraft (import of tilecraft) goes up"),
    # from the package: te is te, build is the facade
    ("from tilecraft import te, build\n", "tilecraft/ir/bad.py:1: ir → tilecraft (import of tilecraft.build)"),
    # a private module of a lower layer
    ("from ..autotune._pool import WorkerPool\n",
     "tilecraft/rpc/bad.py:1: rpc imports _pool (from tilecraft.autotune._pool), private to autotune"),
    ("import importlib\nimportlib.import_module('tilecraft.rpc.server')\n",
     "tilecraft/autotune/bad.py:2: autotune → rpc (import of tilecraft.rpc.server) goes up"),
])
def test_a_bad_import_is_reported_with_file_line_and_edge(tmp_path, monkeypatch, source, expected):
    """The checker itself, on a copy of one file placed in a fake package: it must name the file,
    the line and the edge."""
    unit = expected.split("/")[1]
    fake = tmp_path / "tilecraft"
    (fake / unit).mkdir(parents=True)
    for sub in PACKAGE.iterdir():            # the real subpackages exist, so units resolve
        if sub.is_dir() and not (fake / sub.name).exists():
            (fake / sub.name).mkdir()
    (fake / unit / "bad.py").write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    found = violations(fake)
    assert any(v.startswith(expected) for v in found), found


def test_an_unplaced_root_module_is_reported(tmp_path, monkeypatch):
    fake = tmp_path / "tilecraft"
    fake.mkdir()
    (fake / "relay_helpers.py").write_text("x = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert violations(fake) == ["tilecraft/relay_helpers.py: <unplaced root module relay_helpers.py>: "
                                "give it a place in LAYERS (tests/test_layering.py) and the README"]
