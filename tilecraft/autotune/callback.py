"""Callbacks a tuner calls after every measured batch: ``callback(tuner, inputs, results)``.

    tuner.tune(n_trial=200, measure_option=option,
               callbacks=[autotune.callback.progress_bar(200),
                          autotune.callback.log_to_file("tuning_logs/matmul.jsonl")])
"""
from __future__ import annotations

import os
import sys
import uuid

from . import record


def log_to_file(path, device: str | None = None):
    """Append every measurement to the JSON-lines log at ``path``. Each record is flushed and
    fsynced before the tuner goes on, so a killed run loses no completed measurement; a torn
    last line left by a killed run is closed first (``record.append_lines``). Re-measurements
    of ``tune(verify_top=)`` are logged too, as ``"stage": "verify"`` records. ``path`` may
    also be an open text file (TVM's ``log_to_file(file_out)``): the lines are written to it
    and flushed; closing it is the caller's.

    >>> tuner.tune(n_trial=64, callbacks=[autotvm.callback.log_to_file("matmul.jsonl")])
    """
    run = {"id": uuid.uuid4().hex[:12]}

    def lines(tuner, inputs, results) -> str:
        dev = device or getattr(tuner, "device_name", None)
        run["tuner"] = type(tuner).__name__
        return "".join(record.encode(inp, res, device=dev, run=run) + "\n" for inp, res in zip(inputs, results))

    if hasattr(path, "write"):
        def _to_stream(tuner, inputs, results):
            path.write(lines(tuner, inputs, results))
            path.flush()
        _to_stream.path = getattr(path, "name", None)
        _to_stream.logs_verification = True
        return _to_stream

    path = os.fspath(path)
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)

    def _callback(tuner, inputs, results):
        record.append_lines(path, lines(tuner, inputs, results))

    _callback.path = path
    _callback.logs_verification = True      # Tuner.verify logs its re-measurements through it
    return _callback


class progress_bar:  # noqa: N801 -- AutoTVM's name
    """A tqdm bar: trials done, best GFLOP/s so far, errors so far.

    ``total`` is the trial count; ``prefix`` is shown before the bar.
    """

    def __init__(self, total: int, prefix: str = "", si_prefix: str = "G", file=None):
        self.total = total
        self.prefix = prefix
        self.scale = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[si_prefix]
        self.si_prefix = si_prefix
        self.file = file if file is not None else sys.stderr
        self._bar = None
        self.errors = 0
        self.done = 0

    def __call__(self, tuner, inputs, results):
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=self.prefix or tuner.task.name, file=self.file,
                             unit="trial", dynamic_ncols=True)
        self.done += len(results)
        self.errors += sum(1 for r in results if not r.ok)
        best = tuner.best_flops / self.scale
        self._bar.set_postfix_str(f"best {best:.2f} {self.si_prefix}FLOP/s, errors {self.errors}", refresh=False)
        self._bar.update(len(results))
        if self.done >= self.total or getattr(tuner, "finished", False):
            self.close()

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None
