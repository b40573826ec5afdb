"""TVM's module path ``autotvm.measure.executor``: the ``Executor`` interface (``submit(func,
*args, **kwargs)`` returning a ``concurrent.futures.Future``), for code that subclasses it.

tilecraft's builders and runners do not take an executor: they measure in their own worker
pool (``autotune/worker_pool.py``), so a runner's ``executor`` attribute is not consulted.

    >>> class Inline(Executor):
    ...     def submit(self, func, *args, **kwargs):
    ...         future = concurrent.futures.Future(); future.set_result(func(*args, **kwargs))
    ...         return future
    >>> Inline().submit(abs, -2).result()
    2
"""
from __future__ import annotations

import concurrent.futures


class Executor:
    """Runs a function asynchronously: ``submit`` returns a ``concurrent.futures.Future``."""

    def submit(self, func, *args, **kwargs) -> concurrent.futures.Future:
        raise NotImplementedError(f"{type(self).__name__}.submit")
