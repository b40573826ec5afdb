"""Tuning records: one JSON object per line.

A record (format version 1)::

    {"v": 1, "tilecraft": "0.1.0", "target": "llvm", "device": "AMD EPYC 7B13",
     "task": {"name": "example/matmul", "args": [512, 512, 512, "float32"], "flop": 268435456.0,
              "module": "tilecraft.topi.matmul"},
     "config": {"index": 1234, "code_hash": null, "knobs": [["tile_y", "sp", [-1, 8]], ...]},
     "costs": [0.0012, 0.0011], "error": "NO_ERROR", "error_msg": "", "all_cost": 0.9,
     "build_time": 0.4, "timestamp": 1763730000.0}

A record of a re-measurement after the run (``Tuner.tune(verify_top=)``) also has
``"stage": "verify"`` (absent means ``"tune"``; logs written before it existed read as they
did). Where a workload has verified records, the best of those is its best (``best_by_workload``,
``export``, ``apply_history_best``): the tuning figures of the best configs are biased
(the fastest of many noisy measurements is the luckiest) and taken while other builds ran.

Readers skip lines that are not valid records, with one warning that counts them by reason: a
truncated last line (a run killed mid-write), a newer format version, a non-integer ``"v"``,
arguments that are not a list, costs that are missing, zero, negative or implausibly small
(more than ``MAX_PLAUSIBLE_FLOPS``). A TVM log is recognised and named as one. Appending
(``append_lines``) starts on a fresh line after a torn one. Whether a record still fits its
template (knob names and values) is checked where the template is at hand: ``TemplateFit``.
"""
from __future__ import annotations

import json
import math
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
#: what a record's optional ``stage`` may say (see the module docstring)
STAGES = ("tune", "verify")


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


def _check_protocol(protocol: str, api: str) -> None:
    if protocol != "json":
        raise ValueError(f"record.{api}: protocol {protocol!r} is not supported; tilecraft's records are "
                         f"JSON lines only (never pickles)")


def encode(inp: MeasureInput, res: MeasureResult, protocol: str = "json", device: str | None = None,
           run: dict | None = None) -> str:
    """One record as a JSON line (without the newline). ``protocol`` is TVM's argument: only
    ``"json"``. ``device`` names the machine measured (default: this one's CPU or GPU); ``run``
    (optional) the tuning run it came from: ``{"id": ..., "tuner": ...}`` (what ``tilecraft log
    plot`` groups curves by)."""
    _check_protocol(protocol, "encode")
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
    if res.stage != "tune":
        rec["stage"] = res.stage
    if run:
        rec["run"] = run
    return json.dumps(rec, separators=(",", ":"))


def _jsonable(x):
    return [_jsonable(a) for a in x] if isinstance(x, (list, tuple)) else x


class RecordError(ValueError):
    """A line that is not a record this tilecraft can use; ``kind`` says why in a few words
    (what the one warning of a reader counts by)."""

    def __init__(self, message: str, kind: str = "malformed"):
        super().__init__(message)
        self.kind = kind


#: No device runs faster than this (FLOP/s); a record claiming more has a broken cost.
MAX_PLAUSIBLE_FLOPS = 1e16
#: No measured call takes less than this many seconds (when a task's FLOPs are unknown).
MIN_PLAUSIBLE_COST = 1e-9

TVM_LOG_ADVICE = ("tilecraft cannot apply TVM's records (its templates and knobs are its own): "
                  "tune the operator with `tilecraft tune` (or autotune.tuner) and use that log")

_task_cache: dict = {}


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _foreign_kind(rec) -> str | None:
    """Which TVM format a decoded line is in, if it is one."""
    if "input" in rec and "result" in rec:
        return "TVM AutoTVM record"
    if "i" in rec and "r" in rec:
        return "TVM auto-scheduler record"
    return None


