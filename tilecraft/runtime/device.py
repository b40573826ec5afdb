"""Devices: ``tilecraft.cpu(0)``, ``tilecraft.cuda(0)``, ``tilecraft.device("llvm", 0)``.

A :class:`Device` is a plain value (kind and index); it imports nothing heavy. ``device_type``
follows DLPack's numbering (1 = CPU, 2 = CUDA) as TVM does.

>>> dev = device("llvm", 0)
>>> dev, dev.device_type
(cpu(0), 1)
"""
from __future__ import annotations

_DEVICE_TYPES = {"cpu": 1, "cuda": 2}
_ALIASES = {"cpu": "cpu", "llvm": "cpu", "c": "cpu", "cuda": "cuda", "gpu": "cuda", "nvptx": "cuda"}


class Device:
    """Where an array lives and a function runs."""

    __slots__ = ("kind", "index")

    def __init__(self, kind: str, index: int = 0):
        if not isinstance(kind, str) or kind.lower() not in _ALIASES:
            raise ValueError(f"unknown device {kind!r}: expected one of 'cpu', 'llvm', 'cuda'")
        if not isinstance(index, int) or index < 0:
            raise ValueError(f"a device index must be a non-negative int, got {index!r}")
        self.kind = _ALIASES[kind.lower()]
        self.index = index

    @property
    def device_type(self) -> int:
        return _DEVICE_TYPES[self.kind]

    @property
    def device_id(self) -> int:
        return self.index

    @property
    def exist(self) -> bool:
        return self.kind == "cpu" or _cuda_exists()

    @property
    def compute_version(self) -> str | None:
        """A GPU's compute capability as TVM gives it (``"9.0"`` on an H100), or None without
        a GPU or pycuda (and for the CPU)."""
        if self.kind != "cuda":
            return None
        from .cuda_runtime import device_arch
        arch = device_arch(self.index)
        return None if arch is None else f"{arch[3:-1]}.{arch[-1]}"

    def sync(self) -> None:
        """Wait for queued work. CPU calls are synchronous, so this is a no-op there; on a GPU it
        synchronizes the device's context."""
        if self.kind == "cuda":
            from .cuda_runtime import synchronize
            synchronize(self.index)

    def __eq__(self, other) -> bool:
        return isinstance(other, Device) and other.kind == self.kind and other.index == self.index

    def __hash__(self) -> int:
        return hash((self.kind, self.index))

    def __repr__(self) -> str:
        return f"{self.kind}({self.index})"


def _cuda_exists() -> bool:
    import os
    return os.path.exists("/dev/nvidiactl")


def cpu(index: int = 0) -> Device:
    """The host CPU: ``tilecraft.cpu(0)``."""
    return Device("cpu", index)


def cuda(index: int = 0) -> Device:
    """An NVIDIA GPU: ``tilecraft.cuda(0)`` (a plain descriptor; nothing is initialised)."""
    return Device("cuda", index)


def device(kind: str, index: int = 0) -> Device:
    """A device by name: ``device("llvm", 0)`` and ``device("cpu", 0)`` are the CPU."""
    return Device(kind, index)
