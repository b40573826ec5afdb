"""TVM's ``autotvm.database``: a store of measurements keyed by what was measured, to skip configs
measured before (``filter_inputs``) and to look results up.

``DummyDatabase`` keeps the records in memory, as TVM's does; each key is
``record.measure_str_key(inp)`` (target, task, arguments, config) and holds the JSON lines of its
results (``record.encode``), newest last. ``save(inp, res)`` replaces them, ``save(inp, res,
extend=True)`` adds one; ``load(inp)`` gives the newest ``MeasureResult`` (``get_all=True``: all
of them), ``filter(pred)`` the ``(MeasureInput, newest MeasureResult)`` of each input whose
results ``pred(inp, results)`` accepts.
TVM's ``RedisDatabase`` (a redis server) is not provided; the tuning logs are tilecraft's
persistent store (``record.load_from_file``).

>>> db = DummyDatabase(); db.save(inp, res)
>>> db.load(inp).costs
(0.00012,)
"""
from __future__ import annotations

from . import record


class Database:
    """The interface: ``load``, ``save``, ``filter``, ``get``, ``set``, ``flush``."""

    def load(self, inp, get_all: bool = False):
        raise NotImplementedError

    def save(self, inp, res, extend: bool = False) -> None:
        raise NotImplementedError

    def filter(self, func) -> list:
        raise NotImplementedError

    def get(self, key: str):
        raise NotImplementedError

    def set(self, key: str, value) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError


class DummyDatabase(Database):
    """An in-memory database (see the module docstring)."""

    def __init__(self):
        self.db: dict[str, list[str]] = {}

    def load(self, inp, get_all: bool = False):
        """The newest result saved for ``inp`` (all of them, oldest first, with ``get_all``), or
        None when there is none."""
        lines = self.db.get(record.measure_str_key(inp))
        if not lines:
            return None
        results = [record.decode(line)[1] for line in lines]
        return results if get_all else results[-1]

    def save(self, inp, res, extend: bool = False) -> None:
        """Store ``res`` for ``inp``: replacing what was there, or added to it with ``extend``."""
        key = record.measure_str_key(inp)
        line = record.encode(inp, res)
        if extend:
            self.db.setdefault(key, []).append(line)
        else:
            self.db[key] = [line]

    def filter(self, func) -> list:
        """``(MeasureInput, newest MeasureResult)`` of each stored input for which ``func(inp,
        results)`` is true, ``results`` all of that input's results (TVM's signature).

        >>> errors = db.filter(lambda inp, results: any(r.error_no != 0 for r in results))
        """
        out = []
        for lines in self.db.values():
            records = [record.decode(line) for line in lines]
            if not records:
                continue
            results = tuple(res for _, res in records)
            if func(records[0][0], results):
                out.append((records[0][0], max(results, key=lambda r: r.timestamp)))
        return out

    def get(self, key: str):
        return self.db.get(key)

    def set(self, key: str, value) -> None:
        self.db[key] = value

    def flush(self) -> None:
        self.db = {}


def filter_inputs(db: Database, measure_inputs, retry: bool = False) -> tuple[list, list]:
    """``(partial_results, unsaved)`` as TVM's: for each input its stored result or None, and the
    inputs still to measure (no result in ``db``, or with ``retry`` an error result).

    >>> partial, todo = filter_inputs(db, inputs)
    """
    partial, todo = [], []
    for inp in measure_inputs:
        res = db.load(inp)
        if res is None or (retry and res.error_no != 0):
            todo.append(inp)
            partial.append(None)
        else:
            partial.append(res)
    return partial, todo
