"""TVM's ``tvm.contrib.utils``: a temporary directory removed when it is no longer used.

>>> temp = utils.tempdir()
>>> ll_path = temp.relpath("temp.ll")
"""
from __future__ import annotations

import os
import shutil
import weakref

from ..runtime.tempdirs import owned_temp_dir


class TempDirectory:
    """A folder under the system's temporary directory, removed with ``remove()`` or when the
    object is collected (or, after a kill, by the next process that makes one)."""

    def __init__(self, keep_for_debug: bool = False):
        self.temp_dir = owned_temp_dir("tilecraft-contrib-")
        self._finalizer = None if keep_for_debug else \
            weakref.finalize(self, shutil.rmtree, self.temp_dir, ignore_errors=True)

    def relpath(self, name: str) -> str:
        """The path of ``name`` in this folder."""
        return os.path.join(self.temp_dir, name)

    def listdir(self) -> list:
        return os.listdir(self.temp_dir)

    def remove(self) -> None:
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def tempdir(custom_path: str | None = None, keep_for_debug: bool = False) -> TempDirectory:
    """A new temporary directory (``custom_path`` is not supported: give None)."""
    if custom_path is not None:
        raise ValueError("tempdir: custom_path is not supported; use the returned folder")
    return TempDirectory(keep_for_debug)
