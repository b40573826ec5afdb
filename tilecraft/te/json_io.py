"""TVM's ``tvm.ir.save_json`` / ``load_json`` for tensor expressions: expressions, iteration
variables, ranges, reducers, tensors and their operations (placeholder, compute) as JSON text,
and back. No pickle: the reader builds only the classes named in :data:`_CLASSES` from plain JSON
values.

The text is a node table, as TVM's: ``{"format": "tilecraft-te-json", "version": 1, "root": k,
"nodes": [...]}``, each node ``{"type": "Binary", "fields": {...}}`` whose field values are
numbers, strings, ``null``, ``{"node": k}`` (another node of the table), ``{"tuple": [...]}``,
``{"enum": "BinOp.ADD"}``, ``{"float": "nan"}`` (non-finite numbers) or ``{"dict": [[k, v], ...]}``.
An object used twice (a variable, an axis, a tensor) is one node, so what was shared is shared
again after loading: ``load_json(save_json(C))`` is a new tensor with the same definition, whose
body reads the new placeholders through the same new axes. ``tilecraft/__init__.py`` hands the
two functions to ``ir`` (which sits below ``te``).

>>> text = tvm.ir.save_json(C)
>>> C2 = tvm.ir.load_json(text)          # C2.op.body reads C2.op.input_tensors
"""
from __future__ import annotations

import dataclasses
import enum
import json
import math

from ..ir import expr as E
from ..ir import stmt as S
from .tensor import ComputeOp, Operation, PlaceholderOp, Tensor, TEError

FORMAT, VERSION = "tilecraft-te-json", 1

_ENUMS = {c.__name__: c for c in (E.BinOp, E.UnOp, E.IterKind, S.ForKind)}
_CLASSES = {c.__name__: c for mod in (E, S) for c in vars(mod).values()
            if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == mod.__name__}


def save_json(node) -> str:
    """``node`` (an expression, IterVar, Range, tensor, operation, or a list of them) as JSON
    text that :func:`load_json` reads back.

    >>> save_json(te.var("n") + 1)[:40]
    '{"format": "tilecraft-te-json", "version'
    """
    nodes: list = []
    index: dict = {}

    def value(v):
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"float": repr(v)}
        if isinstance(v, enum.Enum):
            return {"enum": f"{type(v).__name__}.{v.name}"}
        if isinstance(v, (tuple, list)):
            return {"tuple": [value(x) for x in v]}
        if isinstance(v, dict):
            return {"dict": [[value(k), value(x)] for k, x in v.items()]}
        return {"node": ref(v)}

    def ref(obj) -> int:
        if id(obj) in index:
            return index[id(obj)]
        if isinstance(obj, Tensor):
            entry = {"type": "Tensor", "fields": {"op": None, "value_index": obj.value_index}}
            index[id(obj)] = len(nodes)
            nodes.append(entry)
            entry["fields"]["op"] = value(obj.op)
            return index[id(obj)]
        if isinstance(obj, PlaceholderOp):
            fields = {"name": obj.name, "shape": obj.shape, "dtype": obj.dtype}
        elif isinstance(obj, ComputeOp):
            fields = {"name": obj.name, "tag": obj.tag, "attrs": obj.attrs, "axis": obj.axis,
                      "reduce_axis": obj.reduce_axis, "body": obj.body,
                      "output_names": tuple(t.name for t in obj.outputs)}
        elif isinstance(obj, Operation):
            raise TEError(f"save_json: a {type(obj).__name__} ('{obj.name}') cannot be saved yet; "
                          "placeholders and compute operations can")
        elif type(obj).__name__ in _CLASSES and _CLASSES[type(obj).__name__] is type(obj):
            fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        else:
            raise TEError(f"save_json: cannot save a {type(obj).__name__} ({obj!r}); it saves "
                          "expressions, IterVars, ranges, reducers, tensors and operations")
        entry = {"type": type(obj).__name__, "fields": None}
        index[id(obj)] = len(nodes)
        nodes.append(entry)
        entry["fields"] = {k: value(v) for k, v in fields.items()}
        return index[id(obj)]

    root = value(node)
    return json.dumps({"format": FORMAT, "version": VERSION, "root": root, "nodes": nodes})


def load_json(text: str):
    """The object that :func:`save_json` wrote as ``text``: new objects, sharing among
    themselves what the saved ones shared.

    >>> C2 = load_json(save_json(C))
    """
    try:
        doc = json.loads(text)
    except (TypeError, json.JSONDecodeError) as err:
        raise TEError(f"load_json: not JSON text ({err})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TEError("load_json: not a tilecraft TE JSON document (no \"format\": \"tilecraft-te-json\")")
    if doc.get("version") != VERSION:
        raise TEError(f"load_json: version {doc.get('version')!r} of the format; this tilecraft reads {VERSION}")
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise TEError("load_json: the document has no node table")
    built: dict = {}

    def value(v, where: str):
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, dict) and len(v) == 1:
            (key, x), = v.items()
            if key == "node":
                return node(x, where)
            if key == "tuple" and isinstance(x, list):
                return tuple(value(y, where) for y in x)
            if key == "float" and x in ("nan", "inf", "-inf"):
                return float(x)
            if key == "enum" and isinstance(x, str) and "." in x:
                cls, name = x.split(".", 1)
                if cls in _ENUMS and name in _ENUMS[cls].__members__:
                    return _ENUMS[cls][name]
            if key == "dict" and isinstance(x, list):
                return {value(k, where): value(y, where) for k, y in x}
        raise TEError(f"load_json: {where}: a value the format does not have: {v!r}")

    def node(k, where: str):
        if not isinstance(k, int) or not 0 <= k < len(nodes):
            raise TEError(f"load_json: {where}: no node {k!r} in the table")
        if k in built:
            if built[k] is None:
                raise TEError(f"load_json: node {k} refers to itself")
            return built[k]
        entry = nodes[k]
        if not isinstance(entry, dict) or not isinstance(entry.get("fields"), dict):
            raise TEError(f"load_json: node {k} is not an object with fields")
        kind, raw = entry.get("type"), entry["fields"]
        built[k] = None
        here = f"node {k} ({kind})"
        try:
            if kind == "Tensor":
                op = value(raw["op"], here)
                obj = op.outputs[int(raw["value_index"])]
            elif kind == "PlaceholderOp":
                obj = PlaceholderOp(raw["name"], value(raw["shape"], here), raw["dtype"])
            elif kind == "ComputeOp":
                f = {name: value(raw[name], here) for name in
                     ("name", "tag", "attrs", "axis", "reduce_axis", "body", "output_names")}
                obj = ComputeOp(f["name"], f["tag"], f["attrs"], f["axis"], f["reduce_axis"], f["body"],
                                f["output_names"])
            elif kind in _CLASSES:
                obj = _CLASSES[kind](**{name: value(x, here) for name, x in raw.items()})
            else:
                raise TEError(f"load_json: {here}: unknown node type {kind!r}")
        except (KeyError, TypeError, IndexError, AttributeError) as err:
            raise TEError(f"load_json: {here}: malformed ({type(err).__name__}: {err})") from None
        built[k] = obj
        return obj

    return value(doc.get("root"), "root")
