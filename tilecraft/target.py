"""Compilation targets: ``Target("llvm -mcpu=znver3")``, ``Target("cuda")``.

A target is parsed once from a string: the kind (``llvm``, ``cuda`` or ``opencl``: OpenCL C
source only, no runtime) followed by ``-key=value``
options. ``with Target("llvm"):`` makes it the current target (``Target.current()``), which the
auto-tuner's dispatch uses to pick tuned configurations.

>>> t = Target("llvm -mcpu=skylake-avx512")
>>> t.kind, t.attrs["mcpu"]
('llvm', 'skylake-avx512')
"""
from __future__ import annotations

import threading
from .error import TVMError

_KINDS = ("llvm", "cuda", "opencl")
_local = threading.local()


class TargetError(ValueError, TVMError):
    pass


class TargetKind(str):
    """The target's kind, a string (``"llvm"``) that also answers ``.name`` as TVM's does."""

    @property
    def name(self) -> str:
        return str(self)


class Target:
    """A parsed target string. Compare targets with ``str(t)``; it is canonical (sorted options).
    ``host=`` is accepted for TVM compatibility (the host is always the LLVM CPU target)."""

    def __init__(self, target: "str | Target", host=None):
        if isinstance(target, Target):
            self.kind, self.attrs, self.keys = target.kind, dict(target.attrs), target.keys
            return
        if not isinstance(target, str) or not target.strip():
            raise TargetError(f"a target must be a non-empty string like 'llvm' or 'cuda', got {target!r}")
        parts = target.split()
        kind = parts[0]
        if kind == "c":
            kind = "llvm"
        if kind not in _KINDS:
            raise TargetError(f"unknown target kind {kind!r} in {target!r}: expected one of {', '.join(_KINDS)}")
        attrs: dict[str, str] = {}
        for p in parts[1:]:
            if not p.startswith("-"):
                raise TargetError(f"target option {p!r} in {target!r} must look like -key=value")
            key, _, value = p.lstrip("-").partition("=")
            attrs[key] = value if value else "1"
        self.kind = TargetKind(kind)
        self.attrs = attrs
        self.keys = {"llvm": ("cpu",), "cuda": ("cuda", "gpu"), "opencl": ("opencl", "gpu")}[kind]

    @property
    def mcpu(self) -> str | None:
        return self.attrs.get("mcpu")

    @property
    def arch(self) -> str | None:
        return self.attrs.get("arch")

    def __str__(self) -> str:
        opts = " ".join(f"-{k}={v}" for k, v in sorted(self.attrs.items()))
        return f"{self.kind} {opts}".strip()

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Target) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __enter__(self) -> "Target":
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _local.stack.pop()

    @staticmethod
    def current(allow_none: bool = True) -> "Target | None":
        stack = getattr(_local, "stack", None)
        if stack:
            return stack[-1]
        if allow_none:
            return None
        raise TargetError("no current target: use `with tilecraft.target.Target('llvm'):`")


def create(target: "str | Target") -> Target:
    return Target(target)


def cuda(model: str = "unknown", arch: str | None = None, options=None) -> Target:
    """TVM's ``tvm.target.cuda()``: the CUDA target (``arch="sm_90"`` sets ``-arch``).

    >>> with tvm.target.cuda():
    ...     s = topi.cuda.schedule_reduce(g)
    """
    return Target("cuda" + (f" -arch={arch}" if arch else "") + "".join(f" {o}" for o in (options or ())))
