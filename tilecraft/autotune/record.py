"""Tuning records: one JSON object per line.

A record (format version 1)::

    {"v": 1, "tilecraft": "0.1.0", "target": "llvm", "device": "AMD EPYC 7B13",
     "task": {"name": "example/matmul", "args": [512, 512, 512, "float32"], "flop": 268435456.0,
              "module": "tilecraft.topi.matmul"},
     "config": {"index": 1234, "code_hash": null, "knobs": [["tile_y", "sp", [-1, 8]], ...]},
     "costs": [0.0012, 0.0011], "error": "NO_ERROR", "error_msg": "", "all_cost": 0.9,
     "build_time": 0.4, "timestamp": 1763730000.0}

``load_from_file`` skips lines that are not valid records (a run killed mid-write leaves a
truncated last line) with one warning that counts them. Records of a newer format version are
skipped the same way.
"""
from __future__ import annotations

import json
import os
import platform
import warnings
from collections import OrderedDict
from typing import Iterable, Iterator

from tilecraft.target import Target

from .measure import MeasureErrorNo, MeasureInput, MeasureResult
from .space import ConfigEntity
from .task import Task, workload_from_json

FORMAT_VERSION = 1


def tilecraft_version() -> str:
    try:
        from importlib.metadata import version

        return version("tilecraft")
    except Exception:
        return "0.1.0"


_device_cache: dict = {}


def local_device_name(target=None) -> str:
    """The name of the device ``target`` runs on here: the CPU model for ``llvm``."""
    kind = getattr(target, "kind", None) or (str(target).split()[0] if target else "llvm")
    if kind in _device_cache:
        return _device_cache[kind]
    name = None
    if kind == "cuda":
        name = "cuda:0"
    else:
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        name = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        name = name or platform.processor() or platform.machine()
    _device_cache[kind] = name
    return name


def encode(inp: MeasureInput, res: MeasureResult, device: str | None = None, run: dict | None = None) -> str:
    """One record as a JSON line (without the newline). ``run`` (optional) names the tuning run
    it came from: ``{"id": ..., "tuner": ...}`` (what ``tilecraft log plot`` groups curves by)."""
    task = inp.task
    rec = OrderedDict(
        v=FORMAT_VERSION,
        tilecraft=tilecraft_version(),
        target=str(inp.target) if inp.target is not None else None,
        device=device if device is not None else local_device_name(inp.target),
        task={"name": task.name, "args": _jsonable(task.args), "flop": float(task.flop or 0.0),
              "module": task.template_module},
        config=inp.config.to_json_dict(),
        costs=list(res.costs),
        error=res.error_no.name,
        error_msg=res.error_msg,
        all_cost=res.all_cost,
        build_time=res.build_time,
        timestamp=res.timestamp,
    )
    if run:
        rec["run"] = run
    return json.dumps(rec, separators=(",", ":"))


def _jsonable(x):
    return [_jsonable(a) for a in x] if isinstance(x, (list, tuple)) else x


class RecordError(ValueError):
    pass


_task_cache: dict = {}


def decode(line: str) -> tuple[MeasureInput, MeasureResult]:
    """A JSON line → ``(MeasureInput, MeasureResult)``; raises ``RecordError`` if it is not a
    record this version understands."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as err:
        raise RecordError(f"not JSON: {err}") from err
    if not isinstance(rec, dict) or "v" not in rec:
        raise RecordError("not a tilecraft tuning record")
    if rec["v"] > FORMAT_VERSION:
        raise RecordError(f"record format {rec['v']} is newer than this tilecraft's ({FORMAT_VERSION})")
    try:
        t = rec["task"]
        target = Target(rec["target"]) if rec.get("target") else None
        key = (t["name"], json.dumps(t["args"]), rec.get("target"))
        task = _task_cache.get(key)
        if task is None:
            task = Task(t["name"], workload_from_json(t["args"]), target, None, t.get("module"))
            task.flop = float(t.get("flop", 0.0))
            _task_cache[key] = task
        config = ConfigEntity.from_json_dict(rec["config"])
        res = MeasureResult(tuple(rec["costs"]), MeasureErrorNo[rec["error"]], rec.get("error_msg", ""),
                            float(rec.get("all_cost", 0.0)), float(rec.get("timestamp", 0.0)),
                            float(rec.get("build_time", 0.0)))
    except (KeyError, TypeError, ValueError) as err:
        raise RecordError(f"malformed record: {type(err).__name__}: {err}") from err
    return MeasureInput(target, task, config), res


def run_info(line: str) -> dict:
    """The ``run`` field of a raw record line ({} when absent or unreadable)."""
    try:
        return json.loads(line).get("run") or {}
    except (json.JSONDecodeError, AttributeError):
        return {}


def iter_file(path, with_run: bool = False) -> Iterator:
    """Records of ``path`` in order, skipping bad lines (one warning at the end counts them).
    With ``with_run``, yields ``(inp, res, run)`` where ``run`` is the record's run field."""
    bad = 0
    first_bad = None
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                inp, res = decode(line)
            except RecordError as err:
                bad += 1
                first_bad = first_bad or (lineno, str(err))
                continue
            yield (inp, res, run_info(line)) if with_run else (inp, res)
    if bad:
        warnings.warn(f"{path}: skipped {bad} corrupt or unreadable line(s) "
                      f"(first: line {first_bad[0]}: {first_bad[1]})", RuntimeWarning, stacklevel=2)


def load_from_file(path) -> list[tuple[MeasureInput, MeasureResult]]:
    """All readable records of the log at ``path``."""
    return list(iter_file(path))


def save_to_file(records: Iterable[tuple[MeasureInput, MeasureResult]], path, device: str | None = None):
    with open(path, "a", encoding="utf-8") as f:
        for inp, res in records:
            f.write(encode(inp, res, device) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _records(records_or_path):
    if isinstance(records_or_path, (str, os.PathLike)):
        return load_from_file(records_or_path)
    return list(records_or_path)


def best_by_workload(records_or_path) -> dict:
    """``{(target, workload): (MeasureInput, MeasureResult)}``: the fastest error-free record of
    each workload on each target."""
    best: dict = {}
    for inp, res in _records(records_or_path):
        if not res.ok:
            continue
        key = (str(inp.target), inp.task.workload)
        if key not in best or res.mean_cost < best[key][1].mean_cost:
            best[key] = (inp, res)
    return best


def pick_best(in_file, out_file=None) -> list[tuple[MeasureInput, MeasureResult]]:
    """The best record of every (target, workload) of ``in_file`` (a path or records); written
    to ``out_file`` when given (TVM's ``pick_best(in_file, out_file)``)."""
    best = list(best_by_workload(in_file).values())
    if out_file is not None:
        with open(out_file, "w", encoding="utf-8") as f:
            for inp, res in best:
                f.write(encode(inp, res) + "\n")
    return best


def summarize(records_or_path) -> dict:
    """Counts and best result per workload: what ``tilecraft log summary`` prints."""
    records = _records(records_or_path)
    out: dict = OrderedDict()
    for inp, res in records:
        key = (str(inp.target), inp.task.workload)
        s = out.setdefault(key, {"trials": 0, "errors": {}, "best_cost": float("inf"), "best": None,
                                 "flop": inp.task.flop, "device": None})
        s["trials"] += 1
        if res.ok:
            if res.mean_cost < s["best_cost"]:
                s["best_cost"], s["best"] = res.mean_cost, inp.config
        else:
            s["errors"][res.error_no.name] = s["errors"].get(res.error_no.name, 0) + 1
    return out