def _check(rec: dict) -> None:
    """Raise ``RecordError`` unless ``rec`` is a well-formed record of a known format version."""
    foreign = _foreign_kind(rec)
    if foreign:
        raise RecordError(f"a {foreign}, not a tilecraft one", foreign)
    v = rec.get("v")
    if "v" not in rec:
        raise RecordError("not a tilecraft tuning record (no \"v\")", "not a tilecraft record")
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise RecordError(f"format version \"v\" must be a positive integer, got {v!r}", "bad version")
    if v > FORMAT_VERSION:
        raise RecordError(f"record format {v} is newer than this tilecraft's ({FORMAT_VERSION})", "newer format")
    t = rec.get("task")
    if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
        raise RecordError("\"task\" must be an object with a \"name\"", "malformed")
    if not isinstance(t.get("args"), list):
        raise RecordError(f"task arguments must be a JSON list, got {t.get('args')!r}", "bad task arguments")
    flop = t.get("flop", 0.0)
    if not _is_number(flop) or not math.isfinite(flop) or flop < 0:
        raise RecordError(f"task FLOPs must be a non-negative number, got {flop!r}", "bad FLOP count")
    if rec.get("target") is not None and not isinstance(rec["target"], str):
        raise RecordError(f"target must be a string, got {rec['target']!r}", "malformed")
    cfg = rec.get("config")
    if (not isinstance(cfg, dict) or not isinstance(cfg.get("knobs"), list)
            or not all(isinstance(k, list) and len(k) == 3 and isinstance(k[0], str) for k in cfg["knobs"])):
        raise RecordError("\"config\" must be an object with \"knobs\": [[name, kind, value], ...]", "malformed")
    index = cfg.get("index")
    if index is not None and (not isinstance(index, int) or isinstance(index, bool) or index < 0):
        raise RecordError(f"config index must be a non-negative integer, got {index!r}", "malformed")
    error = rec.get("error")
    if error not in MeasureErrorNo.__members__:
        raise RecordError(f"unknown error kind {error!r}", "malformed")
    if rec.get("stage", "tune") not in STAGES:
        raise RecordError(f"stage must be one of {list(STAGES)}, got {rec.get('stage')!r}", "malformed")
    costs = rec.get("costs")
    if not isinstance(costs, list) or not all(_is_number(c) for c in costs):
        raise RecordError(f"costs must be a list of seconds, got {costs!r}", "bad costs")
    if error == "NO_ERROR":
        if not costs or not all(math.isfinite(c) and c > 0 for c in costs):
            raise RecordError(f"costs of a successful measurement must be positive seconds, got {costs!r}",
                              "bad costs")
        mean = sum(costs) / len(costs)
        if (flop and flop / mean > MAX_PLAUSIBLE_FLOPS) or mean < MIN_PLAUSIBLE_COST:
            raise RecordError(f"costs {costs!r} are implausibly small"
                              + (f" ({flop / mean / 1e9:.3g} GFLOP/s)" if flop else ""), "implausible costs")


def measure_str_key(inp: MeasureInput, include_config: bool = True) -> str:
    """TVM's key of a measurement: the target, the task's name and arguments and (with
    ``include_config``) the configuration, as one string (to find duplicate measurements).

    >>> measure_str_key(inp)
    "llvm -mcpu=znver5topi/matmul.llvm(64, 64, 64, 'float32')[tile_y=sp[-1, 4],...],None,3"
    """
    return "".join([str(inp.target), inp.task.name, str(tuple(inp.task.args)),
                    str(inp.config) if include_config else ""])


