"""How busy the machine is, from /proc: for the benches that time only when it is quiet
(`ground_truth.py`, `tuner_budget.py`).

    >>> t0 = cpu_busy_jiffies(); time.sleep(1); busy_cores(t0, cpu_busy_jiffies())   # cores kept busy
    >>> busy_fraction([14, 15])                                                      # {14: 0.01, 15: 0.0}
"""
from __future__ import annotations

import math
import os
import time


def cpu_busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    total = sum(vals[:8])
    return total - idle, total


def busy_cores(t0: tuple[int, int], t1: tuple[int, int]) -> float:
    dt = t1[1] - t0[1]
    return (t1[0] - t0[0]) / dt * (os.cpu_count() or 1) if dt > 0 else 0.0


def load1() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


class OwnLoad:
    """This script's own share of the 1-minute load average, tracked as the kernel computes it
    (every 5 s: load = load * e + running * (1 - e), e = exp(-5/60)): a timing chunk counts 1."""

    def __init__(self):
        self.value, self.t = 0.0, time.time()

    def add(self, running: float, seconds: float) -> None:
        e = math.exp(-seconds / 60.0)
        self.value = self.value * e + running * (1 - e)
        self.t = time.time()

    def now(self) -> float:
        return self.value * math.exp(-(time.time() - self.t) / 60.0)


def core_jiffies(cores: list[int]) -> dict[int, tuple[int, int]]:
    """(busy, total) jiffies since boot of each of ``cores``, from /proc/stat."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            head, *vals = line.split()
            if head.startswith("cpu") and head[3:].isdigit() and int(head[3:]) in cores:
                v = [int(x) for x in vals]
                idle = v[3] + (v[4] if len(v) > 4 else 0)
                out[int(head[3:])] = (sum(v[:8]) - idle, sum(v[:8]))
    return out


def busy_fraction(cores: list[int], seconds: float = 1.0) -> dict[int, float]:
    """How busy each core was over the next ``seconds`` (0..1)."""
    a = core_jiffies(cores)
    time.sleep(seconds)
    b = core_jiffies(cores)
    return {c: (b[c][0] - a[c][0]) / max(1, b[c][1] - a[c][1]) for c in a}
