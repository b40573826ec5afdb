"""The cache files of bench/ground_truth.py (JSON-lines rows that survive a killed process), the
timing child's view of the builders' progress, the output check and ``--cpus`` parsing: helpers
with no knowledge of the spaces."""
from __future__ import annotations

import json
import os
import time

import numpy as np


def read_rows(path: str) -> list[dict]:
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:       # a torn last line of a killed chunk
                    pass
    return rows


def append_row(path: str, row: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row, separators=(",", ":")) + "\n")
        f.flush()


def follow_built(d: str, indices: list[int], deadline: float):
    """Yield ``indices`` in their order as far as they are built (`built.jsonl`), then the rest as
    their libraries appear; skip those that failed to build; end when none is left, when none can
    come any more (the driver wrote `builders_done`), or at ``deadline``."""
    built_path, done_path = os.path.join(d, "built.jsonl"), os.path.join(d, "builders_done")
    left, status, offset = list(indices), {}, 0
    while left and time.time() < deadline:
        done = os.path.exists(done_path)      # looked at first: every row written before it is read below
        if os.path.exists(built_path):
            with open(built_path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            chunk = chunk[: chunk.rfind(b"\n") + 1]      # whole lines only; a half-written one waits
            offset += len(chunk)
            for line in chunk.decode("utf-8", "replace").splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                status[r["i"]] = "error" not in r
        ready = [i for i in left if status.get(i)]
        left = [i for i in left if i not in status]
        yield from ready
        if not ready:
            if done:
                return
            time.sleep(0.2)


def check_outputs(nd, arg_info, ref) -> str | None:
    for k, (_, _, is_out) in enumerate(arg_info):
        if not is_out:
            continue
        got = nd[k].numpy() if hasattr(nd[k], "numpy") else np.asarray(nd[k])
        want = ref[f"out{k}"]
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-3, atol=1e-3, equal_nan=True):
            err = np.abs(got.astype(np.float64) - want)
            return f"output {k} differs from the naive schedule's: max abs error {float(np.nanmax(err)):.3g}"
    return None


def parse_cpus(text: str) -> set[int]:
    """``"0-13"`` / ``"0,2,4-7"`` -> the set of CPU numbers."""
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus |= set(range(int(lo), int(hi or lo) + 1))
    return cpus