def decode(line: str, protocol: str = "json") -> tuple[MeasureInput, MeasureResult]:
    """A JSON line → ``(MeasureInput, MeasureResult)`` (``protocol``: TVM's, only ``"json"``);
    raises ``RecordError`` if it is not a
    valid record this version understands (see ``_check``: costs must be positive and
    plausible, arguments a list, the version an integer no newer than ``FORMAT_VERSION``).

    >>> inp, res = decode(encode(inp, res))
    """
    _check_protocol(protocol, "decode")
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as err:
        raise RecordError(f"not JSON ({err}); a truncated line?", "not JSON") from err
    if not isinstance(rec, dict):
        raise RecordError("not a tilecraft tuning record (not a JSON object)", "not a tilecraft record")
    _check(rec)
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
                            float(rec.get("build_time", 0.0)), rec.get("stage", "tune"))
    except (KeyError, TypeError, ValueError) as err:
        raise RecordError(f"malformed record: {type(err).__name__}: {err}") from err
    return MeasureInput(target, task, config), res


def run_info(line: str) -> dict:
    """The ``run`` field of a raw record line ({} when absent or unreadable)."""
    try:
        return json.loads(line).get("run") or {}
    except (json.JSONDecodeError, AttributeError):
        return {}


class Skipped:
    """The records a reader passed over, counted by reason, and the one warning that says so.

    >>> skipped = Skipped("tuning_logs/matmul.jsonl")
    >>> recs = list(iter_file("tuning_logs/matmul.jsonl", skipped=skipped))
    >>> skipped.warn()        # nothing when no record was skipped
    """

    def __init__(self, source):
        self.source = os.fspath(source) if isinstance(source, (str, os.PathLike)) else str(source)
        self.counts: "OrderedDict[str, int]" = OrderedDict()
        self.first: dict = {}
        self.seen = 0

    def add(self, kind: str, where: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.first.setdefault(kind, where)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def message(self) -> str | None:
        if not self.counts:
            return None
        foreign = [k for k in self.counts if k.startswith("TVM")]
        if foreign and self.total == self.seen:
            return (f"{self.source} is a TVM log ({self.total} {foreign[0]}s), not a tilecraft log: "
                    + TVM_LOG_ADVICE)
        parts = [f"{n} {kind} (first: {self.first[kind]})" for kind, n in self.counts.items()]
        text = f"{self.source}: skipped {self.total} invalid record(s) of {self.seen}: " + "; ".join(parts)
        if foreign:
            text += f". {TVM_LOG_ADVICE}"
        return text

    def warn(self, stacklevel: int = 2) -> None:
        msg = self.message()
        if msg:
            warnings.warn(msg, RuntimeWarning, stacklevel=stacklevel + 1)


def iter_file(path, with_run: bool = False, skipped: Skipped | None = None) -> Iterator:
    """Records of ``path`` in order, skipping lines that are not valid records. One warning at
    the end counts them by reason, unless ``skipped`` (a ``Skipped``) is given: then they are
    added to it and the caller warns. With ``with_run``, yields ``(inp, res, run)`` where
    ``run`` is the record's run field.

    >>> for inp, res in iter_file("tuning_logs/matmul.jsonl"): ...
    """
    own = skipped is None
    skipped = Skipped(path) if own else skipped
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        yield from iter_lines(f, with_run, skipped)
    if own:
        skipped.warn(stacklevel=2)


def iter_lines(lines, with_run: bool = False, skipped: Skipped | None = None) -> Iterator:
    """``iter_file`` of lines already open (a file object, ``io.StringIO``, a list of strings):
    the records in order, invalid lines counted in ``skipped`` (one warning at the end when it
    is not given).

    >>> records = list(iter_lines(open("tuning_logs/matmul.jsonl")))
    """
    own = skipped is None
    skipped = Skipped(getattr(lines, "name", "<lines>")) if own else skipped
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        skipped.seen += 1
        try:
            inp, res = decode(line)
        except RecordError as err:
            skipped.add(err.kind, f"line {lineno}: {err}")
            continue
        yield (inp, res, run_info(line)) if with_run else (inp, res)
    if own:
        skipped.warn(stacklevel=2)


def load_from_file(path) -> list[tuple[MeasureInput, MeasureResult]]:
    """All readable records of the log at ``path``."""
    return list(iter_file(path))


def append_lines(path, text: str) -> None:
    """Append ``text`` (whole lines) to the log at ``path``, flushed and fsynced. A last line left
    torn by a killed run is closed first, so the new records start on a line of their own (the
    torn line stays one unreadable line, and no new record is glued to it).

    >>> append_lines("tuning_logs/matmul.jsonl", encode(inp, res) + "\n")
    """
    with open(path, "a+b") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                text = "\n" + text
        f.write(text.encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())


def save_to_file(records: Iterable[tuple[MeasureInput, MeasureResult]], path, device: str | None = None):
    """Append ``records`` to the log at ``path`` (see ``append_lines``).

    >>> save_to_file(load_from_file("old.jsonl")[:10], "new.jsonl")
    """
    append_lines(path, "".join(encode(inp, res, device=device) + "\n" for inp, res in records))


class TemplateFit:
    """Whether logged configs fit their templates as the templates are now: a config's knobs
    must be the template's (names and order) and its values ones the template offers for the
    record's arguments and target (``ConfigSpace.mismatch``). Each (template, arguments,
    target) space is collected once, by running the template. A template that cannot be
    imported cannot be checked: ``problem`` answers None for its records.

    >>> fit = TemplateFit()
    >>> fit.problem(inp)        # None, or why the record does not fit its template any more
    """

    def __init__(self):
        self._spaces: dict = {}

    def space(self, task, target):
        """The template's space for ``task``'s arguments on ``target``; None when the template
        cannot be imported; the exception when it fails for these arguments now."""
        key = (task.workload, str(target) if target is not None else None)
        if key not in self._spaces:
            self._spaces[key] = self._collect(task, target)
        return self._spaces[key]

    @staticmethod
    def _collect(task, target):
        from .task import collect_space

        try:
            func = task.func                  # imports the template's module when needed
        except Exception:
            return None
        try:
            return collect_space(func, task.args, target)[0]
        except Exception as err:             # the template rejects these arguments now
            return err

    def problem(self, inp: MeasureInput, target=None) -> str | None:
        """Why ``inp``'s config does not fit its template (checked for ``target``, by default
        the record's), or None."""
        space = self.space(inp.task, target if target is not None else inp.target)
        if space is None:
            return None
        if isinstance(space, Exception):
            return f"the template fails for these arguments now ({type(space).__name__}: {space})"
        return space.mismatch(inp.config)


NOT_FITTING = "not fitting the template now"


def read_valid(records_or_path, check_templates: bool = True, with_run: bool = False,
               skipped: Skipped | None = None) -> list:
    """The valid records of a log path (or an iterable of records): well-formed and, with
    ``check_templates``, fitting their template as it is now (``TemplateFit``; records of a
    template that cannot be imported are kept). The rest are skipped with one warning that
    counts them by reason, or added to ``skipped``. With ``with_run`` (paths only), items are
    ``(inp, res, run)``.

    >>> records = read_valid("tuning_logs/matmul.jsonl")
    """
    own = skipped is None
    if own:
        skipped = Skipped(records_or_path if isinstance(records_or_path, (str, os.PathLike)) else "records")
    if isinstance(records_or_path, (str, os.PathLike)):
        rows = list(iter_file(records_or_path, with_run=with_run, skipped=skipped))
    else:
        rows = list(records_or_path)
        skipped.seen += len(rows)
    if check_templates:
        fit, kept = TemplateFit(), []
        for row in rows:
            inp = row[0]
            why = fit.problem(inp)
            if why is None:
                kept.append(row)
            else:
                skipped.add(NOT_FITTING, f"{inp.task.name}{list(inp.task.args)} config {inp.config.index}: {why}")
        rows = kept
    if own:
        skipped.warn(stacklevel=3)
    return rows


def best_by_workload(records_or_path, check_templates: bool = True) -> dict:
    """``{(target, workload): (MeasureInput, MeasureResult)}``: the fastest valid, error-free
    record of each workload on each target; where a workload has re-measured records
    (``"stage": "verify"``), the fastest of those. With ``check_templates`` (the default),
    records that no longer fit their template (``TemplateFit``) are skipped, so a stale record
    cannot hide the best one that still applies.

    >>> best_by_workload("tuning_logs/matmul.jsonl")
    """
    best: dict = {}
    for inp, res in read_valid(records_or_path, check_templates):
        if not res.ok:
            continue
        key = (str(inp.target), inp.task.workload)
        if key not in best or preference(res) < preference(best[key][1]):
            best[key] = (inp, res)
    return best


def preference(res: MeasureResult) -> tuple:
    """The order records are chosen in (lower first): re-measured ones before tuning ones, then
    by mean cost.

    >>> sorted(results, key=preference)[0]      # the best verified result, if any
    """
    return (0 if res.stage == "verify" else 1, res.mean_cost)


def pick_best(in_file, out_file=None, check_templates: bool = True) -> list[tuple[MeasureInput, MeasureResult]]:
    """The best valid record of every (target, workload) of ``in_file`` (a path or records);
    written to ``out_file`` when given (TVM's ``pick_best(in_file, out_file)``).

    >>> pick_best("tuning_logs/matmul.jsonl", "best.jsonl")
    """
    best = list(best_by_workload(in_file, check_templates).values())
    if out_file is not None:
        with open(out_file, "w", encoding="utf-8") as f:
            for inp, res in best:
                f.write(encode(inp, res) + "\n")
    return best


def _message_line(msg: str, limit: int = 160) -> str:
    """The line of an error message that says most: its last non-empty line (a traceback's
    exception), cut to ``limit`` characters."""
    lines = [ln.strip() for ln in str(msg).splitlines() if ln.strip()]
    line = lines[-1] if lines else "(no message)"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def summarize(records_or_path, check_templates: bool = True) -> dict:
    """Counts, error messages and the best result per (target, workload): what ``tilecraft log
    summary`` prints. Per key: ``records``, ``configs`` (distinct), ``errors`` ({kind: count}),
    ``messages`` ({kind: {message line: count}}), ``best``/``best_cost``, ``best_record``
    (its position among the key's distinct configs, from 1), ``flop``. Invalid records, and with
    ``check_templates`` records that no longer fit their template, are skipped with one warning.

    >>> for (target, workload), s in summarize("tuning_logs/matmul.jsonl").items(): ...
    """
    records = read_valid(records_or_path, check_templates)
    out: dict = OrderedDict()
    seen: dict = {}
    for inp, res in records:
        key = (str(inp.target), inp.task.workload)
        s = out.setdefault(key, {"records": 0, "configs": 0, "errors": {}, "messages": {},
                                 "best_cost": float("inf"), "best": None, "best_record": None,
                                 "flop": inp.task.flop})
        s["records"] += 1
        configs = seen.setdefault(key, set())
        cfg_key = json.dumps(inp.config.to_json_dict()["knobs"])
        if cfg_key not in configs:
            configs.add(cfg_key)
            s["configs"] += 1
        if res.ok:
            if res.mean_cost < s["best_cost"]:
                s["best_cost"], s["best"], s["best_record"] = res.mean_cost, inp.config, s["configs"]
        else:
            kind = res.error_no.name
            s["errors"][kind] = s["errors"].get(kind, 0) + 1
            msgs = s["messages"].setdefault(kind, {})
            line = _message_line(res.error_msg)
            msgs[line] = msgs.get(line, 0) + 1
    for s in out.values():
        s["trials"] = s["configs"]
    return out


def __getattr__(name):
    # TVM's ``autotvm.record.ApplyHistoryBest`` (its record module imports it from the dispatch
    # context); dispatch reads logs through this module, so it is reached lazily, on first use
    if name == "ApplyHistoryBest":
        from .dispatch import ApplyHistoryBest
        return ApplyHistoryBest
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
