"""Features of configurations, for the cost model. Every feature vector of a task has the same
length, so a model never sees mismatched columns.

* ``knob``: the knob values themselves (split sizes as log2, orders, annotation codes).
* ``itervar``: from the lowered loop nest of the config — per loop (innermost first, a fixed
  number of them): log extent, annotation, and per buffer the touch count, reuse and stride of
  that loop (AutoTVM's itervar features).
* ``curve``: per buffer, the touched footprint as a function of loop depth, sampled at fixed
  points (AutoTVM's curve features).
"""
from __future__ import annotations

import os
from typing import Callable

import numpy as np

# Loop-nest features need each config instantiated and lowered (10-100 ms). When many are missing
# at once (each retraining ranks a few hundred new candidates), they are computed in worker
# processes, one per core: TILECRAFT_FEATURE_WORKERS sets how many (1: never).
PARALLEL_MIN_CONFIGS = 64
CHUNK_TIMEOUT = 600.0       # seconds for one worker's share; past it, the serial path takes over


def knob_tables(space) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """For each knob, the feature rows of its values; with the dims and mixed-radix multipliers."""
    from .space import ConfigEntity

    tables = []
    for name, knob in space.space_map.items():
        rows = [ConfigEntity(None, None, {name: e}).get_flatten_feature() for e in knob.entities]
        tables.append(np.stack(rows).astype(np.float32))
    dims = np.array(space.dims or [1], dtype=np.int64)
    mults = np.concatenate([[1], np.cumprod(dims)[:-1]]).astype(np.int64)
    return tables, dims, mults


def knob_extractor(space) -> Callable[[np.ndarray], np.ndarray]:
    """A vectorised ``indices -> knob features`` function for ``space``."""
    tables, dims, mults = knob_tables(space)

    def extract(indices: np.ndarray) -> np.ndarray:
        indices = np.asarray(indices, dtype=np.int64)
        if not tables:
            return np.zeros((len(indices), 1), np.float32)
        cols = [t[(indices // mults[k]) % dims[k]] for k, t in enumerate(tables)]
        return np.concatenate(cols, axis=1)

    return extract


class CachedExtractor:
    """``indices -> features`` through a per-index cache; rows that cannot be computed (the
    config does not instantiate or lower) are NaN."""

    def __init__(self, task, feature_type: str, length: int | None = None):
        self.task = task
        self.feature_type = feature_type
        self.cache: dict[int, np.ndarray | None] = {}
        self.length = length
        self._executor = None
        self._workers = _feature_workers()

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        missing = list(dict.fromkeys(int(i) for i in indices if int(i) not in self.cache))
        if len(missing) >= PARALLEL_MIN_CONFIGS and self._workers > 1:
            self._compute_parallel(missing)
            missing = [i for i in missing if i not in self.cache]
        if missing:
            configs = [self.task.config_space.get(i) for i in missing]
            for cfg, f in zip(configs, features_of_configs(self.task, configs, self.feature_type)):
                self.cache[cfg.index] = f
        if self.length is None:
            self.length = next((len(f) for f in self.cache.values() if f is not None), 1)
        out = np.full((len(indices), self.length), np.nan, np.float32)
        for r, i in enumerate(indices):
            f = self.cache[int(i)]
            if f is not None:
                out[r] = f
        return out


    def _compute_parallel(self, missing: list) -> None:
        """Fill the cache for ``missing`` in worker processes; what a worker cannot deliver is
        left to the serial path."""
        from .worker_pool import WorkerPool
        if self._executor is None:
            self._executor = WorkerPool(self._workers)
        step = max(8, -(-len(missing) // (4 * self._workers)))
        space = self.task.config_space
        chunks = [[space.get(i) for i in missing[k:k + step]] for k in range(0, len(missing), step)]
        try:
            outcomes = self._executor.map(_features_chunk, [(self.task, c, self.feature_type) for c in chunks],
                                          timeout=CHUNK_TIMEOUT)
        except Exception:                  # e.g. the task cannot be sent: compute in this process
            self._workers = 1
            return
        for o in outcomes:
            if o.status == "ok":
                for i, f in o.value:
                    self.cache[i] = f
            else:
                self._workers = 1          # a broken pool: the serial path from now on

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None


def _feature_workers() -> int:
    env = os.environ.get("TILECRAFT_FEATURE_WORKERS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"TILECRAFT_FEATURE_WORKERS must be an integer, got {env!r}") from None
    # the tuner retrains between batches, while the build workers wait: all cores are free
    return os.cpu_count() or 1


def _features_chunk(task, configs, feature_type):
    # (an unpickled task has no config space: the configs travel whole)
    return [(c.index, f) for c, f in zip(configs, features_of_configs(task, configs, feature_type))]


def make_extractor(task, feature_type: str):
    if feature_type == "knob":
        return knob_extractor(task.config_space)
    if feature_type in ("itervar", "curve"):
        return CachedExtractor(task, feature_type)
    raise ValueError(f"unknown feature_type {feature_type!r}: expected itervar, knob or curve")


def features_of_configs(task, configs, feature_type: str) -> list[np.ndarray | None]:
    """Feature vectors of ``configs`` of ``task`` (None where a config does not lower)."""
    from . import loop_features  # needs the compiler core's lowering

    out = []
    for cfg in configs:
        try:
            out.append(loop_features.extract(task, cfg, feature_type))
        except Exception:
            out.append(None)
    return out
